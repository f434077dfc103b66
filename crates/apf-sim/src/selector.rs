//! `labelSelector` and `fieldSelector` of list and watch requests, in the syntax of Kubernetes' "Labels and
//! Selectors" and "Field Selectors" pages: `a=b`, `a==b`, `a!=b`, `a`, `!a`, `a in (x,y)`, `a notin (x,y)`,
//! comma-separated, all of which must hold. Field selectors know `metadata.name` and `metadata.namespace`, the
//! fields every resource supports.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A parsed selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Selector {
    requirements: Vec<Requirement>,
    /// A field selector reads `metadata.name`-style paths; a label selector reads `metadata.labels`.
    fields: bool,
}

/// A selector that does not parse, or names a field that cannot be selected on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(super) struct SelectorError(String);

/// Splits at commas outside parentheses: `a in (x,y),b` is two requirements.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn parse_requirement(part: &str) -> Result<Requirement, SelectorError> {
    let bad = || SelectorError(format!("unable to parse requirement: {part:?}"));
    let p = part.trim();
    for (op, set) in [(" notin ", false), (" in ", true)] {
        if let Some((key, values)) = p.split_once(op) {
            let values = values.trim();
            let inner = values
                .strip_prefix('(')
                .and_then(|v| v.strip_suffix(')'))
                .ok_or_else(bad)?;
            let values: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
            let key = key.trim().to_string();
            if !valid_key(&key) {
                return Err(bad());
            }
            return Ok(if set {
                Requirement::In(key, values)
            } else {
                Requirement::NotIn(key, values)
            });
        }
    }
    let (key, value, negated) = if let Some((k, v)) = p.split_once("!=") {
        (k, Some(v), true)
    } else if let Some((k, v)) = p.split_once("==") {
        (k, Some(v), false)
    } else if let Some((k, v)) = p.split_once('=') {
        (k, Some(v), false)
    } else if let Some(k) = p.strip_prefix('!') {
        (k, None, true)
    } else {
        (p, None, false)
    };
    let key = key.trim().to_string();
    if !valid_key(&key) {
        return Err(bad());
    }
    Ok(match (value, negated) {
        (Some(v), false) => Requirement::Equals(key, v.trim().to_string()),
        (Some(v), true) => Requirement::NotEquals(key, v.trim().to_string()),
        (None, false) => Requirement::Exists(key),
        (None, true) => Requirement::NotExists(key),
    })
}

impl Selector {
    /// A `labelSelector`.
    pub fn labels(text: &str) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        if !text.trim().is_empty() {
            for part in split_top_level(text) {
                requirements.push(parse_requirement(part)?);
            }
        }
        Ok(Selector {
            requirements,
            fields: false,
        })
    }

    /// A `fieldSelector`: equality only, on `metadata.name` and `metadata.namespace`.
    pub fn fields(text: &str) -> Result<Self, SelectorError> {
        let mut s = Self::labels(text)?;
        for r in &s.requirements {
            let key = match r {
                Requirement::Equals(k, _) | Requirement::NotEquals(k, _) => k,
                _ => {
                    return Err(SelectorError(format!(
                        "invalid selector: {text:?}; field selectors take =, == and != only"
                    )))
                }
            };
            if key != "metadata.name" && key != "metadata.namespace" {
                return Err(SelectorError(format!("field label not supported: {key}")));
            }
        }
        s.fields = true;
        Ok(s)
    }

    fn value<'a>(&self, object: &'a Value, key: &str) -> Option<&'a str> {
        if self.fields {
            let field = key.strip_prefix("metadata.")?;
            // A cluster-scoped object's namespace is "".
            return Some(object["metadata"][field].as_str().unwrap_or(""));
        }
        object["metadata"]["labels"][key].as_str()
    }

    pub fn matches(&self, object: &Value) -> bool {
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => self.value(object, k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => self.value(object, k) != Some(v.as_str()),
            Requirement::Exists(k) => self.value(object, k).is_some(),
            Requirement::NotExists(k) => self.value(object, k).is_none(),
            Requirement::In(k, vs) => self
                .value(object, k)
                .is_some_and(|v| vs.iter().any(|x| x == v)),
            Requirement::NotIn(k, vs) => self
                .value(object, k)
                .is_none_or(|v| !vs.iter().any(|x| x == v)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj() -> Value {
        json!({"metadata": {"name": "kubernetes", "namespace": "default",
            "labels": {"kubernetes.io/service-name": "kubernetes", "tier": "control-plane"}}})
    }

    #[test]
    fn label_selectors() {
        let m = |s: &str| Selector::labels(s).unwrap().matches(&obj());
        assert!(m(""));
        assert!(m("kubernetes.io/service-name=kubernetes"));
        assert!(m("kubernetes.io/service-name==kubernetes,tier"));
        assert!(!m("kubernetes.io/service-name=other"));
        assert!(m("kubernetes.io/service-name!=other"));
        assert!(!m("!tier"));
        assert!(m("!missing"));
        assert!(m(
            "tier in (control-plane, worker),kubernetes.io/service-name"
        ));
        assert!(!m("tier notin (control-plane)"));
        assert!(m("missing notin (x)"));
        assert!(Selector::labels("a in x").is_err());
        assert!(Selector::labels("=x").is_err());
    }

    #[test]
    fn field_selectors() {
        let m = |s: &str| Selector::fields(s).unwrap().matches(&obj());
        assert!(m("metadata.name=kubernetes"));
        assert!(!m("metadata.name=other"));
        assert!(m("metadata.namespace!=kube-system"));
        let e = Selector::fields("spec.holderIdentity=x").unwrap_err();
        assert!(e.to_string().contains("field label not supported"), "{e}");
        assert!(Selector::fields("metadata.name").is_err());
    }
}
