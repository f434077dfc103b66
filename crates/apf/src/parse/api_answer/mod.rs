//! The Prometheus HTTP API's answer to a query (`/api/v1/query`, `/api/v1/query_range`), read as its bytes come
//! (<https://prometheus.io/docs/prometheus/latest/querying/api/#format-overview>): each sample goes out as soon as
//! its series is whole, so the reader holds one series' bytes, never the answer. A fleet's round reads about 200 MB
//! of answers; held whole, eight answers in flight were most of the process' memory, and a generic JSON
//! deserializer most of its time.
//!
//! The reader is resumable item by item: a key and its value of the answer's object or of `data`, or one series
//! of `data.result`. An item cut by the end of a chunk is read again, whole, once more bytes came.
use std::borrow::Cow;

use super::exposition::{parse_float, recycle, Label};
use json::{Cursor, Step, Stop, Text};

mod json;

/// The result type asked for: an answer of another type is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultType {
    /// An instant query's: one sample per series (`value`).
    Vector,
    /// A range query's: samples over time per series (`values`).
    Matrix,
}

impl ResultType {
    pub fn as_str(self) -> &'static str {
        match self {
            ResultType::Vector => "vector",
            ResultType::Matrix => "matrix",
        }
    }
}

/// Why an answer was not read: what its samples said must then be dropped (samples go out as they are read, and
/// `status` or `warnings` may come after them).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AnswerError {
    /// Not JSON, or not the shape of an API answer.
    #[error("not a Prometheus API answer: {0}")]
    Malformed(String),
    /// The API said the query failed.
    #[error("{error} ({error_type})")]
    Failed { error: String, error_type: String },
    /// Thanos and Mimir answer with warnings when a store or querier did not answer: numbers from some of the
    /// stores only would be presented as the whole.
    #[error("partial answer, not used: {}", .0.join("; "))]
    Partial(Vec<String>),
    /// A successful answer of another result type than the one asked for.
    #[error("a {found} where a {wanted} was asked for")]
    WrongType { found: String, wanted: &'static str },
}

impl AnswerError {
    /// Whether the store answered and refused (a failed or partial query), rather than sent something unreadable.
    pub fn is_refusal(&self) -> bool {
        matches!(self, AnswerError::Failed { .. } | AnswerError::Partial(_))
    }
}

/// Where the reader is in the answer's fixed nesting: the answer's object, `data`, `data.result`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Start,
    Answer { first: bool },
    Data { first: bool },
    Result { first: bool },
    End,
}

/// What the answer says besides its samples.
#[derive(Debug, Default)]
struct Envelope {
    status: Option<String>,
    error_type: Option<String>,
    error: Option<String>,
    warnings: Vec<String>,
    result_type: Option<String>,
    has_data: bool,
    result_read: bool,
}

/// The most bytes one item (a series, or a key's value besides `data`) may take: a range query's series of 11,000
/// points (Prometheus' most) is about 300 KB. A longer one is refused when the reader next looks, once its bytes
/// doubled: at most about twice this is held.
pub const MAX_ITEM_BYTES: usize = 16 << 20;

/// Deepest nesting of a value that is skipped unread (serde_json's own limit).
const MAX_DEPTH: usize = 128;

/// An answer read chunk by chunk: [`Self::feed`] each chunk as it comes, then [`Self::finish`].
pub struct AnswerReader {
    wanted: ResultType,
    /// The bytes not read yet: the start of an item cut by the end of the last chunk.
    buf: Vec<u8>,
    /// Bytes of the answer before `buf`, for the offsets in error messages.
    consumed: usize,
    at: At,
    /// An item found cut is read again once `buf` holds this many bytes (twice what it held), so an item cut
    /// into many chunks costs a few readings, not one per chunk.
    retry_at: usize,
    envelope: Envelope,
    error: Option<AnswerError>,
    series: SeriesParts,
}

/// One series as read, before it goes out: its strings as places in the buffer, or unescaped copies.
#[derive(Default)]
struct SeriesParts {
    labels: Vec<(Text, Text)>,
    value: Option<(f64, Text)>,
    values: Vec<(f64, Text)>,
    /// Strings whose escapes were undone.
    unescaped: Vec<String>,
    /// The labels handed out, reused from series to series.
    handed: Vec<Label<'static>>,
}

