//! `/metrics` in Prometheus' protobuf format, as kube-apiserver answers a scrape that asks for it: client_golang's
//! promhttp (prometheus/common `expfmt.Negotiate`) writes each family as a length-delimited
//! `io.prometheus.client.MetricFamily` (prometheus/client_model `metrics.proto`), its fields in their numbers' order
//! as Go's protobuf marshals them, a histogram's `+Inf` bucket left implicit, and since client_golang 1.17 a counter's,
//! histogram's and summary's creation time.
//!
//! Made from the text exposition of the same families (the simulator's, or a real capture's), so that both formats
//! always say the same thing.
use std::collections::HashMap;

use apf::parse::exposition::{parse_all, Sample};

/// The format's `Content-Type` (prometheus/common `expfmt.FmtProtoDelim`).
pub use apf::parse::protobuf::CONTENT_TYPE;

/// When the simulated apiserver's counters, histograms and summaries were made, as client_golang writes it.
pub const CREATED: (u64, u32) = (1_767_225_600, 123_456_789);

/// `MetricType` (metrics.proto).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter = 0,
    Gauge = 1,
    Summary = 2,
    Untyped = 3,
    Histogram = 4,
}

impl Kind {
    fn of(text: &str) -> Kind {
        match text {
            "counter" => Kind::Counter,
            "gauge" => Kind::Gauge,
            "summary" => Kind::Summary,
            "histogram" => Kind::Histogram,
            _ => Kind::Untyped,
        }
    }
}

struct Family {
    name: String,
    help: String,
    kind: Kind,
    metrics: Vec<Metric>,
    /// A metric's index by its labels (without `le` or `quantile`).
    index: HashMap<Vec<(String, String)>, usize>,
}

#[derive(Default)]
struct Metric {
    labels: Vec<(String, String)>,
    value: f64,
    timestamp_ms: Option<i64>,
    /// A histogram's buckets (`le`, cumulative count) or a summary's quantiles.
    entries: Vec<(f64, f64)>,
    sum: f64,
    count: f64,
}

impl Family {
    fn new(name: &str) -> Family {
        Family {
            name: name.to_string(),
            help: String::new(),
            kind: Kind::Untyped,
            metrics: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// What a sample of this name is to this family: `Some(suffix)` when it belongs to it.
    fn suffix<'n>(&self, name: &'n str) -> Option<&'n str> {
        let rest = name.strip_prefix(self.name.as_str())?;
        let ok = match self.kind {
            Kind::Histogram => matches!(rest, "_bucket" | "_sum" | "_count"),
            Kind::Summary => matches!(rest, "" | "_sum" | "_count"),
            _ => rest.is_empty(),
        };
        ok.then_some(rest)
    }

    fn add(&mut self, s: &Sample<'_>, suffix: &str) {
        let special = match self.kind {
            Kind::Histogram => "le",
            Kind::Summary => "quantile",
            _ => "",
        };
        let mut bound = None;
        let mut labels = Vec::with_capacity(s.labels.len());
        for l in s.labels {
            if l.name == special {
                bound = Some(parse_number(&l.value));
            } else {
                labels.push((l.name.to_string(), l.value.to_string()));
            }
        }
        // client_golang writes a metric's labels sorted by name.
        labels.sort();
        let at = match self.index.get(&labels) {
            Some(&at) => at,
            None => {
                self.metrics.push(Metric {
                    labels: labels.clone(),
                    ..Metric::default()
                });
                self.index.insert(labels, self.metrics.len() - 1);
                self.metrics.len() - 1
            }
        };
        let m = &mut self.metrics[at];
        m.timestamp_ms = s.timestamp_ms;
        match (suffix, bound) {
            ("_sum", _) => m.sum = s.value,
            ("_count", _) => m.count = s.value,
            (_, Some(b)) if !special.is_empty() => m.entries.push((b, s.value)),
            _ => m.value = s.value,
        }
    }
}

