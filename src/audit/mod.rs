//! kube-apiserver's audit events, the source of "who got the 429s": `read.rs` reads log files and webhook
//! batches, `follow.rs` follows log files like `tail -F`, `settings.rs` is the `audit:` section. The requests go to
//! the analysis stage as [`AuditBatch`]es; classifying and counting them is the domain's ([`apf::audit`]).
pub mod follow;
pub mod read;
mod settings;

pub use settings::AuditConfig;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use apf::parse::audit::AuditedRequest;
use read::Tally;

/// Where `POST /api/v1/audit` puts what kube-apiserver's webhook backend sends (absent: `audit.webhook: false`).
#[derive(Clone)]
pub struct AuditIntake {
    pub tx: tokio::sync::mpsc::Sender<AuditBatch>,
    pub metrics: AuditMetrics,
}

/// Requests completed, from one read of a followed file or one webhook batch.
#[derive(Debug, Clone, Default)]
pub struct AuditBatch {
    /// The cluster they belong to (`audit.cluster`, the webhook's `?cluster=`); `None`: the only one.
    pub cluster: Option<String>,
    pub requests: Vec<AuditedRequest>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OutcomeLabels {
    /// `counted` (a request's last stage), `skipped` (an earlier stage), `malformed`.
    outcome: &'static str,
}

/// `apf_monitor_audit_events_total{outcome}`; cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct AuditMetrics {
    events: Family<OutcomeLabels, Counter>,
}

impl AuditMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "apf_monitor_audit_events",
            "Audit events read (files and webhook) by outcome: counted (a request's last stage), skipped (an earlier \
             stage), malformed",
            self.events.clone(),
        );
    }

    pub fn add(&self, tally: &Tally) {
        for (outcome, n) in [
            ("counted", tally.counted),
            ("skipped", tally.skipped),
            ("malformed", tally.malformed),
        ] {
            self.events
                .get_or_create(&OutcomeLabels { outcome })
                .inc_by(n);
        }
    }
}

/// What the logs of `config` hold of the requests that completed since `since` (every file its patterns match,
/// gzipped backups included), classified on `objects`: `check`'s one look at who got 429s. Problems (a file that
/// cannot be read, malformed lines) are returned, not fatal.
pub fn recent(
    config: &AuditConfig,
    objects: &apf::model::FlowcontrolObjects,
    since: std::time::SystemTime,
) -> (apf::audit::Ledger, Vec<String>) {
    let mut ledger = apf::audit::Ledger::new(apf::audit::Limits {
        max_users: config.max_users,
        keep_waits: false,
    });
    let mut problems = Vec::new();
    let mut tally = Tally::default();
    for path in follow::matching_files(&config.files, &mut problems) {
        let mut first_malformed = None;
        let result = read::read_file(
            &path,
            &mut tally,
            &mut |m| {
                first_malformed.get_or_insert(m);
            },
            &mut |r| {
                let recent = humantime::parse_rfc3339_weak(&r.timestamp).is_ok_and(|t| t >= since);
                if recent {
                    let _ = ledger.classify(&r, &objects.flow_schemas, &objects.priority_levels);
                }
            },
        );
        if let Err(e) = result {
            problems.push(format!("audit.files: cannot read {}: {e}", path.display()));
        }
        if let Some(m) = first_malformed {
            problems.push(format!(
                "audit.files: {}:{}: malformed lines skipped (first: {})",
                m.file, m.line, m.error
            ));
        }
    }
    (ledger, problems)
}
