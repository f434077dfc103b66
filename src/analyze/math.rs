//! Counter increases with resets, histogram quantiles, and the trend of a series' latest stretch.

/// Increase of a counter over successive samples, Prometheus style: a drop means the process restarted and the
/// counter began again from 0. `None` is a sample where the series was absent (no increase counted across it).
pub fn counter_increase(samples: impl IntoIterator<Item = Option<f64>>) -> f64 {
    let mut total = 0.0;
    let mut prev: Option<f64> = None;
    for cur in samples {
        if let (Some(p), Some(c)) = (prev, cur) {
            total += if c >= p { c - p } else { c };
        }
        prev = cur;
    }
    total
}

/// A counter's increase per second over the samples it has in the window, `(at, value)` in time order: from its
/// first sample to its last, as Prometheus' `rate()` reads a series over its own samples. A level or flow schema
/// made inside the window is not diluted by the time before it existed. 0 with fewer than two samples.
pub fn counter_rate(samples: impl IntoIterator<Item = (f64, Option<f64>)>) -> f64 {
    let mut first: Option<f64> = None;
    let mut last: Option<f64> = None;
    let values = samples.into_iter().map(|(at, v)| {
        if v.is_some() {
            first.get_or_insert(at);
            last = Some(at);
        }
        v
    });
    let increase = counter_increase(values);
    match (first, last) {
        (Some(f), Some(l)) if l > f => increase / (l - f),
        _ => 0.0,
    }
}

/// The `q` quantile of a cumulative histogram, interpolated linearly inside the bucket as Prometheus'
/// `histogram_quantile` does. `None` when it holds no observation.
pub fn histogram_quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 || !total.is_finite() {
        return None;
    }
    let rank = q * total;
    let mut lower = 0.0;
    let mut below = 0.0;
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                // Beyond the last finite bound: that bound is all that can be said.
                return Some(lower);
            }
            let in_bucket = count - below;
            if in_bucket <= 0.0 {
                return Some(le);
            }
            return Some(lower + (le - lower) * (rank - below) / in_bucket);
        }
        lower = le;
        below = count;
    }
    Some(lower)
}

/// A cumulative histogram as the window holds it: its buckets' upper bounds (`+Inf` last) and their cumulative counts,
/// borrowed, and its count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Buckets<'a> {
    pub bounds: &'a [f64],
    pub counts: &'a [f64],
    pub count: f64,
}

/// The quantile of what was observed between two scrapes (after a reset: of the later one alone).
pub fn histogram_delta_quantile(
    first: Option<Buckets<'_>>,
    last: Option<Buckets<'_>>,
    q: f64,
) -> Option<f64> {
    histogram_quantile(q, &histogram_delta(first, last?))
}

/// What was observed between two scrapes, as cumulative buckets (after a reset: the later scrape's alone).
pub fn histogram_delta(first: Option<Buckets<'_>>, last: Buckets<'_>) -> Vec<(f64, f64)> {
    delta_buckets(first, last).collect()
}

/// [`histogram_delta`] without gathering it: read once where it is read once (a fleet's every level, every scrape).
fn delta_buckets<'a>(
    first: Option<Buckets<'a>>,
    last: Buckets<'a>,
) -> impl Iterator<Item = (f64, f64)> + Clone + 'a {
    let before = first.filter(|f| f.counts.len() == last.counts.len() && f.count <= last.count);
    last.bounds
        .iter()
        .zip(last.counts)
        .enumerate()
        .map(move |(i, (le, c))| {
            let p = before.map_or(0.0, |f| f.counts[i]);
            (*le, (c - p).max(0.0))
        })
}

/// [`share_above`] of what was observed between two scrapes.
pub fn share_above_between(x: f64, first: Option<Buckets<'_>>, last: Buckets<'_>) -> Option<f64> {
    share_above_of(x, delta_buckets(first, last))
}

/// The share of a cumulative histogram's observations above `x`, interpolated linearly inside the bucket holding
/// `x` (as `histogram_quantile` does). For a timing histogram, whose counts are time, it is the share of the time.
/// `None` when it holds no observation.
pub fn share_above(x: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    share_above_of(x, buckets.iter().copied())
}

