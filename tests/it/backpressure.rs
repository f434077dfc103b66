//! The back-pressure examples of `deploy/examples/` (docs/guides/back-pressure.md): a batch worker that
//! KEDA, or prometheus-adapter and an HPA, scale by the headroom of its priority level. Their queries are read out of
//! the YAML files, rendered as KEDA and the adapter send them, and run on a real Prometheus (Debian's `prometheus`)
//! that scrapes apf-monitor, which scrapes two simulated apiservers: the worker count each example asks for is its
//! maximum while the level is idle, falls to its minimum while the worker's own requests fill the level on one
//! replica (the other staying idle), and comes back once they stop.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{self, external};
use apf_sim::{KubeVersion, Scenario, SimOptions, Simulator};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/examples")
}

/// The YAML documents of `deploy/examples/FILE`.
fn read(file: &str) -> Vec<Value> {
    let path = examples().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind} expected: {docs:?}");
    found[0]
}

fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what}: a string expected, got {v}"))
}

fn count(v: &Value, what: &str) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("{what}: a count expected, got {v}"))
}

/// A number written as a Kubernetes quantity or KEDA's metadata string: "1", "0.5" (no suffixes in these examples).
fn number(v: &Value, what: &str) -> f64 {
    str_of(v, what)
        .parse()
        .unwrap_or_else(|e| panic!("{what}: {v}: {e}"))
}

/// The worker the examples scale: its Deployment and the identity its requests carry.
struct Worker {
    namespace: String,
    name: String,
    user: String,
}

