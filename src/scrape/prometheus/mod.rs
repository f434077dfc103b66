//! Reading APF from a Prometheus instead of the replicas: Prometheus, Thanos, Mimir, Cortex, VictoriaMetrics and
//! the providers' managed ones (GKE, AKS, AMP) answer the same HTTP API (`/api/v1/query`, instant). A round asks one
//! query per family the model reads, plus one for the replicas' freshness, for every replica of every cluster the
//! selector matches: the number of queries does not grow with the replicas.
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub(crate) mod answer;
mod range;
pub mod shard;

use super::{classify_reqwest, ScrapeError};
use crate::targets::{PrometheusTarget, TargetError, TokenFile};
use answer::Answer;
use apf::model::{Family, ReplicaKey, ReplicaSnapshot};
use apf::parse::api_answer::ResultType;
use apf::parse::exposition::Label;
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
    object_counts: bool,
) -> Result<FleetRead, ScrapeError> {
    let ages = async {
        match max_age {
            Some(_) => newest_samples(source, time).await.map(Some),
            None => Ok(None),
        }
    };
    let mut wanted = apf::model::wanted_series(source.flow_schema_costs);
    if !object_counts {
        wanted.retain(|(name, _)| !apf::model::is_object_count(name));
    }
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
    let mut newest = BTreeMap::new();
    instant_query(source, &query, time, |labels, value| {
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
    })
    .await?;
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

/// How often the replicas' object counts (`apiserver_resource_objects`, its size estimate, or
/// `apiserver_storage_objects`: what a LIST reads) are read: kube-apiserver counts them once per
/// `--etcd-count-metric-poll-period`, a minute by default, and they are about a third of a round's bytes.
pub const OBJECT_COUNTS_EVERY_SECONDS: f64 = 60.0;

/// Objects or bytes by resource, shared by the snapshots of the rounds between two reads.
type Counted = Arc<BTreeMap<String, f64>>;

/// Each replica's object counts, as last read: the rounds between two reads carry them on.
#[derive(Debug, Default)]
pub struct ObjectCounts {
    /// The time of the last round that set out to read them (unix seconds).
    attempted_at: Option<f64>,
    /// The time of the last round that read them.
    read_at: Option<f64>,
    /// A round found a replica with none carried.
    missing: bool,
    /// Each replica's objects and their sizes, by resource.
    by_replica: BTreeMap<ReplicaKey, (Counted, Counted)>,
}

impl ObjectCounts {
    /// Whether the round at `time` reads them: a minute after the last attempt, or at once for a replica none
    /// were read for, unless that last attempt did not end (a round that timed out: the rounds go on without).
    fn due(&self, time: f64) -> bool {
        match self.attempted_at {
            None => true,
            // A clock set back reads them too.
            Some(at) if time - at >= OBJECT_COUNTS_EVERY_SECONDS || time < at => true,
            Some(_) => self.missing && self.read_at == self.attempted_at,
        }
    }

    /// Keeps the counts of a round that read them, or gives the replicas of one that did not those last read.
    fn carry(
        &mut self,
        replicas: &mut BTreeMap<ReplicaKey, ReplicaSnapshot>,
        read: bool,
        time: f64,
    ) {
        if read {
            self.read_at = Some(time);
            self.attempted_at = Some(time);
            self.missing = false;
            self.by_replica = replicas
                .iter()
                .map(|(key, s)| {
                    let counts = (s.resource_objects.clone(), s.resource_size_bytes.clone());
                    (key.clone(), counts)
                })
                .collect();
            return;
        }
        for (key, snapshot) in replicas.iter_mut() {
            match self.by_replica.get(key) {
                Some((objects, bytes)) => {
                    snapshot.resource_objects = objects.clone();
                    snapshot.resource_size_bytes = bytes.clone();
                }
                None => self.missing = true,
            }
        }
    }
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
/// left out (a later round brings rates); the round itself fails only when the read at `time` does. The object
/// counts are read when `counts` says they are due, else carried on from it.
pub async fn read_round(
    source: &PrometheusSource,
    time: f64,
    window_seconds: f64,
    wants_baseline: impl Fn(&ReplicaKey) -> bool,
    counts: &mut ObjectCounts,
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
    let read_counts = counts.due(time);
    if read_counts {
        counts.attempted_at = Some(time);
    }
    let mut now = read_fleet(source, time, source.max_sample_age, read_counts).await?;
    counts.carry(&mut now.replicas, read_counts, time);
    // A baseline gives rates: object counts are no rate.
    let mut baselines = if now.replicas.keys().any(&wants_baseline) {
        match read_fleet(source, time - window_seconds, None, false).await {
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

/// At most this many queries of a round in flight: the store evaluates them in parallel, and this process holds
/// one series of each while it folds their samples into the snapshots.
const QUERIES_IN_FLIGHT: usize = 8;

/// What the answers of a round's queries bring, by query: the HTTP status and content type, a chunk of the body,
/// its end.
enum Part {
    Status(u16, Option<String>),
    Chunk(bytes::Bytes),
    End,
}

/// Every family in `series` at `time`, one query each: `sum by (cluster, apiserver, <the labels the model reads>)`
/// of the family's series, so the answer carries no label the model would sum away anyway, and its size follows the
/// replicas and levels, not the flow schemas or the scrape's own labels. The answers' chunks are folded into the
/// replicas' snapshots as they come, whichever query they answer: no answer is held whole.
async fn snapshots(
    source: &PrometheusSource,
    series: &[(String, &[&str])],
    time: f64,
) -> Result<(BTreeMap<ReplicaKey, ReplicaSnapshot>, usize), ScrapeError> {
    use futures_util::StreamExt;
    let queries = family_queries(source, series)?;
    // Boxed before they are merged: a stream built inside the merge would borrow for any lifetime, which a spawned
    // task's future cannot prove Send for.
    let parts: Vec<_> = queries
        .iter()
        .enumerate()
        .map(|(i, (_, q))| {
            answer_parts(source, "query", instant_form(q, time)).map(move |p| (i, p))
        })
        .map(StreamExt::boxed)
        .collect();
    let mut parts = futures_util::stream::iter(parts).flatten_unordered(QUERIES_IN_FLIGHT);
    let mut answers: Vec<Option<Answer>> = queries.iter().map(|_| None).collect();
    let mut fleet = apf::model::FleetBuilder::new(&source.cluster_label, &source.apiserver_label);
    // Each answer's family, named once.
    let families: Vec<Option<Family>> = queries.iter().map(|(name, _)| Family::of(name)).collect();
    while let Some((i, part)) = parts.next().await {
        let family = families[i];
        let mut each = |labels: &[Label<'_>], _: f64, value: f64| {
            if let Some(family) = family {
                fleet.add(family, labels, value)
            }
        };
        match part? {
            Part::Status(status, content_type) => {
                answers[i] = Some(Answer::new(ResultType::Vector, status, content_type))
            }
            Part::Chunk(chunk) => {
                if let Some(answer) = &mut answers[i] {
                    answer.feed(&chunk, &mut each);
                }
            }
            Part::End => {
                if let Some(answer) = answers[i].take() {
                    answer.finish(&mut each)?;
                }
            }
        }
    }
    Ok(fleet.finish())
}

/// An answer of the HTTP API's `endpoint` to the `form`, as its parts come.
fn answer_parts<'s>(
    source: &'s PrometheusSource,
    endpoint: &'static str,
    form: Vec<(&'static str, String)>,
) -> impl futures_util::Stream<Item = Result<Part, ScrapeError>> + Send + 's {
    use futures_util::{stream, StreamExt};
    let timeout = source.timeout;
    stream::once(async move { send(source, endpoint, &form).await })
        .map(move |sent| match sent {
            Ok(response) => {
                let status = response.status().as_u16();
                let content_type = content_type(&response);
                let body = stream::unfold(Some(response), move |response| async move {
                    let mut response = response?;
                    Some(match response.chunk().await {
                        Ok(Some(chunk)) => (Ok(Part::Chunk(chunk)), Some(response)),
                        Ok(None) => (Ok(Part::End), None),
                        Err(e) => (Err(classify_reqwest(e, timeout)), None),
                    })
                });
                stream::once(async move { Ok(Part::Status(status, content_type)) })
                    .chain(body)
                    .left_stream()
            }
            Err(e) => stream::once(async move { Err(e) }).right_stream(),
        })
        .flatten()
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

/// The form of an instant query at `time` (unix seconds).
fn instant_form(query: &str, time: f64) -> Vec<(&'static str, String)> {
    vec![("query", query.to_string()), ("time", format!("{time:.3}"))]
}

/// An instant query's answer at `time`, each sample to `each(labels, value)` as it comes.
async fn instant_query(
    source: &PrometheusSource,
    query: &str,
    time: f64,
    mut each: impl FnMut(&[Label<'_>], f64) + Send,
) -> Result<(), ScrapeError> {
    let form = instant_form(query, time);
    read_answer(
        source,
        "query",
        &form,
        ResultType::Vector,
        &mut |labels, _, value| each(labels, value),
    )
    .await
}

/// The answer of the HTTP API's `endpoint` to the `form`, read as its chunks come, each sample to
/// `each(labels, time, value)`; an error as [`Answer::finish`] says.
async fn read_answer(
    source: &PrometheusSource,
    endpoint: &str,
    form: &[(&str, String)],
    wanted: ResultType,
    each: &mut (impl FnMut(&[Label<'_>], f64, f64) + Send),
) -> Result<(), ScrapeError> {
    let mut response = send(source, endpoint, form).await?;
    let mut answer = Answer::new(wanted, response.status().as_u16(), content_type(&response));
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| classify_reqwest(e, source.timeout))?
    {
        answer.feed(&chunk, each);
    }
    answer.finish(each)
}

/// The `Content-Type` an answer came with.
fn content_type(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// A request to the HTTP API's `endpoint` with the `form`, within the source's timeout (its body's reading too).
async fn send(
    source: &PrometheusSource,
    endpoint: &str,
    form: &[(&str, String)],
) -> Result<reqwest::Response, ScrapeError> {
    let url = format!("{}/api/v1/{endpoint}", source.url);
    let mut request = source
        .client
        .post(&url)
        .timeout(source.timeout)
        .headers(source.headers.clone())
        .form(form);
    request = super::with_token(request, source.token.as_ref())?;
    request
        .send()
        .await
        .map_err(|e| classify_reqwest(e, source.timeout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_counts_are_read_once_a_minute_and_carried_between() {
        let key = |a: &str| ReplicaKey {
            cluster: Some("prod".into()),
            apiserver: a.into(),
        };
        let counted = |pods: f64| ReplicaSnapshot {
            resource_objects: Arc::new([("pods".to_string(), pods)].into()),
            ..ReplicaSnapshot::default()
        };
        let mut counts = ObjectCounts::default();
        assert!(counts.due(1000.0), "the first round reads them");
        let mut round: BTreeMap<_, _> = [(key("a"), counted(10.0))].into();
        counts.carry(&mut round, true, 1000.0);
        assert!(!counts.due(1005.0));
        assert!(!counts.due(1059.9));
        // A round without them gets those last read.
        let mut round: BTreeMap<_, _> = [(key("a"), ReplicaSnapshot::default())].into();
        counts.carry(&mut round, false, 1005.0);
        assert_eq!(round[&key("a")].resource_objects.get("pods"), Some(&10.0));
        // A replica none were read for: the next round reads them.
        let mut round: BTreeMap<_, _> = [
            (key("a"), ReplicaSnapshot::default()),
            (key("b"), ReplicaSnapshot::default()),
        ]
        .into();
        counts.carry(&mut round, false, 1010.0);
        assert!(round[&key("b")].resource_objects.is_empty());
        assert!(counts.due(1015.0));
        let mut round: BTreeMap<_, _> = [(key("b"), counted(3.0))].into();
        counts.carry(&mut round, true, 1015.0);
        assert!(!counts.due(1020.0));
        assert!(counts.due(1075.0), "a minute later");
        assert!(counts.due(900.0), "a clock set back");
        // A replica gone at the last read is not kept.
        assert!(!counts.by_replica.contains_key(&key("a")));
        // An attempt that never ended (the round timed out): the rounds go on without, for a minute.
        counts.attempted_at = Some(1075.0);
        let mut round: BTreeMap<_, _> = [(key("c"), ReplicaSnapshot::default())].into();
        counts.carry(&mut round, false, 1080.0);
        assert!(!counts.due(1085.0));
        assert!(counts.due(1135.0));
    }

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
