//! Load scenarios: which flows send requests, how wide and long they are, and at what rate over time.
//!
//! # YAML format
//! ```yaml
//! duration: 300s          # the scenario loops after this (humantime: 300s, 5m, 1m30s)
//! flows:
//!   - name: agents        # free text, unique
//!     user: system:serviceaccount:monitoring:agent
//!     groups: []          # groups beyond those authenticators add to every user (system:authenticated, and
//!                         # system:serviceaccounts[:NS] for a service account): system:nodes, system:masters, ...
//!     flow_schema: service-accounts   # optional: the FlowSchema its requests must match on the default objects
//!     verb: list          # default get
//!     resource: pods      # default configmaps
//!     namespace: ""       # default "" (cluster scope); the flow distinguisher of ByNamespace schemas
//!     seats: 10           # width of one request, >= 1; clamped to the level's maxSeats. Before 1.23 every
//!                         # request takes 1 seat, and a flow of width N is sent N times as often instead, so a
//!                         # scenario puts the same seat demand on every version
//!     duration: 2s        # execution time of one request
//!     duration_spread: 0.5  # optional: each request's time uniform in duration x [0.5, 1.5] (default 0)
//!     rate: [ {at: 0s, rps: 5}, {at: 60s, rps: 40}, {at: 200s, rps: 5} ]  # requests/s, linear in between
//!     arrivals: poisson   # default; `even`: evenly spaced, as a client held to a steady pace sends them
//!   - name: operator      # a closed loop instead of a rate: client-go workers that wait for their answers
//!     user: system:serviceaccount:ops:operator
//!     threads: 4          # each calls, waits for the answer, thinks, calls again
//!     think: 100ms        # may be negative, down to 1µs - duration (the next call before the answer)
//!     calls: 1000         # per thread; unlimited when absent
//!     start: 10s          # the first calls (default 0s)
//!     qps: 20             # client-go's token bucket in front of the threads (optional)
//!     burst: 30           # default 1
//!     duration: 200ms
//!     final_seats: 2      # seats held after the execution (a write's watch notifications) ...
//!     additional_latency: 50ms  # ... for this long
//!     hash: 1001001001    # optional: the shuffle-sharding hash, in place of kube-apiserver's from flow schema
//!                         # and distinguisher
//! seed: 1                 # optional: the random draws' seed, unless the command line gives one
//! dispatch: fair-queuing  # default; `round-robin`: the simulator before kube-apiserver's queueset, for comparison
//! priority_levels:        # optional: levels outside the objects, with fixed seats (no shares, no borrowing)
//!   - {name: test, concurrency_limit: 4, queues: 9, hand_size: 1, queue_length_limit: 8, request_wait_limit: 15s}
//!     # queues: 0 rejects at the limit (`concurrency-limit`); `exempt: true` runs everything at once.
//!     # A flow with `priority_level: test` goes there directly (no FlowSchema; its flow schema is its name).
//! ```
//! A closed-loop thread's next call goes out `think` after its answer; a rejected call is retried after 1 s (the
//! least `Retry-After` kube-apiserver sends).
//! Arrivals are Poisson with the seeded RNG, or evenly spaced (`arrivals: even`: a controller's workers, a client-go
//! token bucket held at its QPS; its seats in use then follow the rate without a Poisson flow's scatter of about the
//! square root of their number). Before the first point the first rate holds, after the last the last.
//! Unknown keys are errors.
//!
//! A flow's requests land where kube-apiserver would put them: the simulated replica matches each flow (user,
//! groups, verb, resource, namespace) against the cluster's FlowSchemas, and again whenever they change through the
//! API. `flow_schema` states where they must land on the version's default objects; the simulation checks it.

use serde::{Deserialize, Deserializer};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

mod validate;

/// The longest time a scenario may give: its nanoseconds, added up over a run, stay within 64 bits.
const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
/// The shortest execution: a closed loop's calls follow each other at least this far apart.
const MIN_DURATION: Duration = Duration::from_micros(1);
/// Bounds that keep a run's events countable: requests/s of one flow, threads of one closed loop.
const MAX_RPS: f64 = 50_000.0;
const MAX_THREADS: u32 = 100_000;

/// Everything that can go wrong when setting up a simulation.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Version(#[from] apf::VersionError),
    #[error("cannot read scenario file {path}: {source}")]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The parser's message carries the line and column.
    #[error("invalid scenario YAML: {0}")]
    Yaml(String),
    #[error("invalid scenario: {0}")]
    Scenario(String),
}

