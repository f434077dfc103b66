//! Who got the 429s in the window: the audited requests of a cluster, counted by [`apf::audit`], as the report
//! shows them: per priority level, the users with the most rejections (then the most requests), as rates over the
//! window.
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::round;
use apf::audit::Ledger;
use apf::model::FlowcontrolObjects;

/// Superseded objects are kept this long: a request is rarely classified longer before it is audited (a LIST runs
/// for up to a minute, a queued request waits up to 15 s).
const SUPERSEDED_KEPT: Duration = Duration::from_secs(300);
/// At most this many versions kept, however often the objects change.
const VERSIONS_KEPT: usize = 32;

/// The flowcontrol objects a cluster had in force over time, each from when apf-monitor saw it: a request is
/// classified on those in force when it came in (its `requestReceivedTimestamp`, about when APF classified it), so
/// that one queued before a change and rejected after it is blamed on the level that held it.
#[derive(Debug, Default)]
pub struct ObjectsInForce {
    versions: VecDeque<(SystemTime, Arc<FlowcontrolObjects>)>,
}

impl ObjectsInForce {
    /// `objects` are in force from `at` on, unless they are the newest already.
    pub fn note(&mut self, objects: &Arc<FlowcontrolObjects>, at: SystemTime) {
        let unchanged = self
            .versions
            .back()
            .is_some_and(|(_, newest)| Arc::ptr_eq(newest, objects) || **newest == **objects);
        if unchanged {
            return;
        }
        self.versions.push_back((at, Arc::clone(objects)));
        let keep_after = at
            .checked_sub(SUPERSEDED_KEPT)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        // The oldest goes once the next one has been in force long enough.
        while self.versions.len() > VERSIONS_KEPT
            || self
                .versions
                .get(1)
                .is_some_and(|(since, _)| *since < keep_after)
        {
            self.versions.pop_front();
        }
    }

    /// The objects in force when a request came in (RFC 3339; the newest when it does not read, the oldest kept
    /// when it came before them all).
    pub fn at(&self, received: &str) -> Option<&Arc<FlowcontrolObjects>> {
        let Ok(when) = humantime::parse_rfc3339_weak(received) else {
            return self.versions.back().map(|(_, o)| o);
        };
        self.versions
            .iter()
            .rev()
            .find(|(since, _)| *since <= when)
            .or(self.versions.front())
            .map(|(_, o)| o)
    }
}

/// One cluster's audited requests over the window (`/api/v1/status` `audit`, `apf_user_*`).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct AuditReport {
    /// The cluster the events belong to; absent for the only one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// Seconds the rates cover: the window, or the time since apf-monitor started while that is shorter.
    #[serde(serialize_with = "round::whole")]
    pub window_seconds: Option<f64>,
    /// The replica whose FlowSchemas classified the requests.
    pub classified_on: Option<String>,
    /// Requests counted in the window, and of them answered 429.
    pub requests: u64,
    pub rejected: u64,
    /// Requests counted under `(other users)` once `audit.max_users` was reached.
    pub overflow_requests: u64,
    /// Requests held until the cluster's FlowSchemas are read (the first rounds), not counted yet.
    pub pending_requests: u64,
    /// Requests no FlowSchema matched, on objects without a catch-all: not counted.
    pub unmatched_requests: u64,
    /// Levels with the most rejections first.
    pub levels: Vec<AuditLevel>,
    /// Per flow schema of each level, its flows: the load a prediction replays (not in the status API: a flow
    /// schema has as many flows as clients).
    #[serde(skip)]
    pub flow_schemas: Vec<AuditedSchema>,
}

/// The flows at most listed per flow schema in [`AuditedSchema::flows`]: a prediction replays each as a flow of
/// its own, the rest together.
pub const AUDITED_FLOWS_PER_SCHEMA: usize = 40;

