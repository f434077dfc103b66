//! The seat limits kube-apiserver gives each priority level from the shares of all of them.
//!
//! As `finishQueueSetReconfigsLocked` and `plSpecCommons` in kubernetes/kubernetes
//! staging/src/k8s.io/apiserver/pkg/util/flowcontrol/apf_controller.go compute them, for ServerCL =
//! --max-requests-inflight + --max-mutating-requests-inflight:
//! - NominalCL = ceil(ServerCL × NCS / Σ NCS), the sum over every level, exempt included (its NCS defaults to 0);
//! - LendableCL = round(NominalCL × lendablePercent / 100);
//! - BorrowingCL = round(NominalCL × borrowingLimitPercent / 100), or ServerCL when borrowingLimitPercent is unset
//!   (always so for exempt);
//! - lower (minCL) = NominalCL − LendableCL, upper (maxCL) = NominalCL + BorrowingCL;
//! - a level's first CurrentCL = NominalCL − LendableCL / 2 (integer division).
//!
//! Go's `math.Round` rounds half away from zero, as `f64::round` does.

use super::{KubeVersion, PriorityLevelConfig};

/// How long a request may wait in its queue by default: a quarter of what is left of its deadline, at most a minute
/// (`getRequestWaitContext`, staging/src/k8s.io/apiserver/pkg/server/filters/priority-and-fairness.go), so 15 s of
/// the default 60 s `--request-timeout`. Past it the request is rejected (`time-out`).
pub const QUEUE_WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(15);

/// The configured seat limits of one priority level, as `apiserver_flowcontrol_*_limit_seats` report them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeatLimits {
    /// NominalCL: `nominal_limit_seats`.
    pub nominal: u32,
    /// LendableCL: the seats other levels may borrow from this one.
    pub lendable: u32,
    /// BorrowingCL: the seats this level may borrow from others.
    pub borrowing: u32,
    /// NominalCL − LendableCL: `lower_limit_seats`.
    pub lower: u32,
    /// NominalCL + BorrowingCL: `upper_limit_seats`.
    pub upper: u32,
}

impl SeatLimits {
    /// The CurrentCL a level starts with, before the first borrowing adjustment (1.26+; before 1.26 there is no
    /// lendablePercent, so this is NominalCL).
    pub fn initial_current(&self) -> u32 {
        self.nominal - self.lendable / 2
    }
}

/// NominalCL = ceil(ServerCL × shares / Σ shares); 0 when no level has shares (kube-apiserver always has catch-all's).
/// Integer arithmetic gives Go's float64 result: the quotient is exact where it is whole and far from whole elsewhere.
pub fn nominal_limit(server_cl: u32, shares: u32, sum_shares: u64) -> u32 {
    if sum_shares == 0 {
        return 0;
    }
    let nominal = (u64::from(server_cl) * u64::from(shares)).div_ceil(sum_shares);
    // shares ≤ Σ shares keeps it within ServerCL; saturate rather than wrap if a caller passes a smaller sum.
    u32::try_from(nominal).unwrap_or(u32::MAX)
}

/// round(nominal × percent / 100), in float64 as kube-apiserver computes it.
fn percent_of(nominal: u32, percent: u32) -> u32 {
    // `as` saturates: a percent beyond anything validation allows cannot wrap.
    (f64::from(nominal) * f64::from(percent) / 100.0).round() as u32
}

/// The seat limits of every level, in the order given, for a server concurrency limit of `server_cl`. Fields the
/// objects leave out take the API's defaults ([`PriorityLevelConfig::shares_or_default`]).
pub fn seat_limits(levels: &[PriorityLevelConfig], server_cl: u32) -> Vec<SeatLimits> {
    let sum_shares: u64 = levels
        .iter()
        .map(|l| u64::from(l.shares_or_default()))
        .sum();
    levels
        .iter()
        .map(|l| {
            let nominal = nominal_limit(server_cl, l.shares_or_default(), sum_shares);
            // Validation keeps lendablePercent within 0..=100, so LendableCL never exceeds NominalCL.
            let lendable = percent_of(nominal, l.lendable_percent_or_default()).min(nominal);
            let borrowing = match (l.exempt, l.borrowing_limit_percent) {
                (false, Some(percent)) => percent_of(nominal, percent),
                _ => server_cl,
            };
            SeatLimits {
                nominal,
                lendable,
                borrowing,
                lower: nominal - lendable,
                upper: nominal.saturating_add(borrowing),
            }
        })
        .collect()
}

