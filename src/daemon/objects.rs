//! How one replica's loop follows its flowcontrol objects: a round lists them, then a watch from the list's version
//! follows every change (`scrape/objects.rs`) until it ends, and no list is due meanwhile. The periodic list
//! (`scrape.objects_interval`) is the fallback where the watch is refused (RBAC without `watch`, tried again after
//! [`UNAVAILABLE_RETRY`]) or fails (listed and watched again after a back-off); there, a priority level the
//! replica's `/metrics` reports that the objects lack (one just applied) has them listed in the same round.
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::task::AbortOnDropHandle;

use crate::scrape::objects::{self, ListedObjects, WatchEnd};
use crate::scrape::UNAVAILABLE_RETRY;
use crate::targets::Target;
use apf::model::FlowcontrolObjects;

/// A watch that lasted this long was working: its end starts the back-off afresh.
const WORKED_FOR: Duration = Duration::from_secs(60);

/// What the watch said.
pub enum Followed {
    /// The objects changed.
    Changed(Arc<FlowcontrolObjects>),
    /// It ended; [`ObjectsFollow::ended`] says what next.
    Ended(WatchEnd),
}

struct Watching {
    task: AbortOnDropHandle<WatchEnd>,
    objects: watch::Receiver<Arc<FlowcontrolObjects>>,
    started: Instant,
}

/// When the objects are listed and whether a watch follows them.
pub struct ObjectsFollow {
    /// `scrape.objects_interval`: the list's period where no watch follows them.
    interval: Duration,
    /// `scrape.interval` and `scrape.max_backoff`: the back-off after a failed watch.
    scrape_interval: Duration,
    max_backoff: Duration,
    max_event_bytes: u64,
    /// When a list is due; `None` while a watch follows the objects.
    next_list: Option<Instant>,
    watch: Option<Watching>,
    /// The watch was refused (403, 404, 405): not asked for again before then.
    refused_until: Option<Instant>,
    /// The refusal was said in the log (once, until a watch works again).
    refusal_said: bool,
    /// Watches that failed in a row.
    failures: u32,
    /// Levels of `/metrics` the objects lacked at the last list (a deleted level draining its requests): they ask
    /// for no other list.
    unexplained: BTreeSet<String>,
}

impl ObjectsFollow {
    pub fn new(
        interval: Duration,
        scrape_interval: Duration,
        max_backoff: Duration,
        max_event_bytes: u64,
    ) -> Self {
        Self {
            interval,
            scrape_interval,
            max_backoff,
            max_event_bytes,
            next_list: Some(Instant::now()),
            watch: None,
            refused_until: None,
            refusal_said: false,
            failures: 0,
            unexplained: BTreeSet::new(),
        }
    }

    /// Whether a watch follows the objects now.
    pub fn watching(&self) -> bool {
        self.watch.is_some()
    }

    /// Whether a round lists the objects (the endpoint's own back-off aside).
    pub fn list_due(&self, now: Instant) -> bool {
        self.next_list.is_some_and(|t| now >= t)
    }

    /// A round listed the objects: a watch follows them from there, unless watching is refused; `levels` are
    /// those of the round's `/metrics`.
    pub fn listed<'a>(
        &mut self,
        target: &Target,
        listed: &ListedObjects,
        levels: impl Iterator<Item = &'a String>,
        now: Instant,
    ) {
        self.unexplained = lacking(levels, &listed.objects);
        if self.refused_until.is_some_and(|t| now < t) {
            self.next_list = Some(now + self.interval);
            return;
        }
        let (tx, rx) = watch::channel(Arc::new(listed.objects.clone()));
        let task = tokio::spawn(objects::follow(
            target.clone(),
            listed.clone(),
            self.max_event_bytes,
            tx,
        ));
        // A new watch replaces the old one, which ends here.
        self.watch = Some(Watching {
            task: AbortOnDropHandle::new(task),
            objects: rx,
            started: now,
        });
        self.next_list = None;
    }

    /// A round's `/metrics` without a list: where no watch follows the objects, a level they lack that was not
    /// lacking at the last list makes a list due at once (the replica's loop lists them in the same round).
    pub fn levels_seen<'a>(
        &mut self,
        levels: impl Iterator<Item = &'a String>,
        objects: &FlowcontrolObjects,
        now: Instant,
    ) {
        if self.watch.is_some() {
            return;
        }
        let new = lacking(levels, objects);
        if let Some(level) = new.difference(&self.unexplained).next() {
            tracing::debug!(
                priority_level = %level,
                "a priority level the objects lack: listing them again"
            );
            self.next_list = Some(now);
        }
    }

    /// The next change of the objects, or the watch's end; never, while no watch runs.
    pub async fn next(&mut self) -> Followed {
        let Some(w) = self.watch.as_mut() else {
            return std::future::pending().await;
        };
        let end = tokio::select! {
            biased;
            Ok(()) = w.objects.changed() => {
                return Followed::Changed(w.objects.borrow_and_update().clone());
            }
            end = &mut w.task => end,
        };
        Followed::Ended(end.unwrap_or_else(|e| {
            WatchEnd::Failed(crate::scrape::ScrapeError::Body(format!(
                "the watch stopped: {e}"
            )))
        }))
    }

    /// The watch ended: when to list (and watch) again.
    pub fn ended(&mut self, end: WatchEnd, apiserver: &str, now: Instant) {
        let worked = self
            .watch
            .take()
            .is_some_and(|w| now.duration_since(w.started) >= WORKED_FOR);
        if worked {
            self.failures = 0;
            self.refusal_said = false;
        }
        match end {
            WatchEnd::Expired if worked => {
                tracing::debug!(
                    apiserver,
                    "the objects' version expired: listing them again"
                );
                self.next_list = Some(now);
            }
            // At once again and again would be a tight loop of lists: backed off as a failure.
            WatchEnd::Expired => self.failed(
                crate::scrape::ScrapeError::Http {
                    status: 410,
                    detail: "the version just listed is already too old".into(),
                },
                apiserver,
                now,
            ),
            WatchEnd::Unavailable(error) => {
                // Said once; the watch is asked for again now and then (RBAC may be granted), quietly.
                if !std::mem::replace(&mut self.refusal_said, true) {
                    // RBAC is the fix only for a 403; a 404 or 405, or a list without a version, is the server's.
                    let fix = match &error {
                        crate::scrape::ScrapeError::Http { status: 403, .. } => {
                            format!("; grant {}", apf::endpoints::FLOWCONTROL_RBAC_RULE)
                        }
                        _ => String::new(),
                    };
                    tracing::warn!(
                        apiserver,
                        "cannot watch the flowcontrol objects ({error}): listing them every {} instead (and when \
                         a priority level appears that they lack), so a change is seen that late{fix}",
                        humantime::format_duration(self.interval),
                    );
                } else {
                    tracing::debug!(apiserver, %error, "the watch of the flowcontrol objects is still refused");
                }
                self.refused_until = Some(now + UNAVAILABLE_RETRY);
                self.next_list = Some(now + self.interval);
            }
            WatchEnd::Failed(error) => self.failed(error, apiserver, now),
        }
    }

    /// A watch that failed: listed and watched again after a back-off.
    fn failed(&mut self, error: crate::scrape::ScrapeError, apiserver: &str, now: Instant) {
        self.failures = self.failures.saturating_add(1);
        // 1, 2, 4... intervals, capped: the same back-off as a failing endpoint's.
        let exp = (self.failures - 1).min(16);
        let delay = self
            .scrape_interval
            .saturating_mul(1 << exp)
            .min(self.max_backoff.max(self.scrape_interval));
        if self.failures == 1 || self.failures % 20 == 0 {
            tracing::warn!(
                apiserver,
                failures = self.failures,
                "the watch of the flowcontrol objects failed ({error}); listing them again in {}",
                humantime::format_duration(delay)
            );
        }
        self.next_list = Some(now + delay);
    }
}

