//! A simulated cluster: N kube-apiserver replicas, each its own [`Simulator`] on its own loopback address, all
//! serving one API from one store (any replica answers for the cluster, as real apiservers do), with the
//! `kubernetes` Endpoints and EndpointSlices naming them, optional TLS and bearer token, and a kubeconfig for
//! kubectl and client libraries.
//!
//! Addresses: replica i listens on the i-th address from [`ClusterOptions::first_address`] (127.0.0.2,
//! 127.0.0.3, ...: the whole 127.0.0.0/8 is loopback on Linux, and 127.0.0.1 stays free for the user's tools), all
//! on [`ClusterOptions::listen_port`], or each on a free port of its own when that is 0.
//!
//! Load: the scenario is the load of the whole cluster, split unevenly so that one replica is the hot one: of n
//! serving replicas, the k-th (k = 0, 1, ... in order of their index) receives (n − k) / (1 + 2 + … + n) of every
//! rate: 100 % for one, 67 / 33 % for two, 50 / 33 / 17 % for three, 40 / 30 / 20 / 10 % for four. Removing or
//! adding a replica splits the load again among those serving, as a load balancer would.

use super::api::{self, ApiContext};
use super::auth::require_token;
use super::objects;
use super::reviews::{Grant, Policy, SimUser};
use super::scenario::Scenario;
use super::server::replica_routes;
use super::simulator::{SimOptions, Simulator};
use super::store::Store;
use super::tls::{Pki, TlsError, TlsListener};
use super::{controller, openapi};
use apf::KubeVersion;
use base64::Engine as _;
use serde_json::json;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The kubeconfig's cluster, context and user name.
pub const KUBECONFIG_CONTEXT: &str = "apf-monitor-sim";
/// How long [`Cluster::remove_replica`] waits for the replica's open requests to finish.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// How to run a simulated cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub version: KubeVersion,
    /// The load of the whole cluster; each replica receives its share (see the module documentation).
    pub scenario: Scenario,
    /// Replica i runs with seed `seed + i`, so replica 0 of any cluster behaves as a lone simulator of `seed`.
    pub seed: u64,
    /// ServerCL of every replica.
    pub server_concurrency: u32,
    /// At least 1.
    pub replicas: usize,
    /// Replica 0's address; replica i gets the i-th next one.
    pub first_address: IpAddr,
    /// The port of every replica; 0: each its own free port.
    pub listen_port: u16,
    /// Serve HTTPS with certificates of a CA made at start.
    pub tls: bool,
    /// Require `Authorization: Bearer <token>` (see [`generate_token`]).
    pub token: Option<String>,
    /// Each replica's clock steps its simulator this often in wall time; `None`: the caller steps them (tests).
    pub clock_tick: Option<Duration>,
    /// Users besides the administrator (whose token is `token`), for TokenReviews.
    pub users: Vec<SimUser>,
    /// What RBAC grants them on non-resource URLs, for SubjectAccessReviews.
    pub grants: Vec<Grant>,
    /// Where the replicas' audit events go (a log file, a webhook); `None`: nowhere.
    pub audit: Option<crate::audit::AuditOptions>,
}

impl ClusterOptions {
    /// One plain-HTTP replica on 127.0.0.2, a free port, seed 1, ServerCL 600, clock every 100 ms.
    pub fn new(version: KubeVersion, scenario: Scenario) -> Self {
        ClusterOptions {
            version,
            scenario,
            seed: 1,
            server_concurrency: 600,
            replicas: 1,
            first_address: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
            listen_port: 0,
            tls: false,
            token: None,
            clock_tick: Some(Duration::from_millis(100)),
            users: Vec::new(),
            grants: Vec::new(),
            audit: None,
        }
    }
}

