//! Reading APF from a Prometheus instead of the replicas: Prometheus, Thanos, Mimir, Cortex, VictoriaMetrics and
//! the providers' managed ones (GKE, AKS, AMP) answer the same HTTP API (`/api/v1/query`, instant). A round asks one
//! query per family the model reads, plus one for the replicas' freshness, for every replica of every cluster the
//! selector matches: the number of queries does not grow with the replicas.
use std::collections::BTreeMap;
use std::time::Duration;

pub(crate) mod answer;
mod range;
pub mod shard;

use super::{classify_reqwest, ScrapeError};
use crate::targets::{PrometheusTarget, TargetError, TokenFile};
use answer::read_vector;
use apf::model::{ReplicaKey, ReplicaSnapshot};
pub use range::{read_range, resolution, Moment, STEPS_PER_QUERY};

/// Where and what to read, with the client that reads it.
#[derive(Clone)]
pub struct PrometheusSource {
    /// The name in apf-monitor's own metrics and errors (`targets.prometheus[].name`, else the URL's host:port).
    pub name: String,
    /// The API's base URL, e.g. `http://prometheus:9090` or a Thanos querier's.
    pub url: String,
    /// The series of the apiservers, e.g. `{job=~"apiserver|kube-apiserver"}`.
    pub selector: String,
    /// The label naming a series' cluster (absent: one cluster).
    pub cluster_label: String,
    /// The label naming a series' replica.
    pub apiserver_label: String,
    pub timeout: Duration,
    /// Replicas whose newest sample is older than this many seconds are left out (`None`: never).
    pub max_sample_age: Option<f64>,
    /// Read what each flow schema's requests cost (rate advice), which through a Prometheus names someone only
    /// with audit events: `rate_advice`, or set where audit files are read.
    pub flow_schema_costs: bool,
    /// Only some clusters (`shard`): the selector gets their matcher each round.
    pub shard: Option<shard::Shard>,
    client: reqwest::Client,
    token: Option<TokenFile>,
    headers: reqwest::header::HeaderMap,
}

impl std::fmt::Debug for PrometheusSource {
    // Neither the token nor the headers reach a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrometheusSource")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("selector", &self.selector)
            .finish()
    }
}

impl PrometheusSource {
    /// Builds the client of a configured source: its CA, token file and headers. `timeout` is `scrape.timeout`,
    /// unless the source sets its own.
    pub fn build(config: &PrometheusTarget, timeout: Duration) -> Result<Self, TargetError> {
        let name = config.display_name();
        let timeout = config.timeout.map_or(timeout, |t| t.0);
        let builder = crate::targets::client_builder(&name, timeout, config.ca_file.as_deref())?;
        let client = builder.build().map_err(|source| TargetError::Client {
            target: name.clone(),
            source,
        })?;
        // The config check refuses headers that do not parse; any left are skipped rather than sent malformed.
        let headers = config
            .headers
            .iter()
            .filter_map(|(k, v)| {
                Some((
                    reqwest::header::HeaderName::from_bytes(k.as_bytes()).ok()?,
                    reqwest::header::HeaderValue::from_str(v).ok()?,
                ))
            })
            .collect();
        Ok(Self {
            name,
            url: config.url.0.as_str().trim_end_matches('/').to_string(),
            selector: config.selector.clone(),
            cluster_label: config.cluster_label.clone(),
            apiserver_label: config.apiserver_label.clone(),
            timeout,
            max_sample_age: Some(config.max_sample_age.0.as_secs_f64()).filter(|a| *a > 0.0),
            flow_schema_costs: config.rate_advice,
            shard: config.shard.as_ref().and_then(shard::Shard::of),
            client,
            token: config.bearer_token_file.clone().map(TokenFile::new),
            headers,
        })
    }
}

/// What a Prometheus holds at one instant: a snapshot per replica it has fresh series of.
#[derive(Debug, Default)]
pub struct FleetRead {
    pub replicas: BTreeMap<ReplicaKey, ReplicaSnapshot>,
    /// Samples without the apiserver label: they cannot be told apart, so they are skipped.
    pub unlabelled: usize,
    /// Replicas whose newest sample is older than the age asked for (gone, but still inside the store's lookback):
    /// left out, not shown as current.
    pub stale: usize,
}

/// Every replica the source holds at `time` (unix seconds): the families the model reads, one query each, made
/// into the same snapshots a scrape of each replica gives. With `max_age`, a replica whose newest limit sample is
/// older than that many seconds is left out: a store answers a series for minutes after its last sample (the
/// lookback), where no staleness marker ended it (a restarted Prometheus, some remote-write paths).
pub async fn read_fleet(
    source: &PrometheusSource,
    time: f64,
    max_age: Option<f64>,
) -> Result<FleetRead, ScrapeError> {
    let ages = async {
        match max_age {
            Some(_) => newest_samples(source, time).await.map(Some),
            None => Ok(None),
        }
    };
    let wanted = apf::model::wanted_series(source.flow_schema_costs);
    let ((mut replicas, unlabelled), newest) =
        tokio::try_join!(snapshots(source, &wanted, time), ages)?;
    let before = replicas.len();
    if let (Some(max_age), Some(newest)) = (max_age, newest) {
        // A replica without any limit series has no age to judge by: kept.
        replicas.retain(|key, _| newest.get(key).is_none_or(|t| time - t <= max_age));
    }
    Ok(FleetRead {
        stale: before - replicas.len(),
        replicas,
        unlabelled,
    })
}

