//! Who got the 429s: audited requests ([`crate::parse::audit`]) classified with kube-apiserver's own matching
//! ([`crate::matching`]) and counted per user as APF saw it (user, flow schema, priority level) and per flow (flow
//! schema and distinguisher). kube-apiserver's metrics count rejections by flow schema and priority level only, and
//! its audit events name neither: this is where the two meet.
//!
//! Bounded: a [`Ledger`] keeps at most `max_users` users and as many flows; past that, requests are counted
//! together under [`OTHER_USERS`] (or [`OTHER_FLOWS`]) and the overflow is counted. A [`Window`] keeps one ledger
//! per slice of a sliding window and drops the slices that leave it.
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use serde::Serialize;

use crate::matching::{match_request, Match, MatchError};
use crate::parse::audit::AuditedRequest;
use crate::{FlowSchema, PriorityLevelConfig};

/// The user the requests of users beyond the cap are counted under.
pub const OTHER_USERS: &str = "(other users)";
/// The distinguisher the requests of flows beyond the cap are counted under.
pub const OTHER_FLOWS: &str = "(other flows)";
/// User agents kept per user; the others are counted under `(other)`.
const MAX_USER_AGENTS: usize = 5;
/// Impersonators named per user.
const MAX_IMPERSONATORS: usize = 5;
/// Users told apart per flow (a flow of ByNamespace has as many as the namespace has clients); the rest are
/// counted under `(other)`, and the flow's `users` says "at least".
const MAX_FLOW_USERS: usize = 100;

/// A user as APF saw it: the user (the impersonated one when the request impersonated) and where its requests went.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct UserKey {
    pub user: String,
    pub flow_schema: String,
    pub priority_level: String,
}

/// A flow: a flow schema's requests with one distinguisher (the user or namespace; empty without one).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct FlowKey {
    pub flow_schema: String,
    pub priority_level: String,
    pub flow_distinguisher: String,
}

#[derive(Debug, Clone, Default)]
struct UserTally {
    requests: u64,
    rejected: u64,
    /// Requests served (not rejected, not WATCHes) whose duration the event tells, and their seconds from receipt
    /// to response less the queue wait: what one request of the user holds its seats for.
    served: u64,
    served_seconds: f64,
    /// Queue waits in nanoseconds, when kept ([`Limits::keep_waits`]).
    waits: Vec<u64>,
    user_agents: BTreeMap<String, u64>,
    impersonators: BTreeMap<String, u64>,
    first_rejection: Option<String>,
    last_rejection: Option<String>,
}

#[derive(Debug, Clone, Default)]
struct FlowTally {
    requests: u64,
    rejected: u64,
    /// As [`UserTally`]'s: served requests whose duration the event tells, and their seconds.
    served: u64,
    served_seconds: f64,
    /// LIST requests: kube-apiserver's work estimator gives a LIST seats by the objects it may return, and any other
    /// request one seat (k8s.io/apiserver `pkg/util/flowcontrol/request/list_work_estimator.go`).
    lists: u64,
    users: BTreeMap<String, u64>,
    /// The flow's first request, as APF matched it: what a change of FlowSchemas is tried on.
    example: Option<crate::matching::Request>,
}

/// How much a ledger keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Distinct users (and distinct flows) kept; the rest are counted together.
    pub max_users: usize,
    /// Keep every queue wait for exact percentiles (the offline command); the daemon does not.
    pub keep_waits: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_users: 10_000,
            keep_waits: false,
        }
    }
}

/// What a ledger counted of the events it was given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Requests classified and counted.
    pub requests: u64,
    /// Requests counted under [`OTHER_USERS`] because the cap was reached.
    pub overflow_requests: u64,
    /// Requests no FlowSchema matched on objects without a catch-all: not counted.
    pub unmatched: u64,
}

/// Requests counted per user and per flow.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    limits: Limits,
    users: HashMap<UserKey, UserTally>,
    flows: HashMap<FlowKey, FlowTally>,
    counts: Counts,
}

