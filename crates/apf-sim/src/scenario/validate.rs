//! A scenario's checks: what the YAML must hold for a run to be countable and meaningful, each refusal naming the
//! key at fault.
use std::time::Duration;

use super::{Scenario, SimError, MAX_DURATION, MAX_RPS, MAX_THREADS, MIN_DURATION};

impl Scenario {
    /// Checks that every flow's stated flow schema exists in `version` (e.g. `system-node-high` only from 1.22).
    pub fn validate_for(&self, version: apf::KubeVersion) -> Result<(), SimError> {
        let known = apf::defaults::default_flow_schemas(version);
        for f in &self.flows {
            let Some(schema) = &f.flow_schema else {
                continue;
            };
            if !known.iter().any(|k| k.name == schema) {
                return Err(SimError::Scenario(format!(
                    "flow {:?}: flow schema {:?} does not exist in Kubernetes {}",
                    f.name, schema, version
                )));
            }
        }
        Ok(())
    }

    pub(super) fn validate(&self) -> Result<(), SimError> {
        let bad = |m: String| Err(SimError::Scenario(m));
        if self.duration.is_zero() {
            return bad("duration must be greater than 0".into());
        }
        // Every time of the run fits in nanoseconds of 64 bits with room to add them up.
        let too_long = |d: &Duration| *d > MAX_DURATION;
        let mut durations: Vec<(String, &Duration)> = vec![("duration".into(), &self.duration)];
        for l in &self.priority_levels {
            durations.push((
                format!("priority level {:?}: request_wait_limit", l.name),
                &l.request_wait_limit,
            ));
        }
        for f in &self.flows {
            durations.push((format!("flow {:?}: duration", f.name), &f.duration));
            durations.push((format!("flow {:?}: start", f.name), &f.start));
            durations.push((
                format!("flow {:?}: additional_latency", f.name),
                &f.additional_latency,
            ));
            for p in &f.rate {
                durations.push((format!("flow {:?}: rate's at", f.name), &p.at));
            }
        }
        if let Some((what, _)) = durations.iter().find(|(_, d)| too_long(d)) {
            return bad(format!(
                "{what} is longer than the simulator's bound of 100 years"
            ));
        }
        let mut levels = std::collections::BTreeSet::new();
        for l in &self.priority_levels {
            let who = format!("priority level {:?}", l.name);
            if l.name.is_empty() {
                return bad("a priority level has an empty name".into());
            }
            if !levels.insert(l.name.as_str()) {
                return bad(format!("{who}: defined twice"));
            }
            if l.request_wait_limit.is_zero() {
                return bad(format!("{who}: request_wait_limit must be greater than 0"));
            }
            if l.exempt || l.queues == 0 {
                continue;
            }
            if let Err(e) = apf::shuffle::Dealer::new(i64::from(l.queues), i64::from(l.hand_size)) {
                return bad(format!(
                    "{who}: queues {} and hand_size {}: {e}",
                    l.queues, l.hand_size
                ));
            }
            if l.queue_length_limit == 0 {
                return bad(format!("{who}: queue_length_limit must be at least 1"));
            }
        }
        let mut names = std::collections::BTreeSet::new();
        // Flow schemas of any supported version; per-version checks happen when the simulator starts.
        let known = apf::defaults::known_flow_schemas();
        for f in &self.flows {
            let who = format!("flow {:?}", f.name);
            if f.name.is_empty() {
                return bad("a flow has an empty name".into());
            }
            if !names.insert(f.name.as_str()) {
                return bad(format!("{who}: duplicate flow name"));
            }
            if let Some(schema) = f.flow_schema.as_deref().filter(|s| !known.contains(s)) {
                return bad(format!(
                    "{who}: unknown flow_schema {schema:?}; expected one of {}",
                    known.join(", ")
                ));
            }
            if !(0.0..1.0).contains(&f.duration_spread) {
                return bad(format!(
                    "{who}: duration_spread {} must be at least 0 and below 1",
                    f.duration_spread
                ));
            }
            if f.seats == 0 {
                return bad(format!("{who}: seats must be at least 1"));
            }
            if f.duration < MIN_DURATION {
                return bad(format!("{who}: duration must be at least 1µs"));
            }
            if f.threads.is_some_and(|t| t > MAX_THREADS) {
                return bad(format!("{who}: threads must be at most {MAX_THREADS}"));
            }
            if f.think.unsigned_abs() as u128 > MAX_DURATION.as_nanos() {
                return bad(format!(
                    "{who}: think is longer than the simulator's bound of 100 years"
                ));
            }
            if f.threads.is_some()
                && (f.duration.as_nanos() as i128 + i128::from(f.think))
                    < MIN_DURATION.as_nanos() as i128
            {
                return bad(format!(
                    "{who}: duration + think must be at least 1µs: a thread's calls must follow each other"
                ));
            }
            match (f.rate.is_empty(), f.threads) {
                (true, None) => {
                    return bad(format!(
                        "{who}: give it a `rate` (requests/s over time) or `threads` (a closed loop)"
                    ))
                }
                (false, Some(_)) => {
                    return bad(format!(
                        "{who}: `rate` and `threads` exclude each other: a flow is open-loop or closed-loop"
                    ))
                }
                (_, Some(0)) => return bad(format!("{who}: threads must be at least 1")),
                _ => {}
            }
            if f.threads.is_none() {
                let closed_loop_only = [
                    ("calls", f.calls.is_some()),
                    ("think", f.think != 0),
                    ("start", !f.start.is_zero()),
                    ("qps", f.qps.is_some()),
                    ("burst", f.burst.is_some()),
                ];
                if let Some((key, _)) = closed_loop_only.iter().find(|(_, set)| *set) {
                    return bad(format!(
                        "{who}: `{key}` is for a closed-loop flow (`threads`)"
                    ));
                }
            }
            if f.calls == Some(0) {
                return bad(format!(
                    "{who}: calls must be at least 1 (leave it out for no end)"
                ));
            }
            if let Some(qps) = f.qps {
                if !qps.is_finite() || qps <= 0.0 {
                    return bad(format!(
                        "{who}: qps must be a finite number above 0, got {qps}"
                    ));
                }
            }
            if f.burst == Some(0) {
                return bad(format!("{who}: burst must be at least 1"));
            }
            if f.burst.is_some() && f.qps.is_none() {
                return bad(format!(
                    "{who}: burst needs qps (client-go's token bucket has both)"
                ));
            }
            if f.final_seats.is_some() == f.additional_latency.is_zero() {
                return bad(format!(
                    "{who}: final_seats and additional_latency go together: the seats held after the execution,                      and for how long"
                ));
            }
            if f.final_seats == Some(0) {
                return bad(format!("{who}: final_seats must be at least 1"));
            }
            match &f.priority_level {
                Some(level) => {
                    if !self.priority_levels.iter().any(|l| &l.name == level) {
                        return bad(format!(
                            "{who}: priority_level {level:?} is not one of the scenario's priority_levels"
                        ));
                    }
                    if f.flow_schema.is_some() {
                        return bad(format!(
                            "{who}: flow_schema and priority_level exclude each other: a flow sent to a level \
                             directly matches no FlowSchema"
                        ));
                    }
                }
                None if f.user.is_empty() => {
                    return bad(format!(
                    "{who}: needs a user (its requests are matched against the FlowSchemas), or a \
                         priority_level of the scenario's to send to directly"
                ))
                }
                None => {}
            }
            for (i, p) in f.rate.iter().enumerate() {
                if !p.rps.is_finite() || p.rps < 0.0 || p.rps > MAX_RPS {
                    return bad(format!(
                        "{who}: rate[{i}].rps must be a number from 0 to {MAX_RPS}, got {}",
                        p.rps
                    ));
                }
                if i > 0 && p.at < f.rate[i - 1].at {
                    return bad(format!(
                        "{who}: rate[{i}].at goes back in time; points must be in order"
                    ));
                }
            }
        }
        Ok(())
    }
}
