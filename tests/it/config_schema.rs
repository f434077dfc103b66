//! The config file's JSON Schema (`apf-monitor config schema`) against the loader and the shipped configs: the
//! committed schema is what the binary prints, the example and the deploy configs pass both the schema and the
//! loader, and what the loader refuses (an unknown key, a bad duration, an unknown rule or enum value) the schema
//! refuses too.
use std::path::Path;

use apf_monitor::config::Config;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn printed_schema() -> serde_json::Value {
    serde_json::from_str(&crate::common::stdout_of(&["config", "schema"])).unwrap()
}

fn validator() -> jsonschema::Validator {
    jsonschema::validator_for(&printed_schema()).unwrap()
}

/// The schema's complaints about a YAML config (empty: it passes).
fn schema_errors(v: &jsonschema::Validator, yaml: &str) -> Vec<String> {
    let doc: serde_json::Value = if yaml.trim().is_empty() {
        serde_json::json!({})
    } else {
        serde_saphyr::from_str(yaml).unwrap()
    };
    v.iter_errors(&doc)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect()
}

#[test]
fn the_committed_schema_is_what_the_binary_prints() {
    let committed: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(ROOT).join("config/apf-monitor.schema.json")).unwrap(),
    )
    .unwrap();
    assert!(
        committed == printed_schema(),
        "config/apf-monitor.schema.json is stale: apf-monitor config schema > config/apf-monitor.schema.json"
    );
}

#[test]
fn the_shipped_configs_pass_the_schema_and_the_loader() {
    let v = validator();
    let example =
        std::fs::read_to_string(Path::new(ROOT).join("config/apf-monitor.example.yaml")).unwrap();
    assert_eq!(
        example.lines().next(),
        Some("# yaml-language-server: $schema=apf-monitor.schema.json"),
        "editors find the schema through the example's first line"
    );
    for file in [
        "config/apf-monitor.example.yaml",
        "deploy/base/apf-monitor.yaml",
        "deploy/tls/apf-monitor.yaml",
        "deploy/fleet/apf-monitor.yaml",
    ] {
        let text = std::fs::read_to_string(Path::new(ROOT).join(file)).unwrap();
        assert_eq!(schema_errors(&v, &text), Vec::<String>::new(), "{file}");
        Config::from_yaml(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
    }
}

#[test]
fn what_the_loader_refuses_the_schema_refuses() {
    let v = validator();
    let refused = [
        "listen_on: 0.0.0.0:9864\n",
        "scrape: {intervall: 5s}\n",
        "scrape: {interval: 5 parsecs}\n",
        "scrape: {interval: 5}\n",
        "log: {format: xml}\n",
        "rules: {APFHeadroomHigh: {threshold: 0.2}}\n",
        "rules: {APFHeadroomLow: {treshold: 0.2}}\n",
        "route: {group_wait: soon}\n",
        "receivers: [{name: hook, webhook: {url: \"http://h\", retries: 3}}]\n",
        "alerting: {leader_election: {lease_duration: 15}}\n",
        "targets: {prometheus: [{url: \"http://p:9090\", shard: 1}]}\n",
    ];
    for yaml in refused {
        assert!(
            Config::from_yaml(yaml).is_err(),
            "the loader takes {yaml:?}"
        );
        assert!(
            !schema_errors(&v, yaml).is_empty(),
            "the schema takes {yaml:?}"
        );
    }
    let accepted = [
        "",
        "scrape: {interval: 25s, timeout: 500ms}\n",
        "log: {format: json, level: debug}\n",
        "rules: {APFHeadroomLow: {threshold: 0.15, for: 2m}, APFScrapeFailing: {disabled: true}}\n",
        "route: {group_by: ['...'], group_wait: 0s, repeat_interval: 4h}\n",
        "alerting: {leader_election: {enabled: true, lease_duration: 15s}}\n",
    ];
    for yaml in accepted {
        Config::from_yaml(yaml).unwrap_or_else(|e| panic!("the loader refuses {yaml:?}: {e}"));
        assert_eq!(schema_errors(&v, yaml), Vec::<String>::new(), "{yaml:?}");
    }
}
