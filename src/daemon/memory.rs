//! The process's allocator: jemalloc, with one arena (docs/operations/performance.md).
//!
//! Why not glibc's: a fleet's round frees and makes millions of small blocks (each replica's snapshot, window point
//! and report), and glibc merged its free lists again at every larger request (`malloc_consolidate`): at 1,000
//! clusters a third of the daemon's CPU went to its malloc and free (perf). With jemalloc the same bench spends
//! 0.6x the CPU in less memory (`cargo bench --bench watch_cost -- fleet:1000 60`).
//!
//! Declared in the library, not the binary, so that the benches and tests run the allocator production runs.

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at its first allocation (before `main`), under the name its prefixed build reads.
///
/// One arena for every thread: jemalloc otherwise makes four per CPU it sees (a node's, not the pod's limit), and
/// each keeps its own free memory.
#[export_name = "_rjem_malloc_conf"]
static MALLOC_CONF: &[u8; 10] = b"narenas:1\0";
