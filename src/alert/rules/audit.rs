//! Who suffers: the users kube-apiserver's audit events show answered 429 on the alert's priority level, named in
//! its `rejected_users` annotation and at the end of its remediation, next to the flow that takes the seats.
use crate::analyze::{AuditReport, StatusReport};

use super::Candidate;

/// Users named per alert.
const NAMED: usize = 3;

/// The audited requests of the candidate's cluster: the report of that cluster, or the only report when its events
/// are tied to no cluster.
fn audit_of<'a>(report: &'a StatusReport, cluster: Option<&String>) -> Option<&'a AuditReport> {
    report
        .audit
        .iter()
        .find(|a| a.cluster.as_ref() == cluster)
        .or_else(|| match report.audit.as_slice() {
            [only] if only.cluster.is_none() => Some(only),
            _ => None,
        })
}

/// Adds who was answered 429 to every candidate on a level where the audit events show rejections.
pub(super) fn name_who_suffers(candidates: &mut [Candidate], report: &StatusReport) {
    if report.audit.is_empty() {
        return;
    }
    for c in candidates {
        let Some(level) = c.labels.get("priority_level") else {
            continue;
        };
        let Some(level) = audit_of(report, c.labels.get("cluster")).and_then(|a| a.level(level))
        else {
            continue;
        };
        let users: Vec<String> = level
            .rejected_users()
            .take(NAMED)
            .map(|u| {
                format!(
                    "{} {:.2}/s ({}{})",
                    u.user,
                    u.rejected_per_second,
                    u.flow_schema,
                    u.user_agent
                        .as_deref()
                        .map(|a| format!(", {a}"))
                        .unwrap_or_default()
                )
            })
            .collect();
        if users.is_empty() {
            continue;
        }
        let more = level.rejected_users().count().saturating_sub(NAMED);
        let mut named = users.join(", ");
        if more > 0 {
            named.push_str(&format!(" and {more} more"));
        }
        c.annotations.insert("rejected_users".into(), named.clone());
        let line = format!("Answered 429 (audit events): {named}.");
        c.annotations
            .entry("remediation".into())
            .and_modify(|r| {
                r.push(' ');
                r.push_str(&line);
            })
            .or_insert(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::{AuditLevel, AuditUser};
    use std::collections::BTreeMap;
    use std::time::Duration;

    fn candidate(cluster: Option<&str>, level: &str) -> Candidate {
        let mut labels = BTreeMap::from([
            ("alertname".to_string(), "APFRequestsRejected".to_string()),
            ("priority_level".to_string(), level.to_string()),
        ]);
        if let Some(c) = cluster {
            labels.insert("cluster".into(), c.into());
        }
        Candidate {
            replica: Default::default(),
            labels,
            annotations: BTreeMap::from([(
                "remediation".to_string(),
                "Isolate flow agent".to_string(),
            )]),
            for_: Duration::ZERO,
            keep_firing_for: Duration::ZERO,
        }
    }

    fn user(name: &str, rejected_per_second: f64) -> AuditUser {
        AuditUser {
            user: name.into(),
            flow_schema: "service-accounts".into(),
            rejected_per_second,
            rejected: (rejected_per_second * 60.0) as u64,
            user_agent: Some(format!("{name}/1.0")),
            ..Default::default()
        }
    }

    #[test]
    fn the_rejected_users_of_the_level_are_named_after_the_fix() {
        let report = StatusReport {
            audit: vec![AuditReport {
                levels: vec![AuditLevel {
                    priority_level: "workload-low".into(),
                    users: (0..5)
                        .map(|i| user(&format!("u{i}"), 5.0 - f64::from(i)))
                        .chain([user("quiet", 0.0)])
                        .collect(),
                    users_not_shown: 0,
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut c = vec![
            candidate(Some("prod"), "workload-low"),
            candidate(None, "global-default"),
        ];
        name_who_suffers(&mut c, &report);
        assert_eq!(
            c[0].annotations["rejected_users"],
            "u0 5.00/s (service-accounts, u0/1.0), u1 4.00/s (service-accounts, u1/1.0), u2 3.00/s \
             (service-accounts, u2/1.0) and 2 more"
        );
        assert!(c[0].annotations["remediation"]
            .starts_with("Isolate flow agent Answered 429 (audit events): u0 5.00/s"));
        // Nobody audited on that level: nothing said.
        assert!(!c[1].annotations.contains_key("rejected_users"));
    }
}
