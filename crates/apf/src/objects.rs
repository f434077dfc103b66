//! The spec of a PriorityLevelConfiguration and of a default FlowSchema, in APF's terms.

/// One PriorityLevelConfiguration: as the flowcontrol API (any version) serves it, or as a default table defines it.
/// `None` is a field the object leaves out; the `*_or_default` methods apply the API's defaulting.
#[derive(Debug, Clone, PartialEq)]
pub struct PriorityLevelConfig {
    pub name: String,
    /// `Exempt`, `Limited` with queuing, or `Limited` with reject.
    pub queuing: bool,
    pub exempt: bool,
    pub queues: Option<u32>,
    pub hand_size: Option<u32>,
    pub queue_length_limit: Option<u32>,
    /// `nominalConcurrencyShares` (v1beta3, v1; also under `exempt` from 1.28) or `assuredConcurrencyShares`
    /// (older).
    pub shares: Option<u32>,
    /// Absent before 1.26 (no borrowing).
    pub lendable_percent: Option<u32>,
    /// Absent means no limit on borrowing (BorrowingCL = ServerCL).
    pub borrowing_limit_percent: Option<u32>,
}

impl PriorityLevelConfig {
    /// queues x queueLengthLimit: the most requests the level can hold waiting on one replica.
    pub fn queue_capacity(&self) -> Option<u64> {
        Some(u64::from(self.queues?) * u64::from(self.queue_length_limit?))
    }

    /// `Limited` with limitResponse `Reject`: no queues, a request without a free seat is rejected at once.
    pub fn rejects(&self) -> bool {
        !self.exempt && !self.queuing
    }

    /// The shares the API defaults to when the object leaves them out: 30 for a limited level, 0 for exempt
    /// (`SetDefaults_LimitedPriorityLevelConfiguration`, `SetDefaults_ExemptPriorityLevelConfiguration` in
    /// kubernetes/kubernetes pkg/apis/flowcontrol/v1/defaults.go).
    pub fn shares_or_default(&self) -> u32 {
        self.shares.unwrap_or(if self.exempt { 0 } else { 30 })
    }

    /// The object's `spec` as flowcontrol API version `api` (`v1`, `v1beta3`, ...) writes it: v1beta3 renamed
    /// `assuredConcurrencyShares` to `nominalConcurrencyShares`; fields left out stay out.
    pub fn spec(&self, api: &str) -> serde_json::Value {
        use serde_json::{json, Map, Value};
        let mut spec = Map::new();
        if self.exempt {
            spec.insert("type".into(), json!("Exempt"));
            // The exempt spec has fields from 1.28 only.
            let mut exempt = Map::new();
            if let Some(shares) = self.shares {
                exempt.insert("nominalConcurrencyShares".into(), json!(shares));
            }
            if let Some(lendable) = self.lendable_percent {
                exempt.insert("lendablePercent".into(), json!(lendable));
            }
            if !exempt.is_empty() {
                spec.insert("exempt".into(), Value::Object(exempt));
            }
            return Value::Object(spec);
        }
        spec.insert("type".into(), json!("Limited"));
        let mut limited = Map::new();
        let shares_key = if api == "v1" || api == "v1beta3" {
            "nominalConcurrencyShares"
        } else {
            "assuredConcurrencyShares"
        };
        if let Some(shares) = self.shares {
            limited.insert(shares_key.into(), json!(shares));
        }
        if let Some(lendable) = self.lendable_percent {
            limited.insert("lendablePercent".into(), json!(lendable));
        }
        if let Some(borrowing) = self.borrowing_limit_percent {
            limited.insert("borrowingLimitPercent".into(), json!(borrowing));
        }
        let response = if self.queuing {
            let mut queuing = Map::new();
            for (key, value) in [
                ("queues", self.queues),
                ("handSize", self.hand_size),
                ("queueLengthLimit", self.queue_length_limit),
            ] {
                if let Some(v) = value {
                    queuing.insert(key.into(), json!(v));
                }
            }
            json!({"type": "Queue", "queuing": queuing})
        } else {
            json!({"type": "Reject"})
        };
        limited.insert("limitResponse".into(), response);
        spec.insert("limited".into(), Value::Object(limited));
        Value::Object(spec)
    }

    /// lendablePercent, 0 when left out (defaulted so from 1.26; no lending before).
    pub fn lendable_percent_or_default(&self) -> u32 {
        self.lendable_percent.unwrap_or(0)
    }
}

/// How a FlowSchema splits its requests into flows (`distinguisherMethod`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distinguisher {
    None,
    ByUser,
    ByNamespace,
}

impl Distinguisher {
    /// `distinguisherMethod.type`; a schema without one leaves the field out.
    pub fn method_type(self) -> Option<&'static str> {
        match self {
            Distinguisher::None => None,
            Distinguisher::ByUser => Some("ByUser"),
            Distinguisher::ByNamespace => Some("ByNamespace"),
        }
    }
}

/// One default FlowSchema.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowSchemaDef {
    pub name: &'static str,
    pub priority_level: &'static str,
    /// matchingPrecedence: lower numbers match first.
    pub precedence: u32,
    pub distinguisher: Distinguisher,
}

/// One FlowSchema as the flowcontrol API serves it (any version: the spec did not change across them).
#[derive(Debug, Clone, PartialEq)]
pub struct FlowSchema {
    pub name: String,
    /// matchingPrecedence (the API defaults it to 1000): lower numbers match first.
    pub precedence: u32,
    pub priority_level: String,
    pub distinguisher: Distinguisher,
    pub rules: Vec<PolicyRules>,
}

/// One element of `spec.rules`: who (any subject) does what (any resource or non-resource rule).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyRules {
    pub subjects: Vec<Subject>,
    pub resource_rules: Vec<ResourceRule>,
    pub non_resource_rules: Vec<NonResourceRule>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Subject {
    /// `*` is every user.
    User(String),
    /// `*` is every group.
    Group(String),
    /// Name `*` is every service account of the namespace.
    ServiceAccount { namespace: String, name: String },
    /// A kind this version does not know: matches nobody, as kube-apiserver treats it.
    Other,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResourceRule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    /// `pods`, or `pods/log` for a subresource.
    pub resources: Vec<String>,
    pub cluster_scope: bool,
    pub namespaces: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct NonResourceRule {
    pub verbs: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

/// A DNS-1123 object name made of `prefix` and the user's words (a service account's `namespace-name`), at most 63
/// characters: what the manifests apf-monitor proposes are called.
pub fn object_name(prefix: &str, user: &str) -> String {
    let base = user
        .strip_prefix("system:serviceaccount:")
        .unwrap_or(user)
        .to_ascii_lowercase();
    let mut name = String::from(prefix);
    for c in base.chars() {
        let c = if c.is_ascii_alphanumeric() { c } else { '-' };
        if !(c == '-' && (name.is_empty() || name.ends_with('-'))) {
            name.push(c);
        }
    }
    name.truncate(63);
    name.trim_end_matches('-').to_string()
}

/// The FlowSchema subject that names exactly this user: a ServiceAccount for `system:serviceaccount:NS:NAME`, else a
/// User.
pub fn subject_of(user: &str) -> serde_json::Value {
    match user
        .strip_prefix("system:serviceaccount:")
        .and_then(|r| r.split_once(':'))
    {
        Some((ns, sa)) if !ns.is_empty() && !sa.is_empty() => serde_json::json!({
            "kind": "ServiceAccount",
            "serviceAccount": {"namespace": ns, "name": sa},
        }),
        _ => serde_json::json!({"kind": "User", "user": {"name": user}}),
    }
}
