//! The bytes of a line: blanks, tokens, and the names the text format allows.

/// The first bytes of what could not be read, for an error message.
pub(super) fn lossy_snippet(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(40)];
    String::from_utf8_lossy(cut).into_owned()
}

pub(super) fn trim_end(line: &[u8]) -> &[u8] {
    let mut end = line.len();
    while end > 0 && matches!(line[end - 1], b' ' | b'\t' | b'\r') {
        end -= 1;
    }
    &line[..end]
}

pub(super) fn skip_blanks(line: &[u8], mut pos: usize) -> usize {
    while matches!(line.get(pos), Some(b' ' | b'\t')) {
        pos += 1;
    }
    pos
}

pub(super) fn scan_token(line: &[u8], mut pos: usize) -> usize {
    while matches!(line.get(pos), Some(b) if !matches!(b, b' ' | b'\t')) {
        pos += 1;
    }
    pos
}

/// A name [`scan_metric_name`] delimited, as text. Every line of a scrape has one, and validating it as UTF-8 was an
/// eighth of a round's CPU (`cargo bench --bench round`, perf): its bytes are ASCII by construction, so no check is
/// needed.
pub(super) fn ascii_name(name: &[u8]) -> &str {
    debug_assert!(name.is_ascii());
    // SAFETY: `scan_metric_name` accepts only ASCII letters, digits, `_` and `:`, and ASCII is valid UTF-8.
    unsafe { std::str::from_utf8_unchecked(name) }
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`; returns the end (== `start` if there is no name).
pub(super) fn scan_metric_name(line: &[u8], start: usize) -> usize {
    let mut pos = start;
    while let Some(&b) = line.get(pos) {
        let ok = b.is_ascii_alphabetic()
            || b == b'_'
            || b == b':'
            || (pos > start && b.is_ascii_digit());
        if !ok {
            break;
        }
        pos += 1;
    }
    pos
}

/// `[a-zA-Z_][a-zA-Z0-9_]*`; returns the end (== `start` if there is no name).
pub(super) fn scan_label_name(line: &[u8], start: usize) -> usize {
    let mut pos = start;
    while let Some(&b) = line.get(pos) {
        let ok = b.is_ascii_alphabetic() || b == b'_' || (pos > start && b.is_ascii_digit());
        if !ok {
            break;
        }
        pos += 1;
    }
    pos
}
