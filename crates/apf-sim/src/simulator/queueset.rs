//! One priority level's queues as kube-apiserver's queueset serves them (k8s.io/apiserver
//! `pkg/util/flowcontrol/fairqueuing/queueset/queueset.go`), written from its behaviour, function by function:
//!
//! - the virtual clock R (in 1e-8 seat-seconds, kube-apiserver's unit) advances, before every decision, by the time since the last one x
//!   min(seats requested, limit) / active queues (`syncTimeLocked`);
//! - an arrival joins the queue of its flow's hand with the least waiting work, the hand visited from
//!   `enqueues % handSize` (`shuffleShardLocked`); it is rejected `queue-full` only when every seat is in use and that
//!   queue is at its length limit (`rejectOrEnqueueToBoundLocked`);
//! - dispatch takes the queue whose head has the smallest virtual finish, scanning from the round-robin index, and
//!   only when that head's seats fit: no narrower head jumps it (`findDispatchQueueToBoundLocked`);
//! - a queue's next dispatch R grows by each request's work at dispatch and is corrected by what its execution
//!   really took at its end (`finishRequestLocked`), never below its head's arrival R (`boundNextDispatchLocked`).
//!
//! R is kept in 128 bits: it cannot overflow in any run, so kube-apiserver's winding back (`advanceEpoch`) is not
//! needed.
use apf::reason::{CONCURRENCY_LIMIT, QUEUE_FULL};

use super::state::{Level, Req};
use crate::scenario::Dispatch;

/// G: the service time a request is assumed to take when dispatched (`estimatedServiceDuration`, 3 ms).
const ESTIMATED_SERVICE_NS: u64 = 3_000_000;

/// Work and virtual time count in kube-apiserver's unit, 1e-8 seat-seconds (`fcrequest.SeatSeconds`): 10
/// seat-nanoseconds. Kept to the unit, ties between queues fall as they fall there.
pub(super) const SEAT_SECONDS: i128 = 100_000_000;

/// `seats` held for `ns` nanoseconds, in that unit, rounded (`SeatsTimesDuration`).
pub(super) fn seats_times_duration(seats: f64, ns: i128) -> i128 {
    (seats * ns as f64 / 10.0).round() as i128
}

/// A request's work (`completeWorkEstimate`): its initial seats for G, plus its final seats for its additional
/// latency.
pub(super) fn work(initial_seats: u32, final_seats: u32, additional_latency_ns: u64) -> i128 {
    seats_times_duration(f64::from(initial_seats), i128::from(ESTIMATED_SERVICE_NS))
        + seats_times_duration(f64::from(final_seats), i128::from(additional_latency_ns))
}

/// What became of an arrival.
#[derive(Debug)]
pub(super) enum Start {
    /// Executing at once, without a queue (exempt, or a level without queues with a seat for it).
    Executing,
    /// Waiting in this queue (and perhaps dispatched at once by the dispatch that follows).
    Queued(usize),
    Rejected(Req, &'static str),
}

impl Level {
    /// Brings the virtual clock to `now` at the rate the level's state has had since the last decision.
    pub(super) fn sync_r(&mut self, now: u64) {
        let elapsed = now.saturating_sub(self.r_synced_ns);
        self.r_synced_ns = now;
        if elapsed == 0 {
            return;
        }
        let (mut active, mut requested) = (0u64, 0u64);
        for q in &self.queues {
            requested += u64::from(q.seats_in_use) + u64::from(q.waiting_max_seats);
            if !q.is_idle() {
                active += 1;
            }
        }
        if active == 0 {
            return;
        }
        let ratio = (requested as f64).min(f64::from(self.current_cl)) / active as f64;
        self.current_r += seats_times_duration(ratio, i128::from(elapsed));
    }