fn share_above_of(x: f64, buckets: impl Iterator<Item = (f64, f64)> + Clone) -> Option<f64> {
    let total = buckets.clone().last()?.1;
    if total <= 0.0 || !total.is_finite() {
        return None;
    }
    let mut lower = 0.0;
    let mut below = 0.0;
    for (le, count) in buckets {
        if x < le {
            let at_or_below = if le.is_infinite() || x <= lower {
                below
            } else {
                below + (count - below) * (x - lower) / (le - lower)
            };
            return Some((1.0 - at_or_below / total).clamp(0.0, 1.0));
        }
        lower = le;
        below = count;
    }
    Some((1.0 - below / total).clamp(0.0, 1.0))
}

/// The straight line through the latest stretch of a series: the samples since its last change of regime (a level
/// that idled for a minute and then began to fill is fitted on the filling alone). Seats in use are a gauge of whole
/// seats; the fit is least squares, the stretch found by splitting the series where two lines explain it better than
/// one ([`latest_trend`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trend {
    /// Change per second.
    pub slope: f64,
    /// The slope's standard error: the scatter about the lines of every stretch of the window (one gauge, one
    /// noise), the stretch's own when it is larger, and never less than the rounding of a whole seat.
    pub slope_error: f64,
    /// The line's value at the last sample (not the sample itself: one reading is one seat off, or more).
    pub last: f64,
    /// Times of the stretch's first and last samples, and how many samples it holds.
    pub since: f64,
    pub until: f64,
    pub samples: usize,
    /// How many standard errors above zero the slope must be to count as rising: [`MIN_SIGNIFICANCE`], more when
    /// the scatter was read off few samples.
    pub significance: f64,
}

/// The fewest samples a stretch is fitted on: three leave one degree of freedom, and a line through three noisy
/// samples is steep as often as not.
const MIN_STRETCH: usize = 4;

/// A gauge of whole seats read off a quantity that rises smoothly is off by up to half a seat: a standard deviation of
/// 1/sqrt(12). No fit is trusted to be closer than that.
const ROUNDING_VARIANCE: f64 = 1.0 / 12.0;

/// Seats in use move by a seat either way as single requests start and end around the instant they are read, however
/// steady the load: a second line must explain more than that scatter (a seat squared per sample) to split a series.
const SPLIT_VARIANCE: f64 = 1.0;

/// A slope counts as rising only this many standard errors above zero ...
const MIN_SIGNIFICANCE: f64 = 5.0;

/// ... or more where the scatter it is measured against was read off few samples (a cold start): Student's t that
/// noise exceeds once in a thousand, by the degrees of freedom of that scatter (1 to 6; beyond, 5 is stricter).
const SIGNIFICANCE_FEW: [f64; 6] = [318.31, 22.327, 10.215, 7.173, 5.893, 5.208];

impl Trend {
    /// Seconds from the stretch's first sample to its last.
    pub fn span(&self) -> f64 {
        self.until - self.since
    }

    /// Mean time between its samples.
    pub fn spacing(&self) -> f64 {
        self.span() / self.samples.saturating_sub(1).max(1) as f64
    }

    /// Seconds until the line reaches `ceiling`, once it is known well enough to say: rising by more than
    /// [`Trend::significance`] standard errors, and with the estimate's own standard error under the time between
    /// samples (a second at least). Then a scrape moves the estimate by less than the time that passed, and on a
    /// steady ramp it only falls; an exhaustion seconds away is said within a few samples, one minutes away once
    /// the ramp has lasted long enough to tell it from noise. `None` while the line is not rising or not yet known.
    pub fn seconds_to(&self, ceiling: f64) -> Option<f64> {
        if self.slope.is_nan()
            || self.slope <= 0.0
            || self.slope < self.significance * self.slope_error
        {
            return None;
        }
        let seconds = ((ceiling - self.last) / self.slope).max(0.0);
        // The standard error of `seconds` is `seconds` times the slope's relative error.
        let error = seconds * self.slope_error / self.slope;
        (error <= self.spacing().max(1.0)).then_some(seconds)
    }
}

/// Prefix sums of a series, times taken from its first sample and values from its first value (no cancellation):
/// any stretch's least-squares line in constant time.
struct Sums {
    /// Per prefix: n, sum t, sum y, sum t^2, sum ty, sum y^2.
    prefix: Vec<[f64; 6]>,
    t0: f64,
    y0: f64,
}

