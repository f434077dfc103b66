//! What every fuzz target checks of one input (`fuzz/`), shared with the stable test that replays the corpus
//! (`tests/it/fuzz_corpus.rs`), so the replay runs the targets' own code. Each function takes arbitrary bytes, runs
//! a parser of outside input as production runs it, and panics on a broken property; returning is passing.
use std::time::{Duration, SystemTime};

use apf::parse::exposition::{parse_all, ExpositionParser, Sample, SampleSink};

/// One sample, owned, comparable (values by their bits: NaN equals NaN).
type Owned = (String, Vec<(String, String)>, u64, Option<i64>);

fn owned(s: &Sample<'_>) -> Owned {
    (
        s.name.to_string(),
        s.labels
            .iter()
            .map(|l| (l.name.to_string(), l.value.to_string()))
            .collect(),
        s.value.to_bits(),
        s.timestamp_ms,
    )
}

fn collect(f: impl FnOnce(&mut dyn FnMut(&Sample<'_>))) -> Vec<Owned> {
    let mut out = Vec::new();
    f(&mut |s: &Sample<'_>| out.push(owned(s)));
    out
}

struct Collect<'a>(&'a mut dyn FnMut(&Sample<'_>));
impl SampleSink for Collect<'_> {
    fn sample(&mut self, s: &Sample<'_>) {
        (self.0)(s)
    }
}

/// `/metrics` as the scraper reads it: the filtered parse delivers exactly the wanted samples of the full parse,
/// however the body is split into chunks; every line is counted once; the snapshot builder takes any sample.
pub fn exposition(data: &[u8]) {
    let mut full_stats = None;
    let full = collect(|sink| full_stats = Some(parse_all(data, |_| true, &mut Collect(sink))));
    let wanted = apf::model::is_wanted_sample;
    let filtered = collect(|sink| {
        parse_all(data, wanted, &mut Collect(sink));
    });
    let expected: Vec<Owned> = full.iter().filter(|s| wanted(&s.0)).cloned().collect();
    assert_eq!(
        filtered, expected,
        "the filtered parse differs from the full one"
    );
    // Chunked as a network read would deliver it, at a split the input chooses.
    let split = data
        .first()
        .map_or(0, |b| usize::from(*b) % (data.len() + 1));
    let chunked = collect(|sink| {
        let mut sink = Collect(sink);
        let mut parser = ExpositionParser::new(wanted, usize::MAX);
        let (a, b) = data.split_at(split);
        parser.feed(a, &mut sink);
        parser.feed(b, &mut sink);
        parser.finish(&mut sink);
    });
    assert_eq!(chunked, expected, "a split at {split} changes the samples");
    if let Some(stats) = full_stats {
        assert_eq!(stats.samples, full.len() as u64);
        assert!(
            stats.samples + stats.skipped_samples + stats.invalid_lines + stats.oversized_lines
                <= stats.lines
        );
    }
    let mut builder = apf::model::SnapshotBuilder::new();
    parse_all(data, wanted, &mut builder);
    let _ = builder.finish();
}

/// `/metrics` in the protobuf format, as the scraper reads it: the filtered parse (families of no wanted sample
/// skipped unread) delivers exactly the wanted samples of the full parse; any chunking (a split the input chooses, and
/// one byte at a time) gives the same samples and counters; the snapshot builder takes any sample.
pub fn exposition_protobuf(data: &[u8]) {
    use apf::parse::exposition::ParseStats;
    use apf::parse::protobuf::ProtobufParser;
    fn read(
        data: &[u8],
        wanted: fn(&str) -> bool,
        chunks: impl Iterator<Item = usize>,
        max: usize,
    ) -> (Vec<Owned>, ParseStats) {
        let mut stats = None;
        let samples = collect(|sink| {
            let mut sink = Collect(sink);
            let mut parser = ProtobufParser::new(wanted, max);
            let mut pos: usize = 0;
            for size in chunks {
                let end = pos.saturating_add(size).min(data.len());
                parser.feed(&data[pos..end], &mut sink);
                pos = end;
                if pos == data.len() {
                    break;
                }
            }
            parser.feed(&data[pos..], &mut sink);
            let mut s = parser.finish(&mut sink);
            // Where a fault is found may be told differently, not how many there are.
            s.first_errors.clear();
            stats = Some(s);
        });
        (samples, stats.unwrap_or_default())
    }
    // The limit on a held metric, by the input (every size from a few bytes to unbounded is reached).
    let max = data.get(1).map_or(usize::MAX, |b| match b % 4 {
        0 => usize::MAX,
        n => 8usize << (4 * n),
    });
    let everything: fn(&str) -> bool = |_| true;
    let wanted: fn(&str) -> bool = apf::model::is_wanted_sample;
    let (full, full_stats) = read(data, everything, std::iter::empty(), max);
    assert_eq!(full_stats.samples, full.len() as u64);
    assert!(full_stats.skipped_families == 0 && full_stats.skipped_samples == 0);
    assert_eq!(full_stats.lines, 0);
    let (filtered, stats) = read(data, wanted, std::iter::empty(), max);
    let expected: Vec<Owned> = full.iter().filter(|s| wanted(&s.0)).cloned().collect();
    assert_eq!(
        filtered, expected,
        "the filtered read differs from the full one"
    );
    assert!(stats.skipped_families <= stats.families && stats.families == full_stats.families);
    let split = data
        .first()
        .map_or(0, |b| usize::from(*b) % (data.len() + 1));
    for chunks in [
        read(data, wanted, [split].into_iter(), max),
        read(data, wanted, std::iter::repeat(1), max),
    ] {
        assert_eq!(chunks.0, filtered, "a chunking changes the samples");
        assert_eq!(chunks.1, stats, "a chunking changes the counters");
    }
    let mut builder = apf::model::SnapshotBuilder::new();
    let mut parser = ProtobufParser::new(wanted, max);
    parser.feed(data, &mut builder);
    parser.finish(&mut builder);
    let _ = builder.finish();
}

/// The three debug dumps, parsed and applied to a snapshot as a scrape does; `dump_requests` also as a scrape reads
/// it, in chunks (of 1 to 64 bytes, by the first byte), with the same rows as the whole body, and cut as the daemon
/// cuts it (1 to 4 flows per level and flow schema, by the second byte).
pub fn dumps(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let text = text.as_ref();
    let mut snap = apf::model::SnapshotBuilder::new().finish();
    if let Ok(d) = apf::parse::dump::parse_priority_levels(text) {
        apf::model::apply_priority_levels_dump(&mut snap, &d);
    }
    if let Ok(d) = apf::parse::dump::parse_queues(text) {
        apf::model::apply_queues_dump(&mut snap, &d);
    }
    let whole = apf::parse::dump::parse_requests(text);
    let size = data.first().map_or(1, |b| usize::from(b % 64) + 1);
    let mut reader = apf::parse::dump::RequestsReader::default();
    let mut rows = Vec::new();
    let mut flows = apf::model::FlowsBuilder::default();
    let mut each = |row: apf::parse::dump::RequestRow<'_>| {
        flows.add(&row);
        rows.push(format!("{row:?}"));
    };
    for chunk in data.chunks(size) {
        reader.feed(chunk, &mut each);
    }
    let streamed = reader.finish(&mut each);
    match &whole {
        Ok(d) => {
            let expected: Vec<String> = d.rows.iter().map(|r| format!("{r:?}")).collect();
            assert_eq!(rows, expected, "chunks of {size} bytes read other rows");
            assert_eq!(streamed.as_ref().ok(), Some(&d.stats));
            apf::model::apply_requests_dump(&mut snap, d);
            // A round keeps of each level and flow schema the `keep` flows with the most pressure, as they were.
            let keep = data.get(1).map_or(1, |b| usize::from(b % 4) + 1);
            let kept = flows.finish(Some(keep));
            let all = snap.flows.unwrap_or_default();
            assert!(kept.iter().all(|f| all.contains(f)), "a kept flow changed");
            let pressure = |f: &apf::model::FlowSample| f.waiting_requests + f.executing_seats;
            let group =
                |f: &apf::model::FlowSample| (f.priority_level.clone(), f.flow_schema.clone());
            let mut groups: std::collections::BTreeMap<_, (Vec<u64>, Vec<u64>)> =
                Default::default();
            for f in &all {
                let (kept_here, cut_here) = groups.entry(group(f)).or_default();
                if kept.contains(f) {
                    kept_here.push(pressure(f));
                } else {
                    cut_here.push(pressure(f));
                }
            }
            for (g, (kept_here, cut_here)) in groups {
                assert_eq!(
                    kept_here.len(),
                    keep.min(kept_here.len() + cut_here.len()),
                    "{g:?}"
                );
                let least_kept = kept_here.iter().min();
                assert!(
                    cut_here.iter().all(|c| least_kept.is_some_and(|k| k >= c)),
                    "{g:?}"
                );
            }
        }
        Err(e) => assert_eq!(
            streamed.map_err(|e| e.to_string()),
            Err(e.to_string()),
            "chunks of {size} bytes"
        ),
    }
}

/// FlowSchemas and PriorityLevelConfigurations from a file (YAML or JSON) or the API's lists, and what `plan` and
/// `match` compute from them: seat limits from outside shares, matching with outside rules.
pub fn objects(data: &[u8]) {
    let mut levels = Vec::new();
    let mut schemas = Vec::new();
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(o) = apf::model::parse_flowcontrol_documents(text) {
            levels = o.priority_levels;
            schemas = o.flow_schemas;
        }
    }
    if let Ok(l) = apf::model::parse_priority_level_configurations(data) {
        levels.extend(l);
    }
    if let Ok(s) = apf::model::parse_flow_schemas(data) {
        schemas.extend(s);
    }
    for server_cl in [1, 600, u32::MAX] {
        let limits = apf::limits::seat_limits(&levels, server_cl);
        for (l, lim) in levels.iter().zip(&limits) {
            assert!(lim.lower <= lim.nominal, "{l:?}: {lim:?}");
            let _ = apf::limits::max_seats(apf::KubeVersion::new(34, 0), l, lim.nominal);
        }
    }
    let request = apf::matching::Request {
        user: "system:serviceaccount:monitoring:agent".into(),
        groups: apf::matching::implied_groups("system:serviceaccount:monitoring:agent"),
        verb: "list".into(),
        target: apf::matching::Target::Resource {
            api_group: String::new(),
            resource: "pods".into(),
            subresource: None,
            namespace: Some("default".into()),
        },
    };
    let _ = apf::matching::match_request(&schemas, &levels, &request);
}

/// The config file: loaded and validated as `serve` and a reload do.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = crate::config::Config::from_yaml(text) {
        let _ = c.check();
    }
}

