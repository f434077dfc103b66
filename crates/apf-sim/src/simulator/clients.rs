//! Where a flow's requests come from: an open loop at the scenario's rate (Poisson or evenly spaced), or a closed
//! loop of client threads, each calling, waiting for its answer, thinking and calling again, optionally behind
//! client-go's token bucket.
//!
//! An open loop's next arrival is the moment its rate curve has accumulated the next request: one request for
//! even arrivals, an exponential draw for Poisson ones (the time-rescaling of a Poisson process), solved exactly on
//! the piecewise-linear curve, so arrivals need no clock ticks.
use rand::rngs::StdRng;
use rand::Rng;

use crate::scenario::{Arrivals, FlowSpec};

/// The least time between two arrivals of one open-loop flow.
const MIN_GAP_NS: u64 = 20_000;

/// A flow's source of requests.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    Open(OpenLoop),
    Closed(ClosedLoop),
}

impl Source {
    pub(super) fn new(spec: &FlowSpec, period_ns: u64) -> Source {
        match spec.threads {
            Some(threads) => Source::Closed(ClosedLoop {
                configured: threads,
                active: threads,
                threads: vec![Thread::default(); threads as usize],
                bucket: spec
                    .qps
                    .map(|qps| TokenBucket::new(qps, spec.burst.unwrap_or(1))),
            }),
            None => Source::Open(OpenLoop {
                curve: Curve::new(spec, period_ns),
                arrivals: spec.arrivals,
                generation: 0,
                last_ns: 0,
                last_scale: 0.0,
                needed: 0.0,
            }),
        }
    }
}

/// A flow's rate over one loop of the scenario: points (seconds into the loop, requests/s), linear in between,
/// from 0 to the loop's end.
#[derive(Debug, Clone)]
pub(crate) struct Curve {
    points: Vec<(f64, f64)>,
    period_ns: u64,
    /// Requests in one loop.
    loop_area: f64,
}

impl Curve {
    fn new(spec: &FlowSpec, period_ns: u64) -> Curve {
        let period = period_ns as f64 / 1e9;
        // The scenario's own points (two at one time make a step), from the first rate at 0 to the loop's end.
        let mut points = Vec::new();
        if spec.rate.first().is_none_or(|p| !p.at.is_zero()) {
            points.push((0.0, spec.rps_at(std::time::Duration::ZERO)));
        }
        for p in spec.rate.iter().filter(|p| p.at.as_secs_f64() < period) {
            points.push((p.at.as_secs_f64(), p.rps));
        }
        let end = match spec.rate.iter().rposition(|p| p.at.as_secs_f64() <= period) {
            Some(last) if last + 1 == spec.rate.len() => spec.rate[last].rps,
            _ => spec.rps_at(std::time::Duration::from_nanos(period_ns)),
        };
        points.push((period, end));
        let loop_area = points
            .windows(2)
            .map(|w| (w[0].1 + w[1].1) / 2.0 * (w[1].0 - w[0].0))
            .sum();
        Curve {
            points,
            period_ns,
            loop_area,
        }
    }

