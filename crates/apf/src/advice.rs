//! How fast a client may go: the seats its flow can count on in a contended priority level, what one of its
//! requests costs, and by Little's law the rate that share sustains; then that rate in the client's own terms.
//!
//! Fair queuing shares a busy level's seats equally among the queues that want them (k8s.io/apiserver
//! `pkg/util/flowcontrol/fairqueuing/queueset/queueset.go`: each dispatch goes to the queue whose virtual finish time
//! is earliest, and virtual time advances by the seats in use divided by the active queues), so with `k` flows
//! contending each can count on `limit / k` seats; a flow alone may use the whole limit, and from 1.26 what the
//! level borrows. A request holds its seats for its execution time; requests in flight = rate × seconds each, seats
//! in use = requests in flight × seats each (Little's law).

/// The recommended QPS is this share of the sustainable rate: room for Poisson-like arrivals and for the other
/// flows' bursts, so that a client run at it finds a seat without waiting in its queue. Never above the sustainable
/// rate.
pub const QPS_MARGIN: f64 = 0.8;

/// The seats one flow can count on while `active_flows` flows contend for `limit_seats`.
pub fn fair_share_seats(limit_seats: f64, active_flows: u32) -> f64 {
    limit_seats / f64::from(active_flows.max(1))
}

/// Requests per second a share of `share_seats` sustains when each request holds `seats_per_request` seats for
/// `seconds_per_request`; `None` when a cost is not a positive number.
pub fn sustainable_requests_per_second(
    share_seats: f64,
    seats_per_request: f64,
    seconds_per_request: f64,
) -> Option<f64> {
    let cost = seats_per_request * seconds_per_request;
    (cost.is_finite() && cost > 0.0 && share_seats.is_finite() && share_seats >= 0.0)
        .then(|| share_seats / cost)
}

/// What a client should be set to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recommendation {
    /// [`QPS_MARGIN`] of the sustainable rate, rounded down to two significant figures (at most 2 decimals).
    pub qps: f64,
    /// The requests the share runs at once: a burst larger than that waits in the flow's queue.
    pub burst: u32,
    /// Requests in flight the share holds: `share / seats per request`, rounded down, at least 1 (a concurrency for
    /// clients that set one instead of a rate: controller-runtime's `MaxConcurrentReconciles`, Crossplane's
    /// `--max-concurrent-reconciles`).
    pub concurrency: u32,
}

pub fn recommend(share_seats: f64, seats_per_request: f64, sustainable: f64) -> Recommendation {
    let concurrency = if seats_per_request > 0.0 && share_seats.is_finite() {
        // Bounded before the conversion.
        (share_seats / seats_per_request).floor().clamp(1.0, 1e6) as u32
    } else {
        1
    };
    Recommendation {
        qps: round_down(sustainable * QPS_MARGIN),
        burst: concurrency,
        concurrency,
    }
}

/// Down to two significant figures (163.4 -> 160, 8.37 -> 8.3, 0.456 -> 0.45): a figure a person types into a
/// flag, never above the rate it rounds (client-go reads a QPS of 0 as its default of 5: a positive rate stays
/// positive).
fn round_down(rate: f64) -> f64 {
    if !rate.is_finite() || rate <= 0.0 {
        return 0.0;
    }
    let magnitude = 10f64.powf(rate.log10().floor() - 1.0);
    (rate / magnitude).floor() * magnitude
}

/// The kind of client behind a flow, by its user agent (client-go's default is `BINARY/VERSION (OS/ARCH)
/// kubernetes/COMMIT`, k8s.io/client-go `rest/config.go` `DefaultKubernetesUserAgent`) and user name: which flags
/// set its rate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientKind {
    Kubectl,
    /// A Crossplane provider or Crossplane itself.
    Crossplane,
    /// kube-controller-manager, kube-scheduler and the other components with `--kube-api-qps`.
    KubeComponent(String),
    /// Anything else built on client-go (controllers, operators, agents).
    ClientGo,
}

