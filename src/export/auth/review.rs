//! Mode `kubernetes`: the cluster says who a token is (TokenReview) and whether that user may use a path with a
//! verb (SubjectAccessReview with `nonResourceAttributes`), as kube-rbac-proxy asks it. Answers are kept briefly, a
//! bounded number of them, so a burst of requests costs the apiserver one review each.
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

use super::Decision;

/// How long an allowed answer is kept: a revoked grant takes this long to bite.
const ALLOWED_TTL: Duration = Duration::from_secs(60);
/// How long a refusal is kept: a new grant takes this long to work.
const REFUSED_TTL: Duration = Duration::from_secs(10);
/// At most this many answers are kept.
const CACHE_SIZE: usize = 4096;
/// A review that takes longer is a failure (the caller gets 503).
const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Reviewer {
    client: kube::Client,
    /// By a keyed hash of (token, path, verb): the tokens themselves are not kept.
    cache: Mutex<HashMap<u64, (Instant, Decision)>>,
    hasher: std::collections::hash_map::RandomState,
}

impl Reviewer {
    pub fn new(client: kube::Client) -> Self {
        Reviewer {
            client,
            cache: Mutex::new(HashMap::new()),
            hasher: Default::default(),
        }
    }

    pub async fn review(&self, token: &str, path: &str, verb: &str) -> Decision {
        let key = self.hasher.hash_one((token, path, verb));
        let now = Instant::now();
        {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((until, decision)) = cache.get(&key) {
                if *until > now {
                    return decision.clone();
                }
            }
        }
        let decision = match tokio::time::timeout(REVIEW_TIMEOUT, self.ask(token, path, verb)).await
        {
            Ok(d) => d,
            Err(_) => Decision::Unavailable(format!(
                "the apiserver did not answer the review within {}s; try again",
                REVIEW_TIMEOUT.as_secs()
            )),
        };
        let ttl = match decision {
            Decision::Allowed => ALLOWED_TTL,
            Decision::Unavailable(_) => return decision,
            _ => REFUSED_TTL,
        };
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHE_SIZE {
            cache.retain(|_, (until, _)| *until > now);
            if cache.len() >= CACHE_SIZE {
                cache.clear();
            }
        }
        cache.insert(key, (now + ttl, decision.clone()));
        decision
    }

    async fn ask(&self, token: &str, path: &str, verb: &str) -> Decision {
        let reviews: Api<TokenReview> = Api::all(self.client.clone());
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = match reviews.create(&PostParams::default(), &review).await {
            Ok(a) => a,
            Err(e) => {
                return Decision::Unavailable(format!(
                    "cannot review the token with the apiserver: {}; apf-monitor's service account needs `create` \
                     on tokenreviews.authentication.k8s.io",
                    crate::errors::chain_of(&e)
                ))
            }
        };
        let status = answer.status.unwrap_or_default();
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(user)) => user,
            _ => {
                return Decision::Unauthenticated(format!(
                    "the cluster does not know the bearer token{}",
                    status.error.map(|e| format!(" ({e})")).unwrap_or_default()
                ))
            }
        };
        let access: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let name = user.username.clone().unwrap_or_default();
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some(verb.to_string()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        match access.create(&PostParams::default(), &review).await {
            Ok(a) => {
                let status = a.status.unwrap_or_default();
                if status.allowed {
                    Decision::Allowed
                } else {
                    let why = status.reason.filter(|r| !r.is_empty()).map(|r| format!(": {r}")).unwrap_or_default();
                    Decision::Forbidden(format!(
                        "user \"{name}\" may not {verb} {path}{why}; RBAC grants it with nonResourceURLs [\"{path}\"] and verbs [\"{verb}\"]"
                    ))
                }
            }
            Err(e) => Decision::Unavailable(format!(
                "cannot ask the apiserver whether \"{name}\" may {verb} {path}: {}; apf-monitor's service account \
                 needs `create` on subjectaccessreviews.authorization.k8s.io",
                crate::errors::chain_of(&e)
            )),
        }
    }
}
