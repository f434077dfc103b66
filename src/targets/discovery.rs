//! Every apiserver replica, from the endpoints of the `default/kubernetes` Service: its EndpointSlices (label
//! `kubernetes.io/service-name`), or its Endpoints object where EndpointSlices are not served. Listed, then
//! watched, so replicas that come and go change the target list without a restart. Each replica is scraped at its
//! own address: through the Service, each scrape would reach a random replica and mix their numbers.
//!
//! When the endpoints cannot be read (RBAC does not allow it), the API server URL itself is scraped, and the report
//! says that the replicas are mixed.
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Endpoints;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use tokio::sync::watch;

/// Where the replicas are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replicas {
    /// Each replica's `IP:port` (`[IPv6]:port`).
    Discovered(BTreeSet<String>),
    /// The endpoints cannot be read: the API server URL itself is scraped, whichever replica answers.
    Mixed { reason: String },
}

/// Which object names the replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    EndpointSlices,
    Endpoints,
}

/// The `IP:port` of an address and a port: IPv6 addresses in brackets.
fn address(ip: &str, port: i32) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

/// The ready endpoints of one EndpointSlice, on its `https` port (else its first).
fn slice_addresses(slice: &EndpointSlice) -> BTreeSet<String> {
    let ports = slice.ports.as_deref().unwrap_or_default();
    let Some(port) = ports
        .iter()
        .find(|p| p.name.as_deref() == Some("https"))
        .or_else(|| ports.first())
        .and_then(|p| p.port)
    else {
        return BTreeSet::new();
    };
    slice
        .endpoints
        .iter()
        .flatten()
        // Ready unless said otherwise: a terminating replica is on its way out.
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .flat_map(|e| e.addresses.iter().map(|ip| address(ip, port)))
        .collect()
}

/// The ready addresses of an Endpoints object, on its `https` port (else its first).
fn endpoints_addresses(endpoints: &Endpoints) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for subset in endpoints.subsets.iter().flatten() {
        let ports = subset.ports.as_deref().unwrap_or_default();
        let Some(port) = ports
            .iter()
            .find(|p| p.name.as_deref() == Some("https"))
            .or_else(|| ports.first())
            .map(|p| p.port)
        else {
            continue;
        };
        for a in subset.addresses.iter().flatten() {
            out.insert(address(&a.ip, port));
        }
    }
    out
}

fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// The replicas of one Service, read through `client`.
pub struct Discovery {
    client: kube::Client,
    namespace: String,
    service: String,
}

/// What one list found: the addresses by object name, and the resourceVersion to watch from.
struct Listed {
    source: Source,
    objects: BTreeMap<String, BTreeSet<String>>,
    version: String,
}

impl Listed {
    fn replicas(&self) -> Replicas {
        Replicas::Discovered(self.objects.values().flatten().cloned().collect())
    }
}

const RBAC_HINT: &str = "grant a Role in the Service's namespace: apiGroups [\"discovery.k8s.io\"] resources \
                         [\"endpointslices\"] verbs [\"list\", \"watch\"] (and [\"\"] [\"endpoints\"] where \
                         EndpointSlices are not served)";

impl Discovery {
    pub fn new(client: kube::Client, namespace: &str, service: &str) -> Self {
        Self {
            client,
            namespace: namespace.to_string(),
            service: service.to_string(),
        }
    }

    fn slices(&self) -> Api<EndpointSlice> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn endpoints(&self) -> Api<Endpoints> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn selector(&self) -> String {
        format!("kubernetes.io/service-name={}", self.service)
    }

    /// Lists the EndpointSlices, or the Endpoints where EndpointSlices are not served (404). A 403 on both is
    /// `Ok(None)`: discovery is not allowed.
    async fn list(&self) -> Result<Option<Listed>, kube::Error> {
        let params = ListParams::default().labels(&self.selector());
        let slices = match self.slices().list(&params).await {
            Ok(list) => Some(list),
            Err(e) if matches!(status_code(&e), Some(403 | 404)) => None,
            Err(e) => return Err(e),
        };
        if let Some(list) = slices {
            return Ok(Some(Listed {
                source: Source::EndpointSlices,
                version: list.metadata.resource_version.clone().unwrap_or_default(),
                objects: list
                    .items
                    .iter()
                    .map(|s| {
                        (
                            s.metadata.name.clone().unwrap_or_default(),
                            slice_addresses(s),
                        )
                    })
                    .collect(),
            }));
        }
        let params = ListParams::default().fields(&format!("metadata.name={}", self.service));
        match self.endpoints().list(&params).await {
            Ok(list) => Ok(Some(Listed {
                source: Source::Endpoints,
                version: list.metadata.resource_version.clone().unwrap_or_default(),
                objects: list
                    .items
                    .iter()
                    .map(|e| {
                        (
                            e.metadata.name.clone().unwrap_or_default(),
                            endpoints_addresses(e),
                        )
                    })
                    .collect(),
            })),
            Err(e) if status_code(&e) == Some(403) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The replicas now, listed once (`check`).
    pub async fn once(&self) -> Result<Replicas, kube::Error> {
        Ok(match self.list().await? {
            Some(listed) => listed.replicas(),
            None => self.forbidden(),
        })
    }

    fn forbidden(&self) -> Replicas {
        Replicas::Mixed {
            reason: format!(
                "the endpoints of {}/{} cannot be read: {RBAC_HINT}",
                self.namespace, self.service
            ),
        }
    }

    /// Lists and watches until the receivers are gone, publishing every change of the replica set. An apiserver
    /// that cannot be reached keeps the last known set (with a warning) and is tried again with a back-off.
    pub async fn run(self, tx: watch::Sender<Option<Replicas>>) {
        let mut backoff = Duration::from_secs(1);
        loop {
            if tx.is_closed() {
                return;
            }
            let listed = match self.list().await {
                Ok(Some(listed)) => listed,
                Ok(None) => {
                    publish(&tx, self.forbidden());
                    // RBAC may be granted later: look again now and then.
                    tokio::time::sleep(Duration::from_secs(600)).await;
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in_s = backoff.as_secs(), "cannot list the apiserver replicas; keeping the last known ones");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(300));
                    continue;
                }
            };
            backoff = Duration::from_secs(1);
            publish(&tx, listed.replicas());
            if let Err(e) = self.watch(listed, &tx).await {
                tracing::debug!(error = %e, "the replica watch ended; listing again");
            }
        }
    }

