//! One scrape round of one replica: `/metrics` streamed through the parser, the due dumps and object list
//! (`objects.rs`) beside it, folded into one [`ReplicaSnapshot`].
use std::time::{Duration, Instant};

use super::{fetch, Endpoint, ScrapeError};
use crate::targets::Target;
use apf::endpoints::{self, Dump};
use apf::model::{self, ReplicaSnapshot, SnapshotBuilder};
use apf::parse::dump;
use apf::parse::exposition::ParseStats;
use apf::parse::MetricsParser as BodyParser;

/// What to fetch this round.
#[derive(Debug, Clone)]
pub struct ScrapePlan {
    /// The endpoints due this round (back-off and metrics-only decided by the caller).
    pub endpoints: Vec<Endpoint>,
    pub request_details: bool,
    pub max_body_bytes: u64,
    pub max_line_bytes: usize,
    /// Flows kept of `dump_requests` per priority level and flow schema, those putting the most pressure on the
    /// level; `None` keeps every flow.
    pub flows_per_schema: Option<usize>,
    /// Ask `/metrics` for Prometheus' protobuf format first (`scrape.protobuf`); text is read either way.
    pub protobuf: bool,
}

#[derive(Debug, Clone)]
pub struct EndpointResult {
    pub endpoint: Endpoint,
    /// Fetch, parse and derive together.
    pub duration: Duration,
    pub outcome: Result<(), ScrapeError>,
    /// Lines or rows that could not be read (counted, never silently dropped).
    pub invalid: u64,
}

#[derive(Debug, Clone)]
pub struct ReplicaScrape {
    /// `None` when `/metrics` failed: without it there is no headroom to speak of.
    pub snapshot: Option<ReplicaSnapshot>,
    pub results: Vec<EndpointResult>,
    pub metrics_stats: Option<ParseStats>,
    /// The flowcontrol objects, when they were listed this round.
    pub objects: Option<super::objects::ListedObjects>,
}

/// The endpoints due, one after another on one connection: the replica's APF gives a request of ours one seat at a
/// time (a round's requests are classified like any client's, often into the level watched), and one body's read
/// buffers are held at a time. Each request has its own timeout, so a slow round takes longer than the interval
/// rather than failing the endpoints after a slow one; the replica's loop skips the ticks it missed.
pub async fn scrape_replica(target: &Target, plan: &ScrapePlan) -> ReplicaScrape {
    let wants = |e: Endpoint| plan.endpoints.contains(&e);
    let requests_path = endpoints::dump_requests_path(plan.request_details);
    let metrics = maybe(wants(Endpoint::Metrics), scrape_metrics(target, plan)).await;
    let levels = maybe(
        wants(Endpoint::DumpPriorityLevels),
        fetch_text(target, Dump::PriorityLevels.path(), plan.max_body_bytes),
    )
    .await;
    let queues = maybe(
        wants(Endpoint::DumpQueues),
        fetch_text(target, Dump::Queues.path(), plan.max_body_bytes),
    )
    .await;
    let requests = maybe(
        wants(Endpoint::DumpRequests),
        fetch_flows(target, &requests_path, plan),
    )
    .await;
    let objects = maybe(
        wants(Endpoint::PriorityLevelConfigurations),
        super::objects::list(target, plan.max_body_bytes),
    )
    .await;

    let mut results = Vec::new();
    let mut metrics_stats = None;
    let mut snapshot = None;
    if let Some((took, outcome)) = metrics {
        let read = outcome.map(|(snap, stats)| {
            // A duplicated series is kept once: the line dropped is counted like an unreadable one.
            let invalid = stats.invalid_lines + stats.oversized_lines + snap.duplicate_series;
            metrics_stats = Some(stats);
            snapshot = Some(snap);
            invalid
        });
        results.push(result(Endpoint::Metrics, took, read));
    }

    // Dumps are folded in only when /metrics came through this round.
    let mut fold = |endpoint: Endpoint,
                    fetched: Option<(Duration, Result<String, ScrapeError>)>| {
        let (took, text) = fetched?;
        let parse_started = Instant::now();
        let parsed = text.and_then(|text| {
            let snap = snapshot.as_mut();
            let err = |e: dump::DumpError| ScrapeError::Parse(e.to_string());
            let invalid = if endpoint == Endpoint::DumpPriorityLevels {
                let d = dump::parse_priority_levels(&text).map_err(err)?;
                if let Some(s) = snap {
                    model::apply_priority_levels_dump(s, &d);
                }
                d.stats.invalid_rows
            } else {
                let d = dump::parse_queues(&text).map_err(err)?;
                if let Some(s) = snap {
                    model::apply_queues_dump(s, &d);
                }
                d.stats.invalid_rows
            };
            Ok(invalid)
        });
        Some(result(endpoint, took + parse_started.elapsed(), parsed))
    };
    results.extend(fold(Endpoint::DumpPriorityLevels, levels));
    results.extend(fold(Endpoint::DumpQueues, queues));
    if let Some((took, fetched)) = requests {
        let folded = fetched.map(|((flows, active), invalid)| {
            if let Some(s) = snapshot.as_mut() {
                model::apply_flows(s, flows, &active);
            }
            invalid
        });
        results.push(result(Endpoint::DumpRequests, took, folded));
    }

    let mut fetched_objects = None;
    if let Some((took, outcome)) = objects {
        let read = outcome.map(|list| {
            fetched_objects = Some(list);
            0
        });
        results.push(result(Endpoint::PriorityLevelConfigurations, took, read));
    }
    ReplicaScrape {
        snapshot,
        results,
        metrics_stats,
        objects: fetched_objects,
    }
}