/// Why a cluster could not be started or changed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("a cluster needs at least one replica")]
    NoReplicas,
    #[error("no address for replica {index} after {first}: replicas need consecutive addresses, e.g. from 127.0.0.2")]
    Address { first: IpAddr, index: usize },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("no replica {0} is serving")]
    NoSuchReplica(usize),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The share of the cluster's load each of `n` replicas receives, in order: (n − k) / (n (n + 1) / 2).
pub fn load_shares(n: usize) -> Vec<f64> {
    let total = (n * (n + 1) / 2) as f64;
    (0..n).map(|k| (n - k) as f64 / total).collect()
}

/// A random token for [`ClusterOptions::token`]: 32 letters and digits.
pub fn generate_token() -> String {
    use rand::distributions::Alphanumeric;
    use rand::Rng;
    rand::thread_rng()
        .sample_iter(&Alphanumeric)
        .take(32)
        .map(char::from)
        .collect()
}

/// The `index`-th address after `first`.
fn nth_address(first: IpAddr, index: usize) -> Result<IpAddr, ClusterError> {
    let err = || ClusterError::Address { first, index };
    if index == 0 {
        return Ok(first);
    }
    if first.is_unspecified() {
        return Err(err());
    }
    match first {
        IpAddr::V4(a) => u32::from(a)
            .checked_add(u32::try_from(index).map_err(|_| err())?)
            .map(|n| IpAddr::V4(Ipv4Addr::from(n)))
            .ok_or_else(err),
        IpAddr::V6(a) => u128::from(a)
            .checked_add(index as u128)
            .map(|n| IpAddr::V6(Ipv6Addr::from(n)))
            .ok_or_else(err),
    }
}

/// Where clients reach a replica bound to `addr`: a replica bound to every interface is named by loopback.
fn advertised(addr: SocketAddr) -> SocketAddr {
    let ip = match addr.ip() {
        IpAddr::V4(a) if a.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(a) if a.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port())
}

struct Replica {
    index: usize,
    sim: Simulator,
    addr: SocketAddr,
    stop: CancellationToken,
    server: JoinHandle<()>,
    clock: Option<JoinHandle<()>>,
}

impl Replica {
    /// Tells the server to stop (it finishes open requests, watches end) and stops the clock.
    fn signal_stop(&mut self) {
        self.stop.cancel();
        if let Some(c) = self.clock.take() {
            c.abort();
        }
    }

    /// Stops the replica and waits up to [`STOP_GRACE`] for its open requests; false if some were still open.
    async fn shut_down(mut self) -> bool {
        self.signal_stop();
        tokio::time::timeout(STOP_GRACE, self.server).await.is_ok()
    }
}

struct Serving {
    replicas: Vec<Replica>,
    next_index: usize,
    /// The part of the scenario's load the cluster receives (1.0: all of it), split among the replicas.
    load: f64,
}

/// A running simulated cluster. Dropping it stops every replica.
pub struct Cluster {
    opts: ClusterOptions,
    store: Store,
    pki: Option<Pki>,
    serving: Mutex<Serving>,
    /// The replicas whose audit events the sink drains; the sink stops when the cluster goes.
    audit: Option<crate::audit::Feed>,
}

impl Cluster {
    /// Starts `opts.replicas` replicas and writes the objects the cluster starts with.
    pub async fn start(opts: ClusterOptions) -> Result<Cluster, ClusterError> {
        if opts.replicas == 0 {
            return Err(ClusterError::NoReplicas);
        }
        let pki = if opts.tls { Some(Pki::new()?) } else { None };
        let store = Store::new();
        let audit = match &opts.audit {
            Some(a) => {
                let feed: crate::audit::Feed = Default::default();
                crate::audit::spawn(a.clone(), std::sync::Arc::downgrade(&feed)).map_err(
                    |source| ClusterError::Write {
                        path: a.log.as_ref().map(|l| l.path.clone()).unwrap_or_default(),
                        source,
                    },
                )?;
                Some(feed)
            }
            None => None,
        };
        let cluster = Cluster {
            audit,
            store,
            pki,
            serving: Mutex::new(Serving {
                replicas: Vec::new(),
                next_index: 0,
                load: 1.0,
            }),
            opts,
        };
        objects::seed(&cluster.store, cluster.opts.version);
        for _ in 0..cluster.opts.replicas {
            // On an error, dropping `cluster` stops the replicas already started.
            cluster.add_replica().await?;
        }
        Ok(cluster)
    }

