//! Pure parsers: the Prometheus text exposition format and the APF debug dumps.
pub mod dump;
pub mod exposition;