/// Where a scenario comes from: a built-in name or a YAML file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScenarioSource {
    Idle,
    Ramp,
    Storm,
    File(PathBuf),
}

impl FromStr for ScenarioSource {
    type Err = SimError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "idle" => ScenarioSource::Idle,
            "ramp" => ScenarioSource::Ramp,
            "storm" => ScenarioSource::Storm,
            "" => return Err(SimError::Scenario("empty scenario name".into())),
            path => ScenarioSource::File(PathBuf::from(path)),
        })
    }
}

fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    humantime::parse_duration(&s)
        .map_err(|e| serde::de::Error::custom(format!("invalid duration {s:?}: {e}")))
}

/// A duration that may be negative: `-1ns`, `-500ms`; in nanoseconds.
fn de_signed_duration<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let s = String::deserialize(d)?;
    let (sign, rest) = match s.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, s.as_str()),
    };
    let d = humantime::parse_duration(rest)
        .map_err(|e| serde::de::Error::custom(format!("invalid duration {s:?}: {e}")))?;
    let ns = i64::try_from(d.as_nanos())
        .map_err(|_| serde::de::Error::custom(format!("duration {s:?} is too long")))?;
    Ok(sign * ns)
}

fn default_verb() -> String {
    "get".into()
}
fn default_resource() -> String {
    "configmaps".into()
}
fn default_seats() -> u32 {
    1
}

/// How a flow's requests arrive at the rate its curve gives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arrivals {
    /// Independently of each other (a Poisson process): many clients, each sending now and then.
    #[default]
    Poisson,
    /// Evenly spaced: one client held to a steady pace.
    Even,
}

/// One point of a flow's rate curve.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RatePoint {
    #[serde(deserialize_with = "de_duration")]
    pub at: Duration,
    pub rps: f64,
}

/// One flow of requests: one client sending one kind of request.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowSpec {
    pub name: String,
    /// The default FlowSchema the flow's requests match (checked when the simulation starts).
    #[serde(default)]
    pub flow_schema: Option<String>,
    /// Required, except for a flow sent to a `priority_level` directly.
    #[serde(default)]
    pub user: String,
    /// Groups of the user beyond those every authenticator adds ([`apf::matching::implied_groups`]).
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default = "default_verb")]
    pub verb: String,
    #[serde(default = "default_resource")]
    pub resource: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default = "default_seats")]
    pub seats: u32,
    #[serde(deserialize_with = "de_duration")]
    pub duration: Duration,
    /// Each request's execution time drawn uniformly from `duration` x [1 - spread, 1 + spread] (0 to below 1;
    /// default 0, every request `duration` long). Requests of one length all started together end together and free
    /// their seats in one 10 ms tick, again and again: a level whose flows all send alike then dispatches in bursts
    /// a second apart, which no apiserver serving real requests does.
    #[serde(default)]
    pub duration_spread: f64,
    /// Open-loop requests/s over time; a flow has either `rate` or `threads`.
    #[serde(default)]
    pub rate: Vec<RatePoint>,
    #[serde(default)]
    pub arrivals: Arrivals,
    /// A priority level of the scenario's `priority_levels` to send to directly, bypassing the FlowSchemas: the
    /// flow is then its own flow schema, by its name.
    #[serde(default)]
    pub priority_level: Option<String>,
    /// The flow's hash for shuffle sharding, in place of the one kube-apiserver computes from the flow schema and
    /// the distinguisher (kube-apiserver's own queueset tests set it so).
    #[serde(default)]
    pub hash: Option<u64>,
    /// A closed loop: this many client threads, each calling, waiting for the answer, thinking, and calling again.
    #[serde(default)]
    pub threads: Option<u32>,
    /// Calls per thread (unlimited when absent).
    #[serde(default)]
    pub calls: Option<u64>,
    /// A thread's pause between the answer and its next call; may be negative (duration + think at least 1µs):
    /// the next call then goes out that long before the answer, as kube-apiserver's windup test does.
    #[serde(default, deserialize_with = "de_signed_duration")]
    pub think: i64,
    /// When the flow's threads make their first call.
    #[serde(default, deserialize_with = "de_duration")]
    pub start: Duration,
    /// client-go's token bucket in front of the threads: `qps` tokens a second, up to `burst` saved (default 1).
    #[serde(default)]
    pub qps: Option<f64>,
    #[serde(default)]
    pub burst: Option<u32>,
    /// Seats held after the execution, for `additional_latency` (a mutating request's watch notifications);
    /// default: none.
    #[serde(default)]
    pub final_seats: Option<u32>,
    #[serde(default, deserialize_with = "de_duration")]
    pub additional_latency: Duration,
    /// A replayed flow ([`crate::replay`]) seen in a flow schema with a distinguisher, whose requests are not known
    /// well enough to be matched: they go to that flow schema by name, with that distinguisher, for as long as it
    /// exists (to the catch-all when it does not). Not a scenario key.
    #[serde(skip)]
    pub pinned: Option<(String, String)>,
    /// A replayed flow's request as it was seen (any API group, a non-resource URL), in place of the one `user`,
    /// `verb`, `resource` and `namespace` make. Not a scenario key.
    #[serde(skip)]
    pub seen_request: Option<apf::matching::Request>,
}

