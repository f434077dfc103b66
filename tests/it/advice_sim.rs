//! Rate advice proven in the simulator (issue 39; on kube-apiserver's queueset since issue 51):
//! `config/scenarios/step.yaml` run by `apf-monitor simulate`, watched by `apf-monitor serve` (which also follows the
//! simulator's audit log, as it would kube-apiserver's), three times, then once more in virtual time.
//! 1. As shipped: the Crossplane provider steps up to about twice its share of the busy workload-low. The daemon's
//!    `clients` names it above its share, with the sustainable rate S and the advised rate Q; its requests wait
//!    longer than they execute, and the simulator rejects them (429 in its audit log).
//! 2. The same scenario with the step going to Q: nothing of the provider's is rejected, and once the level has
//!    borrowed for its new demand its requests wait under a tenth of their execution (43 ms for 1 s in one run). Not
//!    zero: in a full level every request waits for a seat to free, and fair queuing serves the busy queues by their
//!    virtual finish, so a client within its share waits for its queues' turns; what it never does is fill them.
//! 3. The step going to 2 x S: its requests wait and are rejected again.
//! 4. The provider as client-go runs it with the advice, a closed loop of threads behind QPS Q and Burst B, through
//!    `simulate --run`: nothing rejected, and it sends at Q.
//!
//! Phases 2 and 3 run side by side. The measure is taken after the step, once the daemon's window holds only it and
//! the level has borrowed the seats the step asks for (every 10 s, smoothed: 25 s after the step).
use std::cell::RefCell;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{external, get_text, until, Running};

const CLIENT: &str = "system:serviceaccount:crossplane-system:provider-aws";
const LEVEL: &str = "workload-low";
/// The daemon's analysis window (seconds): its means and rates cover this.
const WINDOW: f64 = 20.0;
/// After the step the level borrows more seats for the client's new demand, over a few adjustments (every 10 s,
/// smoothed): the client's waits settle about 25 s after it (in virtual time: 0.27 s mean from 20 to 40 s into the
/// scenario, 0.03 s from 40 to 80 s).
const SETTLE: f64 = 25.0;
/// A request is in the audit log once it has ended: the measure ends this long before the log's clock, past the
/// longest a request waits here (the queues of a client at twice its share: about 3.7 s) and executes (1 s).
const LAG: f64 = 5.0;

/// What a phase saw of the client.
#[derive(Debug, Clone, Copy)]
struct Seen {
    sustainable: f64,
    recommended: f64,
    /// The advised client-go Burst.
    burst: f64,
    observed: f64,
    /// Its flow's mean waiting requests and executing requests over the daemon's window (`top_flows`).
    waiting: f64,
    executing: f64,
}

/// The client's entry in `/api/v1/status`: its advice and its flow in the level's top flows.
fn seen(status: &Value) -> Option<Seen> {
    let entry = status["clients"]
        .as_array()?
        .iter()
        .find(|c| c["user"] == CLIENT && c["priority_level"] == LEVEL)?;
    let flow = status["apiservers"][0]["levels"]
        .as_array()?
        .iter()
        .find(|l| l["priority_level"] == LEVEL)?["top_flows"]
        .as_array()?
        .iter()
        .find(|f| f["flow"] == CLIENT)?;
    let number = |v: &Value| v.as_f64();
    // Little's law holds between the entry's figures.
    let (limit, active) = (
        number(&entry["limit_seats"])?,
        number(&entry["active_flows"])?,
    );
    let (seats, seconds) = (
        number(&entry["seats_per_request"])?,
        number(&entry["seconds_per_request"])?,
    );
    let sustainable = number(&entry["sustainable_requests_per_second"])?;
    assert!(
        (sustainable - limit / active / (seats * seconds)).abs() < 0.01 * sustainable,
        "{entry:#}"
    );
    Some(Seen {
        sustainable,
        recommended: number(&entry["recommended_qps"])?,
        burst: number(&entry["recommended_burst"])?,
        observed: number(&entry["observed_requests_per_second"])?,
        waiting: number(&flow["waiting_requests"])?,
        executing: number(&flow["executing_seats"])? / seats,
    })
}

/// One request of the client, as the simulator's audit log has it.
struct Request {
    /// Unix seconds.
    received: f64,
    code: u16,
    /// Time in its queue (requests served): the response's latency less the execution time.
    waited: Option<f64>,
}

/// The simulator's audit log, read as it grows: its clock and the client's requests.
struct AuditLog {
    path: PathBuf,
    /// The client's execution time (the scenario's `duration`).
    execution: f64,
    /// Bytes read, up to the end of the last whole line.
    read: u64,
    /// The earliest and the latest request received (Unix seconds): the simulator's start and its clock (the
    /// background's rejections are written as they arrive).
    first: Option<f64>,
    last: f64,
    client: Vec<Request>,
}

