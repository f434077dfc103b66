//! One metric of a wanted family, decoded whole and delivered as the samples the text format would have given.

use std::borrow::Cow;
use std::fmt::Write as _;

use super::invalid;
use super::wire::{bytes, double, fields, unsigned};
use crate::parse::exposition::{recycle, Label, ParseStats, Sample, SampleSink};

/// `MetricType` (metrics.proto).
pub(super) const COUNTER: u64 = 0;
pub(super) const GAUGE: u64 = 1;
pub(super) const SUMMARY: u64 = 2;
pub(super) const UNTYPED: u64 = 3;
pub(super) const HISTOGRAM: u64 = 4;
pub(super) const GAUGE_HISTOGRAM: u64 = 5;

/// A family's sample names by [`Suffix`], each with the filter's verdict.
pub(super) type SampleNames = [(String, bool); 4];

/// Which of a family's sample names: its own (a counter, gauge or untyped value, a summary's quantiles), a
/// histogram's buckets, a histogram's or summary's sum and count.
#[derive(Clone, Copy)]
pub(super) enum Suffix {
    None = 0,
    Bucket = 1,
    Sum = 2,
    Count = 3,
}

pub(super) const SUFFIXES: [&str; 4] = ["", "_bucket", "_sum", "_count"];

/// Buffers reused from metric to metric.
#[derive(Default)]
pub(super) struct Scratch {
    labels: Vec<Label<'static>>,
    /// The `le` or `quantile` values of one metric, as text.
    bounds: String,
    /// One metric's buckets or quantiles: where its `le` or `quantile` is in `bounds`, and its value.
    entries: Vec<(std::ops::Range<usize>, f64)>,
}

/// The field of `Metric` that holds a value of this family type.
pub(super) fn value_field(kind: u64) -> Option<u64> {
    match kind {
        GAUGE => Some(2),
        COUNTER => Some(3),
        SUMMARY => Some(4),
        UNTYPED => Some(5),
        HISTOGRAM | GAUGE_HISTOGRAM => Some(7),
        _ => None,
    }
}

/// One metric of a wanted family, delivered as its samples; an unreadable one counts once as invalid and delivers
/// none.
pub(super) fn read_metric(
    bytes: &[u8],
    kind: u64,
    names: &SampleNames,
    scratch: &mut Scratch,
    stats: &mut ParseStats,
    sink: &mut impl SampleSink,
) {
    scratch.bounds.clear();
    scratch.entries.clear();
    // The numbers first, so that the labels below can borrow their text.
    let parts = metric_value(bytes, kind).and_then(|(message, timestamp_ms)| {
        let values = match kind {
            SUMMARY => summary(message, &mut scratch.bounds, &mut scratch.entries)?,
            HISTOGRAM | GAUGE_HISTOGRAM => {
                histogram(message, &mut scratch.bounds, &mut scratch.entries)?
            }
            _ => Values::Single(single(message)?),
        };
        Ok((values, timestamp_ms))
    });
    let (values, timestamp_ms) = match parts {
        Ok(parts) => parts,
        Err(why) => return invalid(stats, format!("family {}: {why}", names[0].0)),
    };
    let mut labels: Vec<Label<'_>> = recycle(std::mem::take(&mut scratch.labels));
    if let Err(why) = metric_labels(bytes, &mut labels) {
        scratch.labels = recycle(labels);
        return invalid(stats, format!("family {}: {why}", names[0].0));
    }
    let mut out = Out {
        names,
        timestamp_ms,
        stats,
        sink,
    };
    let text: &str = &scratch.bounds;
    // A summary's quantiles and a histogram's buckets differ only in their bound's label and the samples' suffix.
    let (bound, per_bound, count, sum) = match values {
        Values::Single(value) => {
            out.sample(Suffix::None, &labels, value);
            scratch.labels = recycle(labels);
            return;
        }
        Values::Summary { count, sum } => ("quantile", Suffix::None, count, sum),
        Values::Histogram { count, sum } => ("le", Suffix::Bucket, count, sum),
    };
    for (range, value) in &scratch.entries {
        labels.push(Label {
            name: bound,
            value: Cow::Borrowed(&text[range.clone()]),
        });
        out.sample(per_bound, &labels, *value);
        labels.pop();
    }
    out.sample(Suffix::Sum, &labels, sum);
    out.sample(Suffix::Count, &labels, count);
    scratch.labels = recycle(labels);
}

/// What a metric's value message says; a summary's quantiles or a histogram's buckets are in `Scratch::entries`.
pub(super) enum Values {
    Single(f64),
    Summary { count: f64, sum: f64 },
    Histogram { count: f64, sum: f64 },
}

/// The message holding a metric's value (empty when absent: proto2 reads its fields as 0) and its timestamp.
pub(super) fn metric_value(bytes: &[u8], kind: u64) -> Result<(&[u8], Option<i64>), &'static str> {
    let value_field = value_field(kind).ok_or("an unknown metric type")?;
    let mut value: &[u8] = &[];
    let mut timestamp_ms = None;
    for field in fields(bytes) {
        match field? {
            // int64 is written as its two's complement.
            (6, v) => timestamp_ms = Some(unsigned(v)? as i64),
            (n, v) if n == value_field => value = self::bytes(v)?,
            _ => {}
        }
    }
    Ok((value, timestamp_ms))
}

