//! A level that already holds one client alone (FlowSchemas that name only it): what waits and is rejected there is
//! that client's own excess, and isolating it again would change nothing. The fix is the client's: send less; or, if
//! that load is honest and the level too small for it, a bigger share, said as such with its numbers.
use std::collections::BTreeSet;

use super::shares::{from_words, gain_words, more_concurrency, rounded, shortfall};
use super::{client_advice, demand_words, quarter_free, server_words, Remediation};
use crate::analyze::{LevelReport, ListCosts};
use apf::model::FlowcontrolObjects;
use apf::share_move::ShareMove;
use apf::{object_name, Subject};

/// The one client a level holds, and the FlowSchemas that send it there.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Owner {
    pub user: String,
    pub flow_schemas: Vec<String>,
}

/// The user a subject names alone; `None` for a group, a wildcard or an unknown kind (many users).
fn one_user(s: &Subject) -> Option<String> {
    match s {
        Subject::User(name) if name != "*" => Some(name.clone()),
        Subject::ServiceAccount { namespace, name } if name != "*" => {
            Some(format!("system:serviceaccount:{namespace}:{name}"))
        }
        _ => None,
    }
}

/// The client a level holds alone: every FlowSchema sending requests to it names that one user and no one else.
/// Where the cluster's objects name no schema for the level, a level and schema named as apf-monitor's own
/// isolation manifest names them for a flow seen on the level.
pub(super) fn owner(level: &LevelReport, objects: Option<&FlowcontrolObjects>) -> Option<Owner> {
    let name = level.priority_level.as_str();
    let schemas: Vec<_> = objects
        .iter()
        .flat_map(|o| &o.flow_schemas)
        .filter(|s| s.priority_level == name)
        .collect();
    if schemas.is_empty() {
        // No objects, or objects read before the level was made (they are re-read as they change, but a scrape can
        // come first): the names apf-monitor's own isolation manifest gives.
        return level.top_flows.iter().find_map(|flow| {
            let user = flow.users.first()?;
            let own = object_name("isolate-", user);
            (own == name && flow.flow_schema == own).then(|| Owner {
                user: user.clone(),
                flow_schemas: vec![own],
            })
        });
    }
    let mut users = BTreeSet::new();
    for subject in schemas
        .iter()
        .flat_map(|s| &s.rules)
        .flat_map(|r| &r.subjects)
    {
        users.insert(one_user(subject)?);
    }
    let mut users = users.into_iter();
    match (users.next(), users.next()) {
        (Some(user), None) => Some(Owner {
            user,
            flow_schemas: schemas.iter().map(|s| s.name.clone()).collect(),
        }),
        _ => None,
    }
}

pub(super) fn slow_down(
    owner: &Owner,
    level: &LevelReport,
    replica_levels: &[LevelReport],
    lists: &ListCosts,
    objects: Option<&FlowcontrolObjects>,
) -> Remediation {
    let name = &level.priority_level;
    let flow = level
        .top_flows
        .iter()
        .find(|f| f.users.first() == Some(&owner.user));
    let mostly = flow
        .and_then(|f| f.example_request.as_deref())
        .map(|e| format!("; mostly `{e}`"))
        .unwrap_or_default();
    let schemas = match owner.flow_schemas.as_slice() {
        [one] => format!("FlowSchema {one} matches"),
        many => format!("FlowSchemas {} match", many.join(", ")),
    };
    let mut ways = Vec::new();
    if let Some(advice) = flow.and_then(|f| client_advice(f, level, lists)) {
        ways.push(advice);
    }
    ways.push(
        "run fewer workers or lower its client-side rate limit (client-go's QPS and Burst, often flags such as \
         --kube-api-qps and --kube-api-burst)"
            .to_string(),
    );
    let mut sentence = format!(
        "{name} already holds one client alone, user {} ({schemas} only it{mostly}): what waits and is rejected \
         here is that client's own excess, and no other flow pays for it. Slow the client down: {}.",
        owner.user,
        ways.join("; or ")
    );
    sentence.push_str(&bigger_share(name, level, replica_levels, objects));
    Remediation {
        sentence,
        ..Default::default()
    }
}