/// The body of `POST /api/v1/silences`, read and added as the API does.
pub fn silence(data: &[u8]) {
    let Ok(input) = serde_json::from_slice::<crate::alert::SilenceInput>(data) else {
        return;
    };
    let mut silences = crate::alert::Silences::default();
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000);
    if let Ok(id) = silences.add(input, now) {
        assert!(silences.get(&id, now).is_some());
        let _ = silences.list(now);
        let _ = silences.expire(&id, now);
    }
}

/// kube-apiserver's audit events: a log line, a webhook batch, a log of lines as the offline command and the daemon
/// read it (each line accounted for once), and the queue-wait annotation's durations.
pub fn audit(data: &[u8]) {
    use crate::audit::read::{read_lines, Tally};
    use apf::parse::audit::{go_duration, parse_event, parse_event_list};
    if let Ok(Some(r)) = parse_event(data) {
        let _ = r.request();
        let _ = r.rejected();
    }
    let _ = parse_event_list(data);
    let (mut tally, mut malformed, mut counted) = (Tally::default(), 0u64, 0u64);
    let lines = read_lines(
        &mut &data[..],
        "fuzz",
        &mut tally,
        &mut |_| malformed += 1,
        &mut |_| counted += 1,
    )
    .unwrap_or(0);
    assert_eq!(tally.malformed, malformed);
    assert_eq!(tally.counted, counted);
    // A line holds one event, or a batch of any number; a malformed one is one line.
    assert!(tally.malformed <= lines);
    if let Ok(text) = std::str::from_utf8(data) {
        if let Some(d) = go_duration(text) {
            // A duration read back from Go's text is never negative and fits its type.
            assert!(d.as_secs_f64() >= 0.0);
        }
    }
}

