//! A request's life in the simulated replica, with the counters and histograms `/metrics` serves: its arrival
//! (executed, queued or rejected by its level's queueset), its dispatch, the end of its execution and of its
//! additional latency, or its time-out; a closed-loop thread's next call after each answer.
use std::collections::BTreeMap;

use apf::reason::TIME_OUT;

use crate::audit::AuditRecord;
use rand::Rng;

use super::events::Event;
use super::queueset::{work, Start};
use super::state::{
    FsStats, Histogram, Level, Req, State, QUEUE_LENGTH_BUCKETS, SEAT_UTILIZATION_BUCKETS,
};

/// How long a client-go client waits before it calls again after a 429: kube-apiserver's `Retry-After`, at least 1 s.
const RETRY_AFTER_NS: u64 = 1_000_000_000;

impl Level {
    /// Brings the level to `now` before a change: its time integrals and its virtual clock, each at the state held
    /// since the last change.
    pub(super) fn catch_up(&mut self, now: u64) {
        self.integrate(now);
        self.sync_r(now);
    }

    /// Brings the level's time integrals to `now`: its seat utilization, its seat demand of the adjustment period,
    /// and the run's seats in use and waiting requests, each held since the last change.
    pub(super) fn integrate(&mut self, now: u64) {
        let held = now.saturating_sub(self.integrated_ns);
        if held == 0 {
            return;
        }
        self.integrated_ns = now;
        let utilization = f64::from(self.seats_in_use) / f64::from(self.current_cl.max(1));
        self.seat_utilization
            .hold(&SEAT_UTILIZATION_BUCKETS, utilization, held);
        let demand = f64::from(self.seats_in_use + self.waiting_seats);
        let ns = held as f64;
        self.period_sum += demand * ns;
        self.period_sum_sq += demand * demand * ns;
        self.period_ns += held;
        self.run_seats_ns += f64::from(self.seats_in_use) * ns;
        self.run_waiting_ns += f64::from(self.waiting) * ns;
        self.run_limit_ns += f64::from(self.current_cl) * ns;
    }

