//! The flows of one replica's `dump_requests` over the sliding window, summed by slices of a tenth of it: each
//! flow's mean waiting requests and seats over the window's dumps, without holding every dump's flows. Holding them
//! (whole snapshots) took 1.2 GB for two replicas read every 250 ms with 6000 flows coming and going
//! (`cargo bench --bench watch_cost -- soak`).
use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Arc;

use smallvec::SmallVec;

use apf::model::{flow_pressure, FlowSample, FlowUser, USERS_PER_FLOW};

use super::FlowReport;

/// Slices per window: the window's mean moves in steps of a tenth of it.
pub const SLICES: f64 = 10.0;

/// Flows kept per priority level and flow schema in a slice, those putting the most pressure on the level (waiting
/// requests plus seats): many more than a report shows (`analysis.top_flows`), so the top of the window is the top
/// of its slices; every flow schema seen keeps its own. The daemon's rounds keep no more of each dump
/// (`scrape::ScrapePlan::flows_per_schema`).
pub const FLOWS_PER_SCHEMA: usize = 200;

/// A priority level and flow schema: every flow of theirs names the pair, held once.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Group {
    priority_level: Arc<str>,
    flow_schema: Arc<str>,
}

/// A flow: ordered by priority level, flow schema and flow distinguisher.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct FlowKey {
    group: Arc<Group>,
    flow: Arc<str>,
}

/// A flow's waiting requests and seats summed over the window's dumps.
type WindowSum<'a> = (&'a FlowKey, Totals);

/// Sums over the window's dumps: waiting requests, seats held, requests listed and their seats.
#[derive(Debug, Clone, Copy, Default)]
struct Totals {
    waiting_requests: f64,
    executing_seats: f64,
    listed_requests: f64,
    listed_seats: f64,
}

impl Totals {
    fn pressure(&self) -> f64 {
        flow_pressure(self.waiting_requests, self.executing_seats)
    }
}

/// Values held once however many slices and flows name them: a level's and flow schema's names are in every flow
/// of theirs, a flow lives on through several slices, and most flows' [`Details`] are one of a few.
#[derive(Debug)]
struct Held<T: ?Sized>(HashSet<Arc<T>>);

impl<T: ?Sized> Default for Held<T> {
    fn default() -> Self {
        Self(HashSet::new())
    }
}

impl<T: ?Sized> Clone for Held<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T: ?Sized + Hash + Eq> Held<T> {
    /// The value held equal to `value`, made by `hold` when none is.
    fn get<Q>(&mut self, value: &Q, hold: impl FnOnce(&Q) -> Arc<T>) -> Arc<T>
    where
        Q: ?Sized + Hash + Eq,
        Arc<T>: Borrow<Q>,
    {
        if let Some(held) = self.0.get(value) {
            return held.clone();
        }
        let held = hold(value);
        self.0.insert(held.clone());
        held
    }

    /// Forgets the values nothing else holds any more.
    fn prune(&mut self) {
        self.0.retain(|held| Arc::strong_count(held) > 1);
        if self.0.capacity() > 2 * self.0.len() + 64 {
            self.0.shrink_to_fit();
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.len()
    }
}

/// What a flow's report names besides its sums: who sent its requests and one of them. A by-user flow schema's
/// flow is its user, and most flows' example is one of a few requests (`list pods`): the flows of a churning
/// cluster share a handful of these.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
struct Details {
    users: SmallVec<[User; 1]>,
    example_request: Option<Arc<str>>,
}

/// A user of a flow, as a dump's is held: a by-user flow schema's flow is its user.
type User = FlowUser<Arc<str>>;

impl Details {
    fn has_user(&self, user: &str, flow: &str) -> bool {
        self.users.iter().any(|held| held.name(flow) == user)
    }