/// The unix time of each replica's newest limit sample at `time`.
async fn newest_samples(
    source: &PrometheusSource,
    time: f64,
) -> Result<BTreeMap<ReplicaKey, f64>, ScrapeError> {
    let (c, a) = (&source.cluster_label, &source.apiserver_label);
    // One `timestamp()` per family, joined with `or`: across families the series differ only by the name, which
    // `timestamp()` drops, and a vector holding two equal label sets is an error.
    let stamps = apf::model::limit_families()
        .iter()
        .map(|family| {
            selector_with(source, std::slice::from_ref(family))
                .map(|selector| format!("timestamp({selector})"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let query = format!("max by ({c}, {a}) ({})", stamps.join(" or "));
    let body = query_body(source, &query, time).await?;
    let mut newest = BTreeMap::new();
    read_vector(&body, |labels, value| {
        let find = |wanted: &str| {
            labels
                .iter()
                .find(|l| l.name == wanted)
                .map(|l| l.value.to_string())
        };
        if let Some(apiserver) = find(a) {
            let key = ReplicaKey {
                cluster: find(c),
                apiserver,
            };
            newest.insert(key, value);
        }
    })?;
    Ok(newest)
}

/// One replica of a round: its snapshot now and, when asked for, one window earlier.
#[derive(Debug)]
pub struct FleetReplica {
    pub key: ReplicaKey,
    /// The snapshot at `time - window`: with it a replica seen for the first time has rates, wait percentiles
    /// and a trend at once, from the same counters and the same derivations as later rounds.
    pub baseline: Option<ReplicaSnapshot>,
    pub snapshot: ReplicaSnapshot,
}

/// A round over one source.
#[derive(Debug, Default)]
pub struct FleetRound {
    pub replicas: Vec<FleetReplica>,
    pub unlabelled: usize,
    /// Replicas left out for samples older than the source's `max_sample_age`.
    pub stale: usize,
}

/// Every replica the source holds at `time` with samples no older than its `max_sample_age`, with a baseline
/// `window` seconds earlier for those `wants_baseline` picks (those without a history yet). A baseline that cannot be read is
/// left out (a later round brings rates); the round itself fails only when the read at `time` does.
pub async fn read_round(
    source: &PrometheusSource,
    time: f64,
    window_seconds: f64,
    wants_baseline: impl Fn(&ReplicaKey) -> bool,
) -> Result<FleetRound, ScrapeError> {
    // A shard reads its own clusters, as they are now (for the baseline too: the same replicas one window back).
    let scoped;
    let source = match &source.shard {
        Some(s) => match shard::scoped(source, s, time).await? {
            Some(narrowed) => {
                scoped = narrowed;
                &scoped
            }
            None => return Ok(FleetRound::default()),
        },
        None => source,
    };
    let now = read_fleet(source, time, source.max_sample_age).await?;
    let mut baselines = if now.replicas.keys().any(&wants_baseline) {
        match read_fleet(source, time - window_seconds, None).await {
            Ok(earlier) => earlier.replicas,
            Err(e) => {
                tracing::debug!(source = %source.name, error = %e, "no baseline one window back");
                BTreeMap::new()
            }
        }
    } else {
        BTreeMap::new()
    };
    Ok(FleetRound {
        replicas: now
            .replicas
            .into_iter()
            .map(|(key, snapshot)| FleetReplica {
                baseline: if wants_baseline(&key) {
                    baselines.remove(&key)
                } else {
                    None
                },
                key,
                snapshot,
            })
            .collect(),
        unlabelled: now.unlabelled,
        stale: now.stale,
    })
}

/// `{__name__=~"a|b", <the selector's matchers>}`: the selector with a name matcher added. `None` when the
/// selector is not matchers in braces (the config check refuses those).
pub fn with_names(selector: &str, names: &[String]) -> Option<String> {
    let alternation = names
        .iter()
        .map(|n| regex::escape(n))
        .collect::<Vec<_>>()
        .join("|");
    with_matcher(selector, &format!("__name__=~\"{alternation}\""))
}

/// `{<matcher>, <the selector's matchers>}`; `None` when the selector is not matchers in braces.
pub fn with_matcher(selector: &str, matcher: &str) -> Option<String> {
    let inner = selector.trim().strip_prefix('{')?.strip_suffix('}')?.trim();
    Some(if inner.is_empty() {
        format!("{{{matcher}}}")
    } else {
        format!("{{{matcher},{inner}}}")
    })
}

/// The most reserved up front for an answer from its announced length; a longer one grows as it comes.
const MAX_ANSWER_RESERVE: u64 = 64 << 20;

/// At most this many queries of a round in flight: the store evaluates them in parallel, and this process holds
/// only their answers while it folds each into the snapshots.
const QUERIES_IN_FLIGHT: usize = 8;

/// Every family in `series` at `time`, one query each: `sum by (cluster, apiserver, <the labels the model reads>)`
/// of the family's series, so the answer carries no label the model would sum away anyway, and its size follows the
/// replicas and levels, not the flow schemas or the scrape's own labels. Each answer is folded into the replicas'
/// snapshots as it comes (in query order), then dropped.
async fn snapshots(
    source: &PrometheusSource,
    series: &[(String, &[&str])],
    time: f64,
) -> Result<(BTreeMap<ReplicaKey, ReplicaSnapshot>, usize), ScrapeError> {
    use futures_util::StreamExt;
    let queries = family_queries(source, series)?;
    // Made before they are streamed: a future built inside the stream would borrow for any lifetime, which a
    // spawned task's future cannot prove Send for.
    let requests: Vec<_> = queries
        .into_iter()
        .map(|(name, q)| async move { query_body(source, &q, time).await.map(|body| (name, body)) })
        .collect();
    let mut answers = futures_util::stream::iter(requests).buffered(QUERIES_IN_FLIGHT);
    let mut fleet = apf::model::FleetBuilder::new(&source.cluster_label, &source.apiserver_label);
    while let Some(answer) = answers.next().await {
        let (name, body) = answer?;
        read_vector(&body, |labels, value| fleet.add(name, labels, value))?;
    }
    Ok(fleet.finish())
}

/// One query per family: `sum by (cluster, apiserver, <the labels the model reads>)` of its series in the selector.
fn family_queries<'s>(
    source: &PrometheusSource,
    series: &'s [(String, &[&str])],
) -> Result<Vec<(&'s String, String)>, ScrapeError> {
    series
        .iter()
        .map(|(name, labels)| {
            let by: Vec<&str> = [
                source.cluster_label.as_str(),
                source.apiserver_label.as_str(),
            ]
            .into_iter()
            .chain(labels.iter().copied())
            .collect();
            let selector = selector_with(source, std::slice::from_ref(name))?;
            Ok((name, format!("sum by ({}) ({selector})", by.join(", "))))
        })
        .collect()
}

/// The source's selector with a name matcher for `names`.
fn selector_with(source: &PrometheusSource, names: &[String]) -> Result<String, ScrapeError> {
    with_names(&source.selector, names).ok_or_else(|| not_in_braces(&source.selector))
}

/// What a selector that is not label matchers in braces gets (the config check refuses those first).
fn not_in_braces(selector: &str) -> ScrapeError {
    ScrapeError::Query(format!(
        "selector {selector:?}: expected label matchers in braces"
    ))
}

/// The body of an instant query's answer at `time` (unix seconds), within the source's timeout. A failed request
/// whose body is not an API answer (a proxy's page) is an HTTP error with an excerpt; an API answer, even a failed
/// one, is for [`read_vector`] to read.
async fn query_body(
    source: &PrometheusSource,
    query: &str,
    time: f64,
) -> Result<Vec<u8>, ScrapeError> {
    api_body(
        source,
        "query",
        &[("query", query.to_string()), ("time", format!("{time:.3}"))],
    )
    .await
}

/// The body of an answer of the HTTP API's `endpoint` (`query`, `query_range`) to the `form`.
async fn api_body(
    source: &PrometheusSource,
    endpoint: &str,
    form: &[(&str, String)],
) -> Result<Vec<u8>, ScrapeError> {
    let url = format!("{}/api/v1/{endpoint}", source.url);
    let mut request = source
        .client
        .post(&url)
        .timeout(source.timeout)
        .headers(source.headers.clone())
        .form(form);
    request = super::with_token(request, source.token.as_ref())?;
    let mut response = request
        .send()
        .await
        .map_err(|e| classify_reqwest(e, source.timeout))?;
    let status = response.status();
    // Into one buffer of the announced length: collecting the chunks and then joining them held each answer twice.
    let mut body = Vec::with_capacity(
        response
            .content_length()
            .map_or(0, |n| n.min(MAX_ANSWER_RESERVE) as usize),
    );
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| classify_reqwest(e, source.timeout))?
    {
        body.extend_from_slice(&chunk);
    }
    if !status.is_success() && matches!(read_vector(&body, |_, _| {}), Err(ScrapeError::Parse(_))) {
        return Err(ScrapeError::Http {
            status: status.as_u16(),
            detail: String::from_utf8_lossy(&body[..body.len().min(600)])
                .chars()
                .take(200)
                .collect::<String>()
                .trim()
                .replace('\n', " "),
        });
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selector_gets_a_name_matcher() {
        let names = vec!["a_b".to_string(), "c".to_string()];
        assert_eq!(
            with_names(r#"{job=~"apiserver|kube-apiserver"}"#, &names).unwrap_or_default(),
            r#"{__name__=~"a_b|c",job=~"apiserver|kube-apiserver"}"#
        );
        assert_eq!(
            with_names("{}", &names).as_deref(),
            Some(r#"{__name__=~"a_b|c"}"#)
        );
        assert_eq!(with_names("job=apiserver", &names), None);
    }
}
