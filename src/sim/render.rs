//! `/metrics` and the debug dumps, in the layout of the simulated version (apf.md §1, §2).

use super::apf::{FsStats, Histogram, Level, Req, State};
use super::tabwriter::{row, tabwrite};
use super::Simulator;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

/// Formats a sample value as Go's `strconv.FormatFloat(f, 'g', -1, 64)` (what client_golang writes).
pub(super) fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if f == 0.0 {
        return "0".into();
    }
    let e = format!("{f:e}");
    let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits = mant.trim_start_matches('-').replace('.', "").len() as i32;
    let dp = exp + 1;
    let mut eprec = 6;
    if eprec > digits && digits >= dp {
        eprec = digits;
    }
    if exp < -4 || exp >= eprec {
        format!("{mant}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
    } else {
        format!("{f}")
    }
}

/// Go's time.RFC3339Nano in UTC: the fraction loses its trailing zeros.
fn rfc3339_nano(t: SystemTime) -> String {
    let s = humantime::format_rfc3339_nanos(t).to_string();
    match s.split_once('.') {
        Some((head, frac)) => {
            let frac = frac.trim_end_matches('Z').trim_end_matches('0');
            if frac.is_empty() {
                format!("{head}Z")
            } else {
                format!("{head}.{frac}Z")
            }
        }
        None => s,
    }
}

/// SeatSeconds.String(): fixed point with 8 decimals and the suffix `ss`.
fn seat_seconds(x: f64) -> String {
    let scaled = (x.max(0.0) * 1e8).round() as u64;
    format!("{}.{:08}ss", scaled / 100_000_000, scaled % 100_000_000)
}

struct Family {
    name: String,
    text: String,
}

struct Metrics {
    minor: u32,
    families: Vec<Family>,
}

impl Metrics {
    /// Starts an APF family: HELP with the version's stability and deprecation text.
    fn apf(
        &mut self,
        name: &str,
        typ: &str,
        help: &str,
        beta_from: Option<u32>,
        deprecated: Option<&str>,
    ) -> usize {
        let stab = match beta_from {
            Some(b) if self.minor >= b => "BETA",
            _ => "ALPHA",
        };
        let dep = deprecated
            .map(|d| format!("(Deprecated since {d}) "))
            .unwrap_or_default();
        self.raw(
            &format!("apiserver_flowcontrol_{name}"),
            typ,
            &format!("[{stab}] {dep}{help}"),
        )
    }
    fn raw(&mut self, name: &str, typ: &str, help: &str) -> usize {
        self.families.push(Family {
            name: name.to_string(),
            text: format!("# HELP {name} {help}\n# TYPE {name} {typ}\n"),
        });
        self.families.len() - 1
    }
    fn sample(&mut self, fam: usize, suffix: &str, labels: &str, v: f64) {
        let f = &mut self.families[fam];
        let _ = if labels.is_empty() {
            writeln!(f.text, "{}{suffix} {}", f.name, go_float(v))
        } else {
            writeln!(f.text, "{}{suffix}{{{labels}}} {}", f.name, go_float(v))
        };
    }
    fn histogram(&mut self, fam: usize, labels: &str, bounds: &[f64], h: &Histogram) {
        let mut cum = 0;
        for (i, b) in bounds.iter().enumerate() {
            cum += h.counts[i];
            self.sample(
                fam,
                "_bucket",
                &format!("{labels},le=\"{}\"", go_float(*b)),
                cum as f64,
            );
        }
        cum += h.counts[bounds.len()];
        self.sample(fam, "_bucket", &format!("{labels},le=\"+Inf\""), cum as f64);
        self.sample(fam, "_sum", labels, h.sum);
        self.sample(fam, "_count", labels, h.count as f64);
    }
    fn finish(mut self) -> String {
        // The registry gathers families sorted by name.
        self.families.sort_by(|a, b| a.name.cmp(&b.name));
        self.families.into_iter().map(|f| f.text).collect()
    }
}

fn fs_labels(pl: &str, fs: &str) -> String {
    format!("flow_schema=\"{fs}\",priority_level=\"{pl}\"")
}

fn api_group(resource: &str) -> &'static str {
    match resource {
        "leases" => "coordination.k8s.io",
        "deployments" | "replicasets" | "daemonsets" | "statefulsets" => "apps",
        _ => "",
    }
}

impl State {
    fn has_queueset_metrics(&self, l: &Level) -> bool {
        // Before 1.28 exempt had no queueSet, so no per-level gauges.
        !l.def.exempt || self.version.at_least(28)
    }

