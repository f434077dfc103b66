//! How fast each client may go (`apf-monitor advise`, `/api/v1/status` `clients`, `apf_flow_sustainable_*`): per
//! top flow of a replica, and per audited user, the seats its flow can count on, what its requests cost over the
//! window, the rate that sustains (`apf::advice`), and what it sends.
use std::collections::BTreeMap;

use serde::Serialize;

use super::history::WindowPoint;
use super::{counter_increase, round, ApiserverReport, FlowReport, LevelReport, StatusReport};
use apf::advice::{self, ClientKind, ClientTerms};
use apf::model::FlowSchemaTotals;

/// How fast one client may go on one replica.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct ClientAdvice {
    pub apiserver: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    pub priority_level: String,
    pub flow_schema: String,
    /// The flow distinguisher (a user or a namespace; empty where the level has one queue); absent for a user known
    /// from audit events only.
    pub flow: Option<String>,
    /// The user, from audit events or the dumps' request details.
    pub user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_agent: Option<String>,
    /// The level's enforced limit, and the flows contending for it at the window's peak.
    #[serde(serialize_with = "round::seats")]
    pub limit_seats: Option<f64>,
    pub active_flows: u32,
    #[serde(serialize_with = "round::seats")]
    pub fair_share_seats: Option<f64>,
    #[serde(serialize_with = "round::ratio")]
    pub seats_per_request: Option<f64>,
    #[serde(serialize_with = "round::ratio")]
    pub seconds_per_request: Option<f64>,
    #[serde(serialize_with = "round::ratio")]
    pub sustainable_requests_per_second: Option<f64>,
    /// From audit events where the user is audited, else what the flow is served (Little's law over its seats held)
    /// plus its share of its flow schema's rejections.
    #[serde(serialize_with = "round::ratio")]
    pub observed_requests_per_second: Option<f64>,
    #[serde(serialize_with = "round::ratio")]
    pub recommended_qps: Option<f64>,
    pub recommended_burst: u32,
    pub recommended_concurrency: u32,
    pub advice: String,
    /// The flag a remediation ends with, e.g. `--kube-api-qps=160 --kube-api-burst=24`.
    #[serde(skip)]
    pub flag: String,
    /// What the sentence is rebuilt from when audit events name the client.
    #[serde(skip)]
    pub lists: bool,
    #[serde(skip)]
    pub minor: Option<u32>,
}

impl ClientAdvice {
    /// Observed over sustainable: how far above its share the client goes (`None` when either is unknown).
    pub fn pressure(&self) -> Option<f64> {
        let s = self.sustainable_requests_per_second?;
        let o = self.observed_requests_per_second?;
        (s > 0.0).then(|| o / s)
    }

    /// Above its share: sends more than the share sustains.
    pub fn above_share(&self) -> bool {
        self.pressure().is_some_and(|p| p > 1.0)
    }

    /// Who the advice names: the user, else the flow, else the flow schema.
    pub fn name(&self) -> &str {
        self.user
            .as_deref()
            .or(self.flow.as_deref().filter(|f| !f.is_empty()))
            .unwrap_or(&self.flow_schema)
    }

    /// Computes every figure and the sentence from the inputs set; figures whose inputs are unknown stay `None`.
    fn complete(mut self) -> Self {
        let (Some(limit), Some(seats), Some(seconds)) = (
            self.limit_seats,
            self.seats_per_request,
            self.seconds_per_request,
        ) else {
            self.advice = format!(
                "{}: {} not known on {}: no rate to advise",
                self.name(),
                if self.limit_seats.is_none() {
                    "the level's limit is"
                } else if self.seats_per_request.is_none() {
                    "the seats its requests hold are"
                } else {
                    "the time its requests take is"
                },
                self.apiserver
            );
            return self;
        };
        let share = advice::fair_share_seats(limit, self.active_flows);
        let Some(sustainable) = advice::sustainable_requests_per_second(share, seats, seconds)
        else {
            self.advice = format!(
                "{}: its requests cost no measurable seat-time on {}: no rate to advise",
                self.name(),
                self.apiserver
            );
            return self;
        };
        let r = advice::recommend(share, seats, sustainable);
        let kind = ClientKind::of(
            self.user.as_deref().unwrap_or(""),
            self.user_agent.as_deref(),
        );
        let replica = match &self.cluster {
            Some(c) => format!("{} in cluster {c}", self.apiserver),
            None => self.apiserver.clone(),
        };
        self.advice = advice::sentence(&ClientTerms {
            kind: kind.clone(),
            name: self.name(),
            replica: &replica,
            priority_level: &self.priority_level,
            limit_seats: limit,
            active_flows: self.active_flows,
            share_seats: share,
            seats_per_request: seats,
            seconds_per_request: seconds,
            sustainable,
            observed: self.observed_requests_per_second,
            recommendation: r,
            lists: self.lists,
            minor: self.minor,
        });
        self.flag = advice::rate_flag(&kind, &r);
        self.fair_share_seats = Some(share);
        self.sustainable_requests_per_second = Some(sustainable);
        self.recommended_qps = Some(r.qps);
        self.recommended_burst = r.burst;
        self.recommended_concurrency = r.concurrency;
        self
    }
}

