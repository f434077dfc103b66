//! The Kubernetes API of the simulated cluster: discovery, and list, get and watch of every served resource (create,
//! update, patch and delete of Leases and flowcontrol objects in [`super::writes`]), at the paths and in the JSON of
//! kube-apiserver (Kubernetes API Concepts: "Resource URIs", "Efficient detection of changes", and the Status kind
//! of errors).
//!
//! Paths: `/api`, `/api/v1`, `/apis`, `/apis/GROUP`, `/apis/GROUP/VERSION`, and below `/api/v1` or
//! `/apis/GROUP/VERSION`: `RESOURCE` (every namespace, or a cluster-scoped collection), `RESOURCE/NAME`,
//! `namespaces/NS/RESOURCE` and `namespaces/NS/RESOURCE/NAME`. A list or watch honours `labelSelector` and
//! `fieldSelector`; `?watch=1` streams one JSON watch event per line. `limit` is ignored: every list comes whole.

use super::admission::{self, FieldValidation};
use super::discovery::{self, Resource};
use super::discovery::{SUBJECT_ACCESS_REVIEWS, TOKEN_REVIEWS};
use super::reviews::{self, Policy};
use super::selector::Selector;
use super::status::ApiError;
use super::store::{Change, EventType, Gvr, ObjectKey, Store};
use super::{table, writes};
use apf::endpoints::PRIORITY_LEVEL_CONFIGURATIONS;
use apf::KubeVersion;
use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

/// kube-apiserver ends a watch that asked for no timeout after --min-request-timeout (1800 s) or up to twice that.
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

/// What every API handler of one replica reads: the cluster's shared store, and this replica's own facts.
#[derive(Clone)]
pub(super) struct ApiContext {
    pub store: Store,
    pub version: KubeVersion,
    resources: Arc<Vec<Resource>>,
    /// `host:port` clients reach this replica at (`/api` says it); `None`: the request's Host header.
    server_address: Option<String>,
    /// Cancelled when the replica stops: its watches end, as a real apiserver's do when it goes away (never, for a
    /// replica served on its own).
    stopping: CancellationToken,
    /// Who the cluster's tokens are and what they may do, for TokenReviews and SubjectAccessReviews.
    policy: Arc<Policy>,
}

impl ApiContext {
    pub fn new(
        store: Store,
        version: KubeVersion,
        server_address: Option<String>,
        stopping: CancellationToken,
    ) -> Self {
        ApiContext {
            store,
            version,
            resources: Arc::new(discovery::resources(version)),
            server_address,
            stopping,
            policy: Arc::new(Policy::default()),
        }
    }

    /// The users and grants reviews are answered from.
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = Arc::new(policy);
        self
    }

    fn find(&self, group: &str, version: &str, resource: &str) -> Option<Resource> {
        discovery::find(&self.resources, group, version, resource)
    }
}

/// The discovery documents and the resources, on `/api...` and `/apis...`.
pub(super) fn routes(ctx: ApiContext) -> Router {
    Router::new()
        .route("/api", get(core_versions))
        .route("/api/", get(core_versions))
        .route("/api/{*rest}", any(core))
        .route("/apis", get(group_list))
        .route("/apis/", get(group_list))
        .route("/apis/{*rest}", any(named))
        .with_state(ctx)
}

async fn core_versions(State(ctx): State<ApiContext>, headers: HeaderMap) -> Response {
    let address = ctx.server_address.clone().unwrap_or_else(|| {
        headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default()
            .to_string()
    });
    Json(discovery::api_versions(&address)).into_response()
}

async fn group_list(State(ctx): State<ApiContext>) -> Response {
    Json(discovery::api_group_list(ctx.version)).into_response()
}

/// One request below `/api` or `/apis`, with what a handler needs of it.
struct Call {
    method: Method,
    query: HashMap<String, String>,
    headers: HeaderMap,
    body: Bytes,
}

impl<S: Send + Sync> axum::extract::FromRequest<S> for Call {
    type Rejection = Response;