    /// A request of `seats` may start now (`canAccommodateSeatsLocked`): exempt always; one wider than the whole
    /// limit only while no request executes; else when the seats in use leave room for it.
    pub(super) fn can_accommodate(&self, seats: u32) -> bool {
        if self.def.exempt {
            return true;
        }
        if seats > self.current_cl {
            return self.executing.is_empty();
        }
        self.seats_in_use + seats <= self.current_cl
    }

    /// An arrival (`StartRequest`). The caller then dispatches as much as possible.
    pub(super) fn start(&mut self, mut req: Req, hand: &[usize]) -> Start {
        req.arrival_r = self.current_r;
        if self.def.exempt || self.desired_queues() == 0 {
            if !self.can_accommodate(req.max_seats()) {
                return Start::Rejected(req, CONCURRENCY_LIMIT);
            }
            let start = req.arrive_ns;
            self.take_seats(req, None, start);
            return Start::Executing;
        }
        let Some(qi) = self.shuffle_shard(hand) else {
            // A flow dealt no queue (a level without a hand size): refused as a full queue would refuse it.
            return Start::Rejected(req, QUEUE_FULL);
        };
        let q = &self.queues[qi];
        if self.seats_in_use >= self.current_cl
            && q.waiting.len() as u32 >= self.queue_length_limit()
        {
            return Start::Rejected(req, QUEUE_FULL);
        }
        let q = &mut self.queues[qi];
        if q.is_idle() {
            q.next_dispatch_r = self.current_r;
        }
        req.queue = Some(qi);
        q.waiting_work += req.work;
        q.waiting_max_seats += req.max_seats();
        self.waiting += 1;
        self.waiting_seats += req.max_seats();
        q.waiting.push_back(req);
        self.bound_next_dispatch(qi);
        Start::Queued(qi)
    }

    /// The queue of the hand with the least waiting work, the hand visited from `enqueues % handSize`, the first
    /// visited winning ties.
    fn shuffle_shard(&mut self, hand: &[usize]) -> Option<usize> {
        let hand: Vec<usize> = hand
            .iter()
            .copied()
            .filter(|&q| q < self.queues.len())
            .collect();
        if hand.is_empty() {
            return None;
        }
        let offset = (self.enqueues % hand.len() as u64) as usize;
        self.enqueues += 1;
        let mut best: Option<(usize, i128)> = None;
        for i in 0..hand.len() {
            let qi = hand[(offset + i) % hand.len()];
            let work = self.queues[qi].waiting_work;
            if best.is_none_or(|(_, least)| work < least) {
                best = Some((qi, work));
            }
        }
        best.map(|(qi, _)| qi)
    }

    /// Dispatches while requests wait and seats remain (`dispatchAsMuchAsPossibleLocked`); returns the requests
    /// dispatched (now executing), and the flow schema of a head that found no room, if one was refused.
    pub(super) fn dispatch_as_much(
        &mut self,
        now: u64,
        policy: Dispatch,
    ) -> (Vec<u64>, Option<usize>) {
        let mut dispatched = Vec::new();
        while self.waiting > 0 && self.seats_in_use < self.current_cl {
            let found = match policy {
                Dispatch::FairQueuing => self.min_virtual_finish(),
                Dispatch::RoundRobin => self.next_head_that_fits(),
            };
            let Some(qi) = found else {
                return (dispatched, None);
            };
            let Some(head) = self.queues[qi].waiting.front() else {
                return (dispatched, None);
            };
            if !self.can_accommodate(head.max_seats()) {
                // No other head jumps this one (`request_dispatch_no_accommodation_total`).
                return (dispatched, Some(head.fs));
            }
            let Some(mut req) = self.queues[qi].waiting.pop_front() else {
                return (dispatched, None);
            };
            let q = &mut self.queues[qi];
            q.waiting_work -= req.work;
            q.waiting_max_seats -= req.max_seats();
            self.waiting -= 1;
            self.waiting_seats -= req.max_seats();
            // Final seats above the limit are cut to it, the additional latency lengthened to keep their work.
            if req.final_seats > self.current_cl && self.current_cl > 0 {
                let final_work =
                    u128::from(req.final_seats) * u128::from(req.additional_latency_ns);
                req.additional_latency_ns = (final_work / u128::from(self.current_cl)) as u64;
                req.final_seats = self.current_cl;
            }
            self.robin_index = qi as isize;
            self.queues[qi].next_dispatch_r += req.work;
            dispatched.push(req.id);
            self.take_seats(req, Some(qi), now);
            self.bound_next_dispatch(qi);
        }
        (dispatched, None)
    }