    /// Whether `sample` names a user or an example these lack.
    fn lacks_any_of(&self, sample: &FlowSample) -> bool {
        (self.users.len() < USERS_PER_FLOW
            && sample.users.iter().any(|u| !self.has_user(u, &sample.flow)))
            || (self.example_request.is_none() && sample.example_request.is_some())
    }
}

/// Everything a window holds once.
#[derive(Debug, Clone, Default)]
struct Holdings {
    names: Held<str>,
    groups: Held<Group>,
    details: Held<Details>,
    /// The group of the last flow added: a dump lists each level's and flow schema's flows together.
    last_group: Option<Arc<Group>>,
}

impl Holdings {
    fn name(&mut self, name: &str) -> Arc<str> {
        self.names.get(name, |n| Arc::from(n))
    }

    fn group(&mut self, level: &str, schema: &str) -> Arc<Group> {
        if let Some(last) = &self.last_group {
            if *last.priority_level == *level && *last.flow_schema == *schema {
                return last.clone();
            }
        }
        let group = Group {
            priority_level: self.name(level),
            flow_schema: self.name(schema),
        };
        let held = self.groups.get(&group, |g| {
            Arc::new(Group {
                priority_level: g.priority_level.clone(),
                flow_schema: g.flow_schema.clone(),
            })
        });
        self.last_group = Some(held.clone());
        held
    }

    /// Forgets what no slice holds any more: groups and details first, for they hold names.
    fn prune(&mut self) {
        self.last_group = None;
        self.groups.prune();
        self.details.prune();
        self.names.prune();
    }
}

/// 24 bytes a flow, however many users and examples: a window holds thousands.
#[derive(Debug, Clone, Default)]
struct FlowSums {
    /// Counts summed over a slice's dumps: whole numbers, held in 32 bits so that a flow stays 48 bytes (saturating
    /// at 4 billion, which a tenth of a window never reaches).
    waiting_requests: u32,
    executing_seats: u32,
    /// Requests the dumps listed, and their seats: what one request of the flow costs.
    listed_requests: u32,
    listed_seats: u32,
    /// None: no user and no example seen.
    details: Option<Arc<Details>>,
}

impl FlowSums {
    fn pressure(&self) -> f64 {
        flow_pressure(
            f64::from(self.waiting_requests),
            f64::from(self.executing_seats),
        )
    }

    fn add(&mut self, sample: &FlowSample, held: &mut Holdings) {
        let add = |sum: &mut u32, n: u64| {
            *sum = sum.saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
        };
        add(&mut self.waiting_requests, sample.waiting_requests);
        add(&mut self.executing_seats, sample.executing_seats);
        add(&mut self.listed_requests, sample.listed_requests);
        add(&mut self.listed_seats, sample.listed_seats);
        let none = Details::default();
        let details = self.details.as_deref().unwrap_or(&none);
        if !details.lacks_any_of(sample) {
            return;
        }
        let mut more = details.clone();
        for u in &sample.users {
            if more.users.len() < USERS_PER_FLOW && !more.has_user(u, &sample.flow) {
                more.users.push(if *u == sample.flow {
                    User::TheFlow
                } else {
                    User::Other(held.name(u))
                });
            }
        }
        if more.example_request.is_none() {
            more.example_request = sample.example_request.as_deref().map(|e| held.name(e));
        }
        self.details = Some(held.details.get(&more, |d| Arc::new(d.clone())));
    }
}

/// A slice's flows: a table while dumps are added to it, then a slice sorted by key (no room to spare).
#[derive(Debug, Clone)]
enum Flows {
    Open(HashMap<FlowKey, FlowSums>),
    Closed(Box<[(FlowKey, FlowSums)]>),
}

impl Flows {
    #[cfg(test)]
    fn len(&self) -> usize {
        match self {
            Flows::Open(flows) => flows.len(),
            Flows::Closed(flows) => flows.len(),
        }
    }

    fn iter(&self) -> impl Iterator<Item = (&FlowKey, &FlowSums)> {
        let (open, closed) = match self {
            Flows::Open(flows) => (Some(flows.iter()), None),
            Flows::Closed(flows) => (None, Some(flows.iter().map(|(k, s)| (k, s)))),
        };
        open.into_iter()
            .flatten()
            .chain(closed.into_iter().flatten())
    }

