//! The flows of one replica's `dump_requests` over the sliding window, summed by slices of a tenth of it: each
//! flow's mean waiting requests and seats over the window's dumps, without holding every dump's flows. Holding them
//! (whole snapshots) took 1.2 GB for two replicas read every 250 ms with 6000 flows coming and going
//! (`cargo bench --bench watch_cost -- soak`).
use std::collections::{BTreeMap, HashMap, VecDeque};

use apf::model::{FlowSample, USERS_PER_FLOW};

use super::FlowReport;

/// Slices per window: the window's mean moves in steps of a tenth of it.
pub const SLICES: f64 = 10.0;

/// Flows kept per priority level and flow schema in a slice, those putting the most pressure on the level (waiting
/// requests plus seats): many more than a report shows (`analysis.top_flows`), so the top of the window is the top
/// of its slices; every flow schema seen keeps its own. The daemon's rounds keep no more of each dump
/// (`scrape::ScrapePlan::flows_per_schema`).
pub const FLOWS_PER_SCHEMA: usize = 200;

/// (priority level, flow schema, flow distinguisher)
type FlowKey = (String, String, String);

#[derive(Debug, Clone, Default)]
struct FlowSums {
    waiting_requests: f64,
    executing_seats: f64,
    users: Vec<String>,
    example_request: Option<String>,
}

impl FlowSums {
    fn pressure(&self) -> f64 {
        self.waiting_requests + self.executing_seats
    }

    fn add(&mut self, waiting: f64, seats: f64, users: &[String], example: Option<&String>) {
        self.waiting_requests += waiting;
        self.executing_seats += seats;
        for u in users {
            if self.users.len() < USERS_PER_FLOW && !self.users.contains(u) {
                if self.users.is_empty() {
                    // Most flows have one user (a by-user flow schema's distinguisher is the user).
                    self.users.reserve_exact(1);
                }
                self.users.push(u.clone());
            }
        }
        if self.example_request.is_none() {
            self.example_request = example.cloned();
        }
    }
}

/// A flow's sums over the slices of the window, borrowing its users and example from them.
#[derive(Default)]
struct WindowSums<'a> {
    waiting_requests: f64,
    executing_seats: f64,
    users: Vec<&'a str>,
    example_request: Option<&'a str>,
}

impl<'a> WindowSums<'a> {
    fn add(&mut self, slice: &'a FlowSums) {
        self.waiting_requests += slice.waiting_requests;
        self.executing_seats += slice.executing_seats;
        for u in &slice.users {
            if self.users.len() < USERS_PER_FLOW && !self.users.contains(&u.as_str()) {
                self.users.push(u);
            }
        }
        if self.example_request.is_none() {
            self.example_request = slice.example_request.as_deref();
        }
    }
}

#[derive(Debug, Clone)]
struct Slice {
    /// When its first dump was read (the history's clock).
    start: f64,
    /// Dumps summed in it.
    dumps: u32,
    flows: HashMap<FlowKey, FlowSums>,
}

impl Slice {
    /// Keeps the [`FLOWS_PER_SCHEMA`] flows of each level and flow schema with the most pressure.
    fn keep_top(&mut self) {
        let mut groups: HashMap<(&str, &str), Vec<(f64, &FlowKey)>> = HashMap::new();
        for (key, sums) in &self.flows {
            groups
                .entry((&key.0, &key.1))
                .or_default()
                .push((sums.pressure(), key));
        }
        let mut dropped: Vec<FlowKey> = Vec::new();
        for flows in groups.values_mut() {
            if flows.len() > FLOWS_PER_SCHEMA {
                flows.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
                dropped.extend(flows[FLOWS_PER_SCHEMA..].iter().map(|(_, k)| (*k).clone()));
            }
        }
        for key in dropped {
            self.flows.remove(&key);
        }
    }

    fn largest_group(&self) -> usize {
        let mut sizes: HashMap<(&str, &str), usize> = HashMap::new();
        for key in self.flows.keys() {
            *sizes.entry((&key.0, &key.1)).or_default() += 1;
        }
        sizes.into_values().max().unwrap_or(0)
    }
}

