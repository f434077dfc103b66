//! Silences as Alertmanager's API v2 shapes them: matchers with a start, an end, an author and a comment.
//!
//! Regex matchers are RE2-style regexes (the `regex` crate) anchored at both ends, as Alertmanager compiles them:
//! `^(?:value)$`. One that does not compile is refused when the silence is added. Silences keep the source text (the
//! state file's form); the compiled regexes live beside them and are rebuilt on add and on load.
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use regex::{Regex, RegexBuilder};
use serde::{Deserialize, Serialize};

use super::humantime_serde_compat;
use super::LabelSet;

/// Expired silences stay listed this long (Alertmanager keeps them for its retention), then are dropped.
pub const EXPIRED_RETENTION: Duration = Duration::from_secs(3600);

/// A silence's regex is a few alternatives; 1 MiB of compiled program is plenty and keeps the unauthenticated API
/// from building big automata (the crate's default is 10 MiB).
const REGEX_SIZE_LIMIT: usize = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SilenceError {
    #[error("invalid silence: {0}")]
    Invalid(String),
    #[error("silence {0} not found")]
    NotFound(String),
    #[error("silence {0} is already expired")]
    AlreadyExpired(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Matcher {
    pub name: String,
    pub value: String,
    #[serde(rename = "isRegex", default)]
    pub is_regex: bool,
    /// `false` negates the matcher (`!=`, `!~`).
    #[serde(rename = "isEqual", default = "yes")]
    pub is_equal: bool,
}

fn yes() -> bool {
    true
}

/// What `POST /api/v2/silences` accepts; with an `id` of an existing silence it replaces that silence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SilenceInput {
    #[serde(default)]
    pub id: Option<String>,
    pub matchers: Vec<Matcher>,
    #[serde(rename = "startsAt", with = "humantime_serde_compat")]
    pub starts_at: SystemTime,
    #[serde(rename = "endsAt", with = "humantime_serde_compat")]
    pub ends_at: SystemTime,
    #[serde(rename = "createdBy", default)]
    pub created_by: String,
    #[serde(default)]
    pub comment: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Silence {
    pub id: String,
    pub matchers: Vec<Matcher>,
    #[serde(rename = "startsAt", with = "humantime_serde_compat")]
    pub starts_at: SystemTime,
    #[serde(rename = "endsAt", with = "humantime_serde_compat")]
    pub ends_at: SystemTime,
    #[serde(rename = "createdBy")]
    pub created_by: String,
    pub comment: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SilenceState {
    Pending,
    Active,
    Expired,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SilenceStatus {
    pub state: SilenceState,
}

/// A silence as `GET /api/v2/silences` shows it: the silence plus `status.state`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SilenceView {
    #[serde(flatten)]
    pub silence: Silence,
    pub status: SilenceStatus,
}

impl Silence {
    pub fn state(&self, now: SystemTime) -> SilenceState {
        if now >= self.ends_at {
            SilenceState::Expired
        } else if now < self.starts_at {
            SilenceState::Pending
        } else {
            SilenceState::Active
        }
    }
}

/// A silence with its matchers' compiled regexes.
#[derive(Debug, Clone)]
struct Entry {
    silence: Silence,
    /// One per matcher, `None` for an equality matcher. `None` as a whole when a stored regex no longer compiles
    /// (see `Silences::from_vec`): the silence then mutes nothing.
    regexes: Option<Vec<Option<Regex>>>,
}

/// The regexes derive from the silence's text, so the silence alone decides equality.
impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.silence == other.silence
    }
}

impl Entry {
    /// Whether every matcher matches; an absent label matches as the empty string (Prometheus semantics).
    fn matches_labels(&self, labels: &LabelSet) -> bool {
        let Some(regexes) = &self.regexes else {
            return false;
        };
        self.silence.matchers.iter().zip(regexes).all(|(m, re)| {
            let value = labels.get(&m.name).map(String::as_str).unwrap_or("");
            let hit = match re {
                Some(re) => re.is_match(value),
                None => m.value == value,
            };
            hit == m.is_equal
        })
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Silences {
    silences: BTreeMap<String, Entry>,
}

impl Silences {
    /// Silences read back from the state file. One whose regex no longer compiles (a hand-edited file, or a pattern
    /// an older apf-monitor accepted) is kept so it can still be listed and expired, but mutes nothing: a restart
    /// must not fail over it, and muting on its other matchers alone could hide alerts its author never meant to.
    pub fn from_vec(silences: Vec<Silence>) -> Self {
        let silences = silences
            .into_iter()
            .map(|silence| {
                let regexes = compile_matchers(&silence.matchers)
                    .inspect_err(|e| {
                        tracing::warn!(
                            silence = %silence.id,
                            error = %e,
                            "stored silence has a regex that does not compile; it mutes nothing until replaced"
                        )
                    })
                    .ok();
                (silence.id.clone(), Entry { silence, regexes })
            })
            .collect();
        Self { silences }
    }

    pub fn to_vec(&self) -> Vec<Silence> {
        self.silences.values().map(|e| e.silence.clone()).collect()
    }

    /// Validates and stores a silence; returns its id (a new one unless `input.id` names an existing silence).
    pub fn add(&mut self, input: SilenceInput, now: SystemTime) -> Result<String, SilenceError> {
        let regexes = validate(&input, now)?;
        let id = match input.id {
            Some(id) if !id.is_empty() => {
                if !self.silences.contains_key(&id) {
                    return Err(SilenceError::NotFound(id));
                }
                id
            }
            _ => new_id(),
        };
        let silence = Silence {
            id: id.clone(),
            matchers: input.matchers,
            starts_at: input.starts_at,
            ends_at: input.ends_at,
            created_by: input.created_by,
            comment: input.comment,
        };
        self.silences.insert(
            id.clone(),
            Entry {
                silence,
                regexes: Some(regexes),
            },
        );
        self.gc(now);
        Ok(id)
    }

    pub fn get(&self, id: &str, now: SystemTime) -> Option<SilenceView> {
        self.silences.get(id).map(|e| view(&e.silence, now))
    }

    /// Every silence still kept, expired ones included (for an hour), in id order.
    pub fn list(&self, now: SystemTime) -> Vec<SilenceView> {
        self.silences
            .values()
            .map(|e| view(&e.silence, now))
            .collect()
    }

    /// Ends a silence now (a pending one never starts).
    pub fn expire(&mut self, id: &str, now: SystemTime) -> Result<(), SilenceError> {
        let s = &mut self
            .silences
            .get_mut(id)
            .ok_or_else(|| SilenceError::NotFound(id.to_string()))?
            .silence;
        match s.state(now) {
            SilenceState::Expired => return Err(SilenceError::AlreadyExpired(id.to_string())),
            SilenceState::Pending => {
                s.starts_at = now;
                s.ends_at = now;
            }
            SilenceState::Active => s.ends_at = now,
        }
        Ok(())
    }

    /// The id of an active silence that matches these labels.
    pub fn matching(&self, labels: &LabelSet, now: SystemTime) -> Option<&str> {
        self.silences
            .values()
            .find(|e| e.silence.state(now) == SilenceState::Active && e.matches_labels(labels))
            .map(|e| e.silence.id.as_str())
    }

    pub fn matches(&self, labels: &LabelSet, now: SystemTime) -> bool {
        self.matching(labels, now).is_some()
    }

    /// Drops silences expired for more than an hour.
    pub fn gc(&mut self, now: SystemTime) {
        self.silences.retain(|_, e| {
            now.duration_since(e.silence.ends_at)
                .map_or(true, |past| past <= EXPIRED_RETENTION)
        });
    }

    pub fn len(&self) -> usize {
        self.silences.len()
    }

    pub fn is_empty(&self) -> bool {
        self.silences.is_empty()
    }
}

fn view(s: &Silence, now: SystemTime) -> SilenceView {
    SilenceView {
        silence: s.clone(),
        status: SilenceStatus {
            state: s.state(now),
        },
    }
}

/// Checks a silence and compiles its regexes (one per matcher, `None` for an equality matcher).
fn validate(input: &SilenceInput, now: SystemTime) -> Result<Vec<Option<Regex>>, SilenceError> {
    let invalid = |m: String| Err(SilenceError::Invalid(m));
    if input.matchers.is_empty() {
        return invalid("at least one matcher is required".into());
    }
    if input.ends_at <= input.starts_at {
        return invalid("endsAt must be after startsAt".into());
    }
    if input.ends_at <= now {
        return invalid("endsAt is in the past".into());
    }
    if input.matchers.iter().any(|m| m.name.is_empty()) {
        return invalid("a matcher has an empty label name".into());
    }
    let regexes = compile_matchers(&input.matchers).map_err(SilenceError::Invalid)?;
    let matches_everything = input.matchers.iter().zip(&regexes).all(|(m, re)| {
        m.is_equal
            && match re {
                Some(re) => re.is_match(""),
                None => m.value.is_empty(),
            }
    });
    if matches_everything {
        // Alertmanager refuses these too: a silence that mutes every alert is a mistake.
        return invalid("the matchers match every alert; at least one must require a value".into());
    }
    Ok(regexes)
}

/// The regex of each regex matcher, in matcher order; an error names the matcher.
fn compile_matchers(matchers: &[Matcher]) -> Result<Vec<Option<Regex>>, String> {
    matchers
        .iter()
        .map(|m| {
            if !m.is_regex {
                return Ok(None);
            }
            let op = if m.is_equal { "=~" } else { "!~" };
            compile(&m.value)
                .map(Some)
                .map_err(|e| format!("matcher {}{op}{:?}: invalid regex: {e}", m.name, m.value))
        })
        .collect()
}

/// Alertmanager's anchoring, `^(?:value)$`. The value is compiled alone first so that one like `a)|(b` cannot close
/// the group and slip out of the anchors, and so that an error is about the text its author wrote.
fn compile(value: &str) -> Result<Regex, String> {
    build(value)?;
    build(&format!("^(?:{value})$"))
}

fn build(pattern: &str) -> Result<Regex, String> {
    RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| match e {
            // The crate draws the pattern with a caret over several lines; an API error reads better on one.
            regex::Error::Syntax(text) => text
                .lines()
                .find_map(|l| l.strip_prefix("error: "))
                .map_or_else(
                    || text.split_whitespace().collect::<Vec<_>>().join(" "),
                    str::to_string,
                ),
            regex::Error::CompiledTooBig(limit) => {
                format!("the compiled regex would exceed {limit} bytes")
            }
            e => e.to_string(),
        })
}

/// 128 random bits written like a UUID.
fn new_id() -> String {
    let b: [u8; 16] = rand::random();
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn labels(pairs: &[(&str, &str)]) -> LabelSet {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn m(name: &str, value: &str, is_regex: bool, is_equal: bool) -> Matcher {
        Matcher {
            name: name.into(),
            value: value.into(),
            is_regex,
            is_equal,
        }
    }

    fn input(matchers: Vec<Matcher>, from: u64, to: u64) -> SilenceInput {
        SilenceInput {
            id: None,
            matchers,
            starts_at: t(from),
            ends_at: t(to),
            created_by: "alice".into(),
            comment: "maintenance".into(),
        }
    }

    /// Whether a silence with this one regex matcher on `priority_level` mutes an alert with this level.
    fn mutes(regex: &str, is_equal: bool, level: &str) -> bool {
        let mut s = Silences::default();
        s.add(
            input(
                vec![
                    m("alertname", "A", false, true),
                    m("priority_level", regex, true, is_equal),
                ],
                0,
                60,
            ),
            t(0),
        )
        .unwrap();
        s.matches(
            &labels(&[("alertname", "A"), ("priority_level", level)]),
            t(1),
        )
    }

    #[test]
    fn regexes_are_re2_style_and_anchored() {
        // Character classes.
        assert!(mutes("workload-[a-z]+", true, "workload-low"));
        assert!(!mutes("workload-[a-z]+", true, "workload-2"));
        assert!(mutes(r"level-\d{2}", true, "level-42"));
        assert!(!mutes(r"level-\d{2}", true, "level-4"));
        assert!(mutes("[^x]+", true, "abc") && !mutes("[^x]+", true, "axc"));
        // Alternation, each alternative anchored.
        for level in ["workload-low", "global-default"] {
            assert!(mutes("workload-low|global-default", true, level), "{level}");
        }
        assert!(!mutes("workload-low|global-default", true, "workload-lowx"));
        assert!(!mutes(
            "workload-low|global-default",
            true,
            "xglobal-default"
        ));
        // Anchored at both ends, as Alertmanager's ^(?:...)$.
        assert!(mutes("work.*", true, "workload"));
        assert!(!mutes("work.*", true, "xworkload"));
        assert!(!mutes("load", true, "workload"));
        assert!(mutes(r"10\.0\.0\..*:6443", true, "10.0.0.5:6443"));
        assert!(!mutes(r"10\.0\.0\..*:6443", true, "10.0.0.5:64430"));
        // Case-sensitive unless the regex says otherwise.
        assert!(!mutes("workload-low", true, "Workload-Low"));
        assert!(mutes("(?i)workload-low", true, "Workload-Low"));
        // isEqual false negates the regex (`!~`).
        assert!(!mutes("workload-.*", false, "workload-low"));
        assert!(mutes("workload-.*", false, "global-default"));
        assert!(mutes("workload-.*", false, "xworkload-low"), "anchored too");
        // An absent label is the empty string.
        let mut s = Silences::default();
        s.add(
            input(
                vec![
                    m("flow_schema", "x|", true, true),
                    m("alertname", "A", false, true),
                ],
                0,
                60,
            ),
            t(0),
        )
        .unwrap();
        assert!(s.matches(&labels(&[("alertname", "A")]), t(1)));
    }

    #[test]
    fn invalid_regexes_are_refused_with_the_reason() {
        let refused = |regex: &str, is_equal: bool| {
            let mut s = Silences::default();
            let e = s
                .add(
                    input(vec![m("priority_level", regex, true, is_equal)], 0, 60),
                    t(0),
                )
                .unwrap_err();
            assert!(s.is_empty());
            match e {
                SilenceError::Invalid(text) => text,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(
            refused("(workload", true),
            "matcher priority_level=~\"(workload\": invalid regex: unclosed group"
        );
        assert_eq!(
            refused("[a-", false),
            "matcher priority_level!~\"[a-\": invalid regex: unclosed character class"
        );
        // Closing the wrapping group would escape the anchors; the value alone does not compile.
        assert!(refused("a)|(b", true).contains("unopened group"));
        for bad in [
            "*",
            "a{2,1}",
            "\\",
            "(?P<>a)",
            "a{1000}{1000}",
            r"\p{NoSuchClass}",
        ] {
            let e = refused(bad, true);
            assert!(
                e.starts_with("matcher priority_level=~") && e.contains("invalid regex: "),
                "{bad}: {e}"
            );
            assert!(!e.contains('\n'), "{bad}: {e}");
        }
    }

    #[test]
    fn stored_silences_keep_their_form_and_never_fail_a_restart() {
        let mut s = Silences::default();
        s.add(input(vec![m("alertname", "A|B", true, true)], 0, 60), t(0))
            .unwrap();
        let stored = serde_json::to_value(s.to_vec()).unwrap();
        assert_eq!(
            stored[0]["matchers"],
            serde_json::json!([{"name": "alertname", "value": "A|B", "isRegex": true, "isEqual": true}])
        );
        let back = Silences::from_vec(serde_json::from_value(stored).unwrap());
        assert_eq!(back, s);
        assert!(back.matches(&labels(&[("alertname", "B")]), t(1)));

        // A regex that no longer compiles: the silence stays listed and expirable, but mutes nothing, negated or not.
        let mut broken = s.to_vec();
        broken[0].matchers = vec![m("alertname", "(A", true, true), m("x", "(", true, false)];
        let mut back = Silences::from_vec(broken);
        assert_eq!(back.len(), 1);
        assert!(!back.matches(&labels(&[("alertname", "(A")]), t(1)));
        assert!(!back.matches(&labels(&[("alertname", "B")]), t(1)));
        let id = back.list(t(1))[0].silence.id.clone();
        back.expire(&id, t(2)).unwrap();
    }

    #[test]
    fn add_validates() {
        let mut s = Silences::default();
        let e = s.add(input(vec![], 0, 60), t(0)).unwrap_err();
        assert_eq!(
            e,
            SilenceError::Invalid("at least one matcher is required".into())
        );
        let e = s
            .add(input(vec![m("alertname", "A", false, true)], 60, 60), t(0))
            .unwrap_err();
        assert!(e.to_string().contains("endsAt must be after startsAt"));
        let e = s
            .add(input(vec![m("alertname", "A", false, true)], 0, 60), t(100))
            .unwrap_err();
        assert!(e.to_string().contains("past"));
        let e = s
            .add(input(vec![m("alertname", "(A", true, true)], 0, 60), t(0))
            .unwrap_err();
        assert!(e.to_string().contains("alertname=~\"(A\""), "{e}");
        let e = s
            .add(input(vec![m("alertname", ".*", true, true)], 0, 60), t(0))
            .unwrap_err();
        assert!(e.to_string().contains("every alert"));
        assert!(s.is_empty());
    }

    #[test]
    fn matching_states_expiry_and_retention() {
        let mut s = Silences::default();
        let id = s
            .add(
                input(
                    vec![
                        m(
                            "alertname",
                            "APFHeadroomLow|APFExhaustionPredicted",
                            true,
                            true,
                        ),
                        m("apiserver", "10.0.0.6:6443", false, false),
                    ],
                    10,
                    3600,
                ),
                t(0),
            )
            .unwrap();
        assert_eq!(id.len(), 36);
        assert_eq!(id.matches('-').count(), 4);
        let low = labels(&[
            ("alertname", "APFHeadroomLow"),
            ("apiserver", "10.0.0.5:6443"),
        ]);
        let other = labels(&[
            ("alertname", "APFHeadroomLow"),
            ("apiserver", "10.0.0.6:6443"),
        ]);
        let crit = labels(&[
            ("alertname", "APFQueueNearFull"),
            ("apiserver", "10.0.0.5:6443"),
        ]);
        assert!(!s.matches(&low, t(5)), "pending until startsAt");
        assert_eq!(s.list(t(5))[0].status.state, SilenceState::Pending);
        assert!(s.matches(&low, t(10)));
        assert!(!s.matches(&other, t(10)), "isEqual false negates");
        assert!(!s.matches(&crit, t(10)));
        s.expire(&id, t(100)).unwrap();
        assert!(!s.matches(&low, t(100)));
        assert_eq!(s.list(t(100))[0].status.state, SilenceState::Expired);
        assert_eq!(
            s.expire(&id, t(101)),
            Err(SilenceError::AlreadyExpired(id.clone()))
        );
        assert_eq!(
            s.expire("nope", t(101)),
            Err(SilenceError::NotFound("nope".into()))
        );
        s.gc(t(100 + 3600));
        assert_eq!(s.len(), 1, "kept for an hour");
        s.gc(t(100 + 3601));
        assert!(s.is_empty());
    }

    #[test]
    fn api_v2_json_shape() {
        let json = r#"{"matchers":[{"name":"priority_level","value":"workload-low","isRegex":false,"isEqual":true}],
            "startsAt":"2027-01-15T08:00:00Z","endsAt":"2027-01-15T10:00:00Z","createdBy":"bob","comment":"load test"}"#;
        let parsed: SilenceInput = serde_json::from_str(json).unwrap();
        let now = humantime::parse_rfc3339("2027-01-15T09:00:00Z").unwrap();
        let mut s = Silences::default();
        let id = s.add(parsed, now).unwrap();
        let out = serde_json::to_value(s.get(&id, now).unwrap()).unwrap();
        assert_eq!(out["status"]["state"], "active");
        assert_eq!(out["createdBy"], "bob");
        assert_eq!(out["matchers"][0]["isRegex"], false);
        assert_eq!(out["matchers"][0]["isEqual"], true);
        assert_eq!(out["startsAt"], "2027-01-15T08:00:00.000Z");
        assert_eq!(out["id"], id.as_str());
        // Replacing by id keeps the id.
        let mut again: SilenceInput = serde_json::from_str(json).unwrap();
        again.id = Some(id.clone());
        again.comment = "longer".into();
        assert_eq!(s.add(again, now).unwrap(), id);
        assert_eq!(s.len(), 1);
        // isEqual defaults to true when a client leaves it out.
        let m: Matcher =
            serde_json::from_str(r#"{"name":"a","value":"b","isRegex":false}"#).unwrap();
        assert!(m.is_equal);
    }
}