/// Seconds from a request's receipt to its response, less its APF queue wait: its execution as APF counts it.
/// kube-apiserver writes both timestamps in UTC with microseconds (`2026-11-24T10:00:16.000200Z`); `None` when they
/// do not read so, or straddle midnight.
fn served_seconds(r: &AuditedRequest) -> Option<f64> {
    fn of_day(t: &str) -> Option<(&str, f64)> {
        let (date, time) = t.strip_suffix('Z')?.split_once('T')?;
        let mut parts = time.splitn(3, ':');
        let h: f64 = parts.next()?.parse().ok()?;
        let m: f64 = parts.next()?.parse().ok()?;
        let s: f64 = parts.next()?.parse().ok()?;
        Some((date, h * 3600.0 + m * 60.0 + s))
    }
    let (day, from) = of_day(&r.received)?;
    let (same, to) = of_day(&r.timestamp)?;
    let wait = r.queue_wait.map_or(0.0, |w| w.as_secs_f64());
    let took = to - from - wait;
    (day == same && took.is_finite() && took >= 0.0).then_some(took)
}

fn add_capped(map: &mut BTreeMap<String, u64>, key: &str, n: u64, cap: usize) {
    if let Some(c) = map.get_mut(key) {
        *c += n;
    } else if map.len() < cap {
        map.insert(key.to_string(), n);
    } else {
        *map.entry("(other)".to_string()).or_default() += n;
    }
}

fn earlier(a: &mut Option<String>, b: &Option<String>, keep_min: bool) {
    if let Some(b) = b {
        // kube-apiserver writes every timestamp in UTC with microseconds (metav1.MicroTime): text order is time
        // order.
        let replace = match a {
            None => true,
            Some(a) => (b < a) == keep_min && b != a,
        };
        if replace {
            *a = Some(b.clone());
        }
    }
}

impl Ledger {
    pub fn new(limits: Limits) -> Self {
        Ledger {
            limits,
            ..Ledger::default()
        }
    }

    /// Classifies `request` on the objects and counts it; on objects without a catch-all an unmatched request is
    /// counted in [`Counts::unmatched`] and the error returned.
    pub fn classify(
        &mut self,
        request: &AuditedRequest,
        schemas: &[FlowSchema],
        levels: &[PriorityLevelConfig],
    ) -> Result<Match, MatchError> {
        match match_request(schemas, levels, &request.request()) {
            Ok(m) => {
                self.record(request, &m);
                Ok(m)
            }
            Err(e) => {
                self.counts.unmatched += 1;
                Err(e)
            }
        }
    }

    /// Counts `request`, which APF put where `m` says.
    pub fn record(&mut self, request: &AuditedRequest, m: &Match) {
        self.counts.requests += 1;
        let rejected = request.rejected();
        let at = (rejected && !request.timestamp.is_empty()).then(|| request.timestamp.clone());
        let one = |name: &str| BTreeMap::from([(name.to_string(), 1)]);
        let served = (!rejected && request.verb != "watch")
            .then(|| served_seconds(request))
            .flatten();
        let user = UserTally {
            requests: 1,
            rejected: u64::from(rejected),
            served: u64::from(served.is_some()),
            served_seconds: served.unwrap_or(0.0),
            waits: request
                .queue_wait
                .filter(|_| self.limits.keep_waits)
                .map(|w| u64::try_from(w.as_nanos()).unwrap_or(u64::MAX))
                .into_iter()
                .collect(),
            user_agents: if request.user_agent.is_empty() {
                BTreeMap::new()
            } else {
                one(&request.user_agent)
            },
            impersonators: request.impersonator.as_deref().map(one).unwrap_or_default(),
            first_rejection: at.clone(),
            last_rejection: at,
        };
        let key = UserKey {
            user: request.user.clone(),
            flow_schema: m.flow_schema.clone(),
            priority_level: m.priority_level.clone(),
        };
        self.add_user(key, &user);
        let flow = FlowTally {
            requests: 1,
            rejected: u64::from(rejected),
            served: u64::from(served.is_some()),
            served_seconds: served.unwrap_or(0.0),
            lists: u64::from(request.verb == "list"),
            users: one(&request.user),
            example: Some(request.request()),
        };
        let key = FlowKey {
            flow_schema: m.flow_schema.clone(),
            priority_level: m.priority_level.clone(),
            flow_distinguisher: m.flow_distinguisher.clone(),
        };
        self.add_flow(key, &flow);
    }

