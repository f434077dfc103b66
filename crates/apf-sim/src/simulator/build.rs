//! A simulator built from a Kubernetes version and a scenario: the version's default FlowSchemas and priority
//! levels (as the cluster's objects spell them), and the scenario's flows, each matched to the FlowSchema its
//! requests match and dealt its queues by shuffle sharding ([`State::configure`]).
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use apf::matching::match_request;
use rand::rngs::StdRng;
use rand::SeedableRng;

use super::clients::Source;
use super::state::{Flow, State};
use super::{SimOptions, Simulator};
use crate::scenario::SimError;

impl Simulator {
    pub(super) fn build(opts: SimOptions, strict: bool) -> Result<Self, SimError> {
        let v = opts.version;
        if strict {
            opts.scenario.validate_for(v)?;
        }
        let (schemas, levels) = crate::objects::default_configuration(v);
        let mut scenario_levels = opts.scenario.priority_levels.clone();
        if let Some(clash) = scenario_levels
            .iter()
            .find(|s| levels.iter().any(|l| l.name == s.name))
        {
            let problem = format!(
                "priority level {:?} is one of Kubernetes {v}'s own: give the scenario's level another name",
                clash.name
            );
            if strict {
                return Err(SimError::Scenario(problem));
            }
            tracing::warn!("{problem}; the scenario's level is left out");
            scenario_levels.retain(|s| !levels.iter().any(|l| l.name == s.name));
        }
        // A flow's stated flow schema is checked against kube-apiserver's matching on the default objects.
        for spec in &opts.scenario.flows {
            let Some(stated) = spec.flow_schema.as_deref() else {
                continue;
            };
            let landed = match_request(&schemas, &levels, &spec.request()).map(|m| m.flow_schema);
            let problem = match landed {
                _ if !schemas.iter().any(|s| s.name == stated) => format!(
                    "flow {:?}: flow schema {stated:?} does not exist in Kubernetes {v}",
                    spec.name
                ),
                Ok(landed) if landed != stated => format!(
                    "flow {:?}: its requests (user {}, groups {:?}, {} {}) match FlowSchema {landed} of Kubernetes \
                     {v}, not {stated}: give the flow the groups its user has (`groups: [...]`), or correct \
                     flow_schema",
                    spec.name,
                    spec.user,
                    spec.request().groups,
                    spec.verb,
                    spec.resource
                ),
                _ => continue,
            };
            if strict {
                return Err(SimError::Scenario(problem));
            }
            tracing::warn!("{problem}; its requests go where they match");
        }
        let scenario_ns = (opts.scenario.duration.as_nanos() as u64).max(1);
        let flows = opts
            .scenario
            .flows
            .iter()
            .map(|spec| Flow {
                name: spec.name.clone(),
                fs: 0,
                level: None,
                seats: spec.seats.max(1),
                final_seats: 0,
                additional_latency_ns: spec.additional_latency.as_nanos() as u64,
                dur_ns: (spec.duration.as_nanos() as u64).max(1),
                user: spec.user.clone(),
                verb: spec.verb.clone(),
                resource: spec.resource.clone(),
                namespace: spec.namespace.clone(),
                distinguisher: String::new(),
                hash: 0,
                hand: Vec::new(),
                source: Source::new(spec, scenario_ns),
                rate: spec.clone(),
                // Before 1.23 a request has no width: an open-loop flow sends as many more instead.
                rate_scale: if v.at_least(23) || spec.threads.is_some() {
                    1.0
                } else {
                    spec.seats.max(1) as f64
                },
                run: Default::default(),
            })
            .collect();
        let mut wait_buckets = vec![0.0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0];
        if v.at_least(28) {
            wait_buckets.push(15.0);
        }
        wait_buckets.push(30.0);
        let work_buckets = if v.at_least(34) {
            vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 100.0]
        } else {
            vec![1.0, 2.0, 4.0, 10.0]
        };
        let mut state = State {
            version: v,
            levels: Vec::new(),
            flow_schemas: Vec::new(),
            fs_names: Vec::new(),
            flows,
            seed: opts.seed,
            server_concurrency: opts.server_concurrency,
            fs_stats: BTreeMap::new(),
            wait_buckets,
            work_buckets,
            seat_fair_frac: 0.0,
            request_total: BTreeMap::new(),
            terminations_total: BTreeMap::new(),
            now_ns: 0,
            target_ns: 0,
            scenario_ns,
            rng: StdRng::seed_from_u64(opts.seed),
            wall_start: SystemTime::now(),
            audit: None,
            load_share: 1.0,
            events: Default::default(),
            next_req_id: 0,
            next_level_uid: 0,
            dispatch: opts.scenario.dispatch,
            scenario_levels,
            keep_waits: false,
        };
        state.configure(schemas, levels);
        state.schedule_start();
        Ok(Simulator {
            state: Arc::new(Mutex::new(state)),
        })
    }
}