/// The levels of `/metrics` the objects lack.
fn lacking<'a>(
    levels: impl Iterator<Item = &'a String>,
    objects: &FlowcontrolObjects,
) -> BTreeSet<String> {
    levels
        .filter(|l| !objects.priority_levels.iter().any(|p| &p.name == *l))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objects(levels: &[&str]) -> FlowcontrolObjects {
        FlowcontrolObjects {
            priority_levels: levels
                .iter()
                .map(|name| {
                    let object = serde_json::json!({"metadata": {"name": name}});
                    apf::model::parse_priority_level_configuration(&object).unwrap()
                })
                .collect(),
            flow_schemas: Vec::new(),
        }
    }

    fn names(levels: &[&str]) -> Vec<String> {
        levels.iter().map(|l| l.to_string()).collect()
    }

    fn follow() -> ObjectsFollow {
        ObjectsFollow::new(
            Duration::from_secs(60),
            Duration::from_secs(5),
            Duration::from_secs(60),
            1 << 20,
        )
    }

    #[test]
    fn without_a_watch_a_new_level_in_metrics_asks_for_one_list() {
        let now = Instant::now();
        let mut f = follow();
        f.unexplained = lacking(names(&["draining"]).iter(), &objects(&["a"]));
        f.next_list = Some(now + Duration::from_secs(60));
        // The level that was lacking at the last list asks for nothing.
        f.levels_seen(names(&["a", "draining"]).iter(), &objects(&["a"]), now);
        assert!(!f.list_due(now));
        f.levels_seen(
            names(&["a", "draining", "new"]).iter(),
            &objects(&["a"]),
            now,
        );
        assert!(f.list_due(now));
    }

    #[tokio::test]
    async fn a_refused_watch_falls_back_to_the_periodic_list_and_a_failing_one_backs_off() {
        let now = Instant::now();
        let mut f = follow();
        let forbidden = crate::scrape::ScrapeError::Http {
            status: 403,
            detail: String::new(),
        };
        f.ended(WatchEnd::Unavailable(forbidden), "a", now);
        assert!(!f.list_due(now + Duration::from_secs(59)));
        assert!(f.list_due(now + Duration::from_secs(60)));
        assert!(f
            .refused_until
            .is_some_and(|t| t >= now + UNAVAILABLE_RETRY));

        let failed = || WatchEnd::Failed(crate::scrape::ScrapeError::Connect("refused".into()));
        let mut delays = Vec::new();
        for _ in 0..6 {
            f.ended(failed(), "a", now);
            delays.push(f.next_list.map(|t| t.duration_since(now).as_secs()));
        }
        assert_eq!(delays, [5, 10, 20, 40, 60, 60].map(Some));
        // Expired at once after its list: backed off too.
        f.ended(WatchEnd::Expired, "a", now);
        assert!(!f.list_due(now + Duration::from_secs(59)));
        // After a watch that worked, listed again at once.
        let (_tx, rx) = watch::channel(Arc::new(objects(&[])));
        f.watch = Some(Watching {
            task: AbortOnDropHandle::new(tokio::spawn(async { WatchEnd::Expired })),
            objects: rx,
            started: now,
        });
        f.ended(WatchEnd::Expired, "a", now + WORKED_FOR);
        assert!(f.list_due(now + WORKED_FOR));
        assert_eq!(f.failures, 0);
    }
}
