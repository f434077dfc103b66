//! The HTTP API's answers, read as their chunks come (apf::parse::api_answer): a failed request whose body is not an
//! API answer (a proxy's page) is an HTTP error with an excerpt; an API answer, even a failed one, says its own error.
use apf::parse::api_answer::{AnswerError, AnswerReader, ResultType};
use apf::parse::exposition::Label;

use super::super::ScrapeError;

/// Bytes of a failed request's body kept for its error's excerpt.
const EXCERPT_BYTES: usize = 600;

/// One answer being read.
pub(crate) struct Answer {
    reader: AnswerReader,
    /// The HTTP status.
    status: u16,
    /// The start of the body of a failed request.
    excerpt: Vec<u8>,
}

impl Answer {
    pub(crate) fn new(wanted: ResultType, status: u16) -> Self {
        Self {
            reader: AnswerReader::new(wanted),
            status,
            excerpt: Vec::new(),
        }
    }

    fn failed(&self) -> bool {
        !(200..300).contains(&self.status)
    }

    /// Each sample of the series `chunk` completes to `each(labels, time, value)`. On an error (at
    /// [`Self::finish`]), what `each` saw must be dropped: a partial answer (warnings, which come after the data) is
    /// one, as numbers from some of the stores only would be presented as the whole.
    pub(crate) fn feed(&mut self, chunk: &[u8], each: &mut impl FnMut(&[Label<'_>], f64, f64)) {
        if self.failed() && self.excerpt.len() < EXCERPT_BYTES {
            let room = EXCERPT_BYTES - self.excerpt.len();
            self.excerpt
                .extend_from_slice(&chunk[..chunk.len().min(room)]);
        }
        self.reader.feed(chunk, each);
    }

    /// The answer read whole: a success, complete, of the type asked for.
    pub(crate) fn finish(
        self,
        each: &mut impl FnMut(&[Label<'_>], f64, f64),
    ) -> Result<(), ScrapeError> {
        let failed = self.failed();
        match self.reader.finish(each) {
            Err(AnswerError::Malformed(_)) if failed => Err(ScrapeError::Http {
                status: self.status,
                detail: String::from_utf8_lossy(&self.excerpt)
                    .chars()
                    .take(200)
                    .collect::<String>()
                    .trim()
                    .replace('\n', " "),
            }),
            Err(e) if e.is_refusal() => Err(ScrapeError::Query(e.to_string())),
            Err(e) => Err(ScrapeError::Parse(e.to_string())),
            Ok(()) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error of an answer with this HTTP status and body, fed in two chunks.
    fn outcome(status: u16, body: &str) -> Result<usize, ScrapeError> {
        let mut n = 0;
        let mut each = |_: &[Label<'_>], _: f64, _: f64| n += 1;
        let mut answer = Answer::new(ResultType::Vector, status);
        let (a, b) = body.split_at(body.len() / 2);
        answer.feed(a.as_bytes(), &mut each);
        answer.feed(b.as_bytes(), &mut each);
        answer.finish(&mut each).map(|()| n)
    }

    #[test]
    fn a_failed_request_says_what_its_body_says() {
        // A proxy's page: an HTTP error with its start.
        let page = format!("<html>\n<b>login</b> {}</html>", "x".repeat(1000));
        match outcome(502, &page) {
            Err(ScrapeError::Http { status, detail }) => {
                assert_eq!(status, 502);
                assert!(detail.starts_with("<html> <b>login</b> xxx"), "{detail}");
                assert_eq!(detail.chars().count(), 200);
            }
            other => panic!("{other:?}"),
        }
        // The API's own error, whatever the status: the query's error.
        let failed = r#"{"status":"error","errorType":"bad_data","error":"parse error"}"#;
        for status in [200, 400, 422, 503] {
            match outcome(status, failed) {
                Err(ScrapeError::Query(e)) => assert_eq!(e, "parse error (bad_data)"),
                other => panic!("{status}: {other:?}"),
            }
        }
        let partial = r#"{"status":"success","warnings":["store 2 down"],"data":{"resultType":"vector","result":[]}}"#;
        assert!(
            matches!(outcome(200, partial), Err(ScrapeError::Query(e)) if e == "partial answer, not used: store 2 down")
        );
        // Not an answer, in a success: unreadable.
        assert!(
            matches!(outcome(200, "<html/>"), Err(ScrapeError::Parse(e)) if e.contains("not a Prometheus API answer"))
        );
        let two = r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"a":"1"},"value":[1,"1"]},{"metric":{"a":"2"},"value":[1,"2"]}]}}"#;
        assert!(matches!(outcome(200, two), Ok(2)));
    }
}