    /// The queue whose head finishes first in virtual time, scanning from the one after the round-robin index;
    /// the first seen wins ties.
    fn min_virtual_finish(&mut self) -> Option<usize> {
        let n = self.queues.len() as isize;
        let mut best: Option<(usize, i128)> = None;
        for _ in 0..n {
            self.robin_index = (self.robin_index + 1).rem_euclid(n);
            let qi = self.robin_index as usize;
            let q = &self.queues[qi];
            if let Some(head) = q.waiting.front() {
                let finish = q.next_dispatch_r + head.work;
                if best.is_none_or(|(_, least)| finish < least) {
                    best = Some((qi, finish));
                }
            }
        }
        best.map(|(qi, _)| qi)
    }

    /// The simulator before issue 51: the queues in turn from the round-robin index, the first head that fits
    /// (a narrow head may jump a wide one); else the next head in turn, which then does not fit.
    fn next_head_that_fits(&mut self) -> Option<usize> {
        let n = self.queues.len() as isize;
        let order: Vec<usize> = (1..=n)
            .map(|k| (self.robin_index + k).rem_euclid(n) as usize)
            .collect();
        order
            .iter()
            .copied()
            .find(|&qi| {
                self.queues[qi]
                    .waiting
                    .front()
                    .is_some_and(|r| self.can_accommodate(r.max_seats()))
            })
            .or_else(|| {
                order
                    .into_iter()
                    .find(|&qi| !self.queues[qi].waiting.is_empty())
            })
    }

    fn take_seats(&mut self, mut req: Req, queue: Option<usize>, now: u64) {
        req.start_ns = now;
        req.queue = queue;
        let seats = req.max_seats();
        if !self.def.exempt
            && !self.executing.is_empty()
            && self.seats_in_use + seats > self.current_cl
        {
            self.admitted_over_limit += 1;
        }
        self.seats_in_use += seats;
        self.dispatched += 1;
        if let Some(qi) = queue {
            let q = &mut self.queues[qi];
            q.executing_requests += 1;
            q.seats_in_use += seats;
        }
        self.executing.insert(req.id, req);
    }

    /// The end of a request's execution (`finishRequestLocked`): its queue's next dispatch R corrected by what it
    /// really took against the 3 ms assumed. Returns the request; its seats stay held while it has additional
    /// latency (then [`Level::release`] frees them).
    pub(super) fn finish(&mut self, now: u64, id: u64) -> Option<Req> {
        let req = self.executing.remove(&id)?;
        if let Some(qi) = req.queue {
            let took = i128::from(now.saturating_sub(req.start_ns));
            let q = &mut self.queues[qi];
            q.executing_requests -= 1;
            q.next_dispatch_r -= seats_times_duration(
                f64::from(req.seats),
                i128::from(ESTIMATED_SERVICE_NS) - took,
            );
            self.bound_next_dispatch(qi);
        }
        if req.additional_latency_ns == 0 {
            self.free_seats(&req);
        } else {
            self.finishing.insert(id, req.clone());
        }
        Some(req)
    }

    /// The end of a request's additional latency: its final seats are freed.
    pub(super) fn release(&mut self, id: u64) -> Option<Req> {
        let req = self.finishing.remove(&id)?;
        self.free_seats(&req);
        Some(req)
    }

