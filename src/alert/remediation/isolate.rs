//! A flow that dominates a shared level: give it a FlowSchema and a small priority level of its own (a
//! `flowcontrol.apiserver.k8s.io/v1` manifest), checked against the cluster's FlowSchemas with kube-apiserver's
//! matching; or, once that is in force, say so instead of proposing it again.
use serde_json::json;

use super::{client_advice, Remediation};
use crate::analyze::verb_and_resource;
use crate::analyze::{FlowReport, LevelReport, ListCosts};
use apf::defaults::default_precedence;
use apf::endpoints::flowcontrol_api_version;
use apf::matching::{match_request, Match};
use apf::model::FlowcontrolObjects;
use apf::{object_name, subject_of};

/// How a flow's requests are named in a sentence: `flow F of flow schema S (user U, mostly `list pods`)`.
pub(super) fn flow_words(flow: &FlowReport) -> String {
    let mut who = Vec::new();
    if let Some(u) = flow.users.first() {
        who.push(format!("user {u}"));
    }
    if let Some(example) = &flow.example_request {
        who.push(format!("mostly `{example}`"));
    }
    let who = if who.is_empty() {
        String::new()
    } else {
        format!(" ({})", who.join(", "))
    };
    let flow_name = if flow.flow.is_empty() {
        "<no distinguisher>"
    } else {
        flow.flow.as_str()
    };
    format!("flow {flow_name} of flow schema {}{who}", flow.flow_schema)
}

pub(super) fn isolate(
    flow: &FlowReport,
    level_report: &LevelReport,
    replica_levels: &[LevelReport],
    lists: &ListCosts,
    objects: Option<&FlowcontrolObjects>,
) -> Remediation {
    let level = level_report.priority_level.as_str();
    let user = flow.users.first();
    // The level the manifest makes already serves on this replica, but the objects were read before it was made
    // (they are re-read as they change; a scrape can come first): the manifest is in force.
    if let Some(own) = user.map(|u| object_name("isolate-", u)).filter(|own| {
        replica_levels.iter().any(|l| &l.priority_level == own)
            && !objects.is_some_and(|o| o.priority_levels.iter().any(|p| &p.name == own))
    }) {
        return Remediation {
            sentence: format!(
                "Nothing more to change on {level} for {}: level {own}, of the manifest apf-monitor proposed for it, \
                 serves on this replica. What {level} still shows is left from before the change: requests that \
                 waited are served or time out, and the window's rates fall to 0 within one window.",
                flow_words(flow)
            ),
            ..Default::default()
        };
    }
    // The cluster's own FlowSchemas, matched as kube-apiserver matches: where the flow's requests land today, and
    // whether the proposed schema would catch them first.
    let today = match (user, objects) {
        (Some(u), Some(o)) => matched_today(flow, u, o),
        _ => None,
    };
    if let Some(now) = today.as_ref().filter(|m| m.priority_level != level) {
        return already_moved(flow, level, now);
    }
    let mut sentence = format!(
        "Isolate {} on level {level}: give it a FlowSchema of its own with a small priority level, so it queues \
         alone",
        flow_words(flow)
    );
    if let Some(advice) = client_advice(flow, level_report, lists) {
        sentence.push_str("; and ");
        sentence.push_str(&advice);
    }
    let today = today.map(|m| (m.flow_schema, m.matching_precedence));
    let manifest =
        user.map(|u| isolation_manifest(flow, u, today.as_ref().map(|(s, p)| (s.as_str(), *p))));
    if let (Some(u), Some(o), Some(m), Some((schema, p))) = (user, objects, &manifest, &today) {
        match lands_in_new_schema(flow, u, o, m) {
            Some(true) => sentence.push_str(&format!(
                " (checked with kube-apiserver's matching on the cluster's FlowSchemas: its requests match {schema} \
                 at precedence {p} today, and the manifest's schema first)"
            )),
            Some(false) => sentence.push_str(&format!(
                " (careful: on the cluster's FlowSchemas its requests match {schema} at precedence {p}, ahead of \
                 the manifest's schema; lower its matchingPrecedence further)"
            )),
            None => {}
        }
    }
    if manifest.is_none() {
        sentence
            .push_str(" (no user was seen in the dumps: enable request details to get a manifest)");
    }
    sentence.push('.');
    Remediation {
        sentence,
        manifest,
        set: Vec::new(),
    }
}

