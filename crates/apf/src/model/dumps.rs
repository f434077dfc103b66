//! Folding the three debug dumps into a [`ReplicaSnapshot`] (k8s.io/apiserver `pkg/util/flowcontrol/apf_controller_debug.go`).
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use smallvec::SmallVec;

use super::{flow_pressure, FlowSample, QueueSummary, ReplicaSnapshot};
use crate::parse::dump::{Dump, PriorityLevelRow, QueueRow, RequestRow};

/// How many user names a flow keeps for the report: enough to name who is behind it.
pub const USERS_PER_FLOW: usize = 3;

/// `dump_priority_levels` fills what `/metrics` did not say (the metrics win where both speak).
pub fn apply_priority_levels_dump(snap: &mut ReplicaSnapshot, dump: &Dump<PriorityLevelRow>) {
    for row in &dump.rows {
        let level = snap.level_mut(&row.priority_level);
        if level.inqueue_requests.is_none() {
            level.inqueue_requests = row.waiting_requests.map(|v| v as f64);
        }
        if level.executing_requests.is_none() {
            level.executing_requests = row.executing_requests.map(|v| v as f64);
        }
    }
}

/// `dump_queues`: per level, how many queues, how many hold requests, and the fullest one.
pub fn apply_queues_dump(snap: &mut ReplicaSnapshot, dump: &Dump<QueueRow>) {
    let mut per_level: BTreeMap<&str, QueueSummary> = BTreeMap::new();
    for row in &dump.rows {
        // Levels without queues print one all-`<none>` row up to 1.27 (exempt): no queue there.
        if row.index.is_none() {
            continue;
        }
        let summary = per_level.entry(row.priority_level.as_str()).or_default();
        let pending = row.pending_requests.unwrap_or(0);
        summary.queues += 1;
        summary.waiting_requests += pending;
        if pending > 0 {
            summary.active_queues += 1;
        }
        summary.fullest_queue_requests = summary.fullest_queue_requests.max(pending);
    }
    for (name, summary) in per_level {
        snap.level_mut(name).queues = Some(summary);
    }
}

/// `dump_requests`: one [`FlowSample`] per flow (flow schema + distinguisher) with its waiting requests and the
/// seats its executing requests hold (executing requests are listed from 1.28 only).
pub fn apply_requests_dump(snap: &mut ReplicaSnapshot, dump: &Dump<RequestRow<'_>>) {
    let mut flows = FlowsBuilder::default();
    for row in &dump.rows {
        flows.add(row);
    }
    let active = flows.active_flows();
    apply_flows(snap, flows.finish(None), &active);
}

/// The flows of a `dump_requests` into the snapshot, with each level's count of active flows (0 for a level the dump
/// lists no request of).
pub fn apply_flows(
    snap: &mut ReplicaSnapshot,
    flows: Vec<FlowSample>,
    active: &BTreeMap<String, u32>,
) {
    for (name, level) in snap.levels.iter_mut() {
        level.active_flows = Some(active.get(name).copied().unwrap_or(0));
    }
    snap.flows = Some(flows);
}

/// The flows of `dump_requests`, row by row as the dump is read (`parse::dump::RequestsReader`): what a scrape keeps
/// of a dump of thousands of requests is its flows, not its rows. The level and flow schema names are held once per
/// pair, not once per flow: a churning cluster's dump lists thousands of flows in a handful of pairs.
#[derive(Default)]
pub struct FlowsBuilder {
    groups: Vec<FlowGroup>,
    /// The group of the last row: a dump lists each level's requests together.
    last: usize,
    /// The example requests seen, each once: most flows' is one of a few (`list pods`).
    examples: Examples,
}

/// Strings held once, named by their index.
#[derive(Default)]
struct Examples {
    index: HashMap<Box<str>, u32>,
    /// The one being written, before it is looked up.
    scratch: String,
}

