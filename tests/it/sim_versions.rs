//! The model on what the simulated apiserver serves for every version from 1.20 to 1.36, including the ones
//! between the real captures (1.22, 1.27, 1.33, 1.36): the snapshot equals the simulator's own truth.
use std::time::Duration;

use apf::model::{self, is_wanted_sample, MetricGeneration, ReplicaSnapshot, SnapshotBuilder};
use apf::parse::{dump, exposition::parse_all};
use apf_sim::{KubeVersion, Scenario, ScenarioSource, SimOptions, Simulator};

fn storm(minor: u32, seconds: u64) -> Simulator {
    let scenario = Scenario::load(&ScenarioSource::Storm).unwrap();
    let sim = Simulator::try_new(SimOptions {
        seed: 7,
        ..SimOptions::new(KubeVersion::new(minor, 0), scenario)
    })
    .unwrap();
    for _ in 0..seconds * 10 {
        sim.step(Duration::from_millis(100));
    }
    sim
}

fn snapshot_of(sim: &Simulator) -> ReplicaSnapshot {
    let mut b = SnapshotBuilder::new();
    let stats = parse_all(sim.render_metrics().as_bytes(), is_wanted_sample, &mut b);
    assert_eq!(stats.invalid_lines, 0, "{:?}", stats.first_errors);
    let mut snap = b.finish();
    model::apply_queues_dump(
        &mut snap,
        &dump::parse_queues(&sim.render_dump_queues()).unwrap(),
    );
    model::apply_priority_levels_dump(
        &mut snap,
        &dump::parse_priority_levels(&sim.render_dump_priority_levels()).unwrap(),
    );
    model::apply_requests_dump(
        &mut snap,
        &dump::parse_requests(&sim.render_dump_requests(true)).unwrap(),
    );
    snap
}

#[test]
fn every_version_from_1_20_to_1_36_reads_as_the_simulator_served_it() {
    for minor in 20..=36 {
        let sim = storm(minor, 30);
        let snap = snapshot_of(&sim);
        let expected_generation = match minor {
            20 | 21 => MetricGeneration::ConcurrencyLimit,
            22..=25 => MetricGeneration::ConcurrencyInUse,
            _ => MetricGeneration::Borrowing,
        };
        assert_eq!(snap.generation, Some(expected_generation), "1.{minor}");
        assert_eq!(
            snap.kubernetes_version.as_deref(),
            Some(format!("v1.{minor}.0").as_str()),
            "1.{minor}"
        );
        let truth = sim.truth();
        let mut saw_pressure = false;
        for t in truth.iter().filter(|t| !t.exempt) {
            let l = snap
                .levels
                .get(&t.priority_level)
                .unwrap_or_else(|| panic!("1.{minor}: {} missing", t.priority_level));
            let ctx = format!("1.{minor} {}", t.priority_level);
            assert_eq!(
                l.limit_seats,
                Some(f64::from(t.current_limit_seats)),
                "{ctx} limit"
            );
            assert_eq!(
                l.nominal_limit_seats,
                Some(f64::from(t.nominal_limit_seats)),
                "{ctx} nominal"
            );
            assert_eq!(
                l.executing_seats,
                Some(f64::from(t.executing_seats)),
                "{ctx} executing seats"
            );
            assert_eq!(
                l.inqueue_requests,
                Some(f64::from(t.inqueue_requests)),
                "{ctx} queued"
            );
            let rejected: f64 = l.rejected_total.values().sum();
            let truth_rejected: u64 = t.rejected_total.values().sum();
            assert_eq!(rejected, truth_rejected as f64, "{ctx} rejected");
            if t.queues > 0 {
                let q = l
                    .queues
                    .as_ref()
                    .unwrap_or_else(|| panic!("{ctx}: no queue summary"));
                assert_eq!(q.queues, t.queues, "{ctx} queues");
                assert_eq!(
                    q.fullest_queue_requests,
                    u64::from(t.fullest_queue_requests),
                    "{ctx} fullest"
                );
            }
            saw_pressure |= t.inqueue_requests > 0 || truth_rejected > 0;
        }
        assert!(
            saw_pressure,
            "1.{minor}: the storm put no level under pressure"
        );
        // The flows behind the pressure: the storm's LIST agents lead workload-low.
        let flows = snap.flows.as_ref().expect("dump_requests read");
        let top = flows
            .iter()
            .filter(|f| f.priority_level == "workload-low")
            .max_by_key(|f| f.waiting_requests + f.executing_seats)
            .unwrap_or_else(|| panic!("1.{minor}: no workload-low flow"));
        assert_eq!(top.flow_schema, "service-accounts", "1.{minor}");
        assert!(
            !top.users.is_empty(),
            "1.{minor}: request details name the user"
        );
    }
}

#[test]
fn exempt_is_never_limited_in_any_version() {
    for minor in [20, 27, 28, 36] {
        let snap = snapshot_of(&storm(minor, 5));
        if let Some(exempt) = snap.levels.get("exempt") {
            assert_eq!(exempt.inqueue_requests.unwrap_or(0.0), 0.0, "1.{minor}");
            assert!(exempt.rejected_total.is_empty(), "1.{minor}");
        }
    }
}
