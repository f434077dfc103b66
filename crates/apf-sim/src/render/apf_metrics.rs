//! The APF families of `/metrics` (`apiserver_flowcontrol_*`), with the names, labels, buckets and stability of
//! the simulated version (k8s.io/apiserver `pkg/util/flowcontrol/metrics/metrics.go`, release by release).
use super::exposition::{fs_labels, Metrics};
use crate::simulator::{FsStats, Level, State, QUEUE_LENGTH_BUCKETS, SEAT_UTILIZATION_BUCKETS};

impl State {
    fn has_queueset_metrics(&self, l: &Level) -> bool {
        // Before 1.28 exempt had no queueSet, so no per-level gauges.
        !l.def.exempt || self.version.at_least(28)
    }

    pub(super) fn render_metrics(&self) -> String {
        let m = self.version.minor;
        let sys = if m >= 24 { "subsystem" } else { "system" };
        let mut out = Metrics {
            minor: m,
            families: Vec::new(),
        };
        let queued_level = |pl: &str| {
            self.levels
                .iter()
                .any(|l| l.def.name == pl && !l.queues.is_empty())
        };
        // Series are written sorted by label values in label-name order: flow_schema before priority_level.
        let mut stats: Vec<(&(String, String), &FsStats)> = self.fs_stats.iter().collect();
        stats.sort_by(|a, b| (&a.0 .1, &a.0 .0).cmp(&(&b.0 .1, &b.0 .0)));
        // Before 1.28 exempt requests bypass the queueSet: only the dispatch counter and execution histogram.
        let queueset_stats: Vec<(&(String, String), &FsStats)> = stats
            .iter()
            .copied()
            .filter(|((pl, _), _)| m >= 28 || pl != "exempt")
            .collect();

        // Per (priority level, flow schema) gauges and counters.
        let exec_help = match m {
            ..=22 => format!("Number of requests currently executing in the API Priority and Fairness {sys}"),
            23 => format!("Number of requests in regular execution phase in the API Priority and Fairness {sys}"),
            _ => format!(
                "Number of requests in initial (for a WATCH) or any (for a non-WATCH) execution stage in the API Priority and Fairness {sys}"
            ),
        };
        let f = out.apf(
            "current_executing_requests",
            "gauge",
            &exec_help,
            Some(28),
            None,
        );
        for ((pl, fs), s) in &queueset_stats {
            out.sample(f, "", &fs_labels(pl, fs), s.executing_requests as f64);
        }
        let seats_help = if m >= 24 {
            format!("Concurrency (number of seats) occupied by the currently executing (initial stage for a WATCH, any stage otherwise) requests in the API Priority and Fairness {sys}")
        } else {
            format!("Concurrency (number of seats) occupided by the currently executing (all phases count) requests in the API Priority and Fairness {sys}")
        };
        if m >= 28 {
            let f = out.apf(
                "current_executing_seats",
                "gauge",
                &seats_help,
                Some(28),
                None,
            );
            for ((pl, fs), s) in &stats {
                out.sample(f, "", &fs_labels(pl, fs), s.executing_seats as f64);
            }
        }
        if (22..=31).contains(&m) {
            let dep = (m == 31).then_some("1.31.0");
            let f = out.apf(
                "request_concurrency_in_use",
                "gauge",
                &seats_help,
                None,
                dep,
            );
            for ((pl, fs), s) in &queueset_stats {
                out.sample(f, "", &fs_labels(pl, fs), s.executing_seats as f64);
            }
        }
        let help = format!(
            "Number of requests currently pending in queues of the API Priority and Fairness {sys}"
        );
        let f = out.apf("current_inqueue_requests", "gauge", &help, Some(28), None);
        for ((pl, fs), s) in stats.iter().filter(|((pl, _), _)| queued_level(pl)) {
            out.sample(f, "", &fs_labels(pl, fs), s.inqueue_requests as f64);
        }
        if m >= 29 {
            let help = "Number of seats currently pending in queues of the API Priority and Fairness subsystem";
            let f = out.apf("current_inqueue_seats", "gauge", help, None, None);
            for ((pl, fs), s) in stats.iter().filter(|((pl, _), _)| queued_level(pl)) {
                out.sample(f, "", &fs_labels(pl, fs), s.inqueue_seats as f64);
            }
        }
        let help = if m >= 24 {
            "Number of requests executed by API Priority and Fairness subsystem".to_string()
        } else {
            "Number of requests released by API Priority and Fairness system for service"
                .to_string()
        };
        let f = out.apf(
            "dispatched_requests_total",
            "counter",
            &help,
            Some(28),
            None,
        );
        for ((pl, fs), s) in stats.iter().filter(|(_, s)| s.dispatched > 0) {
            out.sample(f, "", &fs_labels(pl, fs), s.dispatched as f64);
        }
        // A CounterVec with no children writes nothing, not even HELP.
        if stats.iter().any(|(_, s)| !s.rejected.is_empty()) {
            let help = format!("Number of requests rejected by API Priority and Fairness {sys}");
            let f = out.apf("rejected_requests_total", "counter", &help, Some(28), None);
            for ((pl, fs), s) in &stats {
                for (reason, n) in &s.rejected {
                    out.sample(
                        f,
                        "",
                        &format!("{},reason=\"{reason}\"", fs_labels(pl, fs)),
                        *n as f64,
                    );
                }
            }
        }
        let help = "Length of time a request spent waiting in its queue";
        let f = out.apf(
            "request_wait_duration_seconds",
            "histogram",
            help,
            Some(28),
            None,
        );
        // execute is the first label name, so every execute="false" series sorts before the "true" ones.
        for exec in ["false", "true"] {
            for ((pl, fs), s) in &stats {
                let h = if exec == "false" {
                    &s.wait_rejected
                } else {
                    &s.wait_executed
                };
                if h.count > 0 {
                    let labels = format!("execute=\"{exec}\",{}", fs_labels(pl, fs));
                    out.histogram(f, &labels, &self.wait_buckets, h);
                }
            }
        }

        let help = match m {
            ..=22 => format!("Duration of request execution in the API Priority and Fairness {sys}"),
            23 => format!("Duration of regular phase of request execution in the API Priority and Fairness {sys}"),
            _ => format!("Duration of initial stage (for a WATCH) or any (for a non-WATCH) stage of request execution in the API Priority and Fairness {sys}"),
        };
        let f = out.apf("request_execution_seconds", "histogram", &help, None, None);
        for ((pl, fs), s) in stats.iter().filter(|(_, s)| s.execution.count > 0) {
            let mut labels = fs_labels(pl, fs);
            if m >= 24 {
                labels += ",type=\"regular\"";
            }
            out.histogram(f, &labels, &self.wait_buckets, &s.execution);
        }
        let help = format!(
            "Length of queue in the API Priority and Fairness {sys}, as seen by each request after it is enqueued"
        );
        let f = out.apf(
            "request_queue_length_after_enqueue",
            "histogram",
            &help,
            None,
            None,
        );
        for ((pl, fs), s) in stats.iter().filter(|(_, s)| s.queue_length.count > 0) {
            out.histogram(
                f,
                &fs_labels(pl, fs),
                &QUEUE_LENGTH_BUCKETS,
                &s.queue_length,
            );
        }
        if m >= 24 {
            let help = "Number of times a dispatch attempt resulted in a non accommodation due to lack of available seats";
            let f = out.apf(
                "request_dispatch_no_accommodation_total",
                "counter",
                help,
                None,
                None,
            );
            // A counter vector gets its series at the first increment.
            for ((pl, fs), s) in stats.iter().filter(|(_, s)| s.no_accommodation > 0) {
                out.sample(f, "", &fs_labels(pl, fs), s.no_accommodation as f64);
            }
        }
        if m >= 24 {
            let help = "Number of estimated seats (maximum of initial and final seats) associated with requests in API Priority and Fairness";
            let f = out.apf("work_estimated_seats", "histogram", help, None, None);
            for ((pl, fs), s) in queueset_stats
                .iter()
                .filter(|(_, s)| s.work_seats.count > 0)
            {
                out.histogram(f, &fs_labels(pl, fs), &self.work_buckets, &s.work_seats);
            }
        }

        // Per priority level.
        let levels: Vec<&Level> = {
            let mut v: Vec<&Level> = self
                .levels
                .iter()
                .filter(|l| self.has_queueset_metrics(l))
                .collect();
            v.sort_by(|a, b| a.def.name.cmp(&b.def.name));
            v
        };
        if m >= 22 {
            // The fair-queuing virtual clock, in seat-seconds.
            let f = out.apf("current_r", "gauge", "R(time of last change)", None, None);
            for l in &levels {
                out.sample(
                    f,
                    "",
                    &format!("priority_level=\"{}\"", l.def.name),
                    l.current_r_seat_seconds(),
                );
            }
            let dispatched: Vec<&&Level> = levels
                .iter()
                .filter(|l| !l.queues.is_empty() && l.dispatched > 0)
                .collect();
            let last = |l: &Level| {
                l.queues
                    .iter()
                    .map(|q| q.next_dispatch_seat_seconds())
                    .fold(0.0, f64::max)
            };
            let f = out.apf(
                "dispatch_r",
                "gauge",
                "R(time of last dispatch)",
                None,
                None,
            );
            for l in &dispatched {
                out.sample(
                    f,
                    "",
                    &format!("priority_level=\"{}\"", l.def.name),
                    last(l),
                );
            }
            let f = out.apf(
                "latest_s",
                "gauge",
                "S(most recently dispatched request)",
                None,
                None,
            );
            for l in &dispatched {
                out.sample(
                    f,
                    "",
                    &format!("priority_level=\"{}\"", l.def.name),
                    last(l),
                );
            }
            for (name, help) in [
                ("next_discounted_s_bounds", "min and max, over queues, of S(oldest waiting request in queue) - estimated work in progress"),
                ("next_s_bounds", "min and max, over queues, of S(oldest waiting request in queue)"),
            ] {
                let f = out.apf(name, "gauge", help, None, None);
                for bound in ["max", "min"] {
                    for l in &dispatched {
                        let v = if bound == "max" {
                            last(l)
                        } else {
                            l.queues.iter().map(|q| q.next_dispatch_seat_seconds()).fold(f64::INFINITY, f64::min)
                        };
                        out.sample(f, "", &format!("bound=\"{bound}\",priority_level=\"{}\"", l.def.name), v);
                    }
                }
            }
        }
        if m <= 30 {
            let help = match m {
                ..=27 => format!("Shared concurrency limit in the API Priority and Fairness {sys}"),
                _ => "Nominal number of execution seats configured for each priority level"
                    .to_string(),
            };
            let dep = (m == 30).then_some("1.30.0");
            let f = out.apf("request_concurrency_limit", "gauge", &help, None, dep);
            for l in &levels {
                let v = if m >= 26 {
                    l.nominal
                } else {
                    l.enforced_limit()
                };
                out.sample(
                    f,
                    "",
                    &format!("priority_level=\"{}\"", l.def.name),
                    v as f64,
                );
            }
        }
        if m >= 25 {
            // A timing-ratio histogram (component-base `timing_histogram.go`): counts are nanoseconds.
            let help = "Observations, at the end of every nanosecond, of utilization of seats for any stage of execution (but only initial stage for WATCHes)";
            let f = out.apf(
                "priority_level_seat_utilization",
                "histogram",
                help,
                None,
                None,
            );
            for l in &levels {
                out.histogram(
                    f,
                    &format!("phase=\"executing\",priority_level=\"{}\"", l.def.name),
                    &SEAT_UTILIZATION_BUCKETS,
                    &l.seat_utilization,
                );
            }
        }
        if m >= 26 {
            type Get = fn(&Level) -> f64;
            let per_level: [(&str, &str, Option<u32>, Get); 9] = [
                ("nominal_limit_seats", "Nominal number of execution seats configured for each priority level", Some(28), |l| l.nominal as f64),
                ("lower_limit_seats", "Configured lower bound on number of execution seats available to each priority level", None, |l| l.lower as f64),
                ("upper_limit_seats", "Configured upper bound on number of execution seats available to each priority level", None, |l| l.upper as f64),
                ("current_limit_seats", "current derived number of execution seats available to each priority level", None, |l| l.current_cl as f64),
                ("demand_seats_high_watermark", "High watermark, over last adjustment period, of demand_seats", None, |l| l.demand_hwm),
                ("demand_seats_average", "Time-weighted average, over last adjustment period, of demand_seats", None, |l| l.demand_avg),
                ("demand_seats_stdev", "Time-weighted standard deviation, over last adjustment period, of demand_seats", None, |l| l.demand_stdev),
                ("demand_seats_smoothed", "Smoothed seat demands", None, |l| l.demand_smoothed),
                ("target_seats", "Seat allocation targets", None, |l| l.target),
            ];
            for (name, help, beta, get) in per_level {
                let f = out.apf(name, "gauge", help, beta, None);
                for l in &levels {
                    out.sample(f, "", &format!("priority_level=\"{}\"", l.def.name), get(l));
                }
            }
            let help = "Fair fraction of server's concurrency to allocate to each priority level that can use it";
            let f = out.apf("seat_fair_frac", "gauge", help, None, None);
            out.sample(f, "", "", self.seat_fair_frac);
        }

        self.render_other_metrics(&mut out);
        out.finish()
    }
}
