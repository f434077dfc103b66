//! The value types the config file's keys are written in, shared by every stage's settings: durations, positive
//! intervals, byte counts and target URLs. Each refuses a bad value while it is deserialized, with how to write it,
//! so the config's error names the key and its line.
use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// A duration such as `5s`, `1m`, `1m30s`; may be zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationValue(pub Duration);

/// A duration that must be positive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval(pub Duration);

/// A byte count: `268435456`, or with a unit: `256MiB`, `64KiB`, `1GiB`, `10MB`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteCount(pub u64);

/// An `http` or `https` URL with a host, no query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetUrl(pub reqwest::Url);

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("invalid duration {text:?} ({e}); write it like 5s, 1m or 1m30s"))
}

/// Seconds since the Unix epoch (0 before it).
pub fn unix_seconds(t: std::time::SystemTime) -> f64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

/// A point in time: RFC 3339 (`2026-11-24T10:00:00Z`), `now`, or a duration before `now` (`90m`, `-6h`, `2d`).
pub fn parse_time(text: &str, now: std::time::SystemTime) -> Result<std::time::SystemTime, String> {
    let text = text.trim();
    if text == "now" {
        return Ok(now);
    }
    if let Ok(t) = humantime::parse_rfc3339_weak(text) {
        return Ok(t);
    }
    if let Ok(d) = humantime::parse_duration(text.strip_prefix('-').unwrap_or(text)) {
        return now
            .checked_sub(d)
            .ok_or_else(|| format!("{text}: before the epoch"));
    }
    Err(format!(
        "{text}: not a time: give RFC 3339 (2026-11-24T10:00:00Z), now, or a duration before now (90m, -6h)"
    ))
}

pub fn parse_interval(text: &str) -> Result<Interval, String> {
    let d = parse_duration(text)?;
    if d.is_zero() {
        return Err(format!("duration {text:?} must be greater than zero"));
    }
    Ok(Interval(d))
}

pub fn parse_target_url(text: &str) -> Result<TargetUrl, String> {
    // `127.0.0.1:8001` would be "relative URL without a base" (`localhost:8001` even parses, with the scheme
    // `localhost`): what is missing is the scheme, so that is what is said.
    if !text.contains("://") {
        return Err(format!("URL {text:?} must start with http:// or https://"));
    }
    let url = reqwest::Url::parse(text.trim()).map_err(|e| format!("invalid URL {text:?}: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("URL {text:?} must start with http:// or https://"));
    }
    if url.host_str().is_none() {
        return Err(format!("URL {text:?} has no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!("URL {text:?} must not have a query or fragment"));
    }
    Ok(TargetUrl(url))
}

/// A user or group name as kube-apiserver's authenticators give one: any text but the empty one.
pub fn parse_subject_name(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err(
            "empty: kube-apiserver gives every user and group a name (an unauthenticated request is user \
             system:anonymous in group system:unauthenticated)"
                .into(),
        );
    }
    Ok(text.to_string())
}

/// A namespace as kube-apiserver validates one: a DNS-1123 label (`ValidateNamespaceName`, `IsDNS1123Label` in
/// k8s.io/apimachinery `pkg/util/validation`), in its words. Empty is no namespace.
pub fn parse_namespace(text: &str) -> Result<String, String> {
    const MAX: usize = 63;
    let label = text
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !text.starts_with('-')
        && !text.ends_with('-');
    if !text.is_empty() && !label {
        return Err(format!(
            "not a namespace: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', \
             and must start and end with an alphanumeric character (e.g. 'my-name', or '123-abc'){}",
            if text.bytes().any(|b| b.is_ascii_uppercase()) {
                format!("; did you mean {:?}?", text.to_ascii_lowercase())
            } else {
                String::new()
            }
        ));
    }
    if text.len() > MAX {
        return Err(format!(
            "not a namespace: must be no more than {MAX} characters (it has {})",
            text.len()
        ));
    }
    Ok(text.to_string())
}

pub fn parse_byte_count(text: &str) -> Result<ByteCount, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("invalid byte count {text:?}; write it like 268435456 or 256MiB"))?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KB" => 1000,
        "KiB" => 1 << 10,
        "MB" => 1_000_000,
        "MiB" => 1 << 20,
        "GB" => 1_000_000_000,
        "GiB" => 1 << 30,
        other => {
            return Err(format!(
                "unknown unit {other:?} in byte count {text:?}; use B, KiB, MiB, GiB, KB, MB or GB"
            ))
        }
    };
    let bytes = n
        .checked_mul(mult)
        .ok_or_else(|| format!("byte count {text:?} is too large"))?;
    if bytes == 0 {
        return Err(format!("byte count {text:?} must be greater than zero"));
    }
    Ok(ByteCount(bytes))
}