/// A priority level the scenario defines directly, outside the FlowSchema and PriorityLevelConfiguration objects:
/// fixed seats (no share of the server's, no borrowing), as kube-apiserver's queueset tests configure one.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LevelSpec {
    pub name: String,
    /// Its seats.
    pub concurrency_limit: u32,
    /// 0: no queues, a request without a free seat is rejected at once (`concurrency-limit`).
    #[serde(default)]
    pub queues: u32,
    #[serde(default = "default_hand_size")]
    pub hand_size: u32,
    #[serde(default = "default_queue_length_limit")]
    pub queue_length_limit: u32,
    /// How long a request may wait in a queue before it is rejected (`time-out`); default 15s.
    #[serde(default = "default_wait_limit", deserialize_with = "de_duration")]
    pub request_wait_limit: Duration,
    /// Exempt: every request executes at once, whatever the limit.
    #[serde(default)]
    pub exempt: bool,
}

fn default_hand_size() -> u32 {
    8
}
fn default_queue_length_limit() -> u32 {
    50
}
fn default_wait_limit() -> Duration {
    Duration::from_secs(15)
}

/// Which dispatch the simulated queues use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dispatch {
    /// kube-apiserver's fair queuing: the queue whose head finishes first in virtual time, only when its seats fit.
    #[default]
    FairQueuing,
    /// The simulator before issue 51: the queues in turn, any head that fits. Kept to show what fair queuing
    /// changes.
    RoundRobin,
}

/// A loaded, validated scenario.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    #[serde(deserialize_with = "de_duration")]
    pub duration: Duration,
    /// The seed of the run's random draws, unless the command line gives one.
    #[serde(default)]
    pub seed: Option<u64>,
    /// Priority levels defined directly (see [`LevelSpec`]), beside the version's.
    #[serde(default)]
    pub priority_levels: Vec<LevelSpec>,
    #[serde(default)]
    pub dispatch: Dispatch,
    pub flows: Vec<FlowSpec>,
}

/// Normal background traffic on several priority levels, shared by the built-ins.
const BACKGROUND: &str = r#"
  - {name: kubelet, flow_schema: system-nodes, user: "system:node:node-1", groups: ["system:nodes"], verb: get, resource: pods, seats: 1, duration: 20ms, rate: [{at: 0s, rps: 8}]}
  - {name: kube-controller-manager, flow_schema: kube-controller-manager, user: "system:kube-controller-manager", verb: list, resource: endpoints, namespace: kube-system, seats: 1, duration: 40ms, rate: [{at: 0s, rps: 10}]}
  - {name: kube-scheduler, flow_schema: kube-scheduler, user: "system:kube-scheduler", verb: get, resource: pods, namespace: kube-system, seats: 1, duration: 20ms, rate: [{at: 0s, rps: 4}]}
  - {name: leases, flow_schema: system-leader-election, user: "system:kube-scheduler", verb: update, resource: leases, namespace: kube-system, seats: 1, duration: 10ms, rate: [{at: 0s, rps: 1}]}
  - {name: operator, flow_schema: global-default, user: alice, verb: get, resource: configmaps, namespace: default, seats: 1, duration: 30ms, rate: [{at: 0s, rps: 3}]}
  - {name: admin, flow_schema: exempt, user: "system:admin", groups: ["system:masters"], verb: list, resource: configmaps, namespace: kube-stress, seats: 1, duration: 50ms, rate: [{at: 0s, rps: 1}]}
  - {name: anonymous, flow_schema: global-default, user: "system:anonymous", verb: get, resource: namespaces, seats: 1, duration: 10ms, rate: [{at: 0s, rps: 0.2}]}
"#;

