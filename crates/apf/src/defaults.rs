//! The default PriorityLevelConfigurations and FlowSchemas (k8s.io/apiserver `pkg/apis/flowcontrol/bootstrap/default.go`) of each Kubernetes version, and what
//! remediation looks up in them.

use super::{Distinguisher, FlowSchemaDef, KubeVersion, PriorityLevelConfig, EXEMPT};

/// The default priority levels of `v`, in definition order, with the fields as that version's objects spell them.
pub fn default_priority_levels(v: KubeVersion) -> Vec<PriorityLevelConfig> {
    // lendablePercent exists from 1.26 (borrowing); the exempt spec has fields from 1.28.
    let lend = |p: u32| v.at_least(26).then_some(p);
    let queued = |name: &str, shares, lendable, queues, hand_size| PriorityLevelConfig {
        name: name.to_string(),
        queuing: true,
        exempt: false,
        queues: Some(queues),
        hand_size: Some(hand_size),
        queue_length_limit: Some(50),
        shares: Some(shares),
        lendable_percent: lend(lendable),
        borrowing_limit_percent: None,
    };
    let mut out = vec![
        PriorityLevelConfig {
            name: EXEMPT.to_string(),
            queuing: false,
            exempt: true,
            queues: None,
            hand_size: None,
            queue_length_limit: None,
            shares: v.at_least(28).then_some(0),
            lendable_percent: v.at_least(28).then_some(0),
            borrowing_limit_percent: None,
        },
        // Limited with limitResponse Reject: no queues.
        PriorityLevelConfig {
            name: "catch-all".to_string(),
            queuing: false,
            exempt: false,
            queues: None,
            hand_size: None,
            queue_length_limit: None,
            shares: Some(5),
            lendable_percent: lend(0),
            borrowing_limit_percent: None,
        },
        queued("system", 30, 33, 64, 6),
    ];
    if v.at_least(22) {
        out.push(queued("node-high", 40, 25, 64, 6));
    }
    out.push(queued("leader-election", 10, 0, 16, 4));
    out.push(queued("workload-high", 40, 50, 128, 6));
    out.push(queued("workload-low", 100, 90, 128, 6));
    out.push(queued("global-default", 20, 50, 128, 6));
    out
}

/// The default flow schemas of `v`, in definition order.
pub fn default_flow_schemas(v: KubeVersion) -> Vec<FlowSchemaDef> {
    use Distinguisher::*;
    let fs = |name, priority_level, precedence, distinguisher| FlowSchemaDef {
        name,
        priority_level,
        precedence,
        distinguisher,
    };
    let mut out = vec![
        fs("exempt", EXEMPT, 1, None),
        fs("probes", EXEMPT, 2, None),
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

/// Every known version, newest first: a default that was removed is still found in the versions that had it.
fn newest_first() -> impl Iterator<Item = KubeVersion> {
    (KubeVersion::MIN_MINOR..=KubeVersion::MAX_MINOR)
        .rev()
        .map(|minor| KubeVersion::new(minor, 0))
}

/// The name of every default FlowSchema of any known version, by precedence.
pub fn known_flow_schemas() -> Vec<&'static str> {
    let mut all: Vec<FlowSchemaDef> = Vec::new();
    for v in newest_first() {
        for f in default_flow_schemas(v) {
            if !all.iter().any(|a| a.name == f.name) {
                all.push(f);
            }
        }
    }
    // Stable: schemas of equal precedence keep their definition order.
    all.sort_by_key(|f| f.precedence);
    all.into_iter().map(|f| f.name).collect()
}

/// The matchingPrecedence of a default FlowSchema, in the newest version that has it; `None` for any other schema.
pub fn default_precedence(flow_schema: &str) -> Option<u32> {
    newest_first().find_map(|v| {
        default_flow_schemas(v)
            .into_iter()
            .find(|f| f.name == flow_schema)
            .map(|f| f.precedence)
    })
}

/// The shares of a default priority level, in the newest version that has it; `None` for any other level.
pub fn default_shares(priority_level: &str) -> Option<u32> {
    newest_first().find_map(|v| {
        default_priority_levels(v)
            .into_iter()
            .find(|p| p.name == priority_level)
            .map(|p| p.shares_or_default())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn every_flow_schema_names_a_level_of_its_version() {
        for minor in KubeVersion::MIN_MINOR..=KubeVersion::MAX_MINOR {
            let v = KubeVersion::new(minor, 0);
            let levels = default_priority_levels(v);
            for f in default_flow_schemas(v) {
                assert!(
                    levels.iter().any(|l| l.name == f.priority_level),
                    "{v} {}",
                    f.name
                );
            }
        }
    }

    #[test]
    fn fields_appear_with_their_version() {
        let levels = default_priority_levels(KubeVersion::new(25, 0));
        assert!(levels.iter().all(|l| l.lendable_percent.is_none()));
        assert_eq!(
            levels[0].shares, None,
            "exempt has no spec fields before 1.28"
        );
        let levels = default_priority_levels(KubeVersion::new(28, 0));
        assert_eq!(
            (levels[0].shares, levels[0].lendable_percent),
            (Some(0), Some(0))
        );
        let wl = levels.iter().find(|l| l.name == "workload-low").unwrap();
        assert_eq!((wl.shares, wl.lendable_percent), (Some(100), Some(90)));
        assert!(levels.iter().all(|l| l.borrowing_limit_percent.is_none()));
    }

    #[test]
    fn known_flow_schemas_in_precedence_order() {
        assert_eq!(
            known_flow_schemas(),
            [
                "exempt",
                "probes",
                "system-leader-election",
                "endpoint-controller",
                "workload-leader-election",
                "system-node-high",
                "system-nodes",
                "kube-controller-manager",
                "kube-scheduler",
                "kube-system-service-accounts",
                "service-accounts",
                "global-default",
                "catch-all",
            ]
        );
    }

    #[test]
    fn lookups_cover_every_version() {
        assert_eq!(default_precedence("exempt"), Some(1));
        assert_eq!(default_precedence("probes"), Some(2));
        // Removed in 1.34, still known.
        assert_eq!(default_precedence("endpoint-controller"), Some(150));
        assert_eq!(default_precedence("workload-leader-election"), Some(200));
        assert_eq!(default_precedence("kube-scheduler"), Some(800));
        assert_eq!(default_precedence("service-accounts"), Some(9000));
        assert_eq!(default_precedence("catch-all"), Some(10000));
        assert_eq!(default_precedence("my-schema"), None);
        assert_eq!(default_shares("workload-low"), Some(100));
        assert_eq!(default_shares("node-high"), Some(40));
        assert_eq!(default_shares("catch-all"), Some(5));
        assert_eq!(default_shares(EXEMPT), Some(0));
        assert_eq!(default_shares("isolate-x"), None);
    }
}
