use std::sync::Arc;

use super::*;
use crate::analyze::{
    Analysis, ApiserverReport, AuditLevel, AuditReport, AuditUser, Point, ReplicaHistory,
};
use apf::model::{FlowSample, FlowSchemaTotals, LevelSnapshot, ReplicaSnapshot};

/// workload-low of 100 seats; `n` scrapes 5 s apart in which service-accounts dispatches 10 requests/s of 2 s
/// each (and 5 of them WATCHes nobody counts), and `flows` contend, the agent's requests 4 seats wide.
fn history(flows: u32) -> ReplicaHistory {
    let mut h = ReplicaHistory::default();
    for k in 0..=12u32 {
        let t = f64::from(k) * 5.0;
        let mut level = LevelSnapshot {
            limit_seats: Some(100.0),
            executing_seats: Some(90.0),
            ..Default::default()
        };
        level.active_flows = Some(if k == 6 { flows } else { 1 });
        let mut snap = ReplicaSnapshot::default();
        snap.levels.insert("workload-low".into(), level);
        snap.flow_schemas.insert(
            ("workload-low".into(), "service-accounts".into()),
            FlowSchemaTotals {
                dispatched_total: Some(10.0 * t),
                execution_seconds: Some((20.0 * t, 10.0 * t)),
                estimated_seats: Some((10.0 * t, 10.0 * t)),
            },
        );
        let agent = FlowSample {
            priority_level: "workload-low".into(),
            flow_schema: "service-accounts".into(),
            flow: "system:serviceaccount:monitoring:agent".into(),
            waiting_requests: 3,
            executing_seats: 60,
            listed_requests: 18,
            listed_seats: 72,
            users: vec!["system:serviceaccount:monitoring:agent".into()],
            example_request: Some("list pods".into()),
        };
        let ci = FlowSample {
            flow: "system:serviceaccount:ci:runner".into(),
            waiting_requests: 0,
            executing_seats: 21,
            listed_requests: 21,
            listed_seats: 21,
            users: vec!["system:serviceaccount:ci:runner".into()],
            ..agent.clone()
        };
        snap.flows = Some(vec![agent, ci]);
        h.push(Point {
            at: t,
            wall_time: String::new(),
            snapshot: Arc::new(snap),
        });
    }
    h
}

#[test]
fn a_flow_is_told_what_its_share_sustains_and_what_it_sends() {
    let a = Analysis::default().analyze_replica("a", &history(4), 60.0);
    let flows = &a.levels[0].top_flows;
    let agent = flows[0].advice.as_ref().unwrap();
    // The peak of the window: 4 flows contended once.
    assert_eq!(agent.active_flows, 4);
    assert_eq!(agent.fair_share_seats, Some(25.0));
    // Its own rows: 72 seats for 18 requests; the flow schema's time, WATCHes left out.
    assert_eq!(agent.seats_per_request, Some(4.0));
    assert_eq!(agent.seconds_per_request, Some(2.0));
    assert_eq!(agent.sustainable_requests_per_second, Some(25.0 / 8.0));
    // Served, by Little's law: 60 seats held, 4 a request for 2 s; nothing rejected.
    let observed = agent.observed_requests_per_second.unwrap();
    assert!((observed - 7.5).abs() < 1e-9, "{observed}");
    assert!(agent.above_share());
    assert_eq!(agent.recommended_qps, Some(2.5));
    assert_eq!(agent.recommended_concurrency, 6);
    assert!(agent.flag.contains("--kube-api-qps=2.5"), "{}", agent.flag);
    // The other flow costs the schema's estimate: 1 seat.
    let ci = flows[1].advice.as_ref().unwrap();
    assert_eq!(ci.seats_per_request, Some(1.0));
    assert!(!ci.above_share());
}

