//! apf-monitor: watches Kubernetes API Priority and Fairness on every kube-apiserver replica.
//!
//! The daemon and its command line. What APF is, and reading what kube-apiserver exposes about it (the parsers,
//! the metric-name generations, the seat arithmetic, matching, plan, the configuration review), is the `apf` crate;
//! the simulated apiserver is the `apf-sim` crate.
//!
//! Data flows one way: targets -> scrape -> (`apf`: parse -> model) -> analyze -> (export | alert -> notify), one
//! module per stage, each owning its section of the config file in its `settings.rs`; `config` holds the file's
//! shape and `values` the types its keys are written in; `daemon` owns the tasks and the channels between them (its
//! module doc draws them); `cli` is one file per subcommand.
pub mod alert;
pub mod analyze;
pub mod audit;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod errors;
pub mod export;
#[doc(hidden)]
pub mod fuzzing;
pub mod notify;
pub mod scrape;
pub mod targets;
pub mod values;

/// The `User-Agent` every HTTP client of ours sends (scrapes, Prometheus queries, receivers): the apiserver's audit
/// log and a receiver's access log name us.
pub const USER_AGENT: &str = concat!("apf-monitor/", env!("CARGO_PKG_VERSION"));