    /// Adds `other`'s counts to this ledger, within this ledger's cap.
    pub fn merge(&mut self, other: &Ledger) {
        self.counts.requests += other.counts.requests;
        self.counts.unmatched += other.counts.unmatched;
        self.counts.overflow_requests += other.counts.overflow_requests;
        for (key, o) in &other.users {
            self.add_user(key.clone(), o);
        }
        for (key, o) in &other.flows {
            self.add_flow(key.clone(), o);
        }
    }

    /// Adds `o` to the user's tally; a new user past the cap is counted under [`OTHER_USERS`], as overflow.
    fn add_user(&mut self, mut key: UserKey, o: &UserTally) {
        if !self.users.contains_key(&key) && self.users.len() >= self.limits.max_users {
            key.user = OTHER_USERS.into();
            self.counts.overflow_requests += o.requests;
        }
        let t = self.users.entry(key).or_default();
        t.requests += o.requests;
        t.rejected += o.rejected;
        t.served += o.served;
        t.served_seconds += o.served_seconds;
        if self.limits.keep_waits {
            t.waits.extend_from_slice(&o.waits);
        }
        for (ua, n) in &o.user_agents {
            add_capped(&mut t.user_agents, ua, *n, MAX_USER_AGENTS);
        }
        for (by, n) in &o.impersonators {
            add_capped(&mut t.impersonators, by, *n, MAX_IMPERSONATORS);
        }
        earlier(&mut t.first_rejection, &o.first_rejection, true);
        earlier(&mut t.last_rejection, &o.last_rejection, false);
    }

    /// Adds `o` to the flow's tally; a new flow past the cap is counted under [`OTHER_FLOWS`].
    fn add_flow(&mut self, mut key: FlowKey, o: &FlowTally) {
        if !self.flows.contains_key(&key) && self.flows.len() >= self.limits.max_users {
            key.flow_distinguisher = OTHER_FLOWS.into();
        }
        let f = self.flows.entry(key).or_default();
        f.requests += o.requests;
        f.rejected += o.rejected;
        f.served += o.served;
        f.served_seconds += o.served_seconds;
        f.lists += o.lists;
        if f.example.is_none() {
            f.example.clone_from(&o.example);
        }
        for (u, n) in &o.users {
            add_capped(&mut f.users, u, *n, MAX_FLOW_USERS);
        }
    }

    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// Every user, worst first: most rejected, then most requests, then by name.
    pub fn users(&self) -> Vec<UserRow> {
        let mut rows: Vec<UserRow> = self
            .users
            .iter()
            .map(|(k, t)| {
                let mut waits = t.waits.clone();
                waits.sort_unstable();
                UserRow {
                    user: k.user.clone(),
                    flow_schema: k.flow_schema.clone(),
                    priority_level: k.priority_level.clone(),
                    requests: t.requests,
                    rejected: t.rejected,
                    queue_waits: waits.len() as u64,
                    queue_wait_p50_seconds: quantile(&waits, 0.5),
                    queue_wait_p99_seconds: quantile(&waits, 0.99),
                    seconds_per_request: (t.served > 0).then(|| t.served_seconds / t.served as f64),
                    user_agents: by_count(&t.user_agents),
                    impersonated_by: by_count(&t.impersonators),
                    first_rejection: t.first_rejection.clone(),
                    last_rejection: t.last_rejection.clone(),
                }
            })
            .collect();
        rows.sort_by(|a, b| {
            (b.rejected, b.requests)
                .cmp(&(a.rejected, a.requests))
                .then_with(|| {
                    (&a.priority_level, &a.user, &a.flow_schema).cmp(&(
                        &b.priority_level,
                        &b.user,
                        &b.flow_schema,
                    ))
                })
        });
        rows
    }

