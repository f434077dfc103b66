//! Grouping, timing, inhibition and silencing of notifications, as Alertmanager does them (dispatch + notify
//! pipeline): `group_wait` before a new group's first notification, at most one per `group_interval` when the group
//! changed, a re-send every `repeat_interval`, resolved notifications for what was notified firing.
//!
//! Unlike Alertmanager, an alert notified as firing always gets its resolved notification, even when a critical
//! alert inhibits it or a silence mutes it meanwhile; an alert muted from the start is never notified.
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::humantime_serde_compat as rfc3339;
use super::notification_log::{Delivered, NotificationLog};
use super::silence::Silences;
use super::{Alert, LabelSet};
use crate::alert::{Notification, RouteConfig};

/// What one receiver was told about one group.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReceiverLog {
    #[serde(with = "rfc3339::option", default)]
    pub last_sent: Option<SystemTime>,
    /// Alerts notified as firing and not yet as resolved, by fingerprint, as last sent: kept so their resolution
    /// can be sent even if they vanish (forgotten, or lost in a restart).
    pub firing: BTreeMap<u64, Alert>,
}

/// One group of alerts (same values of the `group_by` labels) and its bookkeeping.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Group {
    pub labels: LabelSet,
    #[serde(with = "rfc3339")]
    pub next_flush: SystemTime,
    /// Past its first flush (`group_wait` is over): a new Lease holder flushes it at once (see
    /// [`Router::take_over`]).
    #[serde(default)]
    pub flushed: bool,
    pub receivers: BTreeMap<String, ReceiverLog>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Router {
    group_by: Vec<String>,
    group_wait: Duration,
    group_interval: Duration,
    repeat_interval: Duration,
    send_resolved: bool,
    receivers: Vec<String>,
    external_url: String,
    groups: BTreeMap<String, Group>,
    /// Why each alert of the last tick was muted.
    muted: BTreeMap<u64, &'static str>,
    /// Receivers this replica of apf-monitor does not send to now (it does not hold the Lease): no notification
    /// is made for them, so none is booked as sent, and when it takes over they get what is owed.
    paused: BTreeSet<String>,
}

fn elapsed(now: SystemTime, since: SystemTime) -> Duration {
    now.duration_since(since).unwrap_or(Duration::ZERO)
}

/// Go's `%q` for label values: enough for `"` and `\`.
fn quote(v: &str) -> String {
    format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Alertmanager's group key for the root route: `{}:{alertname="X", priority_level="Y"}`.
pub fn group_key(group_labels: &LabelSet) -> String {
    let inner: Vec<String> = group_labels
        .iter()
        .map(|(k, v)| format!("{k}={}", quote(v)))
        .collect();
    format!("{{}}:{{{}}}", inner.join(", "))
}

/// A critical alert mutes the warning of the same `cluster`, `apiserver` and `priority_level` (absent on both counts
/// as equal).
fn inhibits(source: &Alert, target: &Alert) -> bool {
    let sev = |a: &Alert| a.labels.get("severity").cloned().unwrap_or_default();
    !source.is_resolved()
        && sev(source) == "critical"
        && sev(target) == "warning"
        && ["cluster", "apiserver", "priority_level"]
            .iter()
            .all(|l| source.labels.get(*l) == target.labels.get(*l))
}

fn common<'a>(
    maps: impl Iterator<Item = &'a BTreeMap<String, String>>,
) -> BTreeMap<String, String> {
    let mut out: Option<BTreeMap<String, String>> = None;
    for m in maps {
        out = Some(match out {
            None => m.clone(),
            Some(acc) => acc
                .into_iter()
                .filter(|(k, v)| m.get(k) == Some(v))
                .collect(),
        });
    }
    out.unwrap_or_default()
}

impl Router {
    /// `receivers`: the names this route sends to (the configured list, or every receiver when it is empty).
    pub fn new(cfg: &RouteConfig, receivers: &[String], external_url: impl Into<String>) -> Self {
        Self {
            group_by: cfg.group_by.clone(),
            group_wait: cfg.group_wait.0,
            group_interval: cfg.group_interval.0,
            repeat_interval: cfg.repeat_interval.0,
            send_resolved: cfg.send_resolved,
            receivers: receivers.to_vec(),
            external_url: external_url.into(),
            groups: BTreeMap::new(),
            muted: BTreeMap::new(),
            paused: BTreeSet::new(),
        }
    }