#[test]
fn audit_events_give_a_user_its_own_rate_and_name_users_no_dump_showed() {
    let a = Analysis::default().analyze_replica("a", &history(4), 60.0);
    let user = |name: &str, rps: f64| AuditUser {
        user: name.into(),
        flow_schema: "service-accounts".into(),
        requests_per_second: rps,
        user_agent: Some(format!("{}/1.0", name.rsplit(':').next().unwrap())),
        ..Default::default()
    };
    let mut report = StatusReport {
        apiservers: vec![a.into()],
        audit: vec![AuditReport {
            classified_on: Some("a".into()),
            levels: vec![AuditLevel {
                priority_level: "workload-low".into(),
                users: vec![
                    AuditUser {
                        seconds_per_request: Some(1.0),
                        ..user("system:serviceaccount:monitoring:agent", 12.0)
                    },
                    user("system:serviceaccount:crossplane-system:provider-aws", 80.0),
                ],
                users_not_shown: 0,
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    advise(&mut report);
    let names: Vec<&str> = report.clients.iter().map(|c| c.name()).collect();
    assert_eq!(
        names,
        [
            "system:serviceaccount:crossplane-system:provider-aws",
            "system:serviceaccount:monitoring:agent",
            "system:serviceaccount:ci:runner"
        ],
        "worst first"
    );
    let aws = &report.clients[0];
    assert_eq!(aws.flow, None, "no dump showed it");
    // The only replica: all of the audited rate is its.
    assert_eq!(aws.observed_requests_per_second, Some(80.0));
    assert!(
        aws.observed_from
            .as_deref()
            .is_some_and(|f| f.contains("100 % of them here")),
        "{aws:?}"
    );
    // The schema's mean seats, the level's peak of flows.
    assert_eq!(aws.sustainable_requests_per_second, Some(25.0 / 2.0));
    assert!(
        aws.advice.contains("--max-concurrent-reconciles=25"),
        "{}",
        aws.advice
    );
    let agent = &report.clients[1];
    // A flow that is the user's alone: the replica's own figure, not the audited rate of the cluster.
    let observed = agent.observed_requests_per_second.unwrap();
    assert!((observed - 7.5).abs() < 1e-9, "{observed}");
    assert_eq!(agent.observed_from, None);
    assert_eq!(agent.user_agent.as_deref(), Some("agent/1.0"));
    // The flow's advice in the report is the same one.
    assert_eq!(
        report.apiservers[0].levels[0].top_flows[0].advice.as_ref(),
        Some(agent)
    );
}

/// A replica of workload-low (`limit` seats) over a minute in which service-accounts dispatched `rps` requests/s of
/// 1 seat for 1 s; the dumps show `flows` (flow, its users, seats held).
fn replica(name: &str, limit: f64, rps: f64, flows: &[(&str, &[&str], u64)]) -> ApiserverReport {
    let mut h = ReplicaHistory::default();
    for k in 0..=12u32 {
        let t = f64::from(k) * 5.0;
        let mut level = LevelSnapshot {
            limit_seats: Some(limit),
            executing_seats: Some(50.0),
            ..Default::default()
        };
        level.active_flows = Some(2);
        let mut snap = ReplicaSnapshot::default();
        snap.levels.insert("workload-low".into(), level);
        snap.flow_schemas.insert(
            ("workload-low".into(), "service-accounts".into()),
            FlowSchemaTotals {
                dispatched_total: Some(rps * t),
                execution_seconds: Some((rps * t, rps * t)),
                estimated_seats: Some((rps * t, rps * t)),
            },
        );
        snap.flows = Some(
            flows
                .iter()
                .map(|(flow, users, seats)| FlowSample {
                    priority_level: "workload-low".into(),
                    flow_schema: "service-accounts".into(),
                    flow: (*flow).into(),
                    waiting_requests: 0,
                    executing_seats: *seats,
                    listed_requests: *seats,
                    listed_seats: *seats,
                    users: users.iter().map(|u| u.to_string()).collect(),
                    example_request: Some("get pods".into()),
                })
                .collect(),
        );
        h.push(Point {
            at: t,
            wall_time: String::new(),
            snapshot: Arc::new(snap),
        });
    }
    Analysis::default().analyze_replica(name, &h, 60.0)
}

#[test]
fn each_replica_is_told_the_clients_rate_there_and_the_client_one_recommendation() {
    // Three replicas taking 50, 33 and 17 % of service-accounts' requests; the agent alone in its flow on each,
    // an audited user nobody's dump showed.
    let agent = "system:serviceaccount:monitoring:agent";
    // Their limits differ (borrowing moves them): the agent's share sustains 50, 40 and 30 requests/s there.
    let replicas =
        [("a", 100.0, 60.0), ("b", 80.0, 40.0), ("c", 60.0, 20.0)].map(|(name, limit, rps)| {
            replica(
                name,
                limit,
                rps,
                &[(agent, &[agent], 35), ("ci", &["ci"], 5)],
            )
        });
    let mut report = StatusReport {
        apiservers: replicas.into_iter().map(Arc::new).collect(),
        audit: vec![AuditReport {
            classified_on: Some("a".into()),
            levels: vec![AuditLevel {
                priority_level: "workload-low".into(),
                users: vec![
                    AuditUser {
                        user: agent.into(),
                        flow_schema: "service-accounts".into(),
                        requests_per_second: 95.0,
                        ..Default::default()
                    },
                    AuditUser {
                        user: "quiet".into(),
                        flow_schema: "service-accounts".into(),
                        requests_per_second: 1.2,
                        ..Default::default()
                    },
                ],
                users_not_shown: 0,
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    advise(&mut report);
    // The agent on each replica: what the replica served of it, by Little's law over its 35 seats held of 1 s
    // requests: 35/s everywhere, whatever the audit log says of the cluster.
    let rate = |who: &str, on: &str| {
        report
            .clients
            .iter()
            .find(|c| c.name() == who && c.apiserver == on)
            .and_then(|c| c.observed_requests_per_second)
    };
    for on in ["a", "b", "c"] {
        let r = rate(agent, on).unwrap();
        assert!((r - 35.0).abs() < 1e-6, "{on}: {r}");
    }
    // The user no dump showed: the audited 1.2/s spread 50/33/17 % by the replicas' counters, and said so.
    for (on, share) in [("a", 0.5), ("b", 1.0 / 3.0), ("c", 1.0 / 6.0)] {
        let r = rate("quiet", on).unwrap();
        assert!((r - 1.2 * share).abs() < 1e-6, "{on}: {r}");
    }
    let quiet_c = report
        .clients
        .iter()
        .find(|c| c.name() == "quiet" && c.apiserver == "c")
        .unwrap();
    assert!(
        quiet_c
            .advice
            .contains("17 % of them here by this replica's share of the requests of flow schema service-accounts"),
        "{}",
        quiet_c.advice
    );
    // One recommendation per client, worst first; the agent's from the tightest replica, a change to make.
    let names: Vec<&str> = report
        .recommendations
        .iter()
        .map(|r| r.client.as_str())
        .collect();
    assert_eq!(names, [agent, "ci", "quiet"]);
    let r = &report.recommendations[0];
    assert_eq!(r.replicas.len(), 3);
    assert!((r.observed_requests_per_second.unwrap() - 105.0).abs() < 1e-6);
    let tightest = report
        .clients
        .iter()
        .filter(|c| c.name() == agent)
        .min_by(|a, b| {
            a.sustainable_requests_per_second
                .unwrap()
                .total_cmp(&b.sustainable_requests_per_second.unwrap())
        })
        .unwrap();
    assert_eq!(r.tightest_apiserver, tightest.apiserver);
    assert_eq!(r.tightest_apiserver, "c");
    assert_eq!(r.recommended_qps, tightest.recommended_qps);
    assert!(r.change, "{}", r.advice);
    assert!(r.advice.contains("client-go: set QPS="), "{}", r.advice);
    // The quiet user sends far less than its share sustains: a ceiling, no change.
    let quiet = &report.recommendations[2];
    assert!(!quiet.change, "{}", quiet.advice);
    assert!(
        quiet.advice.contains("no change needed"),
        "{}",
        quiet.advice
    );
    assert!(!quiet.advice.contains(" set "), "{}", quiet.advice);
}

#[test]
fn a_schema_s_rate_counts_from_its_level_s_first_sample_not_its_own_first_request() {
    // workload-low all minute; service-accounts' first request at 30 s (kube-apiserver makes the series then), 10
    // requests/s after. Over the minute that is 5 requests/s, not 10: the level was there, sending nothing.
    // A level made at 30 s (a fix's new one) is rated over its own 30 s: 10 requests/s.
    let run = |level_from: f64| {
        let mut h = ReplicaHistory::default();
        for k in 0..=12u32 {
            let t = f64::from(k) * 5.0;
            let mut snap = ReplicaSnapshot::default();
            if t >= level_from {
                snap.levels.insert(
                    "workload-low".into(),
                    LevelSnapshot {
                        limit_seats: Some(100.0),
                        executing_seats: Some(10.0),
                        ..Default::default()
                    },
                );
            }
            if t >= 30.0 {
                snap.flow_schemas.insert(
                    ("workload-low".into(), "service-accounts".into()),
                    FlowSchemaTotals {
                        dispatched_total: Some(10.0 * (t - 30.0)),
                        ..Default::default()
                    },
                );
            }
            h.push(Point {
                at: t,
                wall_time: String::new(),
                snapshot: Arc::new(snap),
            });
        }
        let a = Analysis::default().analyze_replica("a", &h, 60.0);
        a.levels[0].flow_schema_costs["service-accounts"]
            .dispatched_per_second
            .unwrap()
    };
    assert!((run(0.0) - 5.0).abs() < 1e-9, "{}", run(0.0));
    assert!((run(30.0) - 10.0).abs() < 1e-9, "{}", run(30.0));
}
