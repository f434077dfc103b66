//! TokenReview and SubjectAccessReview, answered as kube-apiserver answers them (`authentication.k8s.io/v1`,
//! `authorization.k8s.io/v1`): enough for a client that guards its own HTTP API the way kube-rbac-proxy does, by
//! asking the cluster who a bearer token is and whether that user may use a path with a verb.
//!
//! The cluster's users are the [`SimUser`]s it is given (and the cluster's own token, as `system:admin` in
//! `system:masters`); its authorization is RBAC reduced to non-resource rules ([`Grant`]): `system:masters` may
//! do anything, as RBAC's superuser group, and every other user what a grant to its name or one of its groups allows.
use serde::Deserialize;
use serde_json::{json, Value};

use super::status::ApiError;

/// A user of the simulated cluster and the bearer token that authenticates as it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimUser {
    pub token: String,
    pub name: String,
    pub groups: Vec<String>,
}

/// What RBAC grants on non-resource URLs: `subject` (a user name, or `group:NAME`) may use `verbs` on
/// `non_resource_urls` (`*` alone, or a path ending in `*` for everything under it, as RBAC reads them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub subject: String,
    pub verbs: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

/// RBAC's superuser group.
const MASTERS: &str = "system:masters";

/// The users and grants one cluster answers reviews from.
#[derive(Debug, Clone, Default)]
pub(super) struct Policy {
    pub users: Vec<SimUser>,
    pub grants: Vec<Grant>,
}

impl Policy {
    /// The policy of a cluster whose own token (if any) is its administrator's.
    pub fn new(admin_token: Option<&str>, users: &[SimUser], grants: &[Grant]) -> Self {
        let mut all = users.to_vec();
        if let Some(token) = admin_token {
            all.push(SimUser {
                token: token.to_string(),
                name: "system:admin".into(),
                groups: vec![MASTERS.into()],
            });
        }
        Policy {
            users: all,
            grants: grants.to_vec(),
        }
    }

    fn authenticate(&self, token: &str) -> Option<&SimUser> {
        self.users
            .iter()
            .find(|u| super::auth::same(&u.token, token))
    }

    fn allows(&self, user: &str, groups: &[String], verb: &str, path: &str) -> bool {
        if groups.iter().any(|g| g == MASTERS) {
            return true;
        }
        let subject_matches = |s: &str| match s.strip_prefix("group:") {
            Some(group) => groups.iter().any(|g| g == group),
            None => s == user,
        };
        self.grants.iter().any(|g| {
            subject_matches(&g.subject)
                && g.verbs.iter().any(|v| v == "*" || v == verb)
                && g.non_resource_urls.iter().any(|u| url_matches(u, path))
        })
    }
}

/// RBAC's rule for non-resource URLs: `*`, an exact path, or a prefix ending in `*`.
fn url_matches(rule: &str, path: &str) -> bool {
    match rule.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix),
        None => rule == path,
    }
}

fn parse<T: for<'de> Deserialize<'de>>(body: &[u8], kind: &str) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("the body is not a {kind}: {e}")))
}

#[derive(Deserialize)]
struct TokenReview {
    spec: TokenReviewSpec,
}

#[derive(Deserialize)]
struct TokenReviewSpec {
    #[serde(default)]
    token: String,
}

