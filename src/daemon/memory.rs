//! The process's allocator: jemalloc, with one arena and no thread caches (docs/operations/performance.md).
//!
//! Why not glibc's: a fleet's round frees and makes millions of small blocks (each replica's snapshot, window point
//! and report), and glibc merged its free lists again at every larger request (`malloc_consolidate`): at 1,000
//! clusters a third of the daemon's CPU went to its malloc and free (perf).
//!
//! Declared in the library, not the binary, so that the benches and tests run the allocator production runs. Built
//! without the `jemalloc` feature (`--no-default-features`), the process uses glibc's, which heaptrack can watch.

#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at its first allocation (before `main`), under the name its prefixed build reads.
///
/// - One arena for every thread: jemalloc otherwise makes four per CPU it sees (a node's, not the pod's limit), and
///   each keeps its own free memory.
/// - No thread caches: the blocks one round frees on one thread and the next round asks for on another stayed in
///   the caches, 34 MiB of a 1,000-cluster fleet's peak (234.5 against 268.3 MiB), for about a point of a core
///   (`cargo bench --bench watch_cost -- fleet:1000 90`, run alternately).
#[cfg(feature = "jemalloc")]
#[export_name = "_rjem_malloc_conf"]
static MALLOC_CONF: &[u8; 23] = b"narenas:1,tcache:false\0";