    /// The receivers not to send to from now on (the rest are sent to again).
    pub fn pause(&mut self, receivers: BTreeSet<String>) {
        self.paused = receivers;
    }

    /// Restores the bookkeeping saved by `groups()` (a restart); logs of receivers no longer routed are dropped.
    pub fn with_groups(mut self, groups: BTreeMap<String, Group>) -> Self {
        self.groups = groups;
        for g in self.groups.values_mut() {
            g.receivers.retain(|r, _| self.receivers.contains(r));
        }
        self
    }

    pub fn groups(&self) -> &BTreeMap<String, Group> {
        &self.groups
    }

    /// `inhibited` or `silenced` as of the last tick, for status pages.
    pub fn muted(&self, alert: &Alert) -> Option<&'static str> {
        self.muted.get(&alert.fingerprint()).copied()
    }

    fn group_labels(&self, alert: &Alert) -> LabelSet {
        if self.group_by.iter().any(|l| l == "...") {
            return alert.labels.clone();
        }
        self.group_by
            .iter()
            .filter_map(|l| Some((l.clone(), alert.labels.get(l)?.clone())))
            .collect()
    }

    /// The notifications due now for these alerts (the engine's firing and resolved ones).
    pub fn tick(
        &mut self,
        now: SystemTime,
        alerts: &[Alert],
        silences: &Silences,
    ) -> Vec<Notification> {
        self.dispatch(now, alerts, silences, false)
    }

    /// What the groups owe, now, whatever `group_wait` and `group_interval` say: at shutdown, a receiver that was
    /// not told of an alert (a group's first notification, an alert that joined a notified group) or of its
    /// resolution is told before the process exits. Nothing else is sent: not a group with nothing new, not a
    /// repeat (due at the group's tick, sent then by the next Lease holder or the restarted process), and such a
    /// group's timers are left as they were.
    pub fn flush_owed(
        &mut self,
        now: SystemTime,
        alerts: &[Alert],
        silences: &Silences,
    ) -> Vec<Notification> {
        self.dispatch(now, alerts, silences, true)
    }

    /// A notification that was never delivered (still queued at the shutdown deadline): its receiver is owed it
    /// again. Its firing alerts count as not notified, so they are sent again as new; its resolved ones count as
    /// still notified firing, so their resolution is sent again. Saved in the state file, this survives the
    /// restart: a duplicate is acceptable, a lost notification is not.
    pub fn undo(&mut self, n: &Notification, now: SystemTime) {
        let group = self
            .groups
            .entry(n.group_key.clone())
            .or_insert_with(|| Group {
                labels: n.group_labels.clone(),
                next_flush: now,
                flushed: true,
                receivers: BTreeMap::new(),
            });
        group.next_flush = group.next_flush.min(now);
        let log = group.receivers.entry(n.receiver.clone()).or_default();
        for a in &n.alerts {
            if a.is_resolved() {
                let mut firing = a.clone();
                firing.ends_at = None;
                log.firing.insert(a.fingerprint(), firing);
            } else {
                log.firing.remove(&a.fingerprint());
            }
        }
    }

    /// This replica took the Lease and sends to `receivers` from now on: what they were told is what the
    /// previous holder's log says it delivered, not what this replica booked while it stood by (nothing) or when
    /// it last held the Lease (stale). Every group past its first flush is flushed at the next tick: what the log
    /// lacks (an alert that began while no one held the Lease, a notification never confirmed) goes out then, what
    /// it has is not sent again, and a repeat waits for `repeat_interval` from the holder's last one.
    pub fn take_over(
        &mut self,
        log: &NotificationLog,
        receivers: &BTreeSet<String>,
        now: SystemTime,
    ) {
        for g in self.groups.values_mut() {
            g.receivers.retain(|r, _| !receivers.contains(r));
        }
        for (key, logged) in &log.groups {
            let delivered: Vec<(&String, &Delivered)> = logged
                .receivers
                .iter()
                .filter(|(r, _)| receivers.contains(*r) && self.receivers.contains(*r))
                .collect();
            if delivered.is_empty() {
                continue;
            }
            let group = self.groups.entry(key.clone()).or_insert_with(|| Group {
                labels: logged.labels.clone(),
                next_flush: now,
                flushed: true,
                receivers: BTreeMap::new(),
            });
            // The previous holder flushed it: its first group_wait is over.
            group.flushed = true;
            for (receiver, d) in delivered {
                let firing = d
                    .firing
                    .iter()
                    .map(|a| (a.fingerprint(), a.alert(&self.external_url)))
                    .collect();
                group.receivers.insert(
                    receiver.clone(),
                    ReceiverLog {
                        last_sent: Some(d.last_sent),
                        firing,
                    },
                );
            }
        }
        for g in self.groups.values_mut().filter(|g| g.flushed) {
            g.next_flush = g.next_flush.min(now);
        }
    }

    fn dispatch(
        &mut self,
        now: SystemTime,
        alerts: &[Alert],
        silences: &Silences,
        force: bool,
    ) -> Vec<Notification> {
        self.muted = alerts
            .iter()
            .filter(|a| !a.is_resolved())
            .filter_map(|a| {
                let why = if alerts.iter().any(|s| inhibits(s, a)) {
                    "inhibited"
                } else if silences.matches(&a.labels, now) {
                    "silenced"
                } else {
                    return None;
                };
                Some((a.fingerprint(), why))
            })
            .collect();
        let mut by_group: BTreeMap<String, (LabelSet, Vec<&Alert>)> = BTreeMap::new();
        for a in alerts {
            let labels = self.group_labels(a);
            by_group
                .entry(group_key(&labels))
                .or_insert_with(|| (labels, Vec::new()))
                .1
                .push(a);
        }
        for (key, (labels, members)) in &by_group {
            // A group starts with a firing alert; resolved ones alone have nothing new to say.
            if !self.groups.contains_key(key) && members.iter().any(|a| !a.is_resolved()) {
                self.groups.insert(
                    key.clone(),
                    Group {
                        labels: labels.clone(),
                        next_flush: now + self.group_wait,
                        flushed: false,
                        receivers: BTreeMap::new(),
                    },
                );
            }
        }
        let mut out = Vec::new();
        let keys: Vec<String> = self.groups.keys().cloned().collect();
        for key in keys {
            let members = by_group.get(&key).map(|(_, m)| m.as_slice()).unwrap_or(&[]);
            let Some(group) = self.groups.get(&key) else {
                continue;
            };
            if force {
                let timers = (group.next_flush, group.flushed);
                let owed = self.flush(&key, members, now, true);
                if owed.is_empty() {
                    if let Some(group) = self.groups.get_mut(&key) {
                        (group.next_flush, group.flushed) = timers;
                    }
                }
                out.extend(owed);
            } else if now >= group.next_flush {
                out.extend(self.flush(&key, members, now, false));
            }
            let Some(group) = self.groups.get(&key) else {
                continue;
            };
            let any_firing = members.iter().any(|a| !a.is_resolved());
            let owes = group.receivers.values().any(|r| !r.firing.is_empty());
            if !any_firing && !owes {
                self.groups.remove(&key);
            }
        }
        out
    }

    /// The group's notifications now; `owed_only`: only to receivers owed one (something firing they were not
    /// told of, or a resolution), no repeat.
    fn flush(
        &mut self,
        key: &str,
        members: &[&Alert],
        now: SystemTime,
        owed_only: bool,
    ) -> Vec<Notification> {
        let muted = &self.muted;
        let mut visible: Vec<Alert> = members
            .iter()
            .filter(|a| !a.is_resolved() && !muted.contains_key(&a.fingerprint()))
            .map(|a| (*a).clone())
            .collect();
        visible.sort_by(|a, b| a.labels.cmp(&b.labels));
        let firing_now: BTreeSet<u64> = members
            .iter()
            .filter(|a| !a.is_resolved())
            .map(|a| a.fingerprint())
            .collect();
        let resolved_now: BTreeMap<u64, &Alert> = members
            .iter()
            .filter(|a| a.is_resolved())
            .map(|a| (a.fingerprint(), *a))
            .collect();
        let Some(group) = self.groups.get_mut(key) else {
            return Vec::new();
        };
        group.next_flush = now + self.group_interval;
        group.flushed = true;
        let mut out = Vec::new();
        for receiver in self.receivers.iter().filter(|r| !self.paused.contains(*r)) {
            let log = group.receivers.entry(receiver.clone()).or_default();
            // Notified firing and now resolved, or gone altogether (then resolved now).
            let mut resolved: Vec<Alert> = Vec::new();
            for (fp, last) in &log.firing {
                if let Some(a) = resolved_now.get(fp) {
                    resolved.push((*a).clone());
                } else if !firing_now.contains(fp) {
                    let mut a = last.clone();
                    a.ends_at = Some(now);
                    resolved.push(a);
                }
            }
            resolved.sort_by(|a, b| a.labels.cmp(&b.labels));
            for a in &resolved {
                log.firing.remove(&a.fingerprint());
            }
            let new_firing = visible
                .iter()
                .any(|a| !log.firing.contains_key(&a.fingerprint()));
            let repeat_due = !owed_only
                && !visible.is_empty()
                && log
                    .last_sent
                    .is_none_or(|t| elapsed(now, t) >= self.repeat_interval);
            let resolved_news = self.send_resolved && !resolved.is_empty();
            if !(new_firing || repeat_due || resolved_news) {
                continue;
            }
            let mut alerts = visible.clone();
            if self.send_resolved {
                alerts.extend(resolved);
            }
            if alerts.is_empty() {
                continue;
            }
            for a in &visible {
                log.firing.insert(a.fingerprint(), a.clone());
            }
            log.last_sent = Some(now);
            out.push(Notification {
                receiver: receiver.clone(),
                group_key: key.to_string(),
                group_labels: group.labels.clone(),
                common_labels: common(alerts.iter().map(|a| &a.labels)),
                common_annotations: common(alerts.iter().map(|a| &a.annotations)),
                alerts,
                external_url: self.external_url.clone(),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert::silence::{Matcher, SilenceInput};
    use crate::values::{DurationValue, Interval};

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn alert(name: &str, severity: &str, level: &str, starts: u64, ends: Option<u64>) -> Alert {
        Alert {
            labels: [
                ("alertname", name),
                ("severity", severity),
                ("apiserver", "10.0.0.5:6443"),
                ("priority_level", level),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            annotations: [("summary".to_string(), format!("{name} {level}"))].into(),
            starts_at: t(starts),
            ends_at: ends.map(t),
            generator_url: String::new(),
        }
    }

    fn router(receivers: &[&str]) -> Router {
        let cfg = RouteConfig {
            group_wait: DurationValue(Duration::from_secs(30)),
            group_interval: Interval(Duration::from_secs(300)),
            repeat_interval: Interval(Duration::from_secs(3600)),
            ..RouteConfig::default()
        };
        let names: Vec<String> = receivers.iter().map(|s| s.to_string()).collect();
        Router::new(&cfg, &names, "http://apf-monitor:8080")
    }

    fn summary(n: &[Notification]) -> Vec<String> {
        n.iter()
            .map(|n| {
                let a: Vec<String> = n
                    .alerts
                    .iter()
                    .map(|a| {
                        format!(
                            "{}/{}{}",
                            a.alertname(),
                            a.labels["priority_level"],
                            if a.is_resolved() { ":resolved" } else { "" }
                        )
                    })
                    .collect();
                format!("{} {}", n.receiver, a.join(","))
            })
            .collect()
    }

    #[test]
    fn group_wait_interval_repeat_and_resolved() {
        let mut r = router(&["slack", "hook"]);
        let s = Silences::default();
        let low = alert("APFHeadroomLow", "warning", "workload-low", 0, None);
        assert!(
            r.tick(t(0), std::slice::from_ref(&low), &s).is_empty(),
            "group_wait"
        );
        assert!(r.tick(t(29), std::slice::from_ref(&low), &s).is_empty());
        let n = r.tick(t(30), std::slice::from_ref(&low), &s);
        assert_eq!(
            summary(&n),
            [
                "slack APFHeadroomLow/workload-low",
                "hook APFHeadroomLow/workload-low"
            ]
        );
        assert_eq!(
            n[0].group_key,
            "{}:{alertname=\"APFHeadroomLow\", priority_level=\"workload-low\"}"
        );
        assert_eq!(n[0].group_labels.len(), 2);
        assert_eq!(n[0].common_labels["severity"], "warning");
        assert_eq!(
            n[0].common_annotations["summary"],
            "APFHeadroomLow workload-low"
        );
        assert_eq!(n[0].external_url, "http://apf-monitor:8080");
        assert_eq!(n[0].status(), "firing");
        // Unchanged: nothing at the next group_interval; a re-send after repeat_interval (3600s, at a flush tick).
        assert!(r.tick(t(330), std::slice::from_ref(&low), &s).is_empty());
        assert!(r.tick(t(3330), std::slice::from_ref(&low), &s).is_empty());
        assert_eq!(
            r.tick(t(3630), std::slice::from_ref(&low), &s).len(),
            2,
            "repeat at 30 + 3600"
        );
        // Resolved: at the next flush (group_interval after the last one).
        let done = alert("APFHeadroomLow", "warning", "workload-low", 0, Some(3700));
        assert!(r.tick(t(3700), std::slice::from_ref(&done), &s).is_empty());
        let n = r.tick(t(3930), std::slice::from_ref(&done), &s);
        assert_eq!(
            summary(&n),
            [
                "slack APFHeadroomLow/workload-low:resolved",
                "hook APFHeadroomLow/workload-low:resolved"
            ]
        );
        assert_eq!(n[0].status(), "resolved");
        assert!(r.groups().is_empty(), "nothing owed: the group is gone");
        assert!(r.tick(t(4230), &[done], &s).is_empty());
    }

    #[test]
    fn resolved_within_group_wait_is_never_sent_and_new_alerts_join_at_interval() {
        let mut r = router(&["slack"]);
        let s = Silences::default();
        let a = alert("APFQueueNearFull", "critical", "global-default", 0, None);
        r.tick(t(0), std::slice::from_ref(&a), &s);
        let gone = alert(
            "APFQueueNearFull",
            "critical",
            "global-default",
            0,
            Some(20),
        );
        assert!(r.tick(t(20), std::slice::from_ref(&gone), &s).is_empty());
        assert!(r.tick(t(30), std::slice::from_ref(&gone), &s).is_empty());
        assert!(r.tick(t(400), &[gone], &s).is_empty());

        // Two replicas in one group (grouped by alertname, priority_level): the second joins at the next interval.
        let mut r = router(&["slack"]);
        let a1 = alert("APFHeadroomLow", "warning", "workload-low", 0, None);
        let mut a2 = a1.clone();
        a2.labels.insert("apiserver".into(), "10.0.0.6:6443".into());
        assert_eq!(r.tick(t(30), std::slice::from_ref(&a1), &s).len(), 0);
        assert_eq!(r.tick(t(60), std::slice::from_ref(&a1), &s).len(), 1);
        assert!(
            r.tick(t(100), &[a1.clone(), a2.clone()], &s).is_empty(),
            "waits for group_interval"
        );
        let n = r.tick(t(360), &[a1.clone(), a2.clone()], &s);
        assert_eq!(n[0].alerts.len(), 2);
        assert!(!n[0].common_labels.contains_key("apiserver"));
    }

    #[test]
    fn inhibition_from_the_start_and_after_notification() {
        let s = Silences::default();
        let warn = alert("APFHeadroomLow", "warning", "workload-low", 0, None);
        let crit = alert("APFHeadroomExhausted", "critical", "workload-low", 0, None);
        let other = alert("APFHeadroomLow", "warning", "global-default", 0, None);
        // Inhibited from the start: never notified, not even resolved.
        let mut r = router(&["slack"]);
        let n = r.tick(t(0), &[warn.clone(), crit.clone(), other.clone()], &s);
        assert!(n.is_empty());
        let n = r.tick(t(30), &[warn.clone(), crit.clone(), other.clone()], &s);
        assert_eq!(
            summary(&n),
            [
                "slack APFHeadroomExhausted/workload-low",
                "slack APFHeadroomLow/global-default"
            ]
        );
        assert_eq!(r.muted(&warn), Some("inhibited"));
        assert_eq!(r.muted(&other), None);
        let warn_done = alert("APFHeadroomLow", "warning", "workload-low", 0, Some(100));
        assert!(r
            .tick(t(330), &[warn_done, crit.clone(), other.clone()], &s)
            .is_empty());

        // Notified first, inhibited later, then resolved: the resolution is sent.
        let mut r = router(&["slack"]);
        r.tick(t(0), std::slice::from_ref(&warn), &s);
        assert_eq!(r.tick(t(30), std::slice::from_ref(&warn), &s).len(), 1);
        assert!(r.tick(t(60), &[warn.clone(), crit.clone()], &s).is_empty());
        let n = r.tick(t(90), &[warn.clone(), crit.clone()], &s);
        assert_eq!(
            summary(&n),
            ["slack APFHeadroomExhausted/workload-low"],
            "the warning is muted now"
        );
        let warn_done = alert("APFHeadroomLow", "warning", "workload-low", 0, Some(200));
        assert!(
            r.tick(t(200), &[warn_done.clone(), crit.clone()], &s)
                .is_empty(),
            "waits for its group_interval"
        );
        let n = r.tick(t(330), &[warn_done, crit.clone()], &s);
        assert_eq!(summary(&n), ["slack APFHeadroomLow/workload-low:resolved"]);
    }

    #[test]
    fn silences_mute_but_never_swallow_a_resolution() {
        let mut s = Silences::default();
        let warn = alert("APFHeadroomLow", "warning", "workload-low", 0, None);
        let mut r = router(&["slack"]);
        r.tick(t(0), std::slice::from_ref(&warn), &s);
        assert_eq!(r.tick(t(30), std::slice::from_ref(&warn), &s).len(), 1);
        s.add(
            SilenceInput {
                id: None,
                matchers: vec![Matcher {
                    name: "priority_level".into(),
                    value: "workload-low".into(),
                    is_regex: false,
                    is_equal: true,
                }],
                starts_at: t(40),
                ends_at: t(100_000),
                created_by: "alice".into(),
                comment: "load test".into(),
            },
            t(40),
        )
        .unwrap();
        assert!(
            r.tick(t(3630), std::slice::from_ref(&warn), &s).is_empty(),
            "no repeat while silenced"
        );
        assert_eq!(r.muted(&warn), Some("silenced"));
        let done = alert("APFHeadroomLow", "warning", "workload-low", 0, Some(3700));
        let n = r.tick(t(3930), &[done], &s);
        assert_eq!(summary(&n), ["slack APFHeadroomLow/workload-low:resolved"]);
        // Silenced from the start: never notified.
        let mut r = router(&["slack"]);
        r.tick(t(50), std::slice::from_ref(&warn), &s);
        assert!(r.tick(t(80), std::slice::from_ref(&warn), &s).is_empty());
        assert!(r.tick(t(5000), &[warn], &s).is_empty());
    }

    #[test]
    fn send_resolved_false_and_vanished_alerts() {
        let s = Silences::default();
        let cfg = RouteConfig {
            send_resolved: false,
            ..RouteConfig::default()
        };
        let mut r = Router::new(&cfg, &["email".to_string()], "");
        let a = alert("APFRequestsRejected", "critical", "catch-all", 0, None);
        r.tick(t(0), std::slice::from_ref(&a), &s);
        assert_eq!(r.tick(t(30), std::slice::from_ref(&a), &s).len(), 1);
        let done = alert("APFRequestsRejected", "critical", "catch-all", 0, Some(60));
        assert!(r.tick(t(330), &[done], &s).is_empty());
        assert!(r.groups().is_empty());

        // An alert notified firing that disappears (its resolution forgotten) is resolved with ends_at = now.
        let mut r = router(&["hook"]);
        r.tick(t(0), std::slice::from_ref(&a), &s);
        r.tick(t(30), std::slice::from_ref(&a), &s);
        let n = r.tick(t(330), &[], &s);
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].alerts[0].ends_at, Some(t(330)));
    }

    #[test]
    fn flush_owed_sends_what_groups_owe_now_and_undo_owes_it_again() {
        let s = Silences::default();
        let mut r = router(&["slack"]);
        let low = alert("APFHeadroomLow", "warning", "workload-low", 0, None);
        assert!(
            r.tick(t(0), std::slice::from_ref(&low), &s).is_empty(),
            "group_wait"
        );
        // Shutdown at 10 s: the new group goes out now instead of at 30 s.
        let n = r.flush_owed(t(10), std::slice::from_ref(&low), &s);
        assert_eq!(summary(&n), ["slack APFHeadroomLow/workload-low"]);
        // Resolved at 20 s; its notice would wait for group_interval: a flush sends it now.
        let done = alert("APFHeadroomLow", "warning", "workload-low", 0, Some(20));
        assert!(r.tick(t(20), std::slice::from_ref(&done), &s).is_empty());
        let resolved = r.flush_owed(t(21), std::slice::from_ref(&done), &s);
        assert_eq!(
            summary(&resolved),
            ["slack APFHeadroomLow/workload-low:resolved"]
        );
        assert!(r.groups().is_empty());
        // That notice was never delivered: undone, the resolution is owed again (after a restart, too).
        r.undo(&resolved[0], t(22));
        let again = r.tick(t(23), &[], &s);
        assert_eq!(
            summary(&again),
            ["slack APFHeadroomLow/workload-low:resolved"]
        );
        // An undelivered firing notification makes the alert new again for its receiver.
        let mut r = router(&["slack"]);
        r.tick(t(0), std::slice::from_ref(&low), &s);
        let first = r.flush_owed(t(1), std::slice::from_ref(&low), &s);
        r.undo(&first[0], t(2));
        let n = r.tick(t(3), std::slice::from_ref(&low), &s);
        assert_eq!(summary(&n), ["slack APFHeadroomLow/workload-low"]);
    }

    #[test]
    fn a_stop_sends_only_what_a_receiver_was_not_told() {
        let s = Silences::default();
        let mut r = router(&["slack"]);
        // Nine replicas' alerts of one group, announced at 30 s.
        let nine: Vec<Alert> = (1..=9)
            .map(|i| {
                let mut a = alert("APFHeadroomLow", "warning", "workload-low", 0, None);
                a.labels
                    .insert("apiserver".into(), format!("10.0.0.{i}:6443"));
                a
            })
            .collect();
        r.tick(t(0), &nine, &s);
        assert_eq!(r.tick(t(30), &nine, &s).len(), 1);
        let before = r.groups().clone();
        // A stop 86 s later, nothing new: nothing sent, the group's next tick (330 s) kept for the state file.
        assert!(r.flush_owed(t(116), &nine, &s).is_empty());
        assert_eq!(r.groups(), &before);
        // Nor a repeat that is due: the group's tick sends it (the next Lease holder's, or after the restart).
        assert!(r.flush_owed(t(3700), &nine, &s).is_empty());
        assert_eq!(r.groups(), &before);
        // An alert the receiver was not told of, or a resolution, is owed: the stop sends it.
        let mut ten = nine.clone();
        let mut tenth = alert("APFHeadroomLow", "warning", "workload-low", 100, None);
        tenth
            .labels
            .insert("apiserver".into(), "10.0.0.10:6443".into());
        ten.push(tenth);
        let n = r.flush_owed(t(116), &ten, &s);
        assert_eq!(n.len(), 1);
        assert_eq!(
            n[0].alerts.len(),
            10,
            "a group's notification lists its alerts"
        );
        ten[0].ends_at = Some(t(117));
        let n = r.flush_owed(t(118), &ten, &s);
        assert_eq!(
            n.iter()
                .flat_map(|n| &n.alerts)
                .filter(|a| a.is_resolved())
                .count(),
            1
        );
    }

    #[test]
    fn a_paused_receiver_is_booked_nothing_and_gets_what_is_owed_when_resumed() {
        let s = Silences::default();
        let mut r = router(&["slack", "am-feed"]);
        r.pause(["slack".to_string()].into());
        let low = alert("APFHeadroomLow", "warning", "workload-low", 0, None);
        r.tick(t(0), std::slice::from_ref(&low), &s);
        assert_eq!(
            summary(&r.tick(t(30), std::slice::from_ref(&low), &s)),
            ["am-feed APFHeadroomLow/workload-low"]
        );
        // This replica takes the Lease over: the next flush sends Slack what it never had.
        r.pause(BTreeSet::new());
        assert_eq!(
            summary(&r.tick(t(330), std::slice::from_ref(&low), &s)),
            ["slack APFHeadroomLow/workload-low"]
        );
    }

    #[test]
    fn group_key_quotes_values() {
        let labels: LabelSet = [("alertname".to_string(), "A\"b\\".to_string())].into();
        assert_eq!(group_key(&labels), "{}:{alertname=\"A\\\"b\\\\\"}");
        assert_eq!(group_key(&LabelSet::new()), "{}:{}");
    }

    /// Two replicas: the holder notifies and its log says what was delivered; the one that takes over sends
    /// neither that again nor less than what the log lacks, at once.
    #[test]
    fn a_new_holder_goes_on_from_the_log() {
        let s = Silences::default();
        let low = alert("APFHeadroomLow", "warning", "workload-low", 0, None);
        let high = alert("APFHeadroomLow", "warning", "workload-high", 100, None);
        let direct: BTreeSet<String> = ["slack".to_string()].into();
        let mut holder = router(&["slack", "console"]);
        let mut standby = router(&["slack", "console"]);
        standby.pause(direct.clone());
        let mut log = NotificationLog::default();
        let n = holder.tick(t(0), std::slice::from_ref(&low), &s);
        assert!(n.is_empty());
        assert!(standby
            .tick(t(0), std::slice::from_ref(&low), &s)
            .is_empty());
        let n = holder.tick(t(30), std::slice::from_ref(&low), &s);
        assert_eq!(
            summary(&n),
            [
                "slack APFHeadroomLow/workload-low",
                "console APFHeadroomLow/workload-low"
            ]
        );
        log.record(&n[0], t(31));
        let n = standby.tick(t(30), std::slice::from_ref(&low), &s);
        assert_eq!(
            summary(&n),
            ["console APFHeadroomLow/workload-low"],
            "its own console only"
        );

        // The holder dies; workload-high begins while no one holds the Lease and its group's first flush passes.
        let both = [low.clone(), high.clone()];
        assert!(standby.tick(t(100), &both, &s).is_empty());
        let n = standby.tick(t(130), &both, &s);
        assert_eq!(summary(&n), ["console APFHeadroomLow/workload-high"]);

        // Taken over at 140: workload-high is owed to Slack now (not at 130 + group_interval), workload-low is not.
        standby.take_over(&log, &direct, t(140));
        standby.pause(BTreeSet::new());
        let n = standby.tick(t(140), &both, &s);
        assert_eq!(summary(&n), ["slack APFHeadroomLow/workload-high"]);
        assert!(standby.tick(t(141), &both, &s).is_empty());
        // workload-low's repeat counts from the holder's delivery (31), not from the take-over: due at 3631, sent at
        // the group's first flush after it (140 + 13 x 300), with workload-high's (due at 3740).
        assert!(standby.tick(t(3600), &both, &s).is_empty());
        let n = standby.tick(t(3900), &both, &s);
        assert_eq!(
            summary(&n)
                .into_iter()
                .filter(|l| l.starts_with("slack"))
                .collect::<Vec<_>>(),
            [
                "slack APFHeadroomLow/workload-high",
                "slack APFHeadroomLow/workload-low"
            ]
        );
        // It ends: one RESOLVED, from the log's alert even though this replica forgot it altogether.
        let n = standby.tick(t(4200), std::slice::from_ref(&high), &s);
        let slack: Vec<&Notification> = n.iter().filter(|n| n.receiver == "slack").collect();
        assert_eq!(slack.len(), 1);
        assert_eq!(slack[0].status(), "resolved");
        assert_eq!(slack[0].alerts[0].starts_at, t(0));
        assert!(standby
            .tick(t(4500), std::slice::from_ref(&high), &s)
            .iter()
            .all(|n| n.receiver != "slack"));
    }

    /// A replica that held the Lease before and takes it again forgets what it booked then: the log is the truth.
    #[test]
    fn a_stale_booking_is_replaced_by_the_log() {
        let s = Silences::default();
        let low = alert("APFHeadroomLow", "warning", "workload-low", 0, None);
        let direct: BTreeSet<String> = ["slack".to_string()].into();
        let mut r = router(&["slack"]);
        r.tick(t(0), std::slice::from_ref(&low), &s);
        assert_eq!(r.tick(t(30), std::slice::from_ref(&low), &s).len(), 1);
        // Meanwhile the other holder resolved it and the log is empty; it fires again and was never delivered.
        r.take_over(&NotificationLog::default(), &direct, t(500));
        let again = alert("APFHeadroomLow", "warning", "workload-low", 400, None);
        let n = r.tick(t(500), std::slice::from_ref(&again), &s);
        assert_eq!(summary(&n), ["slack APFHeadroomLow/workload-low"]);
        assert_eq!(n[0].alerts[0].starts_at, t(400));
    }
}
