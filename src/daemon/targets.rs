//! The target list the supervisor follows: the config's static targets or Prometheus sources as they are, or the
//! replicas discovery finds, as they come and go. A reload that changes the source (or the access) starts another discovery.
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use super::setup::{DiscoverySetup, TargetSource, Targets};
use crate::targets::access;
use crate::targets::discovery::{Discovery, Replicas};

/// `apf_monitor_discovered_replicas` and `apf_monitor_replicas_mixed`.
#[derive(Debug, Clone, Default)]
pub struct DiscoveryMetrics {
    discovered: Gauge,
    mixed: Gauge,
}

impl DiscoveryMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "apf_monitor_discovered_replicas",
            "Apiserver replicas found in the endpoints of the kubernetes Service (0 with static targets)",
            self.discovered.clone(),
        );
        registry.register(
            "apf_monitor_replicas_mixed",
            "1 while the endpoints cannot be read and the API server URL itself is scraped: each scrape then \
             reaches whichever replica the Service picks, and their numbers are mixed",
            self.mixed.clone(),
        );
    }
}

/// Follows `sources` until `stop`, publishing the replicas to scrape on `out`.
pub async fn run(
    mut sources: watch::Receiver<TargetSource>,
    out: watch::Sender<Arc<Targets>>,
    metrics: DiscoveryMetrics,
    stop: CancellationToken,
) {
    type Following<'a> = (TargetSource, Pin<Box<dyn Future<Output = ()> + Send + 'a>>);
    let mut following: Option<Following> = None;
    loop {
        let source = sources.borrow_and_update().clone();
        // A reload that leaves discovery as it was does not start it over (its watch goes on).
        let same = match (&following, &source) {
            (Some((TargetSource::Discover(a), _)), TargetSource::Discover(b)) => a.same_as(b),
            _ => false,
        };
        if !same {
            following = Some((source.clone(), Box::pin(follow(source, &out, &metrics))));
        }
        let Some((_, current)) = following.as_mut() else {
            return;
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = current => following = None,
            changed = sources.changed() => if changed.is_err() { return },
        }
    }
}

/// Publishes what one source says, for as long as it is the source.
async fn follow(
    source: TargetSource,
    out: &watch::Sender<Arc<Targets>>,
    metrics: &DiscoveryMetrics,
) {
    match source {
        TargetSource::Static(replicas) => {
            metrics.discovered.set(0);
            metrics.mixed.set(0);
            out.send_replace(Arc::new(Targets {
                replicas,
                prometheus: Vec::new(),
            }));
            std::future::pending::<()>().await;
        }
        TargetSource::Prometheus(prometheus) => {
            metrics.discovered.set(0);
            metrics.mixed.set(0);
            out.send_replace(Arc::new(Targets {
                replicas: Vec::new(),
                prometheus,
            }));
            std::future::pending::<()>().await;
        }
        TargetSource::Discover(setup) => discover(*setup, out, metrics).await,
    }
}

/// Runs discovery and turns each replica set into targets.
async fn discover(
    setup: DiscoverySetup,
    out: &watch::Sender<Arc<Targets>>,
    metrics: &DiscoveryMetrics,
) {
    let client = match access::client(&setup.access) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "replica discovery cannot start");
            out.send_replace(Arc::new(Targets::default()));
            std::future::pending::<()>().await;
            return;
        }
    };
    let (namespace, service) = setup.config.service_ref();
    let (tx, mut found) = watch::channel(None);
    // The discovery task ends with this future (a new source): dropping the handle aborts it.
    let _discovery = AbortOnDropHandle::new(tokio::spawn(
        Discovery::new(client, namespace, service).run(tx),
    ));
    loop {
        if found.changed().await.is_err() {
            return;
        }
        let replicas = found.borrow_and_update().clone();
        let Some(replicas) = replicas else {
            continue;
        };
        let (discovered, mixed) = match &replicas {
            Replicas::Discovered(addresses) => (addresses.len() as i64, 0),
            Replicas::Mixed { .. } => (0, 1),
        };
        metrics.discovered.set(discovered);
        metrics.mixed.set(mixed);
        out.send_replace(Arc::new(Targets {
            replicas: setup.replicas(&replicas),
            prometheus: Vec::new(),
        }));
    }
}
