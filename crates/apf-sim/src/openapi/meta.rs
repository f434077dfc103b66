//! The meta types every document uses (`io.k8s.apimachinery.pkg.apis.meta.v1`), as the apiserver's own.
use super::schema::{def, f, list, r_meta, req, Def, ListType, Ty, META};

/// The meta types every document uses.
pub(crate) fn definitions() -> Vec<Def> {
    let m = |name: &str| format!("{META}.{name}");
    let mut time = def(m("Time"), "A time in RFC 3339, to the second.", Vec::new());
    time.time = true;
    let mut micro_time = def(
        m("MicroTime"),
        "A time in RFC 3339, to the microsecond.",
        Vec::new(),
    );
    micro_time.time = true;
    let mut fields_v1 = def(
        m("FieldsV1"),
        "The fields a manager owns, as a tree of field names.",
        Vec::new(),
    );
    fields_v1.open = true;
    let mut patch = def(m("Patch"), "The body of a PATCH request.", Vec::new());
    patch.open = true;
    let mut raw = def(
        "io.k8s.apimachinery.pkg.runtime.RawExtension".into(),
        "Any object.",
        Vec::new(),
    );
    raw.open = true;
    vec![
        def(
            m("ObjectMeta"),
            "The metadata every persisted object has.",
            vec![
                f(
                    "annotations",
                    Ty::Map(Box::new(Ty::Str)),
                    "Unstructured key-value data.",
                ),
                f(
                    "creationTimestamp",
                    r_meta("Time"),
                    "When the object was created; set by the server.",
                ),
                f(
                    "deletionGracePeriodSeconds",
                    Ty::Int64,
                    "Seconds allowed for a graceful deletion.",
                ),
                f(
                    "deletionTimestamp",
                    r_meta("Time"),
                    "When the object will be deleted; set by the server.",
                ),
                f(
                    "finalizers",
                    list(Ty::Str, ListType::MergedSet),
                    "What must be done before deletion.",
                ),
                f(
                    "generateName",
                    Ty::Str,
                    "A prefix the server completes to a unique name.",
                ),
                f(
                    "generation",
                    Ty::Int64,
                    "The generation of the desired state; set by the server.",
                ),
                f(
                    "labels",
                    Ty::Map(Box::new(Ty::Str)),
                    "Keys and values to select objects by.",
                ),
                f(
                    "managedFields",
                    list(r_meta("ManagedFieldsEntry"), ListType::Atomic),
                    "Which manager owns which fields.",
                ),
                f("name", Ty::Str, "Unique in its namespace."),
                f(
                    "namespace",
                    Ty::Str,
                    "The namespace; empty for cluster-scoped objects.",
                ),
                f(
                    "ownerReferences",
                    list(r_meta("OwnerReference"), ListType::Map("uid")),
                    "Objects this one depends on.",
                ),
                f(
                    "resourceVersion",
                    Ty::Str,
                    "The version of the object, opaque; set by the server.",
                ),
                f("selfLink", Ty::Str, "Deprecated; not set."),
                f(
                    "uid",
                    Ty::Str,
                    "Unique in time and space; set by the server.",
                ),
            ],
        ),
        def(
            m("ListMeta"),
            "The metadata of a list.",
            vec![
                f("continue", Ty::Str, "Where the next page starts."),
                f("remainingItemCount", Ty::Int64, "Items after this page."),
                f(
                    "resourceVersion",
                    Ty::Str,
                    "The revision the list was read at.",
                ),
                f("selfLink", Ty::Str, "Deprecated; not set."),
            ],
        ),
        def(
            m("ManagedFieldsEntry"),
            "The fields one manager owns.",
            vec![
                f(
                    "apiVersion",
                    Ty::Str,
                    "The version the fields are named in.",
                ),
                f("fieldsType", Ty::Str, "FieldsV1."),
                f("fieldsV1", r_meta("FieldsV1"), "The fields."),
                f("manager", Ty::Str, "Who manages them."),
                f("operation", Ty::Str, "Apply or Update."),
                f("subresource", Ty::Str, "The subresource written, if any."),
                f("time", r_meta("Time"), "When they were last changed."),
            ],
        ),
        def(
            m("OwnerReference"),
            "An object this one depends on.",
            vec![
                req("apiVersion", Ty::Str, "Its API version."),
                f(
                    "blockOwnerDeletion",
                    Ty::Bool,
                    "Whether its deletion waits for this one.",
                ),
                f(
                    "controller",
                    Ty::Bool,
                    "Whether it is the managing controller.",
                ),
                req("kind", Ty::Str, "Its kind."),
                req("name", Ty::Str, "Its name."),
                req("uid", Ty::Str, "Its uid."),
            ],
        ),
        time,
        micro_time,
        fields_v1,
        patch,
        raw,
        def(
            m("Status"),
            "The result of an operation that does not return an object.",
            vec![
                f("apiVersion", Ty::Str, "v1."),
                f("code", Ty::Int, "The HTTP status code."),
                f("details", r_meta("StatusDetails"), "More about the result."),
                f("kind", Ty::Str, "Status."),
                f("message", Ty::Str, "For a person."),
                f("metadata", r_meta("ListMeta"), "Standard list metadata."),
                f("reason", Ty::Str, "Why it failed, in CamelCase."),
                f("status", Ty::Str, "Success or Failure."),
            ],
        ),
        def(
            m("StatusDetails"),
            "The object an error is about.",
            vec![
                f(
                    "causes",
                    list(r_meta("StatusCause"), ListType::Atomic),
                    "Every cause.",
                ),
                f("group", Ty::Str, "Its group."),
                f("kind", Ty::Str, "Its kind."),
                f("name", Ty::Str, "Its name."),
                f("retryAfterSeconds", Ty::Int, "When to try again."),
                f("uid", Ty::Str, "Its uid."),
            ],
        ),
        def(
            m("StatusCause"),
            "One cause of an error.",
            vec![
                f("field", Ty::Str, "The field at fault."),
                f("message", Ty::Str, "For a person."),
                f("reason", Ty::Str, "In CamelCase."),
            ],
        ),
        def(
            m("DeleteOptions"),
            "The options of a deletion.",
            vec![
                f("apiVersion", Ty::Str, "The versioned schema."),
                f(
                    "dryRun",
                    list(Ty::Str, ListType::Atomic),
                    "All: do not persist.",
                ),
                f("gracePeriodSeconds", Ty::Int64, "Seconds before deletion."),
                f("kind", Ty::Str, "DeleteOptions."),
                f(
                    "preconditions",
                    r_meta("Preconditions"),
                    "What must hold to delete.",
                ),
                f(
                    "propagationPolicy",
                    Ty::Str,
                    "Orphan, Background or Foreground.",
                ),
            ],
        ),
        def(
            m("Preconditions"),
            "What must hold for a deletion.",
            vec![
                f(
                    "resourceVersion",
                    Ty::Str,
                    "The version the object must have.",
                ),
                f("uid", Ty::Str, "The uid the object must have."),
            ],
        ),
        def(
            m("WatchEvent"),
            "One event of a watch.",
            vec![
                req(
                    "object",
                    Ty::Ref("io.k8s.apimachinery.pkg.runtime.RawExtension".into()),
                    "The object.",
                ),
                req(
                    "type",
                    Ty::Str,
                    "ADDED, MODIFIED, DELETED, BOOKMARK or ERROR.",
                ),
            ],
        ),
    ]
}