/// A stretch's least-squares line: its slope, the sum of squared residuals, the spread of its times (sum of squared
/// deviations from their mean), and the means.
struct Fit {
    slope: f64,
    residual: f64,
    spread: f64,
    mean_t: f64,
    mean_y: f64,
}

impl Sums {
    fn new(points: &[(f64, f64)]) -> Self {
        let (t0, y0) = points.first().copied().unwrap_or_default();
        let mut prefix = Vec::with_capacity(points.len() + 1);
        let mut acc = [0.0; 6];
        prefix.push(acc);
        for &(t, y) in points {
            let (t, y) = (t - t0, y - y0);
            for (a, v) in acc.iter_mut().zip([1.0, t, y, t * t, t * y, y * y]) {
                *a += v;
            }
            prefix.push(acc);
        }
        Sums { prefix, t0, y0 }
    }

    /// The line of samples `from..to`; its times all alike, a flat line at their mean.
    fn fit(&self, from: usize, to: usize) -> Fit {
        let (a, b) = (&self.prefix[from], &self.prefix[to]);
        let [n, t, y, tt, ty, yy] = std::array::from_fn(|i| b[i] - a[i]);
        let n = n.max(1.0);
        let spread = (tt - t * t / n).max(0.0);
        let covariance = ty - t * y / n;
        let variance = (yy - y * y / n).max(0.0);
        let slope = if spread > 1e-12 {
            covariance / spread
        } else {
            0.0
        };
        Fit {
            slope,
            residual: (variance - slope * covariance).max(0.0),
            spread,
            mean_t: t / n + self.t0,
            mean_y: y / n + self.y0,
        }
    }

    fn residual(&self, from: usize, to: usize) -> f64 {
        if to - from < 3 {
            // Two samples or fewer lie on their line.
            return 0.0;
        }
        self.fit(from, to).residual
    }
}

/// The line of a series' latest stretch ([`Trend`]), its samples in time order. The series is split where a second
/// line explains it better than one by Schwarz's criterion (the second line and where it starts, three numbers, must
/// pay for themselves), again and again in its latest part, so a level that idled, rose, paused and rose again is
/// fitted on its last rise. `None` with fewer than [`MIN_STRETCH`] samples or their times all alike.
pub fn latest_trend(points: &[(f64, f64)]) -> Option<Trend> {
    let n = points.len();
    if n < MIN_STRETCH {
        return None;
    }
    let sums = Sums::new(points);
    // Where the latest stretch starts, and the residuals of the stretches before it.
    let (mut from, mut before, mut stretches) = (0, 0.0, 1);
    while n - from >= MIN_STRETCH + 2 {
        let m = (n - from) as f64;
        // The scatter of a steady gauge keeps a perfect fit from being infinitely better than a near one.
        let floor = m * SPLIT_VARIANCE;
        let one = sums.residual(from, n) + floor;
        let Some((two, at)) = (from + 2..=n - MIN_STRETCH)
            .map(|k| (sums.residual(from, k) + sums.residual(k, n) + floor, k))
            .min_by(|a, b| a.0.total_cmp(&b.0))
        else {
            break;
        };
        if m * (one / m).ln() - m * (two / m).ln() <= 3.0 * m.ln() {
            break;
        }
        before += sums.residual(from, at);
        stretches += 1;
        from = at;
    }
    let fit = sums.fit(from, n);
    if fit.spread <= 1e-12 {
        return None;
    }
    let samples = n - from;
    // The scatter about the lines, with the degrees of freedom it was read with: the stretch's own, that of every
    // stretch of the window (one gauge, one noise) when larger, or the rounding of whole seats, known exactly.
    let own = (fit.residual / (samples - 2) as f64, samples - 2);
    let dof = n.saturating_sub(2 * stretches);
    let pooled = if dof > 0 {
        ((before + fit.residual) / dof as f64, dof)
    } else {
        (0.0, 0)
    };
    let (variance, dof) = [own, pooled, (ROUNDING_VARIANCE, usize::MAX)]
        .into_iter()
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .unwrap_or((ROUNDING_VARIANCE, usize::MAX));
    let significance = dof
        .checked_sub(1)
        .and_then(|i| SIGNIFICANCE_FEW.get(i))
        .map_or(MIN_SIGNIFICANCE, |t| t.max(MIN_SIGNIFICANCE));
    let (first, last) = (points[from].0, points[n - 1].0);
    Some(Trend {
        slope: fit.slope,
        slope_error: (variance / fit.spread).sqrt(),
        last: fit.mean_y + fit.slope * (last - fit.mean_t),
        since: first,
        until: last,
        samples,
        significance,
    })
}