    /// Walks the curve from `from_ns` until `area` requests have accumulated or `until_ns` is reached, whichever
    /// comes first: the time reached and the area left. `None` when the curve never accumulates `area`.
    fn walk(&self, from_ns: u64, mut area: f64, until_ns: Option<u64>) -> Option<(u64, f64)> {
        if self.loop_area.is_nan()
            || self.loop_area <= 0.0
            || self.period_ns == 0
            || !area.is_finite()
        {
            return until_ns.map(|u| (u.max(from_ns), area));
        }
        let mut base = from_ns - from_ns % self.period_ns;
        let mut x = (from_ns - base) as f64 / 1e9;
        // Whole loops at once, when the walk spans many.
        let in_loop = self.area_from(x);
        if area > in_loop + self.loop_area && until_ns.is_none() {
            let loops = ((area - in_loop) / self.loop_area).floor() - 1.0;
            if loops > 0.0 {
                area -= loops * self.loop_area;
                base = base.saturating_add((loops as u64).saturating_mul(self.period_ns));
            }
        }
        loop {
            for w in self.points.windows(2) {
                let ((a, ra), (b, rb)) = (w[0], w[1]);
                if x >= b {
                    continue;
                }
                let slope = if b > a { (rb - ra) / (b - a) } else { 0.0 };
                let rx = ra + slope * (x - a);
                let segment = (rx + rb) / 2.0 * (b - x);
                let end_ns = base + (b * 1e9).round() as u64;
                if let Some(until) = until_ns.filter(|&u| u <= end_ns) {
                    let y = (until - base) as f64 / 1e9;
                    let used = (rx + (ra + slope * (y - a))) / 2.0 * (y - x);
                    if used < area {
                        return Some((until, area - used));
                    }
                }
                if area <= segment {
                    let dx = if slope.abs() < 1e-12 {
                        area / rx
                    } else {
                        let ry = (rx * rx + 2.0 * slope * area).max(0.0).sqrt();
                        (ry - rx) / slope
                    };
                    let at = base + ((x + dx) * 1e9).round() as u64;
                    return Some((at.max(from_ns), 0.0));
                }
                area -= segment;
                x = b;
            }
            base += self.period_ns;
            x = 0.0;
        }
    }

    /// Requests from `x` seconds into the loop to its end.
    fn area_from(&self, x: f64) -> f64 {
        let mut sum = 0.0;
        for w in self.points.windows(2) {
            let ((a, ra), (b, rb)) = (w[0], w[1]);
            if x >= b {
                continue;
            }
            let from = x.max(a);
            let slope = if b > a { (rb - ra) / (b - a) } else { 0.0 };
            sum += (ra + slope * (from - a) + rb) / 2.0 * (b - from);
        }
        sum
    }
}

/// An open loop: arrivals at the curve's rate x the flow's scale.
#[derive(Debug, Clone)]
pub(crate) struct OpenLoop {
    curve: Curve,
    arrivals: Arrivals,
    /// Bumped when the pending arrival is replaced: an event of an older generation is void.
    pub(super) generation: u64,
    /// When the pending arrival's wait began, at which scale, and how many requests it waits for.
    last_ns: u64,
    last_scale: f64,
    needed: f64,
}

impl OpenLoop {
    /// The next arrival after one at `now`, at `scale` x the curve: its time, if the rate ever sends one.
    pub(super) fn next(&mut self, now: u64, scale: f64, rng: &mut StdRng) -> Option<u64> {
        let needed = match self.arrivals {
            Arrivals::Even => 1.0,
            // 1 - U is in (0, 1]: its logarithm is finite.
            Arrivals::Poisson => -(1.0 - rng.gen::<f64>()).ln(),
        };
        self.wait_for(now, needed, scale)
    }

    fn wait_for(&mut self, now: u64, needed: f64, scale: f64) -> Option<u64> {
        self.generation += 1;
        self.last_ns = now;
        self.last_scale = scale;
        self.needed = needed;
        if !scale.is_finite() || scale <= 0.0 {
            return None;
        }
        // At most one arrival every 20 µs (50,000 a second): a flow scaled past that cannot flood the run.
        self.curve
            .walk(now, needed / scale, None)
            .map(|(at, _)| at.max(now + MIN_GAP_NS))
    }

    /// The pending arrival again, at a new scale from `now`: what has accumulated at the old scale counts.
    pub(super) fn rescale(&mut self, now: u64, scale: f64, rng: &mut StdRng) -> Option<u64> {
        if self.arrivals == Arrivals::Poisson || self.last_scale.is_nan() || self.last_scale <= 0.0
        {
            // A Poisson process has no memory: a fresh draw from now is the same process.
            return self.next(now, scale, rng);
        }
        let left = self
            .curve
            .walk(self.last_ns, self.needed / self.last_scale, Some(now))
            .map_or(0.0, |(_, left)| left * self.last_scale);
        self.wait_for(now, left, scale)
    }
}