    async fn from_request(request: axum::extract::Request, state: &S) -> Result<Self, Response> {
        let (mut parts, body) = request.into_parts();
        let Query(query) = Query::<HashMap<String, String>>::from_request_parts(&mut parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let body = Bytes::from_request(
            axum::extract::Request::from_parts(parts.clone(), body),
            state,
        )
        .await
        .map_err(IntoResponse::into_response)?;
        Ok(Call {
            method: parts.method,
            query,
            headers: parts.headers,
            body,
        })
    }
}

async fn core(State(ctx): State<ApiContext>, Path(rest): Path<String>, call: Call) -> Response {
    let segments: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        [version] => read_only(&call.method, || {
            discovery::api_resource_list(ctx.version, "", version)
        }),
        [version, rest @ ..] => resource_call(&ctx, "", version, rest, call).await,
        [] => core_versions(State(ctx), call.headers).await,
    }
}

async fn named(State(ctx): State<ApiContext>, Path(rest): Path<String>, call: Call) -> Response {
    let segments: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        [] => group_list(State(ctx)).await,
        [group] => read_only(&call.method, || discovery::api_group(ctx.version, group)),
        [group, version] => read_only(&call.method, || {
            discovery::api_resource_list(ctx.version, group, version)
        }),
        [group, version, rest @ ..] => resource_call(&ctx, group, version, rest, call).await,
    }
}

/// A discovery document: GET only, 404 when the cluster does not serve what the path names.
fn read_only(method: &Method, doc: impl FnOnce() -> Option<Value>) -> Response {
    if method != Method::GET && method != Method::HEAD {
        return ApiError::MethodNotAllowed.into_response();
    }
    match doc() {
        Some(d) => Json(d).into_response(),
        None => ApiError::no_such_path().into_response(),
    }
}

/// What the path below the group version names.
struct Target<'a> {
    resource: &'a str,
    namespace: Option<&'a str>,
    name: Option<&'a str>,
}

fn target<'a>(segments: &[&'a str]) -> Option<Target<'a>> {
    let t = |resource, namespace, name| {
        Some(Target {
            resource,
            namespace,
            name,
        })
    };
    match *segments {
        ["namespaces", ns, resource] => t(resource, Some(ns), None),
        ["namespaces", ns, resource, name] => t(resource, Some(ns), Some(name)),
        [resource] => t(resource, None, None),
        [resource, name] => t(resource, None, Some(name)),
        _ => None,
    }
}

