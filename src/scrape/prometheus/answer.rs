//! The HTTP API's answers, read as their chunks come (apf::parse::api_answer): a failed request whose body is not an
//! API answer is an HTTP error with an excerpt; an API answer, even a failed one, says its own error. An HTML page
//! (a web server's, a proxy's, a dashboard's) is told as one, with its status and content type, never as its markup.
use apf::parse::api_answer::{AnswerError, AnswerReader, ResultType};
use apf::parse::exposition::Label;

use super::super::ScrapeError;

/// Bytes of a body's start kept for its error's excerpt.
const EXCERPT_BYTES: usize = 600;

/// What a person is asked when the source answered with an HTML page.
const PROMETHEUS_URL_HINT: &str =
    "is this the Prometheus URL? (the part before /api/v1 of a Prometheus, Thanos or Mimir query API)";

/// One answer being read.
pub(crate) struct Answer {
    reader: AnswerReader,
    /// The HTTP status.
    status: u16,
    /// The `Content-Type` the answer came with.
    content_type: Option<String>,
    /// The start of the body.
    excerpt: Vec<u8>,
}

impl Answer {
    pub(crate) fn new(wanted: ResultType, status: u16, content_type: Option<String>) -> Self {
        Self {
            reader: AnswerReader::new(wanted),
            status,
            content_type,
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
        if self.excerpt.len() < EXCERPT_BYTES {
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
        let html = crate::scrape::html_page(self.content_type.as_deref(), &self.excerpt);
        match self.reader.finish(each) {
            Err(AnswerError::Malformed(_)) if html.is_some() => {
                let detail = format!("{}: {PROMETHEUS_URL_HINT}", html.unwrap_or_default());
                Err(if failed {
                    ScrapeError::Http {
                        status: self.status,
                        detail,
                    }
                } else {
                    ScrapeError::Parse(format!("HTTP {}: {detail}", self.status))
                })
            }
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
        outcome_typed(status, None, body)
    }

    /// The same, with the answer's content type.
    fn outcome_typed(
        status: u16,
        content_type: Option<&str>,
        body: &str,
    ) -> Result<usize, ScrapeError> {
        let mut n = 0;
        let mut each = |_: &[Label<'_>], _: f64, _: f64| n += 1;
        let mut answer = Answer::new(ResultType::Vector, status, content_type.map(str::to_string));
        let (a, b) = body.split_at(body.len() / 2);
        answer.feed(a.as_bytes(), &mut each);
        answer.feed(b.as_bytes(), &mut each);
        answer.finish(&mut each).map(|()| n)
    }

    #[test]
    fn a_failed_request_says_what_its_body_says() {
        // A proxy's text: an HTTP error with its start.
        let text = format!("upstream\nconnect error {}", "x".repeat(1000));
        match outcome(502, &text) {
            Err(ScrapeError::Http { status, detail }) => {
                assert_eq!(status, 502);
                assert!(detail.starts_with("upstream connect error xxx"), "{detail}");
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
            matches!(outcome(200, "ok"), Err(ScrapeError::Parse(e)) if e.contains("not a Prometheus API answer"))
        );
        let two = r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"a":"1"},"value":[1,"1"]},{"metric":{"a":"2"},"value":[1,"2"]}]}}"#;
        assert!(matches!(outcome(200, two), Ok(2)));
    }

    #[test]
    fn an_html_page_is_told_as_one_not_pasted() {
        let page = "<!DOCTYPE HTML>\n<html><head><title>Error response</title></head>\n<body>Nothing matches the \
                    given URI</body></html>";
        let html = Some("text/html;charset=utf-8");
        // Failed or not, by its content type or by its start: its status, its type and what to check.
        for (status, content_type) in [(404, html), (404, None), (200, html), (200, None)] {
            let e = outcome_typed(status, content_type, page)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                e.contains(&format!("HTTP {status}: an HTML page"))
                    && e.contains("is this the Prometheus URL?")
                    && !e.contains("Nothing matches")
                    && !e.contains("at byte"),
                "{status} {content_type:?}: {e}"
            );
            assert_eq!(
                e.contains("text/html;charset=utf-8"),
                content_type.is_some(),
                "{e}"
            );
        }
        // A JSON answer under an HTML type is still read as the answer it is.
        let failed = r#"{"status":"error","errorType":"bad_data","error":"parse error"}"#;
        assert!(matches!(
            outcome_typed(400, html, failed),
            Err(ScrapeError::Query(_))
        ));
    }
}