fn unix(timestamp: &str) -> f64 {
    humantime::parse_rfc3339(timestamp)
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// What became of the client's requests received in an interval of the scenario.
#[derive(Debug, Clone, Copy)]
struct Outcome {
    requests: usize,
    rejected: usize,
    /// Mean time in a queue of the requests served.
    mean_wait: f64,
    /// Requests waiting on average over the interval (Little's law: the sum of the waits over its length).
    mean_waiting: f64,
    rate: f64,
}

impl AuditLog {
    fn new(path: PathBuf, execution: f64) -> Self {
        AuditLog {
            path,
            execution,
            read: 0,
            first: None,
            last: 0.0,
            client: Vec::new(),
        }
    }

    /// Reads the lines written since the last call.
    fn catch_up(&mut self) {
        use std::io::{Read, Seek, SeekFrom};
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return;
        };
        let mut bytes = Vec::new();
        file.seek(SeekFrom::Start(self.read)).unwrap();
        file.read_to_end(&mut bytes).unwrap();
        // Whole lines only: the simulator may be writing the last one.
        let Some(end) = bytes.iter().rposition(|b| *b == b'\n').map(|i| i + 1) else {
            return;
        };
        let text = std::str::from_utf8(&bytes[..end]).unwrap();
        const RECEIVED: &str = "\"requestReceivedTimestamp\":\"";
        for line in text.lines() {
            let Some(at) = line.find(RECEIVED) else {
                continue;
            };
            let rest = &line[at + RECEIVED.len()..];
            let received = unix(&rest[..rest.find('"').unwrap()]);
            self.first = Some(self.first.map_or(received, |f| f.min(received)));
            self.last = self.last.max(received);
            if !line.contains(CLIENT) {
                continue;
            }
            let event: Value = serde_json::from_str(line).unwrap();
            if event["user"]["username"] != CLIENT {
                continue;
            }
            let code = event["responseStatus"]["code"].as_u64().unwrap() as u16;
            let ended = unix(event["stageTimestamp"].as_str().unwrap());
            self.client.push(Request {
                received,
                code,
                waited: (code == 200).then_some(ended - received - self.execution),
            });
        }
        self.read += end as u64;
    }

    /// Seconds of the scenario the simulator has run.
    fn clock(&self) -> f64 {
        self.first.map_or(0.0, |f| self.last - f)
    }

    /// The client's requests received from `from` to `to` seconds into the scenario.
    fn outcome(&self, from: f64, to: f64) -> Outcome {
        let start = self.first.unwrap_or(0.0);
        let inside: Vec<&Request> = self
            .client
            .iter()
            .filter(|r| (from..to).contains(&(r.received - start)))
            .collect();
        let waits: Vec<f64> = inside.iter().filter_map(|r| r.waited).collect();
        let total: f64 = waits.iter().sum();
        Outcome {
            requests: inside.len(),
            rejected: inside.iter().filter(|r| r.code == 429).count(),
            mean_wait: total / waits.len().max(1) as f64,
            mean_waiting: total / (to - from),
            rate: inside.len() as f64 / (to - from),
        }
    }

    fn rejected_since(&self, from: f64) -> usize {
        self.outcome(from, f64::INFINITY).rejected
    }
}

/// `simulate` with a scenario and `serve` watching it, in `dir`.
struct Phase {
    name: &'static str,
    status_url: String,
    audit: RefCell<AuditLog>,
    last_status: RefCell<String>,
    _simulate: Running,
    simulate_log: Box<dyn Fn() -> String>,
    serve_log: Box<dyn Fn() -> String>,
    _serve: Running,
}

