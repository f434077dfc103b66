//! When each endpoint of a replica may be asked again: back off on errors, honour `Retry-After`, and leave an
//! endpoint we may not read (403) or that is not there (404) alone for a while instead of hammering it.
use std::time::{Duration, Instant};

use super::{Endpoint, ScrapeError};

/// How long a dump or object list answered 403/404 is left alone before it is tried again (RBAC may get fixed).
pub const UNAVAILABLE_RETRY: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, Default)]
pub struct EndpointState {
    pub consecutive_failures: u32,
    next_allowed: Option<Instant>,
    /// Set while a dump or the object list answers 403/404: the target runs metrics-only.
    pub unavailable: bool,
}

/// What a failure means for the schedule.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Tried again after this delay.
    RetryAfter(Duration),
    /// Not ours to read (403) or not there (404): metrics-only from now on; `first` is true the first time, so
    /// the warning is logged once.
    Unavailable { first: bool },
}

impl EndpointState {
    pub fn is_due(&self, now: Instant) -> bool {
        self.next_allowed.is_none_or(|t| now >= t)
    }

    pub fn record_success(&mut self) {
        self.consecutive_failures = 0;
        self.next_allowed = None;
        self.unavailable = false;
    }

    pub fn record_failure(
        &mut self,
        endpoint: Endpoint,
        err: &ScrapeError,
        now: Instant,
        interval: Duration,
        max_backoff: Duration,
    ) -> Verdict {
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        if endpoint != Endpoint::Metrics && err.is_unavailable() {
            let first = !self.unavailable;
            self.unavailable = true;
            self.next_allowed = Some(now + UNAVAILABLE_RETRY);
            return Verdict::Unavailable { first };
        }
        // 1, 2, 4, 8... intervals, capped; the first failure just waits for the next tick.
        let exp = self.consecutive_failures.saturating_sub(1).min(16);
        let mut delay = interval
            .saturating_mul(1 << exp)
            .min(max_backoff.max(interval));
        if let ScrapeError::Throttled {
            retry_after: Some(after),
        } = err
        {
            delay = delay.max(*after);
        }
        // Due a little before the tick that follows the delay, so a tick that lands on time is not missed.
        self.next_allowed = Some(now + delay.saturating_sub(interval / 2));
        Verdict::RetryAfter(delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const I: Duration = Duration::from_secs(5);
    const MAX: Duration = Duration::from_secs(60);

    fn err500() -> ScrapeError {
        ScrapeError::Http {
            status: 500,
            detail: String::new(),
        }
    }

    #[test]
    fn backs_off_exponentially_up_to_the_cap_and_resets() {
        let now = Instant::now();
        let mut s = EndpointState::default();
        let delays: Vec<_> = (0..6)
            .map(
                |_| match s.record_failure(Endpoint::Metrics, &err500(), now, I, MAX) {
                    Verdict::RetryAfter(d) => d.as_secs(),
                    v => panic!("{v:?}"),
                },
            )
            .collect();
        assert_eq!(delays, vec![5, 10, 20, 40, 60, 60]);
        assert!(!s.is_due(now + Duration::from_secs(57)));
        assert!(s.is_due(now + Duration::from_secs(58)));
        s.record_success();
        assert!(s.is_due(now));
        assert_eq!(s.consecutive_failures, 0);
    }

    #[test]
    fn retry_after_is_honoured() {
        let now = Instant::now();
        let mut s = EndpointState::default();
        let v = s.record_failure(
            Endpoint::Metrics,
            &ScrapeError::Throttled {
                retry_after: Some(Duration::from_secs(32)),
            },
            now,
            I,
            MAX,
        );
        assert_eq!(v, Verdict::RetryAfter(Duration::from_secs(32)));
        assert!(!s.is_due(now + Duration::from_secs(25)));
    }

    #[test]
    fn forbidden_dump_goes_metrics_only_and_warns_once() {
        let now = Instant::now();
        let mut s = EndpointState::default();
        let forbidden = ScrapeError::Http {
            status: 403,
            detail: "forbidden".into(),
        };
        assert_eq!(
            s.record_failure(Endpoint::DumpQueues, &forbidden, now, I, MAX),
            Verdict::Unavailable { first: true }
        );
        assert!(!s.is_due(now + Duration::from_secs(599)));
        let later = now + UNAVAILABLE_RETRY;
        assert!(s.is_due(later));
        assert_eq!(
            s.record_failure(Endpoint::DumpQueues, &forbidden, later, I, MAX),
            Verdict::Unavailable { first: false }
        );
        // /metrics itself is never given up on.
        let mut m = EndpointState::default();
        assert!(matches!(
            m.record_failure(Endpoint::Metrics, &forbidden, now, I, MAX),
            Verdict::RetryAfter(_)
        ));
    }
}
