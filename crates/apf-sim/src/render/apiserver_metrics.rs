//! The families of `/metrics` beside APF's that a scraper must skip by name or that apf-monitor reads: requests and
//! their 429s, inflight gauges, stored objects and their size, and the build info.
use super::exposition::Metrics;
use super::go::{git_commit, go_float, go_version};
use crate::scenario::api_group;
use crate::simulator::{Req, State};

impl State {
    /// Families a scraper must skip by name, and the related non-APF ones (k8s.io/apiserver `pkg/endpoints/metrics/metrics.go`).
    pub(super) fn render_other_metrics(&self, out: &mut Metrics) {
        let m = self.version.minor;
        let (mut ro, mut mu, mut qro, mut qmu) = (0, 0, 0, 0);
        for l in &self.levels {
            for r in l.executing.values() {
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

        if !self.terminations_total.is_empty() {
            let f = out.raw(
                "apiserver_request_terminations_total",
                "counter",
                "[ALPHA] Number of requests which apiserver terminated in self-defense.",
            );
            for ((verb, resource, code), n) in &self.terminations_total {
                let labels = format!(
                    "code=\"{code}\",component=\"apiserver\",group=\"{}\",resource=\"{resource}\",scope=\"resource\",subresource=\"\",verb=\"{verb}\",version=\"v1\"",
                    api_group(resource)
                );
                out.sample(f, "", &labels, *n as f64);
            }
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
}

fn is_read_only_flow(st: &State, r: &Req) -> bool {
    matches!(st.flows[r.flow].verb.as_str(), "get" | "list" | "watch")
}
