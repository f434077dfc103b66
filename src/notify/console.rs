//! A log line per change of an alert's state (target `apf_monitor::alerts`), in the configured log format: for the
//! demo, for `serve` with no receiver configured, and for people who ship logs. Never fails.
//!
//! A group is notified again whenever any alert of it changes, and every repeat interval; the console says each
//! alert once when it fires and once when it resolves, the resolution saying what cleared.
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use super::format::{annotation, identity_labels, severity};
use super::{Notification, Receiver, SendFuture};
use crate::alert::{fingerprint, what_cleared, Alert};

pub struct Console {
    name: String,
    /// The state each alert was last said in, by fingerprint: firing (`true`) or resolved.
    said: Mutex<BTreeMap<u64, bool>>,
}

impl Console {
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            said: Mutex::default(),
        }
    }

    /// The alerts of `notification` whose state changed since they were last said, marked as said.
    fn changed<'n>(&self, notification: &'n Notification) -> Vec<&'n Alert> {
        let mut said = self.said.lock().unwrap_or_else(|e| e.into_inner());
        notification
            .alerts
            .iter()
            .filter(|a| {
                let firing = !a.is_resolved();
                // An alert resolved before it was said firing (a restart in between) still gets its line.
                said.insert(fingerprint(&a.labels), firing) != Some(firing)
            })
            .collect()
    }
}

/// `FIRING APFHeadroomLow critical apiserver=... priority_level=...: <summary>`;
/// `RESOLVED APFHeadroomLow critical apiserver=... priority_level=...: <what cleared>; it fired for 3m 10s`: from
/// the alert's `startsAt` (when it fired) to its `endsAt` (when it resolved). The line itself comes at the group's
/// notification, `group_wait` after the firing and up to `group_interval` after the resolution: the time between a
/// FIRING and a RESOLVED line is not how long the alert fired.
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
    let what = if let Some(ended) = a.ends_at {
        let cleared = what_cleared(a.alertname()).unwrap_or("the condition no longer holds");
        match ended.duration_since(a.starts_at) {
            Ok(d) => Some(format!(
                "{cleared}; it fired for {}",
                humantime::format_duration(Duration::from_secs(d.as_secs()))
            )),
            Err(_) => Some(cleared.to_string()),
        }
    } else {
        annotation(a, "summary").map(str::to_string)
    };
    match what {
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
            for a in self.changed(notification) {
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
        // The resolution says what cleared and how long the alert fired, not the firing text again.
        a.ends_at = Some(UNIX_EPOCH + Duration::from_secs(190));
        assert_eq!(
            line(&a),
            "RESOLVED APFHeadroomLow critical apiserver=a:6443 priority_level=workload-low: headroom is back \
             above the clear threshold; it fired for 3m 10s"
        );
    }

    fn notification(alerts: Vec<Alert>) -> Notification {
        Notification {
            receiver: "console".into(),
            group_key: "g".into(),
            group_labels: BTreeMap::new(),
            common_labels: BTreeMap::new(),
            common_annotations: BTreeMap::new(),
            alerts,
            external_url: String::new(),
        }
    }

    fn alert(level: &str, resolved: bool) -> Alert {
        Alert {
            labels: [
                ("alertname", "APFHeadroomExhausted"),
                ("priority_level", level),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            annotations: BTreeMap::new(),
            starts_at: UNIX_EPOCH,
            ends_at: resolved.then_some(UNIX_EPOCH + Duration::from_secs(60)),
            generator_url: String::new(),
        }
    }

    /// A group notified again as one of its alerts changes, or at the repeat interval, says only what changed.
    #[test]
    fn each_state_change_is_said_once() {
        let c = Console::new("console");
        let said =
            |n: &Notification| -> Vec<String> { c.changed(n).into_iter().map(line).collect() };
        assert_eq!(said(&notification(vec![alert("a", false)])).len(), 1);
        // The group changes: b fires; a is not said again.
        let now = said(&notification(vec![alert("a", false), alert("b", false)]));
        assert_eq!(now.len(), 1, "{now:?}");
        assert!(now[0].contains("priority_level=b"), "{now:?}");
        // The repeat interval: nothing new.
        assert!(said(&notification(vec![alert("a", false), alert("b", false)])).is_empty());
        // a resolves: one line, saying what cleared.
        let now = said(&notification(vec![alert("b", false), alert("a", true)]));
        assert_eq!(now.len(), 1, "{now:?}");
        assert!(
            now[0].starts_with("RESOLVED")
                && now[0].contains("no request waits for a seat any more"),
            "{now:?}"
        );
        // Told again that a resolved: nothing new.
        assert!(said(&notification(vec![alert("b", false), alert("a", true)])).is_empty());
        // a fires again later: said again.
        assert_eq!(
            said(&notification(vec![alert("a", false), alert("b", false)])).len(),
            1
        );
    }
}