/// One replica's flows over the window.
#[derive(Debug, Clone, Default)]
pub struct FlowWindow {
    slices: VecDeque<Slice>,
}

impl FlowWindow {
    /// One dump's flows, read at `at`; a new slice starts every `slice_seconds`.
    pub fn add(&mut self, at: f64, slice_seconds: f64, flows: &[FlowSample]) {
        let open = self
            .slices
            .back()
            .is_some_and(|s| at < s.start + slice_seconds);
        if !open {
            if let Some(last) = self.slices.back_mut() {
                last.keep_top();
                // The table grew to the open slice's flows: a closed slice holds only what it kept.
                last.flows.shrink_to_fit();
            }
            self.slices.push_back(Slice {
                start: at,
                dumps: 0,
                flows: HashMap::new(),
            });
        }
        let Some(slice) = self.slices.back_mut() else {
            return;
        };
        slice.dumps += 1;
        for f in flows {
            let key = (
                f.priority_level.clone(),
                f.flow_schema.clone(),
                f.flow.clone(),
            );
            slice.flows.entry(key).or_default().add(
                f.waiting_requests as f64,
                f.executing_seats as f64,
                &f.users,
                f.example_request.as_ref(),
            );
        }
        // The open slice is bounded too: past twice the keep, back to the keep (the flows cut had the least
        // pressure so far).
        if slice.largest_group() > 2 * FLOWS_PER_SCHEMA {
            slice.keep_top();
        }
    }

    /// Drops the slices wholly before the window of `window` seconds ending at `now`.
    pub fn prune(&mut self, now: f64, window: f64) {
        while self.slices.len() >= 2 && self.slices[1].start <= now - window {
            self.slices.pop_front();
        }
    }

    /// The slices overlapping the window ending at `now`.
    fn inside(&self, now: f64, window: f64) -> impl Iterator<Item = &Slice> {
        let ends: Vec<f64> = self
            .slices
            .iter()
            .skip(1)
            .map(|s| s.start)
            .chain(std::iter::once(f64::INFINITY))
            .collect();
        self.slices
            .iter()
            .zip(ends)
            .filter(move |(s, end)| *end > now - window && s.start <= now)
            .map(|(s, _)| s)
    }

