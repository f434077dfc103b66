//! Incidents in APF's history (`apf-monitor report`): each stretch where a priority level of a replica rejected
//! requests (or, asked for, ran out of headroom), dated from the counters themselves, with what the level went
//! through and who was rejected. Fed step by step with the snapshots a Prometheus held and the reports the
//! analysis made of them; pure, no I/O.
use std::collections::BTreeMap;

use super::ApiserverReport;
use apf::model::{ReplicaKey, ReplicaSnapshot, EXEMPT};

/// One level of one replica at one step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LevelPoint {
    /// Unix seconds.
    pub time: f64,
    pub limit_seats: Option<f64>,
    pub nominal_limit_seats: Option<f64>,
    pub executing_seats: Option<f64>,
    pub headroom_seats: Option<f64>,
    pub inqueue_requests: Option<f64>,
    /// Over the analysis window ending here.
    pub wait_p99_seconds: Option<f64>,
    /// Requests rejected since the step before, all reasons.
    pub rejected: f64,
    /// The same by (flow schema, reason), only those that rejected.
    pub rejected_by: Vec<(String, String, f64)>,
}

/// One level of one replica through the history: every point around its rejections (and stretches without
/// headroom), [`CONTEXT_POINTS`] before and after each; of a calm stretch only its ends, so that a month of a
/// large fleet holds what its incidents need, not every point of every level.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    pub replica: ReplicaKey,
    pub priority_level: String,
    /// queues x queueLengthLimit, where the level's configuration was known.
    pub queue_capacity_requests: Option<f64>,
    pub points: Vec<LevelPoint>,
    /// The index of the last point that rejected or had no headroom.
    last_active: Option<usize>,
}

/// Points kept on each side of an active one: the lead-up an alert warned in, and the recovery.
pub const CONTEXT_POINTS: usize = 240;

impl Timeline {
    fn push(&mut self, point: LevelPoint) {
        let active = point.rejected > 0.0 || point.headroom_seats.is_some_and(|h| h <= 0.0);
        self.points.push(point);
        let n = self.points.len();
        if active {
            self.last_active = Some(n - 1);
        }
        // The calm points past the last active one's context, but the latest CONTEXT_POINTS, are not needed: drop
        // them a batch at a time (the points after the batch are moved once per batch).
        let calm_from = self.last_active.map_or(0, |a| a + CONTEXT_POINTS + 1);
        if n > calm_from + 2 * CONTEXT_POINTS {
            self.points.drain(calm_from..n - CONTEXT_POINTS);
        }
    }
}

/// The counters of a replica at its last step: rejections by level and reason, and by (level, flow schema, reason).
#[derive(Default)]
struct Counters {
    by_level: BTreeMap<String, BTreeMap<String, f64>>,
    by_schema: BTreeMap<(String, String, String), f64>,
}

/// What a counter rose by since `before`: a counter lower than before was reset (the replica restarted) and counts
/// from zero; a series new since a step of this replica was created by its first increments.
fn increase(before: Option<f64>, now: f64, seen_before: bool) -> f64 {
    match before {
        Some(b) if now >= b => now - b,
        Some(_) => now,
        None if seen_before => now,
        None => 0.0,
    }
}

/// The timelines of every level of every replica, built step by step.
#[derive(Default)]
pub struct Timelines {
    timelines: BTreeMap<(ReplicaKey, String), Timeline>,
    last: BTreeMap<ReplicaKey, Counters>,
}

