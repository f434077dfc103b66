//! Go's `text/tabwriter` as the debug dumps use it: `NewWriter(w, 8, 0, 1, ' ', 0)`.
//!
//! Each line is split into tab-terminated cells; the text after the last tab is a trailing cell that belongs to no
//! column. A column block is a run of consecutive lines that have a cell in that column; every cell of a block is
//! padded to the block's widest cell + 1 (at least 8). This is the same recursion as Go's `Writer.format`.

const MIN_WIDTH: usize = 8;
const PADDING: usize = 1;

/// Formats `text` exactly as Go's tabwriter (minwidth 8, tabwidth 0, padding 1, padchar ' ', flags 0) would.
pub fn tabwrite(text: &str) -> String {
    let lines: Vec<Vec<&str>> = text.split('\n').map(|l| l.split('\t').collect()).collect();
    let mut out = String::with_capacity(text.len() * 2);
    let mut widths = Vec::new();
    format(&lines, &mut out, &mut widths, 0, lines.len());
    out
}

/// Joins one row's cells as the dumps do: `strings.Join(cols, ",\t")`.
pub fn row(cells: &[String]) -> String {
    cells.join(",\t")
}

fn cell_width(s: &str) -> usize {
    s.chars().count()
}

fn format(
    lines: &[Vec<&str>],
    out: &mut String,
    widths: &mut Vec<usize>,
    line0: usize,
    line1: usize,
) {
    let column = widths.len();
    let mut line0 = line0;
    let mut this = line0;
    while this < line1 {
        if column + 1 >= lines[this].len() {
            this += 1;
            continue;
        }
        write_lines(lines, out, widths, line0, this);
        line0 = this;
        let mut width = MIN_WIDTH;
        while this < line1 {
            let line = &lines[this];
            if column + 1 >= line.len() {
                break;
            }
            width = width.max(cell_width(line[column]) + PADDING);
            this += 1;
        }
        widths.push(width);
        format(lines, out, widths, line0, this);
        widths.pop();
        line0 = this;
    }
    write_lines(lines, out, widths, line0, line1);
}

fn write_lines(
    lines: &[Vec<&str>],
    out: &mut String,
    widths: &[usize],
    line0: usize,
    line1: usize,
) {
    for (i, line) in lines.iter().enumerate().take(line1).skip(line0) {
        for (j, cell) in line.iter().enumerate() {
            out.push_str(cell);
            if j < widths.len() {
                for _ in cell_width(cell)..widths[j] {
                    out.push(' ');
                }
            }
        }
        // Go writes a newline after every line but the last buffered (unterminated) one.
        if i + 1 < lines.len() {
            out.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The project's own copies of the Kubernetes documentation's dumps (see tests/fixtures/SOURCES.md).
    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

    /// Re-creates the Go input (cells joined by ",\t") from a padded dump and formats it again.
    fn reformat(fixture: &str) -> String {
        let mut input = String::new();
        for line in fixture.lines() {
            let cells: Vec<String> = line.split(',').map(|c| c.trim().to_string()).collect();
            input.push_str(&row(&cells));
            input.push('\n');
        }
        tabwrite(&input)
    }

    #[test]
    fn reproduces_priority_levels_fixture_byte_for_byte() {
        let path = format!("{FIXTURES}/k8swebsite-2023-dump_priority_levels.txt");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(reformat(&text), text);
    }

    #[test]
    fn reproduces_requests_fixture_byte_for_byte() {
        let path = format!("{FIXTURES}/k8swebsite-2023-dump_requests.txt");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(reformat(&text), text);
    }

    #[test]
    fn reproduces_details_fixture_up_to_trailing_spaces() {
        // The docs trimmed the spaces Go writes after a padded cell whose successor is empty.
        let path = format!("{FIXTURES}/k8swebsite-2023-dump_requests-includeRequestDetails.txt");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let ours: Vec<String> = reformat(&text)
            .lines()
            .map(|l| l.trim_end().to_string())
            .collect();
        let theirs: Vec<&str> = text.lines().collect();
        assert_eq!(ours, theirs);
    }

    #[test]
    fn empty_last_cell_is_padded_like_go() {
        // The docs trim trailing spaces; Go pads a tab-terminated cell even when nothing follows it.
        let out = tabwrite("a,\tResource,\tSub\nb,\tconfigmaps,\t\n");
        assert_eq!(out, "a,      Resource,   Sub\nb,      configmaps, \n");
    }

    #[test]
    fn inline_example() {
        let out = tabwrite("PriorityLevelName,\tIsIdle\nexempt,\t<none>\n");
        assert_eq!(
            out,
            "PriorityLevelName, IsIdle\nexempt,            <none>\n"
        );
    }
}
