//! Folding the three debug dumps into a [`ReplicaSnapshot`] (k8s.io/apiserver `pkg/util/flowcontrol/apf_controller_debug.go`).
use std::borrow::Cow;
use std::collections::BTreeMap;

use super::{FlowSample, QueueSummary, ReplicaSnapshot};
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
    snap.flows = Some(flows.finish());
}

/// The flows of `dump_requests`, row by row as the dump is read (`parse::dump::fold_requests`): what a scrape keeps
/// of a dump of thousands of requests is its flows, not its rows.
#[derive(Default)]
pub struct FlowsBuilder<'t> {
    flows: BTreeMap<FlowKey<'t>, FlowSample>,
}

/// Priority level, flow schema, flow distinguisher, as the dump spells them.
type FlowKey<'t> = (Cow<'t, str>, Cow<'t, str>, Cow<'t, str>);

impl<'t> FlowsBuilder<'t> {
    pub fn add(&mut self, row: &RequestRow<'t>) {
        if row.is_phantom() {
            return;
        }
        let none = || Cow::Borrowed("");
        let key = (
            row.priority_level.clone(),
            row.flow_schema.clone().unwrap_or_else(none),
            row.flow_distinguisher.clone().unwrap_or_else(none),
        );
        let sample = self
            .flows
            .entry(key)
            .or_insert_with_key(|(level, fs, flow)| FlowSample {
                priority_level: level.to_string(),
                flow_schema: fs.to_string(),
                flow: flow.to_string(),
                ..Default::default()
            });
        if row.is_executing() {
            // Before 1.23 the dump has no seat columns: every request is one seat wide.
            sample.executing_seats += row
                .initial_seats
                .unwrap_or(1)
                .max(row.final_seats.unwrap_or(0));
        } else {
            sample.waiting_requests += 1;
        }
        if let Some(user) = &row.user_name {
            if sample.users.len() < USERS_PER_FLOW && !sample.users.iter().any(|u| u == user) {
                sample.users.push(user.to_string());
            }
        }
        if sample.example_request.is_none() {
            if let (Some(verb), Some(what)) =
                (&row.verb, row.resource.as_ref().or(row.api_path.as_ref()))
            {
                sample.example_request = Some(format!("{verb} {what}"));
            }
        }
    }

    /// The flows, ordered by priority level, flow schema and flow.
    pub fn finish(self) -> Vec<FlowSample> {
        self.flows.into_values().collect()
    }
}
