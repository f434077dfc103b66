//! Reading audit events as kube-apiserver's log backend writes them (`--audit-log-format=json`: one Event a line),
//! plain or gzipped (`--audit-log-compress`), and the batches its webhook backend posts (an EventList, which a line
//! may also hold: a saved batch, an export). A malformed line is counted with its number and never stops the
//! reading.
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use apf::parse::audit::{parse_event, parse_event_list, AuditError, AuditedRequest};

/// A line longer than this is not an Event at level Metadata (a few KiB) nor a sane batch: counted as malformed,
/// skipped without holding it in memory.
pub const MAX_LINE: usize = 16 << 20;

/// What one line (or batch) held.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Tally {
    /// Requests counted: their last stage (`ResponseComplete`, `Panic`).
    pub counted: u64,
    /// Events of an earlier stage (`RequestReceived`, `ResponseStarted`): the request is counted on its last.
    pub skipped: u64,
    pub malformed: u64,
}

/// The requests completed in `json`, a line holding one Event or an EventList; `Err` names what is wrong with it.
pub fn parse_line(json: &[u8], tally: &mut Tally) -> Result<Vec<AuditedRequest>, String> {
    match parse_event(json) {
        Ok(Some(r)) => {
            tally.counted += 1;
            Ok(vec![r])
        }
        Ok(None) => {
            tally.skipped += 1;
            Ok(Vec::new())
        }
        Err(AuditError::Kind(kind)) if kind == "EventList" => parse_batch(json, tally),
        Err(e) => {
            tally.malformed += 1;
            Err(e.to_string())
        }
    }
}

/// The requests completed in an EventList (the webhook's body).
pub fn parse_batch(json: &[u8], tally: &mut Tally) -> Result<Vec<AuditedRequest>, String> {
    match parse_event_list(json) {
        Ok(batch) => {
            tally.counted += batch.requests.len() as u64;
            tally.skipped += batch.earlier_stages;
            Ok(batch.requests)
        }
        Err(e) => {
            tally.malformed += 1;
            Err(e.to_string())
        }
    }
}

/// One malformed line: where, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Malformed {
    pub file: String,
    pub line: u64,
    pub error: String,
}

/// Reads the lines of `reader` from line `first_line` on, giving each completed request to `each`; a line cut at
/// the end (no newline) is read too. Returns the number of lines read.
pub fn read_lines(
    reader: &mut impl BufRead,
    name: &str,
    tally: &mut Tally,
    malformed: &mut dyn FnMut(Malformed),
    each: &mut dyn FnMut(AuditedRequest),
) -> std::io::Result<u64> {
    let mut buf = Vec::new();
    let mut line = 0u64;
    loop {
        buf.clear();
        let n = reader
            .by_ref()
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)?;
        if n == 0 {
            return Ok(line);
        }
        line += 1;
        if buf.len() > MAX_LINE && buf.last() != Some(&b'\n') {
            // Skip the rest of the line without keeping it.
            loop {
                let chunk = reader.fill_buf()?;
                if chunk.is_empty() {
                    break;
                }
                match chunk.iter().position(|b| *b == b'\n') {
                    Some(i) => {
                        reader.consume(i + 1);
                        break;
                    }
                    None => {
                        let len = chunk.len();
                        reader.consume(len);
                    }
                }
            }
            tally.malformed += 1;
            malformed(Malformed {
                file: name.into(),
                line,
                error: format!("line longer than {} MiB", MAX_LINE >> 20),
            });
            continue;
        }
        let text = buf.trim_ascii();
        if text.is_empty() {
            continue;
        }
        match parse_line(text, tally) {
            Ok(requests) => requests.into_iter().for_each(&mut *each),
            Err(error) => malformed(Malformed {
                file: name.into(),
                line,
                error,
            }),
        }
    }
}

/// Opens `path`, gunzipping it when it starts with gzip's magic bytes (a rotated, compressed log), whatever its
/// name.
pub fn open(path: &Path) -> std::io::Result<Box<dyn BufRead + Send>> {
    let mut file = BufReader::new(std::fs::File::open(path)?);
    let gzip = file.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    Ok(if gzip {
        Box::new(BufReader::new(flate2::read::MultiGzDecoder::new(file)))
    } else {
        Box::new(file)
    })
}

/// Reads a whole log file (plain or gzipped).
pub fn read_file(
    path: &Path,
    tally: &mut Tally,
    malformed: &mut dyn FnMut(Malformed),
    each: &mut dyn FnMut(AuditedRequest),
) -> std::io::Result<u64> {
    let mut reader = open(path)?;
    read_lines(
        &mut reader,
        &path.display().to_string(),
        tally,
        malformed,
        each,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const DONE: &str = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","stage":"ResponseComplete","verb":"list","user":{"username":"alice"},"objectRef":{"resource":"pods"},"responseStatus":{"code":429}}"#;

    fn read(text: &[u8]) -> (Tally, Vec<Malformed>, Vec<AuditedRequest>) {
        let (mut tally, mut bad, mut got) = (Tally::default(), Vec::new(), Vec::new());
        read_lines(
            &mut &text[..],
            "audit.log",
            &mut tally,
            &mut |m| bad.push(m),
            &mut |r| got.push(r),
        )
        .unwrap();
        (tally, bad, got)
    }

    #[test]
    fn malformed_lines_are_counted_with_their_numbers_and_reading_goes_on() {
        let started = DONE.replace("ResponseComplete", "RequestReceived");
        let text = format!("{started}\n{DONE}\n{{\"kind\":\"Ev\n\n{DONE}\n[1,2]\n{DONE}");
        let (tally, bad, got) = read(text.as_bytes());
        assert_eq!(
            tally,
            Tally {
                counted: 3,
                skipped: 1,
                malformed: 2
            }
        );
        assert_eq!(got.len(), 3);
        assert_eq!(
            bad.iter().map(|m| m.line).collect::<Vec<_>>(),
            [3, 6],
            "{bad:?}"
        );
        assert!(
            bad[0].error.contains("not an audit event"),
            "{}",
            bad[0].error
        );
    }

    #[test]
    fn a_saved_batch_counts_its_items() {
        let list = format!(
            r#"{{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{DONE},{DONE},{}]}}"#,
            DONE.replace("ResponseComplete", "ResponseStarted")
        );
        let (tally, bad, got) = read(format!("{list}\n").as_bytes());
        assert!(bad.is_empty());
        assert_eq!((tally.counted, tally.skipped, got.len()), (2, 1, 2));
    }

    #[test]
    fn an_overlong_line_is_skipped_without_being_kept() {
        let mut text = vec![b'x'; MAX_LINE + 10];
        text.push(b'\n');
        text.extend_from_slice(DONE.as_bytes());
        let (tally, bad, got) = read(&text);
        assert_eq!((tally.malformed, tally.counted, got.len()), (1, 1, 1));
        assert_eq!(bad[0].line, 1);
        assert!(bad[0].error.contains("longer than"));
    }

    #[test]
    fn gzipped_files_are_read_whatever_their_name() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit-2026-11-24T10-00-00.000.log");
        let mut gz = flate2::write::GzEncoder::new(
            std::fs::File::create(&path).unwrap(),
            flate2::Compression::fast(),
        );
        writeln!(gz, "{DONE}\n{DONE}").unwrap();
        gz.finish().unwrap();
        let (mut tally, mut n) = (Tally::default(), 0);
        let lines = read_file(&path, &mut tally, &mut |_| {}, &mut |_| n += 1).unwrap();
        assert_eq!((lines, n, tally.counted), (2, 2, 2));
    }
}
