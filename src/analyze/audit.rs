//! Who got the 429s in the window: the audited requests of a cluster, counted by [`apf::audit`], as the report
//! shows them: per priority level, the users with the most rejections (then the most requests), as rates over the
//! window.
use std::collections::BTreeMap;

use serde::Serialize;

use super::round;
use apf::audit::Ledger;

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
        }
    }

    /// The level's users, when any was audited.
    pub fn level(&self, priority_level: &str) -> Option<&AuditLevel> {
        self.levels
            .iter()
            .find(|l| l.priority_level == priority_level)
    }
}

impl AuditLevel {
    /// The users with rejections, most first: who suffers.
    pub fn rejected_users(&self) -> impl Iterator<Item = &AuditUser> {
        self.users.iter().filter(|u| u.rejected > 0)
    }
}
