//! "Who got 429s": per cluster and priority level, the users kube-apiserver's audit events show answered 429 in the
//! window, most first, with their rate, user agent and last rejection; levels where nobody was turned away are
//! summed up in one line. Laid out by `templates/status/audit.html`.
use crate::analyze::round::shown;
use crate::analyze::AuditReport;

/// One cluster's (or the only one's) audit.
pub(super) struct Audit<'a> {
    pub(super) cluster: Option<&'a str>,
    pub(super) window: String,
    pub(super) requests: u64,
    pub(super) rejected: u64,
    pub(super) classified_on: Option<&'a str>,
    pub(super) pending_requests: u64,
    pub(super) rows: Vec<Rejected<'a>>,
    pub(super) overflow_requests: u64,
    /// The name users beyond audit.max_users are counted under.
    pub(super) other_users: &'static str,
}

/// A user answered 429 on a level.
pub(super) struct Rejected<'a> {
    pub(super) priority_level: &'a str,
    pub(super) user: &'a str,
    pub(super) flow_schema: &'a str,
    pub(super) rejected_per_second: String,
    pub(super) requests_per_second: String,
    pub(super) user_agent: &'a str,
    pub(super) last_rejection: &'a str,
}

pub(super) fn audits(reports: &[AuditReport]) -> Vec<Audit<'_>> {
    reports
        .iter()
        .map(|r| Audit {
            cluster: r.cluster.as_deref(),
            window: r
                .window_seconds
                .map(|s| format!("{s:.0} s"))
                .unwrap_or_default(),
            requests: r.requests,
            rejected: r.rejected,
            classified_on: r.classified_on.as_deref(),
            pending_requests: r.pending_requests,
            rows: r
                .levels
                .iter()
                .flat_map(|l| {
                    l.rejected_users().map(|u| Rejected {
                        priority_level: &l.priority_level,
                        user: &u.user,
                        flow_schema: &u.flow_schema,
                        rejected_per_second: shown(u.rejected_per_second),
                        requests_per_second: shown(u.requests_per_second),
                        user_agent: u.user_agent.as_deref().unwrap_or("–"),
                        last_rejection: u.last_rejection.as_deref().unwrap_or("–"),
                    })
                })
                .collect(),
            overflow_requests: r.overflow_requests,
            other_users: apf::audit::OTHER_USERS,
        })
        .collect()
}
