//! Streaming, zero-copy parser of the Prometheus text exposition format (0.0.4).
//!
//! Why our own: a big kube-apiserver serves 10-100 MB of `/metrics` per scrape and only the
//! `apiserver_flowcontrol_*` families (plus a few `apiserver_*` ones) matter. The sample name is
//! checked against a filter before any label is parsed, so other lines cost finding their end (64 bytes'
//! newlines at a time, `exposition/newlines.rs`) and, in a run of one name, one comparison.
//!
//! Zero copy: names and label values borrow from the chunk. Only a line split across two chunks
//! is copied (into a carry buffer bounded by `max_line_bytes`) and only label values with escapes
//! allocate. Nothing is dropped silently: every line ends up in one counter of [`ParseStats`].

use std::borrow::Cow;

mod names;
mod newlines;
mod scan;
mod value;
use names::Verdicts;
use newlines::Newlines;
use scan::{
    ascii_name, lossy_snippet, scan_label_name, scan_metric_name, scan_token, skip_blanks, trim_end,
};
pub(crate) use value::parse_float;
use value::parse_value;

/// One label of a sample; `value` is unescaped (`\\`, `\"`, `\n`).
#[derive(Debug, Clone, PartialEq)]
pub struct Label<'a> {
    pub name: &'a str,
    pub value: Cow<'a, str>,
}

/// One sample line. Histogram and summary series (`_bucket`, `_sum`, `_count`, quantiles) are
/// ordinary samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<'a> {
    pub name: &'a str,
    pub labels: &'a [Label<'a>],
    pub value: f64,
    pub timestamp_ms: Option<i64>,
}

impl Sample<'_> {
    /// Value of the label `name`, if present.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|l| same(l.name, name))
            .map(|l| l.value.as_ref())
    }
}

/// Whether two short strings (label names, levels, replicas) are the same, compared a word at a time in place: a
/// fleet's round compares millions, and a call to `memcmp` for each was a tenth of the daemon's CPU (perf).
#[inline]
pub fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let n = a.len();
    if n != b.len() {
        return false;
    }
    // Two loads that together cover the string, overlapping where it is shorter than both.
    fn at<const W: usize>(s: &[u8], i: usize) -> [u8; W] {
        let mut word = [0; W];
        word.copy_from_slice(&s[i..i + W]);
        word
    }
    match n {
        0 => true,
        1..=3 => a.iter().zip(b).all(|(x, y)| x == y),
        4..=8 => at::<4>(a, 0) == at::<4>(b, 0) && at::<4>(a, n - 4) == at::<4>(b, n - 4),
        9..=16 => at::<8>(a, 0) == at::<8>(b, 0) && at::<8>(a, n - 8) == at::<8>(b, n - 8),
        _ => a == b,
    }
}

/// Receives every wanted, valid sample.
pub trait SampleSink {
    fn sample(&mut self, sample: &Sample<'_>);
}

impl<F: FnMut(&Sample<'_>)> SampleSink for F {
    fn sample(&mut self, sample: &Sample<'_>) {
        self(sample)
    }
}

/// Counters of one parse. In the text format every line is either a comment/blank line, a delivered sample, a
/// skipped (filtered out) sample, an invalid line or an oversized line. In the protobuf format
/// ([`super::protobuf`]) every family is skipped whole or read, and each metric of a family read is delivered as
/// samples, filtered out, invalid or oversized.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParseStats {
    /// Lines seen, including comments and blank lines (text).
    pub lines: u64,
    /// Samples delivered to the sink.
    pub samples: u64,
    /// Samples filtered out by name: sample lines (text), or samples of a family read (protobuf).
    pub skipped_samples: u64,
    /// Lines that are neither comments, blank lines nor valid samples (text); families or metrics that cannot be
    /// read (protobuf).
    pub invalid_lines: u64,
    /// Wanted lines (text) or metrics (protobuf) longer than `max_line_bytes`, skipped without buffering.
    pub oversized_lines: u64,
    /// Families seen (protobuf).
    pub families: u64,
    /// Families skipped unread, none of their samples wanted (protobuf).
    pub skipped_families: u64,
    /// The first [`MAX_KEPT_ERRORS`] errors, for logs.
    pub first_errors: Vec<ParseError>,
}

/// How many errors [`ParseStats::first_errors`] keeps.
pub const MAX_KEPT_ERRORS: usize = 5;

/// Why one line (or, in the protobuf format, one family or metric) was invalid.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{message}", if *line > 0 { format!("line {line}: ") } else { String::new() })]
pub struct ParseError {
    /// 1-based line number; 0 in the protobuf format, whose messages name their family instead.
    pub line: u64,
    pub message: String,
}

/// Incremental parser: [`feed`](Self::feed) chunks of any size, then [`finish`](Self::finish).
pub struct ExpositionParser<F: Fn(&str) -> bool> {
    wanted: F,
    max_line_bytes: usize,
    /// Start of a line that continues in the next chunk; never longer than `max_line_bytes + 1`.
    carry: Vec<u8>,
    /// The carried line's name was already accepted by `wanted` (call the filter once per line).
    carry_name_ok: bool,
    /// Streaming past the rest of a line already accounted for (unwanted, comment or oversized).
    skipping: bool,
    /// Reused between lines; always empty between lines, so the `'static` is never observed.
    labels: Vec<Label<'static>>,
    stats: ParseStats,
    /// The last sample names the filter judged, and their verdicts.
    verdicts: Verdicts,
    /// Where the chunk being fed has its newlines.
    newlines: Newlines,
}

impl<F: Fn(&str) -> bool> ExpositionParser<F> {
    /// `wanted` gets each sample name before its labels are parsed, not again while the name is one of the last few
    /// judged (it must give the same answer for the same name). A line longer than
    /// `max_line_bytes` (without its `\n`) is never buffered.
    pub fn new(wanted: F, max_line_bytes: usize) -> Self {
        ExpositionParser {
            wanted,
            max_line_bytes,
            carry: Vec::new(),
            carry_name_ok: false,
            skipping: false,
            labels: Vec::new(),
            stats: ParseStats::default(),
            verdicts: Verdicts::default(),
            newlines: Newlines::default(),
        }
    }