/// The flow's requests match another level on the objects in force: the isolation (or another change) is done, and
/// what the window still shows here is left from before it.
fn already_moved(flow: &FlowReport, level: &str, now: &Match) -> Remediation {
    Remediation {
        sentence: format!(
            "Nothing more to change on {level} for {}: on the cluster's FlowSchemas its requests now match {} \
             (precedence {}) and go to level {}. What {level} still shows is left from before the change: requests \
             that waited are served or time out, and the window's rates fall to 0 within one window.",
            flow_words(flow),
            now.flow_schema,
            now.matching_precedence,
            now.priority_level
        ),
        ..Default::default()
    }
}

/// The FlowSchema, its precedence and its level that the flow's example request matches on the cluster's objects.
fn matched_today(flow: &FlowReport, user: &str, objects: &FlowcontrolObjects) -> Option<Match> {
    let request = flow.request_of(user)?;
    match_request(&objects.flow_schemas, &objects.priority_levels, &request).ok()
}

/// Whether, with the manifest applied, the example request matches the manifest's schema.
fn lands_in_new_schema(
    flow: &FlowReport,
    user: &str,
    objects: &FlowcontrolObjects,
    manifest: &str,
) -> Option<bool> {
    let request = flow.request_of(user)?;
    let added = apf::model::parse_flowcontrol_documents(manifest).ok()?;
    let new_schema = added.flow_schemas.first()?.name.clone();
    let mut schemas = objects.flow_schemas.clone();
    schemas.retain(|s| s.name != new_schema);
    schemas.extend(added.flow_schemas);
    let mut levels = objects.priority_levels.clone();
    levels.extend(added.priority_levels);
    let m = match_request(&schemas, &levels, &request).ok()?;
    Some(m.flow_schema == new_schema)
}

