//! What watching costs: the daemon's own CPU time over wall time, and its peak memory, while it scrapes three
//! replicas, each serving the real 1.34 capture (`idle`: every second) or 100 MB (`large`: every 2 s). The replicas
//! are a child process (this program run again as the sender), so the figures are the daemon's alone.
//!
//! Run: `cargo bench --bench watch_cost` (both workloads, 30 s each), or `-- idle 60` for one workload and its length.
//! Linux only: the figures come from `/proc/self/stat` and `/proc/self/status`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use apf_monitor::config::Config;
use apf_monitor::targets::StaticTarget;
use apf_monitor::values::{parse_target_url, DurationValue, Interval};

mod common;

const SENDER: &str = "APF_MONITOR_BENCH_SENDER";

/// The child: three loopback servers of `/metrics`, their URLs on standard output, until killed.
fn sender(workload: &str) {
    let one = common::capture();
    let body = bytes::Bytes::from(match workload {
        "large" => common::hundred_mb(&one),
        _ => one,
    });
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("runtime: {e}"));
    rt.block_on(async move {
        for _ in 0..3 {
            println!("{}", common::sender(body.clone()).await);
        }
        std::future::pending::<()>().await;
    });
}

/// The process's user + system CPU time, every thread's (exited ones too), in seconds.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name; in USER_HZ ticks (100 on Linux).
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// The process's peak resident memory (VmHWM), in MiB.
fn peak_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn run(workload: &str, seconds: u64) {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    let mut child = Command::new(exe)
        .env(SENDER, workload)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("sender: {e}"));
    let stdout = child
        .stdout
        .take()
        .unwrap_or_else(|| panic!("sender stdout"));
    let urls: Vec<String> = BufReader::new(stdout)
        .lines()
        .take(3)
        .map(|l| l.unwrap_or_else(|e| panic!("sender: {e}")))
        .collect();
    let interval = if workload == "large" { 2 } else { 1 };
    let mut config = Config::default();
    config.listen = "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}"));
    config.scrape.interval = Interval(Duration::from_secs(interval));
    config.scrape.timeout = Interval(Duration::from_secs(interval));
    config.scrape.debug_dumps = false;
    config.scrape.objects_interval = DurationValue(Duration::ZERO);
    config.targets.static_targets = urls
        .iter()
        .enumerate()
        .map(|(i, u)| StaticTarget {
            name: Some(format!("replica-{i}")),
            ..StaticTarget::from_url(parse_target_url(u).unwrap_or_else(|e| panic!("{u}: {e}")))
        })
        .collect();
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("runtime: {e}"));
    let (cpu, wall, daemon) = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let loader: apf_monitor::daemon::Loader = std::sync::Arc::new(move || Ok(config.clone()));
        let daemon = apf_monitor::daemon::Daemon::start(loader, listener)
            .await
            .unwrap_or_else(|e| panic!("daemon: {e}"));
        // Past the first rounds (connections, the first window) before the count starts.
        tokio::time::sleep(Duration::from_secs(3 * interval)).await;
        let (cpu0, t0) = (cpu_seconds(), Instant::now());
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        (cpu_seconds() - cpu0, t0.elapsed().as_secs_f64(), daemon)
    });
    let status = daemon.status();
    let scraped = status
        .apiservers
        .iter()
        .filter(|a| a.scraped_at.is_some() && a.errors.is_empty())
        .count();
    println!(
        "{workload}: {:.2} % of one core ({cpu:.2} s of CPU in {wall:.1} s), peak {:.1} MiB; {scraped} of 3 \
         replicas read without error, every {interval} s",
        100.0 * cpu / wall,
        peak_mib()
    );
    rt.block_on(async {
        let _ = daemon.stop().await;
    });
    let _ = child.kill();
    let _ = child.wait();
}

fn main() {
    if let Ok(workload) = std::env::var(SENDER) {
        return sender(&workload);
    }
    // `cargo bench` passes `--bench`; a workload and a length may follow `--`.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let seconds = args
        .iter()
        .find_map(|a| a.parse::<u64>().ok())
        .unwrap_or(30);
    let chosen: Vec<&str> = ["idle", "large"]
        .into_iter()
        .filter(|w| {
            args.is_empty()
                || args.iter().any(|a| a == w)
                || args.iter().all(|a| a.parse::<u64>().is_ok())
        })
        .collect();
    for w in chosen {
        run(w, seconds);
    }
}
