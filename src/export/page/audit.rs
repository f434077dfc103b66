//! "Who got 429s": per cluster and priority level, the users kube-apiserver's audit events show answered 429 in the
//! window, most first, with their rate, user agent and last rejection; levels where nobody was turned away are
//! summed up in one line.
use std::fmt::Write;

use html_escape::encode_text as text;

use crate::analyze::round::shown;
use crate::analyze::AuditReport;

pub(super) fn render_audit(h: &mut String, reports: &[AuditReport]) {
    for r in reports {
        let window = r
            .window_seconds
            .map(|s| format!("{s:.0} s"))
            .unwrap_or_default();
        let _ = write!(
            h,
            "<section class=\"audit\"><h2>Who got 429s{} <small>last {window} · {} requests audited, {} answered 429{}</small></h2>",
            r.cluster
                .as_deref()
                .map(|c| format!(" in cluster {}", text(c)))
                .unwrap_or_default(),
            r.requests,
            r.rejected,
            r.classified_on
                .as_deref()
                .map(|s| format!(" · classified on the FlowSchemas of {}", text(s)))
                .unwrap_or_default(),
        );
        if r.pending_requests > 0 {
            let _ = write!(
                h,
                "<p class=\"muted\">{} requests wait for the cluster's FlowSchemas to be read.</p>",
                r.pending_requests
            );
        }
        let rejecting: Vec<_> = r
            .levels
            .iter()
            .filter(|l| l.rejected_users().next().is_some())
            .collect();
        if rejecting.is_empty() {
            h.push_str("<p>Nobody was answered 429 in the window.</p>");
        } else {
            h.push_str(
                "<table><thead><tr><th>priority level</th><th>user</th><th>flow schema</th><th class=\"num\">429/s</th>\
                 <th class=\"num\">requests/s</th><th>user agent</th><th>last 429</th></tr></thead><tbody>",
            );
            for l in rejecting {
                for u in l.rejected_users() {
                    let _ = write!(
                        h,
                        "<tr><td data-label=\"priority level\">{}</td><td class=\"user\"><b>{}</b></td>\
                         <td data-label=\"flow schema\">{}</td><td class=\"num\" data-label=\"429/s\">{}</td>\
                         <td class=\"num\" data-label=\"requests/s\">{}</td><td class=\"muted\" data-label=\"user agent\">{}</td>\
                         <td class=\"muted\" data-label=\"last 429\">{}</td></tr>",
                        text(&l.priority_level),
                        text(&u.user),
                        text(&u.flow_schema),
                        shown(u.rejected_per_second),
                        shown(u.requests_per_second),
                        text(u.user_agent.as_deref().unwrap_or("–")),
                        text(u.last_rejection.as_deref().unwrap_or("–")),
                    );
                }
            }
            h.push_str("</tbody></table>");
        }
        if r.overflow_requests > 0 {
            let _ = write!(
                h,
                "<p class=\"muted\">{} requests of users beyond audit.max_users are counted together as {}.</p>",
                r.overflow_requests,
                text(apf::audit::OTHER_USERS)
            );
        }
        h.push_str("</section>");
    }
}
