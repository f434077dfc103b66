//! `web.auth.tokens_file`: the accepted bearer tokens, one a line, re-read when the file changes (a Secret
//! mounted as a volume is replaced in place when it rotates). The tokens are never logged.
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

/// The file and what it held when last read.
pub struct TokensFile {
    path: PathBuf,
    state: Mutex<Loaded>,
}

struct Loaded {
    modified: Option<SystemTime>,
    len: u64,
    tokens: Vec<String>,
}

fn read(path: &Path) -> std::io::Result<Loaded> {
    let meta = std::fs::metadata(path)?;
    let text = std::fs::read_to_string(path)?;
    let tokens = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    Ok(Loaded {
        modified: meta.modified().ok(),
        len: meta.len(),
        tokens,
    })
}

/// Compares in time independent of where the strings differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl TokensFile {
    /// Reads the file now: a file that cannot be read is an error at start.
    pub fn open(path: &Path) -> std::io::Result<TokensFile> {
        Ok(TokensFile {
            path: path.to_path_buf(),
            state: Mutex::new(read(path)?),
        })
    }

    /// Whether `token` is one of the file's, as it is now. When the file changed it is read again; when it cannot
    /// be read any more, the tokens last read stay (a rotation replaces it, it does not remove it).
    pub fn accepts(&self, token: &str) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Ok(meta) = std::fs::metadata(&self.path) {
            if meta.modified().ok() != state.modified || meta.len() != state.len {
                match read(&self.path) {
                    Ok(loaded) => *state = loaded,
                    Err(e) => tracing::warn!(
                        path = %self.path.display(),
                        error = %e,
                        "web.auth.tokens_file changed but cannot be read; the tokens read before stay"
                    ),
                }
            }
        }
        state.tokens.iter().any(|t| same(t, token))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rotated_file_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, "old\n").unwrap();
        let file = TokensFile::open(&path).unwrap();
        assert!(file.accepts("old") && !file.accepts("new") && !file.accepts(""));
        // A Secret volume swaps the file for a new one.
        let next = dir.path().join("tokens.next");
        std::fs::write(&next, "new-token\n").unwrap();
        std::fs::rename(&next, &path).unwrap();
        assert!(file.accepts("new-token") && !file.accepts("old"));
        assert!(TokensFile::open(&dir.path().join("missing")).is_err());
    }
}