impl Examples {
    fn get(&mut self, verb: &str, what: &str) -> Option<u32> {
        self.scratch.clear();
        let _ = write!(self.scratch, "{verb} {what}");
        if let Some(i) = self.index.get(self.scratch.as_str()) {
            return Some(*i);
        }
        let i = u32::try_from(self.index.len()).ok()?;
        self.index.insert(self.scratch.as_str().into(), i);
        Some(i)
    }

    /// Each string at its index.
    fn by_index(&self) -> Vec<&str> {
        let mut names = vec![""; self.index.len()];
        for (name, i) in &self.index {
            names[*i as usize] = name;
        }
        names
    }
}

/// The flows of one priority level and flow schema.
struct FlowGroup {
    priority_level: String,
    flow_schema: String,
    /// By flow distinguisher.
    flows: HashMap<Box<str>, FlowTally>,
}

#[derive(Default)]
struct FlowTally {
    waiting_requests: u64,
    executing_seats: u64,
    listed_requests: u64,
    listed_seats: u64,
    /// Most flows have one user, and a by-user flow schema's flow is its user: held inline, not twice.
    users: SmallVec<[FlowUser<Box<str>>; 1]>,
    /// In the builder's examples.
    example_request: Option<u32>,
}

/// A user of a flow: the flow itself (a by-user flow schema's distinguisher is its user, held once), or another name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FlowUser<S> {
    TheFlow,
    Other(S),
}

impl<S: std::ops::Deref<Target = str>> FlowUser<S> {
    /// The user's name, given the flow's.
    pub fn name<'a>(&'a self, flow: &'a str) -> &'a str {
        match self {
            FlowUser::TheFlow => flow,
            FlowUser::Other(name) => name,
        }
    }
}

impl FlowTally {
    fn pressure(&self) -> f64 {
        // Exact: counts of requests and seats are far below 2^53.
        flow_pressure(self.waiting_requests as f64, self.executing_seats as f64)
    }
}

impl FlowsBuilder {
    pub fn add(&mut self, row: &RequestRow<'_>) {
        if row.is_phantom() {
            return;
        }
        let Self {
            groups,
            last,
            examples,
        } = self;
        let level = row.priority_level.as_ref();
        let schema = row.flow_schema.as_deref().unwrap_or("");
        let group = group(groups, last, level, schema);
        let flow = row.flow_distinguisher.as_deref().unwrap_or("");
        let tally = match group.flows.get_mut(flow) {
            Some(t) => t,
            None => group.flows.entry(flow.into()).or_default(),
        };
        // Before 1.23 the dump has no seat columns: every request is one seat wide.
        let seats = row
            .initial_seats
            .unwrap_or(1)
            .max(row.final_seats.unwrap_or(0));
        tally.listed_requests += 1;
        tally.listed_seats = tally.listed_seats.saturating_add(seats);
        if row.is_executing() {
            tally.executing_seats = tally.executing_seats.saturating_add(seats);
        } else {
            tally.waiting_requests += 1;
        }
        if let Some(user) = row.user_name.as_deref() {
            if tally.users.len() < USERS_PER_FLOW
                && !tally.users.iter().any(|u| u.name(flow) == user)
            {
                tally.users.push(if user == flow {
                    FlowUser::TheFlow
                } else {
                    FlowUser::Other(user.into())
                });
            }
        }
        if tally.example_request.is_none() {
            if let (Some(verb), Some(what)) =
                (&row.verb, row.resource.as_ref().or(row.api_path.as_ref()))
            {
                tally.example_request = examples.get(verb, what);
            }
        }
    }

    /// Flows per priority level: every flow the dump lists has a request waiting or executing.
    pub fn active_flows(&self) -> BTreeMap<String, u32> {
        let mut active: BTreeMap<String, u32> = BTreeMap::new();
        for g in &self.groups {
            let n = u32::try_from(g.flows.len()).unwrap_or(u32::MAX);
            let count = active.entry(g.priority_level.clone()).or_default();
            *count = count.saturating_add(n);
        }
        active
    }

