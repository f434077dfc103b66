//! The simulated kube-apiserver behind `apf-monitor simulate` and `demo`.
//!
//! It models API Priority and Fairness (APF) of a chosen Kubernetes version (1.20..=1.36): the default
//! PriorityLevelConfigurations and FlowSchemas, seats, shuffle-sharded queues, rejections and (1.26+) borrowing,
//! driven by a load scenario, and serves `/metrics`, the three debug dumps, `/version` and the flowcontrol API
//! objects exactly as that version spells them.
//!
//! Simulated time only advances through [`Simulator::step`] (tests) or [`Simulator::spawn_clock`] (serving), so a
//! run is deterministic for a seed.

mod apf;
mod objects;
mod render;
mod scenario;
mod server;
mod tabwriter;
mod version;

pub use apf::{LevelTruth, SimOptions, Simulator};
pub use objects::{
    default_flow_schemas, default_priority_levels, nominal_limit, served_api_versions,
    Distinguisher, FlowSchemaDef, PriorityLevelDef,
};
pub use scenario::{FlowSpec, RatePoint, Scenario, ScenarioSource};
pub use server::{router, serve};
pub use tabwriter::tabwrite;
pub use version::KubeVersion;

/// Everything that can go wrong when setting up a simulation.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("invalid Kubernetes version {input:?}: {reason}")]
    Version { input: String, reason: String },
    #[error("cannot read scenario file {path}: {source}")]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// serde_yaml's message carries the line and column.
    #[error("invalid scenario YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),
    #[error("invalid scenario: {0}")]
    Scenario(String),
}