/// What a bigger share would do if the client's load is honest: the move, when the other levels can spare enough
/// for it; else why no share move carries that load. Empty when the level is not short.
fn bigger_share(
    name: &str,
    level: &LevelReport,
    replica_levels: &[LevelReport],
    objects: Option<&FlowcontrolObjects>,
) -> String {
    let Some(s) = shortfall(level, replica_levels, objects) else {
        return String::new();
    };
    let load = demand_words(level);
    let limit = level.limit_seats.unwrap_or(0.0).round();
    let (need, need_words) = quarter_free(s.demand);
    let short = format!(
        " Its load ({load}) needs {need_words}, {:.0} more than the level's {limit:.0}",
        need - limit
    );
    let no_move = format!(
        ": no share move carries it; the client must send less, or the server needs {}.",
        more_concurrency(s.server_seats)
    );
    if let Some(server) = s.server_seats.filter(|&(_, high)| need > f64::from(high)) {
        return format!(
            " Its load ({load}) needs {need_words}, more than this replica has ({}){no_move}",
            server_words(server)
        );
    }
    match s.proposal.map(rounded) {
        Some(ShareMove::Move {
            from,
            seats,
            nominal_seats,
            short,
            ..
        }) if short <= 0.0 => format!(
            " If that load ({load}) is honest, {name} is too small for it: move {} to it, so it gets {}, what the \
             other levels spare beyond their own load: {limit:.0} + {seats:.0} = {:.0} in all, for the {need_words}.",
            from_words(&from),
            gain_words(seats, nominal_seats, s.per_share.unwrap_or(0.0)),
            limit + seats
        ),
        // Carried by the others together, but not by the few levels one move takes from.
        Some(ShareMove::Move {
            from, seats, spare, ..
        }) if s.needed <= spare => format!(
            "{short}: if that load is honest, {name} is too small for it, and shares for it come from more than {} \
             levels ({spare:.0} seats spare in all beyond their own load); {} give about {seats:.0}. Or the client \
             sends less.",
            apf::share_move::MAX_DONORS,
            from_words(&from)
        ),
        Some(ShareMove::Move { spare, .. }) => format!(
            "{short}, more than the other levels spare beyond their own load ({spare:.0} seats){no_move}"
        ),
        Some(ShareMove::NoSpare { spare }) => format!(
            "{short}, more than the other levels spare beyond their own load ({spare:.0} seats){no_move}"
        ),
        Some(ShareMove::TooSmall { .. }) => String::new(),
        None if s.needed > 0.0 => format!(
            "{short}; how many shares that is is not known (the cluster's PriorityLevelConfigurations were not read)."
        ),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::remediate;
    use super::super::tests::{flow, idle_replica, level};
    use super::*;

    const AGENT: &str = "system:serviceaccount:monitoring:agent";
    const ISOLATED: &str = "isolate-monitoring-agent";

    /// The default objects of 1.34 with the isolation apf-monitor proposes for the agent applied.
    fn objects_with_isolation() -> FlowcontrolObjects {
        let v = apf::KubeVersion::new(34, 0);
        let mut objects = FlowcontrolObjects {
            priority_levels: apf::defaults::default_priority_levels(v),
            flow_schemas: Vec::new(),
        };
        let default_schemas = apf::model::parse_flowcontrol_documents(
            r#"{"kind": "FlowSchemaList", "items": [
              {"metadata": {"name": "service-accounts"}, "spec": {"matchingPrecedence": 9000,
                "priorityLevelConfiguration": {"name": "workload-low"}, "distinguisherMethod": {"type": "ByUser"},
                "rules": [{"subjects": [{"kind": "Group", "group": {"name": "system:serviceaccounts"}}],
                  "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}]}]}}]}"#,
        )
        .unwrap();
        objects.flow_schemas.extend(default_schemas.flow_schemas);
        let f = flow("service-accounts", AGENT, 1.0, 1.0, AGENT, "list pods");
        let applied = apf::model::parse_flowcontrol_documents(&super::super::isolation_manifest(
            &f,
            AGENT,
            Some(("service-accounts", 9000)),
        ))
        .unwrap();
        objects.flow_schemas.extend(applied.flow_schemas);
        objects.priority_levels.extend(applied.priority_levels);
        objects
    }

    /// A replica of 600 seats with the isolation in force (the 5-share level gets 12 seats of its own), idle but
    /// for `isolated`.
    fn replica(isolated: &LevelReport) -> Vec<LevelReport> {
        idle_replica(&objects_with_isolation().priority_levels, &[isolated])
    }

    fn isolated_level(executing: f64, queued: f64, queued_seats: f64) -> LevelReport {
        let mut l = level(
            "isolate-monitoring-agent",
            12.0,
            executing.max(12.0),
            executing,
            queued,
        );
        l.lower_limit_seats = Some(12.0);
        l.inqueue_seats = Some(queued_seats);
        l.top_flows = vec![flow(
            "isolate-monitoring-agent",
            AGENT,
            queued,
            executing,
            AGENT,
            "list pods",
        )];
        l
    }

    #[test]
    fn a_level_its_flow_holds_alone_is_not_isolated_again_nor_emptied_into_it() {
        // After `check --output manifests | kubectl apply`: the agent floods its own level (116 seats with what it
        // borrows, 196 requests waiting for 392).
        let l = isolated_level(116.0, 196.0, 392.0);
        let objects = objects_with_isolation();
        let r = remediate(&l, &replica(&l), &ListCosts::default(), Some(&objects));
        assert_eq!(r.manifest, None);
        assert!(
            r.sentence.starts_with(&format!(
                "isolate-monitoring-agent already holds one client alone, user {AGENT} (FlowSchema \
                 isolate-monitoring-agent matches only it; mostly `list pods`): what waits and is rejected here is that client's own \
                 excess, and no other flow pays for it. Slow the client down: have the client paginate its LIST \
                 (limit/continue) or read from an informer's cache instead; or run fewer workers or lower its \
                 client-side rate limit"
            )),
            "{}",
            r.sentence
        );
        assert!(!r.sentence.contains("Isolate"), "{}", r.sentence);
        // 508 seats / 0.75 is 677: more than the 600 of the replica (598 to 600 by its levels' nominal limits), so no
        // share move is proposed at all (the one proposed before took 234 shares of workload-low's 100).
        assert!(
            r.sentence.contains(
                "Its load (116 in use + 392 for 196 requests waiting = 508 seats) needs 677 seats to keep a \
                 quarter free (508 / 0.75), more than this replica has (598 to 600): no share move carries it; the \
                 client must send less, or the server needs more concurrency (--max-requests-inflight + \
                 --max-mutating-requests-inflight, 598 to 600 seats on this replica today)"
            ),
            "{}",
            r.sentence
        );
        assert!(!r.sentence.contains("shares from"), "{}", r.sentence);
    }

    #[test]
    fn an_honest_load_a_little_past_its_level_gets_a_bounded_share_with_its_numbers() {
        // 20 seats in use, 4 waiting: 24 seats; a quarter free needs 32, 12 more than its 20.
        let l = isolated_level(20.0, 4.0, 4.0);
        let objects = objects_with_isolation();
        let r = remediate(&l, &replica(&l), &ListCosts::default(), Some(&objects));
        // 1 share ≈ 2.4 seats (5 shares, 12 seats); workload-low keeps 24 of its 240 seats: 90 shares to spare.
        assert!(
            r.sentence.contains(
                "If that load (20 in use + 4 for 4 requests waiting = 24 seats) is honest, isolate-monitoring-agent \
                 is too small for it: move 5 shares from workload-low to it, so it gets about 12 more seats (1 share \
                 ≈ 2.40 seats), what the other levels spare beyond their own load: 20 + 12 = 32 in all, for the 32 seats to \
                 keep a quarter free (24 / 0.75)."
            ),
            "{}",
            r.sentence
        );
    }

    #[test]
    fn a_load_past_one_move_or_past_all_the_others_spare_says_which() {
        // 300 seats of demand: 400 with a quarter free, 300 more than its 100. The others spare 336 seats together
        // (workload-low 90 shares, workload-high 20, 10 each of global-default, node-high and system), one move's
        // three levels 288: a bigger share takes more levels, and says so.
        let objects = objects_with_isolation();
        let l = isolated_level(100.0, 100.0, 200.0);
        let r = remediate(&l, &replica(&l), &ListCosts::default(), Some(&objects));
        assert!(
            r.sentence.contains(
                "Its load (100 in use + 200 for 100 requests waiting = 300 seats) needs 400 seats to keep a \
                 quarter free (300 / 0.75), 300 more than the level's 100: if that load is honest, isolate-monitoring-agent is too small for it, and \
                 shares for it come from more than 3 levels (336 seats spare in all beyond their own load); 90 \
                 shares from workload-low, 20 from workload-high and 10 from global-default give about 288."
            ),
            "{}",
            r.sentence
        );
        // 400 seats of demand: 433 short, past all 336: no share move carries it, none is proposed.
        let l = isolated_level(100.0, 150.0, 300.0);
        let r = remediate(&l, &replica(&l), &ListCosts::default(), Some(&objects));
        assert!(
            r.sentence.contains(
                "needs 533 seats to keep a quarter free (400 / 0.75), 433 more than the level's 100, more than the \
                 other levels spare beyond their own load (336 seats): no share move carries it; the client must send \
                 less"
            ),
            "{}",
            r.sentence
        );
        assert!(!r.sentence.contains("shares from"), "{}", r.sentence);
    }

    #[test]
    fn a_schema_for_a_group_or_two_users_is_not_one_client_s_level() {
        // The subjects of the isolation's FlowSchema.
        fn subjects(objects: &mut FlowcontrolObjects) -> &mut Vec<Subject> {
            let schema = objects.flow_schemas.iter_mut().find(|s| s.name == ISOLATED);
            &mut schema.unwrap().rules[0].subjects
        }
        let mut objects = objects_with_isolation();
        let l = isolated_level(116.0, 196.0, 392.0);
        assert_eq!(
            owner(&l, Some(&objects)).map(|o| o.user),
            Some(AGENT.to_string())
        );
        // A second user in the schema's subjects: two flows can share the level.
        subjects(&mut objects).push(Subject::User("bob".into()));
        assert_eq!(owner(&l, Some(&objects)), None);
        // Every service account of a namespace.
        let mut objects = objects_with_isolation();
        *subjects(&mut objects) = vec![Subject::ServiceAccount {
            namespace: "monitoring".into(),
            name: "*".into(),
        }];
        assert_eq!(owner(&l, Some(&objects)), None);
        // workload-low, sent to by service-accounts (a group): shared.
        let wl = level("workload-low", 240.0, 240.0, 10.0, 0.0);
        assert_eq!(owner(&wl, Some(&objects_with_isolation())), None);
        // Without objects, or with objects read before the level was made: the names apf-monitor's own manifest
        // gives.
        assert_eq!(
            owner(&l, None).map(|o| o.flow_schemas),
            Some(vec!["isolate-monitoring-agent".to_string()])
        );
        let stale = FlowcontrolObjects {
            priority_levels: apf::defaults::default_priority_levels(apf::KubeVersion::new(34, 0)),
            flow_schemas: objects_with_isolation()
                .flow_schemas
                .into_iter()
                .filter(|s| s.name != "isolate-monitoring-agent")
                .collect(),
        };
        assert_eq!(
            owner(&l, Some(&stale)).map(|o| o.user),
            Some(AGENT.to_string())
        );
        let mut elsewhere = l.clone();
        elsewhere.priority_level = "agents".into();
        assert_eq!(owner(&elsewhere, None), None);
    }

    #[test]
    fn every_sum_an_isolated_level_s_sentence_writes_adds_up() {
        let objects = objects_with_isolation();
        for executing in [12.0, 20.0, 35.5, 100.0, 116.0] {
            for queued in [0.0, 4.0, 33.3, 100.0, 196.0, 300.0] {
                for seats_each in [1.0, 2.0, 10.0] {
                    let l = isolated_level(executing, queued, queued * seats_each);
                    let r = remediate(&l, &replica(&l), &ListCosts::default(), Some(&objects));
                    super::super::tests::assert_adds_up(&r.sentence);
                }
            }
        }
    }
}
