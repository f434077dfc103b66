//! One recommendation per client. A client's requests go to the replica its connection lands on (client-go keeps
//! one HTTP/2 connection per process), and each replica gives its own share: the setting that is safe wherever it
//! lands is what the tightest replica it was seen on sustains for it. It is a change to make only when the client
//! sends more than a replica's recommended rate; otherwise it is the ceiling the client stays within.
use serde::{Deserialize, Serialize};

use super::super::round;
use super::ClientAdvice;
use apf::advice::{self, ClientKind, ClientOverReplicas, OnReplica, Recommendation};

/// A client's rate on one replica it was seen on, and what its share there sustains.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ReplicaRate {
    pub apiserver: String,
    pub priority_level: String,
    #[serde(serialize_with = "round::ratio")]
    pub observed_requests_per_second: Option<f64>,
    #[serde(serialize_with = "round::ratio")]
    pub sustainable_requests_per_second: Option<f64>,
}

/// How one client should be set, whichever replica it lands on.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ClientRecommendation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// Who: the user, else the flow, else the flow schema (as its per-replica rows name it).
    pub client: String,
    pub user: Option<String>,
    pub user_agent: Option<String>,
    /// Every replica (and level) it was seen on.
    pub replicas: Vec<ReplicaRate>,
    /// What it sends over all of them, when known on each.
    #[serde(serialize_with = "round::ratio")]
    pub observed_requests_per_second: Option<f64>,
    /// The replica that sustains the least for it, and that replica's level and figures.
    pub tightest_apiserver: String,
    pub priority_level: String,
    #[serde(serialize_with = "round::ratio")]
    pub sustainable_requests_per_second: Option<f64>,
    #[serde(serialize_with = "round::ratio")]
    pub recommended_qps: Option<f64>,
    pub recommended_burst: u32,
    pub recommended_concurrency: u32,
    /// It sends more than a replica's recommended rate: the settings are a change to make. Otherwise they are a
    /// ceiling it stays within.
    pub change: bool,
    /// The client's settings as flags: `--kube-api-qps=4.3 --kube-api-burst=16`.
    pub flags: String,
    pub advice: String,
}

/// One recommendation per client of `clients` (worst first: the order of each client's worst row), from its rows
/// whose sustainable rate is known.
pub(super) fn per_client(clients: &[ClientAdvice]) -> Vec<ClientRecommendation> {
    let mut out: Vec<ClientRecommendation> = Vec::new();
    let mut rows: Vec<Vec<&ClientAdvice>> = Vec::new();
    // Each client's place in `out`: a fleet's report holds thousands of rows.
    let mut index: std::collections::HashMap<(Option<&str>, &str), usize> =
        std::collections::HashMap::new();
    for c in clients
        .iter()
        .filter(|c| c.sustainable_requests_per_second.is_some())
    {
        let key = (c.cluster.as_deref(), c.name());
        match index.get(&key) {
            Some(&i) => rows[i].push(c),
            None => {
                index.insert(key, out.len());
                out.push(ClientRecommendation {
                    cluster: c.cluster.clone(),
                    client: c.name().to_string(),
                    ..Default::default()
                });
                rows.push(vec![c]);
            }
        }
    }
    for (r, mut rows) in out.iter_mut().zip(rows) {
        rows.sort_by(|a, b| {
            a.apiserver
                .cmp(&b.apiserver)
                .then_with(|| a.priority_level.cmp(&b.priority_level))
        });
        fill(r, &rows);
    }
    out
}

/// Fills a client's recommendation from its rows (at least one, each with a sustainable rate).
fn fill(r: &mut ClientRecommendation, rows: &[&ClientAdvice]) {
    let sustainable = |c: &ClientAdvice| c.sustainable_requests_per_second.unwrap_or(f64::INFINITY);
    let Some(tightest) =
        (0..rows.len()).min_by(|a, b| sustainable(rows[*a]).total_cmp(&sustainable(rows[*b])))
    else {
        return;
    };
    let t = rows[tightest];
    let several_levels = rows
        .iter()
        .any(|c| c.priority_level != rows[0].priority_level);
    let labels: Vec<String> = rows
        .iter()
        .map(|c| {
            if several_levels {
                format!("{} in {}", c.apiserver, c.priority_level)
            } else {
                c.apiserver.clone()
            }
        })
        .collect();
    let user = rows.iter().find_map(|c| c.user.clone());
    let user_agent = rows.iter().find_map(|c| c.user_agent.clone());
    let name = match &r.cluster {
        Some(cluster) => format!("{} in cluster {cluster}", r.client),
        None => r.client.clone(),
    };
    let on: Vec<OnReplica<'_>> = rows
        .iter()
        .zip(&labels)
        .map(|(c, label)| OnReplica {
            replica: label,
            observed: c.observed_requests_per_second,
            sustainable: sustainable(c),
            recommendation: recommendation(c),
        })
        .collect();
    let over = ClientOverReplicas {
        kind: ClientKind::of(user.as_deref().unwrap_or(""), user_agent.as_deref()),
        name: &name,
        replicas: on,
        tightest,
        priority_level: &t.priority_level,
        lists: t.lists,
        seats_per_request: t.seats_per_request.unwrap_or(1.0),
        minor: t.minor,
    };
    r.change = over.needs_change();
    r.advice = advice::client_sentence(&over);
    r.flags = advice::rate_flag(&over.kind, &recommendation(t));
    let observed: Option<Vec<f64>> = rows
        .iter()
        .map(|c| c.observed_requests_per_second)
        .collect();
    r.observed_requests_per_second = observed.map(|o| o.iter().sum());
    r.replicas = rows
        .iter()
        .map(|c| ReplicaRate {
            apiserver: c.apiserver.clone(),
            priority_level: c.priority_level.clone(),
            observed_requests_per_second: c.observed_requests_per_second,
            sustainable_requests_per_second: c.sustainable_requests_per_second,
        })
        .collect();
    r.user = user;
    r.user_agent = user_agent;
    r.tightest_apiserver = t.apiserver.clone();
    r.priority_level = t.priority_level.clone();
    r.sustainable_requests_per_second = t.sustainable_requests_per_second;
    r.recommended_qps = t.recommended_qps;
    r.recommended_burst = t.recommended_burst;
    r.recommended_concurrency = t.recommended_concurrency;
}

/// A row's recommendation, as its advice computed it.
fn recommendation(c: &ClientAdvice) -> Recommendation {
    Recommendation {
        qps: c.recommended_qps.unwrap_or(0.0),
        burst: c.recommended_burst,
        concurrency: c.recommended_concurrency,
    }
}
