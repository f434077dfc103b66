//! APF's history from a Prometheus (`apf-monitor report`): the queries of a round (one per family the model reads,
//! summed by cluster, replica and the labels the model reads), asked over a range (`/api/v1/query_range`), made into
//! the snapshots a round would have made at each step.
use std::collections::BTreeMap;

use super::{
    family_queries, instant_form, instant_query, read_answer, selector_with, PrometheusSource,
};
use crate::scrape::ScrapeError;
use apf::model::{Family, ReplicaKey, ReplicaSnapshot};
use apf::parse::api_answer::ResultType;
use apf::parse::exposition::Label;

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
    // A look back gives no rate advice.
    let wanted = apf::model::wanted_series(false);
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
        let Some(family) = Family::of(name) else {
            continue;
        };
        let mut each = |labels: &[Label<'_>], time: f64, value: f64| {
            let i = ((time - start) / step).round();
            if i >= 0.0 && (i as usize) < steps {
                builders[i as usize].add(family, labels, value);
            }
        };
        read_answer(source, "query_range", &form, ResultType::Matrix, &mut each).await?;
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
/// the apiservers): the median gap between the samples of the limit series with the most samples in the 10 minutes
/// before `time`, so that a store which began scraping a minute ago gives its interval, not a tenth of its minute's
/// samples spread over ten. `None` when no series has two samples there.
pub async fn resolution(source: &PrometheusSource, time: f64) -> Result<Option<f64>, ScrapeError> {
    let mut finest: Option<f64> = None;
    // One query per family: `count_over_time` drops the name, and two families' series would then clash.
    for family in apf::model::limit_families() {
        let selector = selector_with(source, std::slice::from_ref(&family))?;
        let query = format!("topk(1, count_over_time({selector}[10m]))");
        let mut fullest: Option<String> = None;
        instant_query(source, &query, time, |labels, count| {
            if count >= 2.0 && fullest.is_none() {
                fullest = Some(series_selector(&family, labels));
            }
        })
        .await?;
        let Some(series) = fullest else {
            continue;
        };
        // That series' own samples: a range vector, answered as they were stored.
        let mut times = Vec::new();
        let form = instant_form(&format!("{series}[10m]"), time);
        read_answer(
            source,
            "query",
            &form,
            ResultType::Matrix,
            &mut |_, at, _| times.push(at),
        )
        .await?;
        if let Some(gap) = median_gap(&mut times) {
            finest = Some(finest.map_or(gap, |f| f.min(gap)));
        }
    }
    Ok(finest.map(|g| g.max(1.0)))
}

/// `family{l1="v1",...}`: exactly the series with these labels, their values escaped as PromQL strings are.
fn series_selector(family: &str, labels: &[apf::parse::exposition::Label<'_>]) -> String {
    let matchers: Vec<String> = labels
        .iter()
        .filter(|l| l.name != "__name__")
        .map(|l| {
            let value = l
                .value
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{}=\"{value}\"", l.name)
        })
        .collect();
    format!("{family}{{{}}}", matchers.join(","))
}

/// The median time between consecutive samples (unix seconds, in any order); `None` under two samples.
fn median_gap(times: &mut [f64]) -> Option<f64> {
    times.sort_by(f64::total_cmp);
    let mut gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    if gaps.is_empty() {
        return None;
    }
    gaps.sort_by(f64::total_cmp);
    Some(gaps[gaps.len() / 2])
}

#[cfg(test)]
mod tests {
    use super::*;
    use apf::parse::exposition::Label;
    use std::borrow::Cow;

    #[test]
    fn one_series_is_named_by_all_its_labels_escaped() {
        let labels = [
            Label {
                name: "instance",
                value: Cow::Borrowed("10.0.0.1:6443"),
            },
            Label {
                name: "odd",
                value: Cow::Borrowed("a\"b\\c\nd"),
            },
        ];
        assert_eq!(
            series_selector("apiserver_flowcontrol_nominal_limit_seats", &labels),
            r#"apiserver_flowcontrol_nominal_limit_seats{instance="10.0.0.1:6443",odd="a\"b\\c\nd"}"#
        );
        assert_eq!(series_selector("x", &[]), "x{}");
    }

    #[test]
    fn the_resolution_is_the_median_gap_whatever_span_the_samples_cover() {
        // Forty seconds of 5 s scrapes (a young store), out of order, one missed scrape: 5 s, not 600 s / 8.
        let mut times = vec![140.0, 100.0, 105.0, 110.0, 120.0, 125.0, 130.0, 135.0];
        assert_eq!(median_gap(&mut times), Some(5.0));
        assert_eq!(median_gap(&mut [3.0]), None);
        assert_eq!(median_gap(&mut []), None);
    }
}
