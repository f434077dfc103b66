//! Pure parsers: the Prometheus exposition formats (text and protobuf), the Prometheus HTTP API's answers, the APF
//! debug dumps and kube-apiserver's audit events.
pub mod api_answer;
pub mod audit;
pub mod dump;
pub mod exposition;
pub mod protobuf;

use exposition::{ExpositionParser, ParseStats, SampleSink};
use protobuf::ProtobufParser;

/// A `/metrics` body in the format its `Content-Type` says: the delimited protobuf one, or else text (what a server
/// sends that names no format, or another, is read as text, as it always was).
pub enum MetricsParser<F: Fn(&str) -> bool> {
    Text(ExpositionParser<F>),
    /// Boxed: its buffers and the family being read make it twice the text parser's size.
    Protobuf(Box<ProtobufParser<F>>),
}

impl<F: Fn(&str) -> bool> MetricsParser<F> {
    /// `max_line_bytes` bounds a text line or a protobuf metric held across chunks.
    pub fn new(content_type: Option<&str>, wanted: F, max_line_bytes: usize) -> Self {
        if content_type.is_some_and(protobuf::is_content_type) {
            MetricsParser::Protobuf(Box::new(ProtobufParser::new(wanted, max_line_bytes)))
        } else {
            MetricsParser::Text(ExpositionParser::new(wanted, max_line_bytes))
        }
    }

    pub fn feed(&mut self, chunk: &[u8], sink: &mut impl SampleSink) {
        match self {
            MetricsParser::Text(p) => p.feed(chunk, sink),
            MetricsParser::Protobuf(p) => p.feed(chunk, sink),
        }
    }

    pub fn finish(self, sink: &mut impl SampleSink) -> ParseStats {
        match self {
            MetricsParser::Text(p) => p.finish(sink),
            MetricsParser::Protobuf(p) => (*p).finish(sink),
        }
    }
}