    fn free_seats(&mut self, req: &Req) {
        let seats = req.max_seats();
        self.seats_in_use -= seats;
        if let Some(qi) = req.queue {
            self.queues[qi].seats_in_use -= seats;
            self.remove_queue_if_surplus(qi);
        }
    }

    /// A waiting request past its wait limit leaves its queue (rejected `time-out` by the caller).
    pub(super) fn time_out(&mut self, id: u64) -> Option<Req> {
        // Waits are as long for every request of a level, so the one to go is the oldest of its queue: a head.
        let qi = self
            .queues
            .iter()
            .position(|q| q.waiting.front().is_some_and(|r| r.id == id))
            .or_else(|| {
                self.queues
                    .iter()
                    .position(|q| q.waiting.iter().any(|r| r.id == id))
            })?;
        let q = &mut self.queues[qi];
        let at = q.waiting.iter().position(|r| r.id == id)?;
        let req = q.waiting.remove(at)?;
        q.waiting_work -= req.work;
        q.waiting_max_seats -= req.max_seats();
        self.waiting -= 1;
        self.waiting_seats -= req.max_seats();
        self.bound_next_dispatch(qi);
        Some(req)
    }

    /// Anti-windup: a queue's next dispatch R is never below its head's arrival R.
    fn bound_next_dispatch(&mut self, qi: usize) {
        let q = &mut self.queues[qi];
        if let Some(head) = q.waiting.front() {
            q.next_dispatch_r = q.next_dispatch_r.max(head.arrival_r);
        }
    }