/// Numbers or strings, so that `max_body_bytes: 268435456` and `max_body_bytes: 256MiB` both work.
#[derive(Deserialize)]
#[serde(untagged)]
enum StrOrNum {
    Num(u64),
    Str(String),
}

/// Written back as the config writes it (`15s`, `1m 30s`): the JSON Schema's defaults.
impl serde::Serialize for DurationValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(self.0).to_string())
    }
}

impl serde::Serialize for Interval {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(self.0).to_string())
    }
}

impl<'de> Deserialize<'de> for DurationValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_duration(&s)
            .map(DurationValue)
            .map_err(serde::de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for Interval {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_interval(&s).map_err(serde::de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for ByteCount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match StrOrNum::deserialize(d)? {
            StrOrNum::Num(0) => Err(serde::de::Error::custom(
                "byte count must be greater than zero",
            )),
            StrOrNum::Num(n) => Ok(ByteCount(n)),
            StrOrNum::Str(s) => parse_byte_count(&s).map_err(serde::de::Error::custom),
        }
    }
}

impl<'de> Deserialize<'de> for TargetUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_target_url(&s).map_err(serde::de::Error::custom)
    }
}

/// humantime's durations (`5s`, `1m30s`, `2h`, `500ms`): what [`parse_duration`] reads.
const DURATION_PATTERN: &str = r"^\s*([0-9]+\s*(nsec|ns|usec|us|msec|ms|seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h|days?|d|weeks?|w|months?|M|years?|y)\s*)+$";

fn duration_schema(description: &str) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "pattern": DURATION_PATTERN,
        "description": description,
    })
}

impl schemars::JsonSchema for DurationValue {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        duration_schema("A duration such as 5s, 1m or 1m30s; may be 0s.")
    }
}

impl schemars::JsonSchema for Interval {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Interval".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        duration_schema("A duration greater than zero, such as 5s, 1m or 1m30s.")
    }
}

impl schemars::JsonSchema for ByteCount {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ByteCount".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A byte count: 268435456, or with a unit: 256MiB, 64KiB, 1GiB, 10MB.",
            "anyOf": [
                {"type": "integer", "minimum": 1},
                {"type": "string", "pattern": r"^\s*[0-9]+\s*([KMGT]i?B|B)?\s*$"},
            ],
        })
    }
}

impl schemars::JsonSchema for TargetUrl {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "TargetUrl".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "format": "uri",
            "pattern": "^https?://",
            "description": "An http or https URL with a host and no query.",
        })
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_time_is_rfc_3339_now_or_a_duration_before_now() {
        use std::time::{Duration, SystemTime};
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        assert_eq!(parse_time("now", now), Ok(now));
        let six_hours = now - Duration::from_secs(6 * 3600);
        assert_eq!(parse_time("-6h", now), Ok(six_hours));
        assert_eq!(parse_time("6h", now), Ok(six_hours));
        assert_eq!(
            parse_time("2027-01-15T08:00:00Z", now),
            Ok(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000))
        );
        let e = parse_time("yesterday", now).unwrap_err();
        assert!(e.contains("yesterday: not a time"), "{e}");
    }
    use super::*;

    #[test]
    fn a_namespace_is_a_dns_1123_label_and_a_subject_has_a_name() {
        for ok in [
            "default",
            "kube-system",
            "123-abc",
            "a",
            &"x".repeat(63),
            "",
        ] {
            assert_eq!(parse_namespace(ok).as_deref(), Ok(ok));
        }
        for bad in [
            "NOT VALID!!",
            "-a",
            "a-",
            "a.b",
            "a_b",
            "Default",
            "ns ",
            "é",
        ] {
            let e = parse_namespace(bad).unwrap_err();
            assert!(
                e.starts_with("not a namespace: a lowercase RFC 1123 label"),
                "{bad}: {e}"
            );
        }
        assert!(parse_namespace("Default")
            .unwrap_err()
            .contains("did you mean \"default\"?"));
        let e = parse_namespace(&"x".repeat(64)).unwrap_err();
        assert!(e.contains("no more than 63 characters (it has 64)"), "{e}");
        assert!(parse_subject_name("").unwrap_err().starts_with("empty: "));
        assert_eq!(
            parse_subject_name("system:anonymous").as_deref(),
            Ok("system:anonymous")
        );
    }

    #[test]
    fn byte_counts() {
        assert_eq!(parse_byte_count("256MiB").unwrap().0, 256 << 20);
        assert_eq!(parse_byte_count("1000").unwrap().0, 1000);
        assert!(parse_byte_count("0").is_err());
        assert!(parse_byte_count("-1").is_err());
        assert!(parse_byte_count("99999999999999999999GiB").is_err());
    }
}
