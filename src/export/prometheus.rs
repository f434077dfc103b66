//! The derived metrics (the public contract docs/reference/metrics.md documents), encoded at each scrape of `/metrics` from the latest
//! report and alert view: a collector of the metric registry, beside the self-metric families the stages keep.
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::MetricType;
use tokio::sync::watch;

use crate::alert::{default_busy_utilizations, AlertView};
use crate::analyze::{ApiserverReport, LevelReport, StatusReport};
use apf::model::EXEMPT;

/// Reads the latest report and alert view when `/metrics` is scraped.
#[derive(Debug)]
pub struct DerivedMetrics {
    report: watch::Receiver<Arc<StatusReport>>,
    alerts: watch::Receiver<Arc<AlertView>>,
}

impl DerivedMetrics {
    pub fn new(
        report: watch::Receiver<Arc<StatusReport>>,
        alerts: watch::Receiver<Arc<AlertView>>,
    ) -> Self {
        Self { report, alerts }
    }
}

type Result = std::result::Result<(), std::fmt::Error>;

/// One gauge family: `samples` yields each label set and value.
fn gauge<'a, L: EncodeLabelSet + 'a>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, f64)>,
) -> Result {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in samples {
        family.encode_family(&labels)?.encode_gauge(&value)?;
    }
    Ok(())
}

/// A gauge of one series without labels.
fn scalar(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: f64) -> Result {
    encoder
        .encode_descriptor(name, help, None, MetricType::Gauge)?
        .encode_gauge(&value)
}

/// A replica's labels: `cluster` (when it has one) and `apiserver`, then `rest`.
fn replica_labels<'a>(
    a: &'a ApiserverReport,
    rest: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str)> {
    a.cluster
        .as_deref()
        .map(|c| ("cluster", c))
        .into_iter()
        .chain([("apiserver", a.apiserver.as_str())])
        .chain(rest.iter().copied())
        .collect()
}

/// A gauge over every level of every replica; `value` picks the number (absent: no series).
fn level_gauge(
    encoder: &mut DescriptorEncoder,
    report: &StatusReport,
    name: &str,
    help: &str,
    include_exempt: bool,
    value: impl Fn(&LevelReport) -> Option<f64>,
) -> Result {
    let samples = report.apiservers.iter().flat_map(|a| {
        a.levels
            .iter()
            .filter(|l| include_exempt || l.priority_level != EXEMPT)
            .filter_map(|l| {
                let labels = replica_labels(a, &[("priority_level", l.priority_level.as_str())]);
                Some((labels, value(l)?))
            })
            .collect::<Vec<_>>()
    });
    gauge(encoder, name, help, samples)
}

/// The per-level gauges: name, help, whether the exempt level has one, and the number from the level's report.
type LevelGauge = (
    &'static str,
    &'static str,
    bool,
    fn(&LevelReport) -> Option<f64>,
);