    fn serving(&self) -> MutexGuard<'_, Serving> {
        // The list is consistent between statements; keep going after a panic elsewhere.
        self.serving.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts one more replica on the next address; returns its index. The Endpoints and EndpointSlices name it
    /// (open watches see the change) and the load is split again.
    pub async fn add_replica(&self) -> Result<usize, ClusterError> {
        self.add_replica_signed_by(self.pki.as_ref()).await
    }

    /// Starts one more replica whose certificate a CA of its own signed, not the cluster's (with `tls`): an
    /// impostor a client must refuse. The endpoints list it like any other replica.
    pub async fn add_replica_with_foreign_certificate(&self) -> Result<usize, ClusterError> {
        let foreign = match &self.pki {
            Some(_) => Some(Pki::new()?),
            None => None,
        };
        self.add_replica_signed_by(foreign.as_ref()).await
    }

    async fn add_replica_signed_by(&self, pki: Option<&Pki>) -> Result<usize, ClusterError> {
        let index = {
            let mut s = self.serving();
            s.next_index += 1;
            s.next_index - 1
        };
        let replica = self.start_replica(index, pki).await?;
        tracing::info!(replica = index, addr = %replica.addr, "simulated apiserver started");
        self.serving().replicas.push(replica);
        self.membership_changed();
        Ok(index)
    }

