//! What watching costs: the daemon's own CPU time over wall time, and its peak memory, while it scrapes three
//! replicas, each serving the real 1.34 capture (`idle`: every second) or 100 MB (`large`: every 2 s). The replicas
//! are a child process (this program run again as the sender, by sendfile(2)), so the figures are the daemon's alone.
//!
//! `soak`: two replicas scraped every 250 ms, each serving the capture and `dump_requests` of 6000 flows of which 600
//! are new at every read, over the default one-minute window (90 s at least, so that the window fills).
//!
//! `fleet`: the daemon reading a Prometheus that holds 100 clusters of 3 replicas (458k APF series; a fake in the
//! child process, answering as Prometheus would), every 5 s (the default interval). The rounds read the object
//! counts once a minute (a count of 45 s or more holds such a round); after the count, one round that reads them is
//! timed alone.
//!
//! `idle` and `large` are followed by their baseline: the same downloads on the same schedule by the daemon's HTTP
//! client alone, and the daemon's CPU as a ratio to theirs.
//!
//! The replicas answer `/metrics` in the format the scrape's `Accept` header negotiates, as kube-apiserver does: the
//! daemon asks for protobuf first (its default, `scrape.protobuf`), so `idle`, `large` and `soak` read the same
//! families as protobuf (the capture: 0.58 MB); `idle-text`, `large-text` and `soak-text` ask for text only.
//!
//! Run: `cargo bench --bench watch_cost` (every workload, 30 s each), or `-- idle 60` for one workload and its length;
//! `fleet:N` reads N clusters instead of 100.
//! Linux only: CPU time from CLOCK_PROCESS_CPUTIME_ID, peak memory from `/proc/self/status`.

use std::time::{Duration, Instant};

use apf_monitor::config::Config;
use apf_monitor::scrape::prometheus::{read_round, ObjectCounts, PrometheusSource};
use apf_monitor::targets::{PrometheusTarget, StaticTarget};
use apf_monitor::values::{parse_target_url, DurationValue, Interval};

mod common;

/// The process's user + system CPU time, every thread's (exited ones too), in seconds: the scheduler's own count in
/// nanoseconds (CLOCK_PROCESS_CPUTIME_ID), not utime + stime from `/proc/self/stat`, whose 10 ms ticks are a tenth
/// of an idle run's total.
fn cpu_seconds() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) } == 0;
    assert!(ok, "clock_gettime: {}", std::io::Error::last_os_error());
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
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

/// Forgets the peak so far (Linux's clear_refs 5), so each workload's peak is its own.
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The daemon's config for a workload, its round interval in seconds, how many replicas it should see, and the
/// child process serving them.
fn workload_config(workload: &str) -> (Config, u64, usize, common::Senders) {
    let mut config = Config::default();
    config.listen = "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}"));
    let url = |u: &str| parse_target_url(u).unwrap_or_else(|e| panic!("{u}: {e}"));
    if let Some(size) = workload.strip_prefix("fleet") {
        // `fleet:N` for N clusters; 100 by default.
        let clusters = size
            .strip_prefix(':')
            .and_then(|n| n.parse().ok())
            .unwrap_or(100);
        let senders = common::spawn_prometheus(clusters);
        let (cluster_label, apiserver_label) = common::FLEET_LABELS;
        config.targets.prometheus = vec![PrometheusTarget {
            cluster_label: cluster_label.into(),
            apiserver_label: apiserver_label.into(),
            ..PrometheusTarget::from_url(url(&senders.urls[0]))
        }];
        let interval = config.scrape.interval.0.as_secs();
        return (config, interval, clusters * common::FLEET_REPLICAS, senders);
    }
    // `-text` asks `/metrics` for the text format only; else the daemon's default, protobuf first.
    let (workload, text) = match workload.strip_suffix("-text") {
        Some(w) => (w, true),
        None => (workload, false),
    };
    config.scrape.protobuf = !text;
    // What each replica serves, how many there are, every how many milliseconds, and whether the dumps are read.
    let (body, replicas, every_ms, dumps) = match workload {
        "large" => ("100MB", 3, 2000, false),
        "soak" => ("soak", 2, 250, true),
        _ => ("capture", 3, 1000, false),
    };
    let senders = common::spawn_senders(body, replicas);
    config.scrape.interval = Interval(Duration::from_millis(every_ms));
    config.scrape.timeout = Interval(Duration::from_millis(every_ms));
    config.scrape.debug_dumps = dumps;
    config.scrape.objects_interval = DurationValue(Duration::ZERO);
    config.targets.static_targets = senders
        .urls
        .iter()
        .enumerate()
        .map(|(i, u)| StaticTarget {
            name: Some(format!("replica-{i}")),
            ..StaticTarget::from_url(url(u))
        })
        .collect();
    (config, every_ms.div_ceil(1000), replicas, senders)
}