impl ClientKind {
    pub fn of(user: &str, user_agent: Option<&str>) -> Self {
        let agent = user_agent.unwrap_or("").to_ascii_lowercase();
        let binary = agent.split(['/', ' ']).next().unwrap_or("");
        let user = user.to_ascii_lowercase();
        if binary == "kubectl" || binary.starts_with("kubectl-") {
            ClientKind::Kubectl
        } else if agent.contains("crossplane")
            || binary.starts_with("provider-")
            || user.starts_with("system:serviceaccount:crossplane-system:")
        {
            ClientKind::Crossplane
        } else if matches!(
            binary,
            "kube-controller-manager" | "kube-scheduler" | "cloud-controller-manager" | "kubelet"
        ) {
            ClientKind::KubeComponent(binary.to_string())
        } else if let Some(component) = user
            .strip_prefix("system:")
            .filter(|c| matches!(*c, "kube-controller-manager" | "kube-scheduler"))
        {
            // Their client certificates name them (k8s.io/kubernetes `cmd/kubeadm/app/constants`).
            ClientKind::KubeComponent(component.to_string())
        } else if user.starts_with("system:node:") {
            ClientKind::KubeComponent("kubelet".to_string())
        } else {
            ClientKind::ClientGo
        }
    }
}

/// Crossplane providers before `--max-concurrent-reconciles` made about this many API calls per reconcile when they
/// change something (crossplane/crossplane `design/one-pager-rate-limiting.md`: one when in sync, two otherwise):
/// the assumption a `--max-reconcile-rate` is derived with, said in the advice.
pub const CROSSPLANE_CALLS_PER_RECONCILE: f64 = 2.0;

/// What one flow is told, in its client's terms.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientTerms<'a> {
    pub kind: ClientKind,
    /// Who the sentence names: the user, else the flow.
    pub name: &'a str,
    pub replica: &'a str,
    pub priority_level: &'a str,
    pub limit_seats: f64,
    pub active_flows: u32,
    pub share_seats: f64,
    pub seats_per_request: f64,
    pub seconds_per_request: f64,
    pub sustainable: f64,
    pub observed: Option<f64>,
    /// How the rate here was told, where it is not the replica's own counters: e.g. `audit events: 8.44 requests/s
    /// over the cluster, 50 % of them here by this replica's share of the requests of flow schema global-default`.
    pub observed_from: Option<&'a str>,
    pub recommendation: Recommendation,
    /// The flow's requests are LISTs (its example request is one).
    pub lists: bool,
    /// kube-apiserver's minor version: what a LIST page costs.
    pub minor: Option<u32>,
}

/// The flag that sets a client's rate, as a remediation's last words say it: `--kube-api-qps=160`.
pub fn rate_flag(kind: &ClientKind, r: &Recommendation) -> String {
    match kind {
        ClientKind::Kubectl => format!(
            "at most {} kubectl request{} at once",
            r.concurrency,
            plural(r.concurrency)
        ),
        ClientKind::Crossplane => format!("--max-concurrent-reconciles={}", r.concurrency),
        ClientKind::KubeComponent(_) | ClientKind::ClientGo => format!(
            "--kube-api-qps={} --kube-api-burst={}",
            number(r.qps),
            r.burst
        ),
    }
}

fn plural(n: u32) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// A figure as a sentence shows it: three significant figures at most, no trailing zeros (`612`, `6.14`, `0.1`).
pub fn shown(x: f64) -> String {
    let s = if x.abs() >= 100.0 {
        return format!("{x:.0}");
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else if x.abs() >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    };
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A rate as a flag takes it: `160`, `8.3`, `0.45`, `0.0088`.
pub fn number(x: f64) -> String {
    // Rates rounded to two figures: four decimals show them down to 0.01, six below.
    let s = if x.abs() >= 0.01 {
        format!("{x:.4}")
    } else {
        format!("{x:.6}")
    };
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Whether a client's rate calls for a change: it sends more than the recommended QPS, so it exceeds, or is within
/// [`QPS_MARGIN`] of exceeding, what its share sustains. Below that (or with its rate unknown) the recommendation is a
/// ceiling, not an instruction.
pub fn needs_change(observed: Option<f64>, r: &Recommendation) -> bool {
    observed.is_some_and(|o| o > r.qps)
}

/// A client on one replica it was seen on.
#[derive(Debug, Clone, PartialEq)]
pub struct OnReplica<'a> {
    pub replica: &'a str,
    /// What it sends there (`None`: not known).
    pub observed: Option<f64>,
    /// What its share there sustains, and the recommendation for that replica.
    pub sustainable: f64,
    pub recommendation: Recommendation,
}

impl OnReplica<'_> {
    pub fn needs_change(&self) -> bool {
        needs_change(self.observed, &self.recommendation)
    }
}

