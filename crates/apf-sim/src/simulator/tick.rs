//! One 10 ms tick of the simulated replica: executions that ended free their seats, queued requests past the wait
//! limit time out, the tick's arrivals are admitted (executed, queued or rejected), and queued requests are
//! dispatched while seats are free.
use std::collections::BTreeMap;
use std::time::Duration;

use apf::reason::{CONCURRENCY_LIMIT, QUEUE_FULL, TIME_OUT};

use crate::audit::AuditRecord;
use crate::scenario::Arrivals;
use rand::rngs::StdRng;
use rand::Rng;

use super::state::{
    FsStats, Histogram, Req, State, ADJUST_NS, QUEUE_LENGTH_BUCKETS, QUEUE_WAIT_LIMIT_NS,
    SEAT_UTILIZATION_BUCKETS, TICK_NS,
};

impl State {
    pub(super) fn stats(&mut self, level: usize, fs: usize) -> &mut FsStats {
        let key = (
            self.levels[level].def.name.to_string(),
            self.fs_names[fs].clone(),
        );
        let n = self.wait_buckets.len();
        let w = self.work_buckets.len();
        self.fs_stats.entry(key).or_insert_with(|| FsStats {
            dispatched: 0,
            rejected: BTreeMap::new(),
            executing_requests: 0,
            executing_seats: 0,
            inqueue_requests: 0,
            inqueue_seats: 0,
            wait_executed: Histogram::new(n),
            wait_rejected: Histogram::new(n),
            execution: Histogram::new(n),
            queue_length: Histogram::new(QUEUE_LENGTH_BUCKETS.len()),
            work_seats: Histogram::new(w),
            no_accommodation: 0,
        })
    }

    pub(super) fn tick(&mut self) {
        let t0 = self.now_ns;
        let t1 = t0 + TICK_NS;
        self.now_ns = t1;
        self.complete(t1);
        self.time_out(t1);
        let mut arrivals = Vec::new();
        let in_scenario = Duration::from_nanos(t0 % self.scenario_ns);
        for fi in 0..self.flows.len() {
            let f = &mut self.flows[fi];
            let lambda =
                f.rate.rps_at(in_scenario) * f.rate_scale * self.load_share * TICK_NS as f64 / 1e9;
            match f.rate.arrivals {
                Arrivals::Poisson => {
                    for _ in 0..poisson(&mut self.rng, lambda) {
                        arrivals.push((t0 + self.rng.gen_range(1..=TICK_NS), fi));
                    }
                }
                Arrivals::Even => {
                    // Also catches NaN from a hand-built scenario.
                    if lambda.is_nan() || lambda <= 0.0 {
                        continue;
                    }
                    // Each request at the instant the rate has accumulated a whole one.
                    let mut at = 1.0 - f.owed;
                    f.owed += lambda.min(500.0);
                    while f.owed >= 1.0 {
                        f.owed -= 1.0;
                        let offset = (at / lambda * TICK_NS as f64).ceil() as u64;
                        arrivals.push((t0 + offset.clamp(1, TICK_NS), fi));
                        at += 1.0;
                    }
                }
            }
        }
        arrivals.sort();
        for (at, fi) in arrivals {
            self.arrive(fi, at);
        }
        for li in 0..self.levels.len() {
            self.dispatch(li, t1);
            let l = &mut self.levels[li];
            l.shed_surplus_queues();
            // The fair-queuing virtual clock advances by the seats each active queue gets.
            let active = l
                .queues
                .iter()
                .filter(|q| !q.waiting.is_empty() || q.executing_requests > 0)
                .count();
            if active > 0 {
                l.virtual_r += TICK_NS as f64 / 1e9 * l.seats_in_use as f64 / active as f64;
            }
            let utilization = f64::from(l.seats_in_use) / f64::from(l.current_cl.max(1));
            l.seat_utilization
                .hold(&SEAT_UTILIZATION_BUCKETS, utilization, TICK_NS);
            let demand = l.seats_in_use + l.waiting_seats;
            l.period_sum += demand as f64;
            l.period_sum_sq += (demand as f64) * (demand as f64);
            l.period_n += 1;
            l.period_hwm = l.period_hwm.max(demand);
        }
        if t1 % ADJUST_NS == 0 && self.version.at_least(26) {
            self.adjust_limits();
            // A raised limit admits queued requests at once.
            for li in 0..self.levels.len() {
                self.dispatch(li, t1);
            }
        }
        // A level whose object is gone leaves once idle; retired levels come last, so no flow's level moves.
        self.levels.retain(|l| !(l.retired && l.is_idle()));
    }

