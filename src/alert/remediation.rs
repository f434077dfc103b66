//! The concrete change an alert proposes: isolate the flow that dominates a priority level (with a
//! `flowcontrol.apiserver.k8s.io/v1` manifest), paginate a LIST, or move shares from the level with the most headroom.
//! Pure functions of the report; numbers that are not known are said to be unknown, never guessed.
use serde_json::json;

use crate::analyze::{FlowReport, LevelReport, ListCosts};
use apf::defaults::{default_precedence, default_shares};
use apf::endpoints::flowcontrol_api_version;
use apf::matching::{implied_groups, match_request, Request, Target};
use apf::model::FlowcontrolObjects;
use apf::{limits, object_name, subject_of, EXEMPT};

/// A sentence, and a manifest when the change is one.
#[derive(Debug, Clone, PartialEq)]
pub struct Remediation {
    pub sentence: String,
    pub manifest: Option<String>,
}

/// Pressure a flow puts on its level (as the analysis ranks flows).
fn pressure(f: &FlowReport) -> f64 {
    apf::model::flow_pressure(f.waiting_requests, f.executing_seats)
}

/// The flow holding more than half of the level's waiting requests + executing seats, if one does.
pub fn dominant_flow(level: &LevelReport) -> Option<&FlowReport> {
    let flows: f64 = level.top_flows.iter().map(pressure).sum();
    let level_total = level.inqueue_requests.unwrap_or(0.0) + level.executing_seats.unwrap_or(0.0);
    // The top flows are a truncated list; the level's own totals cover the rest when known.
    let total = flows.max(level_total);
    let top = level
        .top_flows
        .iter()
        .max_by(|a, b| pressure(a).total_cmp(&pressure(b)))?;
    (total > 0.0 && pressure(top) > 0.5 * total).then_some(top)
}

/// `list pods` → (`list`, `pods`); anything that is not `verb resource` gives `None`.
fn verb_and_resource(example: &str) -> Option<(&str, &str)> {
    let (verb, what) = example.split_once(' ')?;
    (!verb.is_empty() && !what.is_empty() && !what.contains(' ')).then_some((verb, what))
}

/// The proposal for one level of one replica; `replica_levels` are all levels of that replica (to find a donor).
pub fn remediate(
    level: &LevelReport,
    replica_levels: &[LevelReport],
    lists: &ListCosts,
    objects: Option<&FlowcontrolObjects>,
) -> Remediation {
    if let Some(flow) = dominant_flow(level) {
        return isolate(flow, level, lists, objects);
    }
    move_shares(level, replica_levels)
}

fn isolate(
    flow: &FlowReport,
    level_report: &LevelReport,
    lists: &ListCosts,
    objects: Option<&FlowcontrolObjects>,
) -> Remediation {
    let level = level_report.priority_level.as_str();
    let user = flow.users.first();
    let mut who = String::new();
    if let Some(u) = user {
        who.push_str(&format!("user {u}"));
    }
    if let Some(example) = &flow.example_request {
        if !who.is_empty() {
            who.push_str(", ");
        }
        who.push_str(&format!("mostly `{example}`"));
    }
    let who = if who.is_empty() {
        String::new()
    } else {
        format!(" ({who})")
    };
    let flow_name = if flow.flow.is_empty() {
        "<no distinguisher>"
    } else {
        flow.flow.as_str()
    };
    let mut sentence = format!(
        "Isolate flow {flow_name} of flow schema {}{who} on level {level}: give it a FlowSchema of its own with a \
         small priority level, so it queues alone",
        flow.flow_schema
    );
    let is_list = flow
        .example_request
        .as_deref()
        .is_some_and(|e| e.starts_with("list "));
    if is_list {
        sentence.push_str(
            "; and have the client paginate its LIST (limit/continue) or read from an informer's cache instead",
        );
        let resource = flow
            .example_request
            .as_deref()
            .and_then(verb_and_resource)
            .map(|(_, r)| r.split('.').next().unwrap_or(r));
        if let Some(cost) = resource.and_then(|r| list_cost(r, level_report, lists)) {
            sentence.push_str(&cost);
        }
    }
    // The cluster's own FlowSchemas, matched as kube-apiserver matches: where the flow's requests land today, and
    // whether the proposed schema would catch them first.
    let today = match (user, objects) {
        (Some(u), Some(o)) => matched_today(flow, u, o),
        _ => None,
    };
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
    Remediation { sentence, manifest }
}

/// The request the flow's example stands for: its user (with the groups authenticators add) and `verb resource`.
fn example_request(flow: &FlowReport, user: &str) -> Option<Request> {
    let (verb, what) = flow
        .example_request
        .as_deref()
        .and_then(verb_and_resource)?;
    let target = if what.starts_with('/') {
        Target::NonResource { path: what.into() }
    } else {
        // `deployments.apps` names the group after the first dot; core resources have none.
        let (resource, group) = what.split_once('.').unwrap_or((what, ""));
        Target::Resource {
            api_group: group.into(),
            resource: resource.into(),
            subresource: None,
            namespace: None,
        }
    };
    Some(Request {
        user: user.into(),
        groups: implied_groups(user),
        verb: verb.into(),
        target,
    })
}