/// The client's settings in its own terms, as an instruction (`set ...`) or as the ceiling it stays within.
/// client-go's Burst is a token bucket's size (the requests a client sends at once after a pause, refilled at QPS);
/// a concurrency (controller-runtime's `MaxConcurrentReconciles`, Crossplane's `--max-concurrent-reconciles`) caps
/// the requests in flight of workers that each wait for their call: different knobs, said apart.
fn settings(
    kind: &ClientKind,
    r: &Recommendation,
    lists: bool,
    seats: f64,
    minor: Option<u32>,
    change: bool,
) -> String {
    let verb = if change {
        "set"
    } else {
        "stays within its share up to"
    };
    match kind {
        ClientKind::Kubectl if lists && seats > 1.0 => {
            let page = match minor {
                Some(m) if m >= 34 => "a page small enough to stay under 100 kB".to_string(),
                _ => "pages of 100 objects, 1 seat each".to_string(),
            };
            if change {
                format!(
                    "kubectl: list with --chunk-size=100 ({page}) and run at most {} at once",
                    r.concurrency
                )
            } else {
                format!(
                    "kubectl stays within its share up to {} LIST{} at once (--chunk-size=100 for more: {page})",
                    r.concurrency,
                    plural(r.concurrency)
                )
            }
        }
        ClientKind::Kubectl if change => format!(
            "kubectl sets no rate flag: run at most {} kubectl request{} at once against this replica",
            r.concurrency,
            plural(r.concurrency)
        ),
        ClientKind::Kubectl => format!(
            "kubectl stays within its share up to {} request{} at once",
            r.concurrency,
            plural(r.concurrency)
        ),
        ClientKind::Crossplane => format!(
            "Crossplane: {verb} --max-concurrent-reconciles={} (providers before it: --max-reconcile-rate={}, assuming \
             {} API calls per reconcile)",
            r.concurrency,
            number(round_down(r.qps / CROSSPLANE_CALLS_PER_RECONCILE)),
            CROSSPLANE_CALLS_PER_RECONCILE
        ),
        ClientKind::KubeComponent(binary) => format!(
            "{binary}: {verb} --kube-api-qps={} --kube-api-burst={} (the burst: requests sent at once after a pause, \
             which the share runs without waiting)",
            number(r.qps),
            r.burst
        ),
        ClientKind::ClientGo => format!(
            "client-go: {verb} QPS={} and Burst={} (--kube-api-qps/--kube-api-burst in most controllers; Burst is a \
             token bucket: the requests sent at once after a pause, which the share runs without waiting); with \
             controller-runtime, MaxConcurrentReconciles (workers, each waiting for its calls) at most {}",
            number(r.qps),
            r.burst,
            r.concurrency
        ),
    }
}