/// A closed loop of client threads.
#[derive(Debug, Clone)]
pub(crate) struct ClosedLoop {
    /// Threads as the scenario says, and how many of them this replica's share of the load runs.
    pub(super) configured: u32,
    pub(super) active: u32,
    pub(super) threads: Vec<Thread>,
    pub(super) bucket: Option<TokenBucket>,
}

/// One client thread.
#[derive(Debug, Clone, Default)]
pub(crate) struct Thread {
    /// Calls made so far.
    pub(super) calls: u64,
    /// A call of its is pending or in flight: it is running.
    pub(super) running: bool,
}

/// client-go's token bucket (`flowcontrol.NewTokenBucketRateLimiter`, golang.org/x/time/rate): `qps` tokens a
/// second up to `burst`; a call takes one, waiting for it when there is none (reservations queue up).
#[derive(Debug, Clone)]
pub(crate) struct TokenBucket {
    /// As the scenario gives them, and as this replica's share of the client runs them.
    configured_qps: f64,
    configured_burst: f64,
    qps: f64,
    burst: f64,
    tokens: f64,
    last_ns: u64,
}

impl TokenBucket {
    fn new(qps: f64, burst: u32) -> TokenBucket {
        TokenBucket {
            configured_qps: qps,
            configured_burst: f64::from(burst),
            qps,
            burst: f64::from(burst),
            tokens: f64::from(burst),
            last_ns: 0,
        }
    }

    /// The bucket of the replica's `share` of the client (a cluster splits a client's calls among its replicas):
    /// that share of its QPS and of its burst (at least one token).
    pub(super) fn share(&mut self, share: f64) {
        self.qps = self.configured_qps * share;
        self.burst = (self.configured_burst * share).max(1.0);
        self.tokens = self.tokens.min(self.burst);
    }

