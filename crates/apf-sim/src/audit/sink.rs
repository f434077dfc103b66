//! Where a simulated cluster's audit events go, as kube-apiserver's two backends send them: a log file
//! (`--audit-log-path`, `--audit-log-format=json`, rotated by size into `NAME-2006-01-02T15-04-05.000.EXT` as
//! lumberjack does, optionally gzipped) and a webhook (`--audit-webhook-config-file`: `EventList` batches of at most
//! `--audit-webhook-batch-max-size` events, sent every `--audit-webhook-batch-max-wait`). One task per cluster
//! drains every replica's events; a receiver that is down or slow never slows the simulation: batches wait in a
//! bounded queue and the oldest go first, counted.
use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use crate::simulator::Simulator;

/// The log backend's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditLogOptions {
    pub path: PathBuf,
    /// `--audit-log-maxsize`: rotate past this many MiB; 0 never rotates.
    pub max_size_mb: u64,
    /// `--audit-log-maxbackup`: rotated files kept; 0 keeps every one.
    pub max_backups: usize,
    /// `--audit-log-compress`: gzip the rotated files.
    pub compress: bool,
}

/// The webhook backend's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditWebhookOptions {
    pub url: String,
    /// Sent as `Authorization: Bearer`, as kube-apiserver presents its webhook kubeconfig's token.
    pub token: Option<String>,
    /// `--audit-webhook-batch-max-wait` (kube-apiserver's default 30 s).
    pub batch_max_wait: Duration,
    /// `--audit-webhook-batch-max-size` (400).
    pub batch_max_size: usize,
}

impl AuditWebhookOptions {
    /// kube-apiserver's batch size, and a wait of 1 s (its default, 30 s, is long for a demo).
    pub fn new(url: impl Into<String>) -> Self {
        AuditWebhookOptions {
            url: url.into(),
            token: None,
            batch_max_wait: Duration::from_secs(1),
            batch_max_size: 400,
        }
    }
}

/// Audit events of a simulated cluster: to a log file, to a webhook, or both.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditOptions {
    pub log: Option<AuditLogOptions>,
    pub webhook: Option<AuditWebhookOptions>,
}

/// Batches waiting for a webhook that does not take them; beyond, the oldest are dropped.
const MAX_QUEUED_BATCHES: usize = 64;
/// Attempts per batch and round before it waits for the next round.
const ATTEMPTS: u32 = 3;

/// The simulators whose events the task drains; the cluster holds the only strong reference.
pub(crate) type Feed = Arc<Mutex<Vec<Simulator>>>;

/// An audit log with lumberjack's rotation.
struct LogFile {
    opts: AuditLogOptions,
    file: File,
    size: u64,
}

fn open_append(path: &Path) -> std::io::Result<(File, u64)> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let size = file.metadata()?.len();
    Ok((file, size))
}

/// `audit.log` rotated at `t`: `audit-2026-11-24T10-00-00.000.log` (lumberjack's `backupName`, in UTC).
pub(crate) fn backup_name(path: &Path, t: SystemTime) -> PathBuf {
    let stamp = humantime::format_rfc3339_millis(t)
        .to_string()
        .trim_end_matches('Z')
        .replace(':', "-");
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "audit".into());
    let name = match path.extension() {
        Some(ext) => format!("{stem}-{stamp}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{stamp}"),
    };
    path.with_file_name(name)
}

impl LogFile {
    fn open(opts: AuditLogOptions) -> std::io::Result<Self> {
        let (file, size) = open_append(&opts.path)?;
        Ok(LogFile { opts, file, size })
    }

    fn write_lines(&mut self, lines: &[String]) -> std::io::Result<()> {
        let max = self.opts.max_size_mb.saturating_mul(1 << 20);
        let mut buf = Vec::new();
        for line in lines {
            let len = line.len() as u64 + 1;
            if max > 0
                && self.size + buf.len() as u64 + len > max
                && self.size + buf.len() as u64 > 0
            {
                self.file.write_all(&buf)?;
                buf.clear();
                self.rotate()?;
            }
            buf.extend_from_slice(line.as_bytes());
            buf.push(b'\n');
        }
        self.file.write_all(&buf)?;
        self.size += buf.len() as u64;
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        self.file.flush()?;
        let backup = backup_name(&self.opts.path, SystemTime::now());
        std::fs::rename(&self.opts.path, &backup)?;
        let (file, size) = open_append(&self.opts.path)?;
        self.file = file;
        self.size = size;
        if self.opts.compress {
            let mut gz_path = backup.clone().into_os_string();
            gz_path.push(".gz");
            let mut gz = flate2::write::GzEncoder::new(
                File::create(&gz_path)?,
                flate2::Compression::default(),
            );
            std::io::copy(&mut File::open(&backup)?, &mut gz)?;
            gz.finish()?;
            std::fs::remove_file(&backup)?;
        }
        self.prune()
    }

