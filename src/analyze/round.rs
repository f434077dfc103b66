//! How `/api/v1/status` and `check --output json` write numbers: rounded to what the data supports, so a sum of
//! gauges reads `8.0`, not `7.999999999999998`. The metrics keep full precision (Prometheus stores floats anyway).
//!
//! - seats and requests: the apiserver counts them in whole units; means over a window keep 2 decimals;
//! - ratios: 3 decimals (0.1 % of a limit);
//! - per-second rates: 3 decimals (one event over a 1-minute window is 0.017/s);
//! - seconds: milliseconds for waits, whole seconds for the time to exhaustion (a fit over a window), tenths for the
//!   episodes of a saturation.
use std::collections::BTreeMap;

use serde::Serializer;

/// `v` to `decimals` places, without the sign of a negative zero.
pub fn round(v: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    let r = (v * scale).round() / scale;
    // -0.0 reads as a sign error.
    if r == 0.0 {
        0.0
    } else {
        r
    }
}

/// A number for people (the status page, `check`, the demo): whole numbers as such, others with the decimals
/// their size needs.
pub fn shown(v: f64) -> String {
    let v = if v == 0.0 { 0.0 } else { v };
    if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn opt<S: Serializer>(v: &Option<f64>, decimals: i32, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) if v.is_finite() => s.serialize_some(&round(*v, decimals)),
        // JSON has no NaN or infinity: absent.
        _ => s.serialize_none(),
    }
}

pub fn seats<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    opt(v, 2, s)
}

pub fn ratio<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    opt(v, 3, s)
}

pub fn millis<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    opt(v, 3, s)
}

pub fn whole<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    opt(v, 0, s)
}

/// Seconds of a pattern (how long a level was full, and when): tenths, as a sub-second blip is one.
pub fn seconds<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(round(*v, 1))
}

pub fn seconds_opt<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    opt(v, 1, s)
}

/// A share: 3 decimals, as a ratio.
pub fn share<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(round(*v, 3))
}

/// A per-second rate: 3 decimals.
pub fn rate<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(round(*v, 3))
}

pub fn mean<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(round(*v, 2))
}

fn map<S: Serializer>(m: &BTreeMap<String, f64>, decimals: i32, s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(m.iter().map(|(k, v)| (k, round(*v, decimals))))
}

pub fn rates<S: Serializer>(v: &Option<BTreeMap<String, f64>>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(m) => map(m, 3, s),
        None => s.serialize_none(),
    }
}

pub fn counts<S: Serializer>(m: &BTreeMap<String, f64>, s: S) -> Result<S::Ok, S::Error> {
    map(m, 0, s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize)]
    struct T {
        #[serde(serialize_with = "seats")]
        a: Option<f64>,
        #[serde(serialize_with = "ratio")]
        b: Option<f64>,
        #[serde(serialize_with = "whole")]
        c: Option<f64>,
        #[serde(serialize_with = "rates")]
        d: Option<BTreeMap<String, f64>>,
        #[serde(serialize_with = "seats")]
        e: Option<f64>,
    }

    #[test]
    fn numbers_for_people() {
        assert_eq!(shown(7.999999999999998), "8");
        assert_eq!(shown(-0.0), "0");
        assert_eq!(shown(0.016666), "0.02");
        assert_eq!(shown(123.456), "123.5");
    }

    #[test]
    fn numbers_are_rounded_to_what_the_data_supports() {
        let t = T {
            a: Some(7.999999999999998),
            b: Some(0.133333333),
            c: Some(-0.2),
            d: Some([("queue-full".to_string(), 1.0 / 60.0)].into()),
            e: Some(f64::NAN),
        };
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            r#"{"a":8.0,"b":0.133,"c":0.0,"d":{"queue-full":0.017},"e":null}"#
        );
    }
}
