//! kube-apiserver's audit events, the source of "who got the 429s": `read.rs` reads log files and webhook
//! batches. Classifying and counting the requests is the domain's ([`apf::audit`]).
pub mod read;
