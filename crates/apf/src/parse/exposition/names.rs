//! The filter's verdicts on the sample names last judged.

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
        && &line[start..end] == name
}