    /// Parses the complete lines of `chunk`; a line may span any number of chunks.
    pub fn feed(&mut self, chunk: &[u8], sink: &mut impl SampleSink) {
        self.newlines.reset();
        let mut pos = 0;
        if self.skipping {
            match self.newlines.find(chunk, 0) {
                None => return,
                Some(i) => {
                    self.skipping = false;
                    self.stats.lines += 1;
                    pos = i + 1;
                }
            }
        } else if !self.carry.is_empty() {
            match self.newlines.find(chunk, 0) {
                None => {
                    self.add_partial(chunk);
                    return;
                }
                Some(i) => {
                    self.add_partial(&chunk[..i]);
                    if self.skipping {
                        // The carried line turned out oversized or unwanted: it ends here.
                        self.skipping = false;
                        self.stats.lines += 1;
                    } else {
                        self.finish_carried_line(sink);
                    }
                    pos = i + 1;
                }
            }
        }
        loop {
            pos = self.skip_run(chunk, pos);
            let Some(end) = self.newlines.find(chunk, pos) else {
                break;
            };
            let line = &chunk[pos..end];
            self.stats.lines += 1;
            process_line(
                line,
                &self.wanted,
                false,
                self.max_line_bytes,
                &mut self.labels,
                &mut self.stats,
                &mut self.verdicts,
                sink,
            );
            pos = end + 1;
        }
        if pos < chunk.len() {
            self.add_partial(&chunk[pos..]);
        }
    }

    /// Streams past the whole lines from `pos` on whose name was one of the last judged and not wanted: most of a
    /// body is such runs (a family not read, line after line), and here each line costs a comparison of its name and
    /// a look-up of its end, not a line's full handling. Returns where the first other line (or the unfinished last
    /// one) starts. A line it passes is counted as [`process_line`] would count it: a skipped sample.
    fn skip_run(&mut self, chunk: &[u8], mut pos: usize) -> usize {
        while let Some((end, false)) = self.verdicts.lookup(chunk, pos) {
            // A name as long as `max_line_bytes` makes its lines oversized, not skipped: leave those to the rule.
            if end - pos >= self.max_line_bytes {
                break;
            }
            let Some(line_end) = self.newlines.find(chunk, end + 1) else {
                break;
            };
            self.stats.lines += 1;
            self.stats.skipped_samples += 1;
            pos = line_end + 1;
        }
        pos
    }

    /// Parses a last line without `\n` and returns the counters.
    pub fn finish(mut self, sink: &mut impl SampleSink) -> ParseStats {
        if self.skipping {
            self.stats.lines += 1;
        } else if !self.carry.is_empty() {
            self.finish_carried_line(sink);
        }
        self.stats
    }

    /// Appends the continuation of an unfinished line, deciding as early as possible whether it
    /// must be buffered at all (unwanted names and comments are streamed past, not copied).
    fn add_partial(&mut self, bytes: &[u8]) {
        let limit = self.max_line_bytes.saturating_add(1);
        let take = limit.saturating_sub(self.carry.len()).min(bytes.len());
        self.carry.extend_from_slice(&bytes[..take]);
        let oversized = self.carry.len() > self.max_line_bytes;
        if !self.carry_name_ok || oversized {
            let prefix_len = self.carry.len().min(self.max_line_bytes);
            let head = classify_head(&self.carry[..prefix_len]);
            let decided = match head {
                Head::Comment => true,
                Head::Name(name) if self.carry_name_ok || (self.wanted)(name) => {
                    self.carry_name_ok = true;
                    if oversized {
                        self.stats.oversized_lines += 1;
                    }
                    oversized
                }
                Head::Name(_) => {
                    self.stats.skipped_samples += 1;
                    true
                }
                Head::Undecided => {
                    if oversized {
                        self.stats.oversized_lines += 1;
                    }
                    oversized
                }
            };
            if decided {
                self.carry.clear();
                self.carry_name_ok = false;
                self.skipping = true;
            }
        }
    }

    fn finish_carried_line(&mut self, sink: &mut impl SampleSink) {
        let line = std::mem::take(&mut self.carry);
        self.stats.lines += 1;
        process_line(
            &line,
            &self.wanted,
            self.carry_name_ok,
            self.max_line_bytes,
            &mut self.labels,
            &mut self.stats,
            &mut self.verdicts,
            sink,
        );
        // Keep the allocation for the next split line.
        self.carry = line;
        self.carry.clear();
        self.carry_name_ok = false;
    }
}

/// Parses a whole in-memory body; nothing is oversized.
pub fn parse_all(
    input: &[u8],
    wanted: impl Fn(&str) -> bool,
    sink: &mut impl SampleSink,
) -> ParseStats {
    let mut parser = ExpositionParser::new(wanted, usize::MAX);
    parser.feed(input, sink);
    parser.finish(sink)
}

/// What the first bytes of a line say about it.
enum Head<'a> {
    Comment,
    /// The sample name is complete (a delimiter follows it).
    Name(&'a str),
    /// Blank so far, name not finished yet, or not a sample line: only the whole line can tell.
    Undecided,
}

/// Looks at a prefix of a line only, so that the answer is the same however the line is chunked.
fn classify_head(prefix: &[u8]) -> Head<'_> {
    let start = skip_blanks(prefix, 0);
    match prefix.get(start) {
        None => Head::Undecided,
        Some(b'#') => Head::Comment,
        Some(_) => {
            let end = scan_metric_name(prefix, start);
            match prefix.get(end) {
                Some(b'{' | b' ' | b'\t') if end > start => {
                    Head::Name(ascii_name(&prefix[start..end]))
                }
                _ => Head::Undecided,
            }
        }
    }
}

