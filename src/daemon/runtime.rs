//! The async runtime the daemon runs on.

/// One worker thread. The daemon's work is reading sockets and short computations on what they bring; a second
/// worker only took wake-ups and tasks moving between threads, and on two cores the core of the sender being read. With one against two (`cargo bench --bench round`, three runs alternately, each
/// scrape in a task of the runtime as the daemon runs it): a 100 MB text round 46.7-53.2 ms against 63.9-84.1, its
/// protobuf one 13.0-14.4 ms against 16.4-18.7; `cargo bench --bench watch_cost`, one run each: `large` 3.21 % of a
/// core against 3.47 %, `large-text` 10.0 % against 13.7 %, the soak 10.8 % against 13.6 % (17.6 MiB against 17.8),
/// `idle` 0.38 % against 0.39 %, the fleet's round 139 ms against 171 ms at the same 4.5 % of a core.
const WORKERS: usize = 1;

/// The runtime of the binary, and of the benchmarks that measure it.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .enable_all()
        .build()
}