    /// Every flow, worst first.
    pub fn flows(&self) -> Vec<FlowRow> {
        let mut rows: Vec<FlowRow> = self
            .flows
            .iter()
            .map(|(k, f)| FlowRow {
                flow_schema: k.flow_schema.clone(),
                priority_level: k.priority_level.clone(),
                flow_distinguisher: k.flow_distinguisher.clone(),
                requests: f.requests,
                rejected: f.rejected,
                served: f.served,
                seconds_per_request: (f.served > 0).then(|| f.served_seconds / f.served as f64),
                list_requests: f.lists,
                example: f.example.clone(),
                users: f.users.keys().filter(|u| *u != "(other)").count() as u64,
                more_users: f.users.contains_key("(other)"),
                top_users: by_count(&f.users)
                    .into_iter()
                    .filter(|u| u != "(other)")
                    .take(3)
                    .collect(),
            })
            .collect();
        rows.sort_by(|a, b| {
            (b.rejected, b.requests)
                .cmp(&(a.rejected, a.requests))
                .then_with(|| {
                    (&a.flow_schema, &a.flow_distinguisher)
                        .cmp(&(&b.flow_schema, &b.flow_distinguisher))
                })
        });
        rows
    }
}

/// Names by count, most first (ties by name).
fn by_count(map: &BTreeMap<String, u64>) -> Vec<String> {
    let mut v: Vec<(&String, &u64)> = map.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    v.into_iter().map(|(k, _)| k.clone()).collect()
}

/// The nearest-rank quantile of sorted nanoseconds, in seconds.
fn quantile(sorted: &[u64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    let i = rank.clamp(1, sorted.len()) - 1;
    Some(Duration::from_nanos(sorted[i]).as_secs_f64())
}

/// One user's requests as APF saw them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UserRow {
    pub user: String,
    pub flow_schema: String,
    pub priority_level: String,
    pub requests: u64,
    /// Answered 429: by APF, or by whatever else answered 429 on the way.
    pub rejected: u64,
    /// Requests with the queue-wait annotation, which the percentiles cover: kube-apiserver (1.31+) writes it only
    /// on requests slower than 500 ms in all that waited (k8s.io/apiserver `endpoints/filters/audit.go`).
    pub queue_waits: u64,
    pub queue_wait_p50_seconds: Option<f64>,
    pub queue_wait_p99_seconds: Option<f64>,
    /// Mean seconds a served request took, from receipt to response less its queue wait (WATCHes left out).
    pub seconds_per_request: Option<f64>,
    /// Most requests first.
    pub user_agents: Vec<String>,
    /// Who authenticated when the requests impersonated this user.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub impersonated_by: Vec<String>,
    /// RFC 3339, as the events spell it.
    pub first_rejection: Option<String>,
    pub last_rejection: Option<String>,
}

/// One flow's requests.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowRow {
    pub flow_schema: String,
    pub priority_level: String,
    /// The user or namespace; empty when the schema has no distinguisher or the level one queue or none.
    pub flow_distinguisher: String,
    pub requests: u64,
    pub rejected: u64,
    /// Served requests whose duration the events tell (WATCHes left out), and their mean seconds from receipt to
    /// response less the queue wait.
    pub served: u64,
    pub seconds_per_request: Option<f64>,
    /// LIST requests among `requests`.
    pub list_requests: u64,
    /// The flow's first request (with its user's groups), as APF matched it.
    #[serde(skip)]
    pub example: Option<crate::matching::Request>,
    /// Distinct users in the flow, told apart up to 100.
    pub users: u64,
    /// More users than `users` sent requests in the flow.
    pub more_users: bool,
    /// The users with the most requests in it, most first.
    pub top_users: Vec<String>,
}

/// A sliding window of ledgers: one per slice of `window / slices`, the slices that left the window dropped.
/// Times are seconds on any monotonic clock the caller keeps.
#[derive(Debug, Clone)]
pub struct Window {
    limits: Limits,
    window: f64,
    slice: f64,
    /// (start of the slice, its ledger), oldest first.
    slices: VecDeque<(f64, Ledger)>,
}

