//! The three debug dumps (`/debug/api_priority_and_fairness/dump_priority_levels`, `dump_queues`,
//! `dump_requests`) in the columns and order of the simulated version (k8s.io/apiserver
//! `pkg/util/flowcontrol/apf_controller_debug.go`), tab-aligned as Go's tabwriter does.
use std::time::Duration;

use super::go::{go_duration, rfc3339_nano, seat_seconds};
use crate::scenario::api_group;
use crate::simulator::{Level, Req, State};
use crate::tabwriter::{row, tabwrite};

impl State {
    /// Levels in the order the version prints them: sorted from 1.27, map order (here: definition order) before.
    fn dump_order(&self) -> Vec<&Level> {
        let mut v: Vec<&Level> = self.levels.iter().collect();
        if self.version.at_least(27) {
            v.sort_by(|a, b| a.def.name.cmp(&b.def.name));
        }
        v
    }

    pub(super) fn render_dump_priority_levels(&self) -> String {
        let wide = self.version.at_least(27);
        let mut header = vec![
            "PriorityLevelName",
            "ActiveQueues",
            "IsIdle",
            "IsQuiescing",
            "WaitingRequests",
            "ExecutingRequests",
        ];
        if wide {
            header.extend([
                "DispatchedRequests",
                "RejectedRequests",
                "TimedoutRequests",
                "CancelledRequests",
            ]);
        }
        let mut text = row(&header.iter().map(|s| s.to_string()).collect::<Vec<_>>()) + "\n";
        for l in self.dump_order() {
            let mut cells = vec![l.def.name.to_string()];
            if l.def.exempt && !self.version.at_least(28) {
                cells.extend(std::iter::repeat_n("<none>".to_string(), header.len() - 1));
            } else {
                let active = l.queues.iter().filter(|q| !q.waiting.is_empty()).count();
                let idle = l.waiting == 0 && l.executing.is_empty();
                cells.extend([
                    active.to_string(),
                    idle.to_string(),
                    l.retired.to_string(),
                    l.waiting.to_string(),
                    l.executing.len().to_string(),
                ]);
                if wide {
                    // From 1.29 a time-out is a cancelled wait, counted among the rejected too (queueset.go,
                    // `wait`).
                    let (rejected, timedout, cancelled) =
                        if self.version.timeouts_count_as_cancelled() {
                            (l.rejected + l.timed_out, 0, l.timed_out)
                        } else {
                            (l.rejected, l.timed_out, 0)
                        };
                    cells.extend([
                        l.dispatched.to_string(),
                        rejected.to_string(),
                        timedout.to_string(),
                        cancelled.to_string(),
                    ]);
                }
            }
            text += &row(&cells);
            text.push('\n');
        }
        tabwrite(&text)
    }

    pub(super) fn render_dump_queues(&self) -> String {
        let v = self.version;
        let header: Vec<&str> = if v.at_least(23) {
            vec![
                "PriorityLevelName",
                "Index",
                "PendingRequests",
                "ExecutingRequests",
                "SeatsInUse",
                "NextDispatchR",
                "InitialSeatsSum",
                "MaxSeatsSum",
                "TotalWorkSum",
            ]
        } else {
            vec![
                "PriorityLevelName",
                "Index",
                "PendingRequests",
                "ExecutingRequests",
                "VirtualStart",
            ]
        };
        let mut text = row(&header.iter().map(|s| s.to_string()).collect::<Vec<_>>()) + "\n";
        for l in self.dump_order() {
            if l.def.exempt {
                if !v.at_least(28) {
                    let mut cells = vec![l.def.name.to_string()];
                    cells.extend(std::iter::repeat_n("<none>".to_string(), header.len() - 1));
                    text += &row(&cells);
                    text.push('\n');
                }
                continue;
            }
            for (i, q) in l.queues.iter().enumerate() {
                let mut cells = vec![
                    l.def.name.to_string(),
                    i.to_string(),
                    q.waiting.len().to_string(),
                    q.executing_requests.to_string(),
                ];
                if v.at_least(23) {
                    let seats: u32 = q.waiting.iter().map(|r| r.seats).sum();
                    let max_seats: u32 = q.waiting_max_seats;
                    let work = q.waiting_work_seat_seconds();
                    cells.extend([
                        q.seats_in_use.to_string(),
                        seat_seconds(q.next_dispatch_seat_seconds()),
                        seats.to_string(),
                        max_seats.to_string(),
                        seat_seconds(work),
                    ]);
                } else {
                    cells.push(format!("{:.4}", q.next_dispatch_seat_seconds()));
                }
                text += &row(&cells);
                text.push('\n');
            }
        }
        tabwrite(&text)
    }