/// How a counter of arrivals moved over a window of (time, value) samples, when it came in bursts: each interval
/// between two samples as (seconds, its rate as a multiple of the window's mean), in order. `None` when the
/// arrivals were as steady as a Poisson process's (a dispersion index, the mean of each interval's squared
/// deviation from the mean rate over its Poisson variance, under [`BURSTY`]), when there are too few intervals
/// ([`BURST_INTERVALS`]) or arrivals to tell, or the counter has a gap. A reset counts what came after it.
pub fn bursts(samples: &[(f64, Option<f64>)]) -> Option<Vec<(f64, f64)>> {
    let mut intervals = Vec::new();
    for w in samples.windows(2) {
        let ((t0, v0), (t1, v1)) = (w[0], w[1]);
        let (v0, v1) = (v0?, v1?);
        let seconds = t1 - t0;
        if !(seconds > 0.0 && v0.is_finite() && v1.is_finite()) {
            return None;
        }
        intervals.push((seconds, if v1 >= v0 { v1 - v0 } else { v1 }));
    }
    let (time, count) = intervals
        .iter()
        .fold((0.0, 0.0), |(t, n), (s, c)| (t + s, n + c));
    if intervals.len() < BURST_INTERVALS || count < BURST_ARRIVALS {
        return None;
    }
    let mean = count / time;
    let dispersion = intervals
        .iter()
        .map(|(s, c)| (c - mean * s).powi(2) / (mean * s))
        .sum::<f64>()
        / intervals.len() as f64;
    (dispersion >= BURSTY).then(|| {
        intervals
            .into_iter()
            .map(|(s, c)| (s, c / s / mean))
            .collect()
    })
}