    fn complete(&mut self, now: u64) {
        for li in 0..self.levels.len() {
            let done: Vec<Req> = {
                let l = &mut self.levels[li];
                let (done, keep): (Vec<Req>, Vec<Req>) = l
                    .executing
                    .drain(..)
                    .partition(|r| r.start_ns + r.dur_ns <= now);
                l.executing = keep;
                done
            };
            for r in done {
                let l = &mut self.levels[li];
                l.seats_in_use -= r.seats;
                if let Some(q) = r.queue {
                    l.queues[q].executing_requests -= 1;
                    l.queues[q].seats_in_use -= r.seats;
                }
                let bounds = self.wait_buckets.clone();
                let st = self.stats(li, r.fs);
                st.executing_requests -= 1;
                st.executing_seats -= r.seats;
                st.execution.observe(&bounds, r.dur_ns as f64 / 1e9);
                self.count_request(r.flow, "200");
                if let Some(outbox) = &mut self.audit {
                    let waited = r.start_ns - r.arrive_ns;
                    outbox.push(AuditRecord {
                        flow: r.flow,
                        code: 200,
                        arrive_ns: r.arrive_ns,
                        end_ns: r.start_ns + r.dur_ns,
                        waited_ns: (r.queue.is_some() && waited > 0).then_some(waited),
                    });
                }
            }
        }
    }

    fn count_request(&mut self, flow: usize, code: &str) {
        let f = &self.flows[flow];
        let key = (f.verb.to_uppercase(), f.resource.clone(), code.to_string());
        if code == "429" {
            *self.terminations_total.entry(key.clone()).or_insert(0) += 1;
            // RecordDroppedRequest counts APF rejections in apiserver_request_total only from 1.24.
            if !self.version.at_least(24) {
                return;
            }
        }
        *self.request_total.entry(key).or_insert(0) += 1;
    }

    fn reject(&mut self, li: usize, r: &Req, reason: &'static str, waited_ns: u64) {
        let (flow, fs) = (r.flow, r.fs);
        let l = &mut self.levels[li];
        *l.rejected_by_reason.entry(reason.to_string()).or_insert(0) += 1;
        if reason == TIME_OUT {
            l.timed_out += 1;
        } else {
            l.rejected += 1;
        }
        let bounds = self.wait_buckets.clone();
        let st = self.stats(li, fs);
        *st.rejected.entry(reason).or_insert(0) += 1;
        // A request that timed out in its queue is still observed with execute="true" (k8s.io/apiserver `pkg/server/filters/priority-and-fairness.go`).
        let h = if reason == TIME_OUT {
            &mut st.wait_executed
        } else {
            &mut st.wait_rejected
        };
        h.observe(&bounds, waited_ns as f64 / 1e9);
        self.count_request(flow, "429");
        if let Some(outbox) = &mut self.audit {
            outbox.push(AuditRecord {
                flow,
                code: 429,
                arrive_ns: r.arrive_ns,
                end_ns: r.arrive_ns + waited_ns,
                // Only a request that queued has a wait (time-out); one refused at arrival has none.
                waited_ns: (reason == TIME_OUT).then_some(waited_ns),
            });
        }
    }

    fn time_out(&mut self, now: u64) {
        for li in 0..self.levels.len() {
            let mut expired = Vec::new();
            {
                let l = &mut self.levels[li];
                for q in l.queues.iter_mut() {
                    while q
                        .waiting
                        .front()
                        .is_some_and(|r| r.arrive_ns + QUEUE_WAIT_LIMIT_NS <= now)
                    {
                        if let Some(r) = q.waiting.pop_front() {
                            expired.push(r);
                        }
                    }
                }
                for r in &expired {
                    l.waiting -= 1;
                    l.waiting_seats -= r.seats;
                }
            }
            for r in expired {
                let st = self.stats(li, r.fs);
                st.inqueue_requests -= 1;
                st.inqueue_seats -= r.seats;
                self.reject(li, &r, TIME_OUT, now - r.arrive_ns);
            }
        }
    }

    fn execute(&mut self, li: usize, mut r: Req, start: u64) {
        r.start_ns = start;
        let fs = r.fs;
        let waited = (start - r.arrive_ns) as f64 / 1e9;
        let bounds = self.wait_buckets.clone();
        let exempt = self.levels[li].def.exempt;
        let st = self.stats(li, fs);
        st.dispatched += 1;
        st.executing_requests += 1;
        st.executing_seats += r.seats;
        if !exempt {
            st.wait_executed.observe(&bounds, waited);
        }
        let l = &mut self.levels[li];
        l.dispatched += 1;
        l.seats_in_use += r.seats;
        if !l.def.exempt && l.seats_in_use > l.current_cl && !l.executing.is_empty() {
            l.admitted_over_limit += 1;
        }
        if let Some(q) = r.queue {
            l.queues[q].executing_requests += 1;
            l.queues[q].seats_in_use += r.seats;
            l.queues[q].next_dispatch_r = l.virtual_r;
        }
        l.executing.push(r);
    }