async fn resource_call(
    ctx: &ApiContext,
    group: &str,
    version: &str,
    rest: &[&str],
    call: Call,
) -> Response {
    match dispatch(ctx, group, version, rest, call).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn dispatch(
    ctx: &ApiContext,
    group: &str,
    version: &str,
    rest: &[&str],
    call: Call,
) -> Result<Response, ApiError> {
    let t = target(rest).ok_or_else(ApiError::no_such_path)?;
    let r = ctx
        .find(group, version, t.resource)
        .ok_or_else(ApiError::no_such_path)?;
    // A namespaced resource has no objects outside a namespace, a cluster-scoped one none inside.
    match (r.namespaced, t.namespace, t.name) {
        (false, Some(_), _) | (true, None, Some(_)) => return Err(ApiError::no_such_path()),
        _ => {}
    }
    let verb = match (&call.method, t.name) {
        (&Method::GET, None) if is_true(call.query.get("watch")) => "watch",
        (&Method::GET, None) => "list",
        (&Method::GET, Some(_)) => "get",
        (&Method::POST, None) => "create",
        (&Method::PUT, Some(_)) => "update",
        (&Method::PATCH, Some(_)) => "patch",
        (&Method::DELETE, Some(_)) => "delete",
        _ => return Err(ApiError::MethodNotAllowed),
    };
    if !r.allows(verb) {
        return Err(ApiError::MethodNotAllowed);
    }
    let namespace = t.namespace.unwrap_or("");
    // A dry run would be written here all the same: refused rather than done.
    if verb != "list" && verb != "get" && verb != "watch" && call.query.contains_key("dryRun") {
        return Err(ApiError::BadRequest(
            "dryRun is not supported by the simulated apiserver; send the request without it"
                .into(),
        ));
    }
    // Reviews are answered from the policy and never stored.
    match r.gvr {
        TOKEN_REVIEWS => {
            let answer = reviews::token_review(&ctx.policy, &call.body)?;
            return Ok((StatusCode::CREATED, Json(answer)).into_response());
        }
        SUBJECT_ACCESS_REVIEWS => {
            let answer = reviews::subject_access_review(&ctx.policy, &call.body)?;
            return Ok((StatusCode::CREATED, Json(answer)).into_response());
        }
        _ => {}
    }
    match (verb, t.name) {
        ("watch", _) => watch_response(ctx, &r, t.namespace, &call),
        ("list", _) => list(ctx, &r, t.namespace, &call),
        ("get", Some(name)) => {
            let object = ctx
                .store
                .get(&super::objects::key(r.gvr, namespace, name))
                .ok_or_else(|| ApiError::object_not_found(&r, name))?;
            if let Some(printer) = TablePrinter::for_call(ctx, &r, &call) {
                return Ok(Json(printer.print(std::slice::from_ref(&object), None)).into_response());
            }
            Ok(Json(object).into_response())
        }
        ("create" | "update" | "patch", _) => {
            let validation =
                FieldValidation::parse(call.query.get("fieldValidation").map(String::as_str))?;
            let version = ctx.version;
            let flowcontrol = admission::applies(&r);
            let admit = |old: Option<&Value>, object: &mut Value| {
                if flowcontrol {
                    admission::admit(version, &r, validation, old, object)
                } else {
                    writes::admit_any(old, object)
                }
            };
            let manager = writes::manager_name(
                call.query.get("fieldManager").map(String::as_str),
                header_str(&call.headers, header::USER_AGENT),
            );
            let (object, code, warnings) = match (verb, t.name) {
                ("update", Some(name)) => {
                    let (o, w) = writes::update(
                        &ctx.store, &r, namespace, name, &call.body, &manager, &admit,
                    )?;
                    (o, StatusCode::OK, w)
                }
                ("patch", Some(name)) => {
                    let request = writes::PatchRequest {
                        content_type: header_str(&call.headers, header::CONTENT_TYPE)
                            .unwrap_or_default(),
                        field_manager: call.query.get("fieldManager").map(String::as_str),
                        user_agent: header_str(&call.headers, header::USER_AGENT),
                        force: is_true(call.query.get("force")),
                    };
                    let (o, created, w) = writes::patch(
                        &ctx.store, &r, namespace, name, &request, &call.body, &admit,
                    )?;
                    let code = if created {
                        StatusCode::CREATED
                    } else {
                        StatusCode::OK
                    };
                    (o, code, w)
                }
                _ => {
                    let (o, w) =
                        writes::create(&ctx.store, &r, namespace, &call.body, &manager, &admit)?;
                    (o, StatusCode::CREATED, w)
                }
            };
            if flowcontrol {
                let name = object["metadata"]["name"].as_str().unwrap_or_default();
                admission::propagate(&ctx.store, version, &r, name);
            }
            let mut response = (code, Json(object)).into_response();
            for w in warnings {
                // RFC 7234 warn-code 299 ("miscellaneous persistent warning"), as kube-apiserver sends them.
                if let Ok(value) = header::HeaderValue::from_str(&format!("299 - {w:?}")) {
                    response.headers_mut().append(header::WARNING, value);
                }
            }
            Ok(response)
        }
        ("delete", Some(name)) => {
            let status = writes::delete(&ctx.store, &r, namespace, name)?;
            if admission::applies(&r) {
                admission::propagate(&ctx.store, ctx.version, &r, name);
            }
            Ok(Json(status).into_response())
        }
        _ => Err(ApiError::MethodNotAllowed),
    }
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// `true`, `1` and the other spellings Go's strconv.ParseBool accepts.
fn is_true(v: Option<&String>) -> bool {
    matches!(
        v.map(String::as_str),
        Some("1" | "t" | "T" | "true" | "TRUE" | "True")
    )
}

/// The label and field selectors of a list or watch.
fn selectors(query: &HashMap<String, String>) -> Result<(Selector, Selector), ApiError> {
    let labels = Selector::labels(query.get("labelSelector").map_or("", String::as_str))?;
    let fields = Selector::fields(query.get("fieldSelector").map_or("", String::as_str))?;
    Ok((labels, fields))
}

/// A list's items leave out kind and apiVersion: the list names them once.
fn list_item(mut object: Value) -> Value {
    if let Some(obj) = object.as_object_mut() {
        obj.remove("kind");
        obj.remove("apiVersion");
    }
    object
}

/// How a request that asks for Tables gets its objects printed (list, get and each watch event).
struct TablePrinter {
    resource: Resource,
    /// The kind's columns at this version, built once per request (a watch prints every event with them).
    columns: Vec<Value>,
    include_object: String,
    /// The priority levels, for the FlowSchemas' MissingPL column.
    levels: Vec<String>,
}

impl TablePrinter {
    /// A printer when the request asks for Tables and the kind has columns.
    fn for_call(ctx: &ApiContext, r: &Resource, call: &Call) -> Option<Self> {
        let accept = call.headers.get(header::ACCEPT)?.to_str().ok()?;
        if !table::wanted(accept) {
            return None;
        }
        let columns = table::columns(r, ctx.version)?;
        let levels: Vec<String> = if r.kind == "FlowSchema" {
            let plc = Gvr {
                resource: PRIORITY_LEVEL_CONFIGURATIONS,
                ..r.gvr
            };
            ctx.store
                .list(plc, None)
                .0
                .iter()
                .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string))
                .collect()
        } else {
            Vec::new()
        };
        Some(TablePrinter {
            resource: *r,
            columns,
            include_object: call
                .query
                .get("includeObject")
                .cloned()
                .unwrap_or_else(|| "Metadata".into()),
            levels,
        })
    }

    fn print(&self, objects: &[Value], resource_version: Option<String>) -> Value {
        table::table(
            &self.resource,
            &self.columns,
            objects,
            resource_version,
            &self.include_object,
            &self.levels,
        )
    }
}