/// The dispersion index from which arrivals count as bursts: a Poisson process's is 1, and its mean over a few
/// dozen intervals rarely passes 2.
pub const BURSTY: f64 = 4.0;
/// Intervals needed to tell bursts from chance.
pub const BURST_INTERVALS: usize = 6;
/// Arrivals needed to tell bursts from chance.
pub const BURST_ARRIVALS: f64 = 50.0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_made_inside_the_window_is_rated_over_its_own_samples() {
        // Made at 40 s of a minute: 30 in 20 s is 1.5/s, not 0.5/s over the whole minute.
        let samples = [
            (0.0, None),
            (20.0, None),
            (40.0, Some(10.0)),
            (50.0, Some(25.0)),
            (60.0, Some(40.0)),
        ];
        assert_eq!(counter_rate(samples), 1.5);
        // A reset counts what came after it; one sample or none is no rate.
        assert_eq!(counter_rate([(0.0, Some(10.0)), (10.0, Some(4.0))]), 0.4);
        assert_eq!(counter_rate([(0.0, None), (10.0, Some(4.0))]), 0.0);
    }

    #[test]
    fn share_above_a_threshold_of_a_timing_histogram() {
        // A minute of seat utilization, in seconds: 59.3 s at 10 %, 0.7 s full.
        let b = [
            (0.1, 59.3),
            (0.5, 59.3),
            (0.8, 59.3),
            (1.0, 60.0),
            (f64::INFINITY, 60.0),
        ];
        let share = share_above(0.8, &b).unwrap();
        assert!((share - 0.7 / 60.0).abs() < 1e-9, "{share}");
        // Inside a bucket, linearly: half of (0.8, 1.0] is above 0.9.
        assert!((share_above(0.9, &b).unwrap() - 0.35 / 60.0).abs() < 1e-9);
        // Observations of a bucket are spread over it: all of (0, 0.1] is above 0.
        assert_eq!(share_above(0.0, &b), Some(1.0));
        assert_eq!(share_above(1.0, &b), Some(0.0));
        assert_eq!(share_above(0.5, &[(1.0, 0.0), (f64::INFINITY, 0.0)]), None);
        assert_eq!(share_above(0.5, &[]), None);
    }

    /// Bursts (2 s of 1,000 requests a second in every 20 s, scraped every second) are told from a steady Poisson
    /// rate of the same mean, whose chance ups and downs are not bursts; too few intervals or arrivals tell
    /// nothing, nor a gap.
    #[test]
    fn bursts_are_told_from_a_poisson_rate() {
        let counter = |rates: &[f64]| -> Vec<(f64, Option<f64>)> {
            let mut total = 0.0;
            let mut out = vec![(0.0, Some(0.0))];
            for (i, r) in rates.iter().enumerate() {
                total += r;
                out.push(((i + 1) as f64, Some(total)));
            }
            out
        };
        let bursty: Vec<f64> = (0..60)
            .map(|s| if s % 20 < 2 { 1000.0 } else { 0.0 })
            .collect();
        let profile = bursts(&counter(&bursty)).unwrap();
        assert_eq!(profile.len(), 60);
        assert_eq!(profile[0], (1.0, 10.0));
        assert_eq!(profile[2], (1.0, 0.0));
        // Poisson at 100/s: counts a second within a few standard deviations (10) of 100.
        let poisson: Vec<f64> = (0..60)
            .map(|s| 100.0 + [-12.0, 5.0, 9.0, -3.0, -8.0, 14.0, 0.0, -6.0][s % 8])
            .collect();
        assert_eq!(bursts(&counter(&poisson)), None);
        assert_eq!(bursts(&counter(&bursty[..4])), None);
        assert_eq!(
            bursts(&counter(&[5.0, 0.0, 0.0, 0.0, 0.0, 20.0, 0.0])),
            None
        );
        let mut gap = counter(&bursty);
        gap[10].1 = None;
        assert_eq!(bursts(&gap), None);
        // A reset: what came after it counts.
        let mut reset = counter(&bursty);
        for p in reset.iter_mut().skip(30) {
            p.1 = p.1.map(|v| v - 3000.0);
        }
        assert_eq!(bursts(&reset).unwrap().len(), 60);
    }

    #[test]
    fn counter_increase_handles_resets_and_gaps() {
        let s = |v: &[Option<f64>]| counter_increase(v.iter().copied());
        assert_eq!(s(&[Some(10.0), Some(15.0), Some(20.0)]), 10.0);
        // Restart: 20 -> 3 means 3 new since the reset.
        assert_eq!(s(&[Some(10.0), Some(20.0), Some(3.0), Some(5.0)]), 15.0);
        assert_eq!(s(&[Some(10.0), None, Some(12.0)]), 0.0);
        assert_eq!(s(&[]), 0.0);
    }

    #[test]
    fn quantile_like_prometheus() {
        let b = [
            (0.1, 50.0),
            (0.5, 90.0),
            (1.0, 100.0),
            (f64::INFINITY, 100.0),
        ];
        assert!((histogram_quantile(0.5, &b).unwrap() - 0.1).abs() < 1e-9);
        // rank 99 falls in (0.5, 1.0] which holds 10: 0.5 + 0.5 * 9/10.
        assert!((histogram_quantile(0.99, &b).unwrap() - 0.95).abs() < 1e-9);
        assert_eq!(
            histogram_quantile(0.99, &[(1.0, 0.0), (f64::INFINITY, 0.0)]),
            None
        );
        assert_eq!(
            histogram_quantile(0.99, &[(1.0, 1.0), (f64::INFINITY, 100.0)]),
            Some(1.0)
        );
    }

    #[test]
    fn delta_quantile_uses_what_happened_in_the_window() {
        const BOUNDS: [f64; 3] = [0.1, 1.0, f64::INFINITY];
        let h = |c: &'static [f64; 3]| Buckets {
            bounds: &BOUNDS,
            counts: c,
            count: c[2],
        };
        // Before: 1000 fast requests. In the window: 10 requests, all between 0.1 and 1 s.
        let q = histogram_delta_quantile(
            Some(h(&[1000.0, 1000.0, 1000.0])),
            Some(h(&[1000.0, 1010.0, 1010.0])),
            0.99,
        );
        assert!(q.unwrap() > 0.1, "{q:?}");
        assert_eq!(
            histogram_delta(
                Some(h(&[1000.0, 1000.0, 1000.0])),
                h(&[1000.0, 1010.0, 1010.0])
            ),
            vec![(0.1, 0.0), (1.0, 10.0), (f64::INFINITY, 10.0)]
        );
        // The share above a bound of what happened between them, read without gathering the delta.
        assert_eq!(
            share_above_between(
                0.1,
                Some(h(&[1000.0, 1000.0, 1000.0])),
                h(&[1000.0, 1010.0, 1010.0])
            ),
            share_above(0.1, &[(0.1, 0.0), (1.0, 10.0), (f64::INFINITY, 10.0)])
        );
        assert_eq!(
            share_above_between(
                0.1,
                Some(h(&[1000.0, 1000.0, 1000.0])),
                h(&[1000.0, 1000.0, 1000.0])
            ),
            None
        );
        // After a reset the later histogram stands alone.
        let q = histogram_delta_quantile(
            Some(h(&[1000.0, 1000.0, 1000.0])),
            Some(h(&[0.0, 10.0, 10.0])),
            0.5,
        );
        assert!(q.unwrap() > 0.1);
        assert_eq!(
            histogram_delta(Some(h(&[1000.0, 1000.0, 1000.0])), h(&[0.0, 10.0, 10.0])),
            vec![(0.1, 0.0), (1.0, 10.0), (f64::INFINITY, 10.0)]
        );
    }

    #[test]
    fn the_latest_stretch_is_fitted_alone() {
        // 40 s flat at 100, then 5 a second: the line of the rise, from the knee.
        let pts: Vec<(f64, f64)> = (0..=50)
            .map(|t| {
                let t = f64::from(t);
                (t, 100.0 + 5.0 * (t - 40.0).max(0.0))
            })
            .collect();
        let trend = latest_trend(&pts).unwrap();
        assert!((trend.slope - 5.0).abs() < 1e-6, "{trend:?}");
        assert!((39.0..=41.0).contains(&trend.since), "{trend:?}");
        assert!((trend.last - 150.0).abs() < 1e-6, "{trend:?}");
        assert_eq!((trend.spacing(), trend.span()), (1.0, 50.0 - trend.since));
        // 150 to 200 at 5 a second: 10 s.
        assert!((trend.seconds_to(200.0).unwrap() - 10.0).abs() < 1e-6);
        // One straight line is not split.
        let line: Vec<(f64, f64)> = (0..30)
            .map(|t| (f64::from(t), 2.0 * f64::from(t)))
            .collect();
        assert_eq!(latest_trend(&line).unwrap().samples, 30);
    }

    #[test]
    fn too_few_samples_or_one_instant_give_no_trend() {
        assert_eq!(latest_trend(&[(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)]), None);
        assert_eq!(latest_trend(&[(5.0, 1.0); 8]), None);
        // Falling or flat: known, but no time to a ceiling.
        let falling: Vec<(f64, f64)> = (0..10).map(|t| (f64::from(t), -f64::from(t))).collect();
        assert_eq!(latest_trend(&falling).unwrap().seconds_to(100.0), None);
    }

    #[test]
    fn a_rise_within_the_noise_or_known_too_roughly_is_not_told() {
        // Four samples rising a seat a second: certainly rising, but 142 s away is known only to within 18 s.
        let slow: Vec<(f64, f64)> = (0..4)
            .map(|t| (f64::from(t), 100.0 + f64::from(t)))
            .collect();
        assert_eq!(latest_trend(&slow).unwrap().seconds_to(245.0), None);
        // The same rise over a minute says 86 s to within a second.
        let long: Vec<(f64, f64)> = (0..60)
            .map(|t| (f64::from(t), 100.0 + f64::from(t)))
            .collect();
        let s = latest_trend(&long).unwrap().seconds_to(245.0).unwrap();
        assert!((s - 86.0).abs() < 1e-6, "{s}");
        // A level past its ceiling has no time left, never a negative one.
        assert_eq!(latest_trend(&long).unwrap().seconds_to(120.0), Some(0.0));
    }
}
