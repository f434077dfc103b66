//! TEMPORARY STUB (replaced by the real parser on merge).
use std::borrow::Cow;
pub struct Label<'a> {
    pub name: &'a str,
    pub value: Cow<'a, str>,
}
pub struct Sample<'a> {
    pub name: &'a str,
    pub labels: &'a [Label<'a>],
    pub value: f64,
    pub timestamp_ms: Option<i64>,
}
impl Sample<'_> {
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|l| l.name == name)
            .map(|l| l.value.as_ref())
    }
}
pub trait SampleSink {
    fn sample(&mut self, sample: &Sample<'_>);
}
impl<F: FnMut(&Sample<'_>)> SampleSink for F {
    fn sample(&mut self, s: &Sample<'_>) {
        self(s)
    }
}
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParseStats {
    pub lines: u64,
    pub samples: u64,
    pub skipped_samples: u64,
    pub invalid_lines: u64,
    pub oversized_lines: u64,
    pub first_errors: Vec<ParseError>,
}
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    pub line: u64,
    pub message: String,
}
pub struct ExpositionParser<F: Fn(&str) -> bool> {
    wanted: F,
    buf: Vec<u8>,
    max: usize,
}
impl<F: Fn(&str) -> bool> ExpositionParser<F> {
    pub fn new(wanted: F, max_line_bytes: usize) -> Self {
        Self {
            wanted,
            buf: Vec::new(),
            max: max_line_bytes,
        }
    }
    pub fn feed(&mut self, chunk: &[u8], _sink: &mut impl SampleSink) {
        self.buf.extend_from_slice(chunk);
    }
    pub fn finish(self, sink: &mut impl SampleSink) -> ParseStats {
        let _ = self.max;
        parse_all(&self.buf, self.wanted, sink)
    }
}
pub fn parse_all(
    input: &[u8],
    wanted: impl Fn(&str) -> bool,
    sink: &mut impl SampleSink,
) -> ParseStats {
    let mut st = ParseStats::default();
    let text = String::from_utf8_lossy(input);
    for line in text.lines() {
        st.lines += 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name_end = line
            .find(|c: char| c == '{' || c == ' ')
            .unwrap_or(line.len());
        let name = &line[..name_end];
        if !wanted(name) {
            st.skipped_samples += 1;
            continue;
        }
        let mut labels = Vec::new();
        let mut rest = &line[name_end..];
        if rest.starts_with('{') {
            let Some(close) = rest.find('}') else {
                st.invalid_lines += 1;
                continue;
            };
            for kv in rest[1..close].split(',').filter(|s| !s.is_empty()) {
                if let Some((k, v)) = kv.split_once('=') {
                    labels.push(Label {
                        name: k.trim(),
                        value: Cow::Borrowed(v.trim().trim_matches('"')),
                    });
                }
            }
            rest = &rest[close + 1..];
        }
        let mut it = rest.split_whitespace();
        let Some(v) = it.next().and_then(|v| v.parse::<f64>().ok()) else {
            st.invalid_lines += 1;
            continue;
        };
        st.samples += 1;
        sink.sample(&Sample {
            name,
            labels: &labels,
            value: v,
            timestamp_ms: None,
        });
    }
    st
}