    async fn start_replica(
        &self,
        index: usize,
        pki: Option<&Pki>,
    ) -> Result<Replica, ClusterError> {
        let ip = nth_address(self.opts.first_address, index)?;
        // Lenient, as `simulate` has always been: a flow whose schema the version lacks is skipped with a warning.
        let sim = Simulator::new(SimOptions {
            version: self.opts.version,
            scenario: self.opts.scenario.clone(),
            seed: self.opts.seed.wrapping_add(index as u64),
            server_concurrency: self.opts.server_concurrency,
        });
        if let Some(feed) = &self.audit {
            sim.enable_audit();
            feed.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(sim.clone());
        }
        let bind = SocketAddr::new(ip, self.opts.listen_port);
        let listener = tokio::net::TcpListener::bind(bind)
            .await
            .map_err(|source| ClusterError::Bind { addr: bind, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| ClusterError::Bind { addr: bind, source })?;
        let addr = advertised(local);
        let stop = CancellationToken::new();
        controller::spawn(
            self.store.clone(),
            self.opts.version,
            sim.clone(),
            stop.clone(),
        );
        let ctx = ApiContext::new(
            self.store.clone(),
            self.opts.version,
            Some(addr.to_string()),
            stop.clone(),
        )
        .with_policy(Policy::new(
            self.opts.token.as_deref(),
            &self.opts.users,
            &self.opts.grants,
        ));
        let mut app = replica_routes(sim.clone())
            .merge(api::routes(ctx))
            .merge(openapi::routes(self.opts.version));
        if let Some(token) = self.token() {
            app = app.layer(axum::middleware::from_fn_with_state(
                Arc::<str>::from(token),
                require_token,
            ));
        }
        let shutdown = stop.clone().cancelled_owned();
        let server = match pki {
            Some(pki) => {
                let tls = TlsListener::new(listener, pki.server_config(addr.ip())?)
                    .map_err(|source| ClusterError::Bind { addr: bind, source })?;
                tokio::spawn(async move {
                    if let Err(e) = axum::serve(tls, app).with_graceful_shutdown(shutdown).await {
                        tracing::warn!(%addr, error = %e, "simulated apiserver stopped");
                    }
                })
            }
            None => tokio::spawn(async move {
                if let Err(e) = axum::serve(listener, app)
                    .with_graceful_shutdown(shutdown)
                    .await
                {
                    tracing::warn!(%addr, error = %e, "simulated apiserver stopped");
                }
            }),
        };
        let clock = self.opts.clock_tick.map(|tick| sim.spawn_clock(tick));
        Ok(Replica {
            index,
            sim,
            addr,
            stop,
            server,
            clock,
        })
    }

    /// Stops replica `index`: it stops listening, its open requests finish and its watches end; the Endpoints and
    /// EndpointSlices lose it (open watches on the other replicas see MODIFIED) and the load is split again.
    pub async fn remove_replica(&self, index: usize) -> Result<(), ClusterError> {
        let replica = {
            let mut s = self.serving();
            let pos = s
                .replicas
                .iter()
                .position(|r| r.index == index)
                .ok_or(ClusterError::NoSuchReplica(index))?;
            s.replicas.remove(pos)
        };
        self.membership_changed();
        let addr = replica.addr;
        if !replica.shut_down().await {
            tracing::warn!(
                replica = index,
                "simulated apiserver still had open requests; left to finish"
            );
        }
        tracing::info!(replica = index, %addr, "simulated apiserver stopped");
        Ok(())
    }

    /// Scales the scenario's load from now on: 0 stops every flow, 1 (the default) is the scenario as written. A
    /// test turns an overload on and off with it, so alerts begin and end when it says.
    pub fn set_load(&self, load: f64) {
        self.serving().load = load;
        self.membership_changed();
    }

    /// After a replica came or went: the `kubernetes` endpoints name those serving, and they split the load.
    fn membership_changed(&self) {
        let s = self.serving();
        for (r, share) in s.replicas.iter().zip(load_shares(s.replicas.len())) {
            r.sim.set_load_share(share * s.load);
        }
        let addrs: Vec<SocketAddr> = s.replicas.iter().map(|r| r.addr).collect();
        drop(s);
        objects::write_endpoints(&self.store, &addrs);
    }

    /// Stops every replica and waits (a few seconds at most) for their open requests.
    pub async fn stop(self) {
        let replicas: Vec<Replica> = std::mem::take(&mut self.serving().replicas);
        for r in replicas {
            r.shut_down().await;
        }
    }

    fn scheme(&self) -> &'static str {
        if self.pki.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// The index and address of every serving replica, in index order.
    pub fn replicas(&self) -> Vec<(usize, SocketAddr)> {
        self.serving()
            .replicas
            .iter()
            .map(|r| (r.index, r.addr))
            .collect()
    }

    /// `http://127.0.0.2:PORT` (or https) of every serving replica, in index order.
    pub fn replica_urls(&self) -> Vec<String> {
        self.replicas()
            .iter()
            .map(|(_, a)| format!("{}://{a}", self.scheme()))
            .collect()
    }

    /// The simulator of every serving replica, in index order.
    #[cfg(test)]
    fn simulators(&self) -> Vec<Simulator> {
        self.serving()
            .replicas
            .iter()
            .map(|r| r.sim.clone())
            .collect()
    }

    /// The CA certificate (PEM) that signed the replicas' certificates; `None` without TLS.
    pub fn ca_pem(&self) -> Option<String> {
        self.pki.as_ref().map(Pki::ca_pem)
    }

    /// The bearer token the replicas require, if any.
    pub fn token(&self) -> Option<&str> {
        self.opts.token.as_deref()
    }

    /// A kubeconfig for this cluster: server = the first serving replica, the CA (with TLS), the token as the
    /// user's credentials (when required), context `apf-monitor-sim` with namespace `default`.
    pub fn kubeconfig_yaml(&self) -> String {
        let server = self.replica_urls().into_iter().next().unwrap_or_default();
        let mut cluster = json!({"server": server});
        if let (Some(ca), Some(obj)) = (self.ca_pem(), cluster.as_object_mut()) {
            obj.insert(
                "certificate-authority-data".into(),
                json!(base64::engine::general_purpose::STANDARD.encode(ca)),
            );
        }
        let user = match self.token() {
            Some(t) => json!({"token": t}),
            None => json!({}),
        };
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": KUBECONFIG_CONTEXT, "cluster": cluster}],
            "users": [{"name": KUBECONFIG_CONTEXT, "user": user}],
            "contexts": [{"name": KUBECONFIG_CONTEXT, "context": {
                "cluster": KUBECONFIG_CONTEXT, "user": KUBECONFIG_CONTEXT, "namespace": "default"}}],
            "current-context": KUBECONFIG_CONTEXT,
            "preferences": {},
        });
        serde_saphyr::to_string(&config).unwrap_or_default()
    }

    /// Writes [`Cluster::kubeconfig_yaml`] to `path`, readable by its owner only (it may hold the token).
    pub fn kubeconfig(&self, path: &Path) -> Result<(), ClusterError> {
        write_private(path, &self.kubeconfig_yaml())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for r in &mut self.serving().replicas {
            r.signal_stop();
        }
    }
}

