//! The other kinds the simulated cluster serves, with their top-level fields as the real ones have them
//! (kubernetes/kubernetes `staging/src/k8s.io/api/{core,discovery,coordination}/v1/types.go`): Namespace, Endpoints,
//! EndpointSlice and Lease field by field down to what the simulator writes, the reviews with open specs.
use apf::KubeVersion;

use super::schema::{condition, def, f, kind_fields, list, open, r_meta, req, Def, ListType, Ty};
use crate::discovery::Resource;

const CORE: &str = "io.k8s.api.core.v1";

/// `core/v1.ObjectReference`: what Endpoints and EndpointSlices point at.
fn object_reference() -> Def {
    let s = |name: &'static str, doc: &'static str| f(name, Ty::Str, doc);
    def(
        format!("{CORE}.ObjectReference"),
        "A reference to another object.",
        vec![
            s("apiVersion", "Its API version."),
            s("fieldPath", "A field within it, if any."),
            s("kind", "Its kind."),
            s("name", "Its name."),
            s("namespace", "Its namespace."),
            s("resourceVersion", "The version it had."),
            s("uid", "Its uid."),
        ],
    )
}

/// A port of an endpoint: the same four fields in `core/v1` and `discovery.k8s.io/v1`.
fn endpoint_port(package: &str, port_required: bool) -> Def {
    let port = if port_required { req } else { f };
    def(
        format!("{package}.EndpointPort"),
        "A port the endpoints serve.",
        vec![
            f("appProtocol", Ty::Str, "The application protocol."),
            f("name", Ty::Str, "The port's name."),
            port("port", Ty::Int, "The port number."),
            f("protocol", Ty::Str, "TCP, UDP or SCTP; default TCP."),
        ],
    )
}

/// A kind with `spec` and `status` the simulator answers but does not model (TokenReview, SubjectAccessReview).
fn review(package: &str, kind: &str) -> Vec<Def> {
    let mut fields = kind_fields();
    fields.push(req(
        "spec",
        Ty::Ref(format!("{package}.{kind}Spec")),
        "What is asked.",
    ));
    fields.push(f(
        "status",
        Ty::Ref(format!("{package}.{kind}Status")),
        "The answer, filled in by the server.",
    ));
    vec![
        def(
            format!("{package}.{kind}"),
            "A question the server answers and does not store.",
            fields,
        ),
        open(format!("{package}.{kind}Spec"), "What is asked."),
        open(format!("{package}.{kind}Status"), "The answer."),
    ]
}