/// What the requests of one flow schema cost on a replica over the window.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SchemaCost {
    /// Mean execution time of its requests other than WATCHes.
    pub seconds_per_request: Option<f64>,
    /// Mean estimated seats of its requests (1.24+).
    pub seats_per_request: Option<f64>,
    /// Requests dispatched, and rejected, per second.
    pub dispatched_per_second: Option<f64>,
    pub rejected_per_second: f64,
}

/// Mean of a (sum, count) pair over the points: its increase over the window, else since the replica started when
/// nothing was counted in the window (a quiet flow schema still tells what its requests cost).
fn mean_over(
    totals: &[Option<&FlowSchemaTotals>],
    pair: impl Fn(&FlowSchemaTotals) -> Option<(f64, f64)>,
) -> Option<f64> {
    let sum = counter_increase(totals.iter().map(|t| pair((*t)?).map(|x| x.0)));
    let count = counter_increase(totals.iter().map(|t| pair((*t)?).map(|x| x.1)));
    if count > 0.0 {
        return Some(sum / count);
    }
    let (sum, count) = totals.last().copied().flatten().and_then(pair)?;
    (count > 0.0).then(|| sum / count)
}

/// The cost of each flow schema of `level` over the window's points (with the baseline before it).
pub(super) fn schema_costs(
    points: &[&WindowPoint],
    span: f64,
    level: &str,
    rejected_per_second: &[(String, String, String, f64)],
) -> BTreeMap<String, SchemaCost> {
    let Some(last) = points.last() else {
        return BTreeMap::new();
    };
    last.flow_schemas_of(level)
        .map(|(schema, _)| {
            // Each point's totals looked up once: a window of 250 ms scrapes holds 240 points.
            let totals: Vec<Option<&FlowSchemaTotals>> = points
                .iter()
                .map(|p| p.flow_schema(level, schema))
                .collect();
            let dispatched = (points.len() >= 2 && span > 0.0)
                .then(|| counter_increase(totals.iter().map(|t| (*t)?.dispatched_total)) / span);
            let rejected: f64 = rejected_per_second
                .iter()
                .filter(|(l, s, _, _)| l == level && s == schema)
                .map(|(_, _, _, r)| r)
                .sum();
            let cost = SchemaCost {
                seconds_per_request: mean_over(&totals, |t| t.execution_seconds),
                seats_per_request: mean_over(&totals, |t| t.estimated_seats),
                dispatched_per_second: dispatched,
                rejected_per_second: rejected,
            };
            (schema.to_string(), cost)
        })
        .collect()
}

/// The most flows that contended for `level` in any dump of the window's points.
pub(super) fn peak_active_flows(points: &[&WindowPoint], level: &str) -> Option<u32> {
    points
        .iter()
        .filter_map(|p| p.level(level)?.active_flows())
        .max()
}

/// A top flow's advice, with what the dumps tell of it: its own seats per request, its share of its schema's
/// requests.
pub(super) fn of_flow(
    apiserver: &str,
    minor: Option<u32>,
    level: &LevelReport,
    flow: &FlowReport,
) -> ClientAdvice {
    let cost = level
        .flow_schema_costs
        .get(&flow.flow_schema)
        .copied()
        .unwrap_or_default();
    let seats_per_request = flow
        .seats_per_request
        .or(cost.seats_per_request)
        .or_else(|| minor.filter(|m| *m < 23).map(|_| 1.0));
    ClientAdvice {
        apiserver: apiserver.to_string(),
        priority_level: level.priority_level.clone(),
        flow_schema: flow.flow_schema.clone(),
        flow: Some(flow.flow.clone()),
        // A flow of one user is that user's.
        user: match flow.users.as_slice() {
            [only] => Some(only.clone()),
            _ => None,
        },
        limit_seats: level.limit_seats,
        active_flows: level.peak_active_flows.unwrap_or(1).max(1),
        seats_per_request,
        seconds_per_request: cost.seconds_per_request,
        observed_requests_per_second: observed(flow, &cost, seats_per_request),
        lists: flow
            .example_request
            .as_deref()
            .is_some_and(|e| e.starts_with("list ")),
        minor,
        ..Default::default()
    }
    .complete()
}