impl Timelines {
    /// A replica at `time`: its snapshot (for the counters) and the analysis's report of it.
    pub fn push(
        &mut self,
        time: f64,
        key: &ReplicaKey,
        snapshot: &ReplicaSnapshot,
        report: &ApiserverReport,
    ) {
        let seen_before = self.last.contains_key(key);
        let last = self.last.entry(key.clone()).or_default();
        let mut by_schema: BTreeMap<&str, Vec<(String, String, f64)>> = BTreeMap::new();
        for ((level, schema, reason), now) in &snapshot.flow_schema_rejected_total {
            let before = last
                .by_schema
                .get(&(level.clone(), schema.clone(), reason.clone()))
                .copied();
            let rose = increase(before, *now, seen_before);
            if rose > 0.0 {
                by_schema.entry(level.as_str()).or_default().push((
                    schema.clone(),
                    reason.clone(),
                    rose,
                ));
            }
        }
        for lr in &report.levels {
            let name = &lr.priority_level;
            if name == EXEMPT {
                continue;
            }
            let Some(level) = snapshot.levels.get(name) else {
                continue;
            };
            let before = last.by_level.get(name);
            let rejected: f64 = level
                .rejected_total
                .iter()
                .map(|(reason, now)| {
                    increase(
                        before.and_then(|b| b.get(reason)).copied(),
                        *now,
                        seen_before,
                    )
                })
                .sum();
            let timeline = self
                .timelines
                .entry((key.clone(), name.clone()))
                .or_insert_with(|| Timeline {
                    replica: key.clone(),
                    priority_level: name.clone(),
                    ..Default::default()
                });
            if lr.queue_capacity_requests.is_some() {
                timeline.queue_capacity_requests = lr.queue_capacity_requests;
            }
            timeline.push(LevelPoint {
                time,
                limit_seats: lr.limit_seats,
                nominal_limit_seats: lr.nominal_limit_seats,
                executing_seats: lr.executing_seats,
                headroom_seats: lr.headroom_seats,
                inqueue_requests: lr.inqueue_requests,
                wait_p99_seconds: lr.wait_p99_seconds,
                rejected,
                rejected_by: by_schema.remove(name.as_str()).unwrap_or_default(),
            });
        }
        // Merged, not replaced: a series missing from a step (a gap in the store) keeps its last value, so that its
        // return is not counted again from zero.
        for (name, l) in &snapshot.levels {
            let known = last.by_level.entry(name.clone()).or_default();
            known.extend(l.rejected_total.iter().map(|(r, v)| (r.clone(), *v)));
        }
        last.by_schema.extend(
            snapshot
                .flow_schema_rejected_total
                .iter()
                .map(|(k, v)| (k.clone(), *v)),
        );
    }

    pub fn finish(self) -> Vec<Timeline> {
        self.timelines.into_values().collect()
    }
}

/// How incidents are told apart.
#[derive(Debug, Clone, Copy)]
pub struct IncidentOptions {
    /// Also stretches without rejections where the level had no headroom left.
    pub include_pressure: bool,
    /// Two stretches closer than this (seconds) are one incident.
    pub merge_gap_seconds: f64,
}

/// A flow schema's share of an incident's rejections.
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaRejections {
    pub flow_schema: String,
    pub rejected: f64,
    pub reasons: BTreeMap<String, f64>,
}

/// One stretch of rejections (or pressure) on one level of one replica.
#[derive(Debug, Clone, PartialEq)]
pub struct Incident {
    pub replica: ReplicaKey,
    pub priority_level: String,
    /// The first step of the stretch (a rejection, or no headroom).
    pub started_at: f64,
    /// The first step whose counters show a rejection: the first 429 came after the step before it.
    pub first_rejection: Option<f64>,
    pub last_rejection: Option<f64>,
    pub peak_rejected_per_second: f64,
    pub rejected_total: f64,
    /// Worst first.
    pub flow_schemas: Vec<SchemaRejections>,
    pub max_waiting_requests: Option<f64>,
    pub queue_capacity_requests: Option<f64>,
    pub longest_wait_p99_seconds: Option<f64>,
    pub min_headroom_seats: Option<f64>,
    /// The first step after the last rejection with none and no request waiting; `None`: not by the history's end.
    pub recovered_at: Option<f64>,
    /// Index range of the timeline's points the incident spans (for charts).
    pub points: std::ops::Range<usize>,
}

fn max_of(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    values.flatten().reduce(f64::max)
}

