//! A shard of a fleet: the clusters of a source this process reads, by a stable hash of the cluster's name or by a
//! regex on it. Either way the choice goes into the PromQL selector (`cluster=~"..."`), so the store evaluates and
//! sends only this shard's series.
use super::{instant_query, not_in_braces, selector_with, with_matcher, PrometheusSource};
use crate::scrape::ScrapeError;
use crate::targets::ShardConfig;

#[derive(Debug, Clone, PartialEq)]
pub enum Shard {
    /// The clusters whose name's FNV-1a 64-bit hash, modulo `total`, is `index`.
    Hash { index: u64, total: u64 },
    /// The clusters whose name matches this regex (anchored, as PromQL anchors it).
    Clusters(String),
}

impl Shard {
    /// `None` for a config the check refuses (the loader refused it already).
    pub fn of(config: &ShardConfig) -> Option<Self> {
        config.check().ok()?;
        match (config.index, config.total, &config.clusters) {
            (Some(index), Some(total), None) => Some(Shard::Hash { index, total }),
            (None, None, Some(re)) => Some(Shard::Clusters(re.clone())),
            _ => None,
        }
    }

    /// Whether the cluster named `name` ("" for series without one) is this shard's.
    pub fn holds(&self, name: &str) -> bool {
        match self {
            Shard::Hash { index, total } => fnv1a64(name) % total == *index,
            Shard::Clusters(re) => {
                regex::Regex::new(&format!("^(?:{re})$")).is_ok_and(|r| r.is_match(name))
            }
        }
    }

    /// How a person reads it: `shard 1 of 3 (by hash of cluster)`.
    pub fn describe(&self, label: &str) -> String {
        match self {
            Shard::Hash { index, total } => {
                format!("shard {index} of {total} (by hash of {label})")
            }
            Shard::Clusters(re) => format!("the clusters whose {label} matches {re:?}"),
        }
    }
}

/// FNV-1a, 64 bits: stable across processes, releases and platforms, so every shard agrees on every cluster.
pub fn fnv1a64(text: &str) -> u64 {
    let mut hash: u64 = 0xcbf29ce484222325;
    for b in text.as_bytes() {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x100000001b3);
    }
    hash
}

/// A PromQL string literal holding `text`: backslashes and double quotes escaped.
fn promql_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The source narrowed to its shard at `time`: `None` when no cluster of the source is this shard's (nothing to
/// read). A hash shard asks the store which clusters it holds (one `count by (cluster)` of the limit families), then
/// names its own in the selector.
pub async fn scoped(
    source: &PrometheusSource,
    shard: &Shard,
    time: f64,
) -> Result<Option<PrometheusSource>, ScrapeError> {
    let label = &source.cluster_label;
    let regex = match shard {
        Shard::Clusters(re) => re.clone(),
        Shard::Hash { .. } => {
            let families: Vec<String> = apf::model::limit_families()
                .iter()
                .map(|f| f.to_string())
                .collect();
            let selector = selector_with(source, &families)?;
            let query = format!("count by ({label}) ({selector})");
            let mut mine = std::collections::BTreeSet::new();
            instant_query(source, &query, time, |labels, _| {
                let name = labels
                    .iter()
                    .find(|l| l.name == label.as_str())
                    .map_or(String::new(), |l| l.value.to_string());
                if shard.holds(&name) {
                    mine.insert(name);
                }
            })
            .await?;
            if mine.is_empty() {
                return Ok(None);
            }
            // An empty name in the alternation matches the series without the label: those hash as "".
            mine.iter()
                .map(|n| regex::escape(n))
                .collect::<Vec<_>>()
                .join("|")
        }
    };
    let matcher = format!("{label}=~{}", promql_string(&regex));
    let selector =
        with_matcher(&source.selector, &matcher).ok_or_else(|| not_in_braces(&source.selector))?;
    Ok(Some(PrometheusSource {
        selector,
        ..source.clone()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cluster_falls_in_exactly_one_hash_shard() {
        let clusters: Vec<String> = (0..1000).map(|i| format!("prod-eu-{i}")).collect();
        let shards: Vec<Shard> = (0..3)
            .map(|index| Shard::Hash { index, total: 3 })
            .collect();
        let mut sizes = [0usize; 3];
        for c in &clusters {
            let holders: Vec<usize> = (0..3).filter(|i| shards[*i].holds(c)).collect();
            assert_eq!(holders.len(), 1, "{c}: {holders:?}");
            sizes[holders[0]] += 1;
        }
        // Spread about evenly: each within 15 % of a third.
        assert!(sizes.iter().all(|n| (283..=383).contains(n)), "{sizes:?}");
        // Stable: the same name, the same shard, in any process (the FNV-1a test vectors).
        assert_eq!(fnv1a64(""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64("a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64("foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn a_regex_shard_is_anchored_and_the_matcher_is_a_promql_string() {
        let shard = Shard::Clusters("prod-.*".into());
        assert!(shard.holds("prod-eu"));
        assert!(!shard.holds("staging-prod-eu"));
        assert_eq!(promql_string(r#"a\.b"c"#), r#""a\\.b\"c""#);
        assert_eq!(
            with_matcher(r#"{job="apiserver"}"#, r#"cluster=~"a""#).as_deref(),
            Some(r#"{cluster=~"a",job="apiserver"}"#)
        );
        assert_eq!(
            with_matcher("{}", "c=~\"a\"").as_deref(),
            Some("{c=~\"a\"}")
        );
    }
}
