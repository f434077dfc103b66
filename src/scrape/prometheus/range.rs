//! APF's history from a Prometheus (`apf-monitor report`): the queries of a round (one per family the model reads,
//! summed by cluster, replica and the labels the model reads), asked over a range (`/api/v1/query_range`), made into
//! the snapshots a round would have made at each step.
use std::collections::BTreeMap;

use super::answer::{read_matrix, read_vector};
use super::{api_body, family_queries, query_body, selector_with, PrometheusSource};
use crate::scrape::ScrapeError;
use apf::model::{ReplicaKey, ReplicaSnapshot};

/// Most steps asked of one query: Prometheus refuses more than 11,000 points a series, and this process holds one
/// query's steps at a time.
pub const STEPS_PER_QUERY: usize = 720;

/// What the store held at one step.
#[derive(Debug, Default)]
pub struct Moment {
    /// Unix seconds.
    pub time: f64,
    pub replicas: BTreeMap<ReplicaKey, ReplicaSnapshot>,
}

/// The snapshots of every replica at `start`, `start + step`, ... (`steps` of them, at most [`STEPS_PER_QUERY`]), one
/// range query per family. A step where the store holds nothing has no replicas.
pub async fn read_range(
    source: &PrometheusSource,
    start: f64,
    step: f64,
    steps: usize,
) -> Result<Vec<Moment>, ScrapeError> {
    let steps = steps.clamp(1, STEPS_PER_QUERY);
    let end = start + step * (steps - 1) as f64;
    let wanted = apf::model::wanted_series();
    let queries = family_queries(source, &wanted)?;
    let mut builders: Vec<_> = (0..steps)
        .map(|_| apf::model::FleetBuilder::new(&source.cluster_label, &source.apiserver_label))
        .collect();
    for (name, query) in queries {
        let form = [
            ("query", query),
            ("start", format!("{start:.3}")),
            ("end", format!("{end:.3}")),
            ("step", format!("{step:.3}")),
        ];
        let body = api_body(source, "query_range", &form).await?;
        read_matrix(&body, |labels, time, value| {
            let i = ((time - start) / step).round();
            if i >= 0.0 && (i as usize) < steps {
                builders[i as usize].add(name, labels, value);
            }
        })?;
    }
    Ok(builders
        .into_iter()
        .enumerate()
        .map(|(i, b)| Moment {
            time: start + step * i as f64,
            replicas: b.finish().0,
        })
        .collect())
}

/// How often the store holds a sample of the replicas' limits around `time`, in seconds (the scrape interval of
/// the apiservers): the most samples any limit series has in the 10 minutes before `time`. `None` when it holds
/// none there.
pub async fn resolution(source: &PrometheusSource, time: f64) -> Result<Option<f64>, ScrapeError> {
    const SPAN: f64 = 600.0;
    let mut most: Option<f64> = None;
    // One query per family: `count_over_time` drops the name, and two families' series would then clash.
    for family in apf::model::limit_families() {
        let selector = selector_with(source, std::slice::from_ref(&family))?;
        let query = format!("max(count_over_time({selector}[10m]))");
        let body = query_body(source, &query, time).await?;
        read_vector(&body, |_, count| {
            most = Some(most.map_or(count, |m| m.max(count)))
        })?;
    }
    Ok(most.filter(|c| *c >= 2.0).map(|c| (SPAN / c).max(1.0)))
}
