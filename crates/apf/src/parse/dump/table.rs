//! The table every dump is: a header naming the columns, then one row per line, read line by line so that a body can
//! be read whole or as its chunks arrive, with the same rows.
use std::borrow::Cow;

use super::{DumpError, DumpStats};

/// What one dump makes of its rows: the columns it looks up in the header, and a row of them.
pub(super) trait Table: Sized {
    /// A row, borrowing from its line where it can.
    type Row<'l>;
    /// Finds the columns in the header (an error when one every row needs is missing).
    fn columns(header: &Header) -> Result<Self, DumpError>;
    /// The free-text column that extra cells are merged back into, if the dump has one (most have none).
    fn free_text(_header: &Header) -> Option<usize> {
        None
    }
    /// The row, or `None` when a cell does not parse (the row is counted invalid).
    fn row<'l>(&self, row: &Row<'l>) -> Option<Self::Row<'l>>;
}

/// Column names of a dump, in order.
pub(super) struct Header {
    columns: Vec<String>,
}

impl Header {
    pub(super) fn col(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c == name)
    }

    pub(super) fn col_any(&self, names: &[&str]) -> Option<usize> {
        names.iter().find_map(|n| self.col(n))
    }

    pub(super) fn require(&self, name: &'static str) -> Result<usize, DumpError> {
        self.col(name)
            .ok_or(DumpError::MissingColumn { column: name })
    }
}

/// The trimmed cells of one row, aligned with the header.
pub(super) struct Row<'a> {
    cells: Vec<Cow<'a, str>>,
}

impl<'a> Row<'a> {
    /// The cell as the dump holds it, or `None` as for [`Self::cell`].
    pub(super) fn borrowed(&self, col: Option<usize>) -> Option<Cow<'a, str>> {
        self.cell(col)?;
        self.cells.get(col?).cloned()
    }

    /// The cell, or `None` when the column is absent, the row stops early, or the cell is empty
    /// or `<none>`.
    pub(super) fn cell(&self, col: Option<usize>) -> Option<&str> {
        let cell = self.cells.get(col?)?.as_ref();
        match cell {
            "" | "<none>" => None,
            c => Some(c),
        }
    }

    /// The priority level name; `None` (empty or `<none>`) makes the row invalid.
    pub(super) fn level(&self, col: usize) -> Option<String> {
        self.cell(Some(col)).map(str::to_string)
    }

    /// Outer `None`: the cell is not a number, so the row is invalid. Inner `None`: no value.
    pub(super) fn num<N: std::str::FromStr>(&self, col: Option<usize>) -> Option<Option<N>> {
        match self.cell(col) {
            None => Some(None),
            Some(c) => c.parse().ok().map(Some),
        }
    }

    pub(super) fn boolean(&self, col: Option<usize>) -> Option<Option<bool>> {
        match self.cell(col) {
            None => Some(None),
            Some("true") => Some(Some(true)),
            Some("false") => Some(Some(false)),
            Some(_) => None,
        }
    }

    /// `SeatSeconds.String()` is `%d.%08dss`; `VirtualStart` (1.19–1.22) is a plain float.
    pub(super) fn seat_seconds(&self, col: Option<usize>) -> Option<Option<f64>> {
        match self.cell(col) {
            None => Some(None),
            Some(c) => {
                let c = c.strip_suffix("ss").unwrap_or(c);
                c.parse::<f64>().ok().filter(|v| v.is_finite()).map(Some)
            }
        }
    }
}

/// A dump read line by line: the header first (leading blank lines tolerated), then each line a row.
pub(super) struct TableReader<T> {
    columns: Option<Columns<T>>,
    /// The first line may start with a byte-order mark.
    first_line: bool,
    pub(super) stats: DumpStats,
}

/// What the header said.
struct Columns<T> {
    table: T,
    free: Option<usize>,
    width: usize,
    trailing_comma: bool,
}

impl<T: Table> TableReader<T> {
    pub(super) fn new() -> Self {
        TableReader {
            columns: None,
            first_line: true,
            stats: DumpStats::default(),
        }
    }