pub(super) fn definitions(v: KubeVersion, r: &Resource, package: &str) -> Vec<Def> {
    let p = |name: &str| Ty::Ref(format!("{package}.{name}"));
    let mut kind = kind_fields();
    match r.kind {
        "Namespace" => {
            kind.push(f("spec", p("NamespaceSpec"), "What the namespace needs."));
            kind.push(f("status", p("NamespaceStatus"), "Its current state."));
            vec![
                def(format!("{package}.Namespace"), "A scope for names.", kind),
                def(
                    format!("{package}.NamespaceSpec"),
                    "What a namespace needs.",
                    vec![f(
                        "finalizers",
                        list(Ty::Str, ListType::Atomic),
                        "What must be done before it is removed.",
                    )],
                ),
                def(
                    format!("{package}.NamespaceStatus"),
                    "A namespace's current state.",
                    vec![
                        f(
                            "conditions",
                            list(p("NamespaceCondition"), ListType::Map("type")),
                            "The current conditions.",
                        ),
                        f("phase", Ty::Str, "Active or Terminating."),
                    ],
                ),
                condition(package, "NamespaceCondition"),
            ]
        }
        "Endpoints" => {
            kind.push(f(
                "subsets",
                list(p("EndpointSubset"), ListType::Atomic),
                "Sets of addresses with the ports they all serve.",
            ));
            vec![
                def(
                    format!("{package}.Endpoints"),
                    "The addresses that implement a Service.",
                    kind,
                ),
                def(
                    format!("{package}.EndpointSubset"),
                    "Addresses that serve the same ports.",
                    vec![
                        f(
                            "addresses",
                            list(p("EndpointAddress"), ListType::Atomic),
                            "The ready addresses.",
                        ),
                        f(
                            "notReadyAddresses",
                            list(p("EndpointAddress"), ListType::Atomic),
                            "Addresses not ready yet.",
                        ),
                        f(
                            "ports",
                            list(p("EndpointPort"), ListType::Atomic),
                            "The ports they serve.",
                        ),
                    ],
                ),
                def(
                    format!("{package}.EndpointAddress"),
                    "One address of an endpoint.",
                    vec![
                        f("hostname", Ty::Str, "The host name."),
                        req("ip", Ty::Str, "The IP address."),
                        f("nodeName", Ty::Str, "The node it runs on."),
                        f(
                            "targetRef",
                            Ty::Ref(format!("{CORE}.ObjectReference")),
                            "The object behind it.",
                        ),
                    ],
                ),
                endpoint_port(package, true),
                object_reference(),
            ]
        }
        "EndpointSlice" => {
            kind.push(req(
                "addressType",
                Ty::Str,
                "IPv4, IPv6 or FQDN: the type of every address of the slice.",
            ));
            kind.push(req(
                "endpoints",
                list(p("Endpoint"), ListType::Atomic),
                "The endpoints of the slice.",
            ));
            kind.push(f(
                "ports",
                list(p("EndpointPort"), ListType::Atomic),
                "The ports every endpoint serves.",
            ));
            vec![
                def(
                    format!("{package}.EndpointSlice"),
                    "A subset of the endpoints of a Service.",
                    kind,
                ),
                def(
                    format!("{package}.Endpoint"),
                    "One endpoint of a slice.",
                    vec![
                        req(
                            "addresses",
                            list(Ty::Str, ListType::Set),
                            "Its addresses, of the slice's type.",
                        ),
                        f(
                            "conditions",
                            p("EndpointConditions"),
                            "Whether it is ready.",
                        ),
                        f(
                            "deprecatedTopology",
                            Ty::Map(Box::new(Ty::Str)),
                            "Deprecated topology labels.",
                        ),
                        f("hints", p("EndpointHints"), "Routing hints."),
                        f("hostname", Ty::Str, "Its host name."),
                        f("nodeName", Ty::Str, "The node it runs on."),
                        f(
                            "targetRef",
                            Ty::Ref(format!("{CORE}.ObjectReference")),
                            "The object behind it.",
                        ),
                        f("zone", Ty::Str, "The zone it runs in."),
                    ],
                ),
                def(
                    format!("{package}.EndpointConditions"),
                    "The state of an endpoint.",
                    vec![
                        f("ready", Ty::Bool, "Takes traffic."),
                        f("serving", Ty::Bool, "Answers, terminating or not."),
                        f("terminating", Ty::Bool, "Is shutting down."),
                    ],
                ),
                open(
                    format!("{package}.EndpointHints"),
                    "Where traffic to the endpoint should come from.",
                ),
                endpoint_port(package, false),
                object_reference(),
            ]
        }
        "Lease" => {
            kind.push(f(
                "spec",
                p("LeaseSpec"),
                "Who holds the lease, and until when.",
            ));
            let micro = || r_meta("MicroTime");
            let mut spec = vec![
                f("acquireTime", micro(), "When the holder took it."),
                f("holderIdentity", Ty::Str, "Who holds it."),
                f(
                    "leaseDurationSeconds",
                    Ty::Int,
                    "How long others wait after the last renewal before taking it.",
                ),
                f("leaseTransitions", Ty::Int, "How often it changed hands."),
                f("renewTime", micro(), "When the holder last renewed it."),
            ];
            // Coordinated leader election (1.31+).
            if v.at_least(31) {
                spec.push(f("preferredHolder", Ty::Str, "Who should hold it next."));
                spec.push(f("strategy", Ty::Str, "How the next holder is chosen."));
            }
            vec![
                def(
                    format!("{package}.Lease"),
                    "A lock held for a time: leader election, heartbeats.",
                    kind,
                ),
                def(
                    format!("{package}.LeaseSpec"),
                    "Who holds a lease, and until when.",
                    spec,
                ),
            ]
        }
        other => review(package, other),
    }
}