/// The advice on one replica: what the share is, what a request costs, what it sustains, how it compares with what
/// the client sends there, and the flag to set (only when it sends more than the recommended rate; else the ceiling
/// it stays within).
pub fn sentence(t: &ClientTerms<'_>) -> String {
    let r = &t.recommendation;
    let share = if t.active_flows <= 1 {
        format!(
            "alone in {} on {}, its flow may use all {:.0} seats (and seats the level borrows); once k flows \
             contend, it counts on {:.0}/k",
            t.priority_level, t.replica, t.limit_seats, t.limit_seats
        )
    } else {
        format!(
            "its flow can count on {} of {}'s {:.0} seats on {} while {} flows contend",
            shown(t.share_seats),
            t.priority_level,
            t.limit_seats,
            t.replica,
            t.active_flows
        )
    };
    let cost = format!(
        "each request holds {} seat{} for {} s, so the share sustains {} requests/s",
        shown(t.seats_per_request),
        if (t.seats_per_request - 1.0).abs() < 1e-9 {
            ""
        } else {
            "s"
        },
        shown(t.seconds_per_request),
        shown(t.sustainable)
    );
    let from = t
        .observed_from
        .map(|f| format!(", by {f}"))
        .unwrap_or_default();
    let sends = match t.observed {
        Some(o) if t.sustainable > 0.0 => format!(
            "; it sends {} requests/s here ({}x{from})",
            shown(o),
            shown(o / t.sustainable)
        ),
        Some(o) => format!("; it sends {} requests/s here{from}", shown(o)),
        None => String::new(),
    };
    let change = needs_change(t.observed, r);
    let set = settings(&t.kind, r, t.lists, t.seats_per_request, t.minor, change);
    let verdict = match t.observed {
        Some(_) if !change => "Within its share here: no change needed. ",
        None => "Its rate here is not known. ",
        Some(_) => "",
    };
    format!(
        "{}: {share}; {cost}{sends}. {verdict}{set}. Per replica: a client-go process keeps one HTTP/2 connection, \
         so one replica; processes of the flow on one replica share this, each replica gives its own.",
        t.name
    )
}

/// One client over the replicas it was seen on: what [`client_sentence`] says.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientOverReplicas<'a> {
    pub kind: ClientKind,
    pub name: &'a str,
    /// Each replica it was seen on.
    pub replicas: Vec<OnReplica<'a>>,
    /// The index in `replicas` of the one that sustains the least for it, and that one's level.
    pub tightest: usize,
    pub priority_level: &'a str,
    pub lists: bool,
    pub seats_per_request: f64,
    pub minor: Option<u32>,
}

impl ClientOverReplicas<'_> {
    /// Whether any replica's rate calls for a change (by that replica's own recommendation).
    pub fn needs_change(&self) -> bool {
        self.replicas.iter().any(OnReplica::needs_change)
    }
}

/// One recommendation for a client, whichever replica its connection lands on: the tightest replica's, as a change
/// to make when it sends more than a replica sustains for it (or nearly), else as the ceiling it stays within.
pub fn client_sentence(c: &ClientOverReplicas<'_>) -> String {
    let change = c.needs_change();
    let rates: Vec<String> = c
        .replicas
        .iter()
        .enumerate()
        .map(|(i, r)| match r.observed {
            Some(o) if i == 0 => format!("{} requests/s on {}", shown(o), r.replica),
            Some(o) => format!("{} on {}", shown(o), r.replica),
            None => format!("an unknown rate on {}", r.replica),
        })
        .collect();
    let known: Vec<f64> = c.replicas.iter().filter_map(|r| r.observed).collect();
    let total = if known.len() == c.replicas.len() && c.replicas.len() > 1 {
        format!(" ({} in all)", shown(known.iter().sum()))
    } else {
        String::new()
    };
    let sends = format!("it sends {}{total}", join(&rates));
    let Some(tightest) = c.replicas.get(c.tightest) else {
        return format!("{}: seen on no replica: no rate to advise", c.name);
    };
    let over: Vec<String> = c
        .replicas
        .iter()
        .filter(|r| r.needs_change() && r.sustainable > 0.0)
        .filter_map(|r| {
            Some(format!(
                "{}x on {}",
                shown(r.observed? / r.sustainable),
                r.replica
            ))
        })
        .collect();
    let set = settings(
        &c.kind,
        &tightest.recommendation,
        c.lists,
        c.seats_per_request,
        c.minor,
        change,
    );
    let why = format!(
        "{} sustains {} requests/s for it in {}, the least of {}: a client-go process keeps one HTTP/2 connection, \
         so it may land on any of them, and processes that land on one replica share its share",
        tightest.replica,
        shown(tightest.sustainable),
        c.priority_level,
        if c.replicas.len() == 1 {
            "the replica it was seen on".to_string()
        } else {
            format!("the {} replicas it was seen on", c.replicas.len())
        }
    );
    if change {
        format!(
            "{}: {sends}, at or above what its share sustains ({}). {set}. Why: {why}.",
            c.name,
            join(&over)
        )
    } else if known.is_empty() {
        format!(
            "{}: its rate is not known. A ceiling, not a setting: {set}. Why: {why}.",
            c.name
        )
    } else {
        format!(
            "{}: {sends}, within its share: no change needed. A ceiling, not a setting: {set}. Why: {why}.",
            c.name
        )
    }
}