/// What one flow schema of a level was sent, as the audit events of the window tell it: counts, not rates (audit
/// events name no replica: a replica's share of them is its own counters').
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditedSchema {
    pub priority_level: String,
    pub flow_schema: String,
    /// All its flows' requests, rejected and served (WATCHes left out of served), listed or not.
    pub requests: u64,
    pub rejected: u64,
    pub served: u64,
    /// Mean seconds a served request took, receipt to response less its queue wait.
    pub seconds_per_request: Option<f64>,
    pub list_requests: u64,
    /// Worst first (most 429s, then most requests), at most [`AUDITED_FLOWS_PER_SCHEMA`] (the flows past the
    /// ledger's cap, `(other flows)`, are never listed).
    pub flows: Vec<apf::audit::FlowRow>,
    /// Flows not listed.
    pub flows_not_listed: usize,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct AuditLevel {
    pub priority_level: String,
    /// Most rejections first, then most requests; at most `analysis.top_flows`.
    pub users: Vec<AuditUser>,
    /// Users of the level not listed.
    pub users_not_shown: usize,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct AuditUser {
    pub user: String,
    pub flow_schema: String,
    #[serde(serialize_with = "round::rate")]
    pub requests_per_second: f64,
    #[serde(serialize_with = "round::rate")]
    pub rejected_per_second: f64,
    /// Counts in the window.
    pub requests: u64,
    pub rejected: u64,
    /// The user agent with the most requests.
    pub user_agent: Option<String>,
    /// Mean seconds a served request took, receipt to response less its queue wait (rate advice).
    #[serde(serialize_with = "round::ratio")]
    pub seconds_per_request: Option<f64>,
    /// RFC 3339, as the event spells it.
    pub last_rejection: Option<String>,
}

impl AuditReport {
    /// The report of `ledger`, which covers `seconds`, with `top` users per level.
    pub fn of(ledger: &Ledger, seconds: f64, top: usize) -> Self {
        let mut levels: BTreeMap<String, AuditLevel> = BTreeMap::new();
        let per_second = |n: u64| {
            if seconds > 0.0 {
                n as f64 / seconds
            } else {
                0.0
            }
        };
        let mut rejected = 0;
        for u in ledger.users() {
            rejected += u.rejected;
            let level = levels
                .entry(u.priority_level.clone())
                .or_insert_with(|| AuditLevel {
                    priority_level: u.priority_level.clone(),
                    ..Default::default()
                });
            if level.users.len() >= top {
                level.users_not_shown += 1;
                continue;
            }
            level.users.push(AuditUser {
                requests_per_second: per_second(u.requests),
                rejected_per_second: per_second(u.rejected),
                requests: u.requests,
                rejected: u.rejected,
                user_agent: u.user_agents.first().cloned(),
                seconds_per_request: u.seconds_per_request,
                last_rejection: u.last_rejection,
                user: u.user,
                flow_schema: u.flow_schema,
            });
        }
        let mut levels: Vec<AuditLevel> = levels.into_values().collect();
        let level_rejected = |l: &AuditLevel| l.users.iter().map(|u| u.rejected).sum::<u64>();
        levels.sort_by(|a, b| {
            level_rejected(b)
                .cmp(&level_rejected(a))
                .then_with(|| a.priority_level.cmp(&b.priority_level))
        });
        let counts = ledger.counts();
        let flow_schemas = AuditedSchema::of(ledger);
        AuditReport {
            cluster: None,
            window_seconds: Some(seconds),
            classified_on: None,
            requests: counts.requests,
            rejected,
            overflow_requests: counts.overflow_requests,
            pending_requests: 0,
            unmatched_requests: counts.unmatched,
            levels,
            flow_schemas,
        }
    }

    /// What the audit events tell of `flow_schema`'s flows on `priority_level`.
    pub fn flow_schema(&self, priority_level: &str, flow_schema: &str) -> Option<&AuditedSchema> {
        self.flow_schemas
            .iter()
            .find(|s| s.priority_level == priority_level && s.flow_schema == flow_schema)
    }

    /// The level's users, when any was audited.
    pub fn level(&self, priority_level: &str) -> Option<&AuditLevel> {
        self.levels
            .iter()
            .find(|l| l.priority_level == priority_level)
    }
}

impl AuditedSchema {
    /// Every flow schema of every level of `ledger`, its flows worst first.
    fn of(ledger: &Ledger) -> Vec<AuditedSchema> {
        let mut schemas: BTreeMap<(String, String), AuditedSchema> = BTreeMap::new();
        for f in ledger.flows() {
            let s = schemas
                .entry((f.priority_level.clone(), f.flow_schema.clone()))
                .or_insert_with(|| AuditedSchema {
                    priority_level: f.priority_level.clone(),
                    flow_schema: f.flow_schema.clone(),
                    ..Default::default()
                });
            let seconds = s.seconds_per_request.unwrap_or(0.0) * s.served as f64
                + f.seconds_per_request.unwrap_or(0.0) * f.served as f64;
            s.requests += f.requests;
            s.rejected += f.rejected;
            s.served += f.served;
            s.seconds_per_request = (s.served > 0).then(|| seconds / s.served as f64);
            s.list_requests += f.list_requests;
            if s.flows.len() < AUDITED_FLOWS_PER_SCHEMA
                && f.flow_distinguisher != apf::audit::OTHER_FLOWS
            {
                s.flows.push(f);
            } else {
                s.flows_not_listed += 1;
            }
        }
        schemas.into_values().collect()
    }
}

impl AuditLevel {
    /// The users with rejections, most first: who suffers.
    pub fn rejected_users(&self) -> impl Iterator<Item = &AuditUser> {
        self.users.iter().filter(|u| u.rejected > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objects(level: &str) -> Arc<FlowcontrolObjects> {
        let object = serde_json::json!({"metadata": {"name": level}});
        Arc::new(FlowcontrolObjects {
            priority_levels: vec![apf::model::parse_priority_level_configuration(&object).unwrap()],
            flow_schemas: Vec::new(),
        })
    }

    fn at(rfc3339: &str) -> SystemTime {
        humantime::parse_rfc3339(rfc3339).unwrap()
    }

    #[test]
    fn a_request_is_classified_on_the_objects_in_force_when_it_came_in() {
        let mut history = ObjectsInForce::default();
        assert!(history.at("2026-11-24T10:00:00Z").is_none());
        let before = objects("workload-low");
        let after = objects("isolate-monitoring-agent");
        history.note(&before, at("2026-11-24T10:00:00Z"));
        // The same objects again (listed anew) are no new version.
        history.note(&objects("workload-low"), at("2026-11-24T10:00:30Z"));
        history.note(&after, at("2026-11-24T10:01:00Z"));
        let level = |received: &str| {
            history.at(received).unwrap().priority_levels[0]
                .name
                .clone()
        };
        // Queued before the change, rejected after it: the level that held it.
        assert_eq!(level("2026-11-24T10:00:59.999Z"), "workload-low");
        assert_eq!(level("2026-11-24T10:00:45Z"), "workload-low");
        assert_eq!(level("2026-11-24T10:01:00.5Z"), "isolate-monitoring-agent");
        // Before every version kept: the oldest; no time: the newest.
        assert_eq!(level("2026-11-24T09:00:00Z"), "workload-low");
        assert_eq!(level(""), "isolate-monitoring-agent");
    }

    #[test]
    fn superseded_objects_go_after_a_while() {
        let mut history = ObjectsInForce::default();
        history.note(&objects("a"), at("2026-11-24T10:00:00Z"));
        history.note(&objects("b"), at("2026-11-24T10:01:00Z"));
        history.note(&objects("c"), at("2026-11-24T10:10:00Z"));
        // "a" was superseded more than five minutes before "c" came: gone; "b" was in force until then: kept.
        assert_eq!(history.versions.len(), 2);
        let level = |received: &str| {
            history.at(received).unwrap().priority_levels[0]
                .name
                .clone()
        };
        assert_eq!(level("2026-11-24T10:00:30Z"), "b");
        for i in 0..40 {
            history.note(&objects(&format!("l{i}")), at("2026-11-24T10:10:01Z"));
        }
        assert_eq!(history.versions.len(), VERSIONS_KEPT);
    }
}