/// Whether a scrape's `Accept` header gets the protobuf format: the first media range, by quality, that is the
/// delimited protobuf or the 0.0.4 text format decides; text otherwise (prometheus/common `expfmt.Negotiate` as
/// Kubernetes 1.18-1.36 vendor it).
pub fn negotiate(accept: &str) -> bool {
    let mut ranges: Vec<(f64, &str)> = accept
        .split(',')
        .map(|range| {
            let q = params(range)
                .find(|(k, _)| *k == "q")
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(1.0);
            (q, range)
        })
        .collect();
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, range) in ranges {
        let media = range.split(';').next().unwrap_or("").trim();
        let param = |name: &str| params(range).find(|(k, _)| *k == name).map(|(_, v)| v);
        if media.eq_ignore_ascii_case("application/vnd.google.protobuf")
            && param("proto") == Some("io.prometheus.client.MetricFamily")
        {
            return param("encoding") == Some("delimited");
        }
        if media.eq_ignore_ascii_case("text/plain")
            && matches!(param("version"), None | Some("0.0.4"))
        {
            return false;
        }
    }
    false
}

/// A media range's parameters, `name=value`.
fn params(range: &str) -> impl Iterator<Item = (&str, &str)> {
    range.split(';').skip(1).filter_map(|p| {
        let (k, v) = p.split_once('=')?;
        Some((k.trim(), v.trim().trim_matches('"')))
    })
}

fn parse_number(text: &str) -> f64 {
    match text {
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        other => other.parse().unwrap_or(f64::NAN),
    }
}

/// The families of a text exposition (HELP, TYPE and samples; a sample that belongs to no family announced before it
/// makes an untyped one), encoded as client_golang writes them. `created` is the creation time written for counters,
/// histograms and summaries (seconds, nanoseconds since the epoch), as client_golang 1.17+ writes it.
pub fn from_text(text: &[u8], created: Option<(u64, u32)>) -> Vec<u8> {
    let mut families: Vec<Family> = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(comment) = line.strip_prefix(b"#") {
            let comment = String::from_utf8_lossy(comment);
            let mut words = comment.trim_start().splitn(3, ' ');
            let (Some(keyword @ ("HELP" | "TYPE")), Some(name)) = (words.next(), words.next())
            else {
                continue;
            };
            let rest = words.next().unwrap_or("");
            if families.last().is_none_or(|f| f.name != name) {
                families.push(Family::new(name));
            }
            let Some(family) = families.last_mut() else {
                continue;
            };
            if keyword == "HELP" {
                family.help = rest.replace("\\n", "\n").replace("\\\\", "\\");
            } else {
                family.kind = Kind::of(rest.trim());
            }
            continue;
        }
        parse_all(line, |_| true, &mut |s: &Sample<'_>| {
            let suffix = families.last().and_then(|f| f.suffix(s.name));
            match suffix {
                Some(suffix) => {
                    let suffix = suffix.to_string();
                    if let Some(f) = families.last_mut() {
                        f.add(s, &suffix);
                    }
                }
                None => {
                    let mut f = Family::new(s.name);
                    f.add(s, "");
                    families.push(f);
                }
            }
        });
    }
    let mut out = Vec::new();
    let mut message = Vec::new();
    for f in &families {
        message.clear();
        encode_family(f, created, &mut message);
        varint(&mut out, message.len() as u64);
        out.extend_from_slice(&message);
    }
    out
}

