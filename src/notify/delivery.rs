//! One worker task and one bounded queue per receiver: enqueueing never blocks, a full queue drops (counted), and
//! a slow or dead receiver only ever delays its own notifications. At shutdown, [`Delivery::drain`] delivers what
//! is queued (retries included) until a deadline and hands back what it could not.
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{Notification, NotifyError, NotifyMetrics, Outcome, Receiver};
use crate::notify::DeliveryConfig;

const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

pub struct Delivery {
    name: String,
    tx: mpsc::Sender<Notification>,
    metrics: NotifyMetrics,
    /// When set, the worker stops at this instant, whatever it is doing.
    deadline: watch::Sender<Option<Instant>>,
    worker: JoinHandle<Vec<Notification>>,
}

impl Delivery {
    /// Starts the receiver's worker; needs a tokio runtime. Registers the receiver's counters at 0.
    pub fn spawn(
        receiver: Arc<dyn Receiver>,
        cfg: &DeliveryConfig,
        metrics: NotifyMetrics,
    ) -> Delivery {
        Self::spawn_confirming(receiver, cfg, metrics, None)
    }

    /// [`Delivery::spawn`], handing each notification the receiver accepted to `confirmed`, in the order sent:
    /// what the notification log records.
    pub fn spawn_confirming(
        receiver: Arc<dyn Receiver>,
        cfg: &DeliveryConfig,
        metrics: NotifyMetrics,
        confirmed: Option<mpsc::UnboundedSender<Notification>>,
    ) -> Delivery {
        let name = receiver.name().to_string();
        metrics.register_receiver(&name);
        // A capacity of 0 is not a queue tokio accepts; one slot is the smallest meaningful one.
        let (tx, rx) = mpsc::channel(cfg.queue_capacity.max(1));
        let (deadline, deadline_rx) = watch::channel(None);
        let worker = tokio::spawn(work(
            receiver,
            rx,
            cfg.timeout.0,
            cfg.max_retry_duration.0,
            metrics.clone(),
            deadline_rx,
            confirmed,
        ));
        Delivery {
            name,
            tx,
            metrics,
            deadline,
            worker,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Queues a notification; never waits. A full queue (or a stopped worker) drops it: counted and logged.
    pub fn enqueue(&self, n: Notification) {
        if let Err(e) = self.tx.try_send(n) {
            let (why, n) = match e {
                mpsc::error::TrySendError::Full(n) => ("queue full", n),
                mpsc::error::TrySendError::Closed(n) => ("worker stopped", n),
            };
            self.metrics.inc(&self.name, Outcome::Dropped);
            tracing::warn!(
                receiver = %self.name,
                group = %n.group_key,
                status = n.status(),
                alerts = n.alerts.len(),
                reason = why,
                "notification dropped"
            );
        }
    }

    /// Notifications waiting (not counting the one being sent).
    pub fn queued(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }

    /// Stops taking notifications and delivers what is queued, retries included, until `deadline`; returns what
    /// was not delivered by then (each counted `dropped` and logged).
    pub async fn drain(self, deadline: Instant) -> Vec<Notification> {
        let Delivery {
            name,
            tx,
            metrics,
            deadline: stop,
            worker,
        } = self;
        let _ = stop.send(Some(deadline));
        drop(tx);
        let abort = worker.abort_handle();
        // The worker stops itself at the deadline; the grace only covers a receiver that ignores cancellation.
        let undelivered =
            match tokio::time::timeout_at(deadline + Duration::from_secs(1), worker).await {
                Ok(Ok(undelivered)) => undelivered,
                _ => {
                    abort.abort();
                    Vec::new()
                }
            };
        if !undelivered.is_empty() {
            metrics.inc_by(&name, Outcome::Dropped, undelivered.len() as u64);
            let groups: Vec<&str> = undelivered.iter().map(|n| n.group_key.as_str()).collect();
            tracing::warn!(
                receiver = %name,
                undelivered = undelivered.len(),
                groups = ?groups,
                "shutdown deadline reached: notifications not delivered"
            );
        }
        undelivered
    }

    /// Stops taking notifications and lets the worker deliver what is queued on its own (a receiver a reload
    /// removed or changed); returns the worker, which ends when its queue is empty.
    pub fn close(self) -> JoinHandle<Vec<Notification>> {
        self.worker
    }
}

/// Resolves once the deadline is set and reached; never while none is set.
async fn deadline_passed(deadline: &mut watch::Receiver<Option<Instant>>) {
    loop {
        let set = *deadline.borrow_and_update();
        if let Some(at) = set {
            tokio::time::sleep_until(at).await;
            return;
        }
        if deadline.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

async fn work(
    receiver: Arc<dyn Receiver>,
    mut rx: mpsc::Receiver<Notification>,
    timeout: Duration,
    max_retry: Duration,
    metrics: NotifyMetrics,
    mut deadline: watch::Receiver<Option<Instant>>,
    confirmed: Option<mpsc::UnboundedSender<Notification>>,
) -> Vec<Notification> {
    let name = receiver.name().to_string();
    let mut undelivered = Vec::new();
    while let Some(n) = rx.recv().await {
        let outcome = tokio::select! {
            outcome = deliver(receiver.as_ref(), &n, timeout, max_retry, &metrics) => outcome,
            _ = deadline_passed(&mut deadline) => {
                undelivered.push(n);
                break;
            }
        };
        match outcome {
            Ok(()) => {
                metrics.inc(&name, Outcome::Sent);
                if let Some(confirmed) = &confirmed {
                    // The stage gone (stopping) has nothing left to record.
                    let _ = confirmed.send(n);
                }
            }
            Err(e) => {
                metrics.inc(&name, Outcome::Failed);
                tracing::error!(receiver = %name, group = %n.group_key, error = %e, "notification failed");
            }
        }
    }
    rx.close();
    while let Ok(n) = rx.try_recv() {
        undelivered.push(n);
    }
    undelivered
}

/// Attempts until success, a permanent error, or `max_retry` since the first attempt; counts each retry.
async fn deliver(
    receiver: &dyn Receiver,
    n: &Notification,
    timeout: Duration,
    max_retry: Duration,
    metrics: &NotifyMetrics,
) -> Result<(), NotifyError> {
    let start = Instant::now();
    let mut backoff = FIRST_BACKOFF;
    loop {
        let result = match tokio::time::timeout(timeout, receiver.send(n)).await {
            Ok(r) => r,
            Err(_) => Err(NotifyError::Retryable {
                message: format!("no answer within {}", humantime::format_duration(timeout)),
                retry_after: None,
            }),
        };
        let (retry_after, message) = match result {
            Ok(()) => return Ok(()),
            Err(NotifyError::Permanent(m)) => return Err(NotifyError::Permanent(m)),
            Err(NotifyError::Retryable {
                retry_after,
                message,
            }) => (retry_after, message),
        };
        let wait = next_wait(backoff, retry_after);
        if start.elapsed() + wait > max_retry {
            return Err(NotifyError::Retryable {
                message: format!(
                    "gave up after {} of retries: {message}",
                    humantime::format_duration(round(start.elapsed()))
                ),
                retry_after: None,
            });
        }
        metrics.inc(receiver.name(), Outcome::Retried);
        tracing::warn!(receiver = %receiver.name(), error = %message, wait = %humantime::format_duration(round(wait)), "notification will be retried");
        tokio::time::sleep(wait).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// The backoff with ±20 % jitter (so receivers that failed together do not retry together), at most 60 s, or the
/// receiver's `Retry-After` when that is longer.
pub fn next_wait(backoff: Duration, retry_after: Option<Duration>) -> Duration {
    let jitter = rand::thread_rng().gen_range(0.8..=1.2);
    let wait = backoff.mul_f64(jitter).min(MAX_BACKOFF);
    match retry_after {
        Some(r) if r > wait => r,
        _ => wait,
    }
}

fn round(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis().min(u128::from(u64::MAX)) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_jitter_and_honour_retry_after() {
        for _ in 0..100 {
            let w = next_wait(Duration::from_secs(1), None);
            assert!(
                w >= Duration::from_millis(800) && w <= Duration::from_millis(1200),
                "{w:?}"
            );
            let w = next_wait(MAX_BACKOFF, None);
            assert!(w >= Duration::from_secs(48) && w <= MAX_BACKOFF, "{w:?}");
        }
        assert_eq!(
            next_wait(Duration::from_secs(1), Some(Duration::from_secs(5))),
            Duration::from_secs(5)
        );
        // A shorter Retry-After does not cut the backoff.
        assert!(
            next_wait(Duration::from_secs(4), Some(Duration::from_secs(1)))
                >= Duration::from_millis(3200)
        );
    }
}