/// `POST .../tokenreviews`: who the token is, or `authenticated: false` with an error, as the API answers.
pub(super) fn token_review(policy: &Policy, body: &[u8]) -> Result<Value, ApiError> {
    let review: TokenReview = parse(body, "TokenReview")?;
    let status = match policy.authenticate(&review.spec.token) {
        Some(user) => {
            let mut groups = user.groups.clone();
            groups.push("system:authenticated".into());
            json!({
                "authenticated": true,
                "user": {"username": user.name, "uid": super::objects::uuid_text(fnv(&user.name)), "groups": groups},
                "audiences": ["https://kubernetes.default.svc.cluster.local"],
            })
        }
        None => json!({"authenticated": false, "error": "invalid bearer token"}),
    };
    Ok(json!({
        "kind": "TokenReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": {"token": review.spec.token},
        "status": status,
    }))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AccessReview {
    spec: AccessReviewSpec,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AccessReviewSpec {
    #[serde(default)]
    user: String,
    #[serde(default)]
    groups: Vec<String>,
    non_resource_attributes: Option<NonResourceAttributes>,
    resource_attributes: Option<Value>,
}

#[derive(Deserialize, serde::Serialize)]
struct NonResourceAttributes {
    #[serde(default)]
    path: String,
    #[serde(default)]
    verb: String,
}

/// `POST .../subjectaccessreviews`: whether the user may use the path with the verb. Resource attributes are
/// answered `allowed: false` (this cluster grants non-resource URLs only).
pub(super) fn subject_access_review(policy: &Policy, body: &[u8]) -> Result<Value, ApiError> {
    let review: AccessReview = parse(body, "SubjectAccessReview")?;
    let spec = &review.spec;
    if spec.non_resource_attributes.is_none() && spec.resource_attributes.is_none() {
        return Err(ApiError::Invalid(
            "SubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.resourceAttributes: Invalid value: \
             \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified"
                .into(),
        ));
    }
    let status = match &spec.non_resource_attributes {
        Some(a) if policy.allows(&spec.user, &spec.groups, &a.verb, &a.path) => json!({
            "allowed": true,
            "reason": format!("RBAC: allowed to {} {}", a.verb, a.path),
        }),
        Some(a) => json!({
            "allowed": false,
            "reason": format!("RBAC: user \"{}\" may not {} {}", spec.user, a.verb, a.path),
        }),
        None => {
            json!({"allowed": false, "reason": "RBAC: this cluster grants non-resource URLs only"})
        }
    };
    Ok(json!({
        "kind": "SubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": {
            "user": spec.user,
            "groups": spec.groups,
            "nonResourceAttributes": spec.non_resource_attributes,
        },
        "status": status,
    }))
}

fn fnv(s: &str) -> u128 {
    let mut h: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    for b in s.bytes() {
        h ^= u128::from(b);
        h = h.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy::new(
            Some("admin-token"),
            &[
                SimUser {
                    token: "alice-token".into(),
                    name: "alice".into(),
                    groups: vec!["oncall".into()],
                },
                SimUser {
                    token: "bob-token".into(),
                    name: "bob".into(),
                    groups: vec![],
                },
            ],
            &[Grant {
                subject: "group:oncall".into(),
                verbs: vec!["post".into(), "delete".into()],
                non_resource_urls: vec!["/api/v1/silences".into(), "/api/v1/silences/*".into()],
            }],
        )
    }

    fn review(p: &Policy, user: &str, groups: &[&str], verb: &str, path: &str) -> bool {
        let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
            "user": user, "groups": groups, "nonResourceAttributes": {"path": path, "verb": verb}}});
        subject_access_review(p, body.to_string().as_bytes()).unwrap()["status"]["allowed"] == true
    }

    #[test]
    fn tokens_authenticate_as_their_users() {
        let p = policy();
        let who = |token: &str| {
            let body = json!({"spec": {"token": token}}).to_string();
            token_review(&p, body.as_bytes()).unwrap()["status"].clone()
        };
        let alice = who("alice-token");
        assert_eq!(alice["authenticated"], true);
        assert_eq!(alice["user"]["username"], "alice");
        assert_eq!(
            alice["user"]["groups"],
            json!(["oncall", "system:authenticated"])
        );
        assert_eq!(who("admin-token")["user"]["groups"][0], "system:masters");
        assert_eq!(who("nobody")["authenticated"], false);
        assert!(token_review(&p, b"[]").is_err());
    }

    #[test]
    fn rbac_on_non_resource_urls() {
        let p = policy();
        assert!(review(&p, "alice", &["oncall"], "post", "/api/v1/silences"));
        assert!(review(
            &p,
            "alice",
            &["oncall"],
            "delete",
            "/api/v1/silences/abc"
        ));
        assert!(!review(&p, "alice", &["oncall"], "post", "/-/reload"));
        assert!(!review(&p, "bob", &[], "post", "/api/v1/silences"));
        assert!(review(
            &p,
            "system:admin",
            &["system:masters"],
            "post",
            "/-/reload"
        ));
        let empty = json!({"spec": {"user": "bob"}}).to_string();
        assert!(subject_access_review(&p, empty.as_bytes()).is_err());
    }
}