impl Window {
    /// `slices` ledgers of `limits` each: memory stays within `slices × limits.max_users` users and flows.
    pub fn new(window: Duration, slices: u32, limits: Limits) -> Self {
        let window = window.as_secs_f64().max(1e-3);
        Window {
            limits,
            window,
            slice: window / f64::from(slices.max(1)),
            slices: VecDeque::new(),
        }
    }

    /// The ledger of the slice that holds `now`, slices that left the window dropped.
    pub fn at(&mut self, now: f64) -> &mut Ledger {
        self.expire(now);
        let start = (now / self.slice).floor() * self.slice;
        let fresh = self.slices.back().is_none_or(|(s, _)| *s < start);
        if fresh {
            self.slices.push_back((start, Ledger::new(self.limits)));
        }
        let last = self.slices.len() - 1;
        &mut self.slices[last].1
    }

    /// Drops the slices that ended before the window that ends at `now` began.
    pub fn expire(&mut self, now: f64) {
        while let Some((start, _)) = self.slices.front() {
            if start + self.slice <= now - self.window {
                self.slices.pop_front();
            } else {
                break;
            }
        }
    }

    /// Seconds the merged slices cover at `now`: the window, and the part of the slice it begins in (slices are
    /// kept whole). Rates are their counts over this, not over the window alone, which would read up to a slice
    /// high.
    pub fn span(&self, now: f64) -> f64 {
        now - ((now - self.window) / self.slice).floor() * self.slice
    }

    /// Every slice in the window ending at `now`, merged (within the cap).
    pub fn merged(&mut self, now: f64) -> Ledger {
        self.expire(now);
        let mut all = Ledger::new(self.limits);
        for (_, l) in &self.slices {
            all.merge(l);
        }
        all
    }

