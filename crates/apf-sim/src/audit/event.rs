//! One simulated request as kube-apiserver's audit backend writes it (`audit.k8s.io/v1` Event, level Metadata,
//! stage ResponseComplete): k8s.io/apiserver `pkg/apis/audit/v1/types.go` for the fields,
//! `pkg/endpoints/filters/audit.go` for the response code and the latency annotations.
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use crate::scenario::api_group;

/// What the simulator noted of a request when it ended: served (200) or turned away by APF (429).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AuditRecord {
    pub flow: usize,
    pub code: u16,
    /// Simulated nanoseconds: when it arrived and when its response was complete.
    pub arrive_ns: u64,
    pub end_ns: u64,
    /// Time in an APF queue; `None` when it never queued (dispatched at once, exempt, or rejected at arrival).
    pub waited_ns: Option<u64>,
}

/// Who sent a flow's requests and what they ask: what an event names.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FlowIdentity {
    pub name: String,
    pub user: String,
    /// As the authenticator gives them: the scenario's groups and the implied ones.
    pub groups: Vec<String>,
    pub verb: String,
    pub resource: String,
    pub namespace: String,
}

/// Go's `time.Duration.String()` (`0s`, `850ns`, `1.5µs`, `12.345678ms`, `2.5s`, `1m30.5s`, `1h0m0s`).
pub(crate) fn go_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    // Fractions with their trailing zeros cut, as Go's fmtFrac does.
    let frac = |value: u128, digits: u32| -> String {
        let unit = 10u128.pow(digits);
        let (whole, part) = (value / unit, value % unit);
        if part == 0 {
            whole.to_string()
        } else {
            let text = format!("{part:0width$}", width = digits as usize);
            format!("{whole}.{}", text.trim_end_matches('0'))
        }
    };
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    if ns < 1_000_000 {
        return format!("{}µs", frac(ns, 3));
    }
    if ns < 1_000_000_000 {
        return format!("{}ms", frac(ns, 6));
    }
    let secs = ns / 1_000_000_000;
    let sub = ns % 1_000_000_000;
    let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
    let seconds = frac(s * 1_000_000_000 + sub, 9);
    match (h, m) {
        (0, 0) => format!("{seconds}s"),
        (0, m) => format!("{m}m{seconds}s"),
        (h, m) => format!("{h}h{m}m{seconds}s"),
    }
}

/// The request URI kube-apiserver would log for the flow's verb and resource (a LIST with a page size, as
/// client-go's informers send it).
fn request_uri(f: &FlowIdentity) -> String {
    let group = api_group(&f.resource);
    let prefix = if group.is_empty() {
        "/api/v1".to_string()
    } else {
        format!("/apis/{group}/v1")
    };
    let scope = if f.namespace.is_empty() {
        String::new()
    } else {
        format!("/namespaces/{}", f.namespace)
    };
    match f.verb.as_str() {
        "list" => format!("{prefix}{scope}/{}?limit=500", f.resource),
        "watch" => format!("{prefix}{scope}/{}?watch=true", f.resource),
        "create" => format!("{prefix}{scope}/{}", f.resource),
        _ => format!("{prefix}{scope}/{}/{}", f.resource, f.name),
    }
}

/// The user agent of a flow: client-go's form, `NAME/VERSION (OS/ARCH) kubernetes/COMMIT`.
fn user_agent(f: &FlowIdentity) -> String {
    format!("{}/v1.0.0 (linux/amd64) kubernetes/sim", f.name)
}

fn rfc3339_micros(t: SystemTime) -> String {
    humantime::format_rfc3339_micros(t).to_string()
}

/// The event of `r`; `id` makes its auditID unique; `minor` decides the queue-wait annotation (1.31+).
pub(crate) fn render(
    r: &AuditRecord,
    f: &FlowIdentity,
    wall_start: SystemTime,
    minor: u32,
    id: u64,
) -> Value {
    let received = wall_start + Duration::from_nanos(r.arrive_ns);
    let done = wall_start + Duration::from_nanos(r.end_ns.max(r.arrive_ns));
    let mut annotations = serde_json::Map::new();
    annotations.insert("authorization.k8s.io/decision".into(), "allow".into());
    annotations.insert("authorization.k8s.io/reason".into(), "".into());
    // writeLatencyToAnnotation: only past 500 ms in all, and only the layers that took time; APF's wait is tracked
    // from 1.31 (kubernetes/kubernetes#123919), for requests executed and rejected after queuing alike.
    let total = Duration::from_nanos(r.end_ns.saturating_sub(r.arrive_ns));
    if let (true, true, Some(w)) = (
        minor >= 31,
        total > Duration::from_millis(500),
        r.waited_ns.filter(|w| *w > 0),
    ) {
        annotations.insert(
            "apiserver.latency.k8s.io/apf-queue-wait".into(),
            go_duration(Duration::from_nanos(w)).into(),
        );
        annotations.insert(
            "apiserver.latency.k8s.io/total".into(),
            go_duration(total).into(),
        );
    }
    let group = api_group(&f.resource);
    let mut object_ref = json!({"resource": f.resource, "apiVersion": "v1"});
    if !f.namespace.is_empty() {
        object_ref["namespace"] = json!(f.namespace);
    }
    if !group.is_empty() {
        object_ref["apiGroup"] = json!(group);
    }
    if !matches!(f.verb.as_str(), "list" | "watch" | "create") {
        object_ref["name"] = json!(f.name);
    }
    json!({
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "Metadata",
        "auditID": format!("{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}", id >> 32, (id >> 16) & 0xffff, (id >> 4) & 0xfff, id & 0xfff, id.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 16),
        "stage": "ResponseComplete",
        "requestURI": request_uri(f),
        "verb": f.verb,
        "user": {"username": f.user, "groups": f.groups},
        "sourceIPs": ["10.0.0.10"],
        "userAgent": user_agent(f),
        "objectRef": object_ref,
        // APF answers 429 with http.Error (no Status body): the audit writer keeps only the code it saw.
        "responseStatus": {"metadata": {}, "code": r.code},
        "requestReceivedTimestamp": rfc3339_micros(received),
        "stageTimestamp": rfc3339_micros(done),
        "annotations": annotations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_go_writes_them() {
        for (ns, text) in [
            (0, "0s"),
            (850, "850ns"),
            (1_500, "1.5µs"),
            (12_345_678, "12.345678ms"),
            (2_500_000_000, "2.5s"),
            (15_000_000_000, "15s"),
            (90_500_000_000, "1m30.5s"),
            (3_600_000_000_000, "1h0m0s"),
        ] {
            assert_eq!(go_duration(Duration::from_nanos(ns)), text);
            assert_eq!(
                apf::parse::audit::go_duration(text),
                Some(Duration::from_nanos(ns)),
                "{text}"
            );
        }
    }
}