    fn render_metrics(&self) -> String {
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
        let stats: Vec<(&(String, String), &FsStats)> = self.fs_stats.iter().collect();

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
        for ((pl, fs), s) in &stats {
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
            for ((pl, fs), s) in &stats {
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
        for ((pl, fs), s) in &stats {
            for (exec, h) in [("false", &s.wait_rejected), ("true", &s.wait_executed)] {
                if h.count > 0 {
                    let labels = format!("execute=\"{exec}\",{}", fs_labels(pl, fs));
                    out.histogram(f, &labels, &self.wait_buckets, h);
                }
            }
        }

        // Per priority level.
        let levels: Vec<&Level> = {
            let mut v: Vec<&Level> = self
                .levels
                .iter()
                .filter(|l| self.has_queueset_metrics(l))
                .collect();
            v.sort_by_key(|l| l.def.name);
            v
        };
        if m <= 30 {
            let help = match m {
                ..=27 => format!("Shared concurrency limit in the API Priority and Fairness {sys}"),
                _ => "Nominal number of execution seats configured for each priority level"
                    .to_string(),
            };
            let dep = (m == 30).then_some("1.30.0");
            let f = out.apf("request_concurrency_limit", "gauge", &help, None, dep);
            for l in levels.iter().filter(|l| !l.def.exempt) {
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

    /// Families a scraper must skip by name, and the related non-APF ones (apf.md §1c).
    fn render_other_metrics(&self, out: &mut Metrics) {
        let m = self.version.minor;
        let (mut ro, mut mu, mut qro, mut qmu) = (0, 0, 0, 0);
        for l in &self.levels {
            for r in &l.executing {
                if is_read_only_flow(self, r) {
                    ro += 1
                } else {
                    mu += 1
                }
            }
            for q in &l.queues {
                for r in &q.waiting {
                    if is_read_only_flow(self, r) {
                        qro += 1
                    } else {
                        qmu += 1
                    }
                }
            }
        }
        let stab = if m >= 23 { "STABLE" } else { "ALPHA" };
        let f = out.raw(
            "apiserver_current_inflight_requests",
            "gauge",
            &format!("[{stab}] Maximal number of currently used inflight request limit of this apiserver per request kind in last second."),
        );
        out.sample(f, "", "request_kind=\"mutating\"", mu as f64);
        out.sample(f, "", "request_kind=\"readOnly\"", ro as f64);
        let f = out.raw(
            "apiserver_current_inqueue_requests",
            "gauge",
            "[ALPHA] Maximal number of queued requests in this apiserver per request kind in last second.",
        );
        out.sample(f, "", "request_kind=\"mutating\"", qmu as f64);
        out.sample(f, "", "request_kind=\"readOnly\"", qro as f64);

        let f = out.raw(
            "apiserver_request_total",
            "counter",
            "[STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.",
        );
        for ((verb, resource, code), n) in &self.request_total {
            let labels = format!(
                "code=\"{code}\",component=\"apiserver\",dry_run=\"\",group=\"{}\",resource=\"{resource}\",scope=\"resource\",subresource=\"\",verb=\"{verb}\",version=\"v1\"",
                api_group(resource)
            );
            out.sample(f, "", &labels, *n as f64);
        }

        // A few hundred histogram lines that carry nothing APF-related.
        let f = out.raw(
            "apiserver_request_duration_seconds",
            "histogram",
            "[STABLE] Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component.",
        );
        let bounds = [
            0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0,
            8.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
        ];
        let fixed = [
            ("GET", "", "/healthz"),
            ("GET", "", "/livez"),
            ("GET", "", "/readyz"),
            ("GET", "", "/version"),
            ("GET", "", "/metrics"),
            ("LIST", "configmaps", ""),
            ("LIST", "secrets", ""),
            ("WATCH", "pods", ""),
            ("PUT", "leases", ""),
            ("GET", "namespaces", ""),
            ("POST", "events", ""),
            ("PATCH", "nodes", ""),
        ];
        let secs = self.now_ns / 1_000_000_000;
        for (i, (verb, resource, sub)) in fixed.iter().enumerate() {
            let labels = format!(
                "component=\"apiserver\",dry_run=\"\",group=\"{}\",resource=\"{resource}\",scope=\"{}\",subresource=\"{sub}\",verb=\"{verb}\",version=\"{}\"",
                api_group(resource),
                if resource.is_empty() { "" } else { "cluster" },
                if resource.is_empty() { "" } else { "v1" },
            );
            let total = secs / (i as u64 + 1) + 1;
            let mut cum = 0;
            for (j, b) in bounds.iter().enumerate() {
                cum = if j < 3 {
                    total * (j as u64 + 1) / 4
                } else {
                    total.max(cum)
                };
                out.sample(
                    f,
                    "_bucket",
                    &format!("{labels},le=\"{}\"", go_float(*b)),
                    cum as f64,
                );
            }
            out.sample(f, "_bucket", &format!("{labels},le=\"+Inf\""), total as f64);
            out.sample(f, "_sum", &labels, total as f64 * 0.012);
            out.sample(f, "_count", &labels, total as f64);
        }

        let f = out.raw(
            "go_goroutines",
            "gauge",
            "Number of goroutines that currently exist.",
        );
        let executing: usize = self.levels.iter().map(|l| l.executing.len()).sum();
        out.sample(f, "", "", (1800 + executing) as f64);

        let f = out.raw(
            "kubernetes_build_info",
            "gauge",
            "[ALPHA] A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running.",
        );
        let labels = format!(
            "build_date=\"2025-01-01T00:00:00Z\",compiler=\"gc\",git_commit=\"{}\",git_tree_state=\"clean\",git_version=\"{}\",go_version=\"{}\",major=\"1\",minor=\"{}\",platform=\"linux/amd64\"",
            git_commit(self.version.minor, self.version.patch),
            self.version.git_version(),
            go_version(m),
            m
        );
        out.sample(f, "", &labels, 1.0);
    }

    /// Levels in the order the version prints them: sorted from 1.27, map order (here: definition order) before.
    fn dump_order(&self) -> Vec<&Level> {
        let mut v: Vec<&Level> = self.levels.iter().collect();
        if self.version.at_least(27) {
            v.sort_by_key(|l| l.def.name);
        }
        v
    }

    fn render_dump_priority_levels(&self) -> String {
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
                    "false".into(),
                    l.waiting.to_string(),
                    l.executing.len().to_string(),
                ]);
                if wide {
                    let (timedout, cancelled) = if self.version.timeouts_count_as_cancelled() {
                        (0, l.timed_out)
                    } else {
                        (l.timed_out, 0)
                    };
                    cells.extend([
                        l.dispatched.to_string(),
                        l.rejected.to_string(),
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

    fn render_dump_queues(&self) -> String {
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
                    let work: f64 = q
                        .waiting
                        .iter()
                        .map(|r| r.seats as f64 * r.dur_ns as f64 / 1e9)
                        .sum();
                    cells.extend([
                        q.seats_in_use.to_string(),
                        seat_seconds(q.next_dispatch_r),
                        seats.to_string(),
                        seats.to_string(),
                        seat_seconds(work),
                    ]);
                } else {
                    cells.push(format!("{:.4}", q.next_dispatch_r));
                }
                text += &row(&cells);
                text.push('\n');
            }
        }
        tabwrite(&text)
    }

    fn render_dump_requests(&self, details: bool) -> String {
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
                self.flow_schemas[f.fs].name.to_string(),
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
                cells.extend([r.seats.to_string(), "0".into(), "0s".into()]);
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
                    for r in &l.executing {
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
                    for r in l.executing.iter().filter(|r| r.queue == Some(qi)) {
                        line(l, r, qi as i64, -1, true);
                    }
                }
            }
        }
        tabwrite(&text)
    }
}

fn is_read_only_flow(st: &State, r: &Req) -> bool {
    matches!(st.flows[r.flow].verb.as_str(), "get" | "list" | "watch")
}

/// A stable, made-up 40-hex commit per version.
pub(super) fn git_commit(minor: u32, patch: u32) -> String {
    let mut h: u64 = 0x9e37_79b9_7f4a_7c15 ^ ((minor as u64) << 16 | patch as u64);
    let mut s = String::new();
    while s.len() < 40 {
        h ^= h << 13;
        h ^= h >> 7;
        h ^= h << 17;
        s += &format!("{h:016x}");
    }
    s.truncate(40);
    s
}

/// The Go release each Kubernetes minor was built with (roughly).
pub(super) fn go_version(minor: u32) -> &'static str {
    match minor {
        ..=20 => "go1.15.15",
        21 => "go1.16.15",
        22 => "go1.16.15",
        23 => "go1.19.6",
        24 | 25 => "go1.20.7",
        26 | 27 => "go1.21.5",
        28 | 29 => "go1.22.5",
        30 | 31 => "go1.22.5",
        32 => "go1.23.3",
        33 => "go1.24.2",
        34 => "go1.24.6",
        _ => "go1.25.5",
    }
}

impl Simulator {
    /// The `/metrics` text of the simulated version.
    pub fn render_metrics(&self) -> String {
        self.lock().render_metrics()
    }
    /// `/debug/api_priority_and_fairness/dump_priority_levels`.
    pub fn render_dump_priority_levels(&self) -> String {
        self.lock().render_dump_priority_levels()
    }
    /// `/debug/api_priority_and_fairness/dump_queues`.
    pub fn render_dump_queues(&self) -> String {
        self.lock().render_dump_queues()
    }
    /// `/debug/api_priority_and_fairness/dump_requests`, with `?includeRequestDetails=1` when `include_details`.
    pub fn render_dump_requests(&self, include_details: bool) -> String {
        self.lock().render_dump_requests(include_details)
    }
}
