//! Following audit logs like `tail -F`: the files `audit.files` names (or its patterns match), read from their end
//! at start and from their beginning when they appear later, across rotation. kube-apiserver's log backend
//! (lumberjack) rotates by renaming the live file and creating a new one: a file is known by its device and inode,
//! so the renamed one is read to its end (not again from the start) and the new one from its first line. A file
//! truncated in place (copytruncate) is read again from its start. Gzipped files are finished backups: not followed.
use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::read::{parse_line, Tally, MAX_LINE};
use super::{AuditBatch, AuditConfig, AuditMetrics};
use apf::parse::audit::AuditedRequest;

/// How often the files are looked at: well inside kube-apiserver's own flush of its log.
pub const POLL: Duration = Duration::from_secs(1);
/// At most this much of a file is read per poll, so a large backlog goes to the analysis in pieces.
const READ_PER_POLL: u64 = 32 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct FileId {
    dev: u64,
    ino: u64,
}

#[cfg(unix)]
fn file_id(m: &std::fs::Metadata) -> FileId {
    use std::os::unix::fs::MetadataExt;
    FileId {
        dev: m.dev(),
        ino: m.ino(),
    }
}

/// Elsewhere a file is known by its path: a rotation by rename is then read as a new file.
#[cfg(not(unix))]
fn file_id(_: &std::fs::Metadata) -> FileId {
    FileId { dev: 0, ino: 0 }
}

struct Followed {
    path: PathBuf,
    file: File,
    offset: u64,
    /// The start of a line whose end is not written yet.
    partial: Vec<u8>,
    /// The line being read is longer than [`MAX_LINE`]: dropped up to its end.
    skipping: bool,
    /// Matched by a pattern in the last poll.
    seen: bool,
}

/// What one poll read.
#[derive(Debug, Default)]
pub struct Polled {
    pub requests: Vec<AuditedRequest>,
    pub tally: Tally,
    /// What is wrong with a file or a pattern (unreadable directory, a file that cannot be opened), and the first
    /// malformed line of each file.
    pub problems: Vec<String>,
}

/// The followed files of `audit.files`.
pub struct Follower {
    patterns: Vec<PathBuf>,
    files: HashMap<FileId, Followed>,
    /// Gzipped backups seen: not opened again at each poll.
    finished: std::collections::HashSet<FileId>,
    /// Files that exist at the first poll are read from their end: the past is the offline command's.
    first: bool,
}

/// `name` matches `pattern`, where `*` is any run of characters and `?` one.
fn wildcard(pattern: &[char], name: &[char]) -> bool {
    match (pattern.first(), name.first()) {
        (None, None) => true,
        (Some('*'), _) => {
            wildcard(&pattern[1..], name) || (!name.is_empty() && wildcard(pattern, &name[1..]))
        }
        (Some('?'), Some(_)) => wildcard(&pattern[1..], &name[1..]),
        (Some(p), Some(n)) if p == n => wildcard(&pattern[1..], &name[1..]),
        _ => false,
    }
}

fn is_gzip(path: &Path) -> bool {
    let mut magic = [0u8; 2];
    path.extension().is_some_and(|e| e == "gz")
        || File::open(path)
            .and_then(|mut f| f.read_exact(&mut magic))
            .is_ok_and(|()| magic == [0x1f, 0x8b])
}

impl Follower {
    pub fn new(patterns: Vec<PathBuf>) -> Self {
        Follower {
            patterns,
            files: HashMap::new(),
            finished: Default::default(),
            first: true,
        }
    }

    /// The files the patterns match now.
    fn matched(&self, problems: &mut Vec<String>) -> Vec<PathBuf> {
        matching_files(&self.patterns, problems)
    }
}

/// The files `patterns` (paths, or `*` and `?` in the file name) match now, sorted; what cannot be read is said in
/// `problems`.
pub fn matching_files(patterns: &[PathBuf], problems: &mut Vec<String>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for p in patterns {
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
        let Some(name) = name else { continue };
        if !name.contains(['*', '?']) {
            if p.exists() {
                out.push(p.clone());
            }
            continue;
        }
        let dir = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let pattern: Vec<char> = name.chars().collect();
        match std::fs::read_dir(dir) {
            Ok(entries) => {
                for e in entries.flatten() {
                    let n: Vec<char> = e.file_name().to_string_lossy().chars().collect();
                    if wildcard(&pattern, &n) {
                        out.push(e.path());
                    }
                }
            }
            Err(e) => problems.push(format!(
                "audit.files: cannot read the directory {}: {e}",
                dir.display()
            )),
        }
    }
    out.sort();
    out.dedup();
    out
}

