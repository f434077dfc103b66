//! What went wrong with a replica, kept typed from the stage that saw it to the one that shows it: the rules match
//! on the variant, the report and the status page render it.
use std::fmt;

use crate::scrape::{Endpoint, ScrapeError};

#[derive(Debug, Clone, PartialEq)]
pub enum Problem {
    /// An endpoint failed this round.
    Scrape {
        endpoint: Endpoint,
        error: ScrapeError,
    },
    /// `/metrics` answered without any APF metric.
    NoApfMetrics,
    /// A Prometheus source answered, but holds no APF series matching its selector with an apiserver label.
    NoReplicas,
    /// No successful `/metrics` scrape for longer than the window: the values are withheld.
    Stale { window_seconds: f64 },
    /// Lines of a saved `/metrics` that could not be read (`check --file`).
    Unreadable { lines: u64, first: Option<String> },
    /// Series that appeared more than once in a saved `/metrics`: each counted once, with its last value.
    DuplicateSeries { series: u64 },
}

impl Problem {
    /// The endpoint the problem is about; `/metrics` for everything that leaves the replica without numbers.
    pub fn endpoint(&self) -> Endpoint {
        match self {
            Problem::Scrape { endpoint, .. } => *endpoint,
            Problem::NoReplicas => Endpoint::Prometheus,
            _ => Endpoint::Metrics,
        }
    }

    /// True when the replica has no current numbers: `/metrics` (or the Prometheus holding it) failing, stale or
    /// without APF.
    pub fn blinds_metrics(&self) -> bool {
        match self {
            Problem::Scrape { endpoint, .. } => {
                matches!(endpoint, Endpoint::Metrics | Endpoint::Prometheus)
            }
            Problem::NoApfMetrics | Problem::NoReplicas | Problem::Stale { .. } => true,
            Problem::Unreadable { .. } | Problem::DuplicateSeries { .. } => false,
        }
    }

    /// A 403 of the apiserver: RBAC does not allow the endpoint.
    pub fn is_forbidden(&self) -> bool {
        match self {
            Problem::Scrape {
                endpoint,
                error: ScrapeError::Http { status: 403, .. },
            } => *endpoint != Endpoint::Prometheus,
            _ => false,
        }
    }

    /// What happened and what to do, without the endpoint's name in front.
    pub fn detail(&self) -> String {
        match self {
            Problem::Scrape {
                endpoint: Endpoint::Prometheus,
                error,
            } => match error {
                ScrapeError::Http {
                    status: 401 | 403, ..
                } => format!(
                    "{error}: the Prometheus API refused the credentials; check bearer_token_file and headers"
                ),
                ScrapeError::Http { status: 404, .. } => format!(
                    "{error}: no query API at this URL; give the API's base URL (the part before /api/v1)"
                ),
                ScrapeError::Timeout(d) => format!(
                    "no response within {d:?}: the Prometheus is slow or unreachable; raise the source's timeout \
                     (at most scrape.interval), narrow its selector, or check the network"
                ),
                _ => error.to_string(),
            },
            Problem::Scrape { endpoint, error } => match error {
                ScrapeError::Http { status: 401, .. } => format!(
                    "{error}: the credentials were refused; check bearer_token_file or the client certificate"
                ),
                ScrapeError::Http { status: 403, .. } => format!(
                    "{error}: RBAC does not allow it; grant a ClusterRole rule {}",
                    endpoint.rbac_hint()
                ),
                ScrapeError::Http { status: 404, .. } if endpoint.is_dump() => format!(
                    "{error}: the replica does not serve this dump (APF off, or a proxy in the way)"
                ),
                _ => error.to_string(),
            },
            Problem::NoApfMetrics => "no apiserver_flowcontrol_* metric: APF is off on this replica, or the \
                                      target is not a kube-apiserver"
                .into(),
            Problem::NoReplicas => "prometheus: no apiserver_flowcontrol_* series match the selector with the \
                                    apiserver label: check targets.prometheus selector and apiserver_label (or \
                                    --selector, --apiserver-label) against the series it stores"
                .into(),
            Problem::Stale { window_seconds } => format!(
                "no successful /metrics scrape for over {window_seconds:.0}s: values withheld until the replica \
                 answers again"
            ),
            Problem::Unreadable { lines, first } => format!(
                "{lines} line(s) could not be read and were skipped{}",
                first.as_deref().map(|e| format!(" (first: {e})")).unwrap_or_default()
            ),
            Problem::DuplicateSeries { series } => format!(
                "{series} series appeared more than once: each was counted once, with its last value"
            ),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Scrape { endpoint, .. } => {
                write!(f, "{}: {}", endpoint.label(), self.detail())
            }
            Problem::NoApfMetrics => write!(f, "metrics: {}", self.detail()),
            _ => f.write_str(&self.detail()),
        }
    }
}

/// In `/api/v1/status` and `check --output json`, a problem is the sentence a person reads.
impl serde::Serialize for Problem {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
