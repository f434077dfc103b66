//! `simulate`'s kubeconfig, held for as long as the simulator runs: a second `simulate` writing the same file is
//! refused, instead of overwriting it and leaving kubectl pointed at a cluster that goes away with it.
use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The kubeconfig a running `simulate` holds (an exclusive `flock`, let go when the process ends, however it ends).
pub struct HeldKubeconfig {
    _file: File,
    path: PathBuf,
    /// Made by [`HeldKubeconfig::claim`] and not written yet: removed if the simulator does not start.
    empty: bool,
}

impl HeldKubeconfig {
    /// Holds `path` (made, readable by its owner only, when it is not there), or says which running `simulate`
    /// holds it.
    pub fn claim(path: &Path) -> Result<Self> {
        let existed = path.exists();
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(false);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            // It will hold the token.
            options.mode(0o600);
        }
        let file = options
            .open(path)
            .with_context(|| format!("cannot write {}; use --kubeconfig-out", path.display()))?;
        // Not ours to remove until the lock is: another `simulate` may have made the file since `existed` was read.
        let mut held = Self {
            _file: file,
            path: path.to_path_buf(),
            empty: false,
        };
        #[cfg(unix)]
        {
            use std::os::fd::AsRawFd;
            // SAFETY: flock on a descriptor this function owns; no memory is passed.
            if unsafe { libc::flock(held._file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::WouldBlock {
                    let server = std::fs::read_to_string(path)
                        .ok()
                        .and_then(|text| server_of(&text))
                        .map(|s| format!(" (its cluster at {s})"))
                        .unwrap_or_default();
                    anyhow::bail!(
                        "{} is the kubeconfig of another `apf-monitor simulate`, still running{server}: stop it, or \
                         give this one a file of its own with --kubeconfig-out FILE",
                        path.display()
                    );
                }
                // A file system without locks (some network ones): the simulator runs, unguarded.
                tracing::warn!(
                    "cannot lock {}: {e}; a second simulate could overwrite it",
                    path.display()
                );
            }
        }
        held.empty = !existed;
        Ok(held)
    }

    /// The kubeconfig is written: kept from now on, also after the simulator stops.
    pub fn written(&mut self) {
        self.empty = false;
    }
}

impl Drop for HeldKubeconfig {
    fn drop(&mut self) {
        if self.empty {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The first cluster's `server:` in a kubeconfig, read line by line (the file may be half-written).
fn server_of(kubeconfig: &str) -> Option<String> {
    kubeconfig.lines().find_map(|l| {
        let s = l
            .trim()
            .strip_prefix("server:")?
            .trim()
            .trim_matches(['"', '\'']);
        (!s.is_empty()).then(|| s.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_claim_is_refused_naming_the_server_and_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sim.kubeconfig");
        let mut first = HeldKubeconfig::claim(&path).unwrap();
        std::fs::write(
            &path,
            "clusters:\n- cluster:\n    server: https://127.0.0.1:8001\n",
        )
        .unwrap();
        first.written();
        let e = HeldKubeconfig::claim(&path).err().unwrap().to_string();
        assert!(
            e.contains("still running (its cluster at https://127.0.0.1:8001)")
                && e.contains("--kubeconfig-out FILE"),
            "{e}"
        );
        drop(first);
        // Let go: the next simulate takes it, and the file is kept.
        assert!(HeldKubeconfig::claim(&path).is_ok());
        assert!(path.exists());
    }

    #[test]
    fn a_claim_never_written_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sim.kubeconfig");
        drop(HeldKubeconfig::claim(&path).unwrap());
        assert!(!path.exists());
    }
}