/// A metric's labels, in the order written.
pub(super) fn metric_labels<'a>(
    bytes: &'a [u8],
    labels: &mut Vec<Label<'a>>,
) -> Result<(), &'static str> {
    for field in fields(bytes) {
        if let (1, v) = field? {
            labels.push(label_pair(self::bytes(v)?)?);
        }
    }
    Ok(())
}

pub(super) fn label_pair(bytes: &[u8]) -> Result<Label<'_>, &'static str> {
    let (mut name, mut value) = ("", "");
    for field in fields(bytes) {
        let text =
            |v| std::str::from_utf8(self::bytes(v)?).map_err(|_| "a label that is not UTF-8");
        match field? {
            (1, v) => name = text(v)?,
            (2, v) => value = text(v)?,
            _ => {}
        }
    }
    if name.is_empty() {
        return Err("a label without a name");
    }
    Ok(Label {
        name,
        value: Cow::Borrowed(value),
    })
}

/// Where one metric's samples go.
pub(super) struct Out<'o, S> {
    names: &'o SampleNames,
    timestamp_ms: Option<i64>,
    stats: &'o mut ParseStats,
    sink: &'o mut S,
}

impl<S: SampleSink> Out<'_, S> {
    fn sample(&mut self, suffix: Suffix, labels: &[Label<'_>], value: f64) {
        let (name, wanted) = &self.names[suffix as usize];
        if !wanted {
            self.stats.skipped_samples += 1;
            return;
        }
        self.stats.samples += 1;
        self.sink.sample(&Sample {
            name,
            labels,
            value,
            timestamp_ms: self.timestamp_ms,
        });
    }
}

/// `Gauge`, `Counter` and `Untyped` hold their value in field 1.
pub(super) fn single(message: &[u8]) -> Result<f64, &'static str> {
    let mut value = 0.0;
    for field in fields(message) {
        if let (1, v) = field? {
            value = double(v)?;
        }
    }
    Ok(value)
}

/// Numbers as the text format spells `le` and `quantile` (`+Inf`, `NaN`); any other in Rust's shortest form, which
/// reads back as the same number.
pub(super) fn push_number(out: &mut String, v: f64) -> std::ops::Range<usize> {
    let start = out.len();
    if v.is_nan() {
        out.push_str("NaN");
    } else if v == f64::INFINITY {
        out.push_str("+Inf");
    } else if v == f64::NEG_INFINITY {
        out.push_str("-Inf");
    } else {
        let _ = write!(out, "{v}");
    }
    start..out.len()
}

/// A summary's count, sum and quantiles (into `entries`, their text into `bounds`).
pub(super) fn summary(
    message: &[u8],
    bounds: &mut String,
    entries: &mut Vec<(std::ops::Range<usize>, f64)>,
) -> Result<Values, &'static str> {
    let (mut count, mut sum) = (0u64, 0.0);
    for field in fields(message) {
        match field? {
            (1, v) => count = unsigned(v)?,
            (2, v) => sum = double(v)?,
            (3, v) => {
                let (mut q, mut value) = (0.0, 0.0);
                for f in fields(self::bytes(v)?) {
                    match f? {
                        (1, v) => q = double(v)?,
                        (2, v) => value = double(v)?,
                        _ => {}
                    }
                }
                entries.push((push_number(bounds, q), value));
            }
            _ => {}
        }
    }
    Ok(Values::Summary {
        count: count as f64,
        sum,
    })
}

/// A classic histogram's count, sum and buckets (into `entries`, `+Inf` added when implicit). A float count
/// (`sample_count_float`, `cumulative_count_float`) overrides the integer one when positive (metrics.proto).
pub(super) fn histogram(
    message: &[u8],
    bounds: &mut String,
    entries: &mut Vec<(std::ops::Range<usize>, f64)>,
) -> Result<Values, &'static str> {
    let (mut count, mut count_float, mut sum) = (0u64, 0.0, 0.0);
    let mut has_inf = false;
    for field in fields(message) {
        match field? {
            (1, v) => count = unsigned(v)?,
            (4, v) => count_float = double(v)?,
            (2, v) => sum = double(v)?,
            (3, v) => {
                let (mut cumulative, mut cumulative_float, mut upper) = (0u64, 0.0, 0.0);
                for f in fields(self::bytes(v)?) {
                    match f? {
                        (1, v) => cumulative = unsigned(v)?,
                        (4, v) => cumulative_float = double(v)?,
                        (2, v) => upper = double(v)?,
                        _ => {}
                    }
                }
                has_inf |= upper == f64::INFINITY;
                let cumulative = if cumulative_float > 0.0 {
                    cumulative_float
                } else {
                    cumulative as f64
                };
                entries.push((push_number(bounds, upper), cumulative));
            }
            _ => {}
        }
    }
    let count = if count_float > 0.0 {
        count_float
    } else {
        count as f64
    };
    if !has_inf {
        entries.push((push_number(bounds, f64::INFINITY), count));
    }
    Ok(Values::Histogram { count, sum })
}