    /// The highest seat demand of the period, after a change.
    fn note_demand(&mut self) {
        self.period_hwm = self.period_hwm.max(self.seats_in_use + self.waiting_seats);
    }
}

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

    /// A request of flow `fi` reaches the replica now (from a closed-loop `thread`, or the open loop).
    pub(super) fn arrive(&mut self, fi: usize, thread: Option<u32>) {
        let now = self.now_ns;
        let f = &self.flows[fi];
        let Some(li) = f.level else {
            // No level takes it (a cluster without catch-all): a thread calls again later.
            if let Some(thread) = thread {
                self.call_again(fi, thread, now + RETRY_AFTER_NS);
            }
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
        let work = work(f.seats, f.final_seats, f.additional_latency_ns);
        let req = Req {
            id: self.next_req_id,
            flow: fi,
            fs: f.fs,
            seats: f.seats,
            final_seats: f.final_seats,
            additional_latency_ns: f.additional_latency_ns,
            dur_ns,
            arrive_ns: now,
            start_ns: 0,
            queue: None,
            arrival_r: 0,
            work,
            thread,
        };
        self.next_req_id += 1;
        let hand = std::mem::take(&mut self.flows[fi].hand);
        let (fs, id, seats) = (req.fs, req.id, req.seats);
        let work_bounds = self.work_buckets.clone();
        self.stats(li, fs)
            .work_seats
            .observe(&work_bounds, f64::from(seats));
        let l = &mut self.levels[li];
        l.catch_up(now);
        let started = l.start(req, &hand);
        self.flows[fi].hand = hand;
        match started {
            Start::Executing => self.dispatched(li, id, false),
            Start::Queued(qi) => {
                let l = &self.levels[li];
                let len = l.queues[qi].waiting.len() as f64;
                let (uid, wait_limit) = (l.uid, l.wait_limit_ns);
                let st = self.stats(li, fs);
                st.queue_length.observe(&QUEUE_LENGTH_BUCKETS, len);
                st.inqueue_requests += 1;
                st.inqueue_seats += seats;
                self.events
                    .push(now + wait_limit, Event::TimeOut { level: uid, id });
                self.dispatch(li);
            }
            Start::Rejected(req, reason) => self.reject(li, &req, reason, 0),
        }
        self.levels[li].note_demand();
    }

    /// Dispatches what level `li` can now, as its queueset chooses.
    pub(super) fn dispatch(&mut self, li: usize) {
        let now = self.now_ns;
        let policy = self.dispatch;
        let l = &mut self.levels[li];
        if l.waiting == 0 {
            return;
        }
        l.catch_up(now);
        let (ids, refused) = l.dispatch_as_much(now, policy);
        for id in ids {
            self.dispatched(li, id, true);
        }
        if let Some(fs) = refused {
            self.stats(li, fs).no_accommodation += 1;
        }
    }

    /// Request `id` of level `li` began executing now: its counters, the end of its execution, and its thread's
    /// next call (an answer, then the thread's think time).
    fn dispatched(&mut self, li: usize, id: u64, queued: bool) {
        let now = self.now_ns;
        let Some(r) = self.levels[li].executing.get(&id) else {
            return;
        };
        let (fs, flow, seats, dur, thread, waited) =
            (r.fs, r.flow, r.seats, r.dur_ns, r.thread, now - r.arrive_ns);
        let (uid, exempt) = (self.levels[li].uid, self.levels[li].def.exempt);
        let bounds = self.wait_buckets.clone();
        let st = self.stats(li, fs);
        if queued {
            st.inqueue_requests -= 1;
            st.inqueue_seats -= seats;
        }
        st.dispatched += 1;
        st.executing_requests += 1;
        st.executing_seats += seats;
        if !exempt {
            st.wait_executed.observe(&bounds, waited as f64 / 1e9);
        }
        let keep_waits = self.keep_waits;
        let run = &mut self.flows[flow].run;
        run.dispatched += 1;
        run.wait_sum_ns += waited as f64;
        if keep_waits {
            run.waits.push(waited);
        }
        self.events
            .push(now + dur, Event::Complete { level: uid, id });
        if let Some(thread) = thread {
            let think = self.flows[flow].rate.think;
            let next = (now + dur).saturating_add_signed(think);
            self.call_again(flow, thread, next);
        }
    }

    /// The end of request `id`'s execution.
    pub(super) fn complete(&mut self, uid: u64, id: u64) {
        let now = self.now_ns;
        let Some(li) = self.caught_up_level(uid) else {
            return;
        };
        let Some(r) = self.levels[li].finish(now, id) else {
            return;
        };
        if r.additional_latency_ns > 0 {
            self.events.push(
                now + r.additional_latency_ns,
                Event::Release { level: uid, id },
            );
        }
        let bounds = self.wait_buckets.clone();
        let st = self.stats(li, r.fs);
        st.executing_requests -= 1;
        st.executing_seats -= r.seats;
        st.execution.observe(&bounds, r.dur_ns as f64 / 1e9);
        self.flows[r.flow].run.executed_seat_ns += f64::from(r.seats) * r.dur_ns as f64;
        self.count_request(r.flow, "200");
        if let Some(outbox) = &mut self.audit {
            let waited = r.start_ns - r.arrive_ns;
            outbox.push(AuditRecord {
                flow: r.flow,
                code: 200,
                arrive_ns: r.arrive_ns,
                end_ns: now,
                waited_ns: (r.queue.is_some() && waited > 0).then_some(waited),
            });
        }
        self.after_seats_freed(li);
    }

    /// The end of request `id`'s additional latency.
    pub(super) fn release(&mut self, uid: u64, id: u64) {
        let Some(li) = self.caught_up_level(uid) else {
            return;
        };
        if self.levels[li].release(id).is_some() {
            self.after_seats_freed(li);
        }
    }

    /// Request `id` reached its wait limit: if it still waits, it is rejected `time-out`.
    pub(super) fn time_out(&mut self, uid: u64, id: u64) {
        let now = self.now_ns;
        let Some(li) = self.caught_up_level(uid) else {
            return;
        };
        let Some(r) = self.levels[li].time_out(id) else {
            return;
        };
        let st = self.stats(li, r.fs);
        st.inqueue_requests -= 1;
        st.inqueue_seats -= r.seats;
        self.reject(li, &r, TIME_OUT, now - r.arrive_ns);
        self.drop_if_retired_and_idle(li);
    }

    /// The level of `uid`, brought to now: `None` once it has gone.
    fn caught_up_level(&mut self, uid: u64) -> Option<usize> {
        let li = self.level_index(uid)?;
        let now = self.now_ns;
        self.levels[li].catch_up(now);
        Some(li)
    }

    /// Seats came free on level `li`: what waits is dispatched, the demand noted, and a retired level that is now
    /// idle goes.
    fn after_seats_freed(&mut self, li: usize) {
        self.dispatch(li);
        self.levels[li].note_demand();
        self.drop_if_retired_and_idle(li);
    }

    /// A level whose object is gone leaves once idle; retired levels come last, so no flow's level moves.
    fn drop_if_retired_and_idle(&mut self, li: usize) {
        if self.levels[li].retired && self.levels[li].is_idle() {
            self.levels.remove(li);
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

    pub(super) fn reject(&mut self, li: usize, r: &Req, reason: &'static str, waited_ns: u64) {
        let (flow, fs, thread) = (r.flow, r.fs, r.thread);
        let l = &mut self.levels[li];
        *l.rejected_by_reason.entry(reason.to_string()).or_insert(0) += 1;
        if reason == TIME_OUT {
            l.timed_out += 1;
        } else {
            l.rejected += 1;
        }
        let keep_waits = self.keep_waits;
        let run = &mut self.flows[flow].run;
        *run.rejected.entry(reason).or_insert(0) += 1;
        if reason == TIME_OUT {
            run.timed_out_wait_sum_ns += waited_ns as f64;
            if keep_waits {
                run.timed_out_waits.push(waited_ns);
            }
        }
        // The client sees a 429: client-go calls again after its Retry-After.
        if let Some(thread) = thread {
            self.call_again(flow, thread, self.now_ns + RETRY_AFTER_NS);
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
}

impl State {
    /// What each flow and level got from the start to now (`simulate --run`).
    /// The names of the priority level and flow schema `f`'s requests go to now (empty while none takes them).
    pub(super) fn placement(&self, f: &super::state::Flow) -> (String, String) {
        match f.level {
            Some(li) => (
                self.levels[li].def.name.clone(),
                self.fs_names.get(f.fs).cloned().unwrap_or_default(),
            ),
            None => Default::default(),
        }
    }

    pub(super) fn run_report(&self) -> crate::run::RunReport {
        let now = self.now_ns;
        let span = now.max(1) as f64;
        let flows = self
            .flows
            .iter()
            .enumerate()
            .map(|(fi, f)| {
                // Requests still executing count up to now.
                let running: f64 = self
                    .levels
                    .iter()
                    .flat_map(|l| l.executing.values())
                    .filter(|r| r.flow == fi)
                    .map(|r| f64::from(r.seats) * now.saturating_sub(r.start_ns) as f64)
                    .sum();
                let (priority_level, flow_schema) = self.placement(f);
                let dispatched = f.run.dispatched;
                crate::run::FlowRun {
                    name: f.name.clone(),
                    priority_level,
                    flow_schema,
                    dispatched,
                    rejected: f.run.rejected_by_reason(),
                    mean_executing_seats: (f.run.executed_seat_ns + running) / span,
                    mean_wait_seconds: if dispatched == 0 {
                        0.0
                    } else {
                        f.run.wait_sum_ns / dispatched as f64 / 1e9
                    },
                    p99_wait_seconds: super::state::p99_seconds(&mut f.run.waits.clone()),
                }
            })
            .collect();
        let levels = self
            .levels
            .iter()
            .map(|l| crate::run::LevelRun {
                name: l.def.name.clone(),
                concurrency_limit: l.current_cl,
                dispatched: l.dispatched,
                rejected: l.rejected_by_reason.clone(),
                mean_seats_in_use: l.run_seats_ns / span,
                mean_waiting_requests: l.run_waiting_ns / span,
            })
            .collect();
        crate::run::RunReport {
            duration_seconds: now as f64 / 1e9,
            seed: self.seed,
            kubernetes_version: self.version.to_string(),
            flows,
            levels,
        }
    }
}