/// `a`, `a and b`, `a, b and c`.
fn join(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [head @ .., last] => format!("{} and {last}", head.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_sustains_its_seats_over_what_a_request_holds() {
        // workload-low's 245 seats among 10 flows; 1 seat for 0.1 s each.
        let share = fair_share_seats(245.0, 10);
        assert_eq!(share, 24.5);
        let s = sustainable_requests_per_second(share, 1.0, 0.1).unwrap();
        assert!((s - 245.0).abs() < 1e-9);
        // A LIST of 10 seats for 2 s: 24.5 / 20.
        let s = sustainable_requests_per_second(share, 10.0, 2.0).unwrap();
        assert!((s - 1.225).abs() < 1e-9);
        assert_eq!(sustainable_requests_per_second(share, 1.0, 0.0), None);
        assert_eq!(fair_share_seats(245.0, 0), 245.0, "a flow alone");
    }

    #[test]
    fn the_recommendation_stays_under_the_sustainable_rate() {
        let r = recommend(24.5, 1.0, 245.0);
        assert_eq!(r.qps, 190.0, "0.8 x 245 = 196, two figures, down");
        assert_eq!((r.concurrency, r.burst), (24, 24));
        let r = recommend(24.5, 10.0, 1.225);
        assert_eq!(r.qps, 0.98);
        assert_eq!(r.concurrency, 2);
        // A share smaller than one request: one at a time.
        assert_eq!(recommend(0.5, 10.0, 0.05).concurrency, 1);
        for rate in [0.0004, 0.011, 0.3, 1.0, 8.37, 10.4, 163.4, 1234.5, 99.99] {
            let q = recommend(10.0, 1.0, rate).qps;
            assert!(q <= rate * QPS_MARGIN + 1e-12 && q > 0.0, "{rate}: {q}");
        }
        assert_eq!(number(8.3), "8.3");
        assert_eq!(number(160.0), "160");
    }

    #[test]
    fn clients_are_told_by_their_user_agent() {
        let kind = |u: &str, a: &str| ClientKind::of(u, Some(a));
        assert_eq!(
            kind("admin", "kubectl/v1.33.1 (linux/amd64) kubernetes/8adc0f0"),
            ClientKind::Kubectl
        );
        assert_eq!(
            kind(
                "system:serviceaccount:crossplane-system:provider-aws-ec2-a1b2",
                "provider-aws-ec2/v1.16.0"
            ),
            ClientKind::Crossplane
        );
        assert_eq!(
            kind(
                "system:kube-controller-manager",
                "kube-controller-manager/v1.33.1 (linux/amd64) kubernetes/8adc0f0/leader-election"
            ),
            ClientKind::KubeComponent("kube-controller-manager".into())
        );
        assert_eq!(
            ClientKind::of("system:serviceaccount:monitoring:agent", None),
            ClientKind::ClientGo
        );
        assert_eq!(
            ClientKind::of("system:kube-scheduler", None),
            ClientKind::KubeComponent("kube-scheduler".into())
        );
        assert_eq!(
            ClientKind::of("system:node:node-1", None),
            ClientKind::KubeComponent("kubelet".into())
        );
    }

    /// workload-low's 245 seats among 10 flows, 1-seat requests of 0.1 s: a share of 24.5 seats sustains 245/s.
    fn terms<'a>(kind: ClientKind, name: &'a str, observed: Option<f64>) -> ClientTerms<'a> {
        ClientTerms {
            kind,
            name,
            replica: "10.0.0.5:6443",
            priority_level: "workload-low",
            limit_seats: 245.0,
            active_flows: 10,
            share_seats: 24.5,
            seats_per_request: 1.0,
            seconds_per_request: 0.1,
            sustainable: 245.0,
            observed,
            observed_from: None,
            recommendation: recommend(24.5, 1.0, 245.0),
            lists: false,
            minor: Some(33),
        }
    }

    #[test]
    fn the_sentence_names_the_share_the_cost_and_the_flag() {
        let t = terms(ClientKind::Crossplane, "provider-aws", Some(490.0));
        let s = sentence(&t);
        assert!(s.starts_with("provider-aws: its flow can count on 24.5 of workload-low's 245 seats on 10.0.0.5:6443 while 10 flows contend; each request holds 1 seat for 0.1 s, so the share sustains 245 requests/s; it sends 490 requests/s here (2x). Crossplane: set --max-concurrent-reconciles=24 (providers before it: --max-reconcile-rate=95, assuming 2 API calls per reconcile)."), "{s}");
        assert!(s.contains("Per replica"), "{s}");
        assert_eq!(
            rate_flag(&ClientKind::ClientGo, &t.recommendation),
            "--kube-api-qps=190 --kube-api-burst=24"
        );
    }

    #[test]
    fn a_client_within_its_share_is_told_a_ceiling_not_a_setting() {
        let t = |observed: Option<f64>| ClientTerms {
            observed_from: Some("audit events"),
            ..terms(ClientKind::ClientGo, "cert-manager", observed)
        };
        let idle = sentence(&t(Some(0.5)));
        assert!(!idle.contains(" set "), "{idle}");
        assert!(
            idle.contains("it sends 0.5 requests/s here (0.002x, by audit events). Within its share here: no change \
                           needed. client-go: stays within its share up to QPS=190 and Burst=24"),
            "{idle}"
        );
        let unknown = sentence(&t(None));
        assert!(
            unknown.contains(
                "Its rate here is not known. client-go: stays within its share up to QPS=190"
            ),
            "{unknown}"
        );
        // Above the recommended rate, though under the sustainable one: about to exceed it, told to change.
        let near = sentence(&t(Some(200.0)));
        assert!(
            near.contains("client-go: set QPS=190 and Burst=24"),
            "{near}"
        );
        // Burst and the concurrency are told apart.
        assert!(near.contains("Burst is a token bucket"), "{near}");
        assert!(
            near.contains(
                "MaxConcurrentReconciles (workers, each waiting for its calls) at most 24"
            ),
            "{near}"
        );
        assert!(!needs_change(None, &t(None).recommendation));
    }

    #[test]
    fn one_client_gets_one_recommendation_the_tightest_replicas() {
        let on = |replica, observed, sustainable: f64| OnReplica {
            replica,
            observed,
            sustainable,
            recommendation: recommend(sustainable * 2.0, 2.0, sustainable),
        };
        let mut c = ClientOverReplicas {
            kind: ClientKind::ClientGo,
            name: "agent",
            replicas: vec![
                on("a", Some(61.0), 40.0),
                on("b", Some(40.0), 30.0),
                on("c", Some(19.0), 15.0),
            ],
            tightest: 2,
            priority_level: "workload-low",
            lists: false,
            seats_per_request: 2.0,
            minor: Some(34),
        };
        assert!(c.needs_change());
        let s = client_sentence(&c);
        assert!(
            s.starts_with(
                "agent: it sends 61 requests/s on a, 40 on b and 19 on c (120 in all), at or above what its share \
                 sustains (1.52x on a, 1.33x on b and 1.27x on c). client-go: set QPS=12 and Burst=15"
            ),
            "{s}"
        );
        assert!(
            s.contains("Why: c sustains 15 requests/s for it in workload-low, the least of the 3 replicas it was seen on"),
            "{s}"
        );
        // Idle everywhere: a ceiling.
        for r in &mut c.replicas {
            r.observed = Some(1.0);
        }
        assert!(!c.needs_change());
        let s = client_sentence(&c);
        assert!(
            s.starts_with(
                "agent: it sends 1 requests/s on a, 1 on b and 1 on c (3 in all), within its share: no change \
                 needed. A ceiling, not a setting: client-go: stays within its share up to QPS=12 and Burst=15"
            ),
            "{s}"
        );
        // One replica over its recommended rate is enough to call for the change.
        c.replicas[1].observed = Some(25.0);
        assert!(c.needs_change());
    }
}