/// The FlowSchema (and its precedence) the flow's example request matches on the cluster's objects.
fn matched_today(
    flow: &FlowReport,
    user: &str,
    objects: &FlowcontrolObjects,
) -> Option<(String, u32)> {
    let request = example_request(flow, user)?;
    let m = match_request(&objects.flow_schemas, &objects.priority_levels, &request).ok()?;
    Some((m.flow_schema, m.matching_precedence))
}

/// Whether, with the manifest applied, the example request matches the manifest's schema.
fn lands_in_new_schema(
    flow: &FlowReport,
    user: &str,
    objects: &FlowcontrolObjects,
    manifest: &str,
) -> Option<bool> {
    let request = example_request(flow, user)?;
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

fn seats_word(n: u32) -> String {
    format!("{n} seat{}", if n == 1 { "" } else { "s" })
}

/// What one LIST of all of `resource` costs in seats here, and what a page or an informer would cost instead.
fn list_cost(resource: &str, level: &LevelReport, lists: &ListCosts) -> Option<String> {
    let (seats, objects, bytes) = lists.list(resource)?;
    let minor = lists.minor?;
    let of_limit = level
        .limit_seats
        .map(|l| format!(" of the level's {l:.0}"))
        .unwrap_or_default();
    let reads = match (objects, bytes) {
        (Some(o), Some(b)) => format!("{o:.0} objects, {:.1} MB", b / 1e6),
        (Some(o), None) => format!("{o:.0} objects"),
        (None, Some(b)) => format!("{:.1} MB", b / 1e6),
        (None, None) => return None,
    };
    // A page of 100: from 1.34 priced by its bytes, before by the 2·limit objects the estimator assumes of etcd.
    let page = match (minor >= 34, objects, bytes) {
        (true, Some(o), Some(b)) if o > 0.0 => {
            apf::limits::list_seats(minor, None, Some(b / o * 100.0))
        }
        (false, _, _) => apf::limits::list_seats(minor, Some(200.0), None),
        _ => None,
    };
    Some(format!(
        ": one `list {resource}` here reads {reads} and holds {}{of_limit} while it runs{}, where an informer lists \
         once and then watches",
        seats_word(seats),
        page.map(|p| format!("; a page of 100 (limit=100) holds {}", seats_word(p)))
            .unwrap_or_default()
    ))
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

/// Seats one share is worth on this replica, from the default levels whose shares are known; `None` unless they
/// agree (shares were changed).
fn seats_per_share(replica_levels: &[LevelReport]) -> Option<f64> {
    let known: Vec<(u32, f64)> = replica_levels
        .iter()
        .filter_map(|l| Some((default_shares(&l.priority_level)?, l.nominal_limit_seats?)))
        .collect();
    limits::seats_per_share(&known)
}

fn move_shares(level: &LevelReport, replica_levels: &[LevelReport]) -> Remediation {
    let name = &level.priority_level;
    let honest = |why: &str| {
        Remediation {
        sentence: format!(
            "Raise the nominalConcurrencyShares of {name} (no single flow dominates it), taking shares from a level \
             with headroom; {why}."
        ),
        manifest: None,
    }
    };
    let (Some(limit), Some(executing)) = (level.limit_seats, level.executing_seats) else {
        return honest("its limit or seats in use are not known, so how many is not known");
    };
    let queued = level
        .inqueue_seats
        .or(level.inqueue_requests)
        .unwrap_or(0.0);
    let demand = executing + queued;
    // Enough for the demand with a quarter of the limit free (the clear threshold of APFHeadroomLow).
    let needed = (demand / 0.75 - limit).ceil().max(1.0);
    let donor = replica_levels
        .iter()
        .filter(|l| l.priority_level != *name && l.priority_level != EXEMPT)
        .filter_map(|l| Some((l, l.headroom_seats?)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let Some((donor, donor_headroom)) = donor else {
        return honest("no other level reports its headroom");
    };
    let borrowing = match level.nominal_limit_seats {
        Some(n) if limit > n => format!(
            " It already borrows {:.0} seats beyond its nominal {n:.0}.",
            limit - n
        ),
        _ => String::new(),
    };
    let Some(per_share) = seats_per_share(replica_levels) else {
        return Remediation {
            sentence: format!(
                "Raise the shares of {name}: it needs about {needed:.0} more seats; take them from level {} \
                 ({donor_headroom:.0} seats free). How many seats a share is worth is not known (the shares differ \
                 from the defaults).{borrowing}",
                donor.priority_level
            ),
            manifest: None,
        };
    };
    let shares = (needed / per_share).ceil().max(1.0);
    let mut sentence = format!(
        "Raise the shares of {name}: move {shares:.0} shares from level {} (the level with the most headroom, \
         {donor_headroom:.0} seats free) so it gets about {:.0} more seats (1 share ≈ {per_share:.2} seats).{borrowing}",
        donor.priority_level,
        shares * per_share
    );
    if donor_headroom < needed {
        sentence.push_str(&format!(
            " {} has only {donor_headroom:.0} seats free: raise --max-requests-inflight/--max-mutating-requests-inflight \
             or add replicas as well.",
            donor.priority_level
        ));
    }
    Remediation {
        sentence,
        manifest: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(
        schema: &str,
        flow: &str,
        waiting: f64,
        seats: f64,
        user: &str,
        example: &str,
    ) -> FlowReport {
        FlowReport {
            flow_schema: schema.into(),
            flow: flow.into(),
            waiting_requests: waiting,
            executing_seats: seats,
            users: if user.is_empty() {
                vec![]
            } else {
                vec![user.into()]
            },
            example_request: (!example.is_empty()).then(|| example.to_string()),
        }
    }

    fn level(name: &str, nominal: f64, limit: f64, executing: f64, queued: f64) -> LevelReport {
        LevelReport {
            priority_level: name.into(),
            limit_seats: Some(limit),
            nominal_limit_seats: Some(nominal),
            executing_seats: Some(executing),
            headroom_seats: Some(limit - executing),
            headroom_ratio: Some((limit - executing) / limit),
            inqueue_requests: Some(queued),
            ..Default::default()
        }
    }

    fn docs(manifest: &str) -> Vec<serde_json::Value> {
        serde_saphyr::from_multiple(manifest).unwrap()
    }

    #[test]
    fn the_manifest_goes_ahead_of_the_schema_the_cluster_matches_today() {
        // The cluster has a schema of its own for CI runners, ahead of service-accounts: the dump names the flow's
        // schema, but the manifest must go ahead of the one that matches first.
        let objects = apf::model::parse_flowcontrol_documents(
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
        .unwrap();
        let mut l = level("workload-low", 245.0, 245.0, 230.0, 40.0);
        l.top_flows = vec![flow(
            "service-accounts",
            "system:serviceaccount:ci:runner",
            35.0,
            200.0,
            "system:serviceaccount:ci:runner",
            "list pods",
        )];
        let r = remediate(
            &l,
            std::slice::from_ref(&l),
            &ListCosts::default(),
            Some(&objects),
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
    fn a_dominant_list_is_priced_in_seats_with_what_a_page_would_cost() {
        let mut l = level("workload-low", 245.0, 245.0, 230.0, 40.0);
        l.top_flows = vec![flow(
            "service-accounts",
            "system:serviceaccount:ci:runner",
            35.0,
            200.0,
            "system:serviceaccount:ci:runner",
            "list pods",
        )];
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
        let mut l = level("workload-low", 245.0, 245.0, 230.0, 40.0);
        l.top_flows = vec![
            flow(
                "service-accounts",
                "system:serviceaccount:ci:runner",
                35.0,
                200.0,
                "system:serviceaccount:ci:runner",
                "list pods",
            ),
            flow(
                "service-accounts",
                "system:serviceaccount:x:y",
                5.0,
                30.0,
                "system:serviceaccount:x:y",
                "get configmaps",
            ),
        ];
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

    #[test]
    fn no_dominant_flow_moves_shares_from_the_level_with_most_headroom() {
        // Default levels at ServerCL 600: 1 share ≈ 2.45 seats.
        let mut low = level("global-default", 49.0, 49.0, 45.0, 6.0);
        low.top_flows = vec![
            flow("global-default", "a", 2.0, 15.0, "a", "get pods"),
            flow("global-default", "b", 2.0, 15.0, "b", "get nodes"),
            flow("global-default", "c", 2.0, 15.0, "c", "get services"),
        ];
        let levels = vec![
            low.clone(),
            level("workload-low", 245.0, 245.0, 40.0, 0.0),
            level("workload-high", 98.0, 98.0, 10.0, 0.0),
            level("system", 74.0, 74.0, 5.0, 0.0),
            level("exempt", 0.0, 600.0, 0.0, 0.0),
        ];
        assert!(dominant_flow(&low).is_none(), "17 of 51 is not over half");
        let r = remediate(&low, &levels, &ListCosts::default(), None);
        // demand 51 seats, wanted limit 51/0.75 = 68, needed 19 seats, 19 / 2.45 = 7.76 → 8 shares.
        assert!(
            r.sentence.starts_with(
                "Raise the shares of global-default: move 8 shares from level workload-low"
            ),
            "{}",
            r.sentence
        );
        assert!(r.sentence.contains("205 seats free"));
        assert!(r.manifest.is_none());
        // Shares changed from the defaults: say the seat count, admit the share count is not known.
        let mut changed = levels.clone();
        changed[2].nominal_limit_seats = Some(150.0);
        let r = remediate(&low, &changed, &ListCosts::default(), None);
        assert!(r.sentence.contains("about 19 more seats"), "{}", r.sentence);
        assert!(r.sentence.contains("is not known"));
        // Limits unknown.
        let mut unknown = low.clone();
        unknown.limit_seats = None;
        assert!(remediate(&unknown, &levels, &ListCosts::default(), None)
            .sentence
            .contains("not known"));
    }
}