    /// Each flow's mean waiting requests and seats over the window's dumps, the `n` with the most pressure per level
    /// (ties by flow schema and flow). Only those `n` are copied out: the window holds thousands.
    pub fn top_by_level(
        &self,
        now: f64,
        window: f64,
        n: usize,
    ) -> BTreeMap<String, Vec<FlowReport>> {
        let inside: Vec<&Slice> = self.inside(now, window).collect();
        let dumps = f64::from(inside.iter().map(|s| s.dumps).sum::<u32>().max(1));
        let mut sums: HashMap<&FlowKey, WindowSums<'_>> = HashMap::new();
        for slice in &inside {
            for (key, s) in &slice.flows {
                sums.entry(key).or_default().add(s);
            }
        }
        let mut by_level: BTreeMap<&str, Vec<(&FlowKey, WindowSums<'_>)>> = BTreeMap::new();
        for (key, s) in sums {
            by_level.entry(&key.0).or_default().push((key, s));
        }
        by_level
            .into_iter()
            .map(|(level, mut flows)| {
                // Pressure a flow puts on its level: what it waits for plus what it holds.
                flows.sort_by(|a, b| {
                    (b.1.waiting_requests + b.1.executing_seats)
                        .total_cmp(&(a.1.waiting_requests + a.1.executing_seats))
                        .then_with(|| a.0.cmp(b.0))
                });
                let top = flows
                    .into_iter()
                    .take(n)
                    .map(|((_, schema, flow), s)| FlowReport {
                        flow_schema: schema.clone(),
                        flow: flow.clone(),
                        waiting_requests: s.waiting_requests / dumps,
                        executing_seats: s.executing_seats / dumps,
                        users: s.users.iter().map(|u| u.to_string()).collect(),
                        example_request: s.example_request.map(str::to_string),
                    })
                    .collect();
                (level.to_string(), top)
            })
            .collect()
    }

    /// (flow schema, priority level, user) of every user seen in the flows kept.
    pub fn users(&self) -> impl Iterator<Item = (String, String, String)> + '_ {
        self.slices.iter().flat_map(|s| {
            s.flows.iter().flat_map(|((level, schema, _), sums)| {
                sums.users
                    .iter()
                    .map(|u| (schema.clone(), level.clone(), u.clone()))
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(level: &str, name: &str, waiting: u64) -> FlowSample {
        FlowSample {
            priority_level: level.into(),
            flow_schema: "service-accounts".into(),
            flow: name.into(),
            waiting_requests: waiting,
            executing_seats: 0,
            users: vec![name.into()],
            example_request: Some("list pods".into()),
        }
    }

    #[test]
    fn means_over_the_dumps_of_the_window() {
        let mut w = FlowWindow::default();
        // A dump a second, slices of 6 s: the first slice leaves the 60 s window once the second starts before it.
        for at in 0..70 {
            let waiting = if at < 10 { 100 } else { 2 };
            w.add(
                f64::from(at),
                6.0,
                &[flow("workload-low", "agent", waiting)],
            );
        }
        w.prune(69.0, 60.0);
        let top = w.top_by_level(69.0, 60.0, 10);
        let agent = &top["workload-low"][0];
        // Slices starting at 6, 12, ..., 66 overlap (9, 69]: 64 dumps, of which 6..10 waited 100.
        assert_eq!(agent.waiting_requests, (4.0 * 100.0 + 60.0 * 2.0) / 64.0);
        assert_eq!(agent.users, ["agent"]);
        assert_eq!(agent.example_request.as_deref(), Some("list pods"));
    }

    #[test]
    fn churning_flows_stay_bounded_and_the_heavy_one_stays_on_top() {
        let mut w = FlowWindow::default();
        // 2000 flows, 200 new at each read, 4 reads a second for 90 s; one flow waits 50 all along.
        for read in 0..360u32 {
            let at = f64::from(read) / 4.0;
            let first = read as usize * 200;
            let mut flows: Vec<FlowSample> = (first..first + 2000)
                .map(|i| flow("workload-low", &format!("tenant-{i}"), 1))
                .collect();
            flows.push(flow("workload-low", "heavy", 50));
            w.add(at, 6.0, &flows);
            w.prune(at, 60.0);
        }
        let kept: usize = w.slices.iter().map(|s| s.flows.len()).sum();
        let room: usize = w.slices.iter().map(|s| s.flows.capacity()).sum();
        assert!(
            room <= 11 * 4 * FLOWS_PER_SCHEMA + 2 * 8192,
            "closed slices hold only what they kept: room for {room} flows"
        );
        assert!(w.slices.len() <= 11, "{} slices", w.slices.len());
        assert!(
            kept <= 11 * 2 * FLOWS_PER_SCHEMA,
            "{kept} flows kept for 11 slices"
        );
        let top = w.top_by_level(89.75, 60.0, 3);
        assert_eq!(top["workload-low"][0].flow, "heavy");
        assert_eq!(top["workload-low"][0].waiting_requests, 50.0);
    }

    #[test]
    fn every_flow_schema_keeps_its_flows() {
        let mut w = FlowWindow::default();
        let mut flows: Vec<FlowSample> = (0..1000)
            .map(|i| flow("workload-low", &format!("tenant-{i}"), 5))
            .collect();
        let mut rare = flow("catch-all", "someone", 0);
        rare.flow_schema = "catch-all".into();
        flows.push(rare);
        w.add(0.0, 6.0, &flows);
        w.add(7.0, 6.0, &[]);
        let users: Vec<_> = w.users().filter(|u| u.0 == "catch-all").collect();
        assert_eq!(
            users,
            [("catch-all".into(), "catch-all".into(), "someone".into())]
        );
    }
}