impl Phase {
    async fn start(name: &'static str, dir: &Path, scenario: &Path, execution: f64) -> Phase {
        let (sim_port, monitor_port) = (external::free_port(), external::free_port());
        let audit = dir.join(format!("{name}-audit.log"));
        let simulate = Running::start(
            &[
                "simulate",
                "--scenario",
                scenario.to_str().unwrap(),
                "--listen",
                &format!("127.0.0.1:{sim_port}"),
                "--kubeconfig-out",
                &format!("{name}.kubeconfig"),
                "--audit-log",
                audit.to_str().unwrap(),
            ],
            dir,
            &format!("{name}-simulate"),
        );
        let target = format!("http://127.0.0.1:{sim_port}");
        let simulate_log = dir.join(format!("{name}-simulate.log"));
        let read = move || std::fs::read_to_string(&simulate_log).unwrap_or_default();
        until("the simulator", 30, &read, || async {
            get_text(&format!("{target}/version")).await.map(|_| ())
        })
        .await;
        let config = dir.join(format!("{name}.yaml"));
        std::fs::write(
            &config,
            format!(
                "analysis:\n  window: {WINDOW}s\naudit:\n  files: [\"{}\"]\n",
                audit.display()
            ),
        )
        .unwrap();
        let listen = format!("127.0.0.1:{monitor_port}");
        let serve = Running::start(
            &[
                "serve",
                "--config",
                config.to_str().unwrap(),
                "--target",
                &target,
                "--listen",
                &listen,
                "--interval",
                "1s",
            ],
            dir,
            &format!("{name}-serve"),
        );
        let serve_log = dir.join(format!("{name}-serve.log"));
        Phase {
            name,
            status_url: format!("http://{listen}/api/v1/status"),
            audit: RefCell::new(AuditLog::new(audit, execution)),
            last_status: RefCell::new(String::new()),
            _simulate: simulate,
            simulate_log: Box::new(read),
            serve_log: Box::new(move || std::fs::read_to_string(&serve_log).unwrap_or_default()),
            _serve: serve,
        }
    }

    fn logs(&self) -> String {
        let status: Value = serde_json::from_str(&self.last_status.borrow()).unwrap_or(Value::Null);
        format!(
            "{}: last clients {:#}\nserve:\n{}\nsimulate:\n{}",
            self.name,
            status["clients"],
            (self.serve_log)(),
            (self.simulate_log)()
        )
    }

    /// The daemon's status, and the audit log caught up.
    async fn status(&self) -> Option<Value> {
        let text = get_text(&self.status_url).await?;
        let status = serde_json::from_str(&text).ok()?;
        *self.last_status.borrow_mut() = text;
        self.audit.borrow_mut().catch_up();
        Some(status)
    }

    /// Waits until the client is above its share, waits longer than it executes and has been rejected since the
    /// step; then the daemon's figures and the simulator's over the steady part after the step.
    async fn until_held_back(&self, step: f64) -> (Seen, Outcome) {
        until(
            &format!(
                "{}: the client above its share, waiting and rejected",
                self.name
            ),
            90,
            || self.logs(),
            || async {
                let seen = seen(&self.status().await?)?;
                let audit = self.audit.borrow();
                let settled = step + SETTLE;
                let outcome = audit.outcome(settled, audit.clock() - LAG);
                (seen.observed > seen.sustainable
                    && seen.waiting > seen.executing
                    && audit.rejected_since(step) > 0
                    && outcome.mean_wait > audit.execution)
                    .then_some((seen, outcome))
            },
        )
        .await
    }

    /// Waits until the daemon's window and the measure hold only the steady part after the step; then both.
    async fn after_the_step(&self, step: f64) -> (Seen, Outcome) {
        let settled = step + SETTLE;
        until(
            &format!("{}: a window after the step", self.name),
            90,
            || self.logs(),
            || async {
                let status = self.status().await?;
                let audit = self.audit.borrow();
                if audit.clock() < settled + WINDOW + LAG {
                    return None;
                }
                Some((seen(&status)?, audit.outcome(settled, audit.clock() - LAG)))
            },
        )
        .await
    }
}

