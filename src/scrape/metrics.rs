//! apf-monitor's own health per replica and endpoint, declared once as typed metric families: how long each scrape
//! took, how it failed, when it last worked, what could not be read, and which dumps are available.
use std::time::SystemTime;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{Endpoint, EndpointResult, ErrorReason, ScrapeError};

impl EncodeLabelValue for Endpoint {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        EncodeLabelValue::encode(&self.label(), encoder)
    }
}

impl EncodeLabelValue for ErrorReason {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        EncodeLabelValue::encode(&self.label(), encoder)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct EndpointLabels {
    pub apiserver: String,
    pub endpoint: Endpoint,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ErrorLabels {
    pub apiserver: String,
    pub endpoint: Endpoint,
    pub reason: ErrorReason,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct SourceLabels {
    /// The Prometheus source's name.
    pub apiserver: String,
    /// `read`, or `stale` (left out: samples older than its max_sample_age).
    pub state: String,
}

type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

/// The families; cloning shares them (each is an `Arc` inside).
#[derive(Debug, Clone, Default)]
pub struct ScrapeMetrics {
    duration_seconds: Family<EndpointLabels, FloatGauge>,
    errors: Family<ErrorLabels, Counter>,
    last_success_timestamp_seconds: Family<EndpointLabels, FloatGauge>,
    parse_errors: Family<EndpointLabels, Counter>,
    endpoint_available: Family<EndpointLabels, Gauge>,
    source_replicas: Family<SourceLabels, Gauge>,
}

impl ScrapeMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "apf_monitor_scrape_duration_seconds",
            "How long the last scrape of the endpoint took: fetch, parse and derive",
            self.duration_seconds.clone(),
        );
        registry.register(
            "apf_monitor_scrape_errors",
            "Failed scrapes by replica, endpoint and reason",
            self.errors.clone(),
        );
        registry.register(
            "apf_monitor_last_scrape_success_timestamp_seconds",
            "Unix time of the endpoint's last successful scrape (the flowcontrol objects: of the last round while \
             their watch runs)",
            self.last_success_timestamp_seconds.clone(),
        );
        registry.register(
            "apf_monitor_parse_errors",
            "Lines of /metrics or rows of a dump that could not be read (counted, not dropped silently)",
            self.parse_errors.clone(),
        );
        registry.register(
            "apf_monitor_endpoint_available",
            "1 while the endpoint is read; 0 while it answers 403/404 (RBAC or an old version): the replica is \
             then read metrics-only",
            self.endpoint_available.clone(),
        );
        registry.register(
            "apf_monitor_source_replicas",
            "Replicas a Prometheus source held at its last successful round, by state: read, or stale (left out: \
             its newest samples older than max_sample_age)",
            self.source_replicas.clone(),
        );
    }

    fn source_labels(source: &str, state: &str) -> SourceLabels {
        SourceLabels {
            apiserver: source.to_string(),
            state: state.to_string(),
        }
    }

