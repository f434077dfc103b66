//! Reading APF from a Prometheus instead of the replicas: Prometheus, Thanos, Mimir, Cortex, VictoriaMetrics and
//! the providers' managed ones (GKE, AKS, AMP) answer the same HTTP API (`/api/v1/query`, instant). One query per
//! round brings every family the model reads, for every replica of every cluster the selector matches.
use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::error_chain;

/// Where and what to read.
#[derive(Debug, Clone)]
pub struct PrometheusSource {
    /// The API's base URL, e.g. `http://prometheus:9090` or a Thanos querier's.
    pub url: String,
    /// The series of the apiservers, e.g. `{job=~"apiserver|kube-apiserver"}`.
    pub selector: String,
    /// The label naming a series' cluster (absent: one cluster).
    pub cluster_label: String,
    /// The label naming a series' replica.
    pub apiserver_label: String,
    pub timeout: Duration,
}

impl PrometheusSource {
    pub const DEFAULT_SELECTOR: &'static str = r#"{job=~"apiserver|kube-apiserver"}"#;

    pub fn new(url: &str) -> Self {
        Self {
            url: url.trim_end_matches('/').to_string(),
            selector: Self::DEFAULT_SELECTOR.into(),
            cluster_label: "cluster".into(),
            apiserver_label: "instance".into(),
            timeout: Duration::from_secs(10),
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PrometheusError {
    #[error("selector {0:?}: expected label matchers in braces, e.g. {{job=\"apiserver\"}}")]
    Selector(String),
    #[error("cannot reach {url}: {detail}; check the URL and that this host can reach it")]
    Unreachable { url: String, detail: String },
    #[error("{url} answered HTTP {status}: {detail}")]
    Http {
        url: String,
        status: u16,
        detail: String,
    },
    #[error("{url}: the query failed ({kind}): {detail}")]
    Query {
        url: String,
        kind: String,
        detail: String,
    },
    #[error("{url}: not a Prometheus API answer: {detail}")]
    Body { url: String, detail: String },
}

/// One sample of an instant vector.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorSample {
    /// Every label, `__name__` included where the query keeps it.
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// `{__name__=~"a|b", <the selector's matchers>}`: the selector with a name matcher added.
pub fn with_names(selector: &str, names: &[String]) -> Result<String, PrometheusError> {
    let inner = selector
        .trim()
        .strip_prefix('{')
        .and_then(|s| s.strip_suffix('}'))
        .ok_or_else(|| PrometheusError::Selector(selector.into()))?
        .trim();
    let alternation = names
        .iter()
        .map(|n| regex::escape(n))
        .collect::<Vec<_>>()
        .join("|");
    Ok(if inner.is_empty() {
        format!("{{__name__=~\"{alternation}\"}}")
    } else {
        format!("{{__name__=~\"{alternation}\",{inner}}}")
    })
}

/// Every family in `series` at `time`, one query each (run together): `sum by (cluster, apiserver, <the labels the
/// model reads>)` of the family's series, so the answer carries no label the model would sum away anyway, and its
/// size follows the replicas and levels, not the flow schemas or the scrape's own labels. Each sample gets its
/// family's name back.
pub async fn families(
    client: &reqwest::Client,
    source: &PrometheusSource,
    series: &[(String, &[&str])],
    time: f64,
) -> Result<Vec<VectorSample>, PrometheusError> {
    let queries = series
        .iter()
        .map(|(name, labels)| {
            let by: Vec<&str> = [
                source.cluster_label.as_str(),
                source.apiserver_label.as_str(),
            ]
            .into_iter()
            .chain(labels.iter().copied())
            .collect();
            let selector = with_names(&source.selector, std::slice::from_ref(name))?;
            Ok((name, format!("sum by ({}) ({selector})", by.join(", "))))
        })
        .collect::<Result<Vec<_>, PrometheusError>>()?;
    let answers = futures_util::future::try_join_all(queries.iter().map(|(name, q)| async move {
        let samples = instant_query(client, source, q, time).await?;
        Ok::<_, PrometheusError>(samples.into_iter().map(move |mut s| {
            s.labels.insert("__name__".into(), name.to_string());
            s
        }))
    }))
    .await?;
    Ok(answers.into_iter().flatten().collect())
}

#[derive(Deserialize)]
struct Answer {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
    /// Thanos and Mimir say when a store or querier did not answer.
    #[serde(default)]
    warnings: Vec<String>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(rename = "resultType")]
    result_type: String,
    result: Vec<Series>,
}

#[derive(Deserialize)]
struct Series {
    metric: BTreeMap<String, String>,
    value: (f64, String),
}

/// An instant query at `time` (unix seconds). A partial answer (warnings) is an error: numbers from some of the
/// stores only would be presented as the whole.
pub async fn instant_query(
    client: &reqwest::Client,
    source: &PrometheusSource,
    query: &str,
    time: f64,
) -> Result<Vec<VectorSample>, PrometheusError> {
    let url = format!("{}/api/v1/query", source.url);
    let response = client
        .post(&url)
        .timeout(source.timeout)
        .form(&[("query", query.to_string()), ("time", format!("{time:.3}"))])
        .send()
        .await
        .map_err(|e| PrometheusError::Unreachable {
            url: url.clone(),
            detail: error_chain(&e),
        })?;
    let status = response.status();
    let body = response
        .text()
        .await
        .map_err(|e| PrometheusError::Unreachable {
            url: url.clone(),
            detail: error_chain(&e),
        })?;
    let answer: Answer = match serde_json::from_str(&body) {
        Ok(a) => a,
        Err(_) if !status.is_success() => {
            return Err(PrometheusError::Http {
                url,
                status: status.as_u16(),
                detail: body.chars().take(200).collect(),
            })
        }
        Err(e) => {
            return Err(PrometheusError::Body {
                url,
                detail: e.to_string(),
            })
        }
    };
    if answer.status != "success" {
        return Err(PrometheusError::Query {
            url,
            kind: answer.error_type.unwrap_or_default(),
            detail: answer.error.unwrap_or_default(),
        });
    }
    if !answer.warnings.is_empty() {
        return Err(PrometheusError::Query {
            url,
            kind: "partial".into(),
            detail: answer.warnings.join("; "),
        });
    }
    let data = answer.data.ok_or_else(|| PrometheusError::Body {
        url: url.clone(),
        detail: "no data".into(),
    })?;
    if data.result_type != "vector" {
        return Err(PrometheusError::Body {
            url,
            detail: format!("a {} where a vector was asked for", data.result_type),
        });
    }
    Ok(data
        .result
        .into_iter()
        .filter_map(|s| {
            Some(VectorSample {
                labels: s.metric,
                value: s.value.1.parse().ok()?,
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selector_gets_a_name_matcher() {
        let names = vec!["a_b".to_string(), "c".to_string()];
        assert_eq!(
            with_names(r#"{job=~"apiserver|kube-apiserver"}"#, &names).unwrap(),
            r#"{__name__=~"a_b|c",job=~"apiserver|kube-apiserver"}"#
        );
        assert_eq!(with_names("{}", &names).unwrap(), r#"{__name__=~"a_b|c"}"#);
        assert!(matches!(
            with_names("job=apiserver", &names),
            Err(PrometheusError::Selector(_))
        ));
    }
}
