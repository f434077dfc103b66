//! When each rule holds on a replica's report, and the summary and annotations of the alert it gives: the level
//! conditions (headroom, waiting requests, the fullest queue, exhaustion), rejections by reason, and a replica that
//! cannot be read.
use std::collections::BTreeMap;

use apf::model::EXEMPT;

use super::describe::{describe, fmt_opt, top_flows};
use super::{Candidate, Rule, FULL};
use crate::alert::remediation::remediate;
use crate::alert::{LabelSet, RuleName};
use crate::analyze::{waiting_width, ApiserverReport, LevelReport, Problem, Saturation};

impl Rule {
    /// The level condition: `Some(summary)` when it holds.
    fn level_condition(&self, server: &str, l: &LevelReport, active: bool) -> Option<String> {
        let t = self.threshold(active);
        let pl = &l.priority_level;
        let free = || {
            format!(
                "{} of {} seats free",
                fmt_opt(l.headroom_seats),
                fmt_opt(l.limit_seats)
            )
        };
        // Every summary says which measure it read: the last scrape's gauges, or the window's histogram.
        let seats = || format!("{} at the last scrape", free());
        match self.name {
            RuleName::APFHeadroomLow => {
                // Firing below the fire threshold; once active, until back at or above the clear one.
                if let Some(r) = l.headroom_ratio.filter(|r| self.spec.holds(*r, t)) {
                    return Some(format!(
                        "{pl} on {server}: {} ({:.0}%) at the last scrape",
                        free(),
                        r * 100.0
                    ));
                }
                // A scrape samples one instant; the apiserver's own utilization histogram covers the time between
                // scrapes. It holds when the level spent a share of the window past the threshold: pressure that
                // lasts, where one sub-second saturation would hold a 99th percentile high for a whole window.
                let busy = 1.0 - t;
                let share = l.time_above(busy)?;
                (share >= self.window_share && self.still_there(l, busy)).then(|| {
                    format!(
                        "{pl} on {server}: more than {:.0}% of the limit was in use for {:.0}% of the last window \
                         (the apiserver's seat-utilization histogram), though the last scrape saw {}",
                        busy * 100.0,
                        share * 100.0,
                        free()
                    )
                })
            }
            // APF queues a request only when the level has no seat for it: requests waiting mean the level is out of
            // seats for them, whatever the headroom gauge (sampled apart from the queue gauge) says.
            RuleName::APFHeadroomExhausted => {
                let waiting = l.inqueue_requests?;
                self.spec.holds(waiting, t).then(|| {
                    let width = waiting_width(l);
                    format!(
                        "{pl} on {server}: {} requests wait for {} seats{}; {}",
                        fmt_opt(Some(waiting)),
                        fmt_opt(l.inqueue_seats.or(Some(waiting))),
                        if width > 1.0 {
                            format!(" ({width:.0} seats each)")
                        } else {
                            String::new()
                        },
                        seats()
                    )
                })
            }
            RuleName::APFQueueNearFull => {
                let (full, limit) = (l.fullest_queue_requests?, l.queue_length_limit?);
                // At the threshold counts: a queue at queueLengthLimit refuses the very next request.
                (limit > 0.0 && full >= t * limit).then(|| {
                    // kube-apiserver refuses an arrival for a full queue only while every seat is in use
                    // (queueset.go, `rejectOrEnqueueToBoundLocked`); with seats free that the heads do not fit, the
                    // queue takes more and its requests wait out their limit instead.
                    let next = match l.headroom_seats {
                        Some(free) if free >= 1.0 => format!(
                            "{free:.0} seats are free but too few for the requests that wait, so the queue takes \
                             more and they wait out their limit (time-out 429s)"
                        ),
                        _ => "the next requests get queue-full 429s".to_string(),
                    };
                    format!(
                        "{pl} on {server}: the fullest queue holds {full:.0} of queueLengthLimit {limit:.0} \
                         ({:.0}%); {next}",
                        full / limit * 100.0
                    )
                })
            }
            RuleName::APFExhaustionPredicted => {
                if let Some(s) = l.seconds_to_exhaustion.filter(|s| self.spec.holds(*s, t)) {
                    // 0: no seat free now, or none that fits the requests that wait.
                    let Some(r) = l.seats_rising.as_ref() else {
                        let waiting = match l.inqueue_requests {
                            Some(w) if w > 0.0 => format!(": {w:.0} requests wait for a seat"),
                            _ => String::new(),
                        };
                        return Some(format!(
                            "{pl} on {server}: no headroom left now{waiting} ({})",
                            seats()
                        ));
                    };
                    return Some(format!(
                        "{pl} on {server}: no headroom left in {s:.0}s at this trend: seats in use rising {:.1}/s \
                         for the last {:.0}s ({})",
                        r.slope,
                        r.span(),
                        seats()
                    ));
                }
                // Bursts between scrapes already fill the level, for a share of the window that is pressure, not a
                // blip: it runs out in them before any trend of sampled gauges shows it.
                let full = l.time_above(FULL)?;
                if full < self.window_share || !self.still_there(l, FULL) {
                    return None;
                }
                let no_seat = l.no_accommodation_per_second.filter(|r| *r > 0.0);
                let peak = match (l.demand_seats_max, l.limit_seats) {
                    (Some(d), Some(limit)) if limit > 0.0 && d > limit => Some((d, limit)),
                    _ => None,
                };
                let mut why = vec![format!(
                    "it was full ({:.0}% of its limit in use or more) for {:.0}% of the last window",
                    FULL * 100.0,
                    full * 100.0
                )];
                if let Some((d, limit)) = peak {
                    why.push(format!(
                        "demand peaked at {d:.0} seats of a {limit:.0}-seat limit (demand_seats_high_watermark)"
                    ));
                }
                if let Some(r) = no_seat {
                    why.push(format!("{r:.2} dispatches/s found no free seat"));
                }
                Some(format!(
                    "{pl} on {server}: bursts between scrapes already exhaust it: {}; the last scrape saw {}",
                    why.join(", "),
                    free()
                ))
            }
            // A level full for 15 s of every minute is one burst away from 429s, yet no window of a minute shows
            // more than one episode: the pattern is read over the lookback.
            RuleName::APFSaturationRecurring => {
                let s = l.saturation.as_ref().filter(|s| s.recurs())?;
                self.spec
                    .holds(s.full_ratio, t)
                    .then(|| recurring_summary(pl, server, s))
            }
            RuleName::APFRequestsRejected | RuleName::APFScrapeFailing => None,
        }
    }

