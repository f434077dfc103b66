//! The schemas of the kinds the simulated cluster serves, once, as data: the flowcontrol kinds field by field per
//! simulated release and API version (v1beta1 and v1beta2 call the shares `assuredConcurrencyShares`; borrowing's
//! `lendablePercent` and `borrowingLimitPercent` arrive in 1.26, the `exempt` settings in 1.28), the meta types
//! they use, and the other kinds with their top-level fields (`core.rs`; the parts the simulator does not model
//! are open objects that keep any field). Names are kube-openapi's (`io.k8s.api.flowcontrol.v1.FlowSchema`); the
//! OpenAPI documents and the strict field check read them. Here: the types and what every kind shares;
//! `flowcontrol.rs` the flowcontrol kinds, `core.rs` the others, `meta.rs` the meta types.
use apf::endpoints::FLOWCONTROL_GROUP;
use apf::KubeVersion;

use crate::discovery::Resource;

/// The type of a field.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ty {
    Str,
    /// `int32`, as most counts of the API are.
    Int,
    Int64,
    Bool,
    /// Another definition, by its short name in the same package (`FlowSchemaSpec`) or a full name.
    Ref(String),
    /// A list, and how a merge treats it (`atomic`, `set`, or `map` keyed by the field).
    List(Box<Ty>, ListType),
    /// A map of strings to this type.
    Map(Box<Ty>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum ListType {
    Atomic,
    Set,
    /// A set that a strategic-merge patch merges rather than replaces (`patchStrategy=merge`, as
    /// `ObjectMeta.finalizers`).
    MergedSet,
    /// Keyed by the field; a strategic-merge patch merges items by that key (`patchMergeKey`).
    Map(&'static str),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Field {
    pub name: &'static str,
    pub ty: Ty,
    pub doc: &'static str,
    pub required: bool,
}

/// One definition of `components.schemas` (v3) or `definitions` (v2).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Def {
    pub name: String,
    pub doc: &'static str,
    pub fields: Vec<Field>,
    /// Keeps fields it does not list (the kinds the simulator does not model field by field).
    pub open: bool,
    /// `(group, version, kind)` of a top-level kind.
    pub gvk: Option<(&'static str, &'static str, String)>,
    /// A string in RFC 3339 (`Time`), not an object.
    pub time: bool,
}

pub(crate) const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1";

pub(super) fn f(name: &'static str, ty: Ty, doc: &'static str) -> Field {
    Field {
        name,
        ty,
        doc,
        required: false,
    }
}

pub(super) fn req(name: &'static str, ty: Ty, doc: &'static str) -> Field {
    Field {
        required: true,
        ..f(name, ty, doc)
    }
}

pub(super) fn r(name: &str) -> Ty {
    Ty::Ref(name.to_string())
}

pub(super) fn list(ty: Ty, kind: ListType) -> Ty {
    Ty::List(Box::new(ty), kind)
}

pub(super) fn def(name: String, doc: &'static str, fields: Vec<Field>) -> Def {
    Def {
        name,
        doc,
        fields,
        open: false,
        gvk: None,
        time: false,
    }
}

/// The package of a resource's kinds in kube-openapi's names: `io.k8s.api.flowcontrol.v1`, `io.k8s.api.core.v1`.
pub(crate) fn package(r: &Resource) -> String {
    let group = match r.gvr.group {
        "" => "core",
        FLOWCONTROL_GROUP => "flowcontrol",
        g => g.split('.').next().unwrap_or(g),
    };
    format!("io.k8s.api.{group}.{}", r.gvr.version)
}

/// The fields every kind starts with.
pub(super) fn kind_fields() -> Vec<Field> {
    vec![
        f(
            "apiVersion",
            Ty::Str,
            "The versioned schema of this representation of an object.",
        ),
        f("kind", Ty::Str, "The REST resource this object represents."),
        f(
            "metadata",
            r(&format!("{META}.ObjectMeta")),
            "Standard object metadata.",
        ),
    ]
}

fn list_def(package: &str, r: &Resource) -> Def {
    let mut d = def(
        format!("{package}.{}List", r.kind),
        "A list of objects of one kind.",
        vec![
            f(
                "apiVersion",
                Ty::Str,
                "The versioned schema of this representation of an object.",
            ),
            req(
                "items",
                list(Ty::Ref(format!("{package}.{}", r.kind)), ListType::Atomic),
                "The objects.",
            ),
            f("kind", Ty::Str, "The REST resource this object represents."),
            f("metadata", r_meta("ListMeta"), "Standard list metadata."),
        ],
    );
    d.gvk = Some((r.gvr.group, r.gvr.version, format!("{}List", r.kind)));
    d
}

pub(super) fn r_meta(name: &str) -> Ty {
    Ty::Ref(format!("{META}.{name}"))
}

/// A definition that keeps any field: what the simulator does not model field by field.
pub(super) fn open(name: String, doc: &'static str) -> Def {
    Def {
        open: true,
        ..def(name, doc, Vec::new())
    }
}

/// A condition of an object's status (`FlowSchemaCondition`, `NamespaceCondition`, ...).
pub(super) fn condition(package: &str, name: &str) -> Def {
    def(
        format!("{package}.{name}"),
        "One aspect of the object's state.",
        vec![
            f(
                "lastTransitionTime",
                r_meta("Time"),
                "When the status last changed.",
            ),
            f(
                "message",
                Ty::Str,
                "Details of the last transition, for a person.",
            ),
            f(
                "reason",
                Ty::Str,
                "The reason of the last transition, in CamelCase.",
            ),
            f("status", Ty::Str, "True, False or Unknown."),
            f("type", Ty::Str, "The condition's type."),
        ],
    )
}

/// Every definition a resource's documents need: its kind, its list, what they reference.
pub(crate) fn definitions(v: KubeVersion, r: &Resource) -> Vec<Def> {
    let package = package(r);
    let mut defs = match r.gvr.group {
        FLOWCONTROL_GROUP => super::flowcontrol::definitions(v, r, &package),
        _ => super::core::definitions(v, r, &package),
    };
    if let Some(kind) = defs.first_mut() {
        kind.gvk = Some((r.gvr.group, r.gvr.version, r.kind.to_string()));
    }
    // Reviews are only created: they have no list.
    if r.allows("list") {
        defs.push(list_def(&package, r));
    }
    defs
}