    /// One line (without its line ending) and, once the header is read, its row to `each`.
    pub(super) fn line<'l>(
        &mut self,
        mut line: &'l str,
        each: &mut impl FnMut(T::Row<'l>),
    ) -> Result<(), DumpError> {
        if std::mem::take(&mut self.first_line) {
            line = line.strip_prefix('\u{feff}').unwrap_or(line);
        }
        let Some(columns) = &self.columns else {
            // Leading blank lines are tolerated; a blank body is an empty dump.
            if !line.trim().is_empty() {
                self.columns = Some(Self::header(line)?);
            }
            return Ok(());
        };
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed == "..." {
            self.stats.skipped_lines += 1;
            return Ok(());
        }
        let raw = split_cells(line, columns.trailing_comma);
        let cells: Vec<Cow<'l, str>> = if raw.len() > columns.width {
            match columns.free {
                Some(f) => {
                    self.stats.merged_rows += 1;
                    merge_extra_cells(&raw, f, raw.len() - columns.width)
                }
                None => {
                    self.stats.invalid_rows += 1;
                    return Ok(());
                }
            }
        } else {
            raw.iter().map(|c| Cow::Borrowed(c.trim())).collect()
        };
        match columns.table.row(&Row { cells }) {
            Some(row) => {
                self.stats.rows += 1;
                each(row);
            }
            None => self.stats.invalid_rows += 1,
        }
        Ok(())
    }

    fn header(line: &str) -> Result<Columns<T>, DumpError> {
        // The 2020 layouts end every line with `,`: then that comma closes the last cell rather
        // than opening an empty one. Otherwise a row ending in `,` has an empty last cell, and
        // dropping it would hide a comma inside a user name.
        let trailing_comma = line.trim_end().ends_with(',');
        let found = split_cells(line, trailing_comma);
        if !looks_like_header(&found) {
            return Err(DumpError::NotADump {
                first_line: line.trim().chars().take(80).collect(),
            });
        }
        let header = Header {
            columns: found.iter().map(|c| c.trim().to_string()).collect(),
        };
        Ok(Columns {
            table: T::columns(&header)?,
            free: T::free_text(&header),
            width: header.columns.len(),
            trailing_comma,
        })
    }
}

/// A whole dump, its lines as [`str::lines`] splits them.
pub(super) fn fold_text<'t, T: Table>(
    text: &'t str,
    mut each: impl FnMut(T::Row<'t>),
) -> Result<DumpStats, DumpError> {
    let mut reader = TableReader::<T>::new();
    for line in text.lines() {
        reader.line(line, &mut each)?;
    }
    Ok(reader.stats)
}

/// A dump read as its chunks arrive: the lines they complete are read at once, the rest of a line waits for the next
/// chunk. Each line is decoded on its own, a stray invalid byte replaced as [`String::from_utf8_lossy`] would in the
/// whole body (a line feed ends any broken sequence before it).
pub(super) struct ChunkReader<T> {
    table: TableReader<T>,
    /// The start of a line whose end has not arrived.
    partial: Vec<u8>,
    /// The first error: what is read after it is ignored.
    failed: Option<DumpError>,
}

impl<T: Table> ChunkReader<T> {
    pub(super) fn new() -> Self {
        ChunkReader {
            table: TableReader::new(),
            partial: Vec::new(),
            failed: None,
        }
    }

    pub(super) fn feed(&mut self, mut chunk: &[u8], each: &mut impl FnMut(T::Row<'_>)) {
        while self.failed.is_none() {
            let Some(end) = memchr::memchr(b'\n', chunk) else {
                self.partial.extend_from_slice(chunk);
                return;
            };
            let result = if self.partial.is_empty() {
                self.line(&chunk[..end], true, each)
            } else {
                let mut partial = std::mem::take(&mut self.partial);
                partial.extend_from_slice(&chunk[..end]);
                let result = self.line(&partial, true, each);
                // The buffer is kept for the next split line.
                partial.clear();
                self.partial = partial;
                result
            };
            self.failed = result.err();
            chunk = &chunk[end + 1..];
        }
    }

    pub(super) fn finish(
        mut self,
        each: &mut impl FnMut(T::Row<'_>),
    ) -> Result<DumpStats, DumpError> {
        if self.failed.is_none() && !self.partial.is_empty() {
            let last = std::mem::take(&mut self.partial);
            self.failed = self.line(&last, false, each).err();
        }
        match self.failed {
            Some(e) => Err(e),
            None => Ok(self.table.stats),
        }
    }

    /// As [`str::lines`]: a line ended by a line feed loses a carriage return before it; the last line keeps it.
    fn line(
        &mut self,
        mut bytes: &[u8],
        ended: bool,
        each: &mut impl FnMut(T::Row<'_>),
    ) -> Result<(), DumpError> {
        if ended {
            bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        }
        let text = String::from_utf8_lossy(bytes);
        self.table.line(&text, each)
    }
}

/// Splits on `,` without trimming; with `trailing_comma` a final `,` closes the last cell.
fn split_cells(line: &str, trailing_comma: bool) -> Vec<&str> {
    let mut line = line.trim_end();
    if trailing_comma {
        line = line.strip_suffix(',').unwrap_or(line);
    }
    line.split(',').collect()
}

/// A header has at least two cells, each a bare CamelCase column name.
fn looks_like_header(cells: &[&str]) -> bool {
    cells.len() >= 2
        && cells.iter().all(|c| {
            let c = c.trim();
            c.starts_with(|ch: char| ch.is_ascii_alphabetic())
                && c.chars().all(|ch| ch.is_ascii_alphanumeric())
        })
}

/// Glues `extra` cells after column `free` back into it, with the commas they were split on.
fn merge_extra_cells<'t>(raw: &[&'t str], free: usize, extra: usize) -> Vec<Cow<'t, str>> {
    let mut cells = Vec::with_capacity(raw.len() - extra);
    for (i, c) in raw.iter().enumerate() {
        if i == free {
            let end = (free + extra + 1).min(raw.len());
            cells.push(Cow::Owned(raw[free..end].join(",").trim().to_string()));
        } else if i <= free || i > free + extra {
            cells.push(Cow::Borrowed(c.trim()));
        }
    }
    cells
}
