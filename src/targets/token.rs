//! A bearer token read from a file and re-read whenever the file changes: projected service-account tokens rotate
//! (hourly by default), and a stale token means 401s.
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read bearer_token_file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("bearer_token_file {path} is empty")]
    Empty { path: String },
}

#[derive(Clone)]
pub struct TokenFile {
    path: PathBuf,
    cached: Arc<Mutex<Option<Cached>>>,
}

struct Cached {
    modified: Option<SystemTime>,
    len: u64,
    token: Arc<str>,
}

impl TokenFile {
    pub fn new(path: PathBuf) -> Self {
        Self {
            path,
            cached: Arc::new(Mutex::new(None)),
        }
    }

    /// The current token: a `stat` per call, a read only when the file changed. When the file cannot be read any
    /// more, the last good token is kept (with a warning) rather than scraping without credentials.
    pub fn current(&self) -> Result<Arc<str>, TokenError> {
        let path = self.path.display().to_string();
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        let meta = std::fs::metadata(&self.path);
        if let (Ok(meta), Some(c)) = (&meta, cached.as_ref()) {
            if meta.modified().ok() == c.modified && meta.len() == c.len {
                return Ok(c.token.clone());
            }
        }
        let read = meta.and_then(|meta| Ok((meta, std::fs::read_to_string(&self.path)?)));
        match read {
            Ok((meta, text)) => {
                let token = text.trim();
                if token.is_empty() {
                    return Err(TokenError::Empty { path });
                }
                let token: Arc<str> = Arc::from(token);
                *cached = Some(Cached {
                    modified: meta.modified().ok(),
                    len: meta.len(),
                    token: token.clone(),
                });
                Ok(token)
            }
            Err(source) => match cached.as_ref() {
                Some(c) => {
                    tracing::warn!(%path, error = %source, "cannot re-read bearer_token_file; using the last token read");
                    Ok(c.token.clone())
                }
                None => Err(TokenError::Read { path, source }),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rereads_when_the_file_changes_and_keeps_the_last_good_token() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "first\n").unwrap();
        let t = TokenFile::new(path.clone());
        assert_eq!(&*t.current().unwrap(), "first");
        // A rotated token of another length is picked up at once, whatever the mtime granularity.
        std::fs::write(&path, "second-token").unwrap();
        assert_eq!(&*t.current().unwrap(), "second-token");
        std::fs::remove_file(&path).unwrap();
        assert_eq!(&*t.current().unwrap(), "second-token");
    }

    #[test]
    fn missing_or_empty_file_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let t = TokenFile::new(dir.path().join("absent"));
        assert!(t.current().unwrap_err().to_string().contains("absent"));
        std::fs::write(dir.path().join("empty"), "  \n").unwrap();
        let t = TokenFile::new(dir.path().join("empty"));
        assert!(matches!(t.current(), Err(TokenError::Empty { .. })));
    }
}