/// Handles one complete line (without its `\n`).
#[allow(clippy::too_many_arguments)]
fn process_line(
    line: &[u8],
    wanted: &impl Fn(&str) -> bool,
    name_ok: bool,
    max_line_bytes: usize,
    labels: &mut Vec<Label<'static>>,
    stats: &mut ParseStats,
    verdicts: &mut Verdicts,
    sink: &mut impl SampleSink,
) {
    if line.len() > max_line_bytes {
        // Same decision as for a line streamed across chunks: only its first bytes count.
        match classify_head(&line[..max_line_bytes]) {
            Head::Comment => {}
            Head::Name(name) if !name_ok && !wanted(name) => stats.skipped_samples += 1,
            _ => stats.oversized_lines += 1,
        }
        return;
    }
    // The name is read from the untrimmed line, exactly as `classify_head` reads a prefix.
    let start = skip_blanks(line, 0);
    match line.get(start) {
        None | Some(b'#') => return,
        Some(b'\r') if trim_end(line).is_empty() => return,
        Some(_) => {}
    }
    // One of the last names judged: the same verdict (the comparison implies the scan's result).
    if let (false, Some((name_end, wanted))) = (name_ok, verdicts.lookup(line, start)) {
        if !wanted {
            stats.skipped_samples += 1;
            return;
        }
        return parse_sample(line, start, name_end, labels, stats, sink);
    }
    let name_end = scan_metric_name(line, start);
    let delimiter_ok = matches!(line.get(name_end), Some(b'{' | b' ' | b'\t'));
    if name_end == start || !delimiter_ok {
        let message = if name_end == start {
            format!(
                "expected a metric name, a comment or a blank line, found {:?}",
                lossy_snippet(&line[start..])
            )
        } else {
            "metric name must be followed by labels or a value".to_string()
        };
        invalid(stats, message);
        return;
    }
    let name = ascii_name(&line[start..name_end]);
    if !name_ok {
        let verdict = wanted(name);
        verdicts.remember(name.as_bytes(), verdict);
        if !verdict {
            stats.skipped_samples += 1;
            return;
        }
    }
    parse_sample(line, start, name_end, labels, stats, sink);
}

/// A wanted sample line's labels, value and timestamp, given to `sink`.
fn parse_sample(
    line: &[u8],
    start: usize,
    name_end: usize,
    labels: &mut Vec<Label<'static>>,
    stats: &mut ParseStats,
    sink: &mut impl SampleSink,
) {
    let name = ascii_name(&line[start..name_end]);
    let line = trim_end(line);
    let mut current: Vec<Label<'_>> = recycle(std::mem::take(labels));
    match parse_rest(line, name_end, &mut current) {
        Ok((value, timestamp_ms)) => {
            stats.samples += 1;
            sink.sample(&Sample {
                name,
                labels: &current,
                value,
                timestamp_ms,
            });
        }
        Err(message) => invalid(stats, message),
    }
    *labels = recycle(current);
}

/// Empties a label Vec and hands its allocation over to another lifetime. The in-place collect
/// of an empty `IntoIter` keeps the buffer, so no allocation happens per line.
/// (`filter` could not change the lifetime; `filter_map` can, without a panicking `map`.)
#[allow(clippy::unnecessary_filter_map)]
pub fn recycle<'b>(mut v: Vec<Label<'_>>) -> Vec<Label<'b>> {
    v.clear();
    v.into_iter().filter_map(|_| None).collect()
}

fn invalid(stats: &mut ParseStats, message: String) {
    stats.invalid_lines += 1;
    if stats.first_errors.len() < MAX_KEPT_ERRORS {
        stats.first_errors.push(ParseError {
            line: stats.lines,
            message,
        });
    }
}

/// Parses labels (if any), value and timestamp after the metric name.
fn parse_rest<'a>(
    line: &'a [u8],
    mut pos: usize,
    labels: &mut Vec<Label<'a>>,
) -> Result<(f64, Option<i64>), String> {
    if line.get(pos) == Some(&b'{') {
        pos = parse_labels(line, pos + 1, labels)?;
    }
    pos = skip_blanks(line, pos);
    let value_end = scan_token(line, pos);
    if value_end == pos {
        return Err("missing sample value".to_string());
    }
    let value = parse_value(&line[pos..value_end])?;
    pos = skip_blanks(line, value_end);
    if pos == line.len() {
        return Ok((value, None));
    }
    let ts_end = scan_token(line, pos);
    let timestamp = std::str::from_utf8(&line[pos..ts_end])
        .ok()
        .and_then(|t| t.parse::<i64>().ok())
        .ok_or_else(|| format!("invalid timestamp {:?}", lossy_snippet(&line[pos..ts_end])))?;
    if skip_blanks(line, ts_end) != line.len() {
        return Err("unexpected text after the timestamp".to_string());
    }
    Ok((value, Some(timestamp)))
}

/// Parses `name="value", ...}` starting just after `{`; returns the position after `}`.
fn parse_labels<'a>(
    line: &'a [u8],
    mut pos: usize,
    labels: &mut Vec<Label<'a>>,
) -> Result<usize, String> {
    loop {
        pos = skip_blanks(line, pos);
        match line.get(pos) {
            Some(b'}') => return Ok(pos + 1),
            None => return Err("unterminated label set".to_string()),
            Some(_) => {}
        }
        let name_end = scan_label_name(line, pos);
        if name_end == pos {
            return Err(format!(
                "expected a label name at column {}",
                pos.saturating_add(1)
            ));
        }
        let name = ascii_name(&line[pos..name_end]);
        pos = skip_blanks(line, name_end);
        if line.get(pos) != Some(&b'=') {
            return Err(format!("expected '=' after label {name}"));
        }
        pos = skip_blanks(line, pos + 1);
        if line.get(pos) != Some(&b'"') {
            return Err(format!("expected '\"' to open the value of label {name}"));
        }
        let (value, after) = parse_label_value(line, pos + 1)
            .ok_or_else(|| format!("unterminated or non-UTF-8 value of label {name}"))?;
        labels.push(Label { name, value });
        pos = skip_blanks(line, after);
        match line.get(pos) {
            Some(b',') => pos += 1, // a trailing comma before '}' is allowed
            Some(b'}') => return Ok(pos + 1),
            _ => return Err(format!("expected ',' or '}}' after label {name}")),
        }
    }
}

