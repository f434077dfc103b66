//! Pure parsers: the Prometheus text exposition format, the APF debug dumps and kube-apiserver's audit events.
pub mod audit;
pub mod dump;
pub mod exposition;