impl Scenario {
    /// The same scenario with every rate multiplied by `factor`: a scenario written for one replica, given to a
    /// cluster of `factor` replicas that splits it, keeps its pressure per replica on average.
    pub fn scaled(mut self, factor: f64) -> Scenario {
        for flow in &mut self.flows {
            for point in &mut flow.rate {
                point.rps *= factor;
            }
            // A closed loop: as many more threads, and as much more room in their token bucket.
            if let Some(threads) = &mut flow.threads {
                *threads = ((f64::from(*threads) * factor).round() as u32).max(1);
            }
            if let Some(qps) = &mut flow.qps {
                *qps *= factor;
            }
        }
        self
    }

    /// Loads a built-in scenario or a YAML file.
    pub fn load(src: &ScenarioSource) -> Result<Scenario, SimError> {
        match src {
            ScenarioSource::Idle => Self::from_yaml(&Self::builtin_idle()),
            ScenarioSource::Ramp => Self::from_yaml(&Self::builtin_ramp()),
            ScenarioSource::Storm => Self::from_yaml(&Self::builtin_storm()),
            ScenarioSource::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| SimError::Io {
                    path: path.clone(),
                    source,
                })?;
                Self::from_yaml(&text)
            }
        }
    }

    fn builtin_idle() -> String {
        format!(
            "duration: 300s\nflows:{BACKGROUND}  - {{name: agents, flow_schema: service-accounts, user: \"system:serviceaccount:monitoring:agent\", verb: list, resource: pods, seats: 10, duration: 2s, rate: [{{at: 0s, rps: 1}}]}}\n"
        )
    }

    /// An agent's LISTs in workload-low ramp up until its limit is reached, its queues fill and `queue-full`
    /// rejections start (after ~2 minutes), then the load drops back and everything recovers; loops every 5 minutes.
    /// cert-manager, light and steady in the same level, is rejected with the agent until the agent is isolated.
    fn builtin_ramp() -> String {
        format!(
            "duration: 300s\nflows:{BACKGROUND}  - {{name: agents, flow_schema: service-accounts, user: \"system:serviceaccount:monitoring:agent\", verb: list, resource: pods, seats: 10, duration: 2s, rate: [{{at: 0s, rps: 2}}, {{at: 60s, rps: 11}}, {{at: 180s, rps: 40}}, {{at: 200s, rps: 40}}, {{at: 210s, rps: 2}}]}}\n  - {{name: cert-manager, flow_schema: service-accounts, user: \"system:serviceaccount:cert-manager:cert-manager\", verb: get, resource: secrets, namespace: cert-manager, duration: 50ms, rate: [{{at: 0s, rps: 5}}]}}\n"
        )
    }

    /// An immediate LIST storm in workload-low plus pressure on global-default: rejections within seconds. Narrow
    /// requests beside the wide ones fill the seats the LISTs leave: with seats free, a full queue takes more
    /// (kube-apiserver's queueset), and the LISTs would only time out.
    fn builtin_storm() -> String {
        format!(
            "duration: 300s\nflows:{BACKGROUND}  - {{name: agents, flow_schema: service-accounts, user: \"system:serviceaccount:monitoring:agent\", verb: list, resource: pods, seats: 10, duration: 3s, rate: [{{at: 0s, rps: 100}}]}}\n  - {{name: ci, flow_schema: service-accounts, user: \"system:serviceaccount:ci:runner\", verb: list, resource: configmaps, namespace: ci, seats: 10, duration: 3s, rate: [{{at: 0s, rps: 30}}]}}\n  - {{name: batch, flow_schema: global-default, user: bob, verb: list, resource: secrets, namespace: batch, seats: 4, duration: 2s, rate: [{{at: 0s, rps: 80}}]}}\n  - {{name: controller, flow_schema: service-accounts, user: \"system:serviceaccount:ops:controller\", verb: get, resource: configmaps, namespace: ops, duration: 200ms, rate: [{{at: 0s, rps: 100}}]}}\n  - {{name: cli, flow_schema: global-default, user: carol, verb: get, resource: configmaps, namespace: batch, duration: 100ms, rate: [{{at: 0s, rps: 50}}]}}\n"
        )
    }

    /// Parses and validates a scenario; the parser's errors keep their line and column.
    pub fn from_yaml(text: &str) -> Result<Scenario, SimError> {
        let s: Scenario = serde_saphyr::from_str(text)
            .map_err(|e| SimError::Yaml(e.without_snippet().to_string()))?;
        s.validate()?;
        Ok(s)
    }
}

