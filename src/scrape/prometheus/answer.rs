//! The HTTP API's answer to an instant query, read series by series from its body.
use std::borrow::Cow;

use serde::Deserialize;

use super::super::ScrapeError;
use apf::parse::exposition::{self, Label};

/// One series of an instant vector, its strings borrowed from the body where they hold no escapes: a round over a
/// large fleet reads hundreds of thousands of label values, and copying each was most of its time.
#[derive(Deserialize)]
struct Series<'a> {
    #[serde(borrow)]
    metric: Labels<'a>,
    /// An instant vector's one sample.
    #[serde(borrow, default)]
    value: Option<(f64, Text<'a>)>,
    /// A range query's (a matrix's) samples, oldest first.
    #[serde(borrow, default)]
    values: Vec<(f64, Text<'a>)>,
}

/// A string of the answer: borrowed from the body, or made where JSON escapes had to be undone.
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visitor<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(Visitor(std::marker::PhantomData))
    }
}

/// A series' labels, in the answer's order.
struct Labels<'a>(Vec<(Text<'a>, Text<'a>)>);

impl<'de: 'a, 'a> Deserialize<'de> for Labels<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visitor<'a> {
            type Value = Labels<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of label names and values")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> Result<Self::Value, M::Error> {
                let mut labels = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(pair) = map.next_entry()? {
                    labels.push(pair);
                }
                Ok(Labels(labels))
            }
        }
        d.deserialize_map(Visitor(std::marker::PhantomData))
    }
}

/// What an answer says besides its samples.
#[derive(Default)]
struct Envelope {
    status: Option<String>,
    error_type: Option<String>,
    error: Option<String>,
    /// Thanos and Mimir say when a store or querier did not answer.
    warnings: Vec<String>,
    result_type: Option<String>,
    has_data: bool,
    /// The result type asked for: another is not read.
    wanted: &'static str,
}

