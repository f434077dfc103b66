//! The default PriorityLevelConfigurations and FlowSchemas (apf.md §4) of each version.

use super::KubeVersion;

/// How a flow schema splits its requests into flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distinguisher {
    None,
    ByUser,
    ByNamespace,
}

/// One default PriorityLevelConfiguration.
#[derive(Debug, Clone, PartialEq)]
pub struct PriorityLevelDef {
    pub name: &'static str,
    pub exempt: bool,
    /// Limited with limitResponse Reject (catch-all): no queues.
    pub reject: bool,
    /// nominalConcurrencyShares (assuredConcurrencyShares before v1beta3).
    pub shares: u32,
    /// lendablePercent; 0 before 1.26 (no borrowing).
    pub lendable_percent: u32,
    pub queues: u32,
    pub hand_size: u32,
    pub queue_length_limit: u32,
}

/// One default FlowSchema.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowSchemaDef {
    pub name: &'static str,
    pub priority_level: &'static str,
    pub precedence: u32,
    pub distinguisher: Distinguisher,
}

pub fn default_priority_levels(v: KubeVersion) -> Vec<PriorityLevelDef> {
    let lend = |p: u32| if v.at_least(26) { p } else { 0 };
    let q = |name, shares, lendable, queues, hand| PriorityLevelDef {
        name,
        exempt: false,
        reject: false,
        shares,
        lendable_percent: lend(lendable),
        queues,
        hand_size: hand,
        queue_length_limit: 50,
    };
    let mut out = vec![
        PriorityLevelDef {
            name: "exempt",
            exempt: true,
            reject: false,
            shares: 0,
            lendable_percent: 0,
            queues: 0,
            hand_size: 0,
            queue_length_limit: 0,
        },
        PriorityLevelDef {
            name: "catch-all",
            exempt: false,
            reject: true,
            shares: 5,
            lendable_percent: 0,
            queues: 0,
            hand_size: 0,
            queue_length_limit: 0,
        },
        q("system", 30, 33, 64, 6),
    ];
    if v.at_least(22) {
        out.push(q("node-high", 40, 25, 64, 6));
    }
    out.push(q("leader-election", 10, 0, 16, 4));
    out.push(q("workload-high", 40, 50, 128, 6));
    out.push(q("workload-low", 100, 90, 128, 6));
    out.push(q("global-default", 20, 50, 128, 6));
    out
}

pub fn default_flow_schemas(v: KubeVersion) -> Vec<FlowSchemaDef> {
    use Distinguisher::*;
    let fs = |name, priority_level, precedence, distinguisher| FlowSchemaDef {
        name,
        priority_level,
        precedence,
        distinguisher,
    };
    let mut out = vec![
        fs("exempt", "exempt", 1, None),
        fs("probes", "exempt", 2, None),
        fs("system-leader-election", "leader-election", 100, ByUser),
    ];
    if v.at_least(24) && v.minor <= 33 {
        out.push(fs("endpoint-controller", "workload-high", 150, ByUser));
    }
    if v.minor <= 33 {
        out.push(fs(
            "workload-leader-election",
            "leader-election",
            200,
            ByUser,
        ));
    }
    if v.at_least(22) {
        out.push(fs("system-node-high", "node-high", 400, ByUser));
    }
    out.extend([
        fs("system-nodes", "system", 500, ByUser),
        fs("kube-controller-manager", "workload-high", 800, ByNamespace),
        fs("kube-scheduler", "workload-high", 800, ByNamespace),
        fs(
            "kube-system-service-accounts",
            "workload-high",
            900,
            ByNamespace,
        ),
        fs("service-accounts", "workload-low", 9000, ByUser),
        fs("global-default", "global-default", 9900, ByUser),
        fs("catch-all", "catch-all", 10000, ByUser),
    ]);
    out
}

/// NominalCL = ceil(ServerCL × shares / Σ shares); the sum includes exempt's 0.
pub fn nominal_limit(server_cl: u32, shares: u32, sum_shares: u32) -> u32 {
    if sum_shares == 0 {
        return 0;
    }
    (server_cl as u64 * shares as u64).div_ceil(sum_shares as u64) as u32
}

/// The per-level cap on the seats of one request: 1 before 1.23 (no width), 10 globally from 1.23, and from 1.26
/// (the 1.28 rule, backported to late 1.26/1.27 patches) `max(1, min(ceil(0.15·Nominal), Nominal/handSize))`.
pub fn max_seats(v: KubeVersion, pl: &PriorityLevelDef, nominal: u32) -> u32 {
    if !v.at_least(23) {
        return 1;
    }
    if !v.at_least(26) {
        return 10;
    }
    let fifteen = (nominal as u64 * 15).div_ceil(100) as u32;
    let per_hand = nominal.checked_div(pl.hand_size).unwrap_or(fifteen);
    fifteen.min(per_hand).clamp(1, 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nominals(v: KubeVersion) -> Vec<(&'static str, u32)> {
        let pls = default_priority_levels(v);
        let sum: u32 = pls.iter().map(|p| p.shares).sum();
        pls.iter()
            .map(|p| (p.name, nominal_limit(600, p.shares, sum)))
            .collect()
    }

    #[test]
    fn nominal_limits_match_reference() {
        let n = nominals(KubeVersion::new(29, 0));
        let get = |n: &[(&str, u32)], k: &str| n.iter().find(|(name, _)| *name == k).map(|x| x.1);
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
    fn flow_schemas_per_version() {
        let names = |m| {
            default_flow_schemas(KubeVersion::new(m, 0))
                .iter()
                .map(|f| f.name)
                .collect::<Vec<_>>()
        };
        assert!(!names(21).contains(&"system-node-high"));
        assert!(names(22).contains(&"system-node-high"));
        assert!(!names(23).contains(&"endpoint-controller"));
        assert!(names(33).contains(&"endpoint-controller"));
        assert!(names(33).contains(&"workload-leader-election"));
        assert!(!names(34).contains(&"workload-leader-election"));
        assert!(!names(34).contains(&"endpoint-controller"));
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