/// The API group of a resource the scenarios use (the core group for any other).
pub(crate) fn api_group(resource: &str) -> &'static str {
    match resource {
        "leases" => "coordination.k8s.io",
        "deployments" | "replicasets" | "daemonsets" | "statefulsets" => "apps",
        "jobs" | "cronjobs" => "batch",
        _ => "",
    }
}

impl FlowSpec {
    /// The API group of the flow's resource.
    pub(crate) fn api_group(&self) -> &'static str {
        api_group(&self.resource)
    }

    /// The request APF sees from this flow.
    pub(crate) fn request(&self) -> apf::matching::Request {
        if let Some(seen) = &self.seen_request {
            return seen.clone();
        }
        let mut groups = apf::matching::implied_groups(&self.user);
        groups.extend(self.groups.iter().cloned());
        apf::matching::Request {
            user: self.user.clone(),
            groups,
            verb: self.verb.clone(),
            target: apf::matching::Target::Resource {
                api_group: self.api_group().to_string(),
                resource: self.resource.clone(),
                subresource: None,
                namespace: (!self.namespace.is_empty()).then(|| self.namespace.clone()),
            },
        }
    }

    /// Requests per second at `t` into the (looping) scenario, linear between the points.
    pub fn rps_at(&self, t: Duration) -> f64 {
        let Some(first) = self.rate.first() else {
            return 0.0;
        };
        if t <= first.at {
            return first.rps;
        }
        for w in self.rate.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            if t <= b.at {
                let span = (b.at - a.at).as_secs_f64();
                if span <= 0.0 {
                    return b.rps;
                }
                let x = (t - a.at).as_secs_f64() / span;
                return a.rps + (b.rps - a.rps) * x;
            }
        }
        self.rate.last().map(|p| p.rps).unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_load() {
        for s in [
            ScenarioSource::Idle,
            ScenarioSource::Ramp,
            ScenarioSource::Storm,
        ] {
            let sc = Scenario::load(&s).unwrap();
            assert!(!sc.flows.is_empty());
        }
        assert_eq!(
            "ramp".parse::<ScenarioSource>().unwrap(),
            ScenarioSource::Ramp
        );
        assert_eq!(
            "x.yaml".parse::<ScenarioSource>().unwrap(),
            ScenarioSource::File(PathBuf::from("x.yaml"))
        );
    }

    #[test]
    fn example_file_loads() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../config/scenarios/example.yaml"
        );
        let sc = Scenario::load(&ScenarioSource::File(path.into())).unwrap();
        assert_eq!(sc.duration, Duration::from_secs(300));
        // Every flow lands where it says, on the oldest and the newest version.
        for minor in [20, 36] {
            let v = apf::KubeVersion::new(minor, 0);
            crate::Simulator::try_new(crate::SimOptions::new(v, sc.clone())).unwrap();
        }
        // So do the built-in scenarios' flows.
        for src in [
            ScenarioSource::Idle,
            ScenarioSource::Ramp,
            ScenarioSource::Storm,
        ] {
            let sc = Scenario::load(&src).unwrap();
            for minor in [20, 29, 36] {
                let v = apf::KubeVersion::new(minor, 0);
                crate::Simulator::try_new(crate::SimOptions::new(v, sc.clone())).unwrap();
            }
        }
    }

    #[test]
    fn a_duration_spread_is_a_share_of_the_duration_below_one() {
        let flow = |spread: &str| {
            Scenario::from_yaml(&format!(
                "duration: 300s\nflows:\n- {{name: a, user: u, duration: 1s, duration_spread: {spread}, rate: [{{at: 0s, rps: 5}}]}}\n"
            ))
        };
        assert_eq!(flow("0.5").unwrap().flows[0].duration_spread, 0.5);
        for bad in ["1", "-0.1", "2.5"] {
            let e = flow(bad).unwrap_err().to_string();
            assert!(e.contains("duration_spread"), "{bad}: {e}");
        }
    }

    #[test]
    fn interpolates() {
        let sc = Scenario::from_yaml(
            "duration: 300s\nflows:\n- {name: a, user: u, duration: 1s, rate: [{at: 0s, rps: 5}, {at: 60s, rps: 35}]}\n",
        )
        .unwrap();
        let f = &sc.flows[0];
        assert_eq!(f.rps_at(Duration::from_secs(30)), 20.0);
        assert_eq!(f.rps_at(Duration::from_secs(100)), 35.0);
        assert_eq!(f.verb, "get");
        // A cluster of three gets the load once per replica.
        let tripled = sc.clone().scaled(3.0);
        assert_eq!(tripled.flows[0].rps_at(Duration::from_secs(30)), 60.0);
        assert_eq!(tripled.duration, sc.duration);
    }

    #[test]
    fn errors_name_the_problem() {
        let err = |y: &str| Scenario::from_yaml(y).unwrap_err().to_string();
        let e = err("duration: 300s\nflows:\n- {name: a, flow_schema: service-accounts, user: u, duration: 1s, rate: [{at: 0s, rps: 1}], colour: red}\n");
        assert!(
            e.contains("unknown field `colour`") && e.contains("line 3"),
            "{e}"
        );
        let e = err("duration: 300s\nflows:\n- {name: a, flow_schema: nope, user: u, duration: 1s, rate: [{at: 0s, rps: 1}]}\n");
        assert!(e.contains("unknown flow_schema \"nope\""), "{e}");
        let e = err("duration: 300s\nflows:\n- {name: a, flow_schema: global-default, user: u, seats: 0, duration: 1s, rate: [{at: 0s, rps: 1}]}\n");
        assert!(e.contains("seats must be at least 1"), "{e}");
        let e = err("duration: 300s\nflows:\n- {name: a, flow_schema: global-default, user: u, duration: 1s, rate: [{at: 0s, rps: -1}]}\n");
        assert!(e.contains("rps must be a number from 0 to 50000"), "{e}");
        let e = err("duration: soon\nflows: []\n");
        assert!(e.contains("invalid duration"), "{e}");
        // The keys of closed loops and of the scenario's own levels.
        for (yaml, want) in [
            ("- {name: a, user: u, duration: 1s}", "give it a `rate`"),
            (
                "- {name: a, user: u, duration: 1s, threads: 2, rate: [{at: 0s, rps: 1}]}",
                "exclude each other",
            ),
            (
                "- {name: a, user: u, duration: 1s, rate: [{at: 0s, rps: 1}], qps: 5}",
                "`qps` is for a closed-loop",
            ),
            (
                "- {name: a, user: u, duration: 1s, threads: 1, burst: 5}",
                "burst needs qps",
            ),
            (
                "- {name: a, user: u, duration: 1s, threads: 1, think: -2s}",
                "duration + think must be at least 1µs",
            ),
            (
                "- {name: a, user: u, duration: 1s, threads: 1, final_seats: 2}",
                "go together",
            ),
            ("- {name: a, duration: 1s, threads: 1}", "needs a user"),
            (
                "- {name: a, duration: 1s, threads: 1, priority_level: nope}",
                "not one of the scenario's",
            ),
            (
                "- {name: a, user: u, duration: 1s, threads: 1, think: soon}",
                "invalid duration",
            ),
        ] {
            let e = err(&format!("duration: 60s\nflows:\n{yaml}\n"));
            assert!(e.contains(want), "{yaml}: {e}");
        }
        let e = err("duration: 60s\npriority_levels: [{name: t, concurrency_limit: 4, queues: 4, hand_size: 5}]\nflows: []\n");
        assert!(e.contains("handSize 5 is greater than deckSize 4"), "{e}");
        let e = err("duration: 60s\npriority_levels: [{name: t, concurrency_limit: 4}, {name: t, concurrency_limit: 2}]\nflows: []\n");
        assert!(e.contains("defined twice"), "{e}");
        let sc = Scenario::from_yaml(
            "duration: 60s\npriority_levels: [{name: workload-low, concurrency_limit: 4}]\nflows: []\n",
        )
        .unwrap();
        let e = crate::Simulator::try_new(crate::SimOptions::new(apf::KubeVersion::new(34, 0), sc))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("one of Kubernetes 1.34.0's own"), "{e}");
        // Served (lenient), the clashing level is left out, and nothing panics.
        let sc = Scenario::from_yaml(
            "duration: 60s\npriority_levels: [{name: workload-low, concurrency_limit: 4}]\n\
             flows:\n- {name: a, priority_level: workload-low, threads: 1, duration: 1s}\n",
        )
        .unwrap();
        let s = crate::Simulator::new(crate::SimOptions::new(apf::KubeVersion::new(34, 0), sc));
        s.step(Duration::from_secs(5));
        assert_eq!(
            s.truth()
                .iter()
                .filter(|l| l.priority_level == "workload-low")
                .count(),
            1
        );
        let e = Scenario::load(&ScenarioSource::File("/nonexistent/s.yaml".into()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/s.yaml"), "{e}");
    }
}