    pub(super) fn render_dump_requests(&self, details: bool) -> String {
        let v = self.version;
        let mut header = vec![
            "PriorityLevelName",
            "FlowSchemaName",
            "QueueIndex",
            "RequestIndexInQueue",
            "FlowDistingsher",
            "ArriveTime",
        ];
        if v.at_least(23) {
            header.extend(["InitialSeats", "FinalSeats", "AdditionalLatency"]);
        }
        if v.at_least(28) {
            header.push("StartTime");
        }
        if details {
            header.extend([
                "UserName",
                "Verb",
                "APIPath",
                "Namespace",
                "Name",
                "APIVersion",
                "Resource",
                "SubResource",
            ]);
        }
        let mut text = row(&header.iter().map(|s| s.to_string()).collect::<Vec<_>>()) + "\n";
        let at = |ns: u64| rfc3339_nano(self.wall_start + Duration::from_nanos(ns));
        let mut line = |l: &Level, r: &Req, queue: i64, index: i64, executing: bool| {
            let f = &self.flows[r.flow];
            let mut cells = vec![
                l.def.name.to_string(),
                self.fs_names[r.fs].clone(),
                queue.to_string(),
                index.to_string(),
                if l.queues.len() > 1 {
                    f.distinguisher.clone()
                } else {
                    String::new()
                },
                at(r.arrive_ns),
            ];
            if v.at_least(23) {
                cells.extend([
                    r.seats.to_string(),
                    r.final_seats.to_string(),
                    go_duration(r.additional_latency_ns),
                ]);
            }
            if v.at_least(28) {
                cells.push(if executing {
                    at(r.start_ns)
                } else {
                    "0001-01-01T00:00:00Z".into()
                });
            }
            if details {
                let group = api_group(&f.resource);
                let (prefix, api_version) = if group.is_empty() {
                    ("/api/v1".to_string(), "v1".to_string())
                } else {
                    (format!("/apis/{group}/v1"), format!("{group}/v1"))
                };
                let path = if f.namespace.is_empty() {
                    format!("{prefix}/{}", f.resource)
                } else {
                    format!("{prefix}/namespaces/{}/{}", f.namespace, f.resource)
                };
                cells.extend([
                    f.user.clone(),
                    f.verb.clone(),
                    path,
                    f.namespace.clone(),
                    String::new(),
                    api_version,
                    f.resource.clone(),
                    String::new(),
                ]);
            }
            text += &row(&cells);
            text.push('\n');
        };
        for l in self.dump_order() {
            if l.queues.is_empty() {
                // Exempt (no queueSet before 1.28) and Reject-type levels: only executing requests, from 1.28.
                if v.at_least(28) {
                    for r in l.executing.values() {
                        line(l, r, -1, -1, true);
                    }
                }
                continue;
            }
            for (qi, q) in l.queues.iter().enumerate() {
                for (ri, r) in q.waiting.iter().enumerate() {
                    line(l, r, qi as i64, ri as i64, false);
                }
                if v.at_least(28) {
                    for r in l.executing.values().filter(|r| r.queue == Some(qi)) {
                        line(l, r, qi as i64, -1, true);
                    }
                }
            }
        }
        tabwrite(&text)
    }
}