/// Each sample of an instant vector answer, to `each` with its labels (`__name__` too, where the query keeps it),
/// as the answer is read: the series are never held all at once. On an error, what `each` saw must be dropped: a
/// partial answer (warnings, which come after the data) is one, as numbers from some of the stores only would be
/// presented as the whole.
pub(crate) fn read_vector(
    body: &[u8],
    mut each: impl FnMut(&[Label<'_>], f64),
) -> Result<(), ScrapeError> {
    read_answer(body, "vector", |labels, _, value| each(labels, value))
}

/// Each sample of a range query's answer (a matrix), to `each` with its labels and time (unix seconds), series by
/// series; errors as [`read_vector`]'s.
pub(crate) fn read_matrix(
    body: &[u8],
    each: impl FnMut(&[Label<'_>], f64, f64),
) -> Result<(), ScrapeError> {
    read_answer(body, "matrix", each)
}

/// An answer whose result is of type `wanted` (`vector` or `matrix`), each sample to `each(labels, time, value)`.
fn read_answer(
    body: &[u8],
    wanted: &'static str,
    mut each: impl FnMut(&[Label<'_>], f64, f64),
) -> Result<(), ScrapeError> {
    use serde::de::DeserializeSeed;
    let mut envelope = Envelope {
        wanted,
        ..Envelope::default()
    };
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    AnswerSeed {
        each: &mut each,
        envelope: &mut envelope,
        labels: Vec::new(),
    }
    .deserialize(&mut deserializer)
    .and_then(|()| deserializer.end())
    .map_err(|e| ScrapeError::Parse(format!("not a Prometheus API answer: {e}")))?;
    match envelope.status.as_deref() {
        Some("success") => {}
        Some(_) => {
            return Err(ScrapeError::Query(format!(
                "{} ({})",
                envelope.error.unwrap_or_default(),
                envelope.error_type.unwrap_or_default()
            )))
        }
        None => {
            return Err(ScrapeError::Parse(
                "not a Prometheus API answer: no status".into(),
            ))
        }
    }
    if !envelope.warnings.is_empty() {
        return Err(ScrapeError::Query(format!(
            "partial answer, not used: {}",
            envelope.warnings.join("; ")
        )));
    }
    if !envelope.has_data {
        return Err(ScrapeError::Parse(
            "a Prometheus API answer without data".into(),
        ));
    }
    match envelope.result_type.as_deref() {
        Some(t) if t == wanted => Ok(()),
        other => Err(ScrapeError::Parse(format!(
            "a {} where a {wanted} was asked for",
            other.unwrap_or("result of no type")
        ))),
    }
}

/// Reads an answer's object: its envelope into `envelope`, each sample of `data.result` to `each`.
struct AnswerSeed<'e, F> {
    each: &'e mut F,
    envelope: &'e mut Envelope,
    /// Reused from series to series.
    labels: Vec<Label<'static>>,
}

impl<'de, F: FnMut(&[Label<'_>], f64, f64)> serde::de::DeserializeSeed<'de> for AnswerSeed<'_, F> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, F: FnMut(&[Label<'_>], f64, f64)> serde::de::Visitor<'de> for AnswerSeed<'_, F> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a Prometheus API answer")
    }
    fn visit_map<M: serde::de::MapAccess<'de>>(mut self, mut map: M) -> Result<(), M::Error> {
        use serde::de::IgnoredAny;
        while let Some(key) = map.next_key::<Text<'de>>()? {
            match key.0.as_ref() {
                "status" => self.envelope.status = Some(map.next_value()?),
                "errorType" => self.envelope.error_type = map.next_value()?,
                "error" => self.envelope.error = map.next_value()?,
                "warnings" => {
                    self.envelope.warnings = map.next_value::<Option<_>>()?.unwrap_or_default()
                }
                // Read twice, its samples would be delivered twice.
                "data" if self.envelope.has_data => {
                    return Err(serde::de::Error::duplicate_field("data"))
                }
                "data" => {
                    self.envelope.has_data = true;
                    map.next_value_seed(DataSeed(&mut self))?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// `data`: `resultType`, then `result` read series by series.
struct DataSeed<'s, 'e, F>(&'s mut AnswerSeed<'e, F>);

impl<'de, F: FnMut(&[Label<'_>], f64, f64)> serde::de::DeserializeSeed<'de>
    for DataSeed<'_, '_, F>
{
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, F: FnMut(&[Label<'_>], f64, f64)> serde::de::Visitor<'de> for DataSeed<'_, '_, F> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("the answer's data")
    }
    fn visit_map<M: serde::de::MapAccess<'de>>(self, mut map: M) -> Result<(), M::Error> {
        use serde::de::IgnoredAny;
        let mut result_read = false;
        while let Some(key) = map.next_key::<Text<'de>>()? {
            match key.0.as_ref() {
                "resultType" if self.0.envelope.result_type.is_some() => {
                    return Err(serde::de::Error::duplicate_field("resultType"))
                }
                "resultType" => self.0.envelope.result_type = Some(map.next_value()?),
                "result" if result_read => return Err(serde::de::Error::duplicate_field("result")),
                // Read as the type asked for unless the type, where it came first (Prometheus writes it first; a
                // proxy may sort the keys), says otherwise: another type is an error either way.
                "result"
                    if self
                        .0
                        .envelope
                        .result_type
                        .as_deref()
                        .is_none_or(|t| t == self.0.envelope.wanted) =>
                {
                    result_read = true;
                    map.next_value_seed(ResultSeed(&mut *self.0))?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// `data.result`: each series to `each` as it is read.
struct ResultSeed<'s, 'e, F>(&'s mut AnswerSeed<'e, F>);

impl<'de, F: FnMut(&[Label<'_>], f64, f64)> serde::de::DeserializeSeed<'de>
    for ResultSeed<'_, '_, F>
{
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, F: FnMut(&[Label<'_>], f64, f64)> serde::de::Visitor<'de> for ResultSeed<'_, '_, F> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of series")
    }
    fn visit_seq<S: serde::de::SeqAccess<'de>>(self, mut seq: S) -> Result<(), S::Error> {
        let seed = self.0;
        let mut labels = std::mem::take(&mut seed.labels);
        while let Some(series) = seq.next_element::<Series<'de>>()? {
            let mut reused = exposition::recycle(labels);
            reused.extend(series.metric.0.iter().map(|(name, value)| Label {
                name: &name.0,
                value: Cow::Borrowed(&value.0),
            }));
            // Each type its own field: a matrix's series has `values`, a vector's `value`.
            let samples = match seed.envelope.wanted {
                "vector" => series.value.as_slice(),
                _ => series.values.as_slice(),
            };
            for (time, text) in samples {
                // A value that is not a number (never, from Prometheus) is left out.
                if let Ok(value) = text.0.parse::<f64>() {
                    (seed.each)(&reused, *time, value);
                }
            }
            labels = exposition::recycle(reused);
        }
        seed.labels = labels;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_read_in_place_escapes_and_all() {
        let body = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"__name__":"x","instance":"10.0.0.1:6443","priority_level":"a\"b\u00e9"},"value":[1.5,"42"]},
            {"metric":{"instance":"10.0.0.2:6443"},"value":[1.5,"NaN"]},
            {"metric":{"instance":"10.0.0.3:6443"},"value":[1.5,"not a number"]}]}}"#;
        let mut seen = Vec::new();
        let read = read_vector(body, |labels, value| {
            let labels: Vec<(String, String)> = labels
                .iter()
                .map(|l| (l.name.to_string(), l.value.to_string()))
                .collect();
            seen.push((labels, value));
        });
        assert!(read.is_ok(), "{read:?}");
        assert_eq!(seen.len(), 2, "the value that is no number is left out");
        assert_eq!(
            seen[0].0,
            [
                ("__name__".to_string(), "x".to_string()),
                ("instance".to_string(), "10.0.0.1:6443".to_string()),
                ("priority_level".to_string(), "a\"b\u{e9}".to_string()),
            ]
        );
        assert_eq!(seen[0].1, 42.0);
        assert!(seen[1].1.is_nan());
    }

    #[test]
    fn a_range_answer_gives_every_sample_with_its_time() {
        let body = br#"{"status":"success","data":{"resultType":"matrix","result":[
            {"metric":{"priority_level":"workload-low"},"values":[[1800000000,"3"],[1800000015,"4.5"]]},
            {"metric":{"priority_level":"global-default"},"values":[[1800000015,"1"]]}]}}"#;
        let mut seen = Vec::new();
        read_matrix(body, |labels, time, value| {
            seen.push((labels[0].value.to_string(), time, value))
        })
        .unwrap();
        assert_eq!(
            seen,
            [
                ("workload-low".to_string(), 1_800_000_000.0, 3.0),
                ("workload-low".to_string(), 1_800_000_015.0, 4.5),
                ("global-default".to_string(), 1_800_000_015.0, 1.0),
            ]
        );
        // Each asks for its own type.
        let vector = br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        let e = read_matrix(vector, |_, _, _| {}).unwrap_err().to_string();
        assert!(e.contains("a vector where a matrix was asked for"), "{e}");
        let e = read_vector(body, |_, _| {}).unwrap_err().to_string();
        assert!(e.contains("a matrix where a vector was asked for"), "{e}");
    }

    #[test]
    fn keys_in_any_order_read_the_same() {
        let body = br#"{"data":{"result":[{"value":[1.5,"7"],"metric":{"instance":"a"}}],"resultType":"vector"},
            "status":"success"}"#;
        let mut values = Vec::new();
        let read = read_vector(body, |_, v| values.push(v));
        assert!(read.is_ok(), "{read:?}");
        assert_eq!(values, [7.0]);
    }

    #[test]
    fn failed_partial_and_foreign_answers_are_errors() {
        let read = |body: &str| read_vector(body.as_bytes(), |_, _| {}).map_err(|e| e.to_string());
        let failed = read(r#"{"status":"error","errorType":"bad_data","error":"parse error"}"#);
        assert!(
            matches!(&failed, Err(e) if e.contains("parse error (bad_data)")),
            "{failed:?}"
        );
        let partial = read(
            r#"{"status":"success","warnings":["store 2 down"],"data":{"resultType":"vector","result":[]}}"#,
        );
        assert!(
            matches!(&partial, Err(e) if e.contains("partial answer") && e.contains("store 2 down"))
        );
        let matrix = read(r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#);
        assert!(
            matches!(&matrix, Err(e) if e.contains("a matrix where a vector")),
            "{matrix:?}"
        );
        let html = read("<html>login</html>");
        assert!(
            matches!(&html, Err(e) if e.contains("not a Prometheus API answer")),
            "{html:?}"
        );
    }
}