/// The daemon's last round of each source or replica, in seconds, from its own `/metrics`.
async fn last_rounds(addr: std::net::SocketAddr) -> Vec<f64> {
    let text = match reqwest::get(format!("http://{addr}/metrics")).await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    text.lines()
        .filter(|l| {
            l.starts_with("apf_monitor_scrape_duration_seconds{")
                && (l.contains("endpoint=\"metrics\"") || l.contains("endpoint=\"prometheus\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect()
}

fn run(workload: &str, seconds: u64) {
    reset_peak();
    let (config, interval, replicas, senders) = workload_config(workload);
    let fleet_source = config.targets.prometheus.first().cloned();
    let rt = apf_monitor::daemon::runtime().unwrap_or_else(|e| panic!("runtime: {e}"));
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
    let peak = peak_mib();
    let status = daemon.status();
    let scraped = status
        .apiservers
        .iter()
        .filter(|a| a.scraped_at.is_some() && a.errors.is_empty())
        .count();
    let rounds = rt.block_on(last_rounds(daemon.local_addr()));
    let slowest = rounds.iter().copied().fold(0.0, f64::max);
    println!(
        "{workload}: {:.2} % of one core ({cpu:.3} s of CPU in {wall:.1} s), peak {peak:.1} MiB; {scraped} of \
         {replicas} replicas read without error; last round {:.0} ms (slowest source)",
        100.0 * cpu / wall,
        slowest * 1000.0
    );
    // What a Prometheus scraping this apf-monitor takes in: its own /metrics, after the count.
    if workload.starts_with("fleet") {
        let text = rt.block_on(async {
            match reqwest::get(format!("http://{}/metrics", daemon.local_addr())).await {
                Ok(r) => r.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            }
        });
        let series = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .count();
        println!(
            "{workload}: apf-monitor's own /metrics: {series} series ({:.0} per replica), {:.1} MiB a scrape",
            series as f64 / replicas.max(1) as f64,
            text.len() as f64 / (1024.0 * 1024.0)
        );
    }
    rt.block_on(async {
        let _ = daemon.stop().await;
    });
    // The rounds counted above read the object counts once a minute and carry them on between: one round that reads
    // them too, timed alone, after the daemon stopped.
    if let Some(target) = fleet_source {
        let source = PrometheusSource::build(&target, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("source: {e}"));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        let started = Instant::now();
        let read = rt.block_on(read_round(
            &source,
            now,
            60.0,
            |_| false,
            &mut ObjectCounts::default(),
        ));
        println!(
            "{workload}: a round that reads the object counts too (once a minute): {:.0} ms ({} replicas)",
            started.elapsed().as_secs_f64() * 1000.0,
            read.map_or(0, |r| r.replicas.len())
        );
    }
    drop(senders);
    drop(rt);
    // The same downloads without the daemon, right after: the floor the network and the HTTP client set.
    if matches!(workload, "idle" | "large" | "idle-text" | "large-text") {
        let alone = downloads_alone(workload, seconds);
        println!(
            "{workload}: the downloads alone {alone:.2} % of one core; the daemon {:.2}x that",
            100.0 * cpu / wall / alone
        );
    }
}

/// The baseline of `idle` and `large`: the same GETs of the same replicas on the same schedule, each body read by
/// the daemon's HTTP client and dropped: what the downloads cost alone, in % of one core.
fn downloads_alone(workload: &str, seconds: u64) -> f64 {
    let (config, _, _, senders) = workload_config(workload);
    let every = config.scrape.interval.0;
    // The bytes the daemon read: asked for in the same format.
    let accept = config
        .scrape
        .protobuf
        .then_some(apf::parse::protobuf::ACCEPT);
    let rt = apf_monitor::daemon::runtime().unwrap_or_else(|e| panic!("runtime: {e}"));
    let (cpu, wall) = rt.block_on(async {
        for url in &senders.urls {
            let client = common::scrape_client(url);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                loop {
                    tick.tick().await;
                    std::hint::black_box(common::download(&client, accept).await.ok());
                }
            });
        }
        tokio::time::sleep(3 * every).await;
        let (cpu0, t0) = (cpu_seconds(), Instant::now());
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        (cpu_seconds() - cpu0, t0.elapsed().as_secs_f64())
    });
    rt.shutdown_background();
    drop(senders);
    100.0 * cpu / wall
}

fn main() {
    // Run again as the sender, this program serves and never returns.
    common::serve_if_sender();
    // As the binary does before its runtime starts.
    // `cargo bench` passes `--bench`; a workload and a length may follow `--`.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let seconds = args
        .iter()
        .find_map(|a| a.parse::<u64>().ok())
        .unwrap_or(30);
    let named: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| a.parse::<u64>().is_err())
        .collect();
    let chosen: Vec<&str> = if named.is_empty() {
        vec!["idle", "large", "fleet", "soak"]
    } else {
        named
    };
    for w in &chosen {
        let base = w.strip_suffix("-text").unwrap_or(w);
        let known = ["idle", "large", "fleet", "soak"].contains(&base)
            || w.strip_prefix("fleet:")
                .is_some_and(|n| n.parse::<usize>().is_ok());
        if !known {
            eprintln!(
                "unknown workload {w:?}: idle, large, fleet, fleet:N (clusters) or soak; idle-text, large-text, \
                 soak-text ask /metrics for text only"
            );
            std::process::exit(2);
        }
    }
    for w in chosen {
        // The soak is about what a full window holds: it runs past the one-minute window.
        let seconds = if w.starts_with("soak") {
            seconds.max(90)
        } else {
            seconds
        };
        run(w, seconds);
    }
}