/// Writes `text` to `path` with mode 0600 on Unix: kubeconfigs and tokens are credentials.
pub fn write_private(path: &Path, text: &str) -> Result<(), ClusterError> {
    let err = |source| ClusterError::Write {
        path: path.to_path_buf(),
        source,
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path).map_err(err)?;
    std::io::Write::write_all(&mut file, text.as_bytes()).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::ScenarioSource;

    fn opts(replicas: usize, first: [u8; 4]) -> ClusterOptions {
        let scenario = Scenario::load(&ScenarioSource::Storm).unwrap();
        ClusterOptions {
            replicas,
            first_address: IpAddr::V4(Ipv4Addr::from(first)),
            clock_tick: None,
            ..ClusterOptions::new(KubeVersion::new(34, 0), scenario)
        }
    }

    async fn get_json(url: &str) -> serde_json::Value {
        let text = reqwest::get(url).await.unwrap().text().await.unwrap();
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn shares_favour_the_first_replica_and_sum_to_one() {
        assert_eq!(load_shares(1), vec![1.0]);
        let three = load_shares(3);
        assert!((three[0] - 0.5).abs() < 1e-9 && (three[2] - 1.0 / 6.0).abs() < 1e-9);
        for n in 1..8 {
            assert!((load_shares(n).iter().sum::<f64>() - 1.0).abs() < 1e-9);
        }
    }

    #[test]
    fn addresses_count_up_from_the_first() {
        let first: IpAddr = "127.0.0.2".parse().unwrap();
        assert_eq!(nth_address(first, 0).unwrap(), first);
        assert_eq!(nth_address(first, 254).unwrap().to_string(), "127.0.1.0");
        assert!(nth_address("0.0.0.0".parse().unwrap(), 1).is_err());
        assert!(nth_address("255.255.255.255".parse().unwrap(), 1).is_err());
        assert_eq!(
            nth_address("::1".parse().unwrap(), 1).unwrap().to_string(),
            "::2"
        );
        assert_eq!(
            advertised("0.0.0.0:80".parse().unwrap()).to_string(),
            "127.0.0.1:80"
        );
    }

    #[tokio::test]
    async fn replicas_listen_on_their_addresses_and_share_one_store() {
        let c = Cluster::start(opts(3, [127, 0, 3, 2])).await.unwrap();
        let urls = c.replica_urls();
        assert_eq!(urls.len(), 3);
        assert!(urls[1].starts_with("http://127.0.3.3:"), "{urls:?}");
        let shares: Vec<f64> = c.simulators().iter().map(Simulator::load_share).collect();
        assert_eq!(shares, load_shares(3));
        for url in &urls {
            let slice = get_json(&format!(
                "{url}/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
            ))
            .await;
            // Each on its own port: one slice per port, listed by name.
            let mut addresses: Vec<&str> = slice["items"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|s| s["endpoints"].as_array().unwrap())
                .filter_map(|e| e["addresses"][0].as_str())
                .collect();
            addresses.sort();
            assert_eq!(addresses, ["127.0.3.2", "127.0.3.3", "127.0.3.4"]);
        }
        // A watch open on the replica that goes ends with it, as a real apiserver's does.
        let mut watch = reqwest::get(format!(
            "{}/api/v1/namespaces/default/endpoints?watch=1",
            urls[1]
        ))
        .await
        .unwrap();
        c.remove_replica(1).await.unwrap();
        let ended = tokio::time::timeout(Duration::from_secs(10), async {
            while let Ok(Some(_)) = watch.chunk().await {}
        })
        .await;
        assert!(ended.is_ok(), "the watch outlived its replica");
        assert!(reqwest::get(format!("{}/healthz", urls[1])).await.is_err());
        assert_eq!(c.simulators()[0].load_share(), load_shares(2)[0]);
        let eps = get_json(&format!(
            "{}/api/v1/namespaces/default/endpoints/kubernetes",
            urls[2]
        ))
        .await;
        let mut ips: Vec<&str> = eps["subsets"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["addresses"].as_array().unwrap())
            .filter_map(|a| a["ip"].as_str())
            .collect();
        ips.sort();
        assert_eq!(ips, ["127.0.3.2", "127.0.3.4"]);
        assert!(matches!(
            c.remove_replica(1).await,
            Err(ClusterError::NoSuchReplica(1))
        ));
        let i = c.add_replica().await.unwrap();
        assert_eq!(i, 3);
        assert!(c.replica_urls()[2].starts_with("http://127.0.3.5:"));
        c.stop().await;
    }

    #[tokio::test]
    async fn the_kubeconfig_names_the_first_replica_the_ca_and_the_token() {
        let c = Cluster::start(ClusterOptions {
            tls: true,
            token: Some("t0ken".into()),
            ..opts(1, [127, 0, 4, 2])
        })
        .await
        .unwrap();
        let yaml: serde_json::Value = serde_saphyr::from_str(&c.kubeconfig_yaml()).unwrap();
        assert_eq!(yaml["current-context"], KUBECONFIG_CONTEXT);
        let server = yaml["clusters"][0]["cluster"]["server"].as_str().unwrap();
        assert_eq!(server, c.replica_urls()[0]);
        assert!(server.starts_with("https://127.0.4.2:"));
        let ca = yaml["clusters"][0]["cluster"]["certificate-authority-data"]
            .as_str()
            .unwrap();
        let pem = base64::engine::general_purpose::STANDARD
            .decode(ca)
            .unwrap();
        assert_eq!(String::from_utf8(pem).unwrap(), c.ca_pem().unwrap());
        assert_eq!(yaml["users"][0]["user"]["token"], "t0ken");
        assert_eq!(yaml["contexts"][0]["context"]["namespace"], "default");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        c.kubeconfig(&path).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // Without the token: 401; with it: the API.
        let client = reqwest::Client::builder()
            .add_root_certificate(
                reqwest::Certificate::from_pem(c.ca_pem().unwrap().as_bytes()).unwrap(),
            )
            .build()
            .unwrap();
        let url = &c.replica_urls()[0];
        let r = client.get(format!("{url}/api")).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 401);
        let r = client
            .get(format!("{url}/api"))
            .bearer_auth("t0ken")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let r = client.get(format!("{url}/version")).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200);
    }

    #[tokio::test]
    async fn no_replicas_is_an_error() {
        assert!(matches!(
            Cluster::start(opts(0, [127, 0, 5, 2])).await,
            Err(ClusterError::NoReplicas)
        ));
    }
}