    /// The flows, ordered by priority level, flow schema and flow; with `per_schema`, only that many of each level
    /// and flow schema, those putting the most pressure on the level (waiting requests plus seats; ties by flow).
    pub fn finish(self, per_schema: Option<usize>) -> Vec<FlowSample> {
        let mut out = Vec::new();
        let Self {
            groups, examples, ..
        } = self;
        let examples = examples.by_index();
        for group in groups {
            let mut flows: Vec<(Box<str>, FlowTally)> = group.flows.into_iter().collect();
            if let Some(keep) = per_schema.filter(|k| *k < flows.len()) {
                let most_pressure = |a: &(Box<str>, FlowTally), b: &(Box<str>, FlowTally)| {
                    b.1.pressure()
                        .total_cmp(&a.1.pressure())
                        .then_with(|| a.0.cmp(&b.0))
                };
                flows.select_nth_unstable_by(keep, most_pressure);
                flows.truncate(keep);
            }
            out.extend(flows.into_iter().map(|(flow, t)| {
                FlowSample {
                    priority_level: group.priority_level.clone(),
                    flow_schema: group.flow_schema.clone(),
                    users: t.users.iter().map(|u| u.name(&flow).to_string()).collect(),
                    example_request: t
                        .example_request
                        .and_then(|i| examples.get(i as usize))
                        .map(|e| e.to_string()),
                    flow: flow.into(),
                    waiting_requests: t.waiting_requests,
                    executing_seats: t.executing_seats,
                    listed_requests: t.listed_requests,
                    listed_seats: t.listed_seats,
                }
            }));
        }
        out.sort_unstable_by(|a, b| {
            (&a.priority_level, &a.flow_schema, &a.flow).cmp(&(
                &b.priority_level,
                &b.flow_schema,
                &b.flow,
            ))
        });
        out
    }
}

