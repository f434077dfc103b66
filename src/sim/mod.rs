//! The simulated kube-apiserver.
