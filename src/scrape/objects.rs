//! The flowcontrol objects of one replica: listed from the newest API version it serves, then followed with a watch
//! from the list's `resourceVersion`, as client-go's reflector and kube-rs' `watcher` follow objects. A FlowSchema
//! or priority level applied is known within a second of its write, not at the next list. A watch the server ends
//! (its timeout) is opened again from the last version seen; any other end is said in [`WatchEnd`], and the
//! replica's loop (`daemon/objects.rs`) decides when to list again.
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use tokio::sync::watch;

use super::{fetch, ScrapeError};
use crate::errors::chain_of;
use crate::targets::Target;
use apf::endpoints;
use apf::model::{self, FlowcontrolObjects};

/// The watch's `timeoutSeconds`: what kube-rs asks for (client-go picks 5 to 10 minutes), under the 30 minutes at
/// which kube-apiserver ends a watch anyway (`--min-request-timeout`).
const WATCH_TIMEOUT_SECONDS: u64 = 290;

/// A watch the server ends sooner than this, with no error, is not a watch that works (a proxy that does not stream
/// or closes it, a server that ignores `watch`): opening it again at once would be a tight loop of requests, so it
/// ends as a failure, backed off, whatever it sent first.
const SHORTEST_WATCH: Duration = Duration::from_secs(5);

/// A watch silent for this long (no event, no bookmark: kube-apiserver sends one about every minute to a watch that
/// asks) is taken for a connection gone dead without a reset (a NAT or firewall that dropped it) and opened again
/// from the version reached; until then a change would go unseen.
const WATCH_IDLE: Duration = Duration::from_secs(120);

/// One resource as listed: where it is served, and the version its watch starts from.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedResource {
    pub path: String,
    /// The list's `metadata.resourceVersion`; `None` when it carried none (nothing to watch from).
    pub resource_version: Option<String>,
}

/// The objects a list found, and where each resource's watch starts.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedObjects {
    pub objects: FlowcontrolObjects,
    pub priority_levels: ListedResource,
    pub flow_schemas: ListedResource,
}

/// The PriorityLevelConfigurations and FlowSchemas, from the newest API version the replica serves (one RBAC
/// rule grants both), one after the other as the round's other requests.
pub(super) async fn list(target: &Target, max_body: u64) -> Result<ListedObjects, ScrapeError> {
    let (pl_path, pl) =
        fetch_flowcontrol_list(target, endpoints::PRIORITY_LEVEL_CONFIGURATIONS, max_body).await?;
    let (fs_path, fs) = fetch_flowcontrol_list(target, endpoints::FLOW_SCHEMAS, max_body).await?;
    Ok(ListedObjects {
        objects: FlowcontrolObjects {
            priority_levels: model::parse_priority_level_configurations(&pl)
                .map_err(|e| ScrapeError::Parse(format!("{pl_path}: {e}")))?,
            flow_schemas: model::parse_flow_schemas(&fs)
                .map_err(|e| ScrapeError::Parse(format!("{fs_path}: {e}")))?,
        },
        priority_levels: ListedResource {
            resource_version: model::resource_version(&pl),
            path: pl_path,
        },
        flow_schemas: ListedResource {
            resource_version: model::resource_version(&fs),
            path: fs_path,
        },
    })
}