fn encode_family(f: &Family, created: Option<(u64, u32)>, out: &mut Vec<u8>) {
    string(out, 1, &f.name);
    string(out, 2, &f.help);
    tag(out, 3, 0);
    varint(out, f.kind as u64);
    let created =
        created.filter(|_| matches!(f.kind, Kind::Counter | Kind::Summary | Kind::Histogram));
    let mut metric = Vec::new();
    let mut value = Vec::new();
    for m in &f.metrics {
        metric.clear();
        for (name, v) in &m.labels {
            let mut pair = Vec::new();
            string(&mut pair, 1, name);
            string(&mut pair, 2, v);
            bytes(&mut metric, 1, &pair);
        }
        value.clear();
        match f.kind {
            Kind::Gauge | Kind::Untyped | Kind::Counter => {
                double(&mut value, 1, m.value);
                if let Some(ct) = created {
                    timestamp(&mut value, 3, ct);
                }
            }
            Kind::Summary => {
                count(&mut value, 1, m.count, None);
                double(&mut value, 2, m.sum);
                for &(q, v) in &m.entries {
                    let mut quantile = Vec::new();
                    double(&mut quantile, 1, q);
                    double(&mut quantile, 2, v);
                    bytes(&mut value, 3, &quantile);
                }
                if let Some(ct) = created {
                    timestamp(&mut value, 4, ct);
                }
            }
            Kind::Histogram => {
                count(&mut value, 1, m.count, Some(4));
                double(&mut value, 2, m.sum);
                for &(le, cumulative) in &m.entries {
                    // client_golang leaves the +Inf bucket implicit: the sample count says it.
                    if le == f64::INFINITY {
                        continue;
                    }
                    let mut bucket = Vec::new();
                    count(&mut bucket, 1, cumulative, Some(4));
                    double(&mut bucket, 2, le);
                    bytes(&mut value, 3, &bucket);
                }
                if let Some(ct) = created {
                    timestamp(&mut value, 15, ct);
                }
            }
        }
        let field = match f.kind {
            Kind::Gauge => 2,
            Kind::Counter => 3,
            Kind::Summary => 4,
            Kind::Untyped => 5,
            Kind::Histogram => 7,
        };
        if field != 7 {
            bytes(&mut metric, field, &value);
        }
        if let Some(ts) = m.timestamp_ms {
            tag(&mut metric, 6, 0);
            varint(&mut metric, ts as u64);
        }
        if field == 7 {
            bytes(&mut metric, field, &value);
        }
        bytes(out, 4, &metric);
    }
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn tag(out: &mut Vec<u8>, field: u64, wire: u64) {
    varint(out, field << 3 | wire);
}

fn bytes(out: &mut Vec<u8>, field: u64, payload: &[u8]) {
    tag(out, field, 2);
    varint(out, payload.len() as u64);
    out.extend_from_slice(payload);
}

fn string(out: &mut Vec<u8>, field: u64, s: &str) {
    bytes(out, field, s.as_bytes());
}

fn double(out: &mut Vec<u8>, field: u64, v: f64) {
    tag(out, field, 1);
    out.extend_from_slice(&v.to_le_bytes());
}

/// A count: the integer field, as client_golang writes its counts; one that is not whole in the float field
/// (`sample_count_float`, `cumulative_count_float`: field 4 of Histogram and Bucket), where the message has one.
fn count(out: &mut Vec<u8>, field: u64, v: f64, float_field: Option<u64>) {
    match float_field {
        Some(float) if !(v >= 0.0 && v.fract() == 0.0 && v < u64::MAX as f64) => {
            double(out, float, v)
        }
        // `as` saturates: a negative or NaN count is 0.
        _ => {
            tag(out, field, 0);
            varint(out, v as u64);
        }
    }
}

/// `google.protobuf.Timestamp`: proto3, its zero fields left out.
fn timestamp(out: &mut Vec<u8>, field: u64, (seconds, nanos): (u64, u32)) {
    let mut ts = Vec::new();
    if seconds != 0 {
        tag(&mut ts, 1, 0);
        varint(&mut ts, seconds);
    }
    if nanos != 0 {
        tag(&mut ts, 2, 0);
        varint(&mut ts, u64::from(nanos));
    }
    bytes(out, field, &ts);
}

#[cfg(test)]
mod tests {
    use super::*;
    use apf::model::{is_wanted_sample, SnapshotBuilder};
    use apf::parse::exposition::{ExpositionParser, ParseStats, SampleSink};
    use apf::parse::protobuf::ProtobufParser;
    use std::io::Read;

    const CAPTURES: [&str; 15] = [
        "1.18", "1.19", "1.20", "1.21", "1.23", "1.24", "1.25", "1.26", "1.28", "1.29", "1.30",
        "1.31", "1.32", "1.34", "1.35",
    ];

    fn capture(version: &str) -> Vec<u8> {
        let path = format!(
            "{}/../../tests/fixtures/metrics-v{version}.txt.gz",
            env!("CARGO_MANIFEST_DIR")
        );
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(file)
            .read_to_end(&mut out)
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        out
    }

    /// A sample as owned data, `le` and `quantile` read as numbers (the formats spell them differently: Go's `1e+06`
    /// is Rust's `1000000`), labels sorted, values by their bits.
    type Owned = (String, Vec<(String, String)>, u64, Option<i64>);

    struct Collect(Vec<Owned>);
    impl SampleSink for Collect {
        fn sample(&mut self, s: &Sample<'_>) {
            let mut labels: Vec<(String, String)> = s
                .labels
                .iter()
                .map(|l| {
                    let v = match l.name {
                        "le" | "quantile" => parse_number(&l.value).to_bits().to_string(),
                        _ => l.value.to_string(),
                    };
                    (l.name.to_string(), v)
                })
                .collect();
            labels.sort();
            self.0.push((
                s.name.to_string(),
                labels,
                s.value.to_bits(),
                s.timestamp_ms,
            ));
        }
    }

    fn text_samples(text: &[u8], wanted: fn(&str) -> bool) -> (Vec<Owned>, ParseStats) {
        let mut sink = Collect(Vec::new());
        let mut parser = ExpositionParser::new(wanted, 1 << 20);
        parser.feed(text, &mut sink);
        let stats = parser.finish(&mut sink);
        (sink.0, stats)
    }

    fn protobuf_samples(
        body: &[u8],
        wanted: fn(&str) -> bool,
        chunk: usize,
    ) -> (Vec<Owned>, ParseStats) {
        let mut sink = Collect(Vec::new());
        let mut parser = ProtobufParser::new(wanted, 1 << 20);
        for piece in body.chunks(chunk) {
            parser.feed(piece, &mut sink);
        }
        let stats = parser.finish(&mut sink);
        (sink.0, stats)
    }

    #[test]
    fn every_capture_says_the_same_in_protobuf() {
        let mut with_levels = 0;
        for version in CAPTURES {
            let text = capture(version);
            let body = from_text(&text, Some(CREATED));
            // Every sample, in the same order: a metric's buckets, sum and count together, as the text has them.
            let (expected, text_stats) = text_samples(&text, |_| true);
            let (got, stats) = protobuf_samples(&body, |_| true, usize::MAX);
            assert_eq!(text_stats.invalid_lines, 0, "{version}");
            assert_eq!(
                (stats.invalid_lines, stats.oversized_lines),
                (0, 0),
                "{version}: {:?}",
                stats.first_errors
            );
            assert_eq!(got, expected, "{version}");
            // What the daemon reads: the same samples, the same snapshot, in any chunking.
            let (wanted, _) = text_samples(&text, is_wanted_sample);
            for chunk in [1, 7, 64, 4096, usize::MAX] {
                let (got, stats) = protobuf_samples(&body, is_wanted_sample, chunk);
                assert_eq!(got, wanted, "{version}, chunks of {chunk}");
                // Families none of whose samples the model reads are skipped unread; 1.18 serves none it reads.
                assert!(stats.skipped_families > 0, "{version}");
                assert_eq!(
                    stats.skipped_families < stats.families,
                    !wanted.is_empty(),
                    "{version}: {stats:?}"
                );
            }
            let mut from_text_parse = SnapshotBuilder::new();
            let mut parser = ExpositionParser::new(is_wanted_sample, 1 << 20);
            parser.feed(&text, &mut from_text_parse);
            parser.finish(&mut from_text_parse);
            let mut from_protobuf = SnapshotBuilder::new();
            let mut parser = ProtobufParser::new(is_wanted_sample, 1 << 20);
            parser.feed(&body, &mut from_protobuf);
            parser.finish(&mut from_protobuf);
            let (a, b) = (from_text_parse.finish(), from_protobuf.finish());
            assert_eq!(a, b, "{version}");
            with_levels += usize::from(!a.levels.is_empty());
        }
        // Every capture from 1.20 on has priority levels to compare (1.18 and 1.19 serve none the model reads).
        assert_eq!(with_levels, CAPTURES.len() - 2);
    }

    #[test]
    fn the_protobuf_body_is_a_sixth_of_the_text() {
        let text = capture("1.34");
        let body = from_text(&text, Some(CREATED));
        let ratio = body.len() as f64 / text.len() as f64;
        assert!(
            (0.1..0.25).contains(&ratio),
            "{} of {} bytes",
            body.len(),
            text.len()
        );
    }

    #[test]
    fn negotiation_follows_the_accept_header_as_client_golang_does() {
        let prometheus_proto = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3,*/*;q=0.1";
        assert!(negotiate(prometheus_proto));
        assert!(negotiate(apf::parse::protobuf::ACCEPT));
        // Prometheus without native histograms, curl, a browser: text.
        assert!(!negotiate(
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        ));
        assert!(!negotiate("*/*"));
        assert!(!negotiate(""));
        // Text preferred by quality, whatever the order; another protobuf encoding is not this one.
        assert!(!negotiate("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.2,text/plain"));
        assert!(!negotiate(
            "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text"
        ));
    }
}
