//! The seat arithmetic of the simulated levels.

use crate::apf::{KubeVersion, PriorityLevelConfig};

/// NominalCL = ceil(ServerCL × shares / Σ shares); the sum includes exempt's 0.
pub fn nominal_limit(server_cl: u32, shares: u32, sum_shares: u32) -> u32 {
    if sum_shares == 0 {
        return 0;
    }
    (server_cl as u64 * shares as u64).div_ceil(sum_shares as u64) as u32
}

/// The per-level cap on the seats of one request: 1 before 1.23 (no width), 10 globally from 1.23, and from 1.26
/// (the 1.28 rule, backported to late 1.26/1.27 patches) `max(1, min(ceil(0.15·Nominal), Nominal/handSize))`.
pub fn max_seats(v: KubeVersion, pl: &PriorityLevelConfig, nominal: u32) -> u32 {
    if !v.at_least(23) {
        return 1;
    }
    if !v.at_least(26) {
        return 10;
    }
    let fifteen = (nominal as u64 * 15).div_ceil(100) as u32;
    let per_hand = pl
        .hand_size
        .and_then(|h| nominal.checked_div(h))
        .unwrap_or(fifteen);
    fifteen.min(per_hand).clamp(1, 10)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apf::defaults::default_priority_levels;

    fn nominals(v: KubeVersion) -> Vec<(String, u32)> {
        let pls = default_priority_levels(v);
        let sum: u32 = pls.iter().map(|p| p.shares_or_default()).sum();
        pls.iter()
            .map(|p| {
                (
                    p.name.clone(),
                    nominal_limit(600, p.shares_or_default(), sum),
                )
            })
            .collect()
    }

    #[test]
    fn nominal_limits_match_reference() {
        let n = nominals(KubeVersion::new(29, 0));
        let get = |n: &[(String, u32)], k: &str| n.iter().find(|(name, _)| name == k).map(|x| x.1);
        assert_eq!(get(&n, "workload-low"), Some(245));
        assert_eq!(get(&n, "catch-all"), Some(13));
        assert_eq!(get(&n, "system"), Some(74));
        assert_eq!(get(&n, "global-default"), Some(49));
        assert_eq!(n.iter().map(|x| x.1).sum::<u32>(), 602);
        let old = nominals(KubeVersion::new(20, 0));
        assert_eq!(get(&old, "workload-low"), Some(293));
        assert_eq!(get(&old, "catch-all"), Some(15));
        assert_eq!(get(&old, "node-high"), None);
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
    }
}