/// `step.yaml` with the client's last rate point (the step) set to `rps`, as JSON (which is YAML).
fn with_step_to(scenario: &Value, rps: f64) -> String {
    let mut s = scenario.clone();
    let client = s["flows"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|f| f["user"] == CLIENT)
        .unwrap();
    let points = client["rate"].as_array_mut().unwrap();
    let last = points.len() - 1;
    points[last]["rps"] = rps.into();
    serde_json::to_string_pretty(&s).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_advised_rate_is_served_and_twice_the_sustainable_one_is_held_back() {
    let started = std::time::Instant::now();
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/scenarios/step.yaml");
    let scenario =
        apf_sim::Scenario::load(&apf_sim::ScenarioSource::File(shipped.clone())).unwrap();
    let client = scenario.flows.iter().find(|f| f.user == CLIENT).unwrap();
    let (step, execution) = (
        client.rate.last().unwrap().at.as_secs_f64(),
        client.duration.as_secs_f64(),
    );
    let text: Value = serde_saphyr::from_str(&std::fs::read_to_string(&shipped).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();

    // 1. As shipped: the step goes well past the client's share.
    let phase = Phase::start("step", dir.path(), &shipped, execution).await;
    let (one, one_after) = phase.until_held_back(step).await;
    drop(phase);
    let (s, q) = (one.sustainable, one.recommended);
    assert!(q > 0.0 && q <= 0.8 * s, "advised {q} for sustainable {s}");

    // 2. and 3.: the same background, the step to the advised rate and to twice the sustainable one.
    let at_q = dir.path().join("step-to-advised.yaml");
    std::fs::write(&at_q, with_step_to(&text, q)).unwrap();
    let at_2s = dir.path().join("step-to-twice.yaml");
    std::fs::write(&at_2s, with_step_to(&text, 2.0 * s)).unwrap();
    let advised = Phase::start("advised", dir.path(), &at_q, execution).await;
    let twice = Phase::start("twice", dir.path(), &at_2s, execution).await;
    let ((two, two_after), (three, three_after)) =
        tokio::join!(advised.after_the_step(step), twice.until_held_back(step));

    // The figures of each phase, for whoever runs this with --nocapture.
    for (name, seen, after) in [
        ("step", one, one_after),
        ("advised", two, two_after),
        ("twice", three, three_after),
    ] {
        eprintln!(
            "{name}: S {:.1} Q {:.1} observed {:.1}/s; daemon: waiting {:.1} executing {:.1}; audit after the step: \
             {} requests ({:.1}/s) {} rejected, mean wait {:.3} s, mean waiting {:.1}",
            seen.sustainable,
            seen.recommended,
            seen.observed,
            seen.waiting,
            seen.executing,
            after.requests,
            after.rate,
            after.rejected,
            after.mean_wait,
            after.mean_waiting
        );
    }
    eprintln!("{:.0} s", started.elapsed().as_secs_f64());
    let logs = || advised.logs();
    // The advice holds while the client follows it: the same share, and the client under it.
    assert!(
        (two.sustainable - s).abs() <= 0.05 * s,
        "{two:?}\n{}",
        logs()
    );
    assert!(two.observed < two.sustainable, "{two:?}\n{}", logs());
    assert!(
        (two_after.rate - q).abs() < 0.15 * q,
        "the client did not send at {q}: {two_after:?}"
    );
    // Served: nothing of it rejected, and its requests wait under a tenth of their execution (by Little's law, under
    // a tenth as many of them wait as execute). Not "no wait": in a full level every
    // request waits for a seat, and fair queuing dispatches the busy queues in turn, so a client inside its share
    // waits for its queues' turns, as kube-apiserver's queueset would have it; but its queues stay short, drained
    // faster than they fill. Above its share they fill to their length limit and each request waits for all of it:
    // several times its execution.
    assert_eq!(two_after.rejected, 0, "{two_after:?}\n{}", logs());
    assert!(
        two_after.mean_wait < 0.1 * execution,
        "{two_after:?}\n{}",
        logs()
    );
    assert!(two.waiting < two.executing / 4.0, "{two:?}\n{}", logs());
    // Twice the sustainable rate is held back, as the step past it was.
    assert!(three_after.rejected > 0 && three.waiting > three.executing);

    // 4. The client as client-go runs it with the advice: threads that wait for their answers (more of them than
    // the rate needs, so that the token bucket alone sets the pace) behind QPS Q and Burst B, beside the same
    // background, through `simulate --run` in virtual time: nothing of it rejected, and it sends at Q.
    let closed = dir.path().join("step-closed-loop.yaml");
    std::fs::write(&closed, closed_loop(&text, q, one.burst)).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
        .args(["simulate", "--run", "--output", "json", "--scenario"])
        .arg(&closed)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let provider = report["flows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "provider-aws")
        .unwrap_or_else(|| panic!("{report:#}"));
    let duration = report["duration_seconds"].as_f64().unwrap();
    let sent = provider["dispatched"].as_f64().unwrap() / duration;
    eprintln!("closed loop at QPS {q} and Burst {}: {provider}", one.burst);
    assert_eq!(provider["rejected"], serde_json::json!({}), "{provider}");
    assert!(
        (sent - q).abs() < 0.05 * q,
        "sent {sent}/s at QPS {q}: {provider}"
    );
    assert!(
        provider["mean_wait_seconds"].as_f64().unwrap() < execution,
        "{provider}"
    );
}

/// `step.yaml` with the client a closed loop at QPS `qps` and Burst `burst`, for two minutes.
fn closed_loop(scenario: &Value, qps: f64, burst: f64) -> String {
    let mut s = scenario.clone();
    s["duration"] = "120s".into();
    let client = s["flows"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|f| f["user"] == CLIENT)
        .unwrap();
    let fields = client.as_object_mut().unwrap();
    fields.remove("rate");
    fields.insert(
        "threads".into(),
        ((2.0 * qps.max(burst)).ceil() as u64).into(),
    );
    fields.insert("qps".into(), qps.into());
    fields.insert("burst".into(), (burst as u64).into());
    serde_json::to_string_pretty(&s).unwrap()
}