impl Follower {
    /// Reads what was written since the last poll.
    pub fn poll(&mut self) -> Polled {
        let mut out = Polled::default();
        for f in self.files.values_mut() {
            f.seen = false;
        }
        let mut seen_ids = std::collections::HashSet::new();
        for path in self.matched(&mut out.problems) {
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            let id = file_id(&meta);
            seen_ids.insert(id);
            if let Some(f) = self.files.get_mut(&id) {
                f.seen = true;
                f.path = path;
                continue;
            }
            if self.finished.contains(&id) {
                continue;
            }
            if is_gzip(&path) {
                self.finished.insert(id);
                continue;
            }
            match File::open(&path) {
                Ok(mut file) => {
                    let offset = if self.first { meta.len() } else { 0 };
                    // Started in the middle of a line: its rest is the past too.
                    let mid_line = offset > 0 && !ends_with_newline(&mut file, offset);
                    self.files.insert(
                        id,
                        Followed {
                            path,
                            file,
                            offset,
                            partial: Vec::new(),
                            skipping: mid_line,
                            seen: true,
                        },
                    );
                }
                Err(e) => out
                    .problems
                    .push(format!("audit.files: cannot open {}: {e}", path.display())),
            }
        }
        self.first = false;
        self.finished.retain(|id| seen_ids.contains(id));
        let mut gone = Vec::new();
        for (id, f) in &mut self.files {
            let at_end = read_new(f, &mut out);
            // Renamed away from every pattern, or deleted: its last lines are read; then it is let go.
            if !f.seen && at_end {
                gone.push(*id);
            }
        }
        for id in gone {
            self.files.remove(&id);
        }
        out
    }
}

/// Whether the byte before `offset` is a newline.
fn ends_with_newline(file: &mut File, offset: u64) -> bool {
    let mut last = [0u8; 1];
    file.seek(SeekFrom::Start(offset - 1))
        .and_then(|_| file.read_exact(&mut last))
        .is_ok_and(|()| last[0] == b'\n')
}

/// Reads `f` from its offset; true when it is at its end.
fn read_new(f: &mut Followed, out: &mut Polled) -> bool {
    let len = match f.file.metadata() {
        Ok(m) => m.len(),
        Err(e) => {
            out.problems
                .push(format!("audit.files: {}: {e}", f.path.display()));
            return true;
        }
    };
    if len < f.offset {
        // Truncated in place (copytruncate): what is there now is new.
        f.offset = 0;
        f.partial.clear();
        f.skipping = false;
    }
    if len == f.offset {
        return true;
    }
    let want = (len - f.offset).min(READ_PER_POLL);
    let mut buf = Vec::with_capacity(want as usize);
    let read = f
        .file
        .seek(SeekFrom::Start(f.offset))
        .and_then(|_| (&mut f.file).take(want).read_to_end(&mut buf));
    if let Err(e) = read {
        out.problems.push(format!(
            "audit.files: cannot read {}: {e}",
            f.path.display()
        ));
        return true;
    }
    f.offset += buf.len() as u64;
    let mut first_malformed = None;
    let mut rest = &buf[..];
    while let Some(i) = rest.iter().position(|b| *b == b'\n') {
        let (piece, after) = rest.split_at(i);
        rest = &after[1..];
        if f.skipping {
            f.skipping = false;
            continue;
        }
        let line = if f.partial.is_empty() {
            piece.to_vec()
        } else {
            let mut l = std::mem::take(&mut f.partial);
            l.extend_from_slice(piece);
            l
        };
        let text = line.trim_ascii();
        if text.is_empty() {
            continue;
        }
        match parse_line(text, &mut out.tally) {
            Ok(requests) => out.requests.extend(requests),
            Err(e) => {
                first_malformed.get_or_insert(e);
            }
        }
    }
    if !f.skipping {
        f.partial.extend_from_slice(rest);
        if f.partial.len() > MAX_LINE {
            f.partial.clear();
            f.skipping = true;
            out.tally.malformed += 1;
            first_malformed.get_or_insert(format!("line longer than {} MiB", MAX_LINE >> 20));
        }
    }
    if let Some(e) = first_malformed {
        out.problems.push(format!(
            "audit.files: {}: malformed lines skipped (first: {e})",
            f.path.display()
        ));
    }
    f.offset == len
}

