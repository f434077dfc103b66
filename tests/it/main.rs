//! The integration tests: one binary (one link) for every surface. Each module tests one surface through the entry
//! point production runs: the binary, the daemon, the receivers, against real servers on loopback.
mod common;

mod alert_paused_time;
mod alerts_e2e;
mod api_auth;
mod audit_cli;
mod audit_daemon;
mod check_cli;
mod daemon_lifecycle;
mod dashboards;
mod demo_cli;
mod deploy;
mod discovery;
mod exposition_formats;
mod fuzz_corpus;
mod lead_time;
mod leader_gate;
mod match_cli;
mod notify_email;
mod notify_http;
mod objects_follow;
mod plan_cli;
mod polite_scrape;
mod prometheus_scrape;
mod prometheus_source;
mod report_cli;
mod review_cli;
mod serve_resilience;
mod serve_sim;
mod silences_api;
mod sim_cluster;
mod sim_versions;
mod spike_signals;
mod status_page;
mod tls;
mod workspace;
