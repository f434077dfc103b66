//! Kubernetes API Priority and Fairness (APF) as data: what kube-apiserver exposes about it, and APF's own
//! arithmetic and rules, with no async runtime, no HTTP and no Kubernetes client. apf-monitor's daemon and its
//! simulated apiserver (`apf-sim`) are built on it; a kubectl plugin, a notebook or a CI check can use it alone.
//!
//! What kube-apiserver exposes:
//! - [`parse`]: streaming parsers of the Prometheus text format (`/metrics`) and of the
//!   `/debug/api_priority_and_fairness/` dumps;
//! - [`model`]: one version-independent snapshot of a replica, whichever generation of metric names it serves (the
//!   only place that knows those names), and the flowcontrol objects read from the API or from YAML.
//!
//! What APF is, as kube-apiserver has it (nothing else may redo this arithmetic):
//! - [`limits`]: the seats a priority level gets from its shares, borrowing bounds, what a LIST costs;
//! - [`defaults`]: the default PriorityLevelConfigurations and FlowSchemas of each Kubernetes version;
//! - [`matching`]: which FlowSchema, priority level and flow a request gets;
//! - [`plan`]: what a change to the shares does to every level's seats;
//! - [`advice`]: the seats a flow can count on, the rate they sustain, and the flags that set it;
//! - [`share_move`]: how many shares to move to a level short of seats, and from which levels;
//! - [`review`]: what is wrong with a cluster's FlowSchemas and PriorityLevelConfigurations;
//! - [`audit`]: who got the 429s: audited requests classified and counted per user and per flow;
//! - [`endpoints`]: where kube-apiserver serves the dumps and objects, and the RBAC rule each needs;
//! - [`PriorityLevelConfig`], [`FlowSchema`], [`KubeVersion`], the rejection [`reason`]s.
//!
//! Read a replica's `/metrics` and a priority level's headroom (its enforced limit minus the seats in use):
//!
//! ```
//! use apf::model::{is_wanted_sample, MetricGeneration, SnapshotBuilder};
//! use apf::parse::exposition::parse_all;
//!
//! let metrics = br#"
//! # TYPE apiserver_flowcontrol_current_limit_seats gauge
//! apiserver_flowcontrol_current_limit_seats{priority_level="workload-low"} 245
//! apiserver_flowcontrol_current_executing_seats{flow_schema="service-accounts",priority_level="workload-low"} 230
//! apiserver_flowcontrol_current_inqueue_requests{flow_schema="service-accounts",priority_level="workload-low"} 12
//! kubernetes_build_info{git_version="v1.33.4",major="1",minor="33"} 1
//! "#;
//! let mut builder = SnapshotBuilder::new();
//! let stats = parse_all(metrics, is_wanted_sample, &mut builder);
//! assert_eq!(stats.invalid_lines, 0);
//! let replica = builder.finish();
//! assert_eq!(replica.generation, Some(MetricGeneration::Borrowing));
//! assert_eq!(replica.minor(), Some(33));
//! let level = &replica.levels["workload-low"];
//! assert_eq!(level.headroom_seats(), Some(15.0));
//! assert_eq!(level.inqueue_requests, Some(12.0));
//! ```
//!
//! The seats each default priority level of 1.33 gets on a replica of 600 seats (`--max-requests-inflight` plus
//! `--max-mutating-requests-inflight`, 400 + 200 by default):
//!
//! ```
//! use apf::defaults::default_priority_levels;
//! use apf::limits::seat_limits;
//! use apf::KubeVersion;
//!
//! let levels = default_priority_levels("1.33".parse::<KubeVersion>()?);
//! let limits = seat_limits(&levels, 600);
//! let workload_low = levels.iter().position(|l| l.name == "workload-low").unwrap();
//! assert_eq!(limits[workload_low].nominal, 245);
//! // lendablePercent 90: busier levels may borrow 221 of its seats, so it keeps at least 24.
//! assert_eq!(limits[workload_low].lendable, 221);
//! assert_eq!(limits[workload_low].lower, 24);
//! # Ok::<(), apf::VersionError>(())
//! ```
//!
//! Which FlowSchema, priority level and flow a service account's LIST of pods lands in:
//!
//! ```
//! use apf::matching::{implied_groups, match_request, Request, Target};
//! use apf::model::parse_flowcontrol_documents;
//!
//! let objects = parse_flowcontrol_documents(r#"
//! apiVersion: flowcontrol.apiserver.k8s.io/v1
//! kind: PriorityLevelConfiguration
//! metadata: {name: workload-low}
//! spec:
//!   type: Limited
//!   limited:
//!     nominalConcurrencyShares: 100
//!     limitResponse:
//!       type: Queue
//!       queuing: {queues: 128, handSize: 6, queueLengthLimit: 50}
//! ---
//! apiVersion: flowcontrol.apiserver.k8s.io/v1
//! kind: FlowSchema
//! metadata: {name: service-accounts}
//! spec:
//!   matchingPrecedence: 9000
//!   priorityLevelConfiguration: {name: workload-low}
//!   distinguisherMethod: {type: ByUser}
//!   rules:
//!   - subjects: [{kind: Group, group: {name: system:serviceaccounts}}]
//!     resourceRules:
//!     - {verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true}
//! "#)?;
//! let user = "system:serviceaccount:monitoring:agent";
//! let request = Request {
//!     user: user.into(),
//!     groups: implied_groups(user),
//!     verb: "list".into(),
//!     target: Target::Resource {
//!         api_group: "".into(),
//!         resource: "pods".into(),
//!         subresource: None,
//!         namespace: None,
//!     },
//! };
//! let found = match_request(&objects.flow_schemas, &objects.priority_levels, &request)?;
//! assert_eq!(found.flow_schema, "service-accounts");
//! assert_eq!(found.priority_level, "workload-low");
//! assert_eq!(found.flow_distinguisher, user);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
pub mod advice;
pub mod audit;
pub mod defaults;
pub mod endpoints;
pub mod limits;
pub mod matching;
pub mod model;
mod objects;
pub mod parse;
pub mod plan;
pub mod review;
pub mod share_move;
pub mod shuffle;
mod version;

pub use objects::{
    object_name, subject_of, Distinguisher, FlowSchema, FlowSchemaDef, NonResourceRule,
    PolicyRules, PriorityLevelConfig, ResourceRule, Subject,
};
pub use version::{KubeVersion, VersionError};

/// The priority level that is never limited: it gets executing seats only (docs/reference/metrics.md).
pub const EXEMPT: &str = "exempt";

/// The FlowSchema (and priority level) that takes every request no other schema matches; kube-apiserver keeps it
/// in force.
pub const CATCH_ALL: &str = "catch-all";

/// The `reason` label of `apiserver_flowcontrol_rejected_requests_total`.
pub mod reason {
    /// The flow's queue held queueLengthLimit requests already.
    pub const QUEUE_FULL: &str = "queue-full";
    /// A level without queues (limitResponse Reject) had no free seat.
    pub const CONCURRENCY_LIMIT: &str = "concurrency-limit";
    /// The request waited in its queue longer than the request wait limit.
    pub const TIME_OUT: &str = "time-out";
    /// The client went away while the request was queued.
    pub const CANCELLED: &str = "cancelled";
}

/// Every reason a request is rejected, as the `reason` label spells it.
pub const REJECTION_REASONS: [&str; 4] = [
    reason::QUEUE_FULL,
    reason::CONCURRENCY_LIMIT,
    reason::TIME_OUT,
    reason::CANCELLED,
];
