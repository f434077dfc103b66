//! The audit events of the simulated requests, as kube-apiserver writes them (`event.rs`), to a log file or a
//! webhook (`sink.rs`): so `apf-monitor demo` shows who got the 429s with no cluster. Every request the simulator
//! counts in `dispatched_requests_total` (when it completes) or `rejected_requests_total` is one event.
mod event;
mod sink;

pub(crate) use event::{render, AuditRecord, FlowIdentity};
#[cfg(test)]
pub(crate) use sink::drain;
pub(crate) use sink::{spawn, Feed};
pub use sink::{AuditLogOptions, AuditOptions, AuditWebhookOptions};

/// Records kept between two drains; beyond, the oldest go (counted): a sink that stopped draining must not grow
/// the simulator's memory.
pub(crate) const MAX_PENDING: usize = 500_000;

/// What a replica noted since the last drain, with what rendering it needs.
pub(crate) struct AuditDrain {
    pub records: Vec<AuditRecord>,
    pub flows: Vec<FlowIdentity>,
    pub wall_start: std::time::SystemTime,
    pub minor: u32,
    /// The sequence number of the first record (auditIDs stay unique across drains).
    pub first_id: u64,
}

/// A replica's records waiting for the sink.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    pub records: std::collections::VecDeque<AuditRecord>,
    pub next_id: u64,
    pub dropped: u64,
}

impl Outbox {
    pub fn push(&mut self, r: AuditRecord) {
        if self.records.len() >= MAX_PENDING {
            self.records.pop_front();
            self.dropped += 1;
        }
        self.records.push_back(r);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::drain;
    use crate::scenario::ScenarioSource;
    use crate::simulator::tests::sim;
    use apf::matching::match_request;
    use apf::parse::audit::parse_event;

    /// (priority level, flow schema) -> (requests completed or rejected, rejected) of `lines`, classified with
    /// apf-monitor's matcher on `sim`'s objects.
    fn tally(
        lines: &[String],
        schemas: &[apf::FlowSchema],
        levels: &[apf::PriorityLevelConfig],
    ) -> BTreeMap<(String, String), (u64, u64)> {
        let mut out: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
        for l in lines {
            let r = parse_event(l.as_bytes()).unwrap().unwrap();
            let m = match_request(schemas, levels, &r.request()).unwrap();
            let e = out.entry((m.priority_level, m.flow_schema)).or_default();
            e.0 += 1;
            e.1 += u64::from(r.rejected());
        }
        out
    }

    /// Every request the simulator counted is one event, classified where the simulator put it, on 1.30 (no wait
    /// annotation) and 1.34 (waits on the slow requests).
    #[test]
    fn the_events_agree_with_the_counters_event_for_event() {
        for minor in [30, 34] {
            let s = sim(minor, ScenarioSource::Storm, 7);
            s.enable_audit();
            let feed = Arc::new(Mutex::new(vec![s.clone()]));
            let mut lines = Vec::new();
            for _ in 0..40 {
                s.step(Duration::from_millis(500));
                lines.extend(drain(&feed));
            }
            let (schemas, levels, counted) = {
                let st = s.lock();
                let levels: Vec<_> = st.levels.iter().map(|l| l.def.clone()).collect();
                let counted: BTreeMap<(String, String), (u64, u64)> = st
                    .fs_stats
                    .iter()
                    .map(|(k, v)| {
                        let rejected: u64 = v.rejected.values().sum();
                        let completed = v.dispatched - u64::from(v.executing_requests);
                        (k.clone(), (completed + rejected, rejected))
                    })
                    .filter(|(_, v)| v.0 > 0)
                    .collect();
                (st.flow_schemas.clone(), levels, counted)
            };
            let seen = tally(&lines, &schemas, &levels);
            assert_eq!(seen, counted, "1.{minor}");
            assert!(
                counted.values().map(|v| v.1).sum::<u64>() > 0,
                "storm rejects on 1.{minor}"
            );
            let waits = lines
                .iter()
                .filter(|l| l.contains("apiserver.latency.k8s.io/apf-queue-wait"))
                .count();
            if minor >= 31 {
                assert!(waits > 0, "1.{minor}: slow requests carry their wait");
            } else {
                assert_eq!(waits, 0, "1.{minor}: no annotation before 1.31");
            }
            // auditIDs are unique.
            let ids: std::collections::BTreeSet<&str> = lines
                .iter()
                .map(|l| {
                    let i = l.find("\"auditID\":\"").unwrap() + 11;
                    &l[i..i + 36]
                })
                .collect();
            assert_eq!(ids.len(), lines.len());
        }
    }
}
