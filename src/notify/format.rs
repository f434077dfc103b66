//! Text shared by the receivers: titles as Alertmanager writes them, times as Go prints them, safe truncation.
use std::time::{SystemTime, UNIX_EPOCH};

use super::Notification;
use crate::alert::Alert;

/// Go's zero `time.Time`, which Alertmanager's webhook sends as `endsAt` of a firing alert.
pub const GO_ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// Alertmanager's default title: `[FIRING:2] APFHeadroomLow workload-low`, `[RESOLVED] APFHeadroomLow workload-low`.
pub fn title(n: &Notification) -> String {
    let status = match n.status() {
        "firing" => format!("FIRING:{}", n.firing().count()),
        _ => "RESOLVED".to_string(),
    };
    let values = group_values(n);
    if values.is_empty() {
        format!("[{status}]")
    } else {
        format!("[{status}] {values}")
    }
}

/// The group labels' values, `alertname` first then by name (Alertmanager's `SortedPairs`); without group labels,
/// the common alertname so the title still says what fired.
pub fn group_values(n: &Notification) -> String {
    let mut values: Vec<&str> = Vec::new();
    if let Some(a) = n.group_labels.get("alertname") {
        values.push(a);
    }
    values.extend(
        n.group_labels
            .iter()
            .filter(|(k, _)| k.as_str() != "alertname")
            .map(|(_, v)| v.as_str()),
    );
    if values.is_empty() {
        if let Some(a) = n.common_labels.get("alertname") {
            values.push(a);
        }
    }
    values.join(" ")
}

/// `apiserver="..." priority_level="..."` without the alertname and severity, which are said elsewhere.
pub fn identity_labels(a: &Alert) -> String {
    a.labels
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "alertname" | "severity"))
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn severity(a: &Alert) -> &str {
    a.labels.get("severity").map(String::as_str).unwrap_or("")
}

pub fn annotation<'a>(a: &'a Alert, key: &str) -> Option<&'a str> {
    a.annotations
        .get(key)
        .map(String::as_str)
        .filter(|v| !v.trim().is_empty())
}

/// At most `max` characters; a cut text ends with "…" (counted in `max`).
pub fn truncate_chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let keep = max.saturating_sub(1);
    let mut out: String = text.chars().take(keep).collect();
    out.push('…');
    out
}

/// Go's `time.RFC3339Nano` in UTC, as Alertmanager marshals times: `2026-11-22T11:51:31.5Z`, no trailing zeros.
pub fn rfc3339(t: SystemTime) -> String {
    // humantime cannot print times before 1970; no alert starts there, so clamp rather than panic.
    let t = if t < UNIX_EPOCH { UNIX_EPOCH } else { t };
    let full = humantime::format_rfc3339_nanos(t).to_string();
    match full.strip_suffix('Z').and_then(|s| s.split_once('.')) {
        Some((secs, frac)) => {
            let frac = frac.trim_end_matches('0');
            if frac.is_empty() {
                format!("{secs}Z")
            } else {
                format!("{secs}.{frac}Z")
            }
        }
        None => full,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::alert::LabelSet;

    fn labels(pairs: &[(&str, &str)]) -> LabelSet {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn alert(resolved: bool) -> Alert {
        Alert {
            labels: labels(&[
                ("alertname", "APFHeadroomLow"),
                ("priority_level", "workload-low"),
                ("severity", "warning"),
                ("apiserver", "10.0.0.5:6443"),
            ]),
            annotations: BTreeMap::new(),
            starts_at: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            ends_at: resolved.then(|| UNIX_EPOCH + Duration::from_secs(1_700_000_600)),
            generator_url: String::new(),
        }
    }

    fn notification(alerts: Vec<Alert>, group: &[(&str, &str)]) -> Notification {
        Notification {
            receiver: "r".into(),
            group_key: "{}".into(),
            group_labels: labels(group),
            common_labels: labels(&[("alertname", "APFHeadroomLow")]),
            common_annotations: BTreeMap::new(),
            alerts,
            external_url: "http://apf-monitor:8080".into(),
        }
    }

    #[test]
    fn titles_like_alertmanager() {
        let group = [
            ("priority_level", "workload-low"),
            ("alertname", "APFHeadroomLow"),
        ];
        let n = notification(vec![alert(false), alert(false), alert(true)], &group);
        assert_eq!(title(&n), "[FIRING:2] APFHeadroomLow workload-low");
        let n = notification(vec![alert(true)], &group);
        assert_eq!(title(&n), "[RESOLVED] APFHeadroomLow workload-low");
        // No group_by: the common alertname.
        let n = notification(vec![alert(false)], &[]);
        assert_eq!(title(&n), "[FIRING:1] APFHeadroomLow");
        // alertname first even when another label sorts before it.
        let n = notification(
            vec![alert(false)],
            &[("aaa", "x"), ("alertname", "APFHeadroomLow")],
        );
        assert_eq!(title(&n), "[FIRING:1] APFHeadroomLow x");
    }

    #[test]
    fn identity_labels_skip_name_and_severity() {
        assert_eq!(
            identity_labels(&alert(false)),
            "apiserver=10.0.0.5:6443 priority_level=workload-low"
        );
    }

    #[test]
    fn truncation_counts_characters() {
        assert_eq!(truncate_chars("abc", 3), "abc");
        assert_eq!(truncate_chars("abcd", 3), "ab…");
        assert_eq!(truncate_chars("ééééé", 4).chars().count(), 4);
        assert_eq!(truncate_chars("abc", 0), "…");
    }

    #[test]
    fn times_as_go_prints_them() {
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(rfc3339(t), "2023-11-14T22:13:20Z");
        assert_eq!(
            rfc3339(t + Duration::from_millis(500)),
            "2023-11-14T22:13:20.5Z"
        );
        assert_eq!(
            rfc3339(t + Duration::from_nanos(1)),
            "2023-11-14T22:13:20.000000001Z"
        );
    }
}