    /// Takes a token at `now`: how long the call waits for it (ns).
    pub(super) fn reserve(&mut self, now: u64) -> u64 {
        let elapsed = now.saturating_sub(self.last_ns) as f64 / 1e9;
        self.last_ns = self.last_ns.max(now);
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst) - 1.0;
        if self.tokens >= 0.0 {
            0
        } else if self.qps > 0.0 {
            (-self.tokens / self.qps * 1e9)
                .ceil()
                .min(u64::MAX as f64 / 4.0) as u64
        } else {
            // No share of the client's rate here: its calls never get a token.
            u64::MAX / 4
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;
    use rand::SeedableRng;

    fn open(rate: &str, arrivals: &str, period: &str) -> OpenLoop {
        let sc = Scenario::from_yaml(&format!(
            "duration: {period}\nflows:\n- {{name: a, user: u, duration: 1s, arrivals: {arrivals}, rate: {rate}}}\n"
        ))
        .unwrap();
        match Source::new(&sc.flows[0], sc.duration.as_nanos() as u64) {
            Source::Open(o) => o,
            Source::Closed(_) => unreachable!(),
        }
    }

    fn arrivals(o: &mut OpenLoop, until: u64, scale: f64) -> Vec<u64> {
        let mut rng = StdRng::seed_from_u64(1);
        let mut out = Vec::new();
        let mut now = 0;
        while let Some(at) = o.next(now, scale, &mut rng).filter(|&t| t <= until) {
            out.push(at);
            now = at;
        }
        out
    }

    #[test]
    fn even_arrivals_at_a_steady_rate_are_evenly_spaced() {
        let mut o = open("[{at: 0s, rps: 4}]", "even", "10s");
        let got = arrivals(&mut o, 25_000_000_000, 1.0);
        assert_eq!(got.len(), 100);
        assert_eq!(got[0], 250_000_000);
        assert!(
            got.windows(2).all(|w| w[1] - w[0] == 250_000_000),
            "{got:?}"
        );
        // At a third of the load, a third of the requests.
        let got = arrivals(&mut o, 30_000_000_000, 1.0 / 3.0);
        assert_eq!(got.len(), 40);
    }

    #[test]
    fn even_arrivals_on_a_ramp_come_when_the_area_is_whole() {
        // 0 to 10 rps over 10 s: n requests by t where 0.5 t^2 = n, i.e. t = sqrt(2n).
        let mut o = open("[{at: 0s, rps: 0}, {at: 10s, rps: 10}]", "even", "10s");
        let got = arrivals(&mut o, 9_999_000_000, 1.0);
        assert_eq!(got.len(), 49);
        for (i, at) in got.iter().enumerate() {
            let want = (2.0 * (i + 1) as f64).sqrt();
            assert!(
                (*at as f64 / 1e9 - want).abs() < 1e-6,
                "{i}: {at} vs {want}"
            );
        }
        // The loop starts again at 0 rps: the 50th comes at 10 s, the 51st sqrt(2) s later.
        let got = arrivals(&mut o, 11_500_000_000, 1.0);
        assert_eq!(got.len(), 51);
        assert!((got[50] as f64 / 1e9 - (10.0 + 2f64.sqrt())).abs() < 1e-6);
    }

    #[test]
    fn poisson_arrivals_average_the_rate() {
        let mut o = open("[{at: 0s, rps: 50}]", "poisson", "300s");
        let got = arrivals(&mut o, 200_000_000_000, 1.0);
        let n = got.len() as f64;
        // 10,000 expected; a Poisson count scatters by its square root, 100.
        assert!((n - 10_000.0).abs() < 400.0, "{n}");
        // Gaps are exponential: their coefficient of variation is 1 (even ones have 0).
        let gaps: Vec<f64> = got.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
        assert!((sd / mean - 1.0).abs() < 0.05, "{}", sd / mean);
    }

    #[test]
    fn a_silent_curve_sends_nothing_and_a_silent_stretch_is_skipped() {
        let mut o = open("[{at: 0s, rps: 0}]", "even", "10s");
        assert!(arrivals(&mut o, u64::MAX / 2, 1.0).is_empty());
        assert!(arrivals(&mut open("[{at: 0s, rps: 5}]", "even", "10s"), 1 << 40, 0.0).is_empty());
        // Silent for 9 s of every 10: the first request 9.2 s in.
        let mut o = open(
            "[{at: 0s, rps: 0}, {at: 9s, rps: 0}, {at: 9s, rps: 5}]",
            "even",
            "10s",
        );
        assert_eq!(arrivals(&mut o, 9_300_000_000, 1.0), vec![9_200_000_000]);
    }

    #[test]
    fn a_new_scale_keeps_what_has_accumulated() {
        // 1 rps; half a request accumulated by 0.5 s, then 4x the rate: the rest comes 0.125 s later.
        let mut o = open("[{at: 0s, rps: 1}]", "even", "10s");
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(o.next(0, 1.0, &mut rng), Some(1_000_000_000));
        assert_eq!(o.rescale(500_000_000, 4.0, &mut rng), Some(625_000_000));
    }

    #[test]
    fn the_token_bucket_lets_a_burst_through_then_paces_at_qps() {
        let mut b = TokenBucket::new(5.0, 2);
        let waits: Vec<u64> = (0..5).map(|_| b.reserve(0)).collect();
        assert_eq!(waits, vec![0, 0, 200_000_000, 400_000_000, 600_000_000]);
        // A second later, 5 tokens have come and 3 were owed: 2 are left.
        let mut b = TokenBucket::new(5.0, 2);
        for _ in 0..5 {
            b.reserve(0);
        }
        assert_eq!(b.reserve(1_000_000_000), 0);
        assert_eq!(b.reserve(1_000_000_000), 0);
        assert_eq!(b.reserve(1_000_000_000), 200_000_000);
    }
}
