//! What the top crate's benches share: the real capture, and replicas serving it from another process by
//! sendfile(2), so that neither the sender's CPU nor its scheduling is part of what a bench measures.
#![allow(dead_code)] // Each bench uses its part.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};

/// Set in the child: what it serves (`capture`, `100MB`, `soak`: the capture and churning dumps, or `prometheus`: a
/// store holding many clusters) and on how many ports (for `prometheus`: how many clusters).
const SENDER: &str = "APF_MONITOR_BENCH_SENDER";

/// The daemon's HTTP client for a sender's URL.
pub fn scrape_client(url: &str) -> apf_monitor::targets::ScrapeClient {
    let base = url.parse().unwrap_or_else(|e| panic!("{url}: {e}"));
    apf_monitor::targets::ScrapeClient::new(&kube::Config::new(base))
        .unwrap_or_else(|e| panic!("the client: {e}"))
}

/// A bare download: `/metrics` by the daemon's HTTP client (`accept`, as the scrape asks), its body dropped as it
/// arrives; the bytes read, or why the GET failed.
pub async fn download(
    client: &apf_monitor::targets::ScrapeClient,
    accept: Option<&'static str>,
) -> Result<usize, String> {
    use http_body_util::BodyExt;
    let mut request = http::Request::get("/metrics");
    if let Some(accept) = accept {
        request = request.header(http::header::ACCEPT, accept);
    }
    let request = request
        .body(http_body_util::Empty::new())
        .map_err(|e| e.to_string())?;
    let mut body = client
        .send(request)
        .await
        .map_err(|e| e.to_string())?
        .into_body();
    let mut n = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| e.to_string())?;
        n += frame.data_ref().map_or(0, |c| c.len());
    }
    Ok(n)
}

/// The real 1.34 capture (3.4 MB; tests/fixtures, sources in SOURCES.md there).
pub fn capture() -> Vec<u8> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/metrics-v1.34.txt.gz"
    );
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(file)
        .read_to_end(&mut out)
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    out
}

/// The capture repeated to about 100 MB: a very large cluster's scrape.
pub fn hundred_mb(one: &[u8]) -> Vec<u8> {
    one.repeat((100 << 20) / one.len() + 1)
}

/// A body by its name: `capture` (also the soak's `/metrics`) or `100MB`.
pub fn body(name: &str) -> Vec<u8> {
    match name {
        "100MB" => hundred_mb(&capture()),
        _ => capture(),
    }
}

/// Replicas in a child process (this bench run again), each serving one body at `/metrics`.
pub struct Senders {
    child: Child,
    pub urls: Vec<String>,
}

impl Drop for Senders {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `replicas` senders of the body named `body` in a child process; their base URLs.
pub fn spawn_senders(body: &str, replicas: usize) -> Senders {
    spawn_child(&format!("{body} {replicas}"), replicas)
}

/// Starts a fake Prometheus holding `clusters` clusters of [`FLEET_REPLICAS`] replicas in a child process; its URL.
pub fn spawn_prometheus(clusters: usize) -> Senders {
    spawn_child(&format!("prometheus {clusters}"), 1)
}

fn spawn_child(spec: &str, urls: usize) -> Senders {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    let mut child = Command::new(exe)
        .env(SENDER, spec)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("sender: {e}"));
    let stdout = child
        .stdout
        .take()
        .unwrap_or_else(|| panic!("sender stdout"));
    let urls = BufReader::new(stdout)
        .lines()
        .take(urls)
        .map(|l| l.unwrap_or_else(|e| panic!("sender: {e}")))
        .collect();
    Senders { child, urls }
}

/// In the child (its environment says so), serves until killed and never returns; else returns at once.
pub fn serve_if_sender() {
    let Ok(spec) = std::env::var(SENDER) else {
        return;
    };
    let (name, replicas) = spec.split_once(' ').unwrap_or((&spec, "1"));
    let replicas: usize = replicas.parse().unwrap_or(1);
    if name == "prometheus" {
        fake_prometheus(replicas);
    }
    let soak = name == "soak";
    let text = body(name);
    let bodies = std::sync::Arc::new(Bodies {
        protobuf: memfd(&protobuf_of(&text)),
        text: memfd(&text),
    });
    let mut threads = Vec::new();
    for _ in 0..replicas {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("local_addr: {e}"));
        println!("http://{addr}");
        let bodies = bodies.clone();
        threads.push(std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let bodies = bodies.clone();
                std::thread::spawn(move || serve_connection(stream, &bodies, soak));
            }
        }));
    }
    let _ = std::io::stdout().flush();
    for t in threads {
        let _ = t.join();
    }
    std::process::exit(0);
}

/// A replica's `/metrics` in both formats, as kube-apiserver answers by the scrape's `Accept` header.
struct Bodies {
    text: MemFile,
    protobuf: MemFile,
}

