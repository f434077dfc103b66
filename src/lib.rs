//! apf-monitor: watches Kubernetes API Priority and Fairness on every kube-apiserver replica.
//!
//! Data flows one way: targets -> scrape -> parse -> model -> analyze -> export.
pub mod config;
pub mod model;
pub mod parse;
pub mod scrape;
pub mod sim;
pub mod targets;
pub mod analyze;
pub mod export;
pub mod daemon;
pub mod cli;