async fn maybe<T>(
    wanted: bool,
    work: impl std::future::Future<Output = T>,
) -> Option<(Duration, T)> {
    if !wanted {
        return None;
    }
    let started = Instant::now();
    let done = work.await;
    // Each endpoint's own time, not the round's: the others may still be running.
    Some((started.elapsed(), done))
}

/// How an endpoint went: its invalid lines or rows, or why it failed.
fn result(endpoint: Endpoint, took: Duration, outcome: Result<u64, ScrapeError>) -> EndpointResult {
    let (outcome, invalid) = match outcome {
        Ok(invalid) => (Ok(()), invalid),
        Err(e) => (Err(e), 0),
    };
    EndpointResult {
        endpoint,
        duration: took,
        outcome,
        invalid,
    }
}

/// `dump_requests` folded into flows as its chunks arrive: a dump of thousands of requests is held neither as a body
/// nor as rows, only as its flows.
#[derive(Default)]
struct FlowsFold {
    reader: dump::RequestsReader,
    flows: model::FlowsBuilder,
}

impl super::BodySink for FlowsFold {
    async fn accept(&mut self, chunk: bytes::Bytes) {
        let flows = &mut self.flows;
        self.reader.feed(&chunk, |row| flows.add(&row));
    }
}

/// The flows of `dump_requests` (those the plan keeps) with each level's count of them all, and its invalid rows.
async fn fetch_flows(
    target: &Target,
    path: &str,
    plan: &ScrapePlan,
) -> Result<(DumpFlows, u64), ScrapeError> {
    let mut fold = FlowsFold::default();
    fetch(target, path, plan.max_body_bytes, &mut fold).await?;
    let FlowsFold { reader, mut flows } = fold;
    let stats = reader
        .finish(|row| flows.add(&row))
        .map_err(|e| ScrapeError::Parse(e.to_string()))?;
    let active = flows.active_flows();
    Ok((
        (flows.finish(plan.flows_per_schema), active),
        stats.invalid_rows,
    ))
}

/// The flows kept of a dump, and the flows each level had in it.
type DumpFlows = (
    Vec<model::FlowSample>,
    std::collections::BTreeMap<String, u32>,
);