/// Parses a label value starting just after its opening quote; returns the value and the
/// position after the closing quote. Borrowed unless it contains escapes.
fn parse_label_value(line: &[u8], start: usize) -> Option<(Cow<'_, str>, usize)> {
    let rest = line.get(start..)?;
    // Label values are short (a level, a flow schema, a bucket bound): a byte loop ends before `memchr2` has set up,
    // and tells on the way whether the value is ASCII, which needs no UTF-8 check (both were a third of a full parse:
    // `cargo bench -p apf --bench parse`, perf).
    let mut ascii = true;
    let mut stop = 0;
    while let Some(&b) = rest.get(stop) {
        if b == b'"' || b == b'\\' {
            break;
        }
        ascii &= b.is_ascii();
        stop += 1;
    }
    match rest.get(stop)? {
        b'"' if ascii => {
            // SAFETY: every byte before `stop` was checked to be ASCII, which is valid UTF-8.
            let value = unsafe { std::str::from_utf8_unchecked(&rest[..stop]) };
            return Some((Cow::Borrowed(value), start + stop + 1));
        }
        b'"' => {
            let value = std::str::from_utf8(&rest[..stop]).ok()?;
            return Some((Cow::Borrowed(value), start + stop + 1));
        }
        _ => {}
    }
    // Escapes: unescape into an owned buffer, validating UTF-8 at the end.
    let mut out: Vec<u8> = Vec::with_capacity(stop + 16);
    let mut i = 0;
    loop {
        let next = i + memchr::memchr2(b'"', b'\\', &rest[i..])?;
        out.extend_from_slice(&rest[i..next]);
        if rest[next] == b'"' {
            let value = String::from_utf8(out).ok()?;
            return Some((Cow::Owned(value), start + next + 1));
        }
        match rest.get(next + 1)? {
            b'\\' => out.push(b'\\'),
            b'"' => out.push(b'"'),
            b'n' => out.push(b'\n'),
            // Not defined by 0.0.4: keep it literally rather than drop the sample.
            other => {
                out.push(b'\\');
                out.push(*other);
            }
        }
        i = next + 2;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn same_is_equality_at_every_length_and_difference() {
        let base: String = (0..40u8).map(|i| char::from(b'a' + i % 26)).collect();
        for n in 0..=40 {
            let a = &base[..n];
            // Equal text in another place.
            let copy = String::from(a);
            assert!(same(a, a) && same(a, &copy), "{n}");
            // Another length, and one byte changed at each place.
            assert!(!same(a, &base[..(n + 1).min(40)]) || n == 40);
            for at in 0..n {
                let mut b = a.as_bytes().to_vec();
                b[at] = b'#';
                let b = String::from_utf8(b).unwrap_or_default();
                assert!(!same(a, &b), "{n} {at}");
            }
        }
    }

    use super::*;
    use rand::{Rng, SeedableRng};
    use std::io::Read;

    /// An owned copy of a sample, to compare parses.
    #[derive(Debug, Clone, PartialEq)]
    struct Owned {
        name: String,
        labels: Vec<(String, String)>,
        value: f64,
        timestamp_ms: Option<i64>,
    }

    impl Owned {
        fn label(&self, name: &str) -> Option<&str> {
            self.labels
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        }
    }

    fn owned(s: &Sample<'_>) -> Owned {
        Owned {
            name: s.name.to_string(),
            labels: s
                .labels
                .iter()
                .map(|l| (l.name.to_string(), l.value.to_string()))
                .collect(),
            value: s.value,
            timestamp_ms: s.timestamp_ms,
        }
    }

    /// NaN != NaN, so compare samples through the bit pattern.
    fn key(s: &Owned) -> (String, Vec<(String, String)>, u64, Option<i64>) {
        (
            s.name.clone(),
            s.labels.clone(),
            s.value.to_bits(),
            s.timestamp_ms,
        )
    }

    fn all(input: &[u8]) -> (Vec<Owned>, ParseStats) {
        let mut out = Vec::new();
        let stats = parse_all(input, |_| true, &mut |s: &Sample<'_>| out.push(owned(s)));
        (out, stats)
    }

    fn chunked(
        input: &[u8],
        sizes: &mut dyn FnMut() -> usize,
        wanted: impl Fn(&str) -> bool,
        max: usize,
    ) -> (Vec<Owned>, ParseStats) {
        let mut out = Vec::new();
        let mut sink = |s: &Sample<'_>| out.push(owned(s));
        let mut parser = ExpositionParser::new(wanted, max);
        let mut pos = 0;
        while pos < input.len() {
            let end = (pos + sizes().max(1)).min(input.len());
            parser.feed(&input[pos..end], &mut sink);
            pos = end;
        }
        let stats = parser.finish(&mut sink);
        (out, stats)
    }

    fn one(line: &str) -> Owned {
        let (s, stats) = all(line.as_bytes());
        assert_eq!(stats.invalid_lines, 0, "{line:?}: {:?}", stats.first_errors);
        assert_eq!(s.len(), 1, "{line:?}");
        s[0].clone()
    }

    fn is_invalid(line: &str) -> bool {
        let (s, stats) = all(line.as_bytes());
        s.is_empty() && stats.invalid_lines == 1
    }

    pub(crate) fn fixture_gz(name: &str) -> Vec<u8> {
        let path = format!(
            "{}/../../tests/fixtures/{name}.gz",
            env!("CARGO_MANIFEST_DIR")
        );
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(file)
            .read_to_end(&mut out)
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        out
    }

    fn fixture(name: &str) -> Vec<u8> {
        let path = format!("{}/../../tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn simple_sample_and_label_lookup() {
        let s =
            one("apiserver_flowcontrol_current_limit_seats{priority_level=\"workload-low\"} 56\n");
        assert_eq!(s.name, "apiserver_flowcontrol_current_limit_seats");
        assert_eq!(s.label("priority_level"), Some("workload-low"));
        assert_eq!(s.label("flow_schema"), None);
        assert_eq!(s.value, 56.0);
        assert_eq!(s.timestamp_ms, None);
        // And Sample::label itself.
        let mut seen = None;
        parse_all(b"m{a=\"1\",b=\"2\"} 3\n", |_| true, &mut |s: &Sample<
            '_,
        >| {
            seen = Some((s.label("b").map(str::to_string), s.label("c").is_none()))
        });
        assert_eq!(seen, Some((Some("2".to_string()), true)));
    }

    #[test]
    fn comments_blank_lines_and_untyped() {
        let input = "# HELP m [ALPHA] help text {with=\"braces\"}\n# TYPE m gauge\n\n   \n#just a comment\n  # indented comment\nm 1\nuntyped_metric 2\n";
        let (s, stats) = all(input.as_bytes());
        assert_eq!(s.len(), 2);
        assert_eq!(s[1].name, "untyped_metric");
        assert_eq!(stats.lines, 8);
        assert_eq!(stats.samples, 2);
        assert_eq!(stats.invalid_lines, 0);
    }

    #[test]
    fn crlf_and_surrounding_whitespace() {
        let (s, stats) = all(b"a 1\r\n  b{x=\"y\"}\t2 \t\r\n\tc 3\r\n\r\n");
        assert_eq!(stats.invalid_lines, 0, "{:?}", stats.first_errors);
        assert_eq!(
            s.iter()
                .map(|s| (s.name.as_str(), s.value))
                .collect::<Vec<_>>(),
            vec![("a", 1.0), ("b", 2.0), ("c", 3.0)]
        );
        assert_eq!(s[1].label("x"), Some("y"));
    }

    #[test]
    fn escapes_are_unescaped_and_only_they_allocate() {
        let input = b"m{a=\"back\\\\slash\",b=\"q\\\"uote\",c=\"new\\nline\",d=\"plain\"} 1\n";
        let mut kinds = Vec::new();
        parse_all(input, |_| true, &mut |s: &Sample<'_>| {
            kinds = s
                .labels
                .iter()
                .map(|l| (l.value.to_string(), matches!(l.value, Cow::Borrowed(_))))
                .collect();
        });
        assert_eq!(
            kinds,
            vec![
                ("back\\slash".to_string(), false),
                ("q\"uote".to_string(), false),
                ("new\nline".to_string(), false),
                ("plain".to_string(), true),
            ]
        );
        // An undefined escape is kept literally rather than dropping the sample.
        assert_eq!(one("m{a=\"x\\ty\"} 1").label("a"), Some("x\\ty"));
    }

    #[test]
    fn label_values_with_separators() {
        let s = one("m{path=\"/a,b=c}d e\",x = \"1\" , } 7");
        assert_eq!(s.label("path"), Some("/a,b=c}d e"));
        assert_eq!(s.label("x"), Some("1"));
        assert_eq!(s.labels.len(), 2);
        let s = one("m{} 8");
        assert!(s.labels.is_empty());
        assert_eq!(s.value, 8.0);
        let s = one("m{a=\"\"} 9");
        assert_eq!(s.label("a"), Some(""));
        let s = one("m{a=\"ünïcödé ✓\"} 1");
        assert_eq!(s.label("a"), Some("ünïcödé ✓"));
    }

    #[test]
    fn special_values_and_timestamps() {
        assert!(one("m NaN").value.is_nan());
        assert_eq!(one("m +Inf").value, f64::INFINITY);
        assert_eq!(one("m Inf").value, f64::INFINITY);
        assert_eq!(one("m -Inf").value, f64::NEG_INFINITY);
        assert_eq!(one("m 1.5e-3").value, 0.0015);
        assert_eq!(one("m 2E+10").value, 2e10);
        let z = one("m -0").value;
        assert!(z == 0.0 && z.is_sign_negative());
        let s = one("m{a=\"b\"} 3 1700000000123");
        assert_eq!(s.timestamp_ms, Some(1_700_000_000_123));
        assert_eq!(one("m 3 -5").timestamp_ms, Some(-5));
        assert!(is_invalid("m 3 12.5"));
        assert!(is_invalid("m 3 4 5"));
        assert!(is_invalid("m abc"));
        assert!(is_invalid("m"));
        assert!(is_invalid("m{a=\"b\"}"));
    }

    #[test]
    fn histogram_lines_are_ordinary_samples() {
        let input = "# TYPE h histogram\nh_bucket{le=\"0.1\"} 1\nh_bucket{le=\"+Inf\"} 3\nh_sum 0.4\nh_count 3\n";
        let (s, _) = all(input.as_bytes());
        assert_eq!(s.len(), 4);
        assert_eq!(s[1].label("le"), Some("+Inf"));
        assert_eq!(s[3].name, "h_count");
    }

    #[test]
    fn garbage_is_counted_with_first_five_errors() {
        let input = "<html>\n<body>Forbidden</body>\nmetric{a=\"b\nm{a=b} 1\nm{=\"x\"} 1\nm{a=\"x\" b=\"y\"} 1\n9bad 1\nok 1\nm{a=\"x\"\n";
        let (s, stats) = all(input.as_bytes());
        assert_eq!(s.len(), 1);
        assert_eq!(stats.invalid_lines, 8);
        assert_eq!(stats.first_errors.len(), MAX_KEPT_ERRORS);
        assert_eq!(
            stats
                .first_errors
                .iter()
                .map(|e| e.line)
                .collect::<Vec<_>>(),
            vec![1, 2, 3, 4, 5]
        );
        assert!(stats.first_errors[0].to_string().starts_with("line 1: "));
    }

    #[test]
    fn invalid_utf8_is_an_invalid_line() {
        let mut input = b"m{a=\"\xff\xfe\"} 1\nm 1\xff\n".to_vec();
        input.extend_from_slice(b"\xc3\x28 1\nok 2\n");
        let (s, stats) = all(&input);
        assert_eq!(s.len(), 1);
        assert_eq!(stats.invalid_lines, 3);
    }

    #[test]
    fn last_line_without_newline() {
        let (s, stats) = all(b"a 1\nb 2");
        assert_eq!(s.len(), 2);
        assert_eq!(stats.lines, 2);
        let (s, stats) = chunked(b"a 1\nb{x=\"1\"} 2", &mut || 3, |_| true, 100);
        assert_eq!(s.len(), 2);
        assert_eq!(stats.lines, 2);
        let (_, stats) = all(b"");
        assert_eq!(stats, ParseStats::default());
    }

    #[test]
    fn filter_sees_the_sample_name_before_labels() {
        let names = std::cell::RefCell::new(Vec::new());
        let input =
            "# TYPE a_total counter\na_total{x=\"1\"} 1\nb_bucket{le=\"1\"} 2\nb_bucket{broken 2\n";
        let mut got = Vec::new();
        let stats = parse_all(
            input.as_bytes(),
            |n: &str| {
                names.borrow_mut().push(n.to_string());
                n.starts_with("a_")
            },
            &mut |s: &Sample<'_>| got.push(owned(s)),
        );
        // Once per run of lines with the same name.
        assert_eq!(names.into_inner(), vec!["a_total", "b_bucket"]);
        assert_eq!(got.len(), 1);
        // The broken unwanted line is never parsed, so it is skipped, not invalid.
        assert_eq!(stats.skipped_samples, 2);
        assert_eq!(stats.invalid_lines, 0);
    }

    #[test]
    fn eks_paste_with_prompt_and_leading_spaces() {
        for (name, count) in [
            ("snippet-eks-1.24-request_concurrency_limit.txt", 7),
            ("snippet-eks-1.32-nominal_limit_seats.txt", 8),
        ] {
            let (s, stats) = all(&fixture(name));
            assert_eq!(stats.invalid_lines, 1, "{name}: the `$ kubectl` line");
            assert_eq!(stats.first_errors[0].line, 1);
            assert_eq!(s.len(), count, "{name}");
            let low = s
                .iter()
                .find(|s| s.label("priority_level") == Some("workload-low"))
                .map(|s| s.value);
            assert_eq!(low, Some(245.0), "{name}");
        }
    }

    #[test]
    fn oversized_wanted_line_is_counted_not_buffered() {
        let mut input = b"a 1\nbig{v=\"".to_vec();
        input.extend(std::iter::repeat_n(b'x', 20 * 1024 * 1024));
        input.extend_from_slice(b"\"} 1\nb 2\n");
        let mut parser = ExpositionParser::new(|_: &str| true, 4096);
        let mut got = Vec::new();
        let mut sink = |s: &Sample<'_>| got.push(owned(s));
        for c in input.chunks(64 * 1024) {
            parser.feed(c, &mut sink);
            assert!(
                parser.carry.capacity() <= 64 * 1024,
                "carry must stay bounded"
            );
        }
        let stats = parser.finish(&mut sink);
        assert_eq!(stats.oversized_lines, 1);
        assert_eq!(stats.lines, 3);
        assert_eq!(
            got.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        // The same whole line in one chunk gives the same answer.
        let (got2, stats2) = chunked(&input, &mut || usize::MAX / 2, |_| true, 4096);
        assert_eq!(stats2, stats);
        assert_eq!(got2, got);
    }

    #[test]
    fn unwanted_long_line_is_streamed_past() {
        let mut input = b"skip_me{v=\"".to_vec();
        input.extend(std::iter::repeat_n(b'y', 1024 * 1024));
        input.extend_from_slice(b"\"} 1\nkeep 2\n# ");
        input.extend(std::iter::repeat_n(b'z', 100_000));
        input.extend_from_slice(b"\nkeep 3");
        let mut parser = ExpositionParser::new(|n: &str| n == "keep", 1000);
        let mut got = Vec::new();
        let mut sink = |s: &Sample<'_>| got.push(owned(s));
        for c in input.chunks(100) {
            parser.feed(c, &mut sink);
            assert!(parser.carry.len() <= 1001);
        }
        assert!(
            parser.carry.capacity() <= 4096,
            "unwanted bytes were buffered"
        );
        let stats = parser.finish(&mut sink);
        assert_eq!(stats.skipped_samples, 1);
        assert_eq!(stats.oversized_lines, 0);
        assert_eq!(stats.samples, 2);
        assert_eq!(stats.lines, 4);
    }

    #[test]
    fn label_vec_is_reused() {
        let mut parser = ExpositionParser::new(|_: &str| true, 1000);
        parser.feed(b"m{a=\"1\",b=\"2\",c=\"3\"} 1\n", &mut |_: &Sample<'_>| {});
        let cap = parser.labels.capacity();
        assert!(cap >= 3);
        parser.feed(
            b"m{a=\"1\"} 1\nn{a=\"1\",b=\"2\"} 1\n",
            &mut |_: &Sample<'_>| {},
        );
        assert_eq!(parser.labels.capacity(), cap);
        assert!(parser.labels.is_empty());
    }

    #[test]
    fn every_chunk_boundary_gives_the_same_result() {
        let input = "# HELP x help\n# TYPE x gauge\nx{a=\"1\",b=\"e\\\\s\\\"c\\n\"} 1.5 123\r\n  y 2\n\nbad line\nz{le=\"+Inf\"} NaN\nunwanted{q=\"r\"} 4\nlast 5";
        let wanted = |n: &str| n != "unwanted";
        let (want, want_stats) = chunked(input.as_bytes(), &mut || usize::MAX / 2, wanted, 1000);
        assert_eq!(want.len(), 4);
        assert_eq!(want_stats.invalid_lines, 1);
        assert_eq!(want_stats.skipped_samples, 1);
        for size in 1..=input.len() {
            let (got, stats) = chunked(input.as_bytes(), &mut || size, wanted, 1000);
            assert_eq!(
                got.iter().map(key).collect::<Vec<_>>(),
                want.iter().map(key).collect::<Vec<_>>(),
                "chunk size {size}"
            );
            assert_eq!(stats, want_stats, "chunk size {size}");
        }
        // Every single split point, two chunks.
        for cut in 0..=input.len() {
            let mut parser = ExpositionParser::new(wanted, 1000);
            let mut got = Vec::new();
            let mut sink = |s: &Sample<'_>| got.push(owned(s));
            parser.feed(&input.as_bytes()[..cut], &mut sink);
            parser.feed(&input.as_bytes()[cut..], &mut sink);
            let stats = parser.finish(&mut sink);
            assert_eq!(stats, want_stats, "cut {cut}");
            assert_eq!(got.len(), want.len());
        }
    }

    #[test]
    fn real_capture_small_chunks_match_whole_parse() {
        let input = fixture_gz("metrics-v1.20.txt");
        // A small piece at every chunk size from 1 to 64 bytes.
        let small = &input[..20_000];
        let (want, want_stats) = chunked(small, &mut || usize::MAX / 2, |_| true, 4096);
        for size in 1..=64 {
            let (got, stats) = chunked(small, &mut || size, |_| true, 4096);
            assert_eq!(stats, want_stats, "chunk size {size}");
            assert_eq!(
                got.iter().map(key).collect::<Vec<_>>(),
                want.iter().map(key).collect::<Vec<_>>(),
                "chunk size {size}"
            );
        }
        // The whole capture at random sizes.
        let apf = |n: &str| n.starts_with("apiserver_flowcontrol_");
        let (want, want_stats) = chunked(&input, &mut || usize::MAX / 2, apf, 4096);
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..5 {
            let (got, stats) = chunked(&input, &mut || rng.gen_range(1..20_000), apf, 4096);
            assert_eq!(stats, want_stats);
            assert_eq!(
                got.iter().map(key).collect::<Vec<_>>(),
                want.iter().map(key).collect::<Vec<_>>()
            );
        }
    }

    /// Random bytes biased toward the format's own characters, random chunking: never panics,
    /// and the result does not depend on the chunking.
    #[test]
    fn property_random_input_random_chunks() {
        let alphabet = b"ab_:{}=\",\\ \t\r\n#0123456789.eE+-InfNa\xff\xc3";
        let mut rng = rand::rngs::StdRng::seed_from_u64(42);
        for round in 0..3000 {
            let len = rng.gen_range(0..200);
            let input: Vec<u8> = (0..len)
                .map(|_| {
                    if rng.gen_bool(0.9) {
                        alphabet[rng.gen_range(0..alphabet.len())]
                    } else {
                        rng.gen()
                    }
                })
                .collect();
            let max = rng.gen_range(1..40);
            let wanted = |n: &str| !n.starts_with('b');
            let (want, want_stats) = chunked(&input, &mut || usize::MAX / 2, wanted, max);
            let (got, stats) = chunked(&input, &mut || rng.gen_range(1..16), wanted, max);
            assert_eq!(stats, want_stats, "round {round} input {input:?}");
            assert_eq!(
                got.iter().map(key).collect::<Vec<_>>(),
                want.iter().map(key).collect::<Vec<_>>()
            );
            let newlines = input.iter().filter(|&&b| b == b'\n').count() as u64;
            let last = u64::from(input.last().is_some_and(|&b| b != b'\n'));
            assert_eq!(stats.lines, newlines + last);
            assert!(
                stats.samples + stats.skipped_samples + stats.invalid_lines + stats.oversized_lines
                    <= stats.lines
            );
            let _ = all(&input);
        }
    }

    fn count_lines_starting(input: &[u8], prefix: &str) -> u64 {
        input
            .split(|&b| b == b'\n')
            .filter(|l| l.starts_with(prefix.as_bytes()))
            .count() as u64
    }

    #[test]
    fn real_captures_parse_cleanly() {
        for v in [
            "1.18", "1.19", "1.20", "1.21", "1.23", "1.24", "1.25", "1.26", "1.28", "1.29", "1.30",
            "1.31", "1.32", "1.34", "1.35",
        ] {
            let input = fixture_gz(&format!("metrics-v{v}.txt"));
            let (s, stats) = all(&input);
            assert_eq!(stats.invalid_lines, 0, "{v}: {:?}", stats.first_errors);
            assert_eq!(stats.oversized_lines, 0);
            let sample_lines = input
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty() && !l.starts_with(b"#"))
                .count() as u64;
            assert_eq!(stats.samples, sample_lines, "{v}");
            assert_eq!(s.len() as u64, sample_lines);
            let apf = s
                .iter()
                .filter(|s| s.name.starts_with("apiserver_flowcontrol_"))
                .count() as u64;
            assert_eq!(
                apf,
                count_lines_starting(&input, "apiserver_flowcontrol_"),
                "{v}"
            );
            // The 1.18 capture has no kubernetes_build_info line.
            if v != "1.18" {
                let build = s.iter().find(|s| s.name == "kubernetes_build_info");
                let minor = build.and_then(|b| b.label("minor")).map(str::to_string);
                assert_eq!(minor, Some(v[2..].to_string()));
            }
        }
    }

    /// The runs of lines streamed past by the names' recent verdicts count exactly what a line-by-line reading
    /// counts, on every capture, and the filter is asked once per name and run, not per line.
    #[test]
    fn skipped_runs_count_as_line_by_line_reading_does() {
        for v in ["1.20", "1.29", "1.34", "1.35"] {
            let input = fixture_gz(&format!("metrics-v{v}.txt"));
            let asked = std::cell::Cell::new(0u64);
            let filter = |n: &str| {
                asked.set(asked.get() + 1);
                apf_filter(n)
            };
            let (s, stats) = chunked(&input, &mut || 64 << 10, filter, 4096);
            let names: Vec<&[u8]> = input
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty() && !l.starts_with(b"#"))
                .map(|l| l.split(|&b| b == b'{' || b == b' ').next().unwrap_or(l))
                .collect();
            let wanted = names
                .iter()
                .filter(|n| n.starts_with(b"apiserver_flowcontrol_"))
                .count() as u64;
            assert_eq!(stats.samples, wanted, "{v}");
            assert_eq!(s.len() as u64, wanted, "{v}");
            assert_eq!(stats.skipped_samples, names.len() as u64 - wanted, "{v}");
            let newlines = input.iter().filter(|&&b| b == b'\n').count() as u64;
            assert_eq!(stats.lines, newlines, "{v}");
            // A histogram's bucket, sum and count alternate without asking again: far fewer asks than name changes.
            let changes = names.windows(2).filter(|w| w[0] != w[1]).count() as u64;
            assert!(
                asked.get() * 5 < changes,
                "{v}: {} asks, {changes} changes",
                asked.get()
            );
        }
    }

    /// Families whose lines interleave (no comment between them) and names that extend one another: each line
    /// judged by its own whole name, wherever the chunks split.
    #[test]
    fn interleaved_and_prefixed_names_are_judged_by_their_whole_name() {
        let input = "h_bucket{le=\"1\"} 1\nh_sum 2\nh_count 3\nh_bucket{le=\"1\"} 4\nh_bucketx 5\nh_sum 6\n\
            w 7\nh_count 8\nh_sum\t9\nw{a=\"b\"} 10\nh_su 11\nh_summ 12\nx 13\ny 14\nz 15\nw 16\nh_sum 17\n";
        let wanted = |n: &str| !n.starts_with("h_") || n == "h_bucketx" || n == "h_summ";
        for size in 1..=input.len() {
            let (got, stats) = chunked(input.as_bytes(), &mut || size, wanted, 1000);
            let values: Vec<f64> = got.iter().map(|s| s.value).collect();
            assert_eq!(
                values,
                [5.0, 7.0, 10.0, 12.0, 13.0, 14.0, 15.0, 16.0],
                "size {size}"
            );
            assert_eq!(stats.skipped_samples, 9, "chunk size {size}");
            assert_eq!(stats.lines, 17, "chunk size {size}");
        }
    }

    fn apf_filter(n: &str) -> bool {
        n.starts_with("apiserver_flowcontrol_")
    }

    fn find<'s>(s: &'s [Owned], name: &str, labels: &[(&str, &str)]) -> Option<&'s Owned> {
        s.iter()
            .find(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(v)))
    }

    #[test]
    fn capture_v1_35_values() {
        let input = fixture_gz("metrics-v1.35.txt");
        let mut s = Vec::new();
        let stats = parse_all(&input, apf_filter, &mut |x: &Sample<'_>| s.push(owned(x)));
        assert_eq!(stats.samples, 1358); // grep -c '^apiserver_flowcontrol_'
        assert_eq!(stats.invalid_lines, 0);
        let v = |name: &str, labels: &[(&str, &str)]| find(&s, name, labels).map(|s| s.value);
        assert_eq!(
            v(
                "apiserver_flowcontrol_current_limit_seats",
                &[("priority_level", "workload-low")]
            ),
            Some(56.0)
        );
        assert_eq!(
            v(
                "apiserver_flowcontrol_current_limit_seats",
                &[("priority_level", "node-high")]
            ),
            Some(170.0)
        );
        assert_eq!(
            v(
                "apiserver_flowcontrol_nominal_limit_seats",
                &[("priority_level", "workload-low")]
            ),
            Some(245.0)
        );
    }

    #[test]
    fn capture_v1_26_values() {
        let input = fixture_gz("metrics-v1.26.txt");
        let mut s = Vec::new();
        let stats = parse_all(&input, apf_filter, &mut |x: &Sample<'_>| s.push(owned(x)));
        assert_eq!(stats.samples, 1311);
        let v = |name: &str, labels: &[(&str, &str)]| find(&s, name, labels).map(|s| s.value);
        assert_eq!(
            v(
                "apiserver_flowcontrol_request_concurrency_limit",
                &[("priority_level", "workload-low")]
            ),
            Some(245.0)
        );
    }

    #[test]
    fn capture_v1_20_values() {
        let input = fixture_gz("metrics-v1.20.txt");
        let mut s = Vec::new();
        let stats = parse_all(&input, apf_filter, &mut |x: &Sample<'_>| s.push(owned(x)));
        assert_eq!(stats.samples, 1050);
        let v = |name: &str, labels: &[(&str, &str)]| find(&s, name, labels).map(|s| s.value);
        assert_eq!(
            v(
                "apiserver_flowcontrol_request_concurrency_limit",
                &[("priority_level", "workload-low")]
            ),
            Some(293.0)
        );
        let bucket = find(
            &s,
            "apiserver_flowcontrol_request_wait_duration_seconds_bucket",
            &[
                ("flow_schema", "catch-all"),
                ("execute", "true"),
                ("le", "0.005"),
            ],
        );
        assert_eq!(bucket.map(|b| b.value), Some(28.0));
    }
}
