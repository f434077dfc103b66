//! Audit events carry no replica: a user's audited rate is spread over its cluster's replicas by each replica's
//! share of the user's flow schema (what the replica dispatched and rejected of it over the window), and the advice
//! says so.
use std::collections::BTreeMap;
use std::sync::Arc;

use super::super::{ApiserverReport, AuditReport, AuditUser, StatusReport};
use super::ClientAdvice;

/// What each replica of the audited clusters dispatched and rejected of each flow schema per second over the window
/// (where its counters tell it), keyed by (cluster, level, flow schema): owned, as the replicas' reports are
/// completed while it is read.
pub(super) struct SchemaShares {
    rates: BTreeMap<SchemaKey, Vec<(String, f64)>>,
}

/// (cluster, priority level, flow schema).
type SchemaKey = (Option<String>, String, String);

/// One replica's part of a flow schema's requests.
struct Part<'s> {
    apiserver: &'s str,
    share: f64,
}

impl SchemaShares {
    /// The rates of the replicas of the clusters `audits` cover (none without audit events: nothing to spread).
    pub(super) fn of(apiservers: &[Arc<ApiserverReport>], audits: &[AuditReport]) -> Self {
        let mut rates: BTreeMap<SchemaKey, Vec<(String, f64)>> = BTreeMap::new();
        for a in apiservers
            .iter()
            .filter(|a| audits.iter().any(|r| r.cluster == a.cluster))
        {
            for l in &a.levels {
                for (schema, cost) in &l.flow_schema_costs {
                    if let Some(d) = cost.dispatched_per_second {
                        rates
                            .entry((a.cluster.clone(), l.priority_level.clone(), schema.clone()))
                            .or_default()
                            .push((a.apiserver.clone(), d + cost.rejected_per_second));
                    }
                }
            }
        }
        Self { rates }
    }

    /// Each replica's share of what `flow_schema` of `level` dispatched and rejected in `cluster` over the window;
    /// empty when no replica's counters tell it (one scrape, or nothing counted).
    fn parts(&self, cluster: Option<&str>, level: &str, flow_schema: &str) -> Vec<Part<'_>> {
        let key = (
            cluster.map(str::to_string),
            level.to_string(),
            flow_schema.to_string(),
        );
        let Some(rates) = self.rates.get(&key) else {
            return Vec::new();
        };
        let total: f64 = rates.iter().map(|(_, r)| r).sum();
        if !(total > 0.0 && total.is_finite()) {
            return Vec::new();
        }
        rates
            .iter()
            .map(|(apiserver, r)| Part {
                apiserver,
                share: r / total,
            })
            .collect()
    }

    /// The audited user's rate on `apiserver`, and how it was told.
    pub(super) fn spread(
        &self,
        u: &AuditUser,
        cluster: Option<&str>,
        apiserver: &str,
        level: &str,
    ) -> (f64, String) {
        let parts = self.parts(cluster, level, &u.flow_schema);
        match parts.iter().find(|p| p.apiserver == apiserver) {
            Some(p) => (u.requests_per_second * p.share, told(u, p.share)),
            None if parts.is_empty() => (u.requests_per_second, whole(u, "no replica's counters")),
            None => (
                u.requests_per_second,
                whole(u, "this replica's counters tell no part"),
            ),
        }
    }
}

/// How a spread rate was told.
fn told(u: &AuditUser, share: f64) -> String {
    format!(
        "audit events: {} requests/s over the cluster, {:.0} % of them here by this replica's share of the requests \
         of flow schema {} (audit events name no replica)",
        apf::advice::shown(u.requests_per_second),
        share * 100.0,
        u.flow_schema
    )
}

/// How an unspread rate was told, and why it is not spread: `why` names whose counters of the flow schema did not
/// tell the split.
fn whole(u: &AuditUser, why: &str) -> String {
    format!(
        "audit events: {} requests/s over the whole cluster, not spread ({why} of flow schema {} over the window)",
        apf::advice::shown(u.requests_per_second),
        u.flow_schema
    )
}

/// Audited users of `audit`'s cluster no replica showed among a level's top flows: a row on every replica with a
/// part of their flow schema's requests, their rate spread by it; where no replica's counters tell the split, one
/// row with the whole rate, on the replica that classified them (else the first of their cluster).
pub(super) fn unseen_users(
    report: &StatusReport,
    audit: &AuditReport,
    shares: &SchemaShares,
    clients: &mut Vec<ClientAdvice>,
) {
    let cluster = audit.cluster.as_deref();
    let fallback = report
        .apiservers
        .iter()
        .find(|a| a.cluster == audit.cluster && Some(a.display_name()) == audit.classified_on)
        .or_else(|| {
            report
                .apiservers
                .iter()
                .find(|a| a.cluster == audit.cluster && !a.levels.is_empty())
        });
    for al in &audit.levels {
        // Without dumps, the level's audited users are the flows that contended.
        let audited_flows = u32::try_from(al.users.len() + al.users_not_shown).unwrap_or(u32::MAX);
        for u in &al.users {
            let parts = shares.parts(cluster, &al.priority_level, &u.flow_schema);
            let rows: Vec<(&ApiserverReport, f64, String)> = if parts.is_empty() {
                fallback
                    .map(|a| {
                        let why = "no replica's counters";
                        (&**a, u.requests_per_second, whole(u, why))
                    })
                    .into_iter()
                    .collect()
            } else {
                parts
                    .iter()
                    .filter(|p| p.share > 0.0)
                    .filter_map(|p| {
                        let replica = report
                            .apiservers
                            .iter()
                            .find(|a| a.cluster == audit.cluster && a.apiserver == p.apiserver)?;
                        Some((
                            &**replica,
                            u.requests_per_second * p.share,
                            told(u, p.share),
                        ))
                    })
                    .collect()
            };
            for (replica, rate, from) in rows {
                let shown = clients.iter().any(|c| {
                    c.cluster == audit.cluster
                        && c.apiserver == replica.apiserver
                        && c.priority_level == al.priority_level
                        && c.user.as_deref() == Some(&u.user)
                });
                // An exempt level has no limit to share.
                let level = replica
                    .levels
                    .iter()
                    .find(|l| l.priority_level == al.priority_level && l.limit_seats.is_some());
                let Some(level) = level.filter(|_| !shown) else {
                    continue;
                };
                let cost = level
                    .flow_schema_costs
                    .get(&u.flow_schema)
                    .cloned()
                    .unwrap_or_default();
                let minor = replica.list_costs.minor;
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
                        observed_requests_per_second: Some(rate),
                        observed_from: Some(from),
                        minor,
                        ..Default::default()
                    }
                    .complete(),
                );
            }
        }
    }
}
