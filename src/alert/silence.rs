//! Silences as Alertmanager's API v2 shapes them: matchers with a start, an end, an author and a comment.
//!
//! Regex matchers are matched without a regex engine: `.*`, `.` (any one character), `\` escapes, literals and
//! top-level alternatives `a|b|c`, anchored at both ends like Alertmanager's. Anything else is refused with a message
//! saying what is supported, so a silence never silently matches something else than what its author meant.
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::humantime_serde_compat;
use super::LabelSet;

/// Expired silences stay listed this long (Alertmanager keeps them for its retention), then are dropped.
pub const EXPIRED_RETENTION: Duration = Duration::from_secs(3600);

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

    /// Whether every matcher matches; an absent label matches as the empty string (Prometheus semantics).
    fn matches_labels(&self, labels: &LabelSet) -> bool {
        self.matchers.iter().all(|m| {
            let value = labels.get(&m.name).map(String::as_str).unwrap_or("");
            let hit = if m.is_regex {
                // Validated on add; a pattern that no longer parses (hand-edited state) matches nothing.
                Pattern::parse(&m.value).is_ok_and(|p| p.matches(value))
            } else {
                m.value == value
            };
            hit == m.is_equal
        })
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Silences {
    silences: BTreeMap<String, Silence>,
}

impl Silences {
    pub fn from_vec(silences: Vec<Silence>) -> Self {
        Self {
            silences: silences.into_iter().map(|s| (s.id.clone(), s)).collect(),
        }
    }

    pub fn to_vec(&self) -> Vec<Silence> {
        self.silences.values().cloned().collect()
    }

    /// Validates and stores a silence; returns its id (a new one unless `input.id` names an existing silence).
    pub fn add(&mut self, input: SilenceInput, now: SystemTime) -> Result<String, SilenceError> {
        validate(&input, now)?;
        let id = match input.id {
            Some(id) if !id.is_empty() => {
                if !self.silences.contains_key(&id) {
                    return Err(SilenceError::NotFound(id));
                }
                id
            }
            _ => new_id(),
        };
        self.silences.insert(
            id.clone(),
            Silence {
                id: id.clone(),
                matchers: input.matchers,
                starts_at: input.starts_at,
                ends_at: input.ends_at,
                created_by: input.created_by,
                comment: input.comment,
            },
        );
        self.gc(now);
        Ok(id)
    }

    pub fn get(&self, id: &str, now: SystemTime) -> Option<SilenceView> {
        self.silences.get(id).map(|s| view(s, now))
    }

    /// Every silence still kept, expired ones included (for an hour), in id order.
    pub fn list(&self, now: SystemTime) -> Vec<SilenceView> {
        self.silences.values().map(|s| view(s, now)).collect()
    }

    /// Ends a silence now (a pending one never starts).
    pub fn expire(&mut self, id: &str, now: SystemTime) -> Result<(), SilenceError> {
        let s = self
            .silences
            .get_mut(id)
            .ok_or_else(|| SilenceError::NotFound(id.to_string()))?;
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
            .find(|s| s.state(now) == SilenceState::Active && s.matches_labels(labels))
            .map(|s| s.id.as_str())
    }

    pub fn matches(&self, labels: &LabelSet, now: SystemTime) -> bool {
        self.matching(labels, now).is_some()
    }

    /// Drops silences expired for more than an hour.
    pub fn gc(&mut self, now: SystemTime) {
        self.silences.retain(|_, s| {
            now.duration_since(s.ends_at)
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

fn validate(input: &SilenceInput, now: SystemTime) -> Result<(), SilenceError> {
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
    let mut matches_everything = true;
    for m in &input.matchers {
        if m.name.is_empty() {
            return invalid("a matcher has an empty label name".into());
        }
        if m.is_regex {
            let p = Pattern::parse(&m.value).map_err(|e| {
                SilenceError::Invalid(format!("matcher {}=~{:?}: {e}", m.name, m.value))
            })?;
            matches_everything &= m.is_equal && p.matches("");
        } else {
            matches_everything &= m.is_equal && m.value.is_empty();
        }
    }
    if matches_everything {
        // Alertmanager refuses these too: a silence that mutes every alert is a mistake.
        return invalid("the matchers match every alert; at least one must require a value".into());
    }
    Ok(())
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

#[derive(Debug, Clone, Copy, PartialEq)]
enum Token {
    Char(char),
    AnyChar,
    AnyString,
}

/// A regex restricted to alternatives of literals, `.` and `.*`, anchored at both ends.
#[derive(Debug, Clone, PartialEq)]
pub struct Pattern {
    alternatives: Vec<Vec<Token>>,
}

impl Pattern {
    pub fn parse(text: &str) -> Result<Pattern, String> {
        let mut alternatives = vec![Vec::new()];
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            let current = alternatives.last_mut().ok_or("empty pattern")?;
            match c {
                '|' => alternatives.push(Vec::new()),
                '\\' => match chars.next() {
                    Some(e) if !e.is_alphanumeric() => current.push(Token::Char(e)),
                    Some(e) => {
                        return Err(format!(
                        "the escape \\{e} is not supported; only escaped punctuation like \\. is"
                    ))
                    }
                    None => return Err("a trailing \\ escapes nothing".into()),
                },
                '.' if chars.peek() == Some(&'*') => {
                    chars.next();
                    current.push(Token::AnyString);
                }
                '.' => current.push(Token::AnyChar),
                '*' | '+' | '?' | '(' | ')' | '[' | ']' | '{' | '}' | '^' | '$' => {
                    return Err(format!(
                        "{c:?} is not supported: use literals, `.`, `.*` and alternatives a|b|c \
                         (matchers are anchored at both ends already)"
                    ))
                }
                c => current.push(Token::Char(c)),
            }
        }
        Ok(Pattern { alternatives })
    }

    pub fn matches(&self, value: &str) -> bool {
        let chars: Vec<char> = value.chars().collect();
        self.alternatives.iter().any(|a| match_tokens(a, &chars))
    }
}

/// Backtracking over `.*`; patterns are short and typed by people, so this stays cheap.
fn match_tokens(tokens: &[Token], value: &[char]) -> bool {
    match tokens.split_first() {
        None => value.is_empty(),
        Some((Token::AnyString, rest)) => {
            (0..=value.len()).any(|i| match_tokens(rest, &value[i..]))
        }
        Some((Token::AnyChar, rest)) => !value.is_empty() && match_tokens(rest, &value[1..]),
        Some((Token::Char(c), rest)) => value.first() == Some(c) && match_tokens(rest, &value[1..]),
    }
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

    #[test]
    fn patterns() {
        let p = Pattern::parse("workload-low|global-default").unwrap();
        assert!(p.matches("workload-low"));
        assert!(p.matches("global-default"));
        assert!(!p.matches("workload-lowx"), "anchored at the end");
        assert!(!p.matches("xworkload-low"), "anchored at the start");
        let any = Pattern::parse(".*").unwrap();
        assert!(any.matches("") && any.matches("anything"));
        let prefix = Pattern::parse("10\\.0\\.0\\..*:6443").unwrap();
        assert!(prefix.matches("10.0.0.5:6443"));
        assert!(!prefix.matches("10.0.1.5:6443"));
        assert!(Pattern::parse("a.c").unwrap().matches("abc"));
        assert!(!Pattern::parse("a.c").unwrap().matches("ac"));
        for bad in ["a+", "(a|b)", "[ab]", "^a", "a$", "a*", "\\d", "x\\"] {
            let err = Pattern::parse(bad).unwrap_err();
            assert!(!err.is_empty(), "{bad}");
        }
        assert!(Pattern::parse("a+").unwrap_err().contains("a|b|c"));
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
            .add(input(vec![m("alertname", "(A)", true, true)], 0, 60), t(0))
            .unwrap_err();
        assert!(e.to_string().contains("alertname=~\"(A)\""), "{e}");
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
