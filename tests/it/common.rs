//! Helpers shared by the integration tests.
#![allow(dead_code)]
pub mod external;

use std::io::Read;
use std::time::Duration;

/// A real `/metrics` capture from `tests/fixtures` (gzipped there; see tests/fixtures/SOURCES.md).
pub fn capture(version: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/metrics-v{version}.txt.gz",
        env!("CARGO_MANIFEST_DIR")
    );
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(file)
        .read_to_end(&mut out)
        .unwrap();
    out
}

pub fn fixture_text(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// The value of one sample in a Prometheus text body: `name{labels...}` with the labels in any order.
pub fn sample_value(body: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|line| {
            let rest = line.strip_prefix(name)?;
            if !(rest.starts_with('{') || rest.starts_with(' ')) {
                return None;
            }
            let (label_part, value) = match rest.strip_prefix('{') {
                Some(r) => r.rsplit_once("} ")?,
                None => ("", rest.trim()),
            };
            let all = labels
                .iter()
                .all(|(k, v)| label_part.contains(&format!("{k}=\"{v}\"")));
            all.then(|| value.trim().split(' ').next()?.parse().ok())
                .flatten()
        })
}

/// Polls `f` until it returns Some or `patience` runs out: surfaces are asserted with patience, not sleeps.
pub async fn eventually<T, F, Fut>(patience: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls `f` until it gives a value, or fails saying what was awaited and the logs.
pub async fn until<T, Fut: std::future::Future<Output = Option<T>>>(
    what: &str,
    secs: u64,
    logs: impl Fn() -> String,
    f: impl FnMut() -> Fut,
) -> T {
    eventually(Duration::from_secs(secs), f)
        .await
        .unwrap_or_else(|| panic!("timed out after {secs}s waiting for {what}\n{}", logs()))
}

/// A process of the binary run in `dir` (`simulate`, `serve`), its output in `dir/NAME.log`; killed when dropped.
pub struct Running {
    child: std::process::Child,
    log: std::path::PathBuf,
}

impl Running {
    pub fn start(args: &[&str], dir: &std::path::Path, name: &str) -> Running {
        use std::process::{Command, Stdio};
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
            .args(args)
            .current_dir(dir)
            // Killed when dropped, it cannot remove its temporary files: written in `dir`, they go with it.
            .env("TMPDIR", dir)
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .spawn()
            .unwrap();
        Running { child, log }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub async fn get_text(url: &str) -> Option<String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .ok()?;
    client.get(url).send().await.ok()?.text().await.ok()
}

/// A simulated apiserver of Kubernetes 1.`minor` under `scenario`, advanced `seconds` of simulated time and then
/// paused (both sides of a test see the same instant), served on a loopback port; returns it and its URL.
pub async fn paused_sim(
    minor: u32,
    scenario: apf_sim::Scenario,
    seconds: u64,
) -> (apf_sim::Simulator, String) {
    use apf_sim::{KubeVersion, SimOptions, Simulator};
    let sim = Simulator::try_new(SimOptions::new(KubeVersion::new(minor, 0), scenario)).unwrap();
    for _ in 0..seconds * 10 {
        sim.step(Duration::from_millis(100));
    }
    let url = serve_sim(&sim).await;
    (sim, url)
}

/// Serves `sim` on a loopback port; returns its URL.
pub async fn serve_sim(sim: &apf_sim::Simulator) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(apf_sim::serve(listener, sim.clone()));
    format!("http://{addr}")
}

/// A static target named `sim` (the `apiserver` label tests assert on).
pub fn sim_target(url: &str) -> apf_monitor::targets::StaticTarget {
    apf_monitor::targets::StaticTarget {
        name: Some("sim".into()),
        ..apf_monitor::targets::StaticTarget::from_url(
            apf_monitor::values::parse_target_url(url).unwrap(),
        )
    }
}

/// A daemon running in the test's process; shown as its base URL. Dropping it ends its tasks.
pub struct Monitor {
    pub daemon: apf_monitor::daemon::Daemon,
    pub url: String,
}

impl std::fmt::Display for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.url)
    }
}

/// Runs the daemon (scrape loops, alerting, HTTP) on a loopback port, through the entry point `serve` uses.
pub async fn start_monitor(config: &apf_monitor::config::Config) -> Monitor {
    start_monitor_with(config, None).await
}

/// [`start_monitor`] with the leadership given (the leader-election tests).
pub async fn start_monitor_with(
    config: &apf_monitor::config::Config,
    leadership: Option<apf_monitor::daemon::Leadership>,
) -> Monitor {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = config.clone();
    let loader: apf_monitor::daemon::Loader = std::sync::Arc::new(move || Ok(config.clone()));
    let daemon = apf_monitor::daemon::Daemon::start_with(loader, listener, leadership)
        .await
        .unwrap();
    Monitor {
        daemon,
        url: format!("http://{addr}"),
    }
}

