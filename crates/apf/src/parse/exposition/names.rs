//! The filter's verdicts on sample names already judged, and the comparison that recognises them.

/// The filter's verdicts on the last few sample names. The lines of a family come together (a histogram's buckets
/// share one name; its `_sum` and `_count` follow each series' buckets), so a line that starts with one of these names
/// and a delimiter is judged by one comparison, not by scanning its name byte by byte and asking the filter again:
/// that scan was a fifth of a round (`cargo bench --bench round`). Keeping the last one only, each histogram series'
/// `_sum`, `_count` and first bucket were judged anew: a seventh of a capture's lines.
#[derive(Default)]
pub(super) struct Verdicts {
    /// Most recent first; at most [`RECENT_NAMES`].
    recent: Vec<(Vec<u8>, bool)>,
}

/// A histogram's three names, and one more for a family whose lines alternate with another's.
const RECENT_NAMES: usize = 4;

impl Verdicts {
    /// The end of the name at `start` and its verdict, when it is one of the recent names (then the most recent).
    pub(super) fn lookup(&mut self, line: &[u8], start: usize) -> Option<(usize, bool)> {
        let i = self
            .recent
            .iter()
            .position(|(name, _)| delimited_name_at(line, start, name))?;
        self.recent[..=i].rotate_right(1);
        let (name, wanted) = &self.recent[0];
        Some((start + name.len(), *wanted))
    }

    /// Keeps `name`'s verdict as the most recent, forgetting the oldest (whose allocation it reuses).
    pub(super) fn remember(&mut self, name: &[u8], wanted: bool) {
        if self.recent.len() < RECENT_NAMES {
            self.recent.push((Vec::new(), false));
        }
        self.recent.rotate_right(1);
        let front = &mut self.recent[0];
        front.0.clear();
        front.0.extend_from_slice(name);
        front.1 = wanted;
    }
}

/// Whether the line has the (non-empty) `name` at `start`, followed by a delimiter.
#[inline]
fn delimited_name_at(line: &[u8], start: usize, name: &[u8]) -> bool {
    let end = start + name.len();
    !name.is_empty()
        && matches!(line.get(end), Some(b'{' | b' ' | b'\t'))
        && same_bytes(&line[start..end], name)
}

/// `a == b`, 16 bytes at a time: a sample name is 20-60 bytes, where a call to `memcmp` costs more than the compare
/// (it was a tenth of a round's parse: `perf record` over `cargo bench --bench round -- parse-in-memory`).
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (Some(a_last), Some(b_last)) = (a.last_chunk::<16>(), b.last_chunk::<16>()) else {
        return a == b;
    };
    // The last 16 bytes (which may overlap the others), then the first ones 16 at a time.
    let (mut a, mut b) = (a, b);
    let mut same = a_last == b_last;
    while let (true, Some((x, a_rest)), Some((y, b_rest))) = (
        same,
        a.split_first_chunk::<16>(),
        b.split_first_chunk::<16>(),
    ) {
        same = x == y;
        (a, b) = (a_rest, b_rest);
    }
    same
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_bytes_is_slice_equality() {
        let a: Vec<u8> = (0..48u8).collect();
        for len in 0..=a.len() {
            assert!(same_bytes(&a[..len], &a[..len]));
            assert!(!same_bytes(&a[..len], &a[..len.saturating_sub(1)]) || len == 0);
            for at in 0..len {
                let mut b = a[..len].to_vec();
                b[at] ^= 0x20;
                assert!(!same_bytes(&a[..len], &b), "len {len}, byte {at}");
            }
        }
    }
}