    /// Whether the pressure the window's histogram holds past `utilization` is still there in its recent part.
    /// Once a level has recovered the window holds the pressure from before for up to a window more: a warning
    /// begun (or kept) then would tell a person to do what is done. No recent part read, no pressure known to be
    /// there (as the PrometheusRule reads `apf_priority_level_recent_time_above_ratio`, absent then too).
    fn still_there(&self, l: &LevelReport, utilization: f64) -> bool {
        l.time_above_recently(utilization)
            .is_some_and(|recent| recent >= self.window_share)
    }

    /// The rule's conditions that hold on `server`. `maybe_active`: some alert may be pending or firing on it;
    /// where none is, no alert's labels are made to ask (a fleet's replicas are thousands, and most are quiet).
    pub(super) fn evaluate(
        &self,
        server: &ApiserverReport,
        is_active: &impl Fn(&LabelSet) -> bool,
        maybe_active: bool,
        out: &mut Vec<Candidate>,
    ) {
        let name = &server.display_name();
        if self.name == RuleName::APFScrapeFailing {
            self.scrape_failing(server, out);
            return;
        }
        for l in server.levels.iter().filter(|l| l.priority_level != EXEMPT) {
            let base = || {
                let remedy = remediate(
                    l,
                    &server.levels,
                    &server.list_costs,
                    server.objects.as_deref(),
                );
                let mut a = BTreeMap::new();
                a.insert("description".to_string(), describe(l));
                a.insert("top_flows".to_string(), top_flows(l));
                // The prediction made for this very change (the daemon's prediction task), when there is one.
                let predicted = remedy.change_key().and_then(|key| {
                    server
                        .predictions
                        .get(&l.priority_level)
                        .and_then(|made| made.iter().find(|p| p.change_key == key))
                });
                let sentence = match predicted {
                    Some(p) => format!("{} {}", remedy.sentence, p.words()),
                    None => remedy.sentence,
                };
                a.insert("remediation".to_string(), sentence);
                if let Some(m) = remedy.manifest {
                    a.insert("remediation_manifest".to_string(), m);
                }
                a
            };
            if self.name == RuleName::APFRequestsRejected {
                let Some(rates) = &l.rejected_per_second else {
                    // No rate before two scrapes span a window (just after a restart): unknown is not "no
                    // rejections", so an active alert holds instead of resolving and firing again a scrape later.
                    if !maybe_active {
                        continue;
                    }
                    for reason in apf::REJECTION_REASONS {
                        let mut labels = self.labels(server, Some(&l.priority_level));
                        labels.insert("reason".into(), reason.into());
                        if is_active(&labels) {
                            let mut a = base();
                            a.insert(
                                "summary".into(),
                                format!(
                                    "{} on {name}: requests were rejected with 429 ({reason}); the rate is not \
                                     known yet (fewer than two scrapes in the window)",
                                    l.priority_level
                                ),
                            );
                            out.push(self.candidate(server, labels, a));
                        }
                    }
                    continue;
                };
                for (reason, rate) in rates {
                    let labels = || {
                        let mut labels = self.labels(server, Some(&l.priority_level));
                        labels.insert("reason".into(), reason.clone());
                        labels
                    };
                    let active = maybe_active && is_active(&labels());
                    if !self.spec.holds(*rate, self.threshold(active)) {
                        continue;
                    }
                    let labels = labels();
                    let schemas: Vec<String> = server
                        .flow_schema_rejected_per_second
                        .iter()
                        .filter(|(pl, _, r, v)| pl == &l.priority_level && r == reason && *v > 0.0)
                        .map(|(_, fs, _, v)| format!("{fs} {v:.2}/s"))
                        .collect();
                    let mut a = base();
                    a.insert(
                        "summary".into(),
                        format!(
                            "{} on {name}: {rate:.2} requests/s rejected with 429 ({reason})",
                            l.priority_level
                        ),
                    );
                    a.insert(
                        "flow_schema".into(),
                        if schemas.is_empty() {
                            "unknown".into()
                        } else {
                            schemas.join(", ")
                        },
                    );
                    out.push(self.candidate(server, labels, a));
                }
                continue;
            }
            let labels = || self.labels(server, Some(&l.priority_level));
            let active = maybe_active && is_active(&labels());
            if let Some(summary) = self.level_condition(name, l, active) {
                let labels = labels();
                let mut a = base();
                a.insert("summary".into(), summary);
                out.push(self.candidate(server, labels, a));
            }
        }
    }