/// A receiver of no kind yet: set the one the test needs.
pub fn receiver(name: &str) -> apf_monitor::notify::ReceiverConfig {
    apf_monitor::notify::ReceiverConfig {
        name: name.into(),
        slack: None,
        email: None,
        webhook: None,
        alertmanager: None,
        console: None,
        delivery: Default::default(),
    }
}

/// A kubeconfig in `dir` naming `server`, with a static token: apiserver access for tests that need one to exist.
pub fn kubeconfig(dir: &std::path::Path, server: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"{server}\"}}\n\
             users:\n- name: u\n  user: {{token: t}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\n\
             current-context: x\n"
        ),
    )
    .unwrap();
    path
}

/// An apiserver address on loopback that nothing answers at: a listener never accepted from. After a command that
/// must not contact the apiserver (`serve --check-config`), [`assert_untouched`] says whether anything connected.
pub fn untouched_apiserver() -> (std::net::TcpListener, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    (listener, url)
}

/// Fails if anything connected to the listener of [`untouched_apiserver`].
pub fn assert_untouched(listener: &std::net::TcpListener) {
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the apiserver was contacted: {other:?}"),
    }
}

/// A simulated cluster started with `options`, its kubeconfig written into a temporary directory (which lives as
/// long as the returned `TempDir`; tests put their other files there too).
pub async fn sim_cluster(
    options: apf_sim::ClusterOptions,
) -> (apf_sim::Cluster, tempfile::TempDir, std::path::PathBuf) {
    let cluster = apf_sim::Cluster::start(options).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    cluster.kubeconfig(&kubeconfig).unwrap();
    (cluster, dir, kubeconfig)
}

/// The holder of apf-monitor's Lease in the simulated cluster whose API is at `api`.
pub async fn lease_holder(api: &str) -> Option<String> {
    let text = get_text(&format!(
        "{api}/apis/coordination.k8s.io/v1/namespaces/default/leases/apf-monitor-notifier"
    ))
    .await?;
    let lease: serde_json::Value = serde_json::from_str(&text).ok()?;
    lease["spec"]["holderIdentity"].as_str().map(str::to_string)
}

/// SIGTERM to a process of the binary, as Kubernetes stops a pod; its exit status once it has stopped.
pub async fn terminate(mut child: std::process::Child) -> Option<i32> {
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    tokio::task::spawn_blocking(move || child.wait().ok()?.code())
        .await
        .ok()
        .flatten()
}

