//! What the write path checks against the schemas, in kube-apiserver's words: the fields a kind does not have
//! (strict decoding, `fieldValidation=Strict`) and values of the wrong JSON type (which its JSON decoder refuses
//! whatever `fieldValidation` says).
use serde_json::Value;

use super::meta;
use super::schema::{self, Def, Ty};
use crate::discovery;
use apf::KubeVersion;

/// The fields of `object` (a `kind` of API version `api`, `v1beta3` or `flowcontrol.apiserver.k8s.io/v1beta3`, on
/// Kubernetes `v`) its schema does not have, as kube-apiserver's strict decoding names them:
/// `unknown field "spec.rules[0].subjects[0].bar"`. Nothing for a kind the cluster does not serve.
pub(crate) fn unknown_fields(v: KubeVersion, api: &str, kind: &str, object: &Value) -> Vec<String> {
    check(v, api, kind, object)
        .unknown
        .into_iter()
        .map(|path| format!("unknown field \"{path}\""))
        .collect()
}

/// The values of `object` whose JSON type is not their field's, as Go's JSON decoder in kube-apiserver words them:
/// `json: cannot unmarshal string into Go struct field FlowSchemaSpec.spec.matchingPrecedence of type int32`.
/// kube-apiserver answers the first with 400 Bad Request (`FlowSchema in version "v1" cannot be handled as a
/// FlowSchema: ...`).
pub(crate) fn type_errors(v: KubeVersion, api: &str, kind: &str, object: &Value) -> Vec<String> {
    check(v, api, kind, object).mismatched
}

#[derive(Default)]
struct Findings {
    /// Paths with list indices: `spec.rules[0].foo`.
    unknown: Vec<String>,
    mismatched: Vec<String>,
}

fn check(v: KubeVersion, api: &str, kind: &str, object: &Value) -> Findings {
    let (group, version) = match api.rsplit_once('/') {
        Some((group, version)) => (Some(group), version),
        None => (None, api),
    };
    let mut found = Findings::default();
    let Some(r) = discovery::resources(v).into_iter().find(|r| {
        r.gvr.version == version && r.kind == kind && group.is_none_or(|g| g == r.gvr.group)
    }) else {
        return found;
    };
    let defs: Vec<Def> = schema::definitions(v, &r)
        .into_iter()
        .chain(meta::definitions())
        .collect();
    let walk = Walk { defs: &defs };
    let top = format!("{}.{kind}", schema::package(&r));
    walk.object(&top, object, &Path::default(), &mut found);
    found
}

/// Where a value is: with list indices (strict decoding's paths) and without (Go's type errors).
#[derive(Default, Clone)]
struct Path {
    indexed: String,
    fields: String,
}

impl Path {
    fn field(&self, key: &str) -> Path {
        let join = |at: &str| {
            if at.is_empty() {
                key.to_string()
            } else {
                format!("{at}.{key}")
            }
        };
        Path {
            indexed: join(&self.indexed),
            fields: join(&self.fields),
        }
    }

    fn index(&self, i: usize) -> Path {
        Path {
            indexed: format!("{}[{i}]", self.indexed),
            fields: self.fields.clone(),
        }
    }
}

struct Walk<'a> {
    defs: &'a [Def],
}

/// `FlowSchemaSpec` of `io.k8s.api.flowcontrol.v1.FlowSchemaSpec`.
fn short(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}

/// How Go names the type of a field: `int32`, `[]v1.PolicyRulesWithSubjects`, `map[string]string`.
fn go_type(ty: &Ty) -> String {
    match ty {
        Ty::Str => "string".into(),
        Ty::Int => "int32".into(),
        Ty::Int64 => "int64".into(),
        Ty::Bool => "bool".into(),
        Ty::Ref(name) => {
            let mut parts = name.rsplit('.');
            let kind = parts.next().unwrap_or_default();
            format!("{}.{kind}", parts.next().unwrap_or_default())
        }
        Ty::List(item, _) => format!("[]{}", go_type(item)),
        Ty::Map(item) => format!("map[string]{}", go_type(item)),
    }
}

/// How Go's decoder names a JSON value it cannot put in a field of type `ty`: `string`, `bool`, `array`, `object`,
/// `number`, or with the number where it is one that does not fit an integer (`number 1.5`).
fn json_type(value: &Value, ty: &Ty) -> String {
    match value {
        Value::String(_) => "string".into(),
        Value::Number(n) if matches!(ty, Ty::Int | Ty::Int64) => format!("number {n}"),
        Value::Number(_) => "number".into(),
        Value::Bool(_) => "bool".into(),
        Value::Array(_) => "array".into(),
        _ => "object".into(),
    }
}

impl Walk<'_> {
    fn def(&self, name: &str) -> Option<&Def> {
        self.defs.iter().find(|d| d.name == name)
    }

    /// The fields of `value`, an object of definition `name`.
    fn object(&self, name: &str, value: &Value, at: &Path, found: &mut Findings) {
        let (Some(d), Some(fields)) = (self.def(name), value.as_object()) else {
            return;
        };
        if d.open || d.time {
            return;
        }
        for (key, v) in fields {
            let path = at.field(key);
            match d.fields.iter().find(|f| f.name == key) {
                None => found.unknown.push(path.indexed),
                Some(field) => self.value(short(name), &field.ty, v, &path, found),
            }
        }
    }

    /// `value`, of type `ty`, in a field of struct `parent` (a list's item or a map's value are in their list's or
    /// map's field). Go's decoder leaves a field at null alone.
    fn value(&self, parent: &str, ty: &Ty, value: &Value, at: &Path, found: &mut Findings) {
        let fits = match (ty, value) {
            (_, Value::Null) => return,
            (Ty::Str, Value::String(_)) | (Ty::Bool, Value::Bool(_)) => true,
            (Ty::Int, Value::Number(n)) => n.as_i64().is_some_and(|n| i32::try_from(n).is_ok()),
            (Ty::Int64, Value::Number(n)) => n.is_i64(),
            (Ty::Ref(name), v) => match self.def(name) {
                Some(d) if d.time => v.is_string(),
                _ => v.is_object(),
            },
            (Ty::List(..), Value::Array(_)) | (Ty::Map(_), Value::Object(_)) => true,
            _ => false,
        };
        if !fits {
            found.mismatched.push(format!(
                "json: cannot unmarshal {} into Go struct field {parent}.{} of type {}",
                json_type(value, ty),
                at.fields,
                go_type(ty)
            ));
            return;
        }
        match (ty, value) {
            (Ty::Ref(name), _) => self.object(name, value, at, found),
            (Ty::List(item, _), Value::Array(items)) => {
                for (i, v) in items.iter().enumerate() {
                    self.value(parent, item, v, &at.index(i), found);
                }
            }
            (Ty::Map(item), Value::Object(entries)) => {
                for v in entries.values() {
                    self.value(parent, item, v, at, found);
                }
            }
            _ => {}
        }
    }
}