fn worker() -> Worker {
    let docs = read("batch-worker.yaml");
    let deployment = one(&docs, "Deployment");
    assert_eq!(deployment["apiVersion"], "apps/v1");
    let namespace = str_of(&deployment["metadata"]["namespace"], "Deployment namespace");
    assert_eq!(one(&docs, "Namespace")["metadata"]["name"], namespace);
    // The autoscaler owns the count: a `replicas` here would be reset by every `kubectl apply`.
    assert!(
        deployment["spec"]["replicas"].is_null(),
        "the Deployment sets replicas"
    );
    let selector = deployment["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap();
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    for (k, v) in selector {
        assert_eq!(&labels[k], v, "the selector does not select the pods: {k}");
    }
    let pod = &deployment["spec"]["template"]["spec"];
    let account = str_of(&pod["serviceAccountName"], "serviceAccountName");
    let sa = one(&docs, "ServiceAccount");
    assert_eq!(sa["metadata"]["name"], account);
    assert_eq!(sa["metadata"]["namespace"], namespace);
    let image = str_of(&pod["containers"][0]["image"], "image");
    assert!(
        image.contains("REPLACE-ME"),
        "the image is a placeholder, marked: {image}"
    );
    Worker {
        namespace: namespace.to_string(),
        name: str_of(&deployment["metadata"]["name"], "Deployment name").to_string(),
        user: format!("system:serviceaccount:{namespace}:{account}"),
    }
}

/// One example's autoscaler: the query it runs and how the HPA turns the value into replicas.
#[derive(Debug)]
struct Autoscaler {
    file: &'static str,
    query: String,
    /// The AverageValue target: the HPA wants ceil(value / target) replicas.
    target: f64,
    /// KEDA's activationThreshold: at or below it, with a minimum of 0, the workers are stopped.
    activation: Option<f64>,
    min: u64,
    max: u64,
}

impl Autoscaler {
    /// The replicas asked for when the query gives `q`: ceil(q / target) within min..max (the HPA's AverageValue
    /// rule for an External metric; its minimum is at least 1), and 0 while a KEDA trigger is not active.
    fn replicas(&self, q: f64) -> u64 {
        if self.min == 0 && self.activation.is_some_and(|a| q <= a) {
            return 0;
        }
        ((q / self.target).ceil().max(0.0) as u64).clamp(self.min.max(1), self.max)
    }
}

/// The scale target reference of an autoscaler: the worker's Deployment, in its namespace.
fn assert_targets_the_worker(object: &Value, worker: &Worker, what: &str) {
    assert_eq!(
        object["metadata"]["namespace"],
        worker.namespace.as_str(),
        "{what}"
    );
    let target = &object["spec"]["scaleTargetRef"];
    assert_eq!(target["name"], worker.name.as_str(), "{what}");
    assert_eq!(target["kind"], "Deployment", "{what}");
    assert_eq!(target["apiVersion"], "apps/v1", "{what}");
}

/// `keda-scaledobject.yaml`: the query as KEDA sends it.
fn keda(worker: &Worker) -> Autoscaler {
    let docs = read("keda-scaledobject.yaml");
    let so = one(&docs, "ScaledObject");
    assert_eq!(so["apiVersion"], "keda.sh/v1alpha1");
    assert_targets_the_worker(so, worker, "ScaledObject");
    let spec = &so["spec"];
    let triggers = spec["triggers"].as_array().unwrap();
    assert_eq!(triggers.len(), 1, "{triggers:?}");
    let trigger = &triggers[0];
    assert_eq!(trigger["type"], "prometheus");
    // The mapping the file explains, and the only type KEDA's fallback works with.
    assert_eq!(trigger["metricType"], "AverageValue");
    let metadata = trigger["metadata"].as_object().unwrap();
    // KEDA's trigger metadata is a map of strings: a bare number is refused by its CRD.
    for (k, v) in metadata {
        assert!(v.is_string(), "trigger metadata {k} must be a string: {v}");
    }
    assert!(str_of(&trigger["metadata"]["serverAddress"], "serverAddress").starts_with("http"));
    // An empty answer is an error (then the fallback), never read as 0.
    assert_eq!(trigger["metadata"]["ignoreNullValues"], "false");
    let min = count(&spec["minReplicaCount"], "minReplicaCount");
    let max = count(&spec["maxReplicaCount"], "maxReplicaCount");
    let fallback = count(&spec["fallback"]["replicas"], "fallback.replicas");
    assert!(min <= fallback && fallback <= max, "{min} {fallback} {max}");
    Autoscaler {
        file: "keda-scaledobject.yaml",
        query: str_of(&trigger["metadata"]["query"], "query").to_string(),
        target: number(&trigger["metadata"]["threshold"], "threshold"),
        activation: trigger["metadata"]
            .get("activationThreshold")
            .map(|v| number(v, "activationThreshold")),
        min,
        max,
    }
}

/// The adapter's `<<.LabelMatchers>>` for a metric selector: `name="value"` per label, by name, joined by commas
/// (prometheus-adapter's `BuildExternal` with `prom.LabelEq`, which quotes as Go's %q).
fn label_matchers(match_labels: &serde_json::Map<String, Value>) -> String {
    let sorted: BTreeMap<&String, &str> = match_labels
        .iter()
        .map(|(k, v)| (k, str_of(v, "matchLabels value")))
        .collect();
    sorted
        .iter()
        .map(|(k, v)| format!("{k}={}", serde_json::to_string(v).unwrap()))
        .collect::<Vec<_>>()
        .join(",")
}

/// `prometheus-adapter-values.yaml` and `hpa.yaml`: the query the adapter sends for the HPA's External metric.
fn adapter_and_hpa(worker: &Worker) -> Autoscaler {
    let values = &read("prometheus-adapter-values.yaml")[0];
    let rules = values["rules"]["external"].as_array().unwrap();
    assert_eq!(rules.len(), 1, "{rules:?}");
    let rule = &rules[0];
    // apf-monitor's series carry apf-monitor's namespace, not the HPA's.
    assert_eq!(rule["resources"]["namespaced"], false);
    let series_query = str_of(&rule["seriesQuery"], "seriesQuery");
    let series = series_query
        .split('{')
        .next()
        .unwrap()
        .trim()
        .trim_matches('\'');
    let matches = regex::Regex::new(str_of(&rule["name"]["matches"], "name.matches")).unwrap();
    assert!(matches.is_match(series), "{matches} does not name {series}");
    let exposed = str_of(&rule["name"]["as"], "name.as");

    let docs = read("hpa.yaml");
    let hpa = one(&docs, "HorizontalPodAutoscaler");
    assert_eq!(hpa["apiVersion"], "autoscaling/v2");
    assert_targets_the_worker(hpa, worker, "HorizontalPodAutoscaler");
    let metrics = hpa["spec"]["metrics"].as_array().unwrap();
    assert_eq!(metrics.len(), 1, "{metrics:?}");
    assert_eq!(metrics[0]["type"], "External");
    let external = &metrics[0]["external"];
    assert_eq!(external["metric"]["name"], exposed);
    let selector = external["metric"]["selector"].as_object().unwrap();
    assert_eq!(
        selector.keys().collect::<Vec<_>>(),
        ["matchLabels"],
        "matchLabels only: the adapter renders other operators as regular expressions"
    );
    assert_eq!(external["target"]["type"], "AverageValue");
    let query = str_of(&rule["metricsQuery"], "metricsQuery")
        .replace("<<.Series>>", series)
        .replace(
            "<<.LabelMatchers>>",
            &label_matchers(selector["matchLabels"].as_object().unwrap()),
        );
    assert!(!query.contains("<<"), "a template field left: {query}");
    Autoscaler {
        file: "hpa.yaml",
        query,
        target: number(&external["target"]["averageValue"], "averageValue"),
        activation: None,
        min: count(&hpa["spec"]["minReplicas"], "minReplicas"),
        max: count(&hpa["spec"]["maxReplicas"], "maxReplicas"),
    }
}

#[test]
fn the_examples_fit_together() {
    let worker = worker();
    let keda = keda(&worker);
    let hpa = adapter_and_hpa(&worker);
    // One number, explained once in docs/guides/back-pressure.md: both examples ask Prometheus the same question.
    assert_eq!(keda.query, hpa.query);
    assert!(
        keda.query.contains("apf_priority_level_headroom_ratio"),
        "{}",
        keda.query
    );
    for a in [&keda, &hpa] {
        assert!(a.min < a.max, "{a:?}");
        // Full headroom asks for every worker, none asks for the minimum.
        assert_eq!(a.replicas(a.max as f64 * a.target), a.max, "{a:?}");
        assert_eq!(a.replicas(0.0), a.min, "{a:?}");
    }
}

/// The value of an instant query that must give one number (KEDA refuses more, the HPA would add them up); None
/// while it gives nothing.
async fn value(prom: &external::Process, query: &str) -> Option<f64> {
    let result = external::prom_query(prom, query).await;
    assert!(
        result.len() <= 1,
        "{query} gives several values: {result:?}"
    );
    str_of(&result.first()?["value"][1], "value").parse().ok()
}

/// Waits until every autoscaler asks for the replicas `want` says and `guard` (a PromQL filter, when given) holds,
/// or fails after 90 s; the values the queries gave then.
async fn wait_for(
    prom: &external::Process,
    autoscalers: &[Autoscaler],
    phase: &str,
    want: impl Fn(&Autoscaler) -> u64,
    guard: Option<&str>,
) -> Vec<f64> {
    let started = Instant::now();
    loop {
        let mut seen = Vec::new();
        for a in autoscalers {
            let q = value(prom, &a.query).await;
            seen.push((a.file, q, q.map(|q| a.replicas(q))));
        }
        let asked = seen
            .iter()
            .zip(autoscalers)
            .all(|((_, _, replicas), a)| *replicas == Some(want(a)));
        let guarded = match guard {
            Some(g) => value(prom, g).await.is_some(),
            None => true,
        };
        if asked && guarded {
            let values: Vec<f64> = seen.iter().filter_map(|(_, q, _)| *q).collect();
            eprintln!(
                "{phase}: {values:?} after {:.1} s",
                started.elapsed().as_secs_f64()
            );
            return values;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "{phase}: not every autoscaler asked for its replicas in 90 s (guard {guard:?}: {guarded}); \
             (file, value, replicas): {seen:?}; Prometheus log:\n{}",
            prom.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_examples_scale_the_workers_down_as_headroom_falls_and_up_as_it_recovers() {
    let started = Instant::now();
    let worker = worker();
    let autoscalers = [keda(&worker), adapter_and_hpa(&worker)];

    // The workers' own requests, as the example Deployment's service account sends them: wide LISTs, far more than
    // the level holds once they run (the simulator checks they land in service-accounts, hence workload-low).
    let scenario = Scenario::from_yaml(&format!(
        "duration: 600s\nflows:\n\
         - {{name: workers, flow_schema: service-accounts, user: \"{}\", verb: list, resource: configmaps, \
            namespace: {}, seats: 10, duration: 2s, rate: [{{at: 0s, rps: 60}}]}}\n",
        worker.user, worker.namespace
    ))
    .unwrap();
    // Two apiserver replicas: the workers' load reaches the hot one only while the test lets it (its load share);
    // the cold one stays idle, so the examples must follow the worst replica, not an average.
    let sim = || {
        let sim =
            Simulator::try_new(SimOptions::new(KubeVersion::new(34, 0), scenario.clone())).unwrap();
        sim.set_load_share(0.0);
        sim
    };
    let (hot, cold) = (sim(), sim());
    let _clocks = [
        hot.spawn_clock(Duration::from_millis(100)),
        cold.spawn_clock(Duration::from_millis(100)),
    ];
    let hot_url = common::serve_sim(&hot).await;
    let cold_url = common::serve_sim(&cold).await;
    let mut config = common::fast_config(&hot_url);
    let mut cold_target = common::sim_target(&cold_url);
    cold_target.name = Some("cold".into());
    let mut hot_target = common::sim_target(&hot_url);
    hot_target.name = Some("hot".into());
    config.targets.static_targets = vec![hot_target, cold_target];
    let monitor = common::start_monitor(&config).await;
    let prom = external::prometheus(
        &[(
            "apf-monitor",
            monitor.url.trim_start_matches("http://").to_string(),
        )],
        "groups: []\n",
    )
    .await;
    let idle = wait_for(&prom, &autoscalers, "idle", |a| a.max, None).await;
    hot.set_load_share(1.0);
    // Full on the hot replica while the cold one is nearly all free: the worst replica counts.
    let cold_free = r#"apf_priority_level_headroom_ratio{apiserver="cold",priority_level="workload-low"} > 0.9"#;
    let filled = wait_for(&prom, &autoscalers, "filled", |a| a.min, Some(cold_free)).await;
    hot.set_load_share(0.0);
    let recovered = wait_for(&prom, &autoscalers, "recovered", |a| a.max, None).await;
    for i in 0..autoscalers.len() {
        assert!(
            filled[i] < idle[i] && filled[i] < recovered[i],
            "{}: idle {}, filled {}, recovered {}",
            autoscalers[i].file,
            idle[i],
            filled[i],
            recovered[i]
        );
    }
    eprintln!("in all {:.1} s", started.elapsed().as_secs_f64());
}
