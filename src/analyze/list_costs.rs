//! What a LIST costs on a replica: the inputs of kube-apiserver's work estimate, read by the remediation.
use std::collections::BTreeMap;
use std::sync::Arc;

/// The inputs of kube-apiserver's LIST work estimate, from the latest scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListCosts {
    /// The replica's minor version: how it prices a LIST (by objects, or by bytes from 1.34).
    pub minor: Option<u32>,
    /// Objects stored, by bare resource name (`pods`).
    pub objects: Arc<BTreeMap<String, f64>>,
    /// Their estimated size in bytes.
    pub bytes: Arc<BTreeMap<String, f64>>,
}

impl ListCosts {
    /// Seats one LIST of `resource` (all of it) costs here, with the objects and bytes it reads.
    pub fn list(&self, resource: &str) -> Option<(u32, Option<f64>, Option<f64>)> {
        let objects = self.objects.get(resource).copied();
        let bytes = self.bytes.get(resource).copied();
        let seats = apf::limits::list_seats(self.minor?, objects, bytes)?;
        Some((seats, objects, bytes))
    }
}