    /// A queue beyond the configured number goes once it holds nothing (`removeQueueIfEmptyLocked`); the queues
    /// after it move down one, and the requests that name them with them.
    pub(super) fn remove_queue_if_surplus(&mut self, qi: usize) {
        let q = &self.queues[qi];
        if self.queues.len() <= self.desired_queues() || !q.is_idle() || q.seats_in_use > 0 {
            return;
        }
        self.queues.remove(qi);
        for r in self
            .executing
            .values_mut()
            .chain(self.finishing.values_mut())
        {
            if let Some(q) = r.queue.as_mut().filter(|q| **q > qi) {
                *q -= 1;
            }
        }
        for q in &mut self.queues[qi..] {
            for r in q.waiting.iter_mut() {
                if let Some(q) = r.queue.as_mut() {
                    *q -= 1;
                }
            }
        }
        if self.robin_index >= qi as isize {
            self.robin_index -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::LevelSpec;
    use std::time::Duration;

    fn level(limit: u32, queues: u32, hand: u32, queue_length_limit: u32) -> Level {
        Level::from_spec(
            1,
            &LevelSpec {
                name: "test".into(),
                concurrency_limit: limit,
                queues,
                hand_size: hand,
                queue_length_limit,
                request_wait_limit: Duration::from_secs(15),
                exempt: false,
            },
        )
    }

    fn req(id: u64, seats: u32) -> Req {
        Req {
            id,
            flow: 0,
            fs: 0,
            seats,
            final_seats: 0,
            additional_latency_ns: 0,
            dur_ns: 1_000_000_000,
            arrive_ns: 0,
            start_ns: 0,
            queue: None,
            arrival_r: 0,
            work: work(seats, 0, 0),
            thread: None,
        }
    }

    /// Puts a request at the back of queue `qi` as `start` would.
    fn wait_in(l: &mut Level, qi: usize, r: Req) {
        let q = &mut l.queues[qi];
        q.waiting_work += r.work;
        q.waiting_max_seats += r.max_seats();
        l.waiting += 1;
        l.waiting_seats += r.max_seats();
        q.waiting.push_back(Req {
            queue: Some(qi),
            ..r
        });
    }

    const SECOND: i128 = SEAT_SECONDS;

    /// kube-apiserver's TestFindDispatchQueueLocked, case by case: which queue is picked and where the round-robin
    /// index ends.
    #[test]
    fn the_head_with_the_least_virtual_finish_is_dispatched_only_when_it_fits() {
        // (limit, seats in use, [(next dispatch R in seat-seconds, head's seats)], attempts: (queue, robin index))
        type Case = (
            u32,
            u32,
            [(i128, u32); 2],
            &'static [(Option<usize>, isize)],
        );
        let cases: [Case; 4] = [
            // Seats are free: the queue with the smaller virtual start wins.
            (1, 0, [(200, 1), (100, 1)], &[(Some(1), 1)]),
            // The least finish needs 25 of the 25 free: picked.
            (50, 25, [(200, 50), (100, 25)], &[(Some(1), 1)]),
            // The least finish needs 25 of 24 free: nothing, though the other head (10) would fit.
            (
                50,
                26,
                [(200, 10), (100, 25)],
                &[(None, 1), (None, 1), (None, 1)],
            ),
            // Every seat in use: nothing, and no scan either (the round-robin index stays before queue 0).
            (1, 1, [(200, 1), (200, 1)], &[(None, -1)]),
        ];
        for (limit, in_use, queues, attempts) in cases {
            let mut l = level(limit, 2, 1, 10);
            // The Go test starts the scan at queue 0.
            l.robin_index = -1;
            l.seats_in_use = in_use;
            for (qi, (r, seats)) in queues.into_iter().enumerate() {
                l.queues[qi].next_dispatch_r = r * SECOND;
                wait_in(&mut l, qi, req(qi as u64, seats));
            }
            for &(queue, robin) in attempts {
                let (dispatched, _) = l.dispatch_as_much(0, Dispatch::FairQueuing);
                let got = dispatched.first().map(|id| *id as usize);
                assert_eq!(got, queue, "{limit} {in_use} {queues:?}");
                assert_eq!(l.robin_index, robin, "{limit} {in_use} {queues:?}");
            }
        }
        // The same as seats come free before the third attempt: picked then.
        let mut l = level(50, 2, 1, 10);
        l.robin_index = -1;
        l.seats_in_use = 26;
        l.queues[0].next_dispatch_r = 200 * SECOND;
        l.queues[1].next_dispatch_r = 100 * SECOND;
        wait_in(&mut l, 0, req(0, 10));
        wait_in(&mut l, 1, req(1, 25));
        assert!(l.dispatch_as_much(0, Dispatch::FairQueuing).0.is_empty());
        assert!(l.dispatch_as_much(0, Dispatch::FairQueuing).0.is_empty());
        l.seats_in_use = 25;
        assert_eq!(l.dispatch_as_much(0, Dispatch::FairQueuing).0, vec![1]);
        // The round-robin dispatch of the simulator before lets the narrow head jump the wide one.
        let mut l = level(50, 2, 1, 10);
        l.seats_in_use = 26;
        wait_in(&mut l, 0, req(0, 10));
        wait_in(&mut l, 1, req(1, 25));
        assert_eq!(l.dispatch_as_much(0, Dispatch::RoundRobin).0, vec![0]);
    }

    /// kube-apiserver's TestFinishRequestLocked: the end of a request frees its widest seats, at once or after its
    /// additional latency.
    #[test]
    fn the_end_frees_the_widest_seats_at_once_or_after_the_additional_latency() {
        for (initial, final_seats, latency) in [(1, 10, 60_000_000_000u64), (10, 0, 0)] {
            let mut l = level(300, 1, 1, 10);
            let r = Req {
                final_seats,
                additional_latency_ns: latency,
                work: work(initial, final_seats, latency),
                ..req(7, initial)
            };
            l.take_seats(r.clone(), Some(0), 0);
            assert_eq!((l.seats_in_use, l.queues[0].seats_in_use), (10, 10));
            let done = l.finish(1_000_000_000, 7).unwrap();
            assert_eq!(l.queues[0].executing_requests, 0);
            if latency > 0 {
                assert_eq!(l.seats_in_use, 10, "final seats held");
                assert_eq!(done.additional_latency_ns, latency);
                l.release(7).unwrap();
            }
            assert_eq!((l.seats_in_use, l.queues[0].seats_in_use), (0, 0));
        }
    }

    #[test]
    fn a_queue_is_full_only_when_every_seat_is_in_use() {
        let mut l = level(10, 1, 1, 2);
        // 9 of 10 seats in use and a 10-seat head that does not fit: the queue grows past its limit.
        l.seats_in_use = 9;
        l.executing.insert(100, req(100, 9));
        for id in 0..5 {
            assert!(matches!(l.start(req(id, 10), &[0]), Start::Queued(0)));
        }
        assert_eq!(l.queues[0].waiting.len(), 5);
        // Every seat in use: the full queue turns the next away.
        l.seats_in_use = 10;
        assert!(matches!(
            l.start(req(9, 1), &[0]),
            Start::Rejected(_, QUEUE_FULL)
        ));
        // A level without queues rejects what does not fit; one wider than the limit runs alone.
        let mut l = level(10, 0, 1, 1);
        assert!(matches!(l.start(req(1, 11), &[]), Start::Executing));
        assert!(matches!(
            l.start(req(2, 1), &[]),
            Start::Rejected(_, CONCURRENCY_LIMIT)
        ));
    }

    #[test]
    fn an_arrival_joins_the_queue_of_its_hand_with_the_least_waiting_work() {
        let mut l = level(1, 4, 3, 50);
        l.seats_in_use = 1;
        l.executing.insert(100, req(100, 1));
        // Queues 2, 0 and 3 are the hand, 2 already holding work. The visit starts at enqueues % 3 and the first
        // visited of the least loaded wins: 0 (from 2), 3 (from 0: 0 now holds one), 3 (from 3: tied with 0),
        // 0 (from 2: 3 holds two).
        wait_in(&mut l, 2, req(50, 4));
        let mut chosen = Vec::new();
        for id in 0..4 {
            if let Start::Queued(qi) = l.start(req(id, 1), &[2, 0, 3]) {
                chosen.push(qi);
            }
        }
        assert_eq!(chosen, vec![0, 3, 3, 0]);
        // An idle queue starts at the level's virtual time.
        let mut l = level(1, 2, 1, 50);
        l.current_r = 77;
        l.seats_in_use = 1;
        l.executing.insert(100, req(100, 1));
        l.start(req(1, 1), &[1]);
        assert_eq!(l.queues[1].next_dispatch_r, 77);
    }

    #[test]
    fn the_virtual_clock_runs_at_the_seats_each_active_queue_gets() {
        let mut l = level(10, 4, 1, 50);
        // Idle: R stands.
        l.sync_r(1_000_000_000);
        assert_eq!(l.current_r, 0);
        // Two active queues asking 6 and 20 seats of 10: R runs at min(26, 10) / 2 = 5 seat-seconds a second.
        l.queues[0].seats_in_use = 6;
        l.queues[0].executing_requests = 1;
        wait_in(&mut l, 1, req(1, 20));
        l.sync_r(3_000_000_000);
        assert_eq!(l.current_r, 10 * SECOND);
    }

    #[test]
    fn a_request_finishing_later_than_assumed_pushes_its_queue_back() {
        // Dispatch adds 3 ms x seats to the queue's R; the end adds what the execution took beyond it.
        let mut l = level(10, 1, 1, 50);
        wait_in(&mut l, 0, req(1, 2));
        assert_eq!(l.dispatch_as_much(0, Dispatch::FairQueuing).0, vec![1]);
        assert_eq!(l.queues[0].next_dispatch_r, 2 * 3 * SECOND / 1000);
        l.finish(500_000_000, 1);
        assert_eq!(l.queues[0].next_dispatch_r, SECOND);
    }
}