/// The per-level cap on the seats of one request: 1 before 1.23 (no width), 10 globally from 1.23, and from 1.26
/// (the 1.28 rule, backported to late 1.26/1.27 patches) `max(1, min(ceil(0.15·Nominal), Nominal/handSize))`, at
/// most 10 (finishQueueSetReconfigsLocked, as above; the work estimator caps at 10). Only levels with queues get a
/// cap of their own: for a Reject level the estimator finds none and uses its global 10 (`maxSeats == 0` in
/// staging/src/k8s.io/apiserver/pkg/util/flowcontrol/request/list_work_estimator.go).
pub fn max_seats(v: KubeVersion, pl: &PriorityLevelConfig, nominal: u32) -> u32 {
    if !v.at_least(23) {
        return 1;
    }
    if !v.at_least(26) || pl.rejects() {
        return 10;
    }
    let fifteen = (u64::from(nominal) * 15).div_ceil(100);
    let fifteen = u32::try_from(fifteen).unwrap_or(u32::MAX);
    let per_hand = pl
        .hand_size
        .and_then(|h| nominal.checked_div(h))
        .unwrap_or(fifteen);
    fifteen.min(per_hand).clamp(1, 10)
}

/// Seats one LIST costs, as kube-apiserver's work estimator prices it (k8s.io/apiserver
/// `pkg/util/flowcontrol/request/list_work_estimator.go`): before 1.23 every request is one seat; from 1.23
/// `ceil(objects / 100)`, 1 to 10; from 1.34 (`SizeBasedListCostEstimate`, on by default) `ceil(bytes / 100 000)`,
/// 1 to 100. The level's own cap ([`max_seats`]) may lower it further. `None` when what the estimate needs is not
/// known.
pub fn list_seats(minor: u32, objects: Option<f64>, bytes: Option<f64>) -> Option<u32> {
    if minor < 23 {
        return Some(1);
    }
    let (amount, per_seat, cap) = if minor >= 34 {
        (bytes?, 100_000.0, 100.0)
    } else {
        (objects?, 100.0, 10.0)
    };
    if !amount.is_finite() || amount < 0.0 {
        return None;
    }
    // Bounded by `cap` before the conversion.
    Some((amount / per_seat).ceil().clamp(1.0, cap) as u32)
}

/// The seats one share is worth on a replica, inferred from levels whose shares are known: (shares, reported
/// NominalCL) pairs. `None` unless every pair agrees with NominalCL = ceil(ServerCL × shares / Σ shares) for one
/// worth (the shares were changed, or a level is missing), or no pair tells anything.
pub fn seats_per_share(known: &[(u32, f64)]) -> Option<f64> {
    let known: Vec<(f64, f64)> = known
        .iter()
        .filter(|(shares, nominal)| *shares > 0 && *nominal > 0.0)
        .map(|&(shares, nominal)| (f64::from(shares), nominal))
        .collect();
    // The level with the most shares gives the estimate least bent by the ceil.
    let &(shares, nominal) = known.iter().max_by(|a, b| a.0.total_cmp(&b.0))?;
    let per_share = nominal / shares;
    known
        .iter()
        .all(|(s, n)| ((s * per_share).ceil() - n).abs() <= 1.0)
        .then_some(per_share)
}

