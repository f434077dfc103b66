//! apf-monitor: watches Kubernetes API Priority and Fairness on every kube-apiserver replica.
//!
//! Data flows one way: targets -> scrape -> parse -> model -> analyze -> (export | alert -> notify), one module per
//! stage; `daemon` owns the tasks and the channels between them (its module doc draws them). `apf` holds what API
//! Priority and Fairness itself is (its arithmetic, defaults and endpoints), which the others share.
pub mod alert;
pub mod analyze;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod export;
pub mod notify;
pub mod scrape;
pub mod targets;
pub mod values;
