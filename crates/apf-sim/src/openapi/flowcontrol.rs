//! The flowcontrol kinds' schemas, field by field, per simulated release and API version: v1beta1 and v1beta2 call
//! the shares `assuredConcurrencyShares`; borrowing's `lendablePercent` and `borrowingLimitPercent` arrive in 1.26,
//! the `exempt` settings in 1.28 (kubernetes/kubernetes `staging/src/k8s.io/api/flowcontrol/*/types.go`).
use apf::KubeVersion;

use super::schema::{condition, def, f, kind_fields, list, req, Def, ListType, Ty};
use crate::discovery::Resource;

pub(super) fn definitions(v: KubeVersion, r: &Resource, package: &str) -> Vec<Def> {
    let p = |name: &str| Ty::Ref(format!("{package}.{name}"));
    let status = |kind: &str| {
        def(
            format!("{package}.{kind}Status"),
            "The current state, written by the apiserver.",
            vec![f(
                "conditions",
                list(p(&format!("{kind}Condition")), ListType::Map("type")),
                "The current conditions.",
            )],
        )
    };
    if r.kind == "FlowSchema" {
        let mut kind = kind_fields();
        kind.push(f(
            "spec",
            p("FlowSchemaSpec"),
            "What the schema matches and where it sends it.",
        ));
        kind.push(f("status", p("FlowSchemaStatus"), "The current state."));
        let name_only = |name: &str, doc: &'static str| {
            def(
                format!("{package}.{name}"),
                doc,
                vec![req("name", Ty::Str, "The name.")],
            )
        };
        return vec![
            def(
                format!("{package}.FlowSchema"),
                "Which requests go to which priority level, and how they are divided into flows.",
                kind,
            ),
            def(
                format!("{package}.FlowSchemaSpec"),
                "What a FlowSchema matches.",
                vec![
                    f(
                        "distinguisherMethod",
                        p("FlowDistinguisherMethod"),
                        "How matching requests are divided into flows; unset: one flow.",
                    ),
                    f(
                        "matchingPrecedence",
                        Ty::Int,
                        "Lower numbers are tried first; 1 to 10000, default 1000.",
                    ),
                    req(
                        "priorityLevelConfiguration",
                        p("PriorityLevelConfigurationReference"),
                        "The priority level of matching requests.",
                    ),
                    f(
                        "rules",
                        list(p("PolicyRulesWithSubjects"), ListType::Atomic),
                        "A request matches when any rule does.",
                    ),
                ],
            ),
            def(
                format!("{package}.FlowDistinguisherMethod"),
                "How requests are divided into flows.",
                vec![req("type", Ty::Str, "ByUser or ByNamespace.")],
            ),
            name_only(
                "PriorityLevelConfigurationReference",
                "A priority level, by name.",
            ),
            def(
                format!("{package}.PolicyRulesWithSubjects"),
                "Who (any subject) does what (any resource or non-resource rule).",
                vec![
                    f(
                        "nonResourceRules",
                        list(p("NonResourcePolicyRule"), ListType::Atomic),
                        "Rules on non-resource URLs.",
                    ),
                    f(
                        "resourceRules",
                        list(p("ResourcePolicyRule"), ListType::Atomic),
                        "Rules on resources.",
                    ),
                    req(
                        "subjects",
                        list(p("Subject"), ListType::Atomic),
                        "The users, groups or service accounts.",
                    ),
                ],
            ),
            def(
                format!("{package}.Subject"),
                "A user, a group or a service account.",
                vec![
                    f("group", p("GroupSubject"), "With kind Group."),
                    req("kind", Ty::Str, "User, Group or ServiceAccount."),
                    f(
                        "serviceAccount",
                        p("ServiceAccountSubject"),
                        "With kind ServiceAccount.",
                    ),
                    f("user", p("UserSubject"), "With kind User."),
                ],
            ),
            name_only("GroupSubject", "A group; \"*\" is every group."),
            name_only("UserSubject", "A user; \"*\" is every user."),
            def(
                format!("{package}.ServiceAccountSubject"),
                "A service account; name \"*\" is every one of the namespace.",
                vec![
                    req("name", Ty::Str, "The name."),
                    req("namespace", Ty::Str, "The namespace."),
                ],
            ),
            def(
                format!("{package}.ResourcePolicyRule"),
                "Verbs on resources of API groups, in namespaces or cluster-wide.",
                vec![
                    req(
                        "apiGroups",
                        list(Ty::Str, ListType::Set),
                        "API groups; \"*\" is all.",
                    ),
                    f(
                        "clusterScope",
                        Ty::Bool,
                        "Matches cluster-scoped requests too.",
                    ),
                    f(
                        "namespaces",
                        list(Ty::Str, ListType::Set),
                        "Namespaces; \"*\" is all.",
                    ),
                    req(
                        "resources",
                        list(Ty::Str, ListType::Set),
                        "Resources (pods, pods/log); \"*\" is all.",
                    ),
                    req(
                        "verbs",
                        list(Ty::Str, ListType::Set),
                        "Verbs; \"*\" is all.",
                    ),
                ],
            ),
            def(
                format!("{package}.NonResourcePolicyRule"),
                "Verbs on non-resource URLs.",
                vec![
                    req(
                        "nonResourceURLs",
                        list(Ty::Str, ListType::Set),
                        "Paths; a trailing \"*\" matches a prefix.",
                    ),
                    req(
                        "verbs",
                        list(Ty::Str, ListType::Set),
                        "Lower-case HTTP methods; \"*\" is all.",
                    ),
                ],
            ),
            status("FlowSchema"),
            condition(package, "FlowSchemaCondition"),
        ];
    }
    let mut kind = kind_fields();
    kind.push(f(
        "spec",
        p("PriorityLevelConfigurationSpec"),
        "The level's limits and what happens to requests beyond them.",
    ));
    kind.push(f(
        "status",
        p("PriorityLevelConfigurationStatus"),
        "The current state.",
    ));
    let mut spec = vec![
        f(
            "limited",
            p("LimitedPriorityLevelConfiguration"),
            "With type Limited.",
        ),
        req("type", Ty::Str, "Exempt or Limited."),
    ];
    let mut defs = Vec::new();
    if v.at_least(28) {
        spec.insert(
            0,
            f(
                "exempt",
                p("ExemptPriorityLevelConfiguration"),
                "With type Exempt (1.28+).",
            ),
        );
        defs.push(def(
            format!("{package}.ExemptPriorityLevelConfiguration"),
            "The seats an exempt level counts and lends.",
            vec![
                f(
                    "lendablePercent",
                    Ty::Int,
                    "Percent of its nominal seats others may borrow.",
                ),
                f(
                    "nominalConcurrencyShares",
                    Ty::Int,
                    "Its share of the server's seats.",
                ),
            ],
        ));
    }
    let shares = if r.gvr.version == "v1" || r.gvr.version == "v1beta3" {
        "nominalConcurrencyShares"
    } else {
        "assuredConcurrencyShares"
    };
    let mut limited = vec![
        f(shares, Ty::Int, "Its share of the server's seats."),
        f(
            "limitResponse",
            p("LimitResponse"),
            "What happens to a request with no free seat.",
        ),
    ];
    if v.at_least(26) {
        limited.insert(
            0,
            f(
                "borrowingLimitPercent",
                Ty::Int,
                "Percent of its nominal seats it may borrow; unset: no limit.",
            ),
        );
        limited.insert(
            1,
            f(
                "lendablePercent",
                Ty::Int,
                "Percent of its nominal seats others may borrow.",
            ),
        );
    }
    let mut all = vec![
        def(
            format!("{package}.PriorityLevelConfiguration"),
            "A priority level: its share of the server's seats and its queues.",
            kind,
        ),
        def(
            format!("{package}.PriorityLevelConfigurationSpec"),
            "A priority level's settings.",
            spec,
        ),
        def(
            format!("{package}.LimitedPriorityLevelConfiguration"),
            "The seats of a limited level and what happens beyond them.",
            limited,
        ),
        def(
            format!("{package}.LimitResponse"),
            "Queue or Reject.",
            vec![
                f("queuing", p("QueuingConfiguration"), "With type Queue."),
                req("type", Ty::Str, "Queue or Reject."),
            ],
        ),
        def(
            format!("{package}.QueuingConfiguration"),
            "The level's queues and shuffle sharding.",
            vec![
                f("handSize", Ty::Int, "Queues dealt to each flow; default 8."),
                f(
                    "queueLengthLimit",
                    Ty::Int,
                    "Requests one queue holds; default 50.",
                ),
                f("queues", Ty::Int, "Queues of the level; default 64."),
            ],
        ),
        status("PriorityLevelConfiguration"),
        condition(package, "PriorityLevelConfigurationCondition"),
    ];
    all.append(&mut defs);
    all
}