/// The protobuf body of a text one, as client_golang writes the same families (the simulator's encoder): the capture
/// repeated (the 100 MB body) is the capture's protobuf repeated as many times.
pub fn protobuf_of(text: &[u8]) -> Vec<u8> {
    let one = capture();
    let encode = |t: &[u8]| apf_sim::protobuf::from_text(t, Some(apf_sim::protobuf::CREATED));
    if text.len() > one.len() && text.starts_with(&one) && text.len() % one.len() == 0 {
        return encode(&one).repeat(text.len() / one.len());
    }
    encode(text)
}

/// The body in an anonymous in-memory file, with its length.
struct MemFile {
    fd: OwnedFd,
    len: usize,
}

fn memfd(body: &[u8]) -> MemFile {
    // SAFETY: the name is a NUL-terminated string; the descriptor returned is owned by nothing else.
    let fd = unsafe { libc::memfd_create(c"apf-monitor-bench".as_ptr(), 0) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` was just opened above and is not owned elsewhere.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut file = std::fs::File::from(fd);
    file.write_all(body)
        .unwrap_or_else(|e| panic!("memfd write: {e}"));
    MemFile {
        fd: file.into(),
        len: body.len(),
    }
}

/// HTTP/1.1 with keep-alive: each GET of `/metrics` answered by sendfile(2) with the body in the format the `Accept`
/// header negotiates (as client_golang does: `apf_sim::protobuf::negotiate`); with `dumps`, the three APF debug
/// dumps too (see [`soak_dump`]); anything else 404.
fn serve_connection(mut stream: TcpStream, bodies: &Bodies, dumps: bool) {
    // Without it the body's last segment waits for the client's delayed acknowledgement (Nagle).
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(s) => s,
        Err(_) => return,
    });
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        // The headers, up to the blank line; a GET has no body.
        let mut accept = String::new();
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header == "\r\n" || header == "\n" {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("accept") {
                    accept = value.trim().to_string();
                }
            }
        }
        let path = request_line.split(' ').nth(1).unwrap_or("");
        if dumps {
            if let Some(dump) = soak_dump(path) {
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
                    dump.len()
                );
                if stream.write_all(head.as_bytes()).is_err() || stream.write_all(&dump).is_err() {
                    return;
                }
                continue;
            }
        }
        // A query (`name[]`, the filter of client_golang 1.24+) is ignored, as the 1.34 apiserver ignores it.
        if path.split('?').next() != Some("/metrics") {
            let _ = stream.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
            continue;
        }
        let (file, content_type) = if apf_sim::protobuf::negotiate(&accept) {
            (&bodies.protobuf, apf_sim::protobuf::CONTENT_TYPE)
        } else {
            (&bodies.text, "text/plain; version=0.0.4")
        };
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
            file.len
        );
        if stream.write_all(head.as_bytes()).is_err() {
            return;
        }
        let mut offset: libc::off_t = 0;
        while (offset as usize) < file.len {
            let left = file.len - offset as usize;
            // SAFETY: both descriptors are open for the call; `offset` is a valid pointer the kernel advances.
            let sent = unsafe {
                libc::sendfile(stream.as_raw_fd(), file.fd.as_raw_fd(), &mut offset, left)
            };
            if sent <= 0 {
                return;
            }
        }
    }
}

/// Flows in each `dump_requests` of the soak, and how many of them are new at each read.
pub const SOAK_FLOWS: usize = 6000;
pub const SOAK_NEW_FLOWS: usize = 600;

/// The debug dumps of the soak: the real 1.28-era dumps of the Kubernetes website for the levels and queues, and a
/// `dump_requests` (with request details, as the daemon asks) of [`SOAK_FLOWS`] flows, one waiting request each, of
/// which [`SOAK_NEW_FLOWS`] are new at every read: service accounts of namespaces that come and go, the flows a
/// busy multi-tenant cluster churns through.
fn soak_dump(path: &str) -> Option<Vec<u8>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static READS: AtomicUsize = AtomicUsize::new(0);
    let fixture = |name: &str| {
        let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let dump = path.strip_prefix("/debug/api_priority_and_fairness/")?;
    if dump.starts_with("dump_priority_levels") {
        return Some(fixture("k8swebsite-2023-dump_priority_levels.txt"));
    }
    if dump.starts_with("dump_queues") {
        return Some(fixture("k8swebsite-2023-dump_queues.txt"));
    }
    if !dump.starts_with("dump_requests") {
        return None;
    }
    let first = READS.fetch_add(1, Ordering::Relaxed) * SOAK_NEW_FLOWS;
    let mut out = String::from(
        "PriorityLevelName, FlowSchemaName,   QueueIndex, RequestIndexInQueue, FlowDistingsher, ArriveTime, \
         InitialSeats, FinalSeats, AdditionalLatency, StartTime, UserName, Verb, APIPath, Namespace, Name, \
         APIVersion, Resource, SubResource\n",
    );
    for flow in first..first + SOAK_FLOWS {
        let level = ["workload-low", "workload-high", "global-default"][flow % 3];
        let user = format!("system:serviceaccount:tenant-{flow}:agent");
        out.push_str(&format!(
            "{level}, service-accounts, {}, 0, {user}, 2023-07-18T00:13:08.986534842Z, 1, 0, 0s, \
             0001-01-01T00:00:00Z, {user}, list, /api/v1/namespaces/tenant-{flow}/pods, tenant-{flow}, , v1, \
             pods,\n",
            flow % 64
        ));
    }
    Some(out.into_bytes())
}

/// Replicas per cluster in the fake Prometheus.
pub const FLEET_REPLICAS: usize = 3;

/// The labels naming a series' cluster and replica in the fake Prometheus.
pub const FLEET_LABELS: (&str, &str) = ("cluster", "instance");

/// A series of the fake Prometheus: name, labels, value.
type FakeSeries = (String, Vec<(String, String)>, f64);

/// A Prometheus API holding `clusters` x 3 replicas, each replica's series those of the real 1.34 capture (1,527 APF
/// series a replica: 458k for 100 clusters). It answers the two kinds of instant query a round asks, `sum by (...)`
/// of one family and `max by (...) (timestamp(...) or ...)`, as Prometheus would: the capture's samples of the
/// family summed by the labels asked for, once per replica. Answers are made once and kept; never returns.
fn fake_prometheus(clusters: usize) -> ! {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    let capture = capture();
    let mut samples: Vec<FakeSeries> = Vec::new();
    apf::parse::exposition::parse_all(
        &capture,
        apf::model::is_wanted_sample,
        &mut |s: &apf::parse::exposition::Sample<'_>| {
            let labels = s
                .labels
                .iter()
                .map(|l| (l.name.to_string(), l.value.to_string()))
                .collect();
            samples.push((s.name.to_string(), labels, s.value));
        },
    );
    let samples = Arc::new(samples);
    let answers: Arc<Mutex<BTreeMap<String, bytes::Bytes>>> = Arc::default();
    let kept = answers.clone();
    let sum_by = regex::Regex::new(r#"^sum by \(([^)]*)\) \(\{__name__=~"([^"]*)""#)
        .unwrap_or_else(|e| panic!("{e}"));
    let answer = move |query: String, time: String| -> bytes::Bytes {
        if let Some(kept) = answers.lock().ok().and_then(|a| a.get(&query).cloned()) {
            return kept;
        }
        let time: f64 = time.parse().unwrap_or(0.0);
        let (cluster_label, apiserver_label) = FLEET_LABELS;
        // (labels of a series but cluster and replica, value)
        let mut groups: BTreeMap<Vec<(String, String)>, f64> = BTreeMap::new();
        if let Some(c) = sum_by.captures(&query) {
            let by: Vec<&str> = c[1].split(", ").collect();
            let name = c[2].replace('\\', "");
            for (_, labels, v) in samples.iter().filter(|(n, _, _)| *n == name) {
                let key = labels
                    .iter()
                    .filter(|(l, _)| by.contains(&l.as_str()))
                    .cloned()
                    .collect();
                *groups.entry(key).or_default() += v;
            }
        } else {
            // The freshness query: each replica's newest sample, now.
            groups.insert(Vec::new(), time);
        }
        let mut result = Vec::new();
        for c in 0..clusters {
            for r in 0..FLEET_REPLICAS {
                for (labels, v) in &groups {
                    let mut metric: BTreeMap<&str, String> = labels
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.clone()))
                        .collect();
                    metric.insert(cluster_label, format!("cluster-{c:03}"));
                    metric.insert(
                        apiserver_label,
                        format!("10.{}.{}.{r}:6443", c / 256, c % 256),
                    );
                    result.push(
                        serde_json::json!({"metric": metric, "value": [time, v.to_string()]}),
                    );
                }
            }
        }
        let body = serde_json::json!({
            "status": "success",
            "data": {"resultType": "vector", "result": result},
        });
        let body = bytes::Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
        if let Ok(mut a) = answers.lock() {
            a.insert(query, body.clone());
        }
        body
    };
    // The answers given so far, by number: the bytes of a round, for a bare download of them.
    let nth = move |axum::extract::Path(i): axum::extract::Path<usize>| {
        let kept = kept.clone();
        async move {
            kept.lock()
                .ok()
                .and_then(|a| a.values().nth(i).cloned())
                .ok_or(axum::http::StatusCode::NOT_FOUND)
        }
    };
    let app = axum::Router::new()
        .route("/answers/{i}", axum::routing::get(nth))
        .route(
            "/api/v1/query",
            axum::routing::post(move |form: bytes::Bytes| {
                let answer = answer.clone();
                async move {
                    let form: BTreeMap<String, String> =
                        url::form_urlencoded::parse(&form).into_owned().collect();
                    let query = form.get("query").cloned().unwrap_or_default();
                    let time = form.get("time").cloned().unwrap_or_default();
                    (
                        [(axum::http::header::CONTENT_TYPE, "application/json")],
                        answer(query, time),
                    )
                }
            }),
        );
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("runtime: {e}"));
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("local_addr: {e}"));
        println!("http://{addr}");
        let _ = std::io::stdout().flush();
        let _ = axum::serve(listener, app).await;
    });
    std::process::exit(0);
}