/// What a flow sends, as the dumps and the flow schema's counters tell it (audit events, where they name the user,
/// tell it exactly). What it has executing, by Little's law, is what it is served: seats held / (seats x seconds per
/// request) (1.28+ lists executing requests); its share of the schema's waiting and executing (pressure) apportions
/// the schema's rejections. Before 1.28, or with nothing executing, that share apportions all of the schema's
/// requests.
fn observed(flow: &FlowReport, cost: &SchemaCost, seats_per_request: Option<f64>) -> Option<f64> {
    let share = flow.schema_share?;
    // One scrape has no rates: what it rejects is not known, so neither is what it sends.
    let dispatched = cost.dispatched_per_second?;
    let served = match (seats_per_request, cost.seconds_per_request) {
        (Some(seats), Some(seconds)) if flow.executing_seats > 0.0 && seats * seconds > 0.0 => {
            Some(flow.executing_seats / (seats * seconds))
        }
        _ => None,
    };
    match served {
        Some(served) => Some(served + share * cost.rejected_per_second),
        None => Some(share * (dispatched + cost.rejected_per_second)),
    }
}

/// Every client's advice in the report, worst first (observed over sustainable), with what the audit events say of
/// their users: their request rates, their user agents, and users no dump showed. Sets each top flow's advice and
/// the report's `clients`.
pub fn advise(report: &mut StatusReport) {
    let mut clients: Vec<ClientAdvice> = Vec::new();
    let audits = std::mem::take(&mut report.audit);
    for a in &mut report.apiservers {
        // A report is shared with the analysis' state: copied only where it has advice to complete.
        let advised = a
            .levels
            .iter()
            .any(|l| l.top_flows.iter().any(|f| f.advice.is_some()));
        if !advised {
            continue;
        }
        let a = std::sync::Arc::make_mut(a);
        let cluster = a.cluster.clone();
        let audit = audits.iter().find(|r| r.cluster == cluster);
        for level in &mut a.levels {
            for flow in &mut level.top_flows {
                let Some(advice) = flow.advice.as_mut() else {
                    continue;
                };
                advice.cluster = cluster.clone();
                let audited = audit
                    .and_then(|r| r.level(&level.priority_level))
                    .and_then(|l| {
                        l.users.iter().find(|u| {
                            u.flow_schema == flow.flow_schema
                                && (u.user == flow.flow
                                    || flow.users.as_slice() == [u.user.as_str()])
                        })
                    });
                // The sentence names the replica with its cluster, and the audited user's own figures: rebuilt only
                // when either is there to add (the analysis built it without).
                let rebuild = audited.is_some() || cluster.is_some();
                if let Some(u) = audited {
                    advice.user = Some(u.user.clone());
                    advice.user_agent = u.user_agent.clone();
                    advice.observed_requests_per_second = Some(u.requests_per_second);
                    // The user's own durations over its flow schema's mean, where its events tell them.
                    if u.seconds_per_request.is_some() {
                        advice.seconds_per_request = u.seconds_per_request;
                    }
                }
                if rebuild {
                    *advice = std::mem::take(advice).complete();
                }
                clients.push(advice.clone());
            }
        }
    }
    // Audited users no dump showed: on the replica that classified them (else the first of their cluster).
    for audit in &audits {
        let replica = report
            .apiservers
            .iter()
            .find(|a| a.cluster == audit.cluster && Some(a.display_name()) == audit.classified_on)
            .or_else(|| {
                report
                    .apiservers
                    .iter()
                    .find(|a| a.cluster == audit.cluster && !a.levels.is_empty())
            });
        let Some(replica) = replica else {
            continue;
        };
        for al in &audit.levels {
            // An exempt level has no limit to share.
            let Some(level) = replica
                .levels
                .iter()
                .find(|l| l.priority_level == al.priority_level && l.limit_seats.is_some())
            else {
                continue;
            };
            for u in &al.users {
                let shown = clients.iter().any(|c| {
                    c.cluster == audit.cluster
                        && c.priority_level == al.priority_level
                        && c.user.as_deref() == Some(&u.user)
                });
                if shown {
                    continue;
                }
                let cost = level
                    .flow_schema_costs
                    .get(&u.flow_schema)
                    .copied()
                    .unwrap_or_default();
                let minor = replica.list_costs.minor;
                // Without dumps, the level's audited users are the flows that contended.
                let audited_flows =
                    u32::try_from(al.users.len() + al.users_not_shown).unwrap_or(u32::MAX);
                clients.push(
                    ClientAdvice {
                        apiserver: replica.apiserver.clone(),
                        cluster: replica.cluster.clone(),
                        priority_level: al.priority_level.clone(),
                        flow_schema: u.flow_schema.clone(),
                        flow: None,
                        user: Some(u.user.clone()),
                        user_agent: u.user_agent.clone(),
                        limit_seats: level.limit_seats,
                        active_flows: level.peak_active_flows.unwrap_or(audited_flows).max(1),
                        seats_per_request: cost
                            .seats_per_request
                            .or_else(|| minor.filter(|m| *m < 23).map(|_| 1.0)),
                        seconds_per_request: u.seconds_per_request.or(cost.seconds_per_request),
                        observed_requests_per_second: Some(u.requests_per_second),
                        minor,
                        ..Default::default()
                    }
                    .complete(),
                );
            }
        }
    }
    report.audit = audits;
    sort_worst_first(&mut clients);
    report.clients = clients;
}