    fn get(&self, key: &FlowKey) -> Option<&FlowSums> {
        match self {
            Flows::Open(flows) => flows.get(key),
            Flows::Closed(flows) => flows
                .binary_search_by(|(k, _)| k.cmp(key))
                .ok()
                .map(|i| &flows[i].1),
        }
    }
}

#[derive(Debug, Clone)]
struct Slice {
    /// When its first dump was read (the history's clock).
    start: f64,
    /// Dumps summed in it.
    dumps: u32,
    flows: Flows,
}

/// Keeps the [`FLOWS_PER_SCHEMA`] flows of each level and flow schema with the most pressure.
fn keep_top(flows: &mut HashMap<FlowKey, FlowSums>) {
    let mut groups: HashMap<&Group, Vec<(f64, &FlowKey)>> = HashMap::new();
    for (key, sums) in flows.iter() {
        groups
            .entry(&key.group)
            .or_default()
            .push((sums.pressure(), key));
    }
    let mut dropped: Vec<FlowKey> = Vec::new();
    for group in groups.values_mut() {
        if group.len() > FLOWS_PER_SCHEMA {
            group.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
            dropped.extend(group[FLOWS_PER_SCHEMA..].iter().map(|(_, k)| (*k).clone()));
        }
    }
    for key in dropped {
        flows.remove(&key);
    }
}

fn largest_group(flows: &HashMap<FlowKey, FlowSums>) -> usize {
    let mut sizes: HashMap<&Group, usize> = HashMap::new();
    for key in flows.keys() {
        *sizes.entry(&key.group).or_default() += 1;
    }
    sizes.into_values().max().unwrap_or(0)
}

/// One replica's flows over the window.
#[derive(Debug, Clone, Default)]
pub struct FlowWindow {
    slices: VecDeque<Slice>,
    held: Holdings,
}

impl FlowWindow {
    /// One dump's flows, read at `at`; a new slice starts every `slice_seconds`.
    pub fn add(&mut self, at: f64, slice_seconds: f64, flows: &[FlowSample]) {
        let open = self
            .slices
            .back()
            .is_some_and(|s| matches!(s.flows, Flows::Open(_)) && at < s.start + slice_seconds);
        if !open {
            if let Some(last) = self.slices.back_mut() {
                if let Flows::Open(flows) = &mut last.flows {
                    keep_top(flows);
                    // A closed slice is only read: sorted, it holds only what it kept.
                    let mut kept: Vec<(FlowKey, FlowSums)> =
                        std::mem::take(flows).into_iter().collect();
                    kept.sort_unstable_by(|a, b| a.0.cmp(&b.0));
                    last.flows = Flows::Closed(kept.into_boxed_slice());
                }
            }
            self.slices.push_back(Slice {
                start: at,
                dumps: 0,
                flows: Flows::Open(HashMap::new()),
            });
        }
        let Some(Slice {
            dumps,
            flows: Flows::Open(open),
            ..
        }) = self.slices.back_mut()
        else {
            return;
        };
        *dumps += 1;
        for f in flows {
            let key = FlowKey {
                group: self.held.group(&f.priority_level, &f.flow_schema),
                flow: self.held.name(&f.flow),
            };
            let sums = open.entry(key).or_default();
            sums.add(f, &mut self.held);
        }
        // The open slice is bounded too: past twice the keep, back to the keep (the flows cut had the least
        // pressure so far).
        if largest_group(open) > 2 * FLOWS_PER_SCHEMA {
            keep_top(open);
        }
    }