/// The replica's seats (ServerCL: `--max-requests-inflight` + `--max-mutating-requests-inflight`) from every level's
/// (shares, reported NominalCL): the lowest and highest ServerCL for which NominalCL = ceil(ServerCL × shares /
/// Σ shares) holds for each (the ceilings can leave a few seats open: 598 to 600 for the defaults at 600). `None`
/// when no ServerCL near what one share is worth gives them all (a level's shares are not those in force, or a level
/// is missing), so that a sentence never states seats the replica does not have.
pub fn server_concurrency(levels: &[(u32, f64)]) -> Option<(u32, u32)> {
    let sum: u64 = levels.iter().map(|(s, _)| u64::from(*s)).sum();
    let per_share = seats_per_share(levels)?;
    // Each level's ceil adds less than a seat: the truth is within a seat per level of the estimate.
    let estimate = per_share * sum as f64;
    let slack = levels.len() as f64 + 1.0;
    // Bounded before the conversion: a ServerCL is a u32.
    let low = (estimate - slack).clamp(1.0, f64::from(u32::MAX)) as u32;
    let high = (estimate + slack).clamp(1.0, f64::from(u32::MAX)) as u32;
    let fits = |c: &u32| {
        levels
            .iter()
            .all(|&(s, n)| f64::from(nominal_limit(*c, s, sum)) == n)
    };
    let first = (low..=high).find(fits)?;
    let last = (first..=high).take_while(fits).last().unwrap_or(first);
    Some((first, last))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::defaults::default_priority_levels;

    /// (name, limits) of the default levels of 1.`minor` at ServerCL `server_cl`.
    fn defaults(minor: u32, server_cl: u32) -> Vec<(String, SeatLimits)> {
        let levels = default_priority_levels(KubeVersion::new(minor, 0));
        let limits = seat_limits(&levels, server_cl);
        levels.into_iter().map(|l| l.name).zip(limits).collect()
    }

    fn get<'a>(limits: &'a [(String, SeatLimits)], name: &str) -> Option<&'a SeatLimits> {
        limits.iter().find(|(n, _)| n == name).map(|(_, l)| l)
    }

    #[test]
    fn default_limits_match_reference() {
        let l = defaults(29, 600);
        // (name, nominal, lower, upper)
        let want = [
            ("exempt", 0, 0, 600),
            ("catch-all", 13, 13, 613),
            ("system", 74, 50, 674),
            ("node-high", 98, 73, 698),
            ("leader-election", 25, 25, 625),
            ("workload-high", 98, 49, 698),
            ("workload-low", 245, 24, 845),
            ("global-default", 49, 24, 649),
        ];
        for (name, nominal, lower, upper) in want {
            let got = get(&l, name).unwrap();
            assert_eq!(
                (got.nominal, got.lower, got.upper),
                (nominal, lower, upper),
                "{name}"
            );
        }
        assert_eq!(l.len(), want.len());
        assert_eq!(l.iter().map(|(_, x)| x.nominal).sum::<u32>(), 602);
        // node-high lends 25% of 98 = 24.5 and workload-low 90% of 245 = 220.5: half rounds away from zero.
        assert_eq!(get(&l, "node-high").unwrap().lendable, 25);
        assert_eq!(get(&l, "workload-low").unwrap().lendable, 221);
        assert_eq!(
            get(&l, "workload-low").unwrap().initial_current(),
            245 - 110
        );
        assert_eq!(get(&l, "system").unwrap().initial_current(), 74 - 12);
    }

    #[test]
    fn old_versions_have_no_node_high_and_no_lending() {
        let l = defaults(20, 600);
        let want = [
            ("catch-all", 15),
            ("system", 88),
            ("leader-election", 30),
            ("workload-high", 118),
            ("workload-low", 293),
            ("global-default", 59),
        ];
        for (name, nominal) in want {
            let got = get(&l, name).unwrap();
            assert_eq!(got.nominal, nominal, "{name}");
            assert_eq!(
                (got.lower, got.initial_current()),
                (nominal, nominal),
                "{name}"
            );
        }
        assert!(get(&l, "node-high").is_none());
        assert_eq!(
            get(&defaults(21, 600), "workload-low").unwrap().nominal,
            293
        );
    }

    #[test]
    fn borrowing_limit_percent_bounds_the_upper_limit() {
        let mut levels = default_priority_levels(KubeVersion::new(29, 0));
        let wl = levels
            .iter()
            .position(|l| l.name == "workload-low")
            .unwrap();
        levels[wl].borrowing_limit_percent = Some(50);
        let gd = levels
            .iter()
            .position(|l| l.name == "global-default")
            .unwrap();
        levels[gd].borrowing_limit_percent = Some(0);
        let l = seat_limits(&levels, 600);
        // round(245 × 0.5) = round(122.5) = 123.
        assert_eq!(l[wl].borrowing, 123);
        assert_eq!(l[wl].upper, 245 + 123);
        assert_eq!(l[gd].upper, 49, "0% borrows nothing");
        // Borrowing does not change anyone's nominal; other levels keep ServerCL as their borrowing.
        assert_eq!(l[wl].nominal, 245);
        assert_eq!(l[0].upper, 600);
    }

    #[test]
    fn shares_are_shared_with_exempt_and_other_levels() {
        let mut levels = default_priority_levels(KubeVersion::new(29, 0));
        // What-if: exempt gets 10 shares (allowed from 1.28); Σ = 255.
        levels[0].shares = Some(10);
        let l = seat_limits(&levels, 600);
        assert_eq!(l[0].nominal, 24);
        let wl = levels
            .iter()
            .position(|l| l.name == "workload-low")
            .unwrap();
        assert_eq!(l[wl].nominal, 236);
        // A limited level that leaves its shares out gets the API's default of 30.
        levels[wl].shares = None;
        let l = seat_limits(&levels, 600);
        assert_eq!(l[wl].nominal, 98, "ceil(600 × 30 / 185)");
        // Another server concurrency limit.
        let l = seat_limits(&default_priority_levels(KubeVersion::new(29, 0)), 3000);
        assert_eq!(l[wl].nominal, 1225);
        assert_eq!(l[wl].upper, 1225 + 3000);
    }

    #[test]
    fn nothing_wraps_on_odd_input() {
        assert_eq!(nominal_limit(600, 5, 0), 0);
        let mut levels = default_priority_levels(KubeVersion::new(29, 0));
        levels[1].lendable_percent = Some(250);
        levels[2].borrowing_limit_percent = Some(u32::MAX);
        let l = seat_limits(&levels, u32::MAX);
        assert_eq!(l[1].lower, 0);
        assert_eq!(l[2].upper, u32::MAX);
    }

    /// The limits of the default levels agree with every real capture (tests/fixtures, ServerCL 600).
    #[test]
    fn default_limits_match_captures() {
        let mut compared = 0;
        for minor in KubeVersion::MIN_MINOR..=KubeVersion::MAX_MINOR {
            let path = format!(
                "{}/../../tests/fixtures/metrics-v1.{minor}.txt.gz",
                env!("CARGO_MANIFEST_DIR")
            );
            let Ok(file) = std::fs::File::open(&path) else {
                continue;
            };
            let mut text = String::new();
            std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(file), &mut text)
                .unwrap();
            let metric = |family: &str, level: &str| -> Option<u32> {
                let prefix =
                    format!("apiserver_flowcontrol_{family}{{priority_level=\"{level}\"}} ");
                text.lines()
                    .find_map(|l| l.strip_prefix(prefix.as_str()))
                    .and_then(|v| v.parse().ok())
            };
            for (name, want) in defaults(minor, 600) {
                // Before 1.26 the nominal limit is request_concurrency_limit, and there is no lower or upper.
                let nominal = metric("nominal_limit_seats", &name)
                    .or_else(|| metric("request_concurrency_limit", &name));
                if let Some(n) = nominal {
                    assert_eq!(n, want.nominal, "1.{minor} {name} nominal");
                    compared += 1;
                }
                if let Some(lower) = metric("lower_limit_seats", &name) {
                    assert_eq!(lower, want.lower, "1.{minor} {name} lower");
                    assert_eq!(metric("upper_limit_seats", &name), Some(want.upper));
                    compared += 1;
                }
            }
        }
        assert!(compared > 50, "only {compared} limits compared");
    }

    #[test]
    fn seat_caps() {
        let v = KubeVersion::new(29, 0);
        let pls = default_priority_levels(v);
        let wl = pls.iter().find(|p| p.name == "workload-low").unwrap();
        assert_eq!(max_seats(v, wl, 245), 10);
        let gd = pls.iter().find(|p| p.name == "global-default").unwrap();
        assert_eq!(max_seats(v, gd, 49), 8);
        assert_eq!(max_seats(KubeVersion::new(22, 0), gd, 59), 1);
        assert_eq!(max_seats(KubeVersion::new(25, 0), gd, 59), 10);
        // catch-all rejects: it has no cap of its own, so the global 10 applies, not ceil(0.15 × 13) = 2.
        let ca = pls.iter().find(|p| p.name == "catch-all").unwrap();
        assert_eq!(max_seats(v, ca, 13), 10);
    }

    #[test]
    fn seats_per_share_from_default_levels() {
        // Default levels at ServerCL 600: 1 share ≈ 2.45 seats; exempt's 0 shares say nothing.
        let known = [(100, 245.0), (40, 98.0), (30, 74.0), (20, 49.0), (0, 0.0)];
        let per_share = seats_per_share(&known).unwrap();
        assert!((per_share - 2.45).abs() < 1e-9, "{per_share}");
        // One level's shares were changed: the worth of a share is not known.
        assert_eq!(seats_per_share(&[(100, 245.0), (40, 150.0)]), None);
        assert_eq!(seats_per_share(&[]), None);
    }

    #[test]
    fn a_list_is_priced_by_objects_then_by_bytes() {
        assert_eq!(list_seats(22, Some(5000.0), None), Some(1));
        assert_eq!(list_seats(28, Some(250.0), None), Some(3));
        assert_eq!(list_seats(28, Some(50_000.0), None), Some(10));
        assert_eq!(list_seats(28, None, Some(1e9)), None);
        assert_eq!(list_seats(34, Some(12.0), Some(98_186.0)), Some(1));
        assert_eq!(list_seats(34, None, Some(4_800_000.0)), Some(48));
        assert_eq!(list_seats(34, None, Some(1e9)), Some(100));
        assert_eq!(list_seats(34, Some(1.0), Some(-1.0)), None);
    }

    #[test]
    fn the_replicas_seats_are_told_back_from_its_levels_nominal_limits() {
        // The defaults of 1.34 at 600 seats leave 598 to 600 open (598 x 100 / 245 = 244.1: workload-low's 245, as at
        // 600).
        let levels = default_priority_levels(KubeVersion::new(34, 0));
        let known: Vec<(u32, f64)> = levels
            .iter()
            .zip(seat_limits(&levels, 600))
            .map(|(l, s)| (l.shares_or_default(), f64::from(s.nominal)))
            .collect();
        let range = server_concurrency(&known);
        assert!(
            range.is_some_and(|(low, high)| low < high && high == 600),
            "{range:?}"
        );
        for (minor, server_cl) in [(29, 600), (34, 600), (34, 3000), (26, 800), (34, 137)] {
            let levels = default_priority_levels(KubeVersion::new(minor, 0));
            let limits = seat_limits(&levels, server_cl);
            let mut known: Vec<(u32, f64)> = levels
                .iter()
                .zip(&limits)
                .map(|(l, s)| (l.shares_or_default(), f64::from(s.nominal)))
                .collect();
            let within = |r: Option<(u32, u32)>| {
                r.is_some_and(|(low, high)| low <= server_cl && server_cl <= high && high - low < 8)
            };
            assert!(
                within(server_concurrency(&known)),
                "1.{minor} at {server_cl}: {:?}",
                server_concurrency(&known)
            );
            // Two levels of one's own, 10 shares each: their nominal limits tell the same server.
            let sum: u64 = known.iter().map(|(s, _)| u64::from(*s)).sum::<u64>() + 20;
            for k in &mut known {
                k.1 = f64::from(nominal_limit(server_cl, k.0, sum));
            }
            known.push((10, f64::from(nominal_limit(server_cl, 10, sum))));
            known.push((10, f64::from(nominal_limit(server_cl, 10, sum))));
            assert!(
                within(server_concurrency(&known)),
                "1.{minor} at {server_cl}, two more"
            );
            // A level whose shares are not those in force: no server gives them all.
            known[1].0 += 7;
            assert_eq!(server_concurrency(&known), None);
        }
    }
}
