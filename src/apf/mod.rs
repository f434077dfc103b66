//! API Priority and Fairness (APF) itself: its arithmetic and its facts, as kube-apiserver has them.
//!
//! This module owns what APF is, independent of how we watch it: the seat limits a priority level gets from its
//! shares ([`limits`]), the default PriorityLevelConfigurations and FlowSchemas of each Kubernetes version
//! ([`defaults`]), the spec of a PriorityLevelConfiguration ([`PriorityLevelConfig`]), the rejection reasons, and
//! where kube-apiserver serves APF's debug dumps and objects with the RBAC rule each needs ([`endpoints`]). The
//! simulator, remediation, `plan` and `match` all use it; nothing else may know these facts or redo this arithmetic.
pub mod defaults;
pub mod endpoints;
pub mod limits;
pub mod matching;
mod objects;
pub mod plan;
mod version;

pub use objects::{
    object_name, subject_of, Distinguisher, FlowSchema, FlowSchemaDef, NonResourceRule,
    PolicyRules, PriorityLevelConfig, ResourceRule, Subject,
};
pub use version::{KubeVersion, VersionError};

/// The priority level that is never limited: it gets executing seats only (README, Metrics).
pub const EXEMPT: &str = "exempt";

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