const LEVEL_GAUGES: [LevelGauge; 19] = [
    (
        "apf_priority_level_limit_seats",
        "The enforced concurrency limit in seats (current_limit_seats on 1.26+, else request_concurrency_limit).",
        false,
        |l| l.limit_seats,
    ),
    (
        "apf_priority_level_nominal_limit_seats",
        "The nominal concurrency limit in seats (nominal_limit_seats, else request_concurrency_limit).",
        false,
        |l| l.nominal_limit_seats,
    ),
    (
        "apf_priority_level_upper_limit_seats",
        "The most seats the level can borrow up to (1.26+).",
        false,
        |l| l.upper_limit_seats,
    ),
    (
        "apf_priority_level_executing_seats",
        "Seats in use by executing requests, summed over flow schemas.",
        true,
        |l| l.executing_seats,
    ),
    (
        "apf_priority_level_headroom_seats",
        "Enforced limit minus seats in use: seats left before requests queue.",
        false,
        |l| l.headroom_seats,
    ),
    (
        "apf_priority_level_headroom_ratio",
        "Headroom divided by the enforced limit.",
        false,
        |l| l.headroom_ratio,
    ),
    (
        "apf_priority_level_inqueue_requests",
        "Requests waiting in the level's queues, summed over flow schemas.",
        false,
        |l| l.inqueue_requests,
    ),
    (
        "apf_priority_level_queue_capacity_requests",
        "queues x queueLengthLimit from the PriorityLevelConfiguration.",
        false,
        |l| l.queue_capacity_requests,
    ),
    (
        "apf_priority_level_queue_length_limit",
        "queueLengthLimit from the PriorityLevelConfiguration: a queue holding this many requests refuses the next \
         with queue-full.",
        false,
        |l| l.queue_length_limit,
    ),
    (
        "apf_priority_level_fullest_queue_requests",
        "The most requests waiting in any one queue (dump_queues); at queueLengthLimit the next get queue-full.",
        false,
        |l| l.fullest_queue_requests,
    ),
    (
        "apf_priority_level_wait_p99_seconds",
        "99th percentile of the queue wait over the analysis window.",
        false,
        |l| l.wait_p99_seconds,
    ),
    (
        "apf_priority_level_seat_utilization_p99",
        "Seats in use / enforced limit, 99th percentile of the window's time, from the apiserver's own \
         time-integrated priority_level_seat_utilization histogram (1.25+): saturation between two scrapes shows.",
        false,
        |l| l.seat_utilization_p99,
    ),
    (
        "apf_priority_level_demand_seats_max",
        "The most seats demanded (executing + waiting) over the window, from demand_seats_high_watermark (1.26+).",
        false,
        |l| l.demand_seats_max,
    ),
    (
        "apf_priority_level_no_accommodation_per_second",
        "Dispatch attempts that found no free seat, per second over the window (request_dispatch_no_accommodation, \
         1.24+): the earliest sign of saturation, before any queue shows.",
        false,
        |l| l.no_accommodation_per_second,
    ),
    (
        "apf_priority_level_seconds_to_exhaustion",
        "Seconds until seats in use reach the limit at their present rise (the line of the window's latest \
         stretch); absent while they are not rising, or not yet known to within a scrape interval.",
        false,
        |l| l.seconds_to_exhaustion,
    ),
    (
        "apf_priority_level_saturated_ratio",
        "The share of the lookback (analysis.lookback, or less since the replica was first read) the level was full: \
         95 % of its limit in use or more, by the seat-utilization histogram (1.25+) or at scrapes; absent when it \
         was never full in it.",
        false,
        |l| l.saturation.as_ref().map(|s| s.full_ratio),
    ),
    (
        "apf_priority_level_saturation_episodes",
        "Episodes in the lookback in which the level was full (full intervals between scrapes in a row, a second full \
         or more).",
        false,
        |l| l.saturation.as_ref().map(|s| s.episodes as f64),
    ),
    (
        "apf_priority_level_seconds_since_saturation",
        "Seconds since the level's last episode of saturation ended.",
        false,
        |l| l.saturation.as_ref().and_then(|s| s.seconds_since),
    ),
    (
        "apf_priority_level_saturation_gap_seconds",
        "The longest quiet between two episodes of saturation in the lookback: saturation recurs while the time since \
         the last one is at most half again this.",
        false,
        |l| l.saturation.as_ref().and_then(|s| s.longest_gap_seconds),
    ),
];