fn list(
    ctx: &ApiContext,
    r: &Resource,
    namespace: Option<&str>,
    call: &Call,
) -> Result<Response, ApiError> {
    let (labels, fields) = selectors(&call.query)?;
    let (items, revision) = ctx.store.list(r.gvr, namespace);
    let items: Vec<Value> = items
        .into_iter()
        .filter(|o| labels.matches(o) && fields.matches(o))
        .collect();
    if let Some(printer) = TablePrinter::for_call(ctx, r, call) {
        return Ok(Json(printer.print(&items, Some(revision.to_string()))).into_response());
    }
    let items: Vec<Value> = items.into_iter().map(list_item).collect();
    Ok(Json(json!({
        "kind": format!("{}List", r.kind),
        "apiVersion": r.api_version(),
        "metadata": {"resourceVersion": revision.to_string()},
        "items": items,
    }))
    .into_response())
}

/// What one watch sends: the changes to its resource, in its namespace, that its selectors accept.
struct WatchFilter {
    gvr: Gvr,
    namespace: Option<String>,
    labels: Selector,
    fields: Selector,
    /// Each event's object a one-row Table, when the watch asked for Tables (kubectl get -w).
    printer: Option<TablePrinter>,
}

impl WatchFilter {
    fn covers(&self, key: &ObjectKey) -> bool {
        key.gvr == self.gvr
            && self
                .namespace
                .as_ref()
                .is_none_or(|ns| &key.namespace == ns)
    }

    fn accepts(&self, object: &Value) -> bool {
        self.labels.matches(object) && self.fields.matches(object)
    }

    /// The event a change makes for this watch, if any. An object that stops matching the selectors is DELETED
    /// for the watch, one that starts matching ADDED, as kube-apiserver's watch cache reports them.
    fn event(&self, c: &Change) -> Option<Value> {
        if !self.covers(&c.key) {
            return None;
        }
        let now = self.accepts(&c.object);
        let before = c.previous.as_ref().is_some_and(|p| self.accepts(p));
        let (kind, object) = match c.kind {
            EventType::Added if now => (EventType::Added, c.object.clone()),
            EventType::Modified if now && before => (EventType::Modified, c.object.clone()),
            EventType::Modified if now => (EventType::Added, c.object.clone()),
            EventType::Modified if before => {
                let mut gone = c.previous.clone().unwrap_or(Value::Null);
                if let Some(meta) = gone.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.insert("resourceVersion".into(), json!(c.revision.to_string()));
                }
                (EventType::Deleted, gone)
            }
            EventType::Deleted if before => (EventType::Deleted, c.object.clone()),
            _ => return None,
        };
        let object = match &self.printer {
            Some(p) => {
                let rv = object["metadata"]["resourceVersion"]
                    .as_str()
                    .map(str::to_string);
                p.print(std::slice::from_ref(&object), rv)
            }
            None => object,
        };
        Some(json!({"type": kind.as_str(), "object": object}))
    }
}

