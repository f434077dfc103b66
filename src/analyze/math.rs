//! Counter increases with resets, histogram quantiles, and a trend robust to outliers.

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
    let bounds = last.bounds.iter().copied();
    match first {
        Some(first) if first.counts.len() == last.counts.len() && first.count <= last.count => {
            bounds
                .zip(last.counts.iter().zip(first.counts))
                .map(|(le, (c, p))| (le, (c - p).max(0.0)))
                .collect()
        }
        _ => bounds.zip(last.counts.iter().copied()).collect(),
    }
}

/// The share of a cumulative histogram's observations above `x`, interpolated linearly inside the bucket holding
/// `x` (as `histogram_quantile` does). For a timing histogram, whose counts are time, it is the share of the time.
/// `None` when it holds no observation.
pub fn share_above(x: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 || !total.is_finite() {
        return None;
    }
    let mut lower = 0.0;
    let mut below = 0.0;
    for &(le, count) in buckets {
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

/// The Theil-Sen slope: the median of the slopes between every pair of points. One outlier cannot move it much,
/// unlike a least-squares fit. `None` for fewer than two distinct times.
pub fn theil_sen_slope(points: &[(f64, f64)]) -> Option<f64> {
    let mut slopes = Vec::with_capacity(points.len() * points.len() / 2);
    for (i, a) in points.iter().enumerate() {
        for b in &points[i + 1..] {
            let dt = b.0 - a.0;
            if dt.abs() > 1e-9 {
                slopes.push((b.1 - a.1) / dt);
            }
        }
    }
    if slopes.is_empty() {
        return None;
    }
    // The median by selection, not a sort: a window of 250 ms scrapes has 240 points, 28,680 slopes per level.
    let (len, mid) = (slopes.len(), slopes.len() / 2);
    let (below, upper, _) = slopes.select_nth_unstable_by(mid, f64::total_cmp);
    Some(if len % 2 == 0 {
        // The `mid` slopes below the upper middle one: the largest of them is the lower middle.
        let lower = below.iter().copied().max_by(f64::total_cmp)?;
        (lower + *upper) / 2.0
    } else {
        *upper
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn theil_sen_ignores_one_outlier() {
        let mut pts: Vec<(f64, f64)> = (0..12)
            .map(|i| (i as f64 * 5.0, 100.0 - i as f64 * 5.0))
            .collect();
        pts[6].1 = 500.0;
        let slope = theil_sen_slope(&pts).unwrap();
        assert!((slope + 1.0).abs() < 0.05, "{slope}");
        assert_eq!(theil_sen_slope(&[(1.0, 1.0)]), None);
    }

    #[test]
    fn theil_sen_is_the_median_of_the_sorted_slopes() {
        // Seats that wander (a linear congruential sequence), odd and even counts of slopes, repeated times.
        let mut seed: u64 = 7;
        for n in 2..40 {
            let pts: Vec<(f64, f64)> = (0..n)
                .map(|i| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((i / 3) as f64, (seed >> 54) as f64)
                })
                .collect();
            let mut slopes: Vec<f64> = Vec::new();
            for (i, a) in pts.iter().enumerate() {
                for b in &pts[i + 1..] {
                    if (b.0 - a.0).abs() > 1e-9 {
                        slopes.push((b.1 - a.1) / (b.0 - a.0));
                    }
                }
            }
            slopes.sort_by(f64::total_cmp);
            let m = slopes.len() / 2;
            let median = match slopes.len() {
                0 => None,
                l if l % 2 == 0 => Some((slopes[m - 1] + slopes[m]) / 2.0),
                _ => Some(slopes[m]),
            };
            assert_eq!(theil_sen_slope(&pts), median, "{n} points");
        }
    }
}
