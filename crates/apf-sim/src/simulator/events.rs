//! The simulated replica moves from event to event: an arrival, a client thread's call, the end of an execution or
//! of its additional latency, a wait limit reached, a borrowing adjustment. Times are exact nanoseconds, a quiet
//! level costs nothing, and events at the same instant happen in the order they were scheduled, so a seed always
//! gives the same run.
use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::clients::Source;
use super::state::{State, ADJUST_NS};

/// What happens at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Event {
    /// An open-loop flow's request arrives (void unless `generation` is the flow's current one).
    Arrival { flow: usize, generation: u64 },
    /// A closed-loop thread calls: it takes a token first when the flow has a token bucket.
    Call { flow: usize, thread: u32 },
    /// A closed-loop thread's request, past its token bucket, reaches the apiserver.
    Send { flow: usize, thread: u32 },
    /// A request's execution ends.
    Complete { level: u64, id: u64 },
    /// A request's additional latency ends: its final seats are freed.
    Release { level: u64, id: u64 },
    /// A waiting request reaches its wait limit.
    TimeOut { level: u64, id: u64 },
    /// The limits of the levels are adjusted to their demand (1.26+).
    Adjust,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Scheduled {
    at: u64,
    seq: u64,
    event: Event,
}

impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> Ordering {
        // The earliest first: BinaryHeap is a max-heap.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The events to come, earliest first; at one instant, in the order scheduled.
#[derive(Debug, Clone, Default)]
pub(crate) struct Events {
    heap: BinaryHeap<Scheduled>,
    seq: u64,
}

impl Events {
    pub(super) fn push(&mut self, at: u64, event: Event) {
        self.seq += 1;
        self.heap.push(Scheduled {
            at,
            seq: self.seq,
            event,
        });
    }

    fn pop_until(&mut self, until: u64) -> Option<(u64, Event)> {
        if self.heap.peek()?.at > until {
            return None;
        }
        self.heap.pop().map(|s| (s.at, s.event))
    }
}

impl State {
    /// The first events: each flow's first request or its threads' first calls, and the first adjustment.
    pub(super) fn schedule_start(&mut self) {
        for fi in 0..self.flows.len() {
            self.start_flow(fi, 0);
        }
        if self.version.at_least(26) {
            self.events.push(ADJUST_NS, Event::Adjust);
        }
    }

    /// Schedules what a flow sends from `now`: its next arrival, or a first call of each of its active threads
    /// that is not running.
    pub(super) fn start_flow(&mut self, fi: usize, now: u64) {
        let scale = self.flows[fi].rate_scale * self.load_share;
        let start = self.flows[fi].rate.start.as_nanos() as u64;
        match &mut self.flows[fi].source {
            Source::Open(open) => {
                let next = if open.generation == 0 {
                    open.next(now, scale, &mut self.rng)
                } else {
                    open.rescale(now, scale, &mut self.rng)
                };
                let generation = open.generation;
                if let Some(at) = next {
                    self.events.push(
                        at,
                        Event::Arrival {
                            flow: fi,
                            generation,
                        },
                    );
                }
            }
            Source::Closed(closed) => {
                closed.active = ((f64::from(closed.configured) * self.load_share).round() as u32)
                    .min(closed.configured);
                if let Some(bucket) = &mut closed.bucket {
                    bucket.share(self.load_share);
                }
                for thread in 0..closed.active {
                    let t = &mut closed.threads[thread as usize];
                    if !t.running {
                        t.running = true;
                        self.events
                            .push(now.max(start), Event::Call { flow: fi, thread });
                    }
                }
            }
        }
    }

    /// Runs every event up to `target`, then brings the levels' clocks and time integrals to it.
    pub(super) fn advance_to(&mut self, target: u64) {
        while let Some((at, event)) = self.events.pop_until(target) {
            self.now_ns = at;
            self.handle(event);
        }
        self.now_ns = target;
        for l in &mut self.levels {
            l.catch_up(target);
        }
    }

    fn handle(&mut self, event: Event) {
        let now = self.now_ns;
        match event {
            Event::Arrival { flow, generation } => {
                let scale = self.flows[flow].rate_scale * self.load_share;
                let Source::Open(open) = &mut self.flows[flow].source else {
                    return;
                };
                if open.generation != generation {
                    return;
                }
                let next = open.next(now, scale, &mut self.rng);
                let generation = open.generation;
                if let Some(at) = next {
                    self.events.push(at, Event::Arrival { flow, generation });
                }
                self.arrive(flow, None);
            }
            Event::Call { flow, thread } => self.call(flow, thread),
            Event::Send { flow, thread } => self.arrive(flow, Some(thread)),
            Event::Complete { level, id } => self.complete(level, id),
            Event::Release { level, id } => self.release(level, id),
            Event::TimeOut { level, id } => self.time_out(level, id),
            Event::Adjust => {
                self.events.push(now + ADJUST_NS, Event::Adjust);
                for l in &mut self.levels {
                    l.catch_up(now);
                }
                self.adjust_limits();
                // A raised limit admits queued requests at once.
                for li in 0..self.levels.len() {
                    self.dispatch(li);
                }
            }
        }
    }

    /// A closed-loop thread's call: one of its `calls`, through the token bucket when it has one.
    fn call(&mut self, flow: usize, thread: u32) {
        let now = self.now_ns;
        let limit = self.flows[flow].rate.calls;
        let Source::Closed(closed) = &mut self.flows[flow].source else {
            return;
        };
        let t = &mut closed.threads[thread as usize];
        if thread >= closed.active || limit.is_some_and(|n| t.calls >= n) {
            t.running = false;
            return;
        }
        t.calls += 1;
        let wait = closed.bucket.as_mut().map_or(0, |b| b.reserve(now));
        if wait == 0 {
            self.arrive(flow, Some(thread));
        } else {
            self.events
                .push(now.saturating_add(wait), Event::Send { flow, thread });
        }
    }

    /// The thread calls again at `at` (now, if `at` has passed).
    pub(super) fn call_again(&mut self, flow: usize, thread: u32, at: u64) {
        self.events
            .push(at.max(self.now_ns), Event::Call { flow, thread });
    }

    /// Where a level is in the list, by its uid: `None` once it has gone.
    pub(super) fn level_index(&self, uid: u64) -> Option<usize> {
        self.levels.iter().position(|l| l.uid == uid)
    }
}
