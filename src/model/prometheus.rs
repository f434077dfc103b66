//! Snapshots from a Prometheus' instant vector: the samples of every replica of every cluster, fed to the same
//! [`SnapshotBuilder`] a scrape feeds, so a replica read through Prometheus gets the same snapshot, hence the same
//! numbers, as one scraped directly.
use std::collections::BTreeMap;

use super::{ReplicaSnapshot, SnapshotBuilder};
use crate::parse::exposition::{Label, Sample, SampleSink};

/// A replica as a Prometheus labels it (a replica scraped directly has no cluster).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReplicaKey {
    /// The series' cluster label; `None` where there is none.
    pub cluster: Option<String>,
    pub apiserver: String,
}

/// Groups `samples` (each with its `__name__`) by replica and builds each replica's snapshot. Samples without the
/// apiserver label cannot be told apart and are skipped (counted in the second value).
pub fn snapshots_by_replica(
    samples: &[(BTreeMap<String, String>, f64)],
    cluster_label: &str,
    apiserver_label: &str,
) -> (BTreeMap<ReplicaKey, ReplicaSnapshot>, usize) {
    let mut builders: BTreeMap<ReplicaKey, SnapshotBuilder> = BTreeMap::new();
    let mut unlabelled = 0;
    for (labels, value) in samples {
        let (Some(name), Some(apiserver)) = (labels.get("__name__"), labels.get(apiserver_label))
        else {
            unlabelled += 1;
            continue;
        };
        let key = ReplicaKey {
            cluster: labels.get(cluster_label).cloned(),
            apiserver: apiserver.clone(),
        };
        let sample_labels: Vec<Label<'_>> = labels
            .iter()
            .filter(|(k, _)| k.as_str() != "__name__")
            .map(|(k, v)| Label {
                name: k,
                value: std::borrow::Cow::Borrowed(v),
            })
            .collect();
        builders.entry(key).or_default().sample(&Sample {
            name,
            labels: &sample_labels,
            value: *value,
            timestamp_ms: None,
        });
    }
    (
        builders.into_iter().map(|(k, b)| (k, b.finish())).collect(),
        unlabelled,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_of_two_clusters_make_a_snapshot_per_replica() {
        let s = |cluster: &str, instance: &str, name: &str, extra: &[(&str, &str)], v: f64| {
            let mut labels: BTreeMap<String, String> = [
                ("__name__", name),
                ("cluster", cluster),
                ("instance", instance),
                ("job", "apiserver"),
            ]
            .into_iter()
            .chain(extra.iter().copied())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
            labels.retain(|_, v| !v.is_empty());
            (labels, v)
        };
        let pl = [("priority_level", "workload-low")];
        let samples = vec![
            s(
                "a",
                "10.0.0.5:6443",
                "apiserver_flowcontrol_current_limit_seats",
                &pl,
                100.0,
            ),
            s(
                "a",
                "10.0.0.5:6443",
                "apiserver_flowcontrol_current_executing_seats",
                &[
                    ("priority_level", "workload-low"),
                    ("flow_schema", "service-accounts"),
                ],
                40.0,
            ),
            s(
                "b",
                "10.0.0.5:6443",
                "apiserver_flowcontrol_current_limit_seats",
                &pl,
                245.0,
            ),
            s(
                "",
                "10.1.0.1:443",
                "apiserver_flowcontrol_current_limit_seats",
                &pl,
                50.0,
            ),
        ];
        let (snaps, unlabelled) = snapshots_by_replica(&samples, "cluster", "instance");
        assert_eq!(unlabelled, 0);
        assert_eq!(snaps.len(), 3);
        let a = &snaps[&ReplicaKey {
            cluster: Some("a".into()),
            apiserver: "10.0.0.5:6443".into(),
        }];
        assert_eq!(a.levels["workload-low"].headroom_seats(), Some(60.0));
        let none = &snaps[&ReplicaKey {
            cluster: None,
            apiserver: "10.1.0.1:443".into(),
        }];
        assert_eq!(none.levels["workload-low"].limit_seats, Some(50.0));
    }
}