/// The incidents of one level's timeline, in time order.
pub fn incidents(timeline: &Timeline, options: IncidentOptions) -> Vec<Incident> {
    let points = &timeline.points;
    let active = |p: &LevelPoint| {
        p.rejected > 0.0 || (options.include_pressure && p.headroom_seats.is_some_and(|h| h <= 0.0))
    };
    // Stretches of active steps, merged across short gaps.
    let mut stretches: Vec<(usize, usize)> = Vec::new();
    for (i, p) in points.iter().enumerate() {
        if !active(p) {
            continue;
        }
        match stretches.last_mut() {
            Some((_, end)) if p.time - points[*end].time <= options.merge_gap_seconds => *end = i,
            _ => stretches.push((i, i)),
        }
    }
    stretches
        .into_iter()
        .map(|(first, last)| {
            let span = &points[first..=last];
            let rejecting = || span.iter().filter(|p| p.rejected > 0.0);
            let mut schemas: BTreeMap<&str, SchemaRejections> = BTreeMap::new();
            for (schema, reason, n) in span.iter().flat_map(|p| &p.rejected_by) {
                let s = schemas.entry(schema).or_insert_with(|| SchemaRejections {
                    flow_schema: schema.clone(),
                    rejected: 0.0,
                    reasons: BTreeMap::new(),
                });
                s.rejected += n;
                *s.reasons.entry(reason.clone()).or_default() += n;
            }
            let mut flow_schemas: Vec<SchemaRejections> = schemas.into_values().collect();
            flow_schemas.sort_by(|a, b| {
                b.rejected
                    .total_cmp(&a.rejected)
                    .then_with(|| a.flow_schema.cmp(&b.flow_schema))
            });
            let peak = span
                .iter()
                .enumerate()
                .filter(|(_, p)| p.rejected > 0.0)
                .filter_map(|(i, p)| {
                    let before = if first + i > 0 {
                        points[first + i - 1].time
                    } else {
                        return None;
                    };
                    (p.time > before).then(|| p.rejected / (p.time - before))
                })
                .fold(0.0, f64::max);
            let recovered = points[last + 1..]
                .iter()
                .position(|p| p.rejected == 0.0 && p.inqueue_requests.unwrap_or(0.0) == 0.0)
                .map(|i| last + 1 + i);
            let end = recovered.unwrap_or(points.len() - 1);
            Incident {
                replica: timeline.replica.clone(),
                priority_level: timeline.priority_level.clone(),
                started_at: points[first].time,
                first_rejection: rejecting().next().map(|p| p.time),
                last_rejection: rejecting().next_back().map(|p| p.time),
                peak_rejected_per_second: peak,
                rejected_total: span.iter().map(|p| p.rejected).sum(),
                flow_schemas,
                max_waiting_requests: max_of(span.iter().map(|p| p.inqueue_requests)),
                queue_capacity_requests: timeline.queue_capacity_requests,
                longest_wait_p99_seconds: max_of(
                    points[first..=end].iter().map(|p| p.wait_p99_seconds),
                ),
                min_headroom_seats: span
                    .iter()
                    .filter_map(|p| p.headroom_seats)
                    .reduce(f64::min),
                recovered_at: recovered.map(|i| points[i].time),
                points: first..end + 1,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(time: f64, rejected: f64, inqueue: f64, headroom: f64) -> LevelPoint {
        LevelPoint {
            time,
            limit_seats: Some(10.0),
            headroom_seats: Some(headroom),
            inqueue_requests: Some(inqueue),
            rejected,
            rejected_by: if rejected > 0.0 {
                vec![
                    (
                        "service-accounts".into(),
                        "queue-full".into(),
                        rejected * 0.75,
                    ),
                    ("global-default".into(), "time-out".into(), rejected * 0.25),
                ]
            } else {
                Vec::new()
            },
            ..Default::default()
        }
    }

    fn timeline(points: Vec<LevelPoint>) -> Timeline {
        Timeline {
            replica: ReplicaKey {
                cluster: Some("prod".into()),
                apiserver: "a".into(),
            },
            priority_level: "workload-low".into(),
            queue_capacity_requests: Some(6400.0),
            points,
            last_active: None,
        }
    }

    const OPTIONS: IncidentOptions = IncidentOptions {
        include_pressure: false,
        merge_gap_seconds: 300.0,
    };

    #[test]
    fn a_stretch_of_rejections_is_one_incident_dated_by_its_counters() {
        let t = timeline(vec![
            point(0.0, 0.0, 0.0, 5.0),
            point(15.0, 0.0, 40.0, 0.0),
            point(30.0, 30.0, 80.0, 0.0),
            point(45.0, 0.0, 60.0, 0.0),
            // Within the merge gap: the same incident.
            point(60.0, 60.0, 90.0, 0.0),
            point(75.0, 0.0, 10.0, 1.0),
            point(90.0, 0.0, 0.0, 6.0),
            // Far later: another.
            point(900.0, 15.0, 5.0, 0.0),
        ]);
        let found = incidents(&t, OPTIONS);
        assert_eq!(found.len(), 2, "{found:?}");
        let i = &found[0];
        assert_eq!(i.first_rejection, Some(30.0));
        assert_eq!(i.last_rejection, Some(60.0));
        assert_eq!(i.rejected_total, 90.0);
        assert_eq!(i.peak_rejected_per_second, 4.0);
        assert_eq!(i.flow_schemas[0].flow_schema, "service-accounts");
        assert_eq!(i.flow_schemas[0].rejected, 67.5);
        assert_eq!(i.flow_schemas[1].reasons["time-out"], 22.5);
        assert_eq!(i.max_waiting_requests, Some(90.0));
        assert_eq!(i.recovered_at, Some(90.0));
        assert_eq!(found[1].recovered_at, None);
        // Without rejections, pressure alone is an incident only when asked for.
        let pressure = incidents(
            &t,
            IncidentOptions {
                include_pressure: true,
                ..OPTIONS
            },
        );
        assert_eq!(pressure[0].started_at, 15.0);
        assert_eq!(pressure[0].first_rejection, Some(30.0));
    }

    #[test]
    fn a_calm_stretch_keeps_only_its_ends_and_an_incident_its_context() {
        let mut t = timeline(Vec::new());
        let n = 10 * CONTEXT_POINTS;
        for k in 0..n {
            let rejected = if k == 5 * CONTEXT_POINTS { 10.0 } else { 0.0 };
            t.push(point(k as f64, rejected, 0.0, 5.0));
        }
        assert!(t.points.len() <= 5 * CONTEXT_POINTS, "{}", t.points.len());
        // The incident and its context before and after are whole.
        let at = t.points.iter().position(|p| p.rejected > 0.0).unwrap();
        let before = &t.points[at - CONTEXT_POINTS..at];
        assert!(before.windows(2).all(|w| w[1].time - w[0].time == 1.0));
        let after = &t.points[at..=at + CONTEXT_POINTS];
        assert!(after.windows(2).all(|w| w[1].time - w[0].time == 1.0));
        let found = incidents(&t, OPTIONS);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].first_rejection, Some((5 * CONTEXT_POINTS) as f64));
        assert_eq!(found[0].recovered_at, Some((5 * CONTEXT_POINTS + 1) as f64));
        // The latest points are there too.
        assert_eq!(t.points.last().map(|p| p.time), Some((n - 1) as f64));
    }

    #[test]
    fn a_counter_missing_from_a_step_is_not_counted_again_when_it_returns() {
        use apf::model::LevelSnapshot;
        let key = ReplicaKey {
            cluster: None,
            apiserver: "a".into(),
        };
        let snapshot = |rejected: Option<f64>| {
            let mut s = ReplicaSnapshot::default();
            let mut level = LevelSnapshot::default();
            if let Some(r) = rejected {
                level.rejected_total.insert("queue-full".into(), r);
                s.flow_schema_rejected_total.insert(
                    (
                        "workload-low".into(),
                        "service-accounts".into(),
                        "queue-full".into(),
                    ),
                    r,
                );
            }
            s.levels.insert("workload-low".into(), level);
            s
        };
        let report = ApiserverReport {
            levels: vec![crate::analyze::LevelReport {
                priority_level: "workload-low".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut timelines = Timelines::default();
        for (t, r) in [
            (0.0, Some(100.0)),
            (15.0, None),
            (30.0, Some(100.0)),
            (45.0, Some(130.0)),
        ] {
            timelines.push(t, &key, &snapshot(r), &report);
        }
        let t = &timelines.finish()[0];
        let rejected: Vec<f64> = t.points.iter().map(|p| p.rejected).collect();
        assert_eq!(rejected, [0.0, 0.0, 0.0, 30.0]);
        assert_eq!(t.points[3].rejected_by[0].2, 30.0);
    }

    #[test]
    fn counters_count_from_a_reset_and_from_a_new_series() {
        assert_eq!(increase(Some(10.0), 14.0, true), 4.0);
        assert_eq!(increase(Some(10.0), 3.0, true), 3.0);
        assert_eq!(increase(None, 7.0, true), 7.0);
        // The replica's first step: its counters are the baseline.
        assert_eq!(increase(None, 7.0, false), 0.0);
    }
}