    /// Keeps the newest `max_backups` rotated files (their names sort by time).
    fn prune(&self) -> std::io::Result<()> {
        if self.opts.max_backups == 0 {
            return Ok(());
        }
        let Some(dir) = self.opts.path.parent() else {
            return Ok(());
        };
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        let stem = self
            .opts
            .path
            .file_stem()
            .map(|s| format!("{}-", s.to_string_lossy()))
            .unwrap_or_default();
        let mut backups: Vec<PathBuf> = std::fs::read_dir(dir)?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p != &self.opts.path
                    && p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(&stem))
            })
            .collect();
        backups.sort();
        let excess = backups.len().saturating_sub(self.opts.max_backups);
        for old in &backups[..excess] {
            std::fs::remove_file(old)?;
        }
        Ok(())
    }
}

/// The webhook's client and the batches it owes.
struct Webhook {
    opts: AuditWebhookOptions,
    client: reqwest::Client,
    queued: VecDeque<String>,
    dropped: u64,
}

impl Webhook {
    fn queue(&mut self, lines: &[String]) {
        for chunk in lines.chunks(self.opts.batch_max_size.max(1)) {
            self.queued.push_back(format!(
                r#"{{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{{}},"items":[{}]}}"#,
                chunk.join(",")
            ));
        }
        while self.queued.len() > MAX_QUEUED_BATCHES {
            self.queued.pop_front();
            self.dropped += 1;
            tracing::warn!(
                url = %self.opts.url,
                dropped = self.dropped,
                "audit webhook: a batch was dropped, the receiver is behind"
            );
        }
    }

    async fn post(&self, body: &str) -> Result<(), String> {
        let mut request = self
            .client
            .post(&self.opts.url)
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(t) = &self.opts.token {
            request = request.bearer_auth(t);
        }
        let response = request.send().await.map_err(|e| e.to_string())?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(format!("HTTP {}", response.status()))
        }
    }

    /// Sends what is queued, in order; a batch that fails its attempts waits for the next round.
    async fn flush(&mut self) {
        while let Some(body) = self.queued.front() {
            let mut backoff = Duration::from_millis(100);
            let mut result = Err(String::new());
            for attempt in 1..=ATTEMPTS {
                result = self.post(body).await;
                if result.is_ok() || attempt == ATTEMPTS {
                    break;
                }
                tokio::time::sleep(backoff).await;
                backoff *= 2;
            }
            match result {
                Ok(()) => {
                    self.queued.pop_front();
                }
                Err(e) => {
                    tracing::warn!(url = %self.opts.url, error = %e, queued = self.queued.len(), "audit webhook: the batch waits for the next round");
                    return;
                }
            }
        }
    }
}

/// The events every simulator of `feed` noted since the last call, as JSON lines.
pub(crate) fn drain(feed: &Feed) -> Vec<String> {
    let sims = feed.lock().unwrap_or_else(|e| e.into_inner()).clone();
    sims.iter()
        .flat_map(Simulator::drain_audit_events)
        .collect()
}

/// Drains the cluster's events into the log and the webhook until the cluster is gone (its feed dropped), then
/// writes what is left.
pub(crate) fn spawn(
    opts: AuditOptions,
    feed: Weak<Mutex<Vec<Simulator>>>,
) -> Result<(), std::io::Error> {
    let mut log = opts.log.map(LogFile::open).transpose()?;
    let mut webhook = opts.webhook.map(|o| Webhook {
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap_or_default(),
        opts: o,
        queued: VecDeque::new(),
        dropped: 0,
    });
    let period = webhook
        .as_ref()
        .map_or(Duration::from_secs(1), |w| w.opts.batch_max_wait)
        .clamp(Duration::from_millis(10), Duration::from_secs(1));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(feed) = feed.upgrade() else { break };
            let lines = drain(&feed);
            drop(feed);
            if lines.is_empty() {
                continue;
            }
            if let Some(l) = &mut log {
                if let Err(e) = l.write_lines(&lines) {
                    tracing::warn!(path = %l.opts.path.display(), error = %e, "audit log: cannot write");
                }
            }
            if let Some(w) = &mut webhook {
                w.queue(&lines);
                w.flush().await;
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_names_compresses_and_prunes_like_lumberjack() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let t = humantime::parse_rfc3339("2026-11-24T10:00:00.123Z").unwrap();
        assert_eq!(
            backup_name(&path, t).file_name().unwrap(),
            "audit-2026-11-24T10-00-00.123.log"
        );
        let mut log = LogFile::open(AuditLogOptions {
            path: path.clone(),
            max_size_mb: 1,
            max_backups: 2,
            compress: true,
        })
        .unwrap();
        let line = "x".repeat(100 * 1024);
        for _ in 0..5 {
            log.write_lines(&vec![line.clone(); 6]).unwrap();
            // Backups are named to the millisecond.
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names.len(), 3, "{names:?}");
        assert!(
            names[..2].iter().all(|n| n.ends_with(".log.gz")),
            "{names:?}"
        );
        assert_eq!(names[2], "audit.log");
        assert!(std::fs::metadata(&path).unwrap().len() <= 1 << 20);
    }
}