impl SeriesParts {
    fn clear(&mut self) {
        self.labels.clear();
        self.value = None;
        self.values.clear();
        self.unescaped.clear();
    }

    fn text<'s>(&'s self, buf: &'s [u8], t: Text) -> &'s str {
        match t {
            // SAFETY: a span is made only by `Cursor::string`, of the bytes of `buf` it checked to be UTF-8, and
            // read back before `buf` changes (within the item that read it).
            Text::Span(a, b) => unsafe { std::str::from_utf8_unchecked(&buf[a..b]) },
            Text::Unescaped(i) => self.unescaped.get(i).map_or("", String::as_str),
        }
    }
}

impl AnswerReader {
    pub fn new(wanted: ResultType) -> Self {
        Self {
            wanted,
            buf: Vec::new(),
            consumed: 0,
            at: At::Start,
            retry_at: 0,
            envelope: Envelope::default(),
            error: None,
            series: SeriesParts::default(),
        }
    }

    /// Reads what `chunk` completes; each sample of a whole series to `each(labels, time, value)` (unix seconds;
    /// a value that is not a number, never sent by Prometheus, is left out). After an error, nothing more is read.
    pub fn feed(&mut self, chunk: &[u8], each: &mut impl FnMut(&[Label<'_>], f64, f64)) {
        if self.error.is_some() {
            return;
        }
        self.buf.extend_from_slice(chunk);
        if self.buf.len() < self.retry_at {
            return;
        }
        self.read(false, each);
    }

    /// The end of the answer: the rest is read, and the answer judged whole (a success, complete, of the type asked
    /// for).
    pub fn finish(
        mut self,
        each: &mut impl FnMut(&[Label<'_>], f64, f64),
    ) -> Result<(), AnswerError> {
        if self.error.is_none() {
            self.read(true, each);
        }
        if let Some(e) = self.error {
            return Err(e);
        }
        let envelope = self.envelope;
        match envelope.status.as_deref() {
            Some("success") => {}
            Some(_) => {
                return Err(AnswerError::Failed {
                    error: envelope.error.unwrap_or_default(),
                    error_type: envelope.error_type.unwrap_or_default(),
                })
            }
            None => return Err(AnswerError::Malformed("no status".into())),
        }
        if !envelope.warnings.is_empty() {
            return Err(AnswerError::Partial(envelope.warnings));
        }
        if !envelope.has_data {
            return Err(AnswerError::Malformed("no data".into()));
        }
        match envelope.result_type {
            Some(t) if t == self.wanted.as_str() => Ok(()),
            other => Err(AnswerError::WrongType {
                found: other.unwrap_or_else(|| "result of no type".into()),
                wanted: self.wanted.as_str(),
            }),
        }
    }

    /// Reads every whole item in the buffer, then keeps the rest; `last`: no more bytes will come.
    fn read(&mut self, last: bool, each: &mut impl FnMut(&[Label<'_>], f64, f64)) {
        let mut c = Cursor { b: &self.buf, i: 0 };
        let mut pos = 0;
        let stop = loop {
            match item(
                &mut c,
                &mut self.at,
                &mut self.envelope,
                self.wanted,
                &mut self.series,
                each,
            ) {
                Ok(true) => pos = c.i,
                Ok(false) => {
                    // Past the answer's end: whitespace alone may follow.
                    c.ws();
                    if c.i < c.b.len() {
                        break Some(Stop::Bad("trailing characters".into(), c.i));
                    }
                    pos = c.i;
                    break None;
                }
                // An item not whole is read again from its start (`pos`) with more bytes.
                Err(stop) => break Some(stop),
            }
        };
        let held = self.buf.len() - pos;
        let at = self.consumed + pos;
        match stop {
            None => {}
            Some(Stop::More) if last => {
                let end = self.consumed + self.buf.len();
                return self.fail(format!("the answer ends at byte {end} before it is whole"));
            }
            Some(Stop::More) if held > MAX_ITEM_BYTES => {
                let mib = MAX_ITEM_BYTES >> 20;
                return self.fail(format!("an item of more than {mib} MiB at byte {at}"));
            }
            Some(Stop::More) => {}
            Some(Stop::Bad(message, i)) => {
                let at = self.consumed + i;
                return self.fail(format!("{message} at byte {at}"));
            }
        }
        self.buf.drain(..pos);
        self.consumed += pos;
        self.retry_at = 2 * held;
    }

    fn fail(&mut self, message: String) {
        self.error = Some(AnswerError::Malformed(message));
        self.buf = Vec::new();
    }
}

/// The keys the reader looks for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Key {
    Status,
    ErrorType,
    Error,
    Warnings,
    Data,
    ResultType,
    Result,
    Metric,
    Value,
    Values,
    Other,
}

impl Key {
    fn of(c: &Cursor<'_>, key: Text, unescaped: &[String]) -> Key {
        let name: &[u8] = match key {
            Text::Span(a, b) => &c.b[a..b],
            Text::Unescaped(i) => unescaped.get(i).map_or(&[], |k| k.as_bytes()),
        };
        match name {
            b"status" => Key::Status,
            b"errorType" => Key::ErrorType,
            b"error" => Key::Error,
            b"warnings" => Key::Warnings,
            b"data" => Key::Data,
            b"resultType" => Key::ResultType,
            b"result" => Key::Result,
            b"metric" => Key::Metric,
            b"value" => Key::Value,
            b"values" => Key::Values,
            _ => Key::Other,
        }
    }
}

/// Reads one item at the cursor: `Ok(false)` past the answer's end.
fn item(
    c: &mut Cursor<'_>,
    at: &mut At,
    envelope: &mut Envelope,
    wanted: ResultType,
    series: &mut SeriesParts,
    each: &mut impl FnMut(&[Label<'_>], f64, f64),
) -> Step<bool> {
    series.unescaped.clear();
    let u = &mut series.unescaped;
    match *at {
        At::End => return Ok(false),
        At::Start => {
            c.expect(b'{', "the answer's object")?;
            *at = At::Answer { first: true };
        }
        At::Answer { first } => {
            if c.eat(b'}')? {
                *at = At::End;
                return Ok(true);
            }
            let key = c.key(first, u)?;
            match Key::of(c, key, u) {
                Key::Data if envelope.has_data => return Err(c.bad("a second data")),
                Key::Data => {
                    c.expect(b'{', "data's object")?;
                    envelope.has_data = true;
                    *at = At::Data { first: true };
                    return Ok(true);
                }
                Key::Status => envelope.status = Some(c.owned_string(u)?),
                Key::ErrorType => envelope.error_type = c.string_or_null(u)?,
                Key::Error => envelope.error = c.string_or_null(u)?,
                Key::Warnings => envelope.warnings = c.strings_or_null(u)?,
                _ => c.skip_value(MAX_DEPTH)?,
            }
            *at = At::Answer { first: false };
        }
        At::Data { first } => {
            if c.eat(b'}')? {
                *at = At::Answer { first: false };
                return Ok(true);
            }
            let key = c.key(first, u)?;
            match Key::of(c, key, u) {
                Key::ResultType if envelope.result_type.is_some() => {
                    return Err(c.bad("a second resultType"))
                }
                Key::ResultType => envelope.result_type = Some(c.owned_string(u)?),
                Key::Result if envelope.result_read => return Err(c.bad("a second result")),
                // Read as the type asked for unless the type, where it came first (Prometheus writes it first; a
                // proxy may sort the keys), says otherwise: another type is an error either way.
                Key::Result
                    if envelope
                        .result_type
                        .as_deref()
                        .is_none_or(|t| t == wanted.as_str()) =>
                {
                    c.expect(b'[', "result's list")?;
                    envelope.result_read = true;
                    *at = At::Result { first: true };
                    return Ok(true);
                }
                _ => c.skip_value(MAX_DEPTH)?,
            }
            *at = At::Data { first: false };
        }
        At::Result { first } => {
            if c.eat(b']')? {
                *at = At::Data { first: false };
                return Ok(true);
            }
            if !first {
                c.expect(b',', "',' or the list's end")?;
            }
            series.clear();
            c.series(series)?;
            emit(c.b, series, wanted, each);
            *at = At::Result { first: false };
        }
    }
    Ok(true)
}

/// A whole series' samples to `each`.
fn emit(
    buf: &[u8],
    series: &mut SeriesParts,
    wanted: ResultType,
    each: &mut impl FnMut(&[Label<'_>], f64, f64),
) {
    let mut labels = recycle(std::mem::take(&mut series.handed));
    labels.extend(series.labels.iter().map(|&(name, value)| Label {
        name: series.text(buf, name),
        value: Cow::Borrowed(series.text(buf, value)),
    }));
    let samples = match wanted {
        ResultType::Vector => series.value.as_slice(),
        ResultType::Matrix => series.values.as_slice(),
    };
    for &(time, text) in samples {
        if let Some(value) = parse_float(series.text(buf, text)) {
            each(&labels, time, value);
        }
    }
    series.handed = recycle(labels);
}

/// The answer's own shapes: a series, and its `[time, value]` pairs.
impl Cursor<'_> {
    /// `[time, "value"]`.
    fn pair(&mut self, unescaped: &mut Vec<String>) -> Step<(f64, Text)> {
        self.expect(b'[', "a [time, value] pair")?;
        let time = self.number()?;
        self.expect(b',', "','")?;
        let value = self.string(unescaped)?;
        self.expect(b']', "the pair's end")?;
        Ok((time, value))
    }

    /// One series: `metric` (label names and values), and `value` or `values`; other keys (a native histogram's)
    /// are skipped.
    fn series(&mut self, s: &mut SeriesParts) -> Step<()> {
        self.expect(b'{', "a series")?;
        let mut has_metric = false;
        let mut first = true;
        loop {
            if self.eat(b'}')? {
                break;
            }
            let key = self.key(first, &mut s.unescaped)?;
            first = false;
            let key = Key::of(self, key, &s.unescaped);
            if key == Key::Metric {
                has_metric = true;
                s.labels.clear();
                self.expect(b'{', "the series' labels")?;
                if !self.eat(b'}')? {
                    loop {
                        let name = self.string(&mut s.unescaped)?;
                        self.expect(b':', "':'")?;
                        let value = self.string(&mut s.unescaped)?;
                        s.labels.push((name, value));
                        if self.at_end(b'}', "expected ',' or the labels' end")? {
                            break;
                        }
                    }
                }
            } else if key == Key::Value {
                s.value = if self.peek()? == b'n' {
                    self.literal(b"null")?;
                    None
                } else {
                    Some(self.pair(&mut s.unescaped)?)
                };
            } else if key == Key::Values {
                s.values.clear();
                self.expect(b'[', "a list of [time, value] pairs")?;
                if !self.eat(b']')? {
                    loop {
                        let pair = self.pair(&mut s.unescaped)?;
                        s.values.push(pair);
                        if self.at_end(b']', "expected ',' or the pairs' end")? {
                            break;
                        }
                    }
                }
            } else {
                self.skip_value(MAX_DEPTH)?;
            }
        }
        if !has_metric {
            return Err(self.bad("a series without metric"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Seen = Vec<(Vec<(String, String)>, f64, u64)>;

    /// The samples and the outcome of an answer fed in the given chunks.
    fn read(chunks: &[&[u8]], wanted: ResultType) -> (Seen, Result<(), String>) {
        let mut seen = Vec::new();
        let mut each = |labels: &[Label<'_>], time: f64, value: f64| {
            let labels = labels
                .iter()
                .map(|l| (l.name.to_string(), l.value.to_string()))
                .collect();
            seen.push((labels, time, value.to_bits()));
        };
        let mut reader = AnswerReader::new(wanted);
        for chunk in chunks {
            reader.feed(chunk, &mut each);
        }
        let outcome = reader.finish(&mut each).map_err(|e| e.to_string());
        (seen, outcome)
    }

    fn whole(body: &[u8], wanted: ResultType) -> (Seen, Result<(), String>) {
        read(&[body], wanted)
    }

    const VECTOR: &[u8] = br#" {"status":"success","data":{"resultType":"vector","result":[
        {"metric":{"__name__":"x","instance":"10.0.0.1:6443","priority_level":"a\"b\u00e9\ud83d\ude00\/"},"value":[1.5,"42"]},
        {"metric":{"instance":"10.0.0.2:6443"},"value":[1.5e0,"NaN"],"histogram":[1,{"count":"2","buckets":[[0,"1","2","3"]]}]},
        {"metric":{},"value":[-0.25E+1,"not a number"]},
        {"metric":{"inst\u0061nce":"10.0.0.4:6443"},"value":null,"x":[true,false,null,{}]},
        {"value":[17,"+Inf"],"metric":{"instance":""}}]},"infos":["a note"]}
    "#;

    #[test]
    fn an_answer_is_read_escapes_and_all() {
        let (seen, outcome) = whole(VECTOR, ResultType::Vector);
        assert_eq!(outcome, Ok(()));
        let labels = |s: &[(&str, &str)]| -> Vec<(String, String)> {
            s.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(
            seen.len(),
            3,
            "the value that is no number, and the null, are left out"
        );
        assert_eq!(
            seen[0],
            (
                labels(&[
                    ("__name__", "x"),
                    ("instance", "10.0.0.1:6443"),
                    ("priority_level", "a\"b\u{e9}\u{1F600}/"),
                ]),
                1.5,
                42f64.to_bits()
            )
        );
        assert!(f64::from_bits(seen[1].2).is_nan());
        assert_eq!(seen[2].0, labels(&[("instance", "")]));
        assert_eq!(
            (seen[2].1, f64::from_bits(seen[2].2)),
            (17.0, f64::INFINITY)
        );
    }

    #[test]
    fn every_split_of_an_answer_reads_the_same() {
        let expected = whole(VECTOR, ResultType::Vector);
        for split in 0..=VECTOR.len() {
            let (a, b) = VECTOR.split_at(split);
            assert_eq!(
                read(&[a, b], ResultType::Vector),
                expected,
                "split at {split}"
            );
        }
        let bytes: Vec<&[u8]> = VECTOR.chunks(1).collect();
        assert_eq!(read(&bytes, ResultType::Vector), expected, "byte by byte");
        let threes: Vec<&[u8]> = VECTOR.chunks(3).collect();
        assert_eq!(
            read(&threes, ResultType::Vector),
            expected,
            "three bytes at a time"
        );
    }

    #[test]
    fn an_answer_cut_short_is_an_error_wherever_it_is_cut() {
        let end = VECTOR.iter().rposition(|&b| b == b'}').unwrap_or(0);
        for cut in 0..=end {
            let (_, outcome) = whole(&VECTOR[..cut], ResultType::Vector);
            let e = outcome.expect_err("a cut answer is no answer");
            assert!(e.contains("before it is whole"), "cut at {cut}: {e}");
        }
    }

    #[test]
    fn a_range_answer_gives_every_sample_with_its_time() {
        let body = br#"{"status":"success","data":{"resultType":"matrix","result":[
            {"metric":{"priority_level":"workload-low"},"values":[[1800000000,"3"],[1800000015,"4.5"]]},
            {"metric":{"priority_level":"global-default"},"values":[[1800000015,"1"]]},
            {"metric":{"priority_level":"none"},"values":[]}]}}"#;
        let (seen, outcome) = whole(body, ResultType::Matrix);
        assert_eq!(outcome, Ok(()));
        let short: Vec<(String, f64, f64)> = seen
            .into_iter()
            .map(|(l, t, v)| (l[0].1.clone(), t, f64::from_bits(v)))
            .collect();
        assert_eq!(
            short,
            [
                ("workload-low".to_string(), 1_800_000_000.0, 3.0),
                ("workload-low".to_string(), 1_800_000_015.0, 4.5),
                ("global-default".to_string(), 1_800_000_015.0, 1.0),
            ]
        );
        // Each asks for its own type.
        let e = whole(body, ResultType::Vector).1.unwrap_err();
        assert_eq!(e, "a matrix where a vector was asked for");
        let vector = br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        let e = whole(vector, ResultType::Matrix).1.unwrap_err();
        assert_eq!(e, "a vector where a matrix was asked for");
        // A type that came first is not read as the one asked for.
        let (seen, _) = whole(body, ResultType::Vector);
        assert!(seen.is_empty());
    }

    #[test]
    fn keys_in_any_order_read_the_same() {
        let body = br#"{"data":{"result":[{"value":[1.5,"7"],"metric":{"instance":"a"}}],"resultType":"vector"},
            "status":"success"}"#;
        let (seen, outcome) = whole(body, ResultType::Vector);
        assert_eq!(outcome, Ok(()));
        assert_eq!(seen.len(), 1);
        let e = whole(body, ResultType::Matrix).1.unwrap_err();
        assert_eq!(e, "a vector where a matrix was asked for");
    }

    #[test]
    fn failed_partial_and_foreign_answers_are_errors() {
        let e = |body: &str| {
            whole(body.as_bytes(), ResultType::Vector)
                .1
                .expect_err(body)
        };
        let failed = e(r#"{"status":"error","errorType":"bad_data","error":"parse error"}"#);
        assert_eq!(failed, "parse error (bad_data)");
        let partial = e(
            r#"{"status":"success","warnings":["store 2 down","store 3 down"],"data":{"resultType":"vector","result":[]}}"#,
        );
        assert_eq!(
            partial,
            "partial answer, not used: store 2 down; store 3 down"
        );
        for (body, says) in [
            (
                "<html>login</html>",
                "expected the answer's object at byte 0",
            ),
            ("", "the answer ends at byte 0 before it is whole"),
            (
                r#"{"data":{"resultType":"vector","result":[]}}"#,
                "no status",
            ),
            (r#"{"status":"success"}"#, "no data"),
            (
                r#"{"status":"success","data":{"result":[]},"data":{"result":[]}}"#,
                "a second data at byte 48",
            ),
            (
                r#"{"status":"success","data":{"resultType":"vector","result":[]}} x"#,
                "trailing characters at byte 64",
            ),
            (
                r#"{"status":"success","data":{"resultType":"vector","result":[{"value":[1,"1"]}]}}"#,
                "a series without metric",
            ),
            (
                r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":1}}]}}"#,
                "expected a string",
            ),
            (
                "{\"status\":\"su\x01\"}",
                "a control character in a string at byte 13",
            ),
            (r#"{"status":"\x"}"#, "an invalid escape"),
            (r#"{"status":"\ud800"}"#, "a lone high surrogate"),
            (r#"{"status":"\udc00"}"#, "a lone low surrogate"),
            (
                r#"{"status":"success","n":012}"#,
                "a number with a leading zero",
            ),
            (
                r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1e999,"1"]}]}}"#,
                "a number out of range",
            ),
            (r#"{"status":"success","n":tru}"#, "expected a value"),
        ] {
            let got = e(body);
            assert!(got.contains(says), "{body}: {got}");
        }
        let deep = format!(
            r#"{{"status":"success","x":{}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert!(e(&deep).contains("nested too deep"));
        assert!(!AnswerError::Malformed(String::new()).is_refusal());
        assert!(AnswerError::Partial(Vec::new()).is_refusal());
    }

    #[test]
    fn invalid_utf8_is_an_error_where_it_is_read() {
        let body = b"{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":[{\"metric\":{\"a\":\"\xff\"},\"value\":[1,\"1\"]}]}}";
        let e = whole(body, ResultType::Vector).1.unwrap_err();
        assert!(e.contains("not UTF-8"), "{e}");
    }

    #[test]
    fn an_item_larger_than_the_bound_is_refused_before_twice_it_is_held() {
        let mut reader = AnswerReader::new(ResultType::Vector);
        let mut each = |_: &[Label<'_>], _: f64, _: f64| {};
        reader.feed(br#"{"status":"success","x":""#, &mut each);
        let chunk = vec![b'a'; 1 << 20];
        for _ in 0..=(MAX_ITEM_BYTES >> 20) * 2 + 2 {
            reader.feed(&chunk, &mut each);
        }
        assert!(reader.buf.len() <= 2 * MAX_ITEM_BYTES + (1 << 20));
        let e = reader.finish(&mut each).unwrap_err().to_string();
        assert!(e.contains("an item of more than 16 MiB"), "{e}");
    }

    #[test]
    fn a_long_answer_holds_one_series_at_a_time() {
        let mut body = br#"{"status":"success","data":{"resultType":"vector","result":["#.to_vec();
        for i in 0..10_000 {
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(
                format!(r#"{{"metric":{{"instance":"10.0.{i}.1:6443"}},"value":[1,"{i}"]}}"#)
                    .as_bytes(),
            );
        }
        body.extend_from_slice(b"]}}");
        let mut reader = AnswerReader::new(ResultType::Vector);
        let (mut n, mut sum) = (0, 0.0);
        let mut most_held = 0;
        let mut each = |_: &[Label<'_>], _: f64, v: f64| {
            n += 1;
            sum += v;
        };
        for chunk in body.chunks(4096) {
            reader.feed(chunk, &mut each);
            most_held = most_held.max(reader.buf.len());
        }
        assert_eq!(reader.finish(&mut each), Ok(()));
        assert_eq!((n, sum), (10_000, 49_995_000.0));
        assert!(most_held < 4096 + 100, "held {most_held} bytes");
    }
}
