//! Snapshots from a Prometheus' instant vector: the samples of every replica of every cluster, fed to the same
//! [`SnapshotBuilder`] a scrape feeds, so a replica read through Prometheus gets the same snapshot, hence the same
//! numbers, as one scraped directly.
use std::collections::BTreeMap;

use super::{Family, ReplicaSnapshot, SnapshotBuilder};
use crate::parse::exposition::{same, Label, Sample};

/// A replica as a Prometheus labels it (a replica scraped directly has no cluster).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReplicaKey {
    /// The series' cluster label; `None` where there is none.
    pub cluster: Option<String>,
    pub apiserver: String,
}

/// Samples of many replicas, each with its family, grouped by replica into the snapshot builders a scrape feeds.
/// Fed answer by answer, so a round holds the snapshots being built, not every answer at once.
pub struct FleetBuilder<'a> {
    cluster_label: &'a str,
    apiserver_label: &'a str,
    /// By cluster (`""`: none; a Prometheus has no empty label values), then replica: the place of its builder,
    /// found with the sample's own strings, no key built for each of the fleet's samples.
    places: BTreeMap<String, BTreeMap<String, usize>>,
    /// Each replica's cluster, name and builder.
    builders: Vec<(String, String, SnapshotBuilder)>,
    /// The place of the last sample's replica: an answer lists a replica's series together (Prometheus orders an
    /// aggregation's groups as its sorted input series come), so most samples need no search.
    last: Option<usize>,
    unlabelled: usize,
}

impl<'a> FleetBuilder<'a> {
    pub fn new(cluster_label: &'a str, apiserver_label: &'a str) -> Self {
        Self {
            cluster_label,
            apiserver_label,
            places: BTreeMap::new(),
            builders: Vec::new(),
            last: None,
            unlabelled: 0,
        }
    }

    /// One sample of `family`. Without the apiserver label it cannot be told apart: skipped and counted.
    pub fn add(&mut self, family: Family, labels: &[Label<'_>], value: f64) {
        let (mut apiserver, mut cluster) = (None, None);
        for l in labels {
            if apiserver.is_none() && same(l.name, self.apiserver_label) {
                apiserver = Some(l.value.as_ref());
            }
            if cluster.is_none() && same(l.name, self.cluster_label) {
                cluster = Some(l.value.as_ref());
            }
        }
        let Some(apiserver) = apiserver else {
            self.unlabelled += 1;
            return;
        };
        let cluster = cluster.unwrap_or("");
        let place = match self.last.filter(|&i| {
            let (c, a, _) = &self.builders[i];
            same(a, apiserver) && same(c, cluster)
        }) {
            Some(i) => i,
            None => self.place(cluster, apiserver),
        };
        self.last = Some(place);
        self.builders[place].2.sample_of(
            family,
            &Sample {
                name: "",
                labels,
                value,
                timestamp_ms: None,
            },
        );
    }

    /// The place of the replica's builder, made the first time.
    fn place(&mut self, cluster: &str, apiserver: &str) -> usize {
        let known = self.places.get(cluster).and_then(|r| r.get(apiserver));
        if let Some(&i) = known {
            return i;
        }
        let i = self.builders.len();
        self.places
            .entry(cluster.to_string())
            .or_default()
            .insert(apiserver.to_string(), i);
        self.builders.push((
            cluster.to_string(),
            apiserver.to_string(),
            // A store's answer holds each label set once, and each family is one query.
            SnapshotBuilder::of_unique_series(),
        ));
        i
    }

    /// Each replica's snapshot, and how many samples were skipped for want of the apiserver label.
    pub fn finish(self) -> (BTreeMap<ReplicaKey, ReplicaSnapshot>, usize) {
        let snapshots = self
            .builders
            .into_iter()
            .map(|(cluster, apiserver, b)| {
                let key = ReplicaKey {
                    cluster: Some(cluster).filter(|c| !c.is_empty()),
                    apiserver,
                };
                (key, b.finish())
            })
            .collect();
        (snapshots, self.unlabelled)
    }
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
        let mut fleet = FleetBuilder::new("cluster", "instance");
        for (labels, value) in &samples {
            let labels: Vec<Label<'_>> = labels
                .iter()
                .map(|(name, value)| Label {
                    name,
                    value: value.as_str().into(),
                })
                .collect();
            let name = labels
                .iter()
                .find(|l| l.name == "__name__")
                .map(|l| l.value.to_string())
                .unwrap_or_default();
            if let Some(family) = Family::of(&name) {
                fleet.add(family, &labels, *value);
            }
        }
        let (snaps, unlabelled) = fleet.finish();
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