    pub fn set_window(&mut self, window: Duration, slices: u32) {
        self.window = window.as_secs_f64().max(1e-3);
        self.slice = self.window / f64::from(slices.max(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matching::Target;
    use std::io::Read;

    fn request(user: &str, code: u16, wait_ms: Option<u64>, at: &str) -> AuditedRequest {
        AuditedRequest {
            user: user.into(),
            groups: crate::matching::implied_groups(user),
            impersonator: None,
            verb: "list".into(),
            target: Target::Resource {
                api_group: String::new(),
                resource: "pods".into(),
                subresource: None,
                namespace: None,
            },
            user_agent: format!("{user}-agent/1.0"),
            code,
            queue_wait: wait_ms.map(Duration::from_millis),
            timestamp: at.into(),
            received: at.into(),
        }
    }

    /// The default objects a 1.33 cluster serves (tests/fixtures, sources in SOURCES.md there).
    fn objects() -> (Vec<FlowSchema>, Vec<PriorityLevelConfig>) {
        let mut text = String::new();
        for kind in ["flowschemas", "prioritylevelconfigurations"] {
            let path = format!(
                "{}/../../tests/fixtures/defaults-1.33-{kind}.yaml.gz",
                env!("CARGO_MANIFEST_DIR")
            );
            let file = std::fs::File::open(path).unwrap();
            flate2::read::GzDecoder::new(file)
                .read_to_string(&mut text)
                .unwrap();
            text.push_str("\n---\n");
        }
        let o = crate::model::parse_flowcontrol_documents(&text).unwrap();
        (o.flow_schemas, o.priority_levels)
    }

    #[test]
    fn a_window_s_rates_cover_what_its_whole_slices_hold() {
        let w = Window::new(Duration::from_secs(60), 6, Limits::default());
        // Slices of 10 s, kept whole: at 65 s the oldest kept began at 0.
        assert_eq!(w.span(65.0), 65.0);
        assert_eq!(w.span(70.0), 60.0);
        assert_eq!(w.span(75.0), 65.0);
    }

    #[test]
    fn a_user_s_requests_take_their_time_less_their_queue_wait() {
        let (fs, pl) = objects();
        let mut l = Ledger::new(Limits::default());
        let agent = "system:serviceaccount:monitoring:agent";
        let mut r = request(agent, 200, Some(500), "2026-11-24T10:00:02.500000Z");
        r.received = "2026-11-24T10:00:00.000000Z".into();
        l.classify(&r, &fs, &pl).unwrap();
        let mut r = request(agent, 200, None, "2026-11-24T10:00:01.500000Z");
        r.received = "2026-11-24T10:00:01.000000Z".into();
        l.classify(&r, &fs, &pl).unwrap();
        // A 429 and a WATCH say nothing of how long a served request holds its seats.
        l.classify(
            &request(agent, 429, Some(15_000), "2026-11-24T10:00:20.000000Z"),
            &fs,
            &pl,
        )
        .unwrap();
        let mut watch = request(agent, 200, None, "2026-11-24T10:05:00.000000Z");
        watch.verb = "watch".into();
        watch.received = "2026-11-24T10:00:00.000000Z".into();
        l.classify(&watch, &fs, &pl).unwrap();
        let row = &l.users()[0];
        assert_eq!(row.requests, 4);
        // (2.5 - 0.5 + 0.5) / 2
        assert_eq!(row.seconds_per_request, Some(1.25));
    }

    #[test]
    fn counts_per_user_worst_first_with_exact_percentiles() {
        let (fs, pl) = objects();
        let mut l = Ledger::new(Limits {
            max_users: 100,
            keep_waits: true,
        });
        let agent = "system:serviceaccount:monitoring:agent";
        for i in 0..100u64 {
            let code = if i % 4 == 0 { 429 } else { 200 };
            let at = format!("2026-11-24T10:00:{:02}.000000Z", i % 60);
            l.classify(&request(agent, code, Some(i + 1), &at), &fs, &pl)
                .unwrap();
        }
        l.classify(
            &request("alice", 200, None, "2026-11-24T10:00:00.000000Z"),
            &fs,
            &pl,
        )
        .unwrap();
        let users = l.users();
        assert_eq!(users.len(), 2);
        let a = &users[0];
        assert_eq!(a.user, agent);
        assert_eq!(a.flow_schema, "service-accounts");
        assert_eq!(a.priority_level, "workload-low");
        assert_eq!((a.requests, a.rejected, a.queue_waits), (100, 25, 100));
        assert_eq!(a.queue_wait_p50_seconds, Some(0.050));
        assert_eq!(a.queue_wait_p99_seconds, Some(0.099));
        assert_eq!(
            a.first_rejection.as_deref(),
            Some("2026-11-24T10:00:00.000000Z")
        );
        // i = 56 is the latest second a rejection (every fourth request) fell on.
        assert_eq!(
            a.last_rejection.as_deref(),
            Some("2026-11-24T10:00:56.000000Z")
        );
        assert_eq!(users[1].user, "alice");
        assert_eq!(users[1].priority_level, "global-default");
        assert_eq!(users[1].queue_wait_p50_seconds, None);
        let flows = l.flows();
        // service-accounts distinguishes by user on workload-low, which has queues.
        assert_eq!(flows[0].flow_distinguisher, agent);
        assert_eq!(
            (flows[0].requests, flows[0].rejected, flows[0].users),
            (100, 25, 1)
        );
        assert_eq!(l.counts().requests, 101);
    }

    #[test]
    fn users_beyond_the_cap_are_counted_together() {
        let (fs, pl) = objects();
        let mut l = Ledger::new(Limits {
            max_users: 3,
            keep_waits: false,
        });
        for i in 0..10 {
            l.classify(&request(&format!("user-{i}"), 429, None, ""), &fs, &pl)
                .unwrap();
        }
        let users = l.users();
        assert_eq!(users.len(), 4);
        let other = users.iter().find(|u| u.user == OTHER_USERS).unwrap();
        assert_eq!(other.rejected, 7);
        assert_eq!(l.counts().overflow_requests, 7);
        assert_eq!(users.iter().map(|u| u.rejected).sum::<u64>(), 10);
        assert!(l.flows().len() <= 4);
        assert_eq!(l.flows().iter().map(|f| f.rejected).sum::<u64>(), 10);
    }

    #[test]
    fn a_flow_tells_apart_at_most_a_hundred_users() {
        let (fs, pl) = objects();
        let mut l = Ledger::new(Limits::default());
        for i in 0..150 {
            let user = format!("system:serviceaccount:kube-system:controller-{i}");
            l.classify(&request(&user, 200, None, ""), &fs, &pl)
                .unwrap();
        }
        // kube-system-service-accounts distinguishes by namespace: one flow.
        let flows = l.flows();
        assert_eq!(flows.len(), 1);
        assert_eq!(flows[0].flow_schema, "kube-system-service-accounts");
        assert_eq!(
            (flows[0].requests, flows[0].users, flows[0].more_users),
            (150, 100, true)
        );
        assert_eq!(l.users().len(), 150);
    }

    #[test]
    fn impersonated_requests_name_their_impersonator() {
        let (fs, pl) = objects();
        let mut l = Ledger::new(Limits::default());
        let mut r = request("system:serviceaccount:ci:runner", 429, None, "");
        r.impersonator = Some("admin".into());
        l.classify(&r, &fs, &pl).unwrap();
        assert_eq!(l.users()[0].impersonated_by, ["admin"]);
        assert_eq!(
            l.users()[0].user_agents,
            ["system:serviceaccount:ci:runner-agent/1.0"]
        );
    }

    /// A service account authenticated through a proxy (OpenShift's Prometheus scraping `/metrics`): its event
    /// records only `system:authenticated`, so APF matched no service-account group and it fell to
    /// global-default. Only an event that records no groups gets the service-account groups, and service-accounts.
    #[test]
    fn a_service_account_recorded_with_only_system_authenticated_is_global_default() {
        let (fs, pl) = objects();
        let event = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","requestURI":"/metrics","verb":"get","user":{"username":"system:serviceaccount:openshift-monitoring:prometheus-k8s","groups":["system:authenticated"]},"userAgent":"Prometheus/2.55.1","responseStatus":{"code":200}}"#;
        let classify = |event: &str| {
            let r = crate::parse::audit::parse_event(event.as_bytes())
                .unwrap()
                .unwrap();
            assert_eq!(
                r.target,
                Target::NonResource {
                    path: "/metrics".into()
                }
            );
            let m = Ledger::new(Limits::default())
                .classify(&r, &fs, &pl)
                .unwrap();
            (m.flow_schema, m.priority_level)
        };
        assert_eq!(
            classify(event),
            ("global-default".to_string(), "global-default".to_string())
        );
        let no_groups = event.replace(r#","groups":["system:authenticated"]"#, "");
        assert_eq!(
            classify(&no_groups),
            ("service-accounts".to_string(), "workload-low".to_string())
        );
    }

    #[test]
    fn a_window_forgets_what_left_it_and_stays_bounded() {
        let (fs, pl) = objects();
        let limits = Limits {
            max_users: 50,
            keep_waits: false,
        };
        let mut w = Window::new(Duration::from_secs(60), 6, limits);
        // A flood: 1000 distinct users a second for two minutes.
        for second in 0..120 {
            for u in 0..1000 {
                let r = request(&format!("u{u}-{second}"), 429, None, "");
                w.at(f64::from(second)).classify(&r, &fs, &pl).unwrap();
            }
        }
        assert!(w.slices.len() <= 7, "{}", w.slices.len());
        assert!(w.slices.iter().all(|(_, l)| l.users.len() <= 50 + 1));
        let merged = w.merged(120.0);
        assert!(merged.users.len() <= 51);
        // Slices starting at 60, 70, ..., 110: 60 s of 1000 rejections a second.
        assert_eq!(
            merged.users().iter().map(|u| u.rejected).sum::<u64>(),
            60_000
        );
        assert_eq!(merged.counts().requests, 60_000);
        // Nothing new for a while: everything expires.
        let empty = w.merged(1000.0);
        assert_eq!(empty.counts().requests, 0);
    }
}