impl Collector for DerivedMetrics {
    fn encode(&self, mut e: DescriptorEncoder) -> Result {
        let report = Arc::clone(&self.report.borrow());
        let alerts = Arc::clone(&self.alerts.borrow());
        let r = &report;
        for (name, help, include_exempt, value) in LEVEL_GAUGES {
            level_gauge(&mut e, r, name, help, include_exempt, value)?;
        }

        let rejections = r.apiservers.iter().flat_map(|a| {
            a.levels
                .iter()
                .filter(|l| l.priority_level != EXEMPT)
                .flat_map(|l| {
                    l.rejected_per_second.iter().flatten().map(|(reason, v)| {
                        let labels = replica_labels(
                            a,
                            &[
                                ("priority_level", l.priority_level.as_str()),
                                ("reason", reason.as_str()),
                            ],
                        );
                        (labels, *v)
                    })
                })
                .collect::<Vec<_>>()
        });
        gauge(
            &mut e,
            "apf_priority_level_rejected_per_second",
            "APF rejections (HTTP 429) per second over the analysis window, by reason.",
            rejections,
        )?;
        // 0.75, 0.8, 0.95: as a person writes them in a query.
        let utilizations: Vec<(String, f64)> = default_busy_utilizations()
            .into_iter()
            .map(|u| (format!("{}", (u * 100.0).round() / 100.0), u))
            .collect();
        let busy = |share: fn(&LevelReport, f64) -> Option<f64>| {
            r.apiservers
                .iter()
                .flat_map(|a| {
                    a.levels
                        .iter()
                        .filter(|l| l.priority_level != EXEMPT)
                        .flat_map(|l| {
                            utilizations.iter().filter_map(|(label, utilization)| {
                                let labels = replica_labels(
                                    a,
                                    &[
                                        ("priority_level", l.priority_level.as_str()),
                                        ("utilization", label.as_str()),
                                    ],
                                );
                                Some((labels, share(l, *utilization)?))
                            })
                        })
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>()
        };
        gauge(
            &mut e,
            "apf_priority_level_time_above_ratio",
            "The share of the analysis window the level spent with more than `utilization` of its enforced limit in \
             use, from the apiserver's time-integrated seat-utilization histogram (1.25+): pressure that lasts, \
             where the 99th percentile also shows a blip.",
            busy(LevelReport::time_above),
        )?;
        gauge(
            &mut e,
            "apf_priority_level_recent_time_above_ratio",
            "The same share over the recent part of the window (its last quarter, two scrapes at least): 0 once a \
             level has recovered, while the whole window still holds the pressure from before. The rules that read \
             the window's share hold only while this one is past window_share too.",
            busy(LevelReport::time_above_recently),
        )?;
        let by_schema = r.apiservers.iter().flat_map(|a| {
            a.flow_schema_rejected_per_second
                .iter()
                .map(|(pl, fs, reason, v)| {
                    let labels = replica_labels(
                        a,
                        &[
                            ("priority_level", pl.as_str()),
                            ("flow_schema", fs.as_str()),
                            ("reason", reason.as_str()),
                        ],
                    );
                    (labels, *v)
                })
        });
        gauge(
            &mut e,
            "apf_flow_schema_rejected_per_second",
            "APF rejections per second over the analysis window, by flow schema and reason.",
            by_schema,
        )?;
        for (name, help, waiting) in [
            ("apf_flow_waiting_requests", "Mean requests of the flow waiting in queues over the window (dump_requests); top flows only.", true),
            ("apf_flow_executing_seats", "Mean seats held by the flow's executing requests over the window (dump_requests, 1.28+); top flows only.", false),
        ] {
            let flows = r.apiservers.iter().flat_map(|a| {
                a.levels.iter().flat_map(move |l| {
                    l.top_flows.iter().map(move |f| {
                        let labels = replica_labels(
                            a,
                            &[
                                ("priority_level", l.priority_level.as_str()),
                                ("flow_schema", f.flow_schema.as_str()),
                                ("flow", f.flow.as_str()),
                            ],
                        );
                        (labels, if waiting { f.waiting_requests } else { f.executing_seats })
                    })
                })
            });
            gauge(&mut e, name, help, flows)?;
        }

        // Rate advice: what each top flow's share sustains on its replica, and what the flow sends.
        type AdviceValue = fn(&crate::analyze::ClientAdvice) -> Option<f64>;
        let advice_gauges: [(&str, &str, AdviceValue); 3] = [
            ("apf_flow_sustainable_requests_per_second", "Requests per second the flow's fair share of its priority level sustains on the replica: share seats / (seats per request x seconds per request) (docs/guides/rate-advice.md); top flows only.", |a| a.sustainable_requests_per_second),
            ("apf_flow_observed_requests_per_second", "Requests per second the flow sends to the replica over the window: its flow schema's dispatched and rejected requests when it is alone there, else what it is served (Little's law) plus its share of the schema's rejections; top flows only.", |a| a.observed_requests_per_second),
            ("apf_flow_recommended_qps", "The client-side QPS advised for the flow's client: 0.8 of the sustainable rate, rounded down; top flows only.", |a| a.recommended_qps),
        ];
        for (name, help, value) in advice_gauges {
            let flows = r.apiservers.iter().flat_map(|a| {
                a.levels.iter().flat_map(move |l| {
                    l.top_flows.iter().filter_map(move |f| {
                        let v = value(f.advice.as_ref()?)?;
                        let labels = replica_labels(
                            a,
                            &[
                                ("priority_level", l.priority_level.as_str()),
                                ("flow_schema", f.flow_schema.as_str()),
                                ("flow", f.flow.as_str()),
                            ],
                        );
                        Some((labels, v))
                    })
                })
            });
            gauge(&mut e, name, help, flows)?;
        }

        // Who got the 429s (audit events): the top users of each level, over the window.
        for (name, help, rejected) in [
            ("apf_user_rejected_per_second", "Requests of the user answered 429 per second over the analysis window, from kube-apiserver's audit events; the top analysis.top_flows users of each level.", true),
            ("apf_user_requests_per_second", "Requests of the user per second over the analysis window, from kube-apiserver's audit events; the top analysis.top_flows users of each level.", false),
        ] {
            let users = r.audit.iter().flat_map(|c| {
                c.levels.iter().flat_map(move |l| {
                    l.users.iter().map(move |u| {
                        let labels: Vec<(&str, &str)> = c
                            .cluster
                            .as_deref()
                            .map(|c| ("cluster", c))
                            .into_iter()
                            .chain([
                                ("user", u.user.as_str()),
                                ("flow_schema", u.flow_schema.as_str()),
                                ("priority_level", l.priority_level.as_str()),
                            ])
                            .collect();
                        (labels, if rejected { u.rejected_per_second } else { u.requests_per_second })
                    })
                })
            });
            gauge(&mut e, name, help, users)?;
        }

        // The configuration review: a series per check (0 when it finds nothing) once the objects were read.
        if let Some(findings) = &r.config_findings {
            let counts = apf::review::CHECKS.iter().map(|(check, severity)| {
                let n = findings
                    .iter()
                    .filter(|f| f.check == *check && f.severity == *severity)
                    .count();
                (
                    [("check", *check), ("severity", severity.label())],
                    n as f64,
                )
            });
            gauge(
                &mut e,
                "apf_config_findings",
                "Findings of the configuration review (check --review) on the objects the replicas serve, by check \
                 and severity.",
                counts,
            )?;
        }

        let firing = alerts
            .alerts
            .iter()
            .filter(|a| a.state == "firing")
            .map(|a| {
                let labels: Vec<(&str, &str)> = [
                    "alertname",
                    "severity",
                    "cluster",
                    "apiserver",
                    "priority_level",
                    "reason",
                ]
                .into_iter()
                .filter_map(|k| Some((k, a.labels.get(k)?.as_str())))
                .collect();
                (labels, 1.0)
            });
        gauge(
            &mut e,
            "apf_alert_firing",
            "1 per firing alert of apf-monitor's built-in rules.",
            firing,
        )?;

        if let Some(n) = &alerts.notifier {
            scalar(
                &mut e,
                "apf_monitor_leader",
                "1 on the replica of apf-monitor that sends the direct notifications (Slack, email, webhook): the \
                 holder of the Lease, or the only replica without leader election; 0 on a replica that stands by.",
                if n.leading { 1.0 } else { 0.0 },
            )?;
            scalar(
                &mut e,
                "apf_monitor_notification_log_entries",
                "Entries (one per alert group and receiver) of the notification log kept in the Lease, as this \
                 replica last wrote or read it; 0 without leader election.",
                n.log_entries as f64,
            )?;
            scalar(
                &mut e,
                "apf_monitor_notification_log_bytes",
                "The size of the notification log in the Lease's annotation, as this replica last wrote or read it.",
                n.log_bytes as f64,
            )?;
        }

        let mut info = e.encode_descriptor(
            "apf_monitor_build",
            "apf-monitor's version.",
            None,
            MetricType::Info,
        )?;
        info.encode_info(&[("version", env!("CARGO_PKG_VERSION"))])?;
        let mut info = e.encode_descriptor(
            "apf_monitor_apiserver",
            "The Kubernetes version each replica reports.",
            None,
            MetricType::Info,
        )?;
        for a in &r.apiservers {
            if let Some(version) = &a.kubernetes_version {
                info.encode_info(&replica_labels(
                    a,
                    &[("kubernetes_version", version.as_str())],
                ))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod round_trip {
    use super::*;
    use apf::parse::exposition::{parse_all, Sample};
    use prometheus_client::registry::Registry;
    use std::io::Read;

    type Key = (String, Vec<(String, String)>);

    fn key(name: &str, mut labels: Vec<(String, String)>) -> Key {
        labels.sort();
        (name.to_string(), labels)
    }

    /// apf-monitor's own `/metrics`, rendered from the report of every real capture, reads back as it was meant:
    /// our parser and an independent one (prometheus-parse) find the same samples with the same values, and each
    /// level's headroom is the report's.
    #[test]
    fn own_metrics_parse_back_to_what_was_rendered() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let analysis = crate::daemon::analysis_of(&crate::config::Config::default());
        let mut checked = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !name.starts_with("metrics-v") {
                continue;
            }
            let mut capture = Vec::new();
            flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap())
                .read_to_end(&mut capture)
                .unwrap();
            let mut builder = apf::model::SnapshotBuilder::new();
            parse_all(&capture, apf::model::is_wanted_sample, &mut builder);
            let server =
                crate::analyze::analyze_single("10.0.0.5:6443", builder.finish(), &analysis);
            let report = StatusReport {
                apiservers: vec![server.clone()]
                    .into_iter()
                    .map(std::sync::Arc::new)
                    .collect(),
                ..Default::default()
            };
            let (_report_tx, report_rx) = watch::channel(Arc::new(report));
            let (_alerts_tx, alerts_rx) = watch::channel(Arc::new(AlertView::default()));
            let mut registry = Registry::default();
            registry.register_collector(Box::new(DerivedMetrics::new(report_rx, alerts_rx)));
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();

            let mut ours = std::collections::BTreeMap::new();
            let stats = parse_all(text.as_bytes(), |_| true, &mut |s: &Sample<'_>| {
                let labels = s
                    .labels
                    .iter()
                    .map(|l| (l.name.to_string(), l.value.to_string()))
                    .collect();
                ours.insert(key(s.name, labels), s.value);
            });
            assert_eq!(stats.invalid_lines, 0, "{name}: {:?}", stats.first_errors);
            let theirs =
                prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
            let mut other = std::collections::BTreeMap::new();
            for s in &theirs.samples {
                let value = match s.value {
                    prometheus_parse::Value::Gauge(v)
                    | prometheus_parse::Value::Counter(v)
                    | prometheus_parse::Value::Untyped(v) => v,
                    _ => continue,
                };
                let labels = s
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                other.insert(key(&s.metric, labels), value);
            }
            assert!(!ours.is_empty(), "{name}: nothing rendered");
            assert_eq!(
                ours.len(),
                other.len(),
                "{name}: the two parsers read different samples"
            );
            for (k, v) in &other {
                let mine = ours
                    .get(k)
                    .unwrap_or_else(|| panic!("{name}: {k:?} only prometheus-parse reads"));
                assert!(
                    mine == v || (mine.is_nan() && v.is_nan()),
                    "{name}: {k:?} {mine} vs {v}"
                );
            }
            for level in server.levels.iter().filter(|l| l.headroom_seats.is_some()) {
                let k = key(
                    "apf_priority_level_headroom_seats",
                    vec![
                        ("apiserver".into(), "10.0.0.5:6443".into()),
                        ("priority_level".into(), level.priority_level.clone()),
                    ],
                );
                assert_eq!(ours.get(&k).copied(), level.headroom_seats, "{name}: {k:?}");
            }
            checked += 1;
        }
        assert!(checked >= 10, "{checked} captures");
    }

    #[test]
    fn the_notifier_and_its_log_are_exported() {
        let render = |notifier: Option<crate::analyze::NotifierReport>| {
            let (_report_tx, report_rx) = watch::channel(Arc::new(StatusReport::default()));
            let view = AlertView {
                notifier,
                ..Default::default()
            };
            let (_alerts_tx, alerts_rx) = watch::channel(Arc::new(view));
            let mut registry = Registry::default();
            registry.register_collector(Box::new(DerivedMetrics::new(report_rx, alerts_rx)));
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
            text
        };
        let text = render(Some(crate::analyze::NotifierReport {
            leading: true,
            log_entries: 3,
            log_bytes: 812,
            ..Default::default()
        }));
        for line in [
            "apf_monitor_leader 1.0",
            "apf_monitor_notification_log_entries 3.0",
            "apf_monitor_notification_log_bytes 812.0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
        // `check` has no alerting stage: no notifier, no series.
        assert!(!render(None).contains("apf_monitor_leader"));
    }
}
