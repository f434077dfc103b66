//! A log line per alert (target `apf_monitor::alerts`), in the configured log format: for the demo and for people
//! who ship logs. Never fails.
use super::format::{annotation, identity_labels, severity};
use super::{Notification, Receiver, SendFuture};
use crate::alert::Alert;

pub struct Console {
    name: String,
}

impl Console {
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
        }
    }
}

/// `FIRING APFHeadroomLow critical apiserver=... priority_level=...: <summary>`.
pub fn line(a: &Alert) -> String {
    let status = if a.is_resolved() {
        "RESOLVED"
    } else {
        "FIRING"
    };
    let mut head = format!("{status} {}", a.alertname());
    for part in [severity(a).to_string(), identity_labels(a)] {
        if !part.is_empty() {
            head.push(' ');
            head.push_str(&part);
        }
    }
    match annotation(a, "summary") {
        Some(s) => format!("{head}: {s}"),
        None => head,
    }
}

impl Receiver for Console {
    fn name(&self) -> &str {
        &self.name
    }

    fn send<'a>(&'a self, notification: &'a Notification) -> SendFuture<'a> {
        Box::pin(async move {
            for a in &notification.alerts {
                // Fields too, so JSON logs can be filtered without parsing the text.
                tracing::info!(
                    target: "apf_monitor::alerts",
                    alertname = a.alertname(),
                    status = if a.is_resolved() { "resolved" } else { "firing" },
                    "{}",
                    line(a)
                );
                if !a.is_resolved() {
                    if let Some(r) = annotation(a, "remediation") {
                        tracing::info!(
                            target: "apf_monitor::alerts",
                            alertname = a.alertname(),
                            "  remediation: {r}"
                        );
                    }
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn lines() {
        let mut a = Alert {
            labels: [
                ("alertname", "APFHeadroomLow"),
                ("severity", "critical"),
                ("apiserver", "a:6443"),
                ("priority_level", "workload-low"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            annotations: BTreeMap::from([("summary".to_string(), "headroom 5%".to_string())]),
            starts_at: UNIX_EPOCH,
            ends_at: None,
            generator_url: String::new(),
        };
        assert_eq!(
            line(&a),
            "FIRING APFHeadroomLow critical apiserver=a:6443 priority_level=workload-low: headroom 5%"
        );
        a.ends_at = Some(UNIX_EPOCH + Duration::from_secs(1));
        assert!(line(&a).starts_with("RESOLVED APFHeadroomLow critical"));
    }
}