/// Observed over sustainable, highest first; those without either last, by observed rate.
fn sort_worst_first(clients: &mut [ClientAdvice]) {
    clients.sort_by(|a, b| {
        let key = |c: &ClientAdvice| c.pressure().unwrap_or(-1.0);
        key(b)
            .total_cmp(&key(a))
            .then_with(|| {
                b.observed_requests_per_second
                    .unwrap_or(0.0)
                    .total_cmp(&a.observed_requests_per_second.unwrap_or(0.0))
            })
            .then_with(|| a.apiserver.cmp(&b.apiserver))
            .then_with(|| a.name().cmp(b.name()))
    });
}

/// The top flows of each level of a replica get their advice.
pub(super) fn advise_flows(report: &mut ApiserverReport) {
    let apiserver = report.apiserver.clone();
    let minor = report.list_costs.minor;
    for level in &mut report.levels {
        let advices: Vec<ClientAdvice> = level
            .top_flows
            .iter()
            .map(|f| of_flow(&apiserver, minor, level, f))
            .collect();
        for (flow, a) in level.top_flows.iter_mut().zip(advices) {
            flow.advice = Some(a);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::analyze::{Analysis, AuditLevel, AuditReport, AuditUser, Point, ReplicaHistory};
    use apf::model::{FlowSample, FlowSchemaTotals, LevelSnapshot, ReplicaSnapshot};

    /// workload-low of 100 seats; `n` scrapes 5 s apart in which service-accounts dispatches 10 requests/s of 2 s
    /// each (and 5 of them WATCHes nobody counts), and `flows` contend, the agent's requests 4 seats wide.
    fn history(flows: u32) -> ReplicaHistory {
        let mut h = ReplicaHistory::default();
        for k in 0..=12u32 {
            let t = f64::from(k) * 5.0;
            let mut level = LevelSnapshot {
                limit_seats: Some(100.0),
                executing_seats: Some(90.0),
                ..Default::default()
            };
            level.active_flows = Some(if k == 6 { flows } else { 1 });
            let mut snap = ReplicaSnapshot::default();
            snap.levels.insert("workload-low".into(), level);
            snap.flow_schemas.insert(
                ("workload-low".into(), "service-accounts".into()),
                FlowSchemaTotals {
                    dispatched_total: Some(10.0 * t),
                    execution_seconds: Some((20.0 * t, 10.0 * t)),
                    estimated_seats: Some((10.0 * t, 10.0 * t)),
                },
            );
            let agent = FlowSample {
                priority_level: "workload-low".into(),
                flow_schema: "service-accounts".into(),
                flow: "system:serviceaccount:monitoring:agent".into(),
                waiting_requests: 3,
                executing_seats: 60,
                listed_requests: 18,
                listed_seats: 72,
                users: vec!["system:serviceaccount:monitoring:agent".into()],
                example_request: Some("list pods".into()),
            };
            let ci = FlowSample {
                flow: "system:serviceaccount:ci:runner".into(),
                waiting_requests: 0,
                executing_seats: 21,
                listed_requests: 21,
                listed_seats: 21,
                users: vec!["system:serviceaccount:ci:runner".into()],
                ..agent.clone()
            };
            snap.flows = Some(vec![agent, ci]);
            h.push(Point {
                at: t,
                wall_time: String::new(),
                snapshot: Arc::new(snap),
            });
        }
        h
    }

    #[test]
    fn a_flow_is_told_what_its_share_sustains_and_what_it_sends() {
        let a = Analysis::default().analyze_replica("a", &history(4), 60.0);
        let flows = &a.levels[0].top_flows;
        let agent = flows[0].advice.as_ref().unwrap();
        // The peak of the window: 4 flows contended once.
        assert_eq!(agent.active_flows, 4);
        assert_eq!(agent.fair_share_seats, Some(25.0));
        // Its own rows: 72 seats for 18 requests; the flow schema's time, WATCHes left out.
        assert_eq!(agent.seats_per_request, Some(4.0));
        assert_eq!(agent.seconds_per_request, Some(2.0));
        assert_eq!(agent.sustainable_requests_per_second, Some(25.0 / 8.0));
        // Served, by Little's law: 60 seats held, 4 a request for 2 s; nothing rejected.
        let observed = agent.observed_requests_per_second.unwrap();
        assert!((observed - 7.5).abs() < 1e-9, "{observed}");
        assert!(agent.above_share());
        assert_eq!(agent.recommended_qps, Some(2.5));
        assert_eq!(agent.recommended_concurrency, 6);
        assert!(agent.flag.contains("--kube-api-qps=2.5"), "{}", agent.flag);
        // The other flow costs the schema's estimate: 1 seat.
        let ci = flows[1].advice.as_ref().unwrap();
        assert_eq!(ci.seats_per_request, Some(1.0));
        assert!(!ci.above_share());
    }

    #[test]
    fn audit_events_give_a_user_its_own_rate_and_name_users_no_dump_showed() {
        let a = Analysis::default().analyze_replica("a", &history(4), 60.0);
        let user = |name: &str, rps: f64| AuditUser {
            user: name.into(),
            flow_schema: "service-accounts".into(),
            requests_per_second: rps,
            user_agent: Some(format!("{}/1.0", name.rsplit(':').next().unwrap())),
            ..Default::default()
        };
        let mut report = StatusReport {
            apiservers: vec![a.into()],
            audit: vec![AuditReport {
                classified_on: Some("a".into()),
                levels: vec![AuditLevel {
                    priority_level: "workload-low".into(),
                    users: vec![
                        AuditUser {
                            seconds_per_request: Some(1.0),
                            ..user("system:serviceaccount:monitoring:agent", 12.0)
                        },
                        user("system:serviceaccount:crossplane-system:provider-aws", 80.0),
                    ],
                    users_not_shown: 0,
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        advise(&mut report);
        let names: Vec<&str> = report.clients.iter().map(|c| c.name()).collect();
        assert_eq!(
            names,
            [
                "system:serviceaccount:crossplane-system:provider-aws",
                "system:serviceaccount:monitoring:agent",
                "system:serviceaccount:ci:runner"
            ],
            "worst first"
        );
        let aws = &report.clients[0];
        assert_eq!(aws.flow, None, "no dump showed it");
        assert_eq!(aws.observed_requests_per_second, Some(80.0));
        // The schema's mean seats, the level's peak of flows.
        assert_eq!(aws.sustainable_requests_per_second, Some(25.0 / 2.0));
        assert!(
            aws.advice.contains("--max-concurrent-reconciles=25"),
            "{}",
            aws.advice
        );
        let agent = &report.clients[1];
        assert_eq!(
            agent.observed_requests_per_second,
            Some(12.0),
            "the audit events' own rate"
        );
        assert_eq!(agent.user_agent.as_deref(), Some("agent/1.0"));
        // The flow's advice in the report is the same one.
        assert_eq!(
            report.apiservers[0].levels[0].top_flows[0].advice.as_ref(),
            Some(agent)
        );
    }
}
