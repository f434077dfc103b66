//! The `audit:` section of the config file: which audit logs to follow, which cluster they belong to, whether the
//! webhook is taken, and how many distinct users are kept.
use std::path::PathBuf;

use serde::Deserialize;

/// `audit:`.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    /// Audit logs to follow like `tail -F` (read from their end at start, then across rotation): paths, or
    /// patterns with `*` and `?` in the file name. Gzipped files are finished backups and are not followed.
    pub files: Vec<PathBuf>,
    /// `POST /api/v1/audit` takes kube-apiserver's webhook batches (guarded by `web.auth` like every write).
    pub webhook: bool,
    /// The cluster the followed files' events belong to, when the targets span several (a Prometheus labelling
    /// clusters); the webhook takes `?cluster=NAME`.
    pub cluster: Option<String>,
    /// Distinct users (and flows) kept per slice of the analysis window; beyond, users are counted together as
    /// `(other users)` and the overflow is counted.
    pub max_users: usize,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            files: Vec::new(),
            webhook: true,
            cluster: None,
            max_users: 1000,
        }
    }
}

impl AuditConfig {
    pub fn validate(&self, at: &dyn Fn(&str) -> String) -> Result<(), String> {
        if self.max_users == 0 {
            return Err(format!(
                "audit.max_users must be at least 1{}",
                at("max_users")
            ));
        }
        for f in &self.files {
            let dir_has_pattern = f
                .parent()
                .is_some_and(|d| d.to_string_lossy().contains(['*', '?']));
            if dir_has_pattern {
                return Err(format!(
                    "audit.files: {}: a pattern may use * and ? in the file name only{}",
                    f.display(),
                    at("files")
                ));
            }
            if f.file_name().is_none() {
                return Err(format!(
                    "audit.files: {}: name a file (e.g. /var/log/kubernetes/audit/audit.log){}",
                    f.display(),
                    at("files")
                ));
            }
        }
        Ok(())
    }
}