/// A gzipped fixture of `tests/fixtures/` written out plain into `dir`, for commands that read files: its path.
pub fn fixture_file(dir: &tempfile::TempDir, name: &str) -> String {
    let mut text = String::new();
    flate2::read::GzDecoder::new(
        std::fs::File::open(format!(
            "{}/tests/fixtures/{name}.gz",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap(),
    )
    .read_to_string(&mut text)
    .unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// A simulated replica of 1.`minor` under `scenario`, served on loopback by `rt` (for tests that run the binary
/// synchronously), with its clock running when `clock`; its base URL.
pub fn sim_on(
    rt: &tokio::runtime::Runtime,
    minor: u32,
    scenario: apf_sim::ScenarioSource,
    clock: bool,
) -> String {
    let options = apf_sim::SimOptions::new(
        apf_sim::KubeVersion::new(minor, 0),
        apf_sim::Scenario::load(&scenario).unwrap(),
    );
    sim_with_on(rt, options, clock)
}

/// [`sim_on`] with the simulator's options given.
pub fn sim_with_on(
    rt: &tokio::runtime::Runtime,
    options: apf_sim::SimOptions,
    clock: bool,
) -> String {
    let sim = apf_sim::Simulator::try_new(options).unwrap();
    if clock {
        let _guard = rt.enter();
        // The clock task lives as long as the runtime.
        drop(sim.spawn_clock(std::time::Duration::from_millis(100)));
    }
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(apf_sim::serve(listener, sim));
    format!("http://{addr}")
}

/// A daemon config that scrapes `sim_url` every second over a 10 s window: the tests' fast loop.
pub fn fast_config(sim_url: &str) -> apf_monitor::config::Config {
    use apf_monitor::config::Config;
    use apf_monitor::values::Interval;
    let mut config = Config::default();
    config.scrape.interval = Interval(std::time::Duration::from_secs(1));
    config.scrape.timeout = Interval(std::time::Duration::from_secs(1));
    config.analysis.window = Interval(std::time::Duration::from_secs(10));
    config.targets.static_targets = vec![sim_target(sim_url)];
    config
}

/// The write end of a pipe whose reader has already gone (`| head` once head has exited): give it to a child as
/// its stdout (and stderr: `2>&1`) with `Stdio::from(fd.try_clone())`.
pub fn closed_pipe() -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // O_CLOEXEC: no other test's child inherits the read end and keeps the pipe open.
    // SAFETY: pipe2 fills the two descriptors of the array it is given.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors were just made and are owned here.
    let (read, write) = unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    };
    drop(read);
    write
}

/// Ended as a closed pipe ends `cat`: by SIGPIPE, without a panic's message.
pub fn assert_ended_by_sigpipe(what: &str, status: std::process::ExitStatus, stderr: &[u8]) {
    use std::os::unix::process::ExitStatusExt;
    let err = String::from_utf8_lossy(stderr);
    assert_eq!(
        status.signal(),
        Some(libc::SIGPIPE),
        "{what}: {status}: {err}"
    );
    assert!(!err.contains("panicked"), "{what}: {err}");
}

/// What `check --output manifests --kubeconfig KUBECONFIG` prints: the fix apf-monitor proposes for the cluster.
pub async fn proposed_manifests(kubeconfig: &std::path::Path) -> std::process::Output {
    let kubeconfig = kubeconfig.to_path_buf();
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
            .args(["check", "--output", "manifests", "--kubeconfig"])
            .arg(&kubeconfig)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

/// The demo's closing act as a scenario: the agent floods workload-low with 10-seat LISTs beside cert-manager's
/// small GETs, from the start.
pub const AGENT_FLOOD: &str = "duration: 900s\nflows:\n\
     - {name: agents, flow_schema: service-accounts, user: \"system:serviceaccount:monitoring:agent\", verb: list, \
        resource: pods, seats: 10, duration: 2s, rate: [{at: 0s, rps: 90}]}\n\
     - {name: cert-manager, flow_schema: service-accounts, user: \"system:serviceaccount:cert-manager:cert-manager\", \
        verb: get, resource: secrets, namespace: cert-manager, duration: 50ms, rate: [{at: 0s, rps: 10}]}\n";

/// The child's standard output, line by line as it comes, read by a thread of its own (a test waits on it with a
/// deadline: `recv_timeout`).
pub fn stdout_lines(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    rx
}

/// What `apf-monitor ARGS` prints, once it has exited 0 (its standard error in the failure otherwise).
pub fn stdout_of(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The enforced limit of `level` on a fresh simulated replica of Kubernetes 1.`minor` (ServerCL 600, no load).
pub fn sim_limit(minor: u32, level: &str) -> f64 {
    use apf_sim::{KubeVersion, Scenario, SimOptions, Simulator};
    let probe = Simulator::try_new(SimOptions::new(
        KubeVersion::new(minor, 0),
        Scenario::from_yaml("duration: 60s\nflows: []\n").unwrap(),
    ))
    .unwrap();
    let truth = probe.truth();
    let l = truth.iter().find(|l| l.priority_level == level);
    f64::from(l.map_or(0, |l| l.current_limit_seats))
}

/// Every alert of every notification a webhook receiver got, with when, in `sim`'s seconds.
pub type Notified = std::sync::Arc<std::sync::Mutex<Vec<(f64, serde_json::Value)>>>;

/// A webhook receiver on loopback that notes every alert it is sent against `sim`'s clock; its URL.
pub async fn sim_clocked_hook(sim: &apf_sim::Simulator, notified: Notified) -> String {
    use axum::routing::post;
    let sim = sim.clone();
    let app = axum::Router::new().route(
        "/hook",
        post(move |body: String| {
            let (sim, notified) = (sim.clone(), notified.clone());
            async move {
                let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                let at = sim.elapsed().as_secs_f64();
                for a in v["alerts"].as_array().into_iter().flatten() {
                    notified.lock().unwrap().push((at, a.clone()));
                }
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/hook")
}

/// The level named `level` of the first replica of a `/api/v1/status` answer (null when it has none).
pub fn first_level(status: &serde_json::Value, level: &str) -> serde_json::Value {
    status["apiservers"][0]["levels"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|l| l["priority_level"] == level)
        .cloned()
        .unwrap_or_default()
}

/// A web server on loopback that is neither an apiserver nor a Prometheus: every request, whatever its method and
/// path, gets an HTML page (`<p>Nothing matches the given URI</p>`, as `python3 -m http.server`'s 404 has it) with
/// this status. Its URL; it serves until the test process ends.
pub fn html_server(status: u16) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(&stream);
                let mut length = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let line = line.trim_end();
                    if line.is_empty() {
                        break;
                    }
                    if let Some((name, value)) = line.split_once(':') {
                        if name.eq_ignore_ascii_case("content-length") {
                            length = value.trim().parse().unwrap_or(0);
                        }
                    }
                }
                let mut body = vec![0; length];
                let _ = std::io::Read::read_exact(&mut reader, &mut body);
                let page = "<!DOCTYPE HTML>\n<html lang=\"en\">\n<head><title>Error response</title></head>\n\
                            <body><h1>Error response</h1><p>Nothing matches the given URI</p></body>\n</html>\n";
                let _ = write!(
                    &stream,
                    "HTTP/1.1 {status} Whatever\r\nContent-Type: text/html;charset=utf-8\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{page}",
                    page.len()
                );
            });
        }
    });
    url
}