/// Bytes of `/metrics` parsed in place, by the task that read them, while the data is still in its core's cache and
/// with no hand-over between tasks: the 1.34 capture in protobuf (0.58 MB), what a replica serves by default. Past
/// this, the rest of a protobuf body goes to a task of its own, to be parsed beside its download where a core is free
/// (a 100 MB round in protobuf 14.3 ms against 16.3 ms with 4 MiB in place, in 512 KiB batches, one run each; docs/operations/performance.md).
///
/// A text body stays in place to its end: its parse skips the families not read at memchr speed, about half the
/// download's own cost, and the hand-over cost more than it overlapped (each batch a wake-up, its chunks held and read
/// cold on the other core, the client's read buffer taken fresh for each): 100 MB of text 72-97 ms in place against
/// 86-105 ms handed over (medians 86 and 100.5, eight runs each); protobuf, whose parse costs about what its download
/// does, 15.1-23.7 ms in place against 16.2-20.6 ms (medians 20.7 and 17.7, nine runs each; `cargo bench --bench
/// round`, run alternately). Those figures are of a runtime with two workers; on the daemon's one (`daemon/runtime.rs`)
/// the handed-over parse runs between the reads, and a 100 MB protobuf round took 13.0-14.4 ms so; in place there is
/// not yet measured.
const PARSE_IN_PLACE_BYTES: usize = 1 << 20;

/// A big protobuf body's chunks (up to 128 KiB each, as the client reads them) are handed to its parse in batches of
/// this many bytes: a hand-over wakes the parse's thread, and one per chunk cost a 100 MB round more than batching does
/// (protobuf 14.3-17.3 ms against 18.9-19.3 ms handing single chunks over past 8 MiB, with 512 KiB batches, when text
/// was handed over too; `cargo bench --bench round`). 256 KiB, not 512: fewer bytes held in flight (`large` 3.49
/// % of a core and 11.5 MiB against 3.99 % and 13.3 MiB; single chunks 3.63 % and 10.9 MiB; one run each,
/// `cargo bench --bench watch_cost -- large`).
const BATCH_BYTES: usize = 256 << 10;

/// Batches read but not yet parsed, at most: bounded, so a slow parse slows the download rather than piling up the
/// body; a big round holds at most this many batches besides the one being filled and the one being parsed.
const BATCHES_AHEAD: usize = 2;

type MetricsParser = BodyParser<fn(&str) -> bool>;

/// Where `/metrics` is parsed: in place, then (for a big protobuf body) in a task of its own.
enum MetricsParse {
    InPlace {
        parser: Box<MetricsParser>,
        builder: Box<SnapshotBuilder>,
        read: usize,
        /// The `Accept` header: protobuf first, or text only.
        accepts: Option<&'static str>,
        max_line_bytes: usize,
    },
    Handed {
        /// Chunks read since the last batch was handed over.
        batch: Vec<bytes::Bytes>,
        chunks: tokio::sync::mpsc::Sender<Vec<bytes::Bytes>>,
        parse: tokio::task::JoinHandle<(Box<MetricsParser>, Box<SnapshotBuilder>)>,
    },
    /// Only while the parse is handed over.
    Moving,
}

impl super::BodySink for MetricsParse {
    fn accepts(&self) -> Option<&'static str> {
        match self {
            MetricsParse::InPlace { accepts, .. } => *accepts,
            _ => None,
        }
    }

    /// The parser for the format the server answered with, before any byte of it.
    fn content_type(&mut self, content_type: Option<&str>) {
        if let MetricsParse::InPlace {
            parser,
            max_line_bytes,
            ..
        } = self
        {
            **parser = BodyParser::new(content_type, model::is_wanted_sample, *max_line_bytes);
        }
    }

    async fn accept(&mut self, chunk: bytes::Bytes) {
        if let MetricsParse::InPlace { read, parser, .. } = self {
            *read += chunk.len();
            if *read > PARSE_IN_PLACE_BYTES && matches!(**parser, BodyParser::Protobuf(_)) {
                self.hand_over();
            }
        }
        match self {
            MetricsParse::InPlace {
                parser, builder, ..
            } => parser.feed(&chunk, builder.as_mut()),
            // A parse task gone (it cannot end early but by a panic) leaves the rest of the body dropped.
            MetricsParse::Handed { batch, chunks, .. } => {
                batch.push(chunk);
                // A few chunks at most: summed again rather than counted beside them.
                if batch.iter().map(bytes::Bytes::len).sum::<usize>() >= BATCH_BYTES {
                    let _ = chunks.send(std::mem::take(batch)).await;
                }
            }
            MetricsParse::Moving => {}
        }
    }
}

