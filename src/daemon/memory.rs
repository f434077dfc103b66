//! How the daemon's memory goes back to the system: glibc keeps what was freed for later, which after a large round
//! is most of the process (docs/operations/performance.md). Not glibc: nothing to do.

/// The allocator's policy for a long-running daemon on a few threads; called first thing in the process (before the
/// async runtime's threads exist: an arena a thread already has stays), and again when a daemon starts, for embedders.
///
/// - One arena for every thread: glibc otherwise gives each thread that allocates at once as another its own heap, and
///   every heap keeps its own free memory. With one: the soak's peak 18.1-18.8 MiB against 18.5-19.4, the fleet's
///   47.8-49.1 against 51.7-54.7; the busy soak's CPU about 6 % more, the workers sharing one lock (`cargo bench
///   --bench watch_cost`, docs/operations/performance.md).
/// - Buffers of 256 KiB and more (a fleet's Prometheus answers, a large scrape's chunks) are mapped apart and given
///   back to the system when freed. glibc otherwise raises that threshold to the largest buffer freed so far and
///   carves later ones out of its heap, which then stays as large as the worst round left it.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets parameters of the allocator; it takes the allocator's own lock.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
    }
}

/// Gives the free pages of every heap back to the system, after a round that freed much (a fleet's, every interval:
/// for 300 replicas 62.5-66.5 MiB at peak against 66.9-71.1 without, for 0.2 % of a core; docs/operations/performance.md).
pub(super) fn give_back_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory of the allocator's heaps; it takes their locks.
    unsafe {
        libc::malloc_trim(0);
    }
}
