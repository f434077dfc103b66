//! PriorityLevelConfiguration objects (`flowcontrol.apiserver.k8s.io`, any served version): queue settings.
use serde::Deserialize;

/// What the analysis needs of one PriorityLevelConfiguration.
#[derive(Debug, Clone, PartialEq)]
pub struct PriorityLevelConfig {
    pub name: String,
    /// `Exempt`, `Limited` with queuing, or `Limited` with reject.
    pub queuing: bool,
    pub exempt: bool,
    pub queues: Option<u32>,
    pub hand_size: Option<u32>,
    pub queue_length_limit: Option<u32>,
    /// `nominalConcurrencyShares` (v1beta3, v1) or `assuredConcurrencyShares` (older).
    pub shares: Option<u32>,
    pub lendable_percent: Option<u32>,
    pub borrowing_limit_percent: Option<u32>,
}

impl PriorityLevelConfig {
    /// queues x queueLengthLimit: the most requests the level can hold waiting on one replica.
    pub fn queue_capacity(&self) -> Option<u64> {
        Some(u64::from(self.queues?) * u64::from(self.queue_length_limit?))
    }
}

#[derive(Deserialize)]
struct List {
    #[serde(default)]
    items: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    metadata: Metadata,
    #[serde(default)]
    spec: Spec,
}

#[derive(Deserialize)]
struct Metadata {
    name: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Spec {
    #[serde(default, rename = "type")]
    kind: String,
    limited: Option<Limited>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Limited {
    nominal_concurrency_shares: Option<u32>,
    assured_concurrency_shares: Option<u32>,
    lendable_percent: Option<u32>,
    borrowing_limit_percent: Option<u32>,
    limit_response: Option<LimitResponse>,
}

#[derive(Deserialize)]
struct LimitResponse {
    #[serde(default, rename = "type")]
    kind: String,
    queuing: Option<Queuing>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Queuing {
    queues: Option<u32>,
    hand_size: Option<u32>,
    queue_length_limit: Option<u32>,
}

/// Reads a `PriorityLevelConfigurationList` as any API version serves it.
pub fn parse_priority_level_configurations(
    json: &[u8],
) -> Result<Vec<PriorityLevelConfig>, serde_json::Error> {
    let list: List = serde_json::from_slice(json)?;
    Ok(list
        .items
        .into_iter()
        .map(|item| {
            let limited = item.spec.limited;
            let response = limited.as_ref().and_then(|l| l.limit_response.as_ref());
            let queuing = response
                .filter(|r| r.kind == "Queue")
                .and_then(|r| r.queuing.as_ref());
            PriorityLevelConfig {
                name: item.metadata.name,
                exempt: item.spec.kind == "Exempt",
                queuing: queuing.is_some(),
                queues: queuing.and_then(|q| q.queues),
                hand_size: queuing.and_then(|q| q.hand_size),
                queue_length_limit: queuing.and_then(|q| q.queue_length_limit),
                shares: limited.as_ref().and_then(|l| {
                    l.nominal_concurrency_shares
                        .or(l.assured_concurrency_shares)
                }),
                lendable_percent: limited.as_ref().and_then(|l| l.lendable_percent),
                borrowing_limit_percent: limited.as_ref().and_then(|l| l.borrowing_limit_percent),
            }
        })
        .collect())
}