/// PriorityLevelConfiguration + FlowSchema (flowcontrol.apiserver.k8s.io/v1) matching this user, and the
/// resource and verb seen, ahead of the schema that matches the flow today: `today` as the cluster's objects say
/// (schema, precedence), else the default schema's precedence.
pub fn isolation_manifest(flow: &FlowReport, user: &str, today: Option<(&str, u32)>) -> String {
    let name = object_name("isolate-", user);
    let subject = subject_of(user);
    let (schema_today, today) = match today {
        Some((schema, p)) => (schema, Some(p)),
        None => (
            flow.flow_schema.as_str(),
            default_precedence(&flow.flow_schema),
        ),
    };
    // Lower numbers match first; 1 and 2 belong to exempt and probes.
    let precedence = today.map_or(500, |p| p.saturating_sub(1).max(2));
    let mut rule = json!({"subjects": [subject]});
    match flow.example_request.as_deref().and_then(verb_and_resource) {
        Some((verb, path)) if path.starts_with('/') => {
            rule["nonResourceRules"] = json!([{"verbs": [verb], "nonResourceURLs": [path]}]);
        }
        Some((verb, resource)) => {
            // `deployments.apps` names the group after the first dot; core resources have none.
            let (resource, group) = resource.split_once('.').unwrap_or((resource, ""));
            rule["resourceRules"] = json!([{
                "verbs": [verb],
                "apiGroups": [group],
                "resources": [resource],
                "clusterScope": true,
                "namespaces": ["*"],
            }]);
        }
        None => {
            rule["resourceRules"] = json!([{
                "verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true, "namespaces": ["*"],
            }]);
            rule["nonResourceRules"] = json!([{"verbs": ["*"], "nonResourceURLs": ["*"]}]);
        }
    }
    let api_version = flowcontrol_api_version("v1");
    let plc = json!({
        "apiVersion": api_version,
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": name},
        "spec": {
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": 5,
                "lendablePercent": 0,
                "limitResponse": {
                    "type": "Queue",
                    "queuing": {"queues": 16, "handSize": 4, "queueLengthLimit": 50},
                },
            },
        },
    });
    let fs = json!({
        "apiVersion": api_version,
        "kind": "FlowSchema",
        "metadata": {"name": name},
        "spec": {
            "priorityLevelConfiguration": {"name": name},
            "matchingPrecedence": precedence,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [rule],
        },
    });
    let header = match today {
        Some(p) => format!(
            "# Matches {user} ahead of FlowSchema {} (precedence {p}); a level of its own keeps its requests from\n\
             # taking the seats and queues of everyone else.\n",
            schema_today
        ),
        None => format!(
            "# FlowSchema {} is not a default one and its precedence is not known here: set matchingPrecedence\n\
             # below its value (kubectl get flowschema {} -o jsonpath='{{.spec.matchingPrecedence}}').\n",
            flow.flow_schema, flow.flow_schema
        ),
    };
    // serde_json's maps are sorted, which happens to give apiVersion, kind, metadata, spec.
    let doc = |v: &serde_json::Value| serde_saphyr::to_string(v).unwrap_or_default();
    format!("{header}{}---\n{}", doc(&plc), doc(&fs))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::remediate;
    use super::super::tests::{flow, level};
    use super::*;

    fn docs(manifest: &str) -> Vec<serde_json::Value> {
        serde_saphyr::from_multiple(manifest).unwrap()
    }

    /// service-accounts (precedence 9000, to workload-low) and a schema of its own for CI runners ahead of it.
    pub(crate) fn cluster_objects() -> FlowcontrolObjects {
        apf::model::parse_flowcontrol_documents(
            r#"{"kind": "FlowSchemaList", "items": [
              {"metadata": {"name": "service-accounts"}, "spec": {"matchingPrecedence": 9000,
                "priorityLevelConfiguration": {"name": "workload-low"}, "distinguisherMethod": {"type": "ByUser"},
                "rules": [{"subjects": [{"kind": "Group", "group": {"name": "system:serviceaccounts"}}],
                  "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}]}]}},
              {"metadata": {"name": "ci"}, "spec": {"matchingPrecedence": 5000,
                "priorityLevelConfiguration": {"name": "workload-low"},
                "rules": [{"subjects": [{"kind": "ServiceAccount", "serviceAccount": {"namespace": "ci", "name": "*"}}],
                  "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}]}]}}]}
---
            {"kind": "PriorityLevelConfigurationList", "items": [
              {"metadata": {"name": "workload-low"}, "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 100,
                "limitResponse": {"type": "Queue", "queuing": {"queues": 128, "handSize": 6, "queueLengthLimit": 50}}}}}]}"#,
        )
        .unwrap()
    }

    pub(crate) fn runner_on_workload_low() -> LevelReport {
        let mut l = level("workload-low", 245.0, 245.0, 230.0, 40.0);
        l.top_flows = vec![flow(
            "service-accounts",
            "system:serviceaccount:ci:runner",
            35.0,
            200.0,
            "system:serviceaccount:ci:runner",
            "list pods",
        )];
        l
    }

    #[test]
    fn the_manifest_goes_ahead_of_the_schema_the_cluster_matches_today() {
        // The cluster has a schema of its own for CI runners, ahead of service-accounts: the dump names the flow's
        // schema, but the manifest must go ahead of the one that matches first.
        let l = runner_on_workload_low();
        let r = remediate(
            &l,
            std::slice::from_ref(&l),
            &ListCosts::default(),
            Some(&cluster_objects()),
        );
        assert!(
            r.sentence.contains(
                "its requests match ci at precedence 5000 today, and the manifest's schema first"
            ),
            "{}",
            r.sentence
        );
        let m = r.manifest.unwrap();
        assert!(m.contains("matchingPrecedence: 4999"), "{m}");
        assert!(
            m.contains("ahead of FlowSchema ci (precedence 5000)"),
            "{m}"
        );
    }

    #[test]
    fn once_the_isolation_is_in_force_it_is_not_proposed_again() {
        // The window still shows the runner on workload-low (its means cover the minute before the change), but the
        // cluster's objects now send its requests to a level of its own: the manifest applied.
        let l = runner_on_workload_low();
        let before = remediate(
            &l,
            std::slice::from_ref(&l),
            &ListCosts::default(),
            Some(&cluster_objects()),
        );
        let mut objects = cluster_objects();
        let applied =
            apf::model::parse_flowcontrol_documents(&before.manifest.clone().unwrap()).unwrap();
        objects.flow_schemas.extend(applied.flow_schemas);
        objects.priority_levels.extend(applied.priority_levels);
        let r = remediate(
            &l,
            std::slice::from_ref(&l),
            &ListCosts::default(),
            Some(&objects),
        );
        assert_eq!(r.manifest, None, "{}", r.sentence);
        assert!(
            r.sentence.starts_with(
                "Nothing more to change on workload-low for flow system:serviceaccount:ci:runner of flow schema \
                 service-accounts"
            ),
            "{}",
            r.sentence
        );
        assert!(
            r.sentence.contains(
                "its requests now match isolate-ci-runner (precedence 4999) and go to level isolate-ci-runner"
            ),
            "{}",
            r.sentence
        );
        assert!(!r.sentence.contains("Isolate"), "{}", r.sentence);
    }

    #[test]
    fn a_level_of_the_manifest_on_the_replica_is_the_fix_in_force_though_the_objects_are_older() {
        let l = runner_on_workload_low();
        let mut own = level("isolate-ci-runner", 12.0, 12.0, 12.0, 30.0);
        own.top_flows = Vec::new();
        let replica = vec![l.clone(), own];
        let r = remediate(
            &l,
            &replica,
            &ListCosts::default(),
            Some(&cluster_objects()),
        );
        assert_eq!(r.manifest, None, "{}", r.sentence);
        assert!(
            r.sentence.starts_with(
                "Nothing more to change on workload-low for flow system:serviceaccount:ci:runner of flow schema \
                 service-accounts (user system:serviceaccount:ci:runner, mostly `list pods`): level \
                 isolate-ci-runner, of the manifest apf-monitor proposed for it, serves on this replica."
            ),
            "{}",
            r.sentence
        );
        // Objects that have the level: their matching decides (here the runner still matches ci, ahead of the
        // manifest's schema, which is not there): the isolation is proposed.
        let mut objects = cluster_objects();
        objects.priority_levels.push(apf::PriorityLevelConfig {
            name: "isolate-ci-runner".into(),
            queuing: true,
            exempt: false,
            queues: Some(16),
            hand_size: Some(4),
            queue_length_limit: Some(50),
            shares: Some(5),
            lendable_percent: Some(0),
            borrowing_limit_percent: None,
        });
        let r = remediate(&l, &replica, &ListCosts::default(), Some(&objects));
        assert!(r.sentence.starts_with("Isolate flow"), "{}", r.sentence);
    }

    #[test]
    fn a_dominant_list_is_priced_in_seats_with_what_a_page_would_cost() {
        let l = runner_on_workload_low();
        let lists = |minor| ListCosts {
            minor: Some(minor),
            objects: std::sync::Arc::new([("pods".to_string(), 12_000.0)].into()),
            bytes: std::sync::Arc::new([("pods".to_string(), 48e6)].into()),
        };
        // 1.34 prices by bytes: 48 MB is 480 → capped at 100 seats; a page of 100 pods (400 kB) is 4.
        let r = remediate(&l, std::slice::from_ref(&l), &lists(34), None);
        assert!(
            r.sentence.contains(
                "one `list pods` here reads 12000 objects, 48.0 MB and holds 100 seats of the level's 245 while it \
                 runs; a page of 100 (limit=100) holds 4 seats, where an informer lists once and then watches"
            ),
            "{}",
            r.sentence
        );
        // Before 1.34, by objects: 10 seats at most; a page is priced as 2·limit objects: 2 seats.
        let r = remediate(&l, std::slice::from_ref(&l), &lists(28), None);
        assert!(
            r.sentence.contains("holds 10 seats of the level's 245"),
            "{}",
            r.sentence
        );
        assert!(
            r.sentence
                .contains("a page of 100 (limit=100) holds 2 seats"),
            "{}",
            r.sentence
        );
        // Nothing known of the resource: nothing said.
        let r = remediate(&l, std::slice::from_ref(&l), &ListCosts::default(), None);
        assert!(!r.sentence.contains("here reads"), "{}", r.sentence);
    }

    #[test]
    fn dominant_service_account_list_gets_an_isolating_manifest() {
        let mut l = runner_on_workload_low();
        l.top_flows.push(flow(
            "service-accounts",
            "system:serviceaccount:x:y",
            5.0,
            30.0,
            "system:serviceaccount:x:y",
            "get configmaps",
        ));
        let r = remediate(&l, std::slice::from_ref(&l), &ListCosts::default(), None);
        assert!(
            r.sentence.starts_with(
                "Isolate flow system:serviceaccount:ci:runner of flow schema service-accounts (user \
                 system:serviceaccount:ci:runner, mostly `list pods`)"
            ),
            "{}",
            r.sentence
        );
        assert!(r.sentence.contains("paginate its LIST (limit/continue)"));
        let m = r.manifest.unwrap();
        let d = docs(&m);
        assert_eq!(d.len(), 2);
        assert_eq!(d[0]["apiVersion"], "flowcontrol.apiserver.k8s.io/v1");
        assert_eq!(d[0]["kind"], "PriorityLevelConfiguration");
        assert_eq!(d[0]["metadata"]["name"], "isolate-ci-runner");
        assert_eq!(d[0]["spec"]["type"], "Limited");
        assert_eq!(d[0]["spec"]["limited"]["nominalConcurrencyShares"], 5);
        assert_eq!(d[0]["spec"]["limited"]["lendablePercent"], 0);
        let q = &d[0]["spec"]["limited"]["limitResponse"];
        assert_eq!(q["type"], "Queue");
        assert_eq!(q["queuing"]["queues"], 16);
        assert_eq!(q["queuing"]["handSize"], 4);
        assert_eq!(q["queuing"]["queueLengthLimit"], 50);
        assert_eq!(d[1]["apiVersion"], "flowcontrol.apiserver.k8s.io/v1");
        assert_eq!(d[1]["kind"], "FlowSchema");
        assert_eq!(
            d[1]["spec"]["matchingPrecedence"], 8999,
            "one below service-accounts' 9000"
        );
        assert_eq!(
            d[1]["spec"]["priorityLevelConfiguration"]["name"],
            "isolate-ci-runner"
        );
        assert_eq!(d[1]["spec"]["distinguisherMethod"]["type"], "ByUser");
        let rule = &d[1]["spec"]["rules"][0];
        assert_eq!(rule["subjects"][0]["kind"], "ServiceAccount");
        assert_eq!(rule["subjects"][0]["serviceAccount"]["namespace"], "ci");
        assert_eq!(rule["subjects"][0]["serviceAccount"]["name"], "runner");
        assert_eq!(rule["resourceRules"][0]["verbs"][0], "list");
        assert_eq!(rule["resourceRules"][0]["resources"][0], "pods");
        assert_eq!(rule["resourceRules"][0]["apiGroups"][0], "");
    }

    #[test]
    fn user_subject_group_resource_and_precedence_floor() {
        let f = flow("probes", "", 1.0, 1.0, "alice", "watch deployments.apps");
        let d = docs(&isolation_manifest(&f, "alice", None));
        assert_eq!(d[1]["spec"]["matchingPrecedence"], 2, "never below 2");
        let rule = &d[1]["spec"]["rules"][0];
        assert_eq!(rule["subjects"][0]["kind"], "User");
        assert_eq!(rule["subjects"][0]["user"]["name"], "alice");
        assert_eq!(rule["resourceRules"][0]["apiGroups"][0], "apps");
        assert_eq!(rule["resourceRules"][0]["resources"][0], "deployments");
        // Unknown request: every verb and resource, and non-resource URLs.
        let f = flow("my-schema", "bob", 1.0, 1.0, "bob", "");
        let m = isolation_manifest(&f, "bob", None);
        assert!(m.starts_with("# FlowSchema my-schema is not a default one"));
        let d = docs(&m);
        assert_eq!(
            d[1]["spec"]["rules"][0]["nonResourceRules"][0]["nonResourceURLs"][0],
            "*"
        );
        assert_eq!(
            d[1]["spec"]["rules"][0]["resourceRules"][0]["verbs"][0],
            "*"
        );
        // A user name that needs quoting stays one valid YAML string.
        let weird = "o'neil: \"x\" #1";
        let d = docs(&isolation_manifest(
            &flow("global-default", weird, 1.0, 1.0, weird, ""),
            weird,
            None,
        ));
        assert_eq!(
            d[1]["spec"]["rules"][0]["subjects"][0]["user"]["name"],
            weird
        );
        assert_eq!(d[1]["spec"]["matchingPrecedence"], 9899);
        assert_eq!(d[0]["metadata"]["name"], "isolate-o-neil-x-1");
    }
}
