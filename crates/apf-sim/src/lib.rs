//! The simulated kube-apiserver behind `apf-monitor simulate` and `demo`.
//!
//! It models API Priority and Fairness (APF) of a chosen Kubernetes version (1.20..=1.36): the default
//! PriorityLevelConfigurations and FlowSchemas, seats, shuffle-sharded queues, rejections and (1.26+) borrowing,
//! driven by a load scenario, and serves `/metrics`, the three debug dumps, `/version` and the flowcontrol API
//! objects exactly as that version spells them.
//!
//! Simulated time only advances through [`Simulator::step`] (tests), [`Simulator::spawn_clock`] (serving) or [`run`]
//! (virtual time), so a run is deterministic for a seed (dump times also need [`Simulator::set_wall_start`]).
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use apf_sim::{KubeVersion, Scenario, ScenarioSource, SimOptions, Simulator};
//! let version: KubeVersion = "1.33".parse()?;
//! let scenario = Scenario::load(&"ramp".parse::<ScenarioSource>()?)?;
//! let sim = Simulator::try_new(SimOptions::new(version, scenario))?;
//! let _clock = sim.spawn_clock(std::time::Duration::from_millis(100));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:6443").await?;
//! apf_sim::serve(listener, sim).await?;
//! # Ok(()) }
//! ```
//!
//! Endpoints ([`serve`]): `/metrics`, `/debug/api_priority_and_fairness/dump_priority_levels`, `.../dump_queues`,
//! `.../dump_requests[?includeRequestDetails=1]`, `/version`, `/healthz`, the OpenAPI documents (`/openapi/v3`,
//! `/openapi/v2`), and the Kubernetes API: discovery (`/api`, `/apis`, ...), list, get and watch of
//! `/apis/flowcontrol.apiserver.k8s.io/{v1|v1beta3|...}/{flowschemas|prioritylevelconfigurations}` (only the API
//! versions the simulated release serves; others 404 with a JSON Status) and the namespaces, and their writes:
//! FlowSchemas and PriorityLevelConfigurations created, changed or deleted through the API take effect in the
//! simulation, as kube-apiserver's APF controller puts them in force.
//!
//! [`Cluster`] runs several replicas that a real client can talk to: each its own simulator on its own loopback
//! address, one shared API with the `kubernetes` Endpoints and EndpointSlices naming the replicas, Leases for
//! leader election, optional TLS and bearer token, and a kubeconfig:
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use apf_sim::{Cluster, ClusterOptions, KubeVersion, Scenario, ScenarioSource};
//! let scenario = Scenario::load(&ScenarioSource::Ramp)?;
//! let cluster = Cluster::start(ClusterOptions {
//!     replicas: 3,
//!     tls: true,
//!     ..ClusterOptions::new("1.33".parse::<KubeVersion>()?, scenario)
//! })
//! .await?;
//! cluster.kubeconfig(std::path::Path::new("apf-monitor-sim.kubeconfig"))?;
//! println!("{:?}", cluster.replica_urls()); // https://127.0.0.2:PORT, https://127.0.0.3:PORT, ...
//! # Ok(()) }
//! ```
//!
//! A level is kube-apiserver's queueset (fair queuing by virtual finish time, shuffle sharding of the flow's hash,
//! queue-full only with every seat in use, the wait limit, additional latency); time moves from event to event; flows
//! are open-loop rates or closed-loop client threads behind client-go's token bucket. [`run`] runs a scenario in
//! virtual time and reports what each flow got (`apf-monitor simulate --run`); [`replay`] runs a load observed on a
//! replica through a configuration, to predict what a change does (`apf-monitor plan --load`). Simplifications, each invisible to a
//! scraper: priority levels are printed in definition order where a real server uses random map order (before
//! 1.27); queued requests wait the level's limit (15 s: no client deadlines, so no `cancelled`); a request's seats
//! are the scenario's (no work estimator for LISTs); before 1.23 a flow of width N sends N times the requests of
//! width 1.

mod admission;
mod api;
mod audit;
mod auth;
mod cluster;
mod controller;
mod discovery;
mod objects;
mod openapi;
mod ownership;
mod render;
mod replay;
mod reviews;
mod run;
mod scenario;
mod selector;
mod server;
mod simulator;
mod status;
mod store;
mod table;
mod tabwriter;
mod tls;
mod writes;

pub use apf::KubeVersion;
pub use audit::{AuditLogOptions, AuditOptions, AuditWebhookOptions};
pub use cluster::{
    generate_token, load_shares, write_private, Cluster, ClusterError, ClusterOptions,
};
pub use objects::default_configuration;
pub use render::protobuf;
pub use replay::{
    replay, replay_change, FlowOutcome, LevelOutcome, Objects, ObservedFlow, Replay, ReplayRun,
};
pub use reviews::{Grant, SimUser};
pub use run::{run, FlowRun, LevelRun, RunReport};
pub use scenario::{
    Arrivals, Dispatch, FlowSpec, LevelSpec, RatePoint, Scenario, ScenarioSource, SimError,
};
pub use server::serve;
pub use simulator::{LevelTruth, SimOptions, Simulator};
pub use tabwriter::tabwrite;
pub use tls::TlsError;
