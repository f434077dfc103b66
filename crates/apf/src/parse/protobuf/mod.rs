//! Streaming reader of Prometheus' protobuf exposition format: length-delimited `io.prometheus.client.MetricFamily`
//! messages (prometheus/client_model `io/prometheus/client/metrics.proto`), which client_golang's promhttp answers
//! with when a scrape asks for it (prometheus/common `expfmt.Negotiate`). kube-apiserver's `/metrics` is that
//! handler on every version (k8s.io/component-base `metrics/http.go`, `promhttp.HandlerFor`).
//!
//! Why: a family is one message whose name comes first, so a family the model does not read is skipped by its
//! length without a look at its bytes; and a histogram's labels are written once, not on each bucket's line (the
//! real 1.34 capture is a sixth of its text's size).
//!
//! Samples reach the [`SampleSink`] as the text parser delivers them, and as Prometheus reads a classic histogram
//! from protobuf: a histogram as its `_bucket` series (with `le`; `+Inf` added where the message leaves it
//! implicit, as client_golang does), `_sum` and `_count`; a summary as its quantiles, `_sum` and `_count`. A metric is
//! decoded once whole: borrowed from the chunk, or held when a chunk's end cuts it (at most `max_metric_bytes`).
//! Nothing is dropped silently: every family is counted read or skipped, every metric delivered, filtered out,
//! invalid or oversized ([`ParseStats`]).

use super::exposition::{ParseError, ParseStats, SampleSink, MAX_KEPT_ERRORS};

/// The `Content-Type` of the format (prometheus/common `expfmt.FmtProtoDelim`).
pub const CONTENT_TYPE: &str =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