fn event_line(event: &Value) -> Bytes {
    let mut line = serde_json::to_vec(event).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

/// A watch's state between two events it sends.
struct WatchStream {
    filter: WatchFilter,
    replay: VecDeque<Arc<Change>>,
    live: broadcast::Receiver<Arc<Change>>,
    deadline: tokio::time::Instant,
    stopping: CancellationToken,
}

impl WatchStream {
    async fn next_line(&mut self) -> Option<Bytes> {
        while let Some(c) = self.replay.pop_front() {
            if let Some(e) = self.filter.event(&c) {
                return Some(event_line(&e));
            }
        }
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(self.deadline) => return None,
                _ = self.stopping.cancelled() => return None,
                change = self.live.recv() => match change {
                    Ok(c) => {
                        if let Some(e) = self.filter.event(&c) {
                            return Some(event_line(&e));
                        }
                    }
                    // Fallen behind, or the store is gone: end the watch; the client lists and watches again.
                    Err(_) => return None,
                },
            }
        }
    }
}

fn watch_response(
    ctx: &ApiContext,
    r: &Resource,
    namespace: Option<&str>,
    call: &Call,
) -> Result<Response, ApiError> {
    let query = &call.query;
    let (labels, fields) = selectors(query)?;
    let from = match query.get("resourceVersion").map(String::as_str) {
        None | Some("") => None,
        Some(rv) => Some(
            rv.parse::<u64>()
                .map_err(|_| ApiError::BadRequest(format!("invalid resource version: {rv:?}")))?,
        ),
    };
    let timeout = match query.get("timeoutSeconds") {
        Some(t) => Duration::from_secs(
            t.parse::<u64>()
                .map_err(|_| ApiError::BadRequest(format!("invalid timeoutSeconds: {t:?}")))?,
        ),
        None => DEFAULT_WATCH_TIMEOUT,
    };
    let filter = WatchFilter {
        gvr: r.gvr,
        namespace: namespace.map(str::to_string),
        labels,
        fields,
        printer: TablePrinter::for_call(ctx, r, call),
    };
    let start = match ctx.store.watch(from, |k| filter.covers(k)) {
        Ok(s) => s,
        // kube-apiserver answers 200 and sends the 410 as the watch's one ERROR event.
        Err(gone) => {
            let status = ApiError::Gone(gone.to_string()).status();
            let line = event_line(&json!({"type": "ERROR", "object": status}));
            return Ok(([(header::CONTENT_TYPE, "application/json")], line).into_response());
        }
    };
    let state = WatchStream {
        filter,
        replay: start.replay.into(),
        live: start.live,
        deadline: tokio::time::Instant::now() + timeout,
        stopping: ctx.stopping.clone(),
    };
    let stream = futures_util::stream::unfold(state, |mut s| async move {
        let line = s.next_line().await?;
        Some((Ok::<Bytes, std::convert::Infallible>(line), s))
    });
    Ok((
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(stream),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::{ENDPOINT_SLICES, LEASES};
    use crate::objects;

    fn ctx() -> ApiContext {
        let v = KubeVersion::new(34, 0);
        let store = Store::new();
        let c = ApiContext::new(
            store,
            v,
            Some("127.0.0.2:6443".into()),
            CancellationToken::new(),
        );
        objects::seed(&c.store, v);
        objects::write_endpoints(&c.store, &["127.0.0.2:6443".parse().unwrap()]);
        c
    }

    async fn call(c: &ApiContext, method: Method, uri: &str, body: &str) -> (u16, Value) {
        use tower::ServiceExt;
        let req = axum::http::Request::builder()
            .method(method)
            .uri(uri)
            .header(header::CONTENT_TYPE, "application/merge-patch+json")
            .body(Body::from(body.to_string()))
            .unwrap();
        let resp = routes(c.clone()).oneshot(req).await.unwrap();
        let status = resp.status().as_u16();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    #[tokio::test]
    async fn discovery_paths() {
        let c = ctx();
        let (s, v) = call(&c, Method::GET, "/api", "").await;
        assert_eq!((s, v["kind"].as_str()), (200, Some("APIVersions")));
        assert_eq!(
            v["serverAddressByClientCIDRs"][0]["serverAddress"],
            "127.0.0.2:6443"
        );
        let (_, v) = call(&c, Method::GET, "/api/v1", "").await;
        assert_eq!(v["groupVersion"], "v1");
        let (_, v) = call(&c, Method::GET, "/apis", "").await;
        assert_eq!(v["kind"], "APIGroupList");
        let (_, v) = call(&c, Method::GET, "/apis/discovery.k8s.io/v1", "").await;
        assert_eq!(v["resources"][0]["name"], "endpointslices");
        let (s, v) = call(&c, Method::GET, "/apis/apps/v1", "").await;
        assert_eq!((s, v["reason"].as_str()), (404, Some("NotFound")));
        let (s, _) = call(&c, Method::POST, "/apis", "").await;
        assert_eq!(s, 405);
    }

    #[tokio::test]
    async fn list_get_and_scopes() {
        let c = ctx();
        let (s, v) = call(
            &c,
            Method::GET,
            "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dkubernetes",
            "",
        )
        .await;
        assert_eq!(s, 200);
        assert_eq!(v["kind"], "EndpointSliceList");
        let items = v["items"].as_array().unwrap();
        assert_eq!(items.len(), 1);
        assert!(items[0].get("kind").is_none());
        assert_eq!(items[0]["endpoints"][0]["addresses"][0], "127.0.0.2");
        let (_, v) = call(
            &c,
            Method::GET,
            "/apis/discovery.k8s.io/v1/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dother",
            "",
        )
        .await;
        assert!(v["items"].as_array().unwrap().is_empty());
        let (s, v) = call(
            &c,
            Method::GET,
            "/api/v1/namespaces/default/endpoints/kubernetes",
            "",
        )
        .await;
        assert_eq!((s, v["kind"].as_str()), (200, Some("Endpoints")));
        assert_eq!(v["subsets"][0]["ports"][0]["port"], 6443);
        let (s, v) = call(
            &c,
            Method::GET,
            "/api/v1/namespaces/default/endpoints/nope",
            "",
        )
        .await;
        assert_eq!(s, 404);
        assert_eq!(v["message"], "endpoints \"nope\" not found");
        // Cluster-scoped objects are not in namespaces, namespaced ones not outside.
        let (s, _) = call(
            &c,
            Method::GET,
            "/apis/flowcontrol.apiserver.k8s.io/v1/namespaces/default/flowschemas",
            "",
        )
        .await;
        assert_eq!(s, 404);
        let (s, _) = call(&c, Method::GET, "/api/v1/endpoints/kubernetes", "").await;
        assert_eq!(s, 404);
        let (s, v) = call(
            &c,
            Method::GET,
            "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/catch-all",
            "",
        )
        .await;
        assert_eq!((s, v["kind"].as_str()), (200, Some("FlowSchema")));
        assert_eq!(v["apiVersion"], "flowcontrol.apiserver.k8s.io/v1");
        let (s, v) = call(&c, Method::GET, "/api/v1/namespaces/kube-system", "").await;
        assert_eq!((s, v["status"]["phase"].as_str()), (200, Some("Active")));
        // Read-only resources refuse writes.
        let (s, _) = call(
            &c,
            Method::POST,
            "/api/v1/namespaces/default/endpoints",
            "{}",
        )
        .await;
        assert_eq!(s, 405);
        let (s, v) = call(
            &c,
            Method::GET,
            "/api/v1/endpoints?fieldSelector=spec.x%3D1",
            "",
        )
        .await;
        assert_eq!((s, v["reason"].as_str()), (400, Some("BadRequest")));
    }

    #[tokio::test]
    async fn watch_replays_then_streams_and_ends_at_its_timeout() {
        let c = ctx();
        let lease = |name: &str, holder: &str| {
            json!({"kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
                   "metadata": {"name": name, "namespace": "default"}, "spec": {"holderIdentity": holder}})
        };
        c.store
            .create(
                objects::key(LEASES, "default", "early"),
                lease("early", "a"),
            )
            .unwrap();
        let (_, list) = call(
            &c,
            Method::GET,
            "/apis/coordination.k8s.io/v1/namespaces/default/leases",
            "",
        )
        .await;
        let rv = list["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string();
        // Changed after the list, before the watch: only a watch that starts at the list's revision sees MODIFIED
        // (one that ignored it would start from now, or from the current state as ADDED).
        c.store.put(
            objects::key(LEASES, "default", "early"),
            lease("early", "b"),
        );
        let store = c.store.clone();
        let writer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            store
                .create(objects::key(LEASES, "default", "l"), json!({"kind": "Lease", "apiVersion": "coordination.k8s.io/v1", "metadata": {"name": "l", "namespace": "default"}}))
                .unwrap();
            store
                .create(
                    objects::key(LEASES, "other", "l"),
                    json!({"metadata": {"name": "l", "namespace": "other"}}),
                )
                .unwrap();
        });
        let uri = format!("/apis/coordination.k8s.io/v1/namespaces/default/leases?watch=1&resourceVersion={rv}&timeoutSeconds=1");
        use tower::ServiceExt;
        let req = axum::http::Request::builder()
            .uri(uri)
            .body(Body::empty())
            .unwrap();
        let resp = routes(c.clone()).oneshot(req).await.unwrap();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        writer.await.unwrap();
        let lines: Vec<Value> = bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0]["type"], "MODIFIED");
        assert_eq!(lines[0]["object"]["spec"]["holderIdentity"], "b");
        assert_eq!(lines[1]["type"], "ADDED");
        assert_eq!(lines[1]["object"]["kind"], "Lease");
        assert_eq!(lines[1]["object"]["metadata"]["name"], "l");
        // Without a revision: the current state first.
        let req = axum::http::Request::builder()
            .uri("/apis/discovery.k8s.io/v1/endpointslices?watch=true&timeoutSeconds=0")
            .body(Body::empty())
            .unwrap();
        let resp = routes(c.clone()).oneshot(req).await.unwrap();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        let first: Value =
            serde_json::from_slice(bytes.split(|b| *b == b'\n').next().unwrap()).unwrap();
        assert_eq!(first["type"], "ADDED");
        assert_eq!(first["object"]["metadata"]["name"], "kubernetes");
    }

    #[tokio::test]
    async fn kubectl_get_gets_tables_others_objects() {
        use tower::ServiceExt;
        let c = ctx();
        let get = |uri: &str, accept: &str| {
            axum::http::Request::builder()
                .uri(uri)
                .header(header::ACCEPT, accept)
                .body(Body::empty())
                .unwrap()
        };
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        for (uri, accept, kind) in [
            (
                "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
                kubectl,
                "Table",
            ),
            (
                "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/exempt",
                kubectl,
                "Table",
            ),
            (
                "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
                "application/json",
                "FlowSchemaList",
            ),
        ] {
            let resp = routes(c.clone()).oneshot(get(uri, accept)).await.unwrap();
            let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
                .await
                .unwrap();
            let v: Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(v["kind"], kind, "{uri}");
        }
        let resp = routes(c.clone())
            .oneshot(get(
                "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
                kubectl,
            ))
            .await
            .unwrap();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        let t: Value = serde_json::from_slice(&bytes).unwrap();
        let exempt = t["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["cells"][0] == "exempt")
            .unwrap();
        assert_eq!(exempt["cells"][1], "exempt");
        assert_eq!(exempt["cells"][5], "False", "the level exists");
        assert_eq!(exempt["object"]["metadata"]["name"], "exempt");
    }

    #[test]
    fn selectors_turn_changes_into_added_and_deleted() {
        let filter = WatchFilter {
            gvr: ENDPOINT_SLICES,
            namespace: None,
            labels: Selector::labels("app=x").unwrap(),
            fields: Selector::default(),
            printer: None,
        };
        let with = |app: &str| json!({"metadata": {"name": "s", "labels": {"app": app}}});
        let change = |kind, object, previous| Change {
            kind,
            key: objects::key(ENDPOINT_SLICES, "default", "s"),
            revision: 9,
            object,
            previous,
        };
        let e = filter
            .event(&change(EventType::Modified, with("y"), Some(with("x"))))
            .unwrap();
        assert_eq!(e["type"], "DELETED");
        assert_eq!(e["object"]["metadata"]["resourceVersion"], "9");
        let e = filter
            .event(&change(EventType::Modified, with("x"), Some(with("y"))))
            .unwrap();
        assert_eq!(e["type"], "ADDED");
        assert!(filter
            .event(&change(EventType::Added, with("y"), None))
            .is_none());
    }
}