    fn arrive(&mut self, fi: usize, at: u64) {
        let f = &self.flows[fi];
        let Some(li) = f.level else {
            return;
        };
        let spread = f.rate.duration_spread;
        // Drawn only for flows that ask: every other flow's arrivals stay those of its seed.
        let dur_ns = if spread > 0.0 {
            let factor = 1.0 + spread * (2.0 * self.rng.gen::<f64>() - 1.0);
            ((f.dur_ns as f64 * factor) as u64).max(1)
        } else {
            f.dur_ns
        };
        let f = &self.flows[fi];
        let req = Req {
            flow: fi,
            fs: f.fs,
            seats: f.seats,
            dur_ns,
            arrive_ns: at,
            start_ns: 0,
            queue: None,
        };
        let hand = f.hand.clone();
        let fs = f.fs;
        let seats = f.seats as f64;
        let work_bounds = self.work_buckets.clone();
        self.stats(li, fs).work_seats.observe(&work_bounds, seats);
        let l = &self.levels[li];
        if l.def.exempt {
            return self.execute(li, req, at);
        }
        if !l.has_queues() {
            // Reject-type level (catch-all).
            if l.fits(req.seats) {
                return self.execute(li, req, at);
            }
            return self.reject(li, &req, CONCURRENCY_LIMIT, 0);
        }
        // Shuffle sharding: the queue of the hand with the least waiting work (seats), then fewest in use.
        let q = hand
            .iter()
            .copied()
            .min_by_key(|&q| {
                let queue = &l.queues[q];
                let waiting: u32 = queue.waiting.iter().map(|r| r.seats).sum();
                (waiting, queue.seats_in_use)
            })
            .unwrap_or(0);
        let req = Req {
            queue: Some(q),
            ..req
        };
        // Q enqueues every admitted request, then dispatches as much as possible.
        if l.waiting == 0 && l.fits(req.seats) {
            self.stats(li, fs)
                .queue_length
                .observe(&QUEUE_LENGTH_BUCKETS, 1.0);
            return self.execute(li, req, at);
        }
        if l.queues[q].waiting.len() as u32 >= l.queue_length_limit() {
            return self.reject(li, &req, QUEUE_FULL, 0);
        }
        let len = (l.queues[q].waiting.len() + 1) as f64;
        self.stats(li, fs)
            .queue_length
            .observe(&QUEUE_LENGTH_BUCKETS, len);
        let seats = req.seats;
        let l = &mut self.levels[li];
        l.queues[q].waiting.push_back(req);
        l.waiting += 1;
        l.waiting_seats += seats;
        let st = self.stats(li, fs);
        st.inqueue_requests += 1;
        st.inqueue_seats += seats;
    }

    /// Fair round-robin over the queues: dispatch any head that fits, until none does.
    fn dispatch(&mut self, li: usize, now: u64) {
        loop {
            let l = &mut self.levels[li];
            if l.waiting == 0 {
                return;
            }
            let n = l.queues.len();
            let found = (0..n).map(|k| (l.rr + k) % n).find(|&qi| {
                l.queues[qi]
                    .waiting
                    .front()
                    .is_some_and(|r| l.fits(r.seats))
            });
            let Some(qi) = found else {
                // Q counts the attempt that found no seat for the head of the queue next in turn.
                let head = (0..n)
                    .map(|k| (l.rr + k) % n)
                    .find_map(|qi| l.queues[qi].waiting.front().map(|r| r.fs));
                if let Some(fs) = head {
                    self.stats(li, fs).no_accommodation += 1;
                }
                return;
            };
            let Some(r) = l.queues[qi].waiting.pop_front() else {
                return;
            };
            l.rr = (qi + 1) % n;
            l.waiting -= 1;
            l.waiting_seats -= r.seats;
            let st = self.stats(li, r.fs);
            st.inqueue_requests -= 1;
            st.inqueue_seats -= r.seats;
            self.execute(li, r, now);
        }
    }
}

fn poisson(rng: &mut StdRng, lambda: f64) -> u32 {
    // Also catches NaN from a hand-built scenario; the cap bounds the work of one tick.
    if lambda.is_nan() || lambda <= 0.0 {
        return 0;
    }
    let lambda = lambda.min(500.0);
    // Knuth; lambda per 10 ms tick stays small.
    let l = (-lambda).exp();
    let mut k = 0;
    let mut p = 1.0;
    loop {
        p *= rng.gen::<f64>();
        if p <= l || k > 10_000 {
            return k;
        }
        k += 1;
    }
}