impl MetricsParse {
    fn new(max_line_bytes: usize, protobuf: bool) -> Self {
        MetricsParse::InPlace {
            parser: Box::new(BodyParser::new(
                None,
                model::is_wanted_sample as fn(&str) -> bool,
                max_line_bytes,
            )),
            builder: Box::new(SnapshotBuilder::new()),
            read: 0,
            accepts: protobuf.then_some(apf::parse::protobuf::ACCEPT),
            max_line_bytes,
        }
    }

    fn hand_over(&mut self) {
        let MetricsParse::InPlace {
            mut parser,
            mut builder,
            ..
        } = std::mem::replace(self, MetricsParse::Moving)
        else {
            return;
        };
        let (chunks, mut arriving) = tokio::sync::mpsc::channel::<Vec<bytes::Bytes>>(BATCHES_AHEAD);
        let parse = tokio::spawn(async move {
            while let Some(batch) = arriving.recv().await {
                for chunk in batch {
                    parser.feed(&chunk, builder.as_mut());
                }
            }
            (parser, builder)
        });
        *self = MetricsParse::Handed {
            batch: Vec::new(),
            chunks,
            parse,
        };
    }

    /// The snapshot, once the last chunk is in.
    async fn finish(self) -> Result<(ReplicaSnapshot, ParseStats), ScrapeError> {
        let (parser, mut builder) = match self {
            MetricsParse::InPlace {
                parser, builder, ..
            } => (parser, builder),
            MetricsParse::Handed {
                batch,
                chunks,
                parse,
            } => {
                if !batch.is_empty() {
                    let _ = chunks.send(batch).await;
                }
                // The sender dropped closes the channel: the task ends after the last chunk.
                drop(chunks);
                parse
                    .await
                    .map_err(|e| ScrapeError::Parse(format!("the parse of /metrics failed: {e}")))?
            }
            MetricsParse::Moving => {
                return Err(ScrapeError::Parse("the parse of /metrics was lost".into()))
            }
        };
        let stats = parser.finish(builder.as_mut());
        Ok((builder.finish(), stats))
    }
}

/// `/metrics` asking for the families the model reads by name: an apiserver whose client_golang filters (1.24+;
/// Kubernetes vendors it since kubernetes/kubernetes#140774) encodes and sends those alone, any other ignores it.
static METRICS_PATH: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| endpoints::metrics_path(&model::wanted_families()));

/// `/metrics`, parsed chunk by chunk as it arrives: the body is never held whole.
async fn scrape_metrics(
    target: &Target,
    plan: &ScrapePlan,
) -> Result<(ReplicaSnapshot, ParseStats), ScrapeError> {
    let mut parse = MetricsParse::new(plan.max_line_bytes, plan.protobuf);
    let fetched = fetch(target, &METRICS_PATH, plan.max_body_bytes, &mut parse).await;
    let parsed = parse.finish().await;
    fetched?;
    let (snapshot, stats) = parsed?;
    let read_any = stats.samples + stats.skipped_samples + stats.skipped_families > 0;
    if !read_any && stats.invalid_lines > 0 {
        let first = stats
            .first_errors
            .first()
            .map(|e| e.to_string())
            .unwrap_or_default();
        let unit = if stats.families > 0 {
            "families"
        } else {
            "lines"
        };
        return Err(ScrapeError::Parse(format!(
            "not a Prometheus /metrics body ({} unreadable {unit}; first: {first})",
            stats.invalid_lines
        )));
    }
    Ok((snapshot, stats))
}

async fn fetch_text(target: &Target, path: &str, max_body: u64) -> Result<String, ScrapeError> {
    let mut body = Vec::new();
    fetch(target, path, max_body, &mut body).await?;
    // A dump is ASCII but for user names and paths; a stray invalid byte must not lose the whole dump.
    Ok(match String::from_utf8(body) {
        Ok(text) => text,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}