    /// Follows the listed objects until the watch must start over (410 Gone, an error, the sender gone).
    async fn watch(
        &self,
        mut listed: Listed,
        tx: &watch::Sender<Option<Replicas>>,
    ) -> Result<(), kube::Error> {
        loop {
            let params = match listed.source {
                Source::EndpointSlices => WatchParams::default().labels(&self.selector()),
                Source::Endpoints => {
                    WatchParams::default().fields(&format!("metadata.name={}", self.service))
                }
            }
            .timeout(290);
            match listed.source {
                Source::EndpointSlices => {
                    follow(self.slices(), &params, &mut listed, tx, slice_addresses).await?
                }
                Source::Endpoints => {
                    follow(
                        self.endpoints(),
                        &params,
                        &mut listed,
                        tx,
                        endpoints_addresses,
                    )
                    .await?
                }
            }
            if tx.is_closed() {
                return Ok(());
            }
            // The server ended the watch (its timeout): go on from the last version seen.
        }
    }
}

/// One watch of `api` from the listed version, applying each event until the server ends it.
async fn follow<K>(
    api: Api<K>,
    params: &WatchParams,
    listed: &mut Listed,
    tx: &watch::Sender<Option<Replicas>>,
    addresses: fn(&K) -> BTreeSet<String>,
) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut events = api.watch(params, &listed.version).await?.boxed();
    while let Some(event) = events.next().await {
        let seen = match event? {
            WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                Some((o.meta().clone(), Some(addresses(&o))))
            }
            WatchEvent::Deleted(o) => Some((o.meta().clone(), None)),
            WatchEvent::Bookmark(b) => {
                listed.version = b.metadata.resource_version;
                None
            }
            WatchEvent::Error(status) => return Err(kube::Error::Api(status)),
        };
        apply(listed, seen, tx);
    }
    Ok(())
}

type Seen = Option<(
    k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    Option<BTreeSet<String>>,
)>;

/// One watch event: the object's addresses replaced (or removed), the version advanced, the set published.
fn apply(listed: &mut Listed, seen: Seen, tx: &watch::Sender<Option<Replicas>>) {
    let Some((meta, addresses)) = seen else {
        return;
    };
    if let Some(v) = meta.resource_version {
        listed.version = v;
    }
    let name = meta.name.unwrap_or_default();
    match addresses {
        Some(a) => {
            listed.objects.insert(name, a);
        }
        None => {
            listed.objects.remove(&name);
        }
    }
    publish(tx, listed.replicas());
}

fn publish(tx: &watch::Sender<Option<Replicas>>, replicas: Replicas) {
    tx.send_if_modified(|r| {
        if r.as_ref() == Some(&replicas) {
            return false;
        }
        if let Replicas::Discovered(set) = &replicas {
            tracing::info!(replicas = ?set, "apiserver replicas discovered");
        }
        *r = Some(replicas);
        true
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};

    #[test]
    fn slices_give_ready_addresses_on_the_https_port() {
        let endpoint = |ip: &str, ready: Option<bool>| Endpoint {
            addresses: vec![ip.to_string()],
            conditions: Some(EndpointConditions {
                ready,
                ..Default::default()
            }),
            ..Default::default()
        };
        let slice = EndpointSlice {
            address_type: "IPv4".into(),
            endpoints: Some(vec![
                endpoint("10.0.0.5", Some(true)),
                endpoint("10.0.0.6", None),
                endpoint("10.0.0.7", Some(false)),
            ]),
            ports: Some(vec![
                EndpointPort {
                    name: Some("other".into()),
                    port: Some(80),
                    ..Default::default()
                },
                EndpointPort {
                    name: Some("https".into()),
                    port: Some(6443),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        let got: Vec<String> = slice_addresses(&slice).into_iter().collect();
        assert_eq!(got, ["10.0.0.5:6443", "10.0.0.6:6443"]);
        assert_eq!(address("fd00::1", 443), "[fd00::1]:443");
    }
}
