//! kube-apiserver's audit events (`audit.k8s.io/v1`, k8s.io/apiserver `pkg/apis/audit/v1/types.go`), read into what
//! APF saw of each request: who (the impersonated user when there is one, as APF classifies after impersonation),
//! what (verb and resource, or a non-resource path), whether it was turned away (429) and how long it waited in an
//! APF queue (the `apiserver.latency.k8s.io/apf-queue-wait` annotation, 1.31+, written only on requests slower than
//! 500 ms in all: k8s.io/apiserver `endpoints/filters/audit.go` `writeLatencyToAnnotation`). A request is counted
//! once, on its `ResponseComplete` (or `Panic`) stage.
use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::matching::{implied_groups, Request, Target};

/// The annotation with the time a request waited in an APF queue (Go's `time.Duration` text).
pub const APF_QUEUE_WAIT: &str = "apiserver.latency.k8s.io/apf-queue-wait";

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct UserInfo {
    #[serde(default)]
    username: String,
    /// `None` when the event records no groups (`omitempty` in Go, or `null`).
    #[serde(default)]
    groups: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    api_group: String,
    #[serde(default)]
    subresource: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct ResponseStatus {
    #[serde(default)]
    code: u16,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    stage: String,
    #[serde(default, rename = "requestURI")]
    request_uri: String,
    #[serde(default)]
    verb: String,
    #[serde(default)]
    user: UserInfo,
    impersonated_user: Option<UserInfo>,
    #[serde(default)]
    user_agent: String,
    object_ref: Option<ObjectRef>,
    response_status: Option<ResponseStatus>,
    #[serde(default)]
    request_received_timestamp: String,
    #[serde(default)]
    stage_timestamp: String,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

/// One request as APF saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditedRequest {
    /// The user APF classified: the impersonated one when the request impersonated.
    pub user: String,
    /// That user's groups as the event records them (what APF matched); [`implied_groups`] only when it records
    /// none.
    pub groups: Vec<String>,
    /// Who authenticated, when another user was impersonated.
    pub impersonator: Option<String>,
    pub verb: String,
    pub target: Target,
    pub user_agent: String,
    /// The HTTP status of the response; 0 when the event has none.
    pub code: u16,
    pub queue_wait: Option<Duration>,
    /// RFC 3339, as the event spells it.
    pub timestamp: String,
    /// When the request came in (`requestReceivedTimestamp`, RFC 3339; empty when absent): about when APF
    /// classified it, so on the FlowSchemas in force then.
    pub received: String,
}

impl AuditedRequest {
    /// Turned away with 429: by APF, or (rarely) by another 429 on the way.
    pub fn rejected(&self) -> bool {
        self.code == 429
    }

    /// The request the matcher classifies.
    pub fn request(&self) -> Request {
        Request {
            user: self.user.clone(),
            groups: self.groups.clone(),
            verb: self.verb.clone(),
            target: self.target.clone(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("not an audit event: {0}")]
    Json(#[from] serde_json::Error),
    #[error("not an audit event: kind {0:?}")]
    Kind(String),
    #[error("an audit event without a stage")]
    NoStage,
}

/// The groups APF matched `user` with: those the event records, as they are. kube-apiserver audits the user info
/// authentication produced (`user`), and the one impersonation made (`impersonatedUser`, k8s.io/apiserver
/// `pkg/endpoints/filters/impersonation.go` `WithImpersonation` then `audit.LogImpersonatedUser`); APF classifies
/// with the same. A user authenticated through a proxy may have only `system:authenticated` although it is a
/// service account: adding the service-account groups would put it in a flow schema APF did not.
///
/// Only an event that records no groups (a hand-trimmed log) gets what kube-apiserver would have given:
/// [`implied_groups`]. For an impersonated user that is what `WithImpersonation` gives when no group is
/// impersonated: a service account's `serviceaccount.MakeGroupNames(namespace)`, then `system:authenticated`
/// (`system:unauthenticated` for `system:anonymous`).
fn groups_of(user: &UserInfo) -> Vec<String> {
    match &user.groups {
        Some(groups) if !groups.is_empty() => groups.clone(),
        _ => implied_groups(&user.username),
    }
}

fn into_request(e: Event) -> AuditedRequest {
    let (who, impersonator) = match e.impersonated_user {
        Some(imp) if !imp.username.is_empty() => (imp, Some(e.user.username.clone())),
        _ => (e.user, None),
    };
    let target = match e.object_ref.filter(|o| !o.resource.is_empty()) {
        Some(o) => Target::Resource {
            api_group: o.api_group,
            resource: o.resource,
            subresource: (!o.subresource.is_empty()).then_some(o.subresource),
            namespace: (!o.namespace.is_empty()).then_some(o.namespace),
        },
        None => Target::NonResource {
            path: e
                .request_uri
                .split('?')
                .next()
                .unwrap_or_default()
                .to_string(),
        },
    };
    AuditedRequest {
        groups: groups_of(&who),
        user: who.username,
        impersonator,
        verb: e.verb,
        target,
        user_agent: e.user_agent,
        code: e.response_status.map_or(0, |s| s.code),
        queue_wait: e
            .annotations
            .get(APF_QUEUE_WAIT)
            .and_then(|d| go_duration(d)),
        timestamp: e.stage_timestamp,
        received: e.request_received_timestamp,
    }
}

/// One Event (a line of `--audit-log-format=json`): the request when this is its last stage, `None` for the earlier
/// stages (`RequestReceived`, `ResponseStarted`), which do not count it.
pub fn parse_event(json: &[u8]) -> Result<Option<AuditedRequest>, AuditError> {
    let e: Event = serde_json::from_slice(json)?;
    if !e.kind.is_empty() && e.kind != "Event" {
        return Err(AuditError::Kind(e.kind));
    }
    if e.stage.is_empty() {
        return Err(AuditError::NoStage);
    }
    Ok(matches!(e.stage.as_str(), "ResponseComplete" | "Panic").then(|| into_request(e)))
}

/// What an `EventList` holds: the requests that completed, and the events of earlier stages (not counted).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventBatch {
    pub requests: Vec<AuditedRequest>,
    pub earlier_stages: u64,
}

/// An `EventList`, as the webhook backend posts it.
pub fn parse_event_list(json: &[u8]) -> Result<EventBatch, AuditError> {
    #[derive(Deserialize)]
    struct List {
        #[serde(default)]
        kind: String,
        #[serde(default)]
        items: Vec<Event>,
    }
    let list: List = serde_json::from_slice(json)?;
    if !list.kind.is_empty() && list.kind != "EventList" {
        return Err(AuditError::Kind(list.kind));
    }
    let mut batch = EventBatch::default();
    for e in list.items {
        if matches!(e.stage.as_str(), "ResponseComplete" | "Panic") {
            batch.requests.push(into_request(e));
        } else {
            batch.earlier_stages += 1;
        }
    }
    Ok(batch)
}

/// Go's `time.Duration` text (`0s`, `850ns`, `1.5µs`, `12.345678ms`, `1m30.5s`, `1h2m3s`); `None` for anything else.
pub fn go_duration(text: &str) -> Option<Duration> {
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut any = false;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_end..];
        total += number * scale;
        any = true;
    }
    // Beyond Duration's range (`9999999999999999999h`) is not a wait: None, not a panic (found by fuzzing).
    any.then(|| Duration::try_from_secs_f64(total).ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An APF rejection as kube-apiserver audits it at level Metadata (fields as in the Kubernetes "Auditing" docs).
    const REJECTED: &str = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"5a1a3b5e-0c2d-4d4f-9c59-2f1f0a6f2b11","stage":"ResponseComplete","requestURI":"/api/v1/pods?limit=500","verb":"list","user":{"username":"system:serviceaccount:monitoring:agent","uid":"3c5b","groups":["system:serviceaccounts","system:serviceaccounts:monitoring","system:authenticated"]},"sourceIPs":["10.0.3.7"],"userAgent":"agent/1.4 (linux/amd64) kubernetes/abc","objectRef":{"resource":"pods","apiVersion":"v1"},"responseStatus":{"metadata":{},"status":"Failure","message":"Too many requests, please try again later.","reason":"TooManyRequests","details":{"retryAfterSeconds":1},"code":429},"requestReceivedTimestamp":"2026-11-24T10:00:01.000100Z","stageTimestamp":"2026-11-24T10:00:16.000200Z","annotations":{"apiserver.latency.k8s.io/apf-queue-wait":"15.000012s","authorization.k8s.io/decision":"allow"}}"#;

    #[test]
    fn a_rejection_is_read_as_apf_saw_it() {
        let r = parse_event(REJECTED.as_bytes()).unwrap().unwrap();
        assert_eq!(r.user, "system:serviceaccount:monitoring:agent");
        assert!(r.rejected());
        assert_eq!(r.verb, "list");
        assert_eq!(
            r.target,
            Target::Resource {
                api_group: String::new(),
                resource: "pods".into(),
                subresource: None,
                namespace: None
            }
        );
        assert_eq!(r.queue_wait, Some(Duration::from_micros(15_000_012)));
        assert_eq!(r.user_agent, "agent/1.4 (linux/amd64) kubernetes/abc");
        // Classified when it came in, answered 15 s later.
        assert_eq!(r.received, "2026-11-24T10:00:01.000100Z");
        assert_eq!(r.timestamp, "2026-11-24T10:00:16.000200Z");
        // The earlier stage of the same request does not count it.
        let received = REJECTED.replace("ResponseComplete", "RequestReceived");
        assert_eq!(parse_event(received.as_bytes()).unwrap(), None);
    }

    #[test]
    fn an_impersonated_request_belongs_to_the_impersonated_user() {
        let e = r#"{"kind":"Event","stage":"ResponseComplete","requestURI":"/apis/apps/v1/namespaces/ci/deployments/web/scale","verb":"update","user":{"username":"admin","groups":["system:masters"]},"impersonatedUser":{"username":"system:serviceaccount:ci:runner"},"objectRef":{"resource":"deployments","namespace":"ci","name":"web","apiGroup":"apps","subresource":"scale"},"responseStatus":{"code":200}}"#;
        let r = parse_event(e.as_bytes()).unwrap().unwrap();
        assert_eq!(r.user, "system:serviceaccount:ci:runner");
        assert_eq!(r.impersonator.as_deref(), Some("admin"));
        // It records no groups: those impersonation gives a service account; system:masters was the
        // impersonator's, not its.
        assert_eq!(
            r.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:ci",
                "system:authenticated"
            ]
        );
        assert!(!r.rejected());
        assert!(
            matches!(&r.target, Target::Resource { subresource: Some(s), namespace: Some(n), .. } if s == "scale" && n == "ci")
        );
    }

    /// OpenShift's Prometheus scraping kube-apiserver through a proxy: a service account whose event records only
    /// `system:authenticated`, which is all APF matched it with.
    const PROXIED_SA: &str = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","requestURI":"/metrics","verb":"get","user":{"username":"system:serviceaccount:openshift-monitoring:prometheus-k8s","groups":["system:authenticated"]},"userAgent":"Prometheus/2.55.1","responseStatus":{"code":200}}"#;

    #[test]
    fn the_groups_an_event_records_are_used_as_they_are() {
        let r = parse_event(PROXIED_SA.as_bytes()).unwrap().unwrap();
        assert_eq!(
            r.user,
            "system:serviceaccount:openshift-monitoring:prometheus-k8s"
        );
        assert_eq!(r.groups, ["system:authenticated"]);
        // No groups recorded (the key cut out, empty, null): those kube-apiserver's authenticators give.
        let implied = [
            "system:serviceaccounts",
            "system:serviceaccounts:openshift-monitoring",
            "system:authenticated",
        ];
        for none in ["", r#","groups":[]"#, r#","groups":null"#] {
            let e = PROXIED_SA.replace(r#","groups":["system:authenticated"]"#, none);
            let r = parse_event(e.as_bytes()).unwrap().unwrap();
            assert_eq!(r.groups, implied, "{e}");
        }
        // An impersonated user's recorded groups are its own, as they are.
        let imp = PROXIED_SA.replace(
            r#""userAgent""#,
            r#""impersonatedUser":{"username":"system:serviceaccount:ci:runner","groups":["ci-bots","system:authenticated"]},"userAgent""#,
        );
        let r = parse_event(imp.as_bytes()).unwrap().unwrap();
        assert_eq!(r.user, "system:serviceaccount:ci:runner");
        assert_eq!(r.groups, ["ci-bots", "system:authenticated"]);
    }

    #[test]
    fn non_resource_requests_a_batch_and_bad_input() {
        let e = r#"{"kind":"Event","stage":"ResponseComplete","requestURI":"/livez?verbose","verb":"get","user":{"username":"system:anonymous","groups":["system:unauthenticated"]},"responseStatus":{"code":200}}"#;
        let r = parse_event(e.as_bytes()).unwrap().unwrap();
        assert_eq!(
            r.target,
            Target::NonResource {
                path: "/livez".into()
            }
        );
        assert_eq!(r.groups, ["system:unauthenticated"]);
        let list = format!(
            r#"{{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{REJECTED},{}]}}"#,
            REJECTED.replace("ResponseComplete", "RequestReceived")
        );
        let batch = parse_event_list(list.as_bytes()).unwrap();
        assert_eq!((batch.requests.len(), batch.earlier_stages), (1, 1));
        assert!(batch.requests[0].rejected());
        assert!(parse_event(b"{not json").is_err());
        assert!(parse_event(br#"{"kind":"Event","verb":"get"}"#).is_err());
        assert!(parse_event(br#"{"kind":"Status","stage":"ResponseComplete"}"#).is_err());
        assert!(parse_event_list(br#"{"kind":"Event","items":[]}"#).is_err());
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration("0s"), Some(Duration::ZERO));
        assert_eq!(go_duration("850ns"), Some(Duration::from_nanos(850)));
        assert_eq!(go_duration("1.5µs"), Some(Duration::from_nanos(1500)));
        assert_eq!(
            go_duration("12.345678ms"),
            Some(Duration::from_nanos(12_345_678))
        );
        assert_eq!(go_duration("1m30.5s"), Some(Duration::from_millis(90_500)));
        assert_eq!(go_duration("1h2m3s"), Some(Duration::from_secs(3723)));
        for bad in [
            "",
            "s",
            "5",
            "5x",
            "-1s",
            "1..2s",
            "NaNs",
            "99999999999999999999999h",
        ] {
            assert_eq!(go_duration(bad), None, "{bad}");
        }
    }
}