    /// Drops the slices wholly before the window of `window` seconds ending at `now`, and what only they held.
    pub fn prune(&mut self, now: f64, window: f64) {
        while self.slices.len() >= 2 && self.slices[1].start <= now - window {
            self.slices.pop_front();
        }
        self.held.prune();
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
    /// (ties by flow schema and flow). The window holds thousands of flows: their sums are two numbers each, and
    /// only the `n` reported gather users and an example.
    pub fn top_by_level(
        &self,
        now: f64,
        window: f64,
        n: usize,
    ) -> BTreeMap<String, Vec<FlowReport>> {
        let inside: Vec<&Slice> = self.inside(now, window).collect();
        let dumps = f64::from(inside.iter().map(|s| s.dumps).sum::<u32>().max(1));
        let mut sums: HashMap<&FlowKey, Totals> = HashMap::new();
        for slice in &inside {
            for (key, s) in slice.flows.iter() {
                let sum = sums.entry(key).or_default();
                sum.waiting_requests += f64::from(s.waiting_requests);
                sum.executing_seats += f64::from(s.executing_seats);
                sum.listed_requests += f64::from(s.listed_requests);
                sum.listed_seats += f64::from(s.listed_seats);
            }
        }
        // Each flow schema's pressure, all its flows kept: a flow's share of it estimates its share of the schema's
        // requests.
        let mut schema_pressure: HashMap<&Group, f64> = HashMap::new();
        for (key, sum) in &sums {
            *schema_pressure.entry(&*key.group).or_default() += sum.pressure();
        }
        let mut by_level: BTreeMap<&str, Vec<WindowSum<'_>>> = BTreeMap::new();
        for (key, sum) in sums {
            by_level
                .entry(&key.group.priority_level)
                .or_default()
                .push((key, sum));
        }
        by_level
            .into_iter()
            .map(|(level, mut flows)| {
                let most_pressure = |a: &WindowSum<'_>, b: &WindowSum<'_>| {
                    b.1.pressure()
                        .total_cmp(&a.1.pressure())
                        .then_with(|| a.0.cmp(b.0))
                };
                if flows.len() > n && n > 0 {
                    flows.select_nth_unstable_by(n - 1, most_pressure);
                }
                flows.truncate(n);
                flows.sort_by(most_pressure);
                let top = flows
                    .into_iter()
                    .map(|(key, totals)| {
                        let mut users: Vec<String> = Vec::new();
                        let mut example_request = None;
                        let details = inside
                            .iter()
                            .filter_map(|slice| slice.flows.get(key)?.details.as_deref());
                        for d in details {
                            for u in d.users.iter().map(|u| u.name(&key.flow)) {
                                if users.len() < USERS_PER_FLOW && !users.iter().any(|h| h == u) {
                                    users.push(u.to_string());
                                }
                            }
                            if example_request.is_none() {
                                example_request = d.example_request.as_deref().map(str::to_string);
                            }
                        }
                        FlowReport {
                            flow_schema: key.group.flow_schema.to_string(),
                            flow: key.flow.to_string(),
                            waiting_requests: totals.waiting_requests / dumps,
                            executing_seats: totals.executing_seats / dumps,
                            seats_per_request: (totals.listed_requests > 0.0)
                                .then(|| totals.listed_seats / totals.listed_requests),
                            schema_share: schema_pressure
                                .get(&*key.group)
                                .filter(|p| **p > 0.0)
                                .map(|p| totals.pressure() / p),
                            advice: None,
                            users,
                            example_request,
                        }
                    })
                    .collect();
                (level.to_string(), top)
            })
            .collect()
    }

    /// (flow schema, priority level, user) of every user seen in the flows kept.
    pub fn users(&self) -> impl Iterator<Item = (String, String, String)> + '_ {
        self.slices.iter().flat_map(|s| {
            s.flows.iter().flat_map(|(key, sums)| {
                let users = sums.details.as_deref().map(|d| d.users.as_slice());
                users.unwrap_or_default().iter().map(|u| {
                    (
                        key.group.flow_schema.to_string(),
                        key.group.priority_level.to_string(),
                        u.name(&key.flow).to_string(),
                    )
                })
            })
        })
    }
}

/// `list pods` as (`list`, `pods`): the verb and what a flow's example request reads (a resource, `deployments.apps`
/// with its group, or a non-resource path).
pub fn verb_and_resource(example: &str) -> Option<(&str, &str)> {
    let (verb, what) = example.split_once(' ')?;
    (!verb.is_empty() && !what.is_empty() && !what.contains(' ')).then_some((verb, what))
}

impl FlowReport {
    /// The request the flow's example stands for, sent by `user` (with the groups authenticators add): what the
    /// remediation and the predictions match against FlowSchemas. Without an example, none.
    pub fn request_of(&self, user: &str) -> Option<apf::matching::Request> {
        use apf::matching::{implied_groups, Request, Target};
        let (verb, what) = self
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
            listed_requests: waiting,
            listed_seats: waiting,
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
        assert!(w.slices.len() <= 11, "{} slices", w.slices.len());
        for s in &w.slices {
            match &s.flows {
                Flows::Closed(kept) => {
                    assert!(kept.len() <= FLOWS_PER_SCHEMA, "{} flows kept", kept.len())
                }
                Flows::Open(open) => assert!(
                    open.len() <= 2 * FLOWS_PER_SCHEMA,
                    "{} flows open",
                    open.len()
                ),
            }
        }
        // The names of the flows cut are forgotten: those of the flows kept, the level's and the schema's remain.
        let kept: usize = w.slices.iter().map(|s| s.flows.len()).sum();
        assert!(
            w.held.names.len() <= kept + 3,
            "{} names for {kept} flows",
            w.held.names.len()
        );
        let top = w.top_by_level(89.75, 60.0, 3);
        assert_eq!(top["workload-low"][0].flow, "heavy");
        assert_eq!(top["workload-low"][0].waiting_requests, 50.0);
    }