    /// What a Prometheus source's successful round held.
    pub fn record_source(&self, source: &str, read: usize, stale: usize) {
        for (state, n) in [("read", read), ("stale", stale)] {
            self.source_replicas
                .get_or_create(&Self::source_labels(source, state))
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    fn labels(apiserver: &str, endpoint: Endpoint) -> EndpointLabels {
        EndpointLabels {
            apiserver: apiserver.to_string(),
            endpoint,
        }
    }

    /// Every series of a replica exists from start-up (errors at 0, dumps available), so rules and dashboards
    /// see them before the first error.
    pub fn register_replica(&self, apiserver: &str, endpoints: &[Endpoint]) {
        for &endpoint in endpoints {
            for reason in ErrorReason::ALL {
                let _ = self.errors.get_or_create(&ErrorLabels {
                    apiserver: apiserver.to_string(),
                    endpoint,
                    reason,
                });
            }
            let _ = self
                .parse_errors
                .get_or_create(&Self::labels(apiserver, endpoint));
            if !matches!(endpoint, Endpoint::Metrics | Endpoint::Prometheus) {
                self.endpoint_available
                    .get_or_create(&Self::labels(apiserver, endpoint))
                    .set(1);
            }
            if endpoint == Endpoint::Prometheus {
                self.record_source(apiserver, 0, 0);
            }
        }
    }

    /// One round's results; `unavailable` are the endpoints answering 403/404 (read metrics-only).
    pub fn record(
        &self,
        apiserver: &str,
        results: &[EndpointResult],
        unavailable: &[Endpoint],
        now: SystemTime,
    ) {
        let unix = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        for r in results {
            let labels = Self::labels(apiserver, r.endpoint);
            self.duration_seconds
                .get_or_create(&labels)
                .set(r.duration.as_secs_f64());
            self.parse_errors.get_or_create(&labels).inc_by(r.invalid);
            match &r.outcome {
                Ok(()) => {
                    self.last_success_timestamp_seconds
                        .get_or_create(&labels)
                        .set(unix);
                }
                Err(e) => {
                    self.errors
                        .get_or_create(&ErrorLabels {
                            apiserver: apiserver.to_string(),
                            endpoint: r.endpoint,
                            reason: e.reason(),
                        })
                        .inc();
                }
            }
            if !matches!(r.endpoint, Endpoint::Metrics | Endpoint::Prometheus) {
                self.endpoint_available
                    .get_or_create(&labels)
                    .set(i64::from(!unavailable.contains(&r.endpoint)));
            }
        }
    }

    /// The endpoint's data is current as of `now` without a request of the round: the flowcontrol objects, while
    /// their watch runs.
    pub fn record_current(&self, apiserver: &str, endpoint: Endpoint, now: SystemTime) {
        let unix = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        self.last_success_timestamp_seconds
            .get_or_create(&Self::labels(apiserver, endpoint))
            .set(unix);
    }

    /// A read outside the rounds failed: the watch of the flowcontrol objects.
    pub fn record_error(&self, apiserver: &str, endpoint: Endpoint, error: &ScrapeError) {
        self.errors
            .get_or_create(&ErrorLabels {
                apiserver: apiserver.to_string(),
                endpoint,
                reason: error.reason(),
            })
            .inc();
    }

    /// Drops every series of a replica that is gone (no longer a target).
    pub fn forget_replica(&self, apiserver: &str) {
        for endpoint in Endpoint::ALL {
            let labels = Self::labels(apiserver, endpoint);
            self.duration_seconds.remove(&labels);
            self.last_success_timestamp_seconds.remove(&labels);
            self.parse_errors.remove(&labels);
            self.endpoint_available.remove(&labels);
            for reason in ErrorReason::ALL {
                self.errors.remove(&ErrorLabels {
                    apiserver: apiserver.to_string(),
                    endpoint,
                    reason,
                });
            }
        }
        for state in ["read", "stale"] {
            self.source_replicas
                .remove(&Self::source_labels(apiserver, state));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(m: &ScrapeMetrics) -> String {
        let mut registry = Registry::default();
        m.register(&mut registry);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        out
    }

    #[test]
    fn counters_exist_at_zero_and_a_forgotten_replica_leaves_nothing() {
        let m = ScrapeMetrics::default();
        m.register_replica("a", &[Endpoint::Metrics, Endpoint::DumpQueues]);
        m.register_replica("b", &[Endpoint::Metrics]);
        m.record(
            "a",
            &[EndpointResult {
                endpoint: Endpoint::DumpQueues,
                duration: std::time::Duration::from_millis(20),
                outcome: Err(super::super::ScrapeError::Http {
                    status: 403,
                    detail: String::new(),
                }),
                invalid: 0,
            }],
            &[Endpoint::DumpQueues],
            SystemTime::now(),
        );
        let text = render(&m);
        assert!(text.contains(
            "apf_monitor_scrape_errors_total{apiserver=\"a\",endpoint=\"dump_queues\",reason=\"http_4xx\"} 1"
        ), "{text}");
        assert!(text.contains(
            "apf_monitor_scrape_errors_total{apiserver=\"b\",endpoint=\"metrics\",reason=\"connect\"} 0"
        ), "{text}");
        assert!(
            text.contains(
                "apf_monitor_endpoint_available{apiserver=\"a\",endpoint=\"dump_queues\"} 0"
            ),
            "{text}"
        );
        m.forget_replica("a");
        let text = render(&m);
        assert!(!text.contains("apiserver=\"a\""), "{text}");
        assert!(text.contains("apiserver=\"b\""), "{text}");
    }

    #[test]
    fn a_source_counts_what_it_held_from_start_up_and_leaves_nothing_when_removed() {
        let m = ScrapeMetrics::default();
        m.register_replica("fleet", &[Endpoint::Prometheus]);
        let text = render(&m);
        assert!(
            text.contains("apf_monitor_source_replicas{apiserver=\"fleet\",state=\"read\"} 0"),
            "{text}"
        );
        m.record_source("fleet", 300, 2);
        let text = render(&m);
        assert!(
            text.contains("apf_monitor_source_replicas{apiserver=\"fleet\",state=\"read\"} 300")
                && text
                    .contains("apf_monitor_source_replicas{apiserver=\"fleet\",state=\"stale\"} 2"),
            "{text}"
        );
        assert!(!text.contains("apf_monitor_endpoint_available"), "{text}");
        m.forget_replica("fleet");
        assert!(!render(&m).contains("fleet"));
    }
}