    /// `/metrics` failing (an error on it, stale, no APF, or no level at all), or a 403 on any endpoint.
    fn scrape_failing(&self, server: &ApiserverReport, out: &mut Vec<Candidate>) {
        let name = &server.display_name();
        let blinding = server.errors.iter().find(|p| p.blinds_metrics());
        let forbidden: Vec<&Problem> = server.errors.iter().filter(|p| p.is_forbidden()).collect();
        let metrics_failing = blinding.is_some() || server.levels.is_empty();
        if !metrics_failing && forbidden.is_empty() {
            return;
        }
        let prometheus =
            blinding.is_some_and(|p| p.endpoint() == crate::scrape::Endpoint::Prometheus);
        let summary = if prometheus {
            format!(
                "{name}: the Prometheus source cannot be read ({})",
                blinding.map(|p| p.detail()).unwrap_or_default()
            )
        } else if metrics_failing {
            format!(
                "{name}: /metrics cannot be scraped ({})",
                blinding.map_or("no priority level in the last scrape".to_string(), |p| p
                    .detail())
            )
        } else {
            let endpoints: Vec<&str> = forbidden.iter().map(|p| p.endpoint().label()).collect();
            format!("{name}: HTTP 403 on {}", endpoints.join(", "))
        };
        let remediation = if prometheus {
            "Check the source's URL (the part before /api/v1), its credentials (bearer_token_file, headers, \
             ca_file), that it is up, and that its selector and apiserver_label match the series it stores; the \
             replicas read through it keep their last numbers for one analysis window."
                .to_string()
        } else if let Some(p) = forbidden.first() {
            format!(
                "Grant apf-monitor's ClusterRole the rule {} and bind it with a ClusterRoleBinding (non-resource URLs \
                 cannot be granted by a namespaced Role).",
                p.endpoint().rbac_hint()
            )
        } else {
            "Check that apf-monitor reaches this replica directly (not through the load balancer), its CA and \
             token, and that the replica is up."
                .to_string()
        };
        let mut a = BTreeMap::new();
        a.insert("summary".into(), summary);
        a.insert(
            "description".into(),
            if server.errors.is_empty() {
                "no error reported; no level seen".into()
            } else {
                server
                    .errors
                    .iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join("\n")
            },
        );
        a.insert("remediation".into(), remediation);
        out.push(self.candidate(server, self.labels(server, None), a));
    }
}

/// What a recurring saturation was: how often, how long, how much of the lookback, by what measure, and who held
/// the seats then.
fn recurring_summary(pl: &str, server: &str, s: &Saturation) -> String {
    // Tenths below ten seconds (a 1.5 s episode), whole seconds above.
    let seconds = |v: f64| {
        if v < 9.95 {
            format!("{v:.1}")
        } else {
            format!("{v:.0}")
        }
    };
    let each = if (s.longest_seconds - s.shortest_seconds).abs() < 0.5 {
        format!("{}s each", seconds(s.longest_seconds))
    } else {
        format!(
            "{}-{}s each",
            seconds(s.shortest_seconds),
            seconds(s.longest_seconds)
        )
    };
    let measure = if s.by_histogram {
        "the apiserver's seat-utilization histogram"
    } else {
        "scrapes that found it full"
    };
    let held = if s.flows.is_empty() {
        "no dump was read inside an episode to say who held its seats".to_string()
    } else {
        let flows: Vec<String> = s
            .flows
            .iter()
            .map(|f| {
                let flow = if f.flow.is_empty() { "-" } else { &f.flow };
                format!("{} / {flow} ({:.0}%)", f.flow_schema, f.share * 100.0)
            })
            .collect();
        format!("its seats held by {}", flows.join(", "))
    };
    format!(
        "{pl} on {server}: full ({:.0}% of its limit in use or more) {} times in the last {} ({each}), {:.0}% of \
         the time, by {measure}; the last ended {}s ago, the longest quiet between two {}s; {held}",
        crate::analyze::FULL * 100.0,
        s.episodes,
        humantime::format_duration(std::time::Duration::from_secs(s.lookback_seconds.round() as u64)),
        s.full_ratio * 100.0,
        s.seconds_since.map_or("?".to_string(), seconds),
        s.longest_gap_seconds.map_or("?".to_string(), seconds),
    )
}