/// The list of a flowcontrol `resource` (`prioritylevelconfigurations`, `flowschemas`) from the newest API version
/// the replica serves (k8s.io/api `flowcontrol/` lifecycle; the Deprecated API Migration Guide): its path and body.
pub async fn fetch_flowcontrol_list(
    target: &Target,
    resource: &str,
    max_body: u64,
) -> Result<(String, Vec<u8>), ScrapeError> {
    let mut last = None;
    for version in endpoints::FLOWCONTROL_READ_VERSIONS {
        let path = endpoints::flowcontrol_path(version, resource);
        let mut body = Vec::new();
        match fetch(target, &path, max_body, &mut body).await {
            Ok(()) => return Ok((path, body)),
            // Not served in this version: try an older one.
            Err(ScrapeError::Http {
                status: 404,
                detail,
            }) => {
                last = Some(ScrapeError::Http {
                    status: 404,
                    detail,
                });
            }
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or(ScrapeError::Http {
        status: 404,
        detail: String::new(),
    }))
}

/// Why the watch of a replica's objects ended.
#[derive(Debug, Clone, PartialEq)]
pub enum WatchEnd {
    /// 410 Gone: the version it would start from is too old (compacted); a new list gives a new one.
    Expired,
    /// Not allowed (403: RBAC grants `list` without `watch`) or not served (404, 405), or nothing to watch from:
    /// the objects are followed by listing them.
    Unavailable(ScrapeError),
    /// Anything else: the connection, a 5xx or 429, an event that does not read.
    Failed(ScrapeError),
}

impl WatchEnd {
    fn of(error: ScrapeError) -> Self {
        match error {
            ScrapeError::Http { status: 410, .. } => WatchEnd::Expired,
            ScrapeError::Http {
                status: 403..=405, ..
            } => WatchEnd::Unavailable(error),
            other => WatchEnd::Failed(other),
        }
    }
}

/// Follows `listed` until the watch of either resource ends for good, publishing the objects on `tx` at each
/// change. An event line longer than `max_event_bytes` ends it (`scrape.max_body_bytes`: a whole list fits in it,
/// one object does too).
pub async fn follow(
    target: Target,
    listed: ListedObjects,
    max_event_bytes: u64,
    tx: watch::Sender<Arc<FlowcontrolObjects>>,
) -> WatchEnd {
    let levels = Followed::new(
        listed.priority_levels,
        listed.objects.priority_levels,
        |l| &l.name,
        model::parse_priority_level_configuration,
    );
    let schemas = Followed::new(
        listed.flow_schemas,
        listed.objects.flow_schemas,
        |s| &s.name,
        model::parse_flow_schema,
    );
    let levels = levels.follow(&target, max_event_bytes, |items| {
        publish(&tx, |o| o.priority_levels = items)
    });
    let schemas = schemas.follow(&target, max_event_bytes, |items| {
        publish(&tx, |o| o.flow_schemas = items)
    });
    tokio::select! {
        end = levels => end,
        end = schemas => end,
    }
}

/// The objects with one resource's items replaced: a new value, so readers of the old one keep theirs.
fn publish(
    tx: &watch::Sender<Arc<FlowcontrolObjects>>,
    change: impl FnOnce(&mut FlowcontrolObjects),
) {
    tx.send_modify(|objects| {
        let mut next = FlowcontrolObjects::clone(objects);
        change(&mut next);
        *objects = Arc::new(next);
    });
}

/// One watch event, as kube-apiserver streams them (one JSON object a line).
#[derive(serde::Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    object: serde_json::Value,
}

/// The items of one resource, by name, and the version they are at.
struct Followed<T> {
    at: ListedResource,
    items: BTreeMap<String, T>,
    parse: fn(&serde_json::Value) -> Result<T, serde_json::Error>,
}

impl<T: Clone> Followed<T> {
    fn new(
        at: ListedResource,
        items: Vec<T>,
        name: fn(&T) -> &String,
        parse: fn(&serde_json::Value) -> Result<T, serde_json::Error>,
    ) -> Self {
        Self {
            at,
            items: items.into_iter().map(|i| (name(&i).clone(), i)).collect(),
            parse,
        }
    }

    /// Watches from the version reached, again each time the server ends the watch, until it ends otherwise.
    async fn follow(
        mut self,
        target: &Target,
        max_event_bytes: u64,
        publish: impl Fn(Vec<T>),
    ) -> WatchEnd {
        loop {
            let Some(version) = self.at.resource_version.clone() else {
                return WatchEnd::Unavailable(ScrapeError::Parse(format!(
                    "{}: the list carries no resourceVersion to watch from",
                    self.at.path
                )));
            };
            let path = endpoints::watch_path(&self.at.path, &version, WATCH_TIMEOUT_SECONDS);
            let opened = tokio::time::Instant::now();
            let mut body = match super::open(target, &path).await {
                Ok(body) => body,
                Err(e) => return WatchEnd::of(e),
            };
            // The server ends the watch at its timeout; one that does not, or that goes silent, is given up and opened
            // again.
            let deadline = opened + Duration::from_secs(WATCH_TIMEOUT_SECONDS) + target.timeout * 2;
            let mut line: Vec<u8> = Vec::new();
            loop {
                let silent = tokio::time::Instant::now() + WATCH_IDLE;
                let frame = match tokio::time::timeout_at(deadline.min(silent), body.frame()).await
                {
                    Err(_) | Ok(None) => break,
                    Ok(Some(Err(e))) => return WatchEnd::Failed(ScrapeError::Body(chain_of(&e))),
                    Ok(Some(Ok(frame))) => frame,
                };
                let Ok(chunk) = frame.into_data() else {
                    continue;
                };
                let mut changed = false;
                let mut rest = &chunk[..];
                while let Some(end) = rest.iter().position(|b| *b == b'\n') {
                    line.extend_from_slice(&rest[..end]);
                    rest = &rest[end + 1..];
                    match self.apply(&line) {
                        Ok(c) => changed |= c,
                        Err(e) => return e,
                    }
                    line.clear();
                }
                line.extend_from_slice(rest);
                if line.len() as u64 > max_event_bytes {
                    return WatchEnd::Failed(ScrapeError::TooLarge {
                        limit: max_event_bytes,
                    });
                }
                if changed {
                    publish(self.items.values().cloned().collect());
                }
            }
            if opened.elapsed() < SHORTEST_WATCH {
                return WatchEnd::Failed(ScrapeError::Body(format!(
                    "{path}: the watch ended within {}s of its start: the server (or a proxy) does not stream it, or \
                     closes it",
                    SHORTEST_WATCH.as_secs()
                )));
            }
        }
    }