    #[test]
    fn the_top_flows_gather_users_and_an_example_across_the_slices() {
        let mut w = FlowWindow::default();
        let mut first = flow("workload-low", "ns-a", 4);
        first.users = vec!["alice".into()];
        first.example_request = None;
        w.add(0.0, 6.0, &[first, flow("workload-low", "ns-b", 1)]);
        let mut second = flow("workload-low", "ns-a", 4);
        second.users = (0..USERS_PER_FLOW + 2)
            .map(|i| format!("user-{i}"))
            .collect();
        second.users.insert(0, "alice".into());
        second.example_request = Some("watch configmaps".into());
        w.add(7.0, 6.0, &[second, flow("workload-low", "ns-c", 1)]);
        let top = w.top_by_level(7.0, 60.0, 2);
        let flows: Vec<&str> = top["workload-low"]
            .iter()
            .map(|f| f.flow.as_str())
            .collect();
        // ns-b and ns-c tie: the flow's name decides.
        assert_eq!(flows, ["ns-a", "ns-b"]);
        let a = &top["workload-low"][0];
        assert_eq!(a.waiting_requests, 4.0);
        let mut users = vec!["alice".to_string()];
        users.extend((0..USERS_PER_FLOW - 1).map(|i| format!("user-{i}")));
        assert_eq!(a.users, users);
        assert_eq!(a.example_request.as_deref(), Some("watch configmaps"));
        assert!(w.top_by_level(7.0, 60.0, 0)["workload-low"].is_empty());
    }

    #[test]
    fn a_window_holds_each_flow_in_48_bytes_and_shared_details_once() {
        assert_eq!(std::mem::size_of::<(FlowKey, FlowSums)>(), 48);
        let mut w = FlowWindow::default();
        // By-user flows: each flow's user is the flow, and all ask the same request.
        let flows: Vec<FlowSample> = (0..500)
            .map(|i| flow("workload-low", &format!("tenant-{i}"), 1))
            .collect();
        w.add(0.0, 6.0, &flows);
        let mut other = flow("workload-low", "ns-a", 1);
        other.users = vec!["alice".into()];
        w.add(1.0, 6.0, &[other]);
        assert_eq!(w.held.details.len(), 2);
        assert_eq!(w.held.groups.len(), 1);
        let top = w.top_by_level(1.0, 60.0, 2);
        assert_eq!(top["workload-low"][0].flow, "ns-a");
        assert_eq!(top["workload-low"][0].users, ["alice"]);
        assert_eq!(top["workload-low"][1].users, ["tenant-0"]);
        // Once no slice holds the flows, their details and names go too.
        w.add(100.0, 6.0, &[]);
        w.add(200.0, 6.0, &[]);
        w.prune(200.0, 60.0);
        assert_eq!(w.slices.len(), 2);
        assert_eq!(w.held.details.len(), 0);
        assert_eq!(w.held.groups.len(), 0);
        assert_eq!(w.held.names.len(), 0);
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