/// A Prometheus HTTP API answer, as a round (an instant vector) and `report` (a range's matrix) read it, against
/// serde_json's untyped reading of the same bytes: an answer read without error is a successful answer of the type
/// asked for, and every sample with a number is delivered once; and read in two chunks, split where the input
/// chooses, it gives the same samples and the same outcome as read whole.
pub fn prometheus_answer(data: &[u8]) {
    use apf::parse::api_answer::{AnswerReader, ResultType};
    use serde_json::Value;
    type Labels = Vec<(String, String)>;
    let number = |pair: &Value| {
        pair.get(1)
            .and_then(Value::as_str)
            .is_some_and(|v| v.parse::<f64>().is_ok())
    };
    let split = data
        .first()
        .map_or(0, |b| usize::from(*b) % (data.len() + 1));
    for wanted in [ResultType::Vector, ResultType::Matrix] {
        let read = |chunks: &[&[u8]]| {
            let mut seen: Vec<(Labels, u64, u64)> = Vec::new();
            let mut each = |labels: &[apf::parse::exposition::Label<'_>], t: f64, v: f64| {
                let labels = labels
                    .iter()
                    .map(|l| (l.name.to_string(), l.value.to_string()))
                    .collect();
                seen.push((labels, t.to_bits(), v.to_bits()));
            };
            let mut reader = AnswerReader::new(wanted);
            for chunk in chunks {
                reader.feed(chunk, &mut each);
            }
            let outcome = reader.finish(&mut each).map_err(|e| e.to_string());
            (seen, outcome)
        };
        let (a, b) = data.split_at(split);
        let (whole, halves) = (read(&[data]), read(&[a, b]));
        // An error's byte offset is where it was found: the same either way, the samples before it too.
        assert_eq!(whole, halves, "{wanted:?} split at {split}");
        if whole.1.is_err() {
            continue;
        }
        // The untyped reading refuses what the reader skips unread and need not judge (invalid UTF-8 or a number
        // out of f64's range in a field it does not read): then there is nothing to compare with.
        let Ok(answer) = serde_json::from_str::<Value>(&String::from_utf8_lossy(data)) else {
            continue;
        };
        let kind = wanted.as_str();
        assert_eq!(answer["status"], "success");
        assert_eq!(answer["data"]["resultType"], kind);
        let series = answer["data"]["result"].as_array().map_or(&[][..], |r| r);
        let samples: usize = series
            .iter()
            .map(|s| match wanted {
                ResultType::Vector => usize::from(number(&s["value"])),
                ResultType::Matrix => s["values"]
                    .as_array()
                    .map_or(0, |v| v.iter().filter(|p| number(p)).count()),
            })
            .sum();
        assert_eq!(whole.0.len(), samples, "{kind}: samples delivered");
    }
}

/// A load scenario (`simulate --scenario FILE`): parsed and validated as the simulator reads it; one it takes is
/// built as a served replica builds it and runs two seconds of virtual time without a panic, its counters only
/// growing.
pub fn scenario(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(scenario) = apf_sim::Scenario::from_yaml(text) else {
        return;
    };
    // A bounded run: few flows (each at most 50,000 requests/s by the scenario's own bounds).
    if scenario.flows.len() > 8 {
        return;
    }
    // As `simulate` serves it: what the version cannot take is warned of and left out, never a panic.
    let sim = apf_sim::Simulator::new(apf_sim::SimOptions::new(
        apf_sim::KubeVersion::new(34, 0),
        scenario,
    ));
    let mut before = sim.truth();
    for _ in 0..4 {
        sim.step(Duration::from_millis(500));
        let now = sim.truth();
        for (a, b) in before.iter().zip(&now) {
            if a.priority_level == b.priority_level {
                assert!(b.dispatched_total >= a.dispatched_total, "{a:?} -> {b:?}");
            }
        }
        before = now;
    }
    let _ = sim.render_metrics();
    let _ = sim.render_dump_requests(true);
}
