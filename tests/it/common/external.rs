//! Real Prometheus and Alertmanager (Debian packages `prometheus`, `prometheus-alertmanager`) started on loopback
//! ports with temporary storage, and killed when the guard drops.
#![allow(dead_code)]
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Process {
    child: Child,
    pub url: String,
    pub dir: tempfile::TempDir,
    log: PathBuf,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Process {
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The binary, or a failure that says which package to install (never a silent skip).
pub fn binary(name: &str, package: &str) -> PathBuf {
    // PATH first: a kubectl from Kubernetes' own packages or a download is as good as Debian's.
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path)
        .chain(["/usr/bin", "/usr/local/bin", "/bin"].map(PathBuf::from));
    for dir in dirs {
        let p = dir.join(name);
        if p.is_file() {
            return p;
        }
    }
    panic!("{name} not found: this end-to-end test needs it (Debian package {package}); tests/install-deps.sh installs what is missing");
}

fn spawn(bin: PathBuf, args: Vec<String>, dir: tempfile::TempDir, url: String) -> Process {
    let log = dir.path().join("log.txt");
    let out = std::fs::File::create(&log).unwrap();
    let child = Command::new(bin)
        .args(args)
        .stdout(Stdio::from(out.try_clone().unwrap()))
        .stderr(Stdio::from(out))
        .spawn()
        .unwrap();
    Process {
        child,
        url,
        dir,
        log,
    }
}

/// Waits until `GET url` answers 200.
pub async fn wait_ready(p: &Process, path: &str) {
    let client = reqwest::Client::new();
    for _ in 0..300 {
        if let Ok(r) = client.get(format!("{}{path}", p.url)).send().await {
            if r.status().is_success() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{} did not become ready; its log:\n{}", p.url, p.log());
}

pub async fn alertmanager() -> Process {
    let bin = binary("prometheus-alertmanager", "prometheus-alertmanager");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = dir.path().join("alertmanager.yml");
    // A receiver that goes nowhere: the test reads Alertmanager's own API.
    std::fs::write(
        &config,
        "route:\n  receiver: blackhole\n  group_wait: 1s\nreceivers:\n  - name: blackhole\n",
    )
    .unwrap();
    let storage = dir.path().join("data");
    let args = vec![
        format!("--config.file={}", config.display()),
        format!("--storage.path={}", storage.display()),
        format!("--web.listen-address=127.0.0.1:{port}"),
        // No gossip: a single replica on loopback.
        "--cluster.listen-address=".to_string(),
    ];
    let p = spawn(bin, args, dir, format!("http://127.0.0.1:{port}"));
    wait_ready(&p, "/-/ready").await;
    p
}

/// Prometheus scraping `targets` (job name -> `host:port`) every second, with `rules` (a rule file's YAML).
pub async fn prometheus(targets: &[(&str, String)], rules: &str) -> Process {
    let mut scrape_configs = String::new();
    for (job, target) in targets {
        scrape_configs.push_str(&format!(
            "  - job_name: {job}\n    static_configs:\n      - targets: ['{target}']\n"
        ));
    }
    prometheus_with(&scrape_configs, rules).await
}

/// Prometheus with `scrape_configs` (the YAML list's items, indented two spaces) scraped every second.
pub async fn prometheus_with(scrape_configs: &str, rules: &str) -> Process {
    let dir = tempfile::tempdir().unwrap();
    let rules_file = dir.path().join("rules.yml");
    std::fs::write(&rules_file, rules).unwrap();
    let mut config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n",
        rules_file.display()
    );
    config.push_str(scrape_configs);
    let config_file = dir.path().join("prometheus.yml");
    std::fs::write(&config_file, config).unwrap();
    prometheus_in(dir, &config_file).await
}

/// Prometheus started as a user starts it, `prometheus --config.file FILE`, with its storage in a temporary
/// directory and its API on a free loopback port.
pub async fn prometheus_file(config_file: &std::path::Path) -> Process {
    prometheus_in(tempfile::tempdir().unwrap(), config_file).await
}

/// Prometheus with `config_file`, its storage under `dir`, once it answers ready.
async fn prometheus_in(dir: tempfile::TempDir, config_file: &std::path::Path) -> Process {
    let bin = binary("prometheus", "prometheus");
    let port = free_port();
    let args = vec![
        format!("--config.file={}", config_file.display()),
        format!("--storage.tsdb.path={}", dir.path().join("data").display()),
        format!("--web.listen-address=127.0.0.1:{port}"),
    ];
    let p = spawn(bin, args, dir, format!("http://127.0.0.1:{port}"));
    wait_ready(&p, "/-/ready").await;
    p
}

/// Prometheus holding a past made with `promtool tsdb create-blocks-from openmetrics` (the Debian package's
/// backfill) from `openmetrics` (samples with timestamps, `# EOF` last), scraping nothing.
pub async fn prometheus_history(openmetrics: &str) -> Process {
    let bin = binary("prometheus", "prometheus");
    let promtool = binary("promtool", "prometheus");
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("history.om");
    std::fs::write(&input, openmetrics).unwrap();
    let data = dir.path().join("data");
    let out = Command::new(promtool)
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&input)
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let port = free_port();
    let config_file = dir.path().join("prometheus.yml");
    std::fs::write(
        &config_file,
        "global:\n  scrape_interval: 15s\nscrape_configs: []\n",
    )
    .unwrap();
    let args = vec![
        format!("--config.file={}", config_file.display()),
        format!("--storage.tsdb.path={}", data.display()),
        format!("--web.listen-address=127.0.0.1:{port}"),
    ];
    let p = spawn(bin, args, dir, format!("http://127.0.0.1:{port}"));
    wait_ready(&p, "/-/ready").await;
    p
}

/// An instant query's result vector.
pub async fn prom_query(p: &Process, query: &str) -> Vec<serde_json::Value> {
    let url = format!("{}/api/v1/query", p.url);
    let Ok(r) = reqwest::Client::new()
        .get(url)
        .query(&[("query", query)])
        .send()
        .await
    else {
        return vec![];
    };
    let v: serde_json::Value =
        serde_json::from_str(&r.text().await.unwrap_or_default()).unwrap_or_default();
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

/// The Python that has aiosmtpd: Debian's (`/usr/bin/python3`, package python3-aiosmtpd) first.
pub fn python_with_aiosmtpd() -> PathBuf {
    for py in ["/usr/bin/python3", "python3"] {
        let ok = Command::new(py)
            .args(["-c", "import aiosmtpd"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if ok {
            return PathBuf::from(py);
        }
    }
    panic!("no Python with aiosmtpd: this end-to-end test needs the Debian package python3-aiosmtpd (apt-get install -y python3-aiosmtpd); .ci/run installs it");
}

/// A real SMTP server (aiosmtpd) on a loopback port, delivering into a Maildir under `dir`.
pub async fn smtp_server() -> (Process, u16) {
    let py = python_with_aiosmtpd();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let maildir = dir.path().join("Maildir");
    let args = vec![
        "-m".to_string(),
        "aiosmtpd".to_string(),
        "-n".to_string(),
        "-l".to_string(),
        format!("127.0.0.1:{port}"),
        "-c".to_string(),
        "aiosmtpd.handlers.Mailbox".to_string(),
        maildir.display().to_string(),
    ];
    let p = spawn(py, args, dir, format!("smtp://127.0.0.1:{port}"));
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return (p, port);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("aiosmtpd did not start; its log:\n{}", p.log());
}

/// Every message delivered to the aiosmtpd Maildir so far.
pub fn maildir_messages(p: &Process) -> Vec<String> {
    let mut out = Vec::new();
    for sub in ["new", "cur"] {
        if let Ok(entries) = std::fs::read_dir(p.dir.path().join("Maildir").join(sub)) {
            for e in entries.flatten() {
                if let Ok(text) = std::fs::read_to_string(e.path()) {
                    out.push(text);
                }
            }
        }
    }
    out
}

/// Headless Chromium (Debian package `chromium`) on `url`: `--dump-dom` gives the DOM after load, `--screenshot=F`
/// a PNG. The flags keep it from reaching out to the network at start (closed here, and not the test's business);
/// a fresh profile per run; killed after 90 s so a stuck browser fails the test instead of hanging it.
pub async fn chromium(url: &str, extra: &[&str]) -> std::process::Output {
    let bin = binary("chromium", "chromium");
    let profile = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(bin);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(90), command.output())
        .await
        .expect("chromium did not finish in 90 s")
        .expect("chromium could not be started")
}