/// Follows the files until `cancel` (or until the analysis is gone), a poll a second, sending what completed to the analysis; runs on a blocking
/// thread (file reads block).
pub fn run(
    config: AuditConfig,
    tx: mpsc::Sender<AuditBatch>,
    metrics: AuditMetrics,
    cancel: CancellationToken,
) {
    let mut follower = Follower::new(config.files.clone());
    let mut last_problems: Vec<String> = Vec::new();
    // The analysis gone (the daemon dropped without a stop) ends it too: a blocking thread cannot be aborted.
    while !cancel.is_cancelled() && !tx.is_closed() {
        let polled = follower.poll();
        metrics.add(&polled.tally);
        // A problem is said when it starts, not every second.
        for p in &polled.problems {
            if !last_problems.contains(p) {
                tracing::warn!("{p}");
            }
        }
        last_problems = polled.problems;
        for chunk in polled.requests.chunks(10_000) {
            let batch = AuditBatch {
                cluster: config.cluster.clone(),
                requests: chunk.to_vec(),
            };
            if tx.blocking_send(batch).is_err() {
                return;
            }
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn event(user: &str, code: u16) -> String {
        format!(
            r#"{{"kind":"Event","stage":"ResponseComplete","verb":"list","user":{{"username":"{user}"}},"objectRef":{{"resource":"pods"}},"responseStatus":{{"code":{code}}}}}"#
        )
    }

    fn append(path: &Path, text: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    fn users(p: &Polled) -> Vec<String> {
        p.requests.iter().map(|r| r.user.clone()).collect()
    }

    #[test]
    fn follows_across_rotation_by_rename_and_truncation() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.log");
        append(&log, &format!("{}\n", event("old", 200)));
        let mut f = Follower::new(vec![dir.path().join("audit*")]);
        // What was there at start is the past.
        assert!(f.poll().requests.is_empty());
        // A line written in two pieces is read once whole.
        let line = event("a", 429);
        append(&log, &line[..20]);
        assert!(f.poll().requests.is_empty());
        append(&log, &format!("{}\n{}\n", &line[20..], event("b", 200)));
        assert_eq!(users(&f.poll()), ["a", "b"]);
        // Rotation as lumberjack does it: a last line, the rename, a new file. The renamed file still matches
        // the pattern and is not read again.
        append(&log, &format!("{}\n", event("c", 200)));
        let backup = dir.path().join("audit-2026-11-24T10-00-00.000.log");
        std::fs::rename(&log, &backup).unwrap();
        append(&log, &format!("{}\n", event("d", 200)));
        let mut got = users(&f.poll());
        got.sort();
        assert_eq!(got, ["c", "d"]);
        // The backup compressed and the plain one deleted: the .gz is not followed.
        let gz = dir.path().join("audit-2026-11-24T10-00-00.000.log.gz");
        std::fs::write(&gz, [0x1f, 0x8b, 0, 0]).unwrap();
        std::fs::remove_file(&backup).unwrap();
        append(&log, &format!("{}\nnot json\n", event("e", 200)));
        let p = f.poll();
        assert_eq!(users(&p), ["e"]);
        assert_eq!(p.tally.malformed, 1);
        assert!(
            p.problems[0].contains("malformed lines skipped"),
            "{:?}",
            p.problems
        );
        assert_eq!(f.files.len(), 1);
        // The backup is known as finished: later polls do not open it again.
        assert_eq!(f.finished.len(), 1);
        // copytruncate: the file starts again.
        std::fs::write(&log, format!("{}\n", event("f", 429))).unwrap();
        assert_eq!(users(&f.poll()), ["f"]);
    }

    #[test]
    fn a_line_cut_at_start_is_the_past_not_a_malformed_line() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.log");
        let line = event("half", 429);
        append(&log, &line[..30]);
        let mut f = Follower::new(vec![log.clone()]);
        f.poll();
        append(&log, &format!("{}\n{}\n", &line[30..], event("whole", 200)));
        let p = f.poll();
        assert_eq!(users(&p), ["whole"]);
        assert_eq!(p.tally.malformed, 0);
    }

    #[test]
    fn files_that_appear_later_are_read_from_the_start_and_problems_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.log");
        let mut f = Follower::new(vec![log.clone(), dir.path().join("missing/*.log")]);
        let p = f.poll();
        assert!(
            p.problems[0].contains("cannot read the directory"),
            "{:?}",
            p.problems
        );
        append(&log, &format!("{}\n", event("first", 200)));
        assert_eq!(users(&f.poll()), ["first"]);
    }

    #[test]
    fn an_overlong_line_is_dropped_without_being_kept() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.log");
        std::fs::write(&log, "").unwrap();
        let mut f = Follower::new(vec![log.clone()]);
        f.poll();
        append(&log, &"x".repeat(MAX_LINE + 1));
        let p = f.poll();
        assert_eq!(p.tally.malformed, 1);
        append(&log, &format!("more\n{}\n", event("after", 200)));
        let p = f.poll();
        assert_eq!(users(&p), ["after"]);
        assert_eq!(p.tally.malformed, 0);
    }

    #[test]
    fn wildcards() {
        let w = |p: &str, n: &str| {
            wildcard(
                &p.chars().collect::<Vec<_>>(),
                &n.chars().collect::<Vec<_>>(),
            )
        };
        assert!(w("audit*.log", "audit.log"));
        assert!(w("audit*.log", "audit-2026-11-24T10-00-00.000.log"));
        assert!(!w("audit*.log", "audit.log.gz"));
        assert!(w("a?c", "abc"));
        assert!(!w("a?c", "ac"));
    }
}