    /// One event line: whether the items changed, or why the watch ends.
    fn apply(&mut self, line: &[u8]) -> Result<bool, WatchEnd> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(false);
        }
        let unreadable = |e: String| {
            WatchEnd::Failed(ScrapeError::Parse(format!(
                "{}: a watch event: {e}",
                self.at.path
            )))
        };
        let event: Event = serde_json::from_slice(line).map_err(|e| unreadable(e.to_string()))?;
        let metadata = &event.object["metadata"];
        if let Some(version) = metadata["resourceVersion"].as_str() {
            self.at.resource_version = Some(version.to_string());
        }
        match event.kind.as_str() {
            "ADDED" | "MODIFIED" => {
                let item = (self.parse)(&event.object).map_err(|e| unreadable(e.to_string()))?;
                let name = metadata["name"].as_str().unwrap_or_default().to_string();
                self.items.insert(name, item);
                Ok(true)
            }
            "DELETED" => {
                let name = metadata["name"].as_str().unwrap_or_default();
                Ok(self.items.remove(name).is_some())
            }
            // Only the version moves on.
            "BOOKMARK" => Ok(false),
            // A Status: 410 when the version is too old, as kube-apiserver sends it in a watch's body.
            "ERROR" => {
                let status = event.object["code"]
                    .as_u64()
                    .and_then(|c| u16::try_from(c).ok())
                    .unwrap_or(500);
                let detail = event.object["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                Err(WatchEnd::of(ScrapeError::Http { status, detail }))
            }
            other => Err(unreadable(format!("unknown type {other:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn followed() -> Followed<apf::FlowSchema> {
        Followed::new(
            ListedResource {
                path: "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas".into(),
                resource_version: Some("10".into()),
            },
            Vec::new(),
            |s| &s.name,
            model::parse_flow_schema,
        )
    }

    fn event(kind: &str, name: &str, version: &str, level: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({"type": kind, "object": {
            "metadata": {"name": name, "resourceVersion": version},
            "spec": {"priorityLevelConfiguration": {"name": level}, "matchingPrecedence": 800}}}))
        .unwrap()
    }

    #[test]
    fn events_change_the_items_and_move_the_version_on() {
        let mut f = followed();
        assert_eq!(f.apply(&event("ADDED", "mine", "11", "own")), Ok(true));
        assert_eq!(f.items["mine"].priority_level, "own");
        assert_eq!(f.apply(&event("MODIFIED", "mine", "12", "other")), Ok(true));
        assert_eq!(f.items["mine"].priority_level, "other");
        let bookmark = br#"{"type":"BOOKMARK","object":{"kind":"FlowSchema","metadata":{"resourceVersion":"20"}}}"#;
        assert_eq!(f.apply(bookmark), Ok(false));
        assert_eq!(f.at.resource_version.as_deref(), Some("20"));
        assert_eq!(f.apply(&event("DELETED", "mine", "21", "other")), Ok(true));
        assert!(f.items.is_empty());
        assert_eq!(f.apply(&event("DELETED", "unknown", "22", "x")), Ok(false));
        assert_eq!(f.at.resource_version.as_deref(), Some("22"));
        assert_eq!(f.apply(b"  "), Ok(false));
    }

    #[test]
    fn an_error_event_or_an_unreadable_line_ends_the_watch() {
        let mut f = followed();
        let gone = br#"{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old resource version: 1 (5)"}}"#;
        assert_eq!(f.apply(gone), Err(WatchEnd::Expired));
        let forbidden = br#"{"type":"ERROR","object":{"kind":"Status","code":403,"message":"no"}}"#;
        assert!(matches!(f.apply(forbidden), Err(WatchEnd::Unavailable(_))));
        let Err(WatchEnd::Failed(ScrapeError::Parse(why))) = f.apply(b"{\"type\":") else {
            panic!("an unreadable line is a failure");
        };
        assert!(why.contains("flowschemas: a watch event"), "{why}");
        // An object that is not a FlowSchema is not taken as one.
        let wrong = br#"{"type":"ADDED","object":{"metadata":{"name":"x"},"spec":{"rules":"no"}}}"#;
        assert!(matches!(f.apply(wrong), Err(WatchEnd::Failed(_))));
        assert!(f.items.is_empty());
    }
}