/// What a scrape of `/metrics` asks for: this format first, the text format after it, as Prometheus asks when it
/// reads protobuf (a server that does not speak it answers in text).
pub const ACCEPT: &str = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;\
                          encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3,*/*;q=0.1";

/// Whether a response's `Content-Type` says this format (prometheus/common `expfmt.ResponseFormat`): the protobuf
/// media type, with no `proto` or `encoding` parameter naming another message or encoding.
pub fn is_content_type(content_type: &str) -> bool {
    let mut parts = content_type.split(';');
    let media = parts.next().unwrap_or("").trim();
    if !media.eq_ignore_ascii_case("application/vnd.google.protobuf") {
        return false;
    }
    parts.all(|p| match p.split_once('=') {
        Some((k, v)) => match k.trim() {
            "proto" => v.trim().trim_matches('"') == "io.prometheus.client.MetricFamily",
            "encoding" => v.trim().trim_matches('"') == "delimited",
            _ => true,
        },
        None => true,
    })
}

/// A metric decoded whole into its samples.
mod metric;
/// Varints and the fields of a message.
mod wire;

use metric::{read_metric, SampleNames, Scratch, COUNTER, SUFFIXES};
use wire::{stream_varint, I32, I64, LEN, VARINT};

/// Incremental reader: [`feed`](Self::feed) chunks of any size, then [`finish`](Self::finish).
pub struct ProtobufParser<F: Fn(&str) -> bool> {
    /// Asked of each sample's name (`_bucket`, `_sum`, `_count` included), as the text parser asks it of each line.
    wanted: F,
    max_metric_bytes: usize,
    stats: ParseStats,
    state: State,
    /// The first bytes of a varint (a family's length, a field's tag, length or value) that a chunk's end cut.
    partial: Vec<u8>,
    /// A field a chunk's end cut (the family's name, one metric), until it is whole.
    held: Vec<u8>,
    family: Family,
    scratch: Scratch,
}

#[derive(Clone, Copy, Debug)]
enum State {
    /// Between families: the next one's length.
    Length,
    /// A field's tag.
    Tag,
    /// A varint field's value (the family's type).
    Value { field: u64 },
    /// A length-delimited field's length.
    Len { field: u64 },
    /// `left` bytes of a field, held until whole (`hold`) or skipped.
    Payload { field: u64, left: usize, hold: bool },
    /// The rest of the family, unread: not wanted, or not readable.
    SkipFamily,
    /// A family's length that is not a varint: the stream's framing is lost and nothing after it is read.
    Broken,
}

/// The family being read.
#[derive(Default)]
struct Family {
    /// Its bytes not read yet.
    left: usize,
    /// Whether its name was read: the first of `samples`.
    named: bool,
    /// Whether any of its samples is wanted, once the name is known.
    wanted: bool,
    /// Its samples' names (the family's, `_bucket`, `_sum`, `_count`) and whether each is wanted, asked once; the
    /// strings are kept from family to family.
    samples: SampleNames,
    kind: Option<u64>,
    /// Metrics that came before the family's name or type (client_golang writes both first), each as its length
    /// (8 bytes, little-endian) and bytes; read when both are known, or at the family's end.
    early: Vec<u8>,
}

impl<F: Fn(&str) -> bool> ProtobufParser<F> {
    /// `wanted` gets each sample name (the same answer for the same name, as for the text parser). A metric longer
    /// than `max_metric_bytes` is never held: it is counted in `oversized_lines` and skipped.
    pub fn new(wanted: F, max_metric_bytes: usize) -> Self {
        ProtobufParser {
            wanted,
            max_metric_bytes,
            stats: ParseStats::default(),
            state: State::Length,
            partial: Vec::new(),
            held: Vec::new(),
            family: Family::default(),
            scratch: Scratch::default(),
        }
    }

    /// Reads the families of `chunk`; a family, a metric or a varint may span any number of chunks.
    pub fn feed(&mut self, chunk: &[u8], sink: &mut impl SampleSink) {
        let mut pos = 0;
        while pos < chunk.len() {
            match self.state {
                State::Broken => return,
                State::Length => {
                    match stream_varint(&mut self.partial, chunk, &mut pos, chunk.len()) {
                        None => return,
                        Some(Ok(len)) => {
                            self.stats.families += 1;
                            // A length past the address space is skipped like any other: the body ends first.
                            self.family.left = usize::try_from(len).unwrap_or(usize::MAX);
                            self.state = State::Tag;
                        }
                        Some(Err(())) => {
                            self.invalid(
                            "a family's length is not a varint: the rest of the body is not read".to_string(),
                        );
                            self.state = State::Broken;
                            return;
                        }
                    }
                }
                State::SkipFamily => {
                    let n = (chunk.len() - pos).min(self.family.left);
                    pos += n;
                    self.family.left -= n;
                }
                State::Tag | State::Value { .. } | State::Len { .. } => {
                    let end = pos + (chunk.len() - pos).min(self.family.left);
                    let start = pos;
                    let read = stream_varint(&mut self.partial, chunk, &mut pos, end);
                    self.family.left -= pos - start;
                    match read {
                        Some(Ok(v)) => self.on_varint(v, sink),
                        Some(Err(())) => {
                            self.broken_family("a field's tag or length is not a varint")
                        }
                        None if self.family.left == 0 => {
                            self.partial.clear();
                            self.broken_family("the family ends inside a field");
                        }
                        None => return,
                    }
                }
                State::Payload { field, left, hold } => {
                    // A field's length was checked against the family's: `left <= family.left`.
                    let take = (chunk.len() - pos).min(left);
                    let bytes = &chunk[pos..pos + take];
                    pos += take;
                    self.family.left -= take;
                    let left = left - take;
                    self.state = State::Tag;
                    if left > 0 {
                        if hold {
                            self.held.extend_from_slice(bytes);
                        }
                        self.state = State::Payload { field, left, hold };
                    } else if hold && self.held.is_empty() {
                        // Whole in this chunk: read where it lies.
                        self.on_field(field, bytes, sink);
                    } else if hold {
                        self.held.extend_from_slice(bytes);
                        let held = std::mem::take(&mut self.held);
                        self.on_field(field, &held, sink);
                        self.held = held;
                        self.held.clear();
                    }
                }
            }
            self.settle(sink);
        }
    }

    /// At a family's last byte: the family ends, or is cut inside a field.
    fn settle(&mut self, sink: &mut impl SampleSink) {
        if self.family.left > 0 {
            return;
        }
        match self.state {
            State::Tag | State::SkipFamily => self.end_family(sink),
            State::Value { .. } | State::Len { .. } => {
                self.broken_family("the family ends inside a field");
                self.end_family(sink);
            }
            // A payload is never longer than what is left of its family; a zero-length one never waits.
            State::Payload { .. } | State::Length | State::Broken => {}
        }
    }

    /// The counters. A body that ends inside a family counts it once as invalid; its metrics read so far stay
    /// delivered, as the lines before a text body's cut do.
    pub fn finish(mut self, _sink: &mut impl SampleSink) -> ParseStats {
        match self.state {
            State::Broken => {}
            State::Length if self.partial.is_empty() => {}
            State::Length => self.invalid("the body ends inside a family's length".to_string()),
            // Skipped whole: nothing of it was wanted, or it was counted already.
            State::SkipFamily => {}
            State::Tag | State::Value { .. } | State::Len { .. } | State::Payload { .. } => {
                let what = self.family_label();
                self.invalid(format!("{what}: the body ends inside it"));
            }
        }
        self.stats
    }

    fn on_varint(&mut self, v: u64, sink: &mut impl SampleSink) {
        match self.state {
            State::Tag => {
                let field = v >> 3;
                if field == 0 {
                    return self.broken_family("a field numbered 0");
                }
                let fixed = |n: usize| State::Payload {
                    field,
                    left: n,
                    hold: false,
                };
                self.state = match v & 7 {
                    VARINT => State::Value { field },
                    LEN => State::Len { field },
                    I64 => fixed(8),
                    I32 => fixed(4),
                    _ => return self.broken_family("a group or an unknown wire type"),
                };
                if let State::Payload { left, .. } = self.state {
                    if left > self.family.left {
                        self.broken_family("a field longer than its family");
                    }
                }
            }
            State::Value { field } => {
                self.state = State::Tag;
                if field == 3 {
                    if self.family.kind.is_some() {
                        return self.broken_family("a family typed twice");
                    }
                    self.family.kind = Some(v);
                    self.read_early(sink);
                }
            }
            State::Len { field } => {
                let Some(len) = usize::try_from(v).ok().filter(|&n| n <= self.family.left) else {
                    return self.broken_family("a field longer than its family");
                };
                let hold = match field {
                    1 if len > self.max_metric_bytes => {
                        return self.broken_family("a family's name longer than the limit");
                    }
                    1 => true,
                    4 => {
                        let early = !self.family.named || self.family.kind.is_none();
                        let held = if early {
                            self.family.early.len() + 8
                        } else {
                            0
                        };
                        if held + len > self.max_metric_bytes {
                            self.stats.oversized_lines += 1;
                            false
                        } else {
                            true
                        }
                    }
                    _ => false,
                };
                self.state = State::Tag;
                if len == 0 {
                    if hold {
                        self.on_field(field, &[], sink);
                    }
                } else {
                    self.state = State::Payload {
                        field,
                        left: len,
                        hold,
                    };
                }
            }
            _ => {}
        }
    }

    /// A whole field held: the family's name, or one of its metrics.
    fn on_field(&mut self, field: u64, bytes: &[u8], sink: &mut impl SampleSink) {
        match field {
            1 => {
                if self.family.named {
                    return self.broken_family("a family named twice");
                }
                let Ok(name) = std::str::from_utf8(bytes) else {
                    return self.broken_family("a family's name that is not UTF-8");
                };
                for (i, (sample, wanted)) in self.family.samples.iter_mut().enumerate() {
                    sample.clear();
                    sample.push_str(name);
                    sample.push_str(SUFFIXES[i]);
                    *wanted = (self.wanted)(sample);
                }
                self.family.wanted = self.family.samples.iter().any(|(_, wanted)| *wanted);
                self.family.named = true;
                if !self.family.wanted {
                    self.stats.skipped_families += 1;
                    self.family.early.clear();
                    self.state = State::SkipFamily;
                    return;
                }
                self.read_early(sink);
            }
            4 => match (self.family.named, self.family.kind) {
                (true, Some(kind)) => read_metric(
                    bytes,
                    kind,
                    &self.family.samples,
                    &mut self.scratch,
                    &mut self.stats,
                    sink,
                ),
                _ => {
                    let early = &mut self.family.early;
                    early.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
                    early.extend_from_slice(bytes);
                }
            },
            _ => {}
        }
    }

    /// The metrics that came before the family's name or type, once both are known.
    fn read_early(&mut self, sink: &mut impl SampleSink) {
        let (true, Some(kind), true) = (self.family.named, self.family.kind, self.family.wanted)
        else {
            return;
        };
        let early = std::mem::take(&mut self.family.early);
        let mut rest = early.as_slice();
        while let Some((len, tail)) = rest.split_first_chunk::<8>() {
            let len = usize::try_from(u64::from_le_bytes(*len)).unwrap_or(usize::MAX);
            let (metric, tail) = tail.split_at(len.min(tail.len()));
            read_metric(
                metric,
                kind,
                &self.family.samples,
                &mut self.scratch,
                &mut self.stats,
                sink,
            );
            rest = tail;
        }
        self.family.early = early;
        self.family.early.clear();
    }

    /// The family read to its end: metrics still waiting for a type take proto2's default, a counter.
    fn end_family(&mut self, sink: &mut impl SampleSink) {
        if !self.family.named && !matches!(self.state, State::SkipFamily) {
            self.invalid(format!("family {}: it has no name", self.stats.families));
        } else if self.family.wanted && self.family.kind.is_none() {
            self.family.kind = Some(COUNTER);
            self.read_early(sink);
        }
        // The sample names' strings are kept for the next family.
        let samples = std::mem::take(&mut self.family.samples);
        self.family = Family {
            samples,
            ..Family::default()
        };
        self.state = State::Length;
    }

    /// A family that cannot be read on: counted once as invalid, the rest of it skipped; the families after it are
    /// read, since its length says where it ends.
    fn broken_family(&mut self, why: &str) {
        let what = self.family_label();
        self.invalid(format!("{what}: {why}"));
        self.family.early.clear();
        self.family.wanted = false;
        self.state = State::SkipFamily;
    }

    fn family_label(&self) -> String {
        if self.family.named {
            format!(
                "family {} ({})",
                self.stats.families, self.family.samples[0].0
            )
        } else {
            format!("family {}", self.stats.families)
        }
    }

    fn invalid(&mut self, message: String) {
        invalid(&mut self.stats, message);
    }
}

fn invalid(stats: &mut ParseStats, message: String) {
    stats.invalid_lines += 1;
    if stats.first_errors.len() < MAX_KEPT_ERRORS {
        stats.first_errors.push(ParseError { line: 0, message });
    }
}

#[cfg(test)]
mod tests {
    use super::metric::{COUNTER, GAUGE, GAUGE_HISTOGRAM, HISTOGRAM, SUMMARY};
    use super::*;
    use crate::parse::exposition::Sample;

    /// A message built field by field, as a test writes it.
    #[derive(Default, Clone)]
    struct Msg(Vec<u8>);

    impl Msg {
        fn varint(mut self, field: u64, v: u64) -> Self {
            put_varint(&mut self.0, field << 3);
            put_varint(&mut self.0, v);
            self
        }
        fn double(mut self, field: u64, v: f64) -> Self {
            put_varint(&mut self.0, field << 3 | 1);
            self.0.extend_from_slice(&v.to_le_bytes());
            self
        }
        fn bytes(mut self, field: u64, b: &[u8]) -> Self {
            put_varint(&mut self.0, field << 3 | 2);
            put_varint(&mut self.0, b.len() as u64);
            self.0.extend_from_slice(b);
            self
        }
        fn msg(self, field: u64, m: Msg) -> Self {
            self.bytes(field, &m.0)
        }
        fn raw(mut self, b: &[u8]) -> Self {
            self.0.extend_from_slice(b);
            self
        }
        /// Length-delimited, as a family is in the stream.
        fn delimited(&self) -> Vec<u8> {
            let mut out = Vec::new();
            put_varint(&mut out, self.0.len() as u64);
            out.extend_from_slice(&self.0);
            out
        }
    }

    fn put_varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn label(name: &str, value: &str) -> Msg {
        Msg::default()
            .bytes(1, name.as_bytes())
            .bytes(2, value.as_bytes())
    }

    fn gauge_family(name: &str, level: &str, v: f64) -> Msg {
        let metric = Msg::default()
            .msg(1, label("priority_level", level))
            .msg(2, Msg::default().double(1, v));
        Msg::default()
            .bytes(1, name.as_bytes())
            .bytes(2, b"help")
            .varint(3, GAUGE)
            .msg(4, metric)
    }

    type Owned = (String, Vec<(String, String)>, f64, Option<i64>);

    fn read(
        body: &[u8],
        wanted: impl Fn(&str) -> bool,
        chunk: usize,
        max: usize,
    ) -> (Vec<Owned>, ParseStats) {
        let mut out = Vec::new();
        let mut sink = |s: &Sample<'_>| {
            out.push((
                s.name.to_string(),
                s.labels
                    .iter()
                    .map(|l| (l.name.to_string(), l.value.to_string()))
                    .collect(),
                s.value,
                s.timestamp_ms,
            ))
        };
        let mut parser = ProtobufParser::new(wanted, max);
        for piece in body.chunks(chunk.max(1)) {
            parser.feed(piece, &mut sink);
        }
        let stats = parser.finish(&mut sink);
        (out, stats)
    }

    /// The same samples and counters in every chunking, down to one byte at a time.
    fn read_all_ways(
        body: &[u8],
        wanted: impl Fn(&str) -> bool + Copy,
        max: usize,
    ) -> (Vec<Owned>, ParseStats) {
        let whole = read(body, wanted, usize::MAX, max);
        for chunk in [1, 2, 3, 5, 8, 13] {
            let (samples, mut stats) = read(body, wanted, chunk, max);
            let mut expected = whole.1.clone();
            // Where an error is found may read differently; that it is, and how many, may not.
            stats.first_errors.clear();
            expected.first_errors.clear();
            // Compared as printed, where NaN equals NaN.
            assert_eq!(
                format!("{:?}", (samples, stats)),
                format!("{:?}", (&whole.0, expected)),
                "chunks of {chunk}"
            );
        }
        whole
    }

    fn pairs(labels: &[(&str, &str)]) -> Vec<(String, String)> {
        labels
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn families_not_wanted_are_skipped_unread_and_counted() {
        let mut body = gauge_family(
            "apiserver_flowcontrol_current_limit_seats",
            "workload-low",
            245.0,
        )
        .delimited();
        body.extend(gauge_family("go_goroutines", "x", 1.0).delimited());
        body.extend(
            gauge_family(
                "apiserver_flowcontrol_current_limit_seats",
                "global-default",
                24.0,
            )
            .delimited(),
        );
        let wanted = |n: &str| n.starts_with("apiserver_flowcontrol_");
        let (samples, stats) = read_all_ways(&body, wanted, 1 << 20);
        assert_eq!(
            samples,
            vec![
                (
                    "apiserver_flowcontrol_current_limit_seats".into(),
                    pairs(&[("priority_level", "workload-low")]),
                    245.0,
                    None
                ),
                (
                    "apiserver_flowcontrol_current_limit_seats".into(),
                    pairs(&[("priority_level", "global-default")]),
                    24.0,
                    None
                ),
            ]
        );
        assert_eq!(
            (stats.families, stats.skipped_families, stats.samples),
            (3, 1, 2)
        );
        assert_eq!((stats.invalid_lines, stats.skipped_samples), (0, 0));
    }

    #[test]
    fn a_histogram_is_its_buckets_sum_and_count_with_an_implicit_inf() {
        let bucket = |c: u64, le: f64| Msg::default().varint(1, c).double(2, le);
        let hist = Msg::default()
            .varint(1, 9)
            .double(2, 1.25)
            .msg(3, bucket(2, 0.005))
            .msg(3, bucket(7, 1.0))
            .msg(15, Msg::default().varint(1, 1_700_000_000));
        let metric = Msg::default()
            .msg(1, label("execute", "true"))
            .msg(1, label("priority_level", "pl"))
            .msg(7, hist)
            .varint(6, 1_700_000_000_123);
        let family = Msg::default()
            .bytes(1, b"apiserver_flowcontrol_request_wait_duration_seconds")
            .varint(3, HISTOGRAM)
            .msg(4, metric);
        let (samples, stats) = read_all_ways(&family.delimited(), |_| true, 1 << 20);
        let at = Some(1_700_000_000_123);
        let name = "apiserver_flowcontrol_request_wait_duration_seconds";
        let with_le = |le| pairs(&[("execute", "true"), ("priority_level", "pl"), ("le", le)]);
        let plain = pairs(&[("execute", "true"), ("priority_level", "pl")]);
        assert_eq!(
            samples,
            vec![
                (format!("{name}_bucket"), with_le("0.005"), 2.0, at),
                (format!("{name}_bucket"), with_le("1"), 7.0, at),
                (format!("{name}_bucket"), with_le("+Inf"), 9.0, at),
                (format!("{name}_sum"), plain.clone(), 1.25, at),
                (format!("{name}_count"), plain, 9.0, at),
            ]
        );
        assert_eq!((stats.samples, stats.invalid_lines), (5, 0));
        // Only the buckets wanted: the family is read, the rest counted as filtered out.
        let (samples, stats) = read_all_ways(
            &family.delimited(),
            |n: &str| n.ends_with("_bucket"),
            1 << 20,
        );
        assert_eq!(samples.len(), 3);
        assert_eq!((stats.skipped_samples, stats.skipped_families), (2, 0));
    }

    #[test]
    fn an_explicit_inf_bucket_float_counts_a_summary_and_a_counter() {
        let bucket = |le: f64, c: f64| Msg::default().varint(1, 1).double(4, c).double(2, le);
        let hist = Msg::default()
            .varint(1, 1)
            .double(4, 2.5)
            .msg(3, bucket(1.0, 1.5))
            .msg(3, bucket(f64::INFINITY, 2.5));
        let family = Msg::default()
            .bytes(1, b"h")
            .varint(3, GAUGE_HISTOGRAM)
            .msg(4, Msg::default().msg(7, hist));
        let quantile = |q: f64, v: f64| Msg::default().double(1, q).double(2, v);
        let summary = Msg::default().bytes(1, b"s").varint(3, SUMMARY).msg(
            4,
            Msg::default().msg(
                4,
                Msg::default()
                    .varint(1, 4)
                    .double(2, 8.0)
                    .msg(3, quantile(0.5, 1.0)),
            ),
        );
        let counter = Msg::default()
            .bytes(1, b"c_total")
            .varint(3, COUNTER)
            .msg(4, Msg::default().msg(3, Msg::default().double(1, f64::NAN)));
        let mut body = family.delimited();
        body.extend(summary.delimited());
        body.extend(counter.delimited());
        let (samples, _) = read_all_ways(&body, |_| true, 1 << 20);
        let got: Vec<(String, String, f64)> = samples
            .iter()
            .map(|(n, l, v, _)| {
                (
                    n.clone(),
                    l.iter().map(|(a, b)| format!("{a}={b}")).collect(),
                    *v,
                )
            })
            .collect();
        let expected = [
            ("h_bucket", "le=1", 1.5),
            ("h_bucket", "le=+Inf", 2.5),
            ("h_sum", "", 0.0),
            ("h_count", "", 2.5),
            ("s", "quantile=0.5", 1.0),
            ("s_sum", "", 8.0),
            ("s_count", "", 4.0),
        ];
        for (g, e) in got.iter().zip(expected) {
            assert_eq!((g.0.as_str(), g.1.as_str(), g.2), e);
        }
        assert_eq!(got.len(), 8);
        assert!(got[7].0 == "c_total" && got[7].2.is_nan());
    }

    #[test]
    fn metrics_before_the_name_or_type_are_read_at_the_end() {
        // Not client_golang's order: the metric first, then the name, no type at all (a counter, proto2's default).
        let metric = Msg::default()
            .msg(1, label("priority_level", "a"))
            .msg(3, Msg::default().double(1, 3.0));
        let family = Msg::default().msg(4, metric.clone()).bytes(1, b"x_total");
        let (samples, stats) = read_all_ways(&family.delimited(), |_| true, 1 << 20);
        assert_eq!(
            samples,
            vec![(
                "x_total".into(),
                pairs(&[("priority_level", "a")]),
                3.0,
                None
            )]
        );
        assert_eq!(stats.invalid_lines, 0);
        // The type after the metrics: the metrics wait for it.
        let gauge = Msg::default()
            .msg(1, label("priority_level", "a"))
            .msg(2, Msg::default().double(1, 4.0));
        let family = Msg::default().bytes(1, b"g").msg(4, gauge).varint(3, GAUGE);
        let (samples, _) = read_all_ways(&family.delimited(), |_| true, 1 << 20);
        assert_eq!(
            samples,
            vec![("g".into(), pairs(&[("priority_level", "a")]), 4.0, None)]
        );
        // Unwanted once named: dropped unread.
        let family = Msg::default().msg(4, metric).bytes(1, b"y_total");
        let (samples, stats) =
            read_all_ways(&family.delimited(), |n: &str| n == "x_total", 1 << 20);
        assert!(samples.is_empty());
        assert_eq!(stats.skipped_families, 1);
    }

    #[test]
    fn unknown_fields_are_skipped_whatever_their_wire_type() {
        let metric = Msg::default()
            .varint(9, 5)
            .double(10, 1.0)
            .raw(&[0x5d, 1, 2, 3, 4]) // field 11, fixed32
            .msg(1, label("priority_level", "a"))
            .msg(2, Msg::default().double(1, 2.0).varint(7, 1));
        let family = Msg::default()
            .bytes(1, b"g")
            .bytes(5, b"seconds") // unit, a later addition
            .varint(3, GAUGE)
            .msg(4, metric)
            .raw(&[0x35, 0, 0, 0, 0]); // field 6, fixed32, after the metrics
        let (samples, stats) = read_all_ways(&family.delimited(), |_| true, 1 << 20);
        assert_eq!(
            samples,
            vec![("g".into(), pairs(&[("priority_level", "a")]), 2.0, None)]
        );
        assert_eq!(stats.invalid_lines, 0);
    }

    #[test]
    fn a_broken_family_is_counted_once_and_the_next_one_is_read() {
        let good = gauge_family("g", "a", 1.0).delimited();
        let broken = [
            // A metric whose length runs past its family.
            Msg::default()
                .bytes(1, b"g")
                .varint(3, GAUGE)
                .raw(&[0x22, 0x7f, 0]),
            // A group (wire type 3).
            Msg::default().bytes(1, b"g").raw(&[0x1b]),
            // Named twice.
            Msg::default().bytes(1, b"g").bytes(1, b"h"),
            // No name.
            Msg::default().bytes(2, b"help"),
            // A name that is not UTF-8.
            Msg::default().bytes(1, b"\xff\xfe"),
            // A tag cut by the family's end.
            Msg::default().raw(&[0x80]),
            // Typed twice.
            Msg::default()
                .bytes(1, b"g")
                .varint(3, GAUGE)
                .varint(3, COUNTER),
        ];
        for (i, family) in broken.iter().enumerate() {
            let mut body = good.clone();
            body.extend(family.delimited());
            body.extend(&good);
            let (samples, stats) = read_all_ways(&body, |_| true, 1 << 20);
            assert_eq!(samples.len(), 2, "{i}: the families around it are read");
            assert_eq!(stats.invalid_lines, 1, "{i}: {:?}", stats.first_errors);
            assert_eq!(stats.families, 3, "{i}");
        }
        // An empty family.
        let mut body = vec![0];
        body.extend(&good);
        let (samples, stats) = read_all_ways(&body, |_| true, 1 << 20);
        assert_eq!((samples.len(), stats.invalid_lines), (1, 1));
    }

    #[test]
    fn an_unreadable_metric_is_counted_and_its_neighbours_read() {
        let good = Msg::default()
            .msg(1, label("priority_level", "a"))
            .msg(2, Msg::default().double(1, 1.0));
        let bad = [
            // A label that is not UTF-8.
            Msg::default().msg(1, Msg::default().bytes(1, b"pl").bytes(2, b"\xff")),
            // A label without a name.
            Msg::default().msg(1, Msg::default().bytes(2, b"v")),
            // The value's double as a varint.
            Msg::default().msg(2, Msg::default().varint(1, 1)),
            // A value message cut short.
            Msg::default().raw(&[0x12, 0x03, 0x09, 0x00, 0x00]),
        ];
        for (i, metric) in bad.into_iter().enumerate() {
            let family = Msg::default()
                .bytes(1, b"g")
                .varint(3, GAUGE)
                .msg(4, good.clone())
                .msg(4, metric)
                .msg(4, good.clone());
            let (samples, stats) = read_all_ways(&family.delimited(), |_| true, 1 << 20);
            assert_eq!(samples.len(), 2, "{i}");
            assert_eq!(stats.invalid_lines, 1, "{i}: {:?}", stats.first_errors);
            assert!(
                stats.first_errors[0].to_string().starts_with("family g: "),
                "{:?}",
                stats.first_errors
            );
        }
        // An unknown metric type: every metric of it is unreadable.
        let family = Msg::default()
            .bytes(1, b"g")
            .varint(3, 9)
            .msg(4, good.clone())
            .msg(4, good);
        let (samples, stats) = read_all_ways(&family.delimited(), |_| true, 1 << 20);
        assert_eq!((samples.len(), stats.invalid_lines), (0, 2));
    }

    #[test]
    fn a_metric_over_the_limit_is_counted_and_never_held() {
        let big = Msg::default()
            .msg(1, label("priority_level", &"x".repeat(100)))
            .msg(2, Msg::default().double(1, 1.0));
        let small = Msg::default()
            .msg(1, label("priority_level", "a"))
            .msg(2, Msg::default().double(1, 2.0));
        let family = Msg::default()
            .bytes(1, b"g")
            .varint(3, GAUGE)
            .msg(4, big)
            .msg(4, small);
        let (samples, stats) = read_all_ways(&family.delimited(), |_| true, 64);
        assert_eq!(
            samples,
            vec![("g".into(), pairs(&[("priority_level", "a")]), 2.0, None)]
        );
        assert_eq!((stats.oversized_lines, stats.invalid_lines), (1, 0));
    }

    #[test]
    fn a_body_cut_short_or_broken_is_told() {
        let good = gauge_family("g", "a", 1.0).delimited();
        // Cut inside the second family: the first is read, the second counted once.
        let mut body = good.clone();
        body.extend(&good[..good.len() - 3]);
        let (samples, stats) = read(&body, |_| true, usize::MAX, 1 << 20);
        assert_eq!((samples.len(), stats.invalid_lines), (1, 1));
        assert!(
            stats.first_errors[0].message.contains("ends inside"),
            "{:?}",
            stats.first_errors
        );
        // Cut inside a length.
        let mut body = good.clone();
        body.push(0x80);
        let (_, stats) = read(&body, |_| true, usize::MAX, 1 << 20);
        assert_eq!(stats.invalid_lines, 1);
        // A length that is no varint: nothing after it is read.
        let mut body = good.clone();
        body.extend([0xff; 11]);
        body.extend(&good);
        let (samples, stats) = read_all_ways(&body, |_| true, 1 << 20);
        assert_eq!((samples.len(), stats.invalid_lines), (1, 1));
        // A skipped family cut short loses nothing wanted.
        let mut body = good.clone();
        let skipped = gauge_family("other", "a", 1.0).delimited();
        body.extend(&skipped[..skipped.len() - 2]);
        let (_, stats) = read(&body, |n: &str| n == "g", usize::MAX, 1 << 20);
        assert_eq!((stats.invalid_lines, stats.skipped_families), (0, 1));
        // Text is not protobuf: read as families, it is unreadable, never a sample.
        let (samples, stats) = read_all_ways(
            b"# HELP g a gauge\ng{priority_level=\"a\"} 1\n",
            |_| true,
            1 << 20,
        );
        assert!(samples.is_empty() && stats.invalid_lines > 0);
    }

    #[test]
    fn the_content_type_says_the_format() {
        assert!(is_content_type(CONTENT_TYPE));
        assert!(is_content_type(
            "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited; escaping=underscores"
        ));
        assert!(is_content_type("application/vnd.google.protobuf"));
        assert!(!is_content_type("application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=text"));
        assert!(!is_content_type(
            "application/vnd.google.protobuf; proto=other.Message"
        ));
        assert!(!is_content_type("text/plain; version=0.0.4; charset=utf-8"));
        assert!(!is_content_type(""));
    }
}
