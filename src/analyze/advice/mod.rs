//! How fast each client may go (`apf-monitor advise`, `/api/v1/status` `clients`, `apf_flow_sustainable_*`): per
//! top flow of a replica, and per audited user, the seats its flow can count on, what its requests cost over the
//! window, the rate that sustains (`apf::advice`), and what it sends.
use std::collections::BTreeMap;

use serde::Serialize;

mod recommend;
mod spread;

pub use recommend::{ClientRecommendation, ReplicaRate};

use super::history::{level_counter, level_present, WindowPoint};
use super::{
    counter_increase, counter_rate, round, ApiserverReport, FlowReport, LevelReport, StatusReport,
};
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
    /// What the client sends to this replica: its flow schema's counters when its flow is alone there, else what the
    /// flow is served (Little's law over its seats held) plus its share of the schema's rejections; a user only
    /// audit events show (or sharing its flow): the audited rate spread by this replica's part of its flow schema.
    #[serde(serialize_with = "round::ratio")]
    pub observed_requests_per_second: Option<f64>,
    /// How the rate on this replica was told, where not by the replica's own counters and dumps: audit events carry
    /// no replica, so a user's audited rate is spread by each replica's share of its flow schema's requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_from: Option<String>,
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
            observed_from: self.observed_from.as_deref(),
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
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SchemaCost {
    /// Mean execution time of its requests other than WATCHes.
    pub seconds_per_request: Option<f64>,
    /// Mean estimated seats of its requests (1.24+).
    pub seats_per_request: Option<f64>,
    /// Requests dispatched, and rejected, per second.
    pub dispatched_per_second: Option<f64>,
    pub rejected_per_second: f64,
    /// How its arrivals moved over the window, where they came in bursts ([`crate::analyze::math::bursts`]):
    /// (seconds, multiple of the mean rate) scrape by scrape. Empty: as steady as a Poisson process.
    pub arrival_profile: Vec<(f64, f64)>,
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
    let present = level_present(points, level);
    last.flow_schemas_of(level)
        .map(|(schema, _)| {
            // Each point's totals looked up once: a window of 250 ms scrapes holds 240 points.
            let totals: Vec<Option<&FlowSchemaTotals>> = points
                .iter()
                .map(|p| p.flow_schema(level, schema))
                .collect();
            // Over the life of its level in the window (`level_counter`).
            let dispatched = (points.len() >= 2 && span > 0.0).then(|| {
                let values = totals.iter().map(|t| t.and_then(|t| t.dispatched_total));
                counter_rate(level_counter(points, &present, values))
            });
            let rejected: f64 = rejected_per_second
                .iter()
                .filter(|(l, s, _, _)| l == level && s == schema)
                .map(|(_, _, _, r)| r)
                .sum();
            // Arrivals scrape by scrape: kube-apiserver counts a request's estimated seats as it arrives, so
            // the histogram's count counts the rejected too.
            let arrivals: Vec<(f64, Option<f64>)> = points
                .iter()
                .zip(&totals)
                .map(|(p, t)| (p.at, t.and_then(|t| t.estimated_seats).map(|(_, n)| n)))
                .collect();
            let cost = SchemaCost {
                seconds_per_request: mean_over(&totals, |t| t.execution_seconds),
                seats_per_request: mean_over(&totals, |t| t.estimated_seats),
                dispatched_per_second: dispatched,
                rejected_per_second: rejected,
                arrival_profile: crate::analyze::math::bursts(&arrivals).unwrap_or_default(),
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
        .cloned()
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

/// What a flow sends on this replica, as the dumps and the flow schema's counters tell it: a flow alone in its
/// schema sends what the schema dispatched and rejected. Otherwise, what it has executing, by Little's law, is what
/// it is served: seats held / (seats x seconds per request) (1.28+ lists executing requests); its share of the
/// schema's waiting and executing (pressure) apportions the schema's rejections. Before 1.28, or with nothing
/// executing, that share apportions all of the schema's requests.
fn observed(flow: &FlowReport, cost: &SchemaCost, seats_per_request: Option<f64>) -> Option<f64> {
    let share = flow.schema_share?;
    // One scrape has no rates: what it rejects is not known, so neither is what it sends.
    let dispatched = cost.dispatched_per_second?;
    // Alone in its flow schema (as far as the dumps tell), the schema's counters are the flow's own.
    if share >= 1.0 - 1e-9 {
        return Some(dispatched + cost.rejected_per_second);
    }
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

/// Every client's advice in the report, per replica and worst first (observed over sustainable), with what the
/// audit events say of their users: their user agents, their rates spread over the replicas (audit events carry no
/// replica), and users no dump showed; then one recommendation per client. Sets each top flow's advice and the
/// report's `clients` and `recommendations`.
pub fn advise(report: &mut StatusReport) {
    let mut clients: Vec<ClientAdvice> = Vec::new();
    let audits = std::mem::take(&mut report.audit);
    let shares = spread::SchemaShares::of(&report.apiservers, &audits);
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
        let apiserver = a.apiserver.clone();
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
                    // A flow that is the user's alone: what this replica served and rejected of it is the user's
                    // rate here. Otherwise the audit events' rate, spread over the replicas.
                    let alone = u.user == flow.flow || flow.users.as_slice() == [u.user.as_str()];
                    if !(alone && advice.observed_requests_per_second.is_some()) {
                        let (rate, from) =
                            shares.spread(u, cluster.as_deref(), &apiserver, &level.priority_level);
                        advice.observed_requests_per_second = Some(rate);
                        advice.observed_from = Some(from);
                    }
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
    for audit in &audits {
        spread::unseen_users(report, audit, &shares, &mut clients);
    }
    report.audit = audits;
    sort_worst_first(&mut clients);
    report.recommendations = recommend::per_client(&clients);
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
mod tests;