/// The group of `level` and `schema`, made when new; `last` is the one of the row before.
fn group<'g>(
    groups: &'g mut Vec<FlowGroup>,
    last: &mut usize,
    level: &str,
    schema: &str,
) -> &'g mut FlowGroup {
    let same = |g: &FlowGroup| g.priority_level == level && g.flow_schema == schema;
    if !groups.get(*last).is_some_and(same) {
        *last = match groups.iter().position(same) {
            Some(i) => i,
            None => {
                groups.push(FlowGroup {
                    priority_level: level.to_string(),
                    flow_schema: schema.to_string(),
                    flows: HashMap::new(),
                });
                groups.len() - 1
            }
        };
    }
    &mut groups[*last]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::dump::fold_requests;

    /// The flows of a 1.28+ `dump_requests` with request details.
    fn flows(rows: &[&str], per_schema: Option<usize>) -> Vec<FlowSample> {
        let mut text = String::from(
            "PriorityLevelName, FlowSchemaName, QueueIndex, RequestIndexInQueue, FlowDistingsher, ArriveTime, \
             InitialSeats, FinalSeats, AdditionalLatency, StartTime, UserName, Verb, APIPath, Namespace, Name, \
             APIVersion, Resource, SubResource\n",
        );
        for r in rows {
            text.push_str(r);
            text.push('\n');
        }
        let mut b = FlowsBuilder::default();
        let stats = fold_requests(&text, |row| b.add(&row)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(stats.invalid_rows, 0);
        b.finish(per_schema)
    }

    /// A waiting request of `flow` (in queue position `at`; -1 executing, holding `seats`).
    fn row(level: &str, flow: &str, at: i32, seats: u32) -> String {
        format!("{level}, sa, 0, {at}, {flow}, t, {seats}, 0, 0s, t, {flow}, list, /api/v1/pods, , , v1, pods,")
    }

    fn names(flows: &[FlowSample]) -> Vec<(&str, &str, u64, u64)> {
        flows
            .iter()
            .map(|f| {
                (
                    f.priority_level.as_str(),
                    f.flow.as_str(),
                    f.waiting_requests,
                    f.executing_seats,
                )
            })
            .collect()
    }

    #[test]
    fn a_level_and_flow_schema_keeps_the_flows_with_most_pressure() {
        let rows = [
            row("low", "dave", 0, 1),
            row("low", "carol", 0, 1),
            row("high", "erin", 0, 1),
            row("low", "alice", 0, 1),
            row("low", "bob", -1, 5),
            row("low", "alice", 1, 1),
            row("low", "alice", 2, 1),
        ];
        let rows: Vec<&str> = rows.iter().map(String::as_str).collect();
        let all = flows(&rows, None);
        assert_eq!(
            names(&all),
            [
                ("high", "erin", 1, 0),
                ("low", "alice", 3, 0),
                ("low", "bob", 0, 5),
                ("low", "carol", 1, 0),
                ("low", "dave", 1, 0)
            ],
            "ordered by level, flow schema and flow"
        );
        assert_eq!(all[1].users, ["alice"], "a user once however many requests");
        assert_eq!(all[1].example_request.as_deref(), Some("list pods"));
        // Seats held weigh like requests waiting; carol and dave tie, carol comes first by name.
        assert_eq!(
            names(&flows(&rows, Some(3))),
            [
                ("high", "erin", 1, 0),
                ("low", "alice", 3, 0),
                ("low", "bob", 0, 5),
                ("low", "carol", 1, 0)
            ]
        );
        assert_eq!(
            names(&flows(&rows, Some(1))),
            [("high", "erin", 1, 0), ("low", "bob", 0, 5)]
        );
        assert_eq!(flows(&rows, Some(5)), all);
    }

    #[test]
    fn a_flow_counts_its_requests_and_their_seats_and_a_level_its_active_flows() {
        let rows = [
            row("low", "alice", 0, 3),
            row("low", "alice", -1, 5),
            row("low", "bob", 0, 1),
            row("high", "erin", -1, 2),
        ];
        let rows: Vec<&str> = rows.iter().map(String::as_str).collect();
        let all = flows(&rows, None);
        let alice = all.iter().find(|f| f.flow == "alice").unwrap();
        // A waiting request's seats count as what it will hold, an executing one's as what it holds.
        assert_eq!((alice.listed_requests, alice.listed_seats), (2, 8));
        let mut text = String::from(
            "PriorityLevelName, FlowSchemaName, QueueIndex, RequestIndexInQueue, FlowDistingsher, ArriveTime, \
             InitialSeats, FinalSeats, AdditionalLatency, StartTime, UserName, Verb, APIPath, Namespace, Name, \
             APIVersion, Resource, SubResource\n",
        );
        for r in &rows {
            text.push_str(r);
            text.push('\n');
        }
        let mut b = FlowsBuilder::default();
        fold_requests(&text, |row| b.add(&row)).unwrap();
        let active = b.active_flows();
        assert_eq!(active.get("low"), Some(&2));
        assert_eq!(active.get("high"), Some(&1));
        let mut snap = ReplicaSnapshot::default();
        snap.level_mut("low");
        snap.level_mut("idle");
        apply_flows(&mut snap, b.finish(None), &active);
        assert_eq!(snap.levels["low"].active_flows, Some(2));
        assert_eq!(
            snap.levels["idle"].active_flows,
            Some(0),
            "read, and none listed"
        );
        assert!(
            !snap.levels.contains_key("high"),
            "no level made from the dump"
        );
    }

    #[test]
    fn a_flow_keeps_its_users_in_the_order_seen_and_its_first_example() {
        // A by-namespace flow: its users are not its distinguisher, except one named like it.
        let user = |u: &str, verb: &str| {
            format!(
                "low, sa, 0, 0, team-a, t, 1, 0, 0s, t, {u}, {verb}, /api/v1/pods, , , v1, pods,"
            )
        };
        let rows = [
            user("bob", "watch"),
            user("team-a", "list"),
            user("bob", "list"),
            user("carol", "get"),
            user("dave", "get"),
        ];
        let rows: Vec<&str> = rows.iter().map(String::as_str).collect();
        let all = flows(&rows, None);
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].users, ["bob", "team-a", "carol"]);
        assert_eq!(all[0].example_request.as_deref(), Some("watch pods"));
        assert_eq!(all[0].waiting_requests, 5);
    }
}
