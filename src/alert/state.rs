//! What survives a restart: alert states, what each receiver was told, and silences. Written atomically (temp file
//! in the same directory, fsync, rename) so a crash leaves the old file or the new one, never half of one.
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::engine::{Engine, Tracked};
use super::route::{Group, Router};
use super::silence::{Silence, Silences};

/// Bumped when the layout changes incompatibly; a file of another version is refused like a corrupt one.
pub const STATE_VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot read alert state {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "alert state {path} is corrupt ({source}); starting with empty alert state and no silences"
    )]
    Corrupt {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error(
        "alert state {path} has version {found}, this apf-monitor reads version {STATE_VERSION}"
    )]
    Version { path: PathBuf, found: u32 },
    #[error("cannot write alert state {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlertState {
    pub version: u32,
    pub alerts: Vec<Tracked>,
    /// By group key.
    pub groups: BTreeMap<String, Group>,
    pub silences: Vec<Silence>,
}

impl Default for AlertState {
    fn default() -> Self {
        Self {
            version: STATE_VERSION,
            alerts: Vec::new(),
            groups: BTreeMap::new(),
            silences: Vec::new(),
        }
    }
}

impl AlertState {
    pub fn capture(engine: &Engine, router: &Router, silences: &Silences) -> Self {
        Self {
            version: STATE_VERSION,
            alerts: engine.tracked(),
            groups: router.groups().clone(),
            silences: silences.to_vec(),
        }
    }

    /// Puts the saved state into freshly built parts (built from the current config).
    pub fn restore(self, engine: Engine, router: Router) -> (Engine, Router, Silences) {
        (
            engine.with_tracked(self.alerts),
            router.with_groups(self.groups),
            Silences::from_vec(self.silences),
        )
    }

    /// A missing file is an empty state (first start); anything unreadable is an error the daemon logs as a warning
    /// before going on with `AlertState::default()`.
    pub fn load(path: &Path) -> Result<AlertState, StateError> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(AlertState::default()),
            Err(source) => {
                return Err(StateError::Read {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        #[derive(Deserialize)]
        struct Version {
            version: u32,
        }
        let corrupt = |source| StateError::Corrupt {
            path: path.to_path_buf(),
            source,
        };
        let v: Version = serde_json::from_slice(&bytes).map_err(corrupt)?;
        if v.version != STATE_VERSION {
            return Err(StateError::Version {
                path: path.to_path_buf(),
                found: v.version,
            });
        }
        serde_json::from_slice(&bytes).map_err(corrupt)
    }

    pub fn save(&self, path: &Path) -> Result<(), StateError> {
        let err = |source| StateError::Write {
            path: path.to_path_buf(),
            source,
        };
        let json = serde_json::to_vec_pretty(self).map_err(|e| err(std::io::Error::other(e)))?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "alert-state".into());
        // Same directory, so the rename stays on one file system and is atomic.
        let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&json)?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)?;
            // The rename itself is durable only once the directory is synced; not every platform allows it.
            if let Ok(d) = std::fs::File::open(&dir) {
                let _ = d.sync_all();
            }
            Ok(())
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            err(e)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::alert::rules::Candidate;
    use crate::alert::silence::{Matcher, SilenceInput};
    use crate::alert::RouteConfig;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn cand(name: &str) -> Candidate {
        Candidate {
            replica: Default::default(),
            labels: [
                ("alertname".to_string(), name.to_string()),
                ("priority_level".to_string(), "workload-low".to_string()),
            ]
            .into(),
            annotations: BTreeMap::new(),
            for_: Duration::ZERO,
            keep_firing_for: Duration::ZERO,
        }
    }

    fn parts() -> (Engine, Router, Silences) {
        (
            Engine::new("http://mon"),
            Router::new(
                &RouteConfig::default(),
                &["slack".to_string()],
                "http://mon",
            ),
            Silences::default(),
        )
    }

    #[test]
    fn missing_is_empty_corrupt_and_wrong_version_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        assert_eq!(AlertState::load(&path).unwrap(), AlertState::default());
        std::fs::write(&path, b"{\"version\": 1, \"alerts\": [").unwrap();
        let e = AlertState::load(&path).unwrap_err();
        assert!(matches!(e, StateError::Corrupt { .. }));
        assert!(e.to_string().contains("is corrupt"), "{e}");
        std::fs::write(&path, b"{\"version\": 7}").unwrap();
        assert!(matches!(
            AlertState::load(&path),
            Err(StateError::Version { found: 7, .. })
        ));
    }

    #[test]
    fn restart_neither_resends_nor_forgets_to_resolve() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let (mut engine, mut router, mut silences) = parts();
        silences
            .add(
                SilenceInput {
                    id: None,
                    matchers: vec![Matcher {
                        name: "alertname".into(),
                        value: "Other".into(),
                        is_regex: false,
                        is_equal: true,
                    }],
                    starts_at: t(0),
                    ends_at: t(7200),
                    created_by: "a".into(),
                    comment: "c".into(),
                },
                t(0),
            )
            .unwrap();
        let both = || vec![cand("APFRequestsRejected"), cand("APFQueueNearFull")];
        let alerts = engine.update(t(0), both());
        assert!(router.tick(t(0), &alerts, &silences).is_empty());
        let alerts = engine.update(t(30), both());
        assert_eq!(router.tick(t(30), &alerts, &silences).len(), 2);
        AlertState::capture(&engine, &router, &silences)
            .save(&path)
            .unwrap();
        assert!(!std::fs::read_dir(dir.path()).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains(".tmp")));

        // Restart 10 minutes later: one condition still holds, the other is gone.
        let (engine, router, _) = parts();
        let state = AlertState::load(&path).unwrap();
        let (mut engine, mut router, silences) = state.restore(engine, router);
        assert_eq!(silences.len(), 1);
        let alerts = engine.update(t(630), vec![cand("APFRequestsRejected")]);
        let n = router.tick(t(630), &alerts, &silences);
        assert_eq!(n.len(), 1, "only the resolution: {n:?}");
        assert_eq!(n[0].status(), "resolved");
        assert_eq!(n[0].alerts[0].alertname(), "APFQueueNearFull");
        assert_eq!(n[0].alerts[0].ends_at, Some(t(630)));
        assert_eq!(n[0].alerts[0].starts_at, t(0));
        // The firing one is not re-sent before repeat_interval (4h after t30).
        for m in 1..=40 {
            let now = t(630 + m * 300);
            let alerts = engine.update(now, vec![cand("APFRequestsRejected")]);
            assert!(
                router.tick(now, &alerts, &silences).is_empty(),
                "at +{m}×300s"
            );
        }
        let now = t(30 + 4 * 3600 + 300);
        let alerts = engine.update(now, vec![cand("APFRequestsRejected")]);
        assert_eq!(
            router.tick(now, &alerts, &silences).len(),
            1,
            "repeat after 4h"
        );
    }
}
