//! TEMPORARY STUB (replaced by the real parser on merge).
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("not a dump: {first_line}")]
    NotADump { first_line: String },
    #[error("missing column {column}")]
    MissingColumn { column: &'static str },
}
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DumpStats {
    pub rows: u64,
    pub skipped_lines: u64,
    pub invalid_rows: u64,
    pub merged_rows: u64,
}
pub struct Dump<T> {
    pub rows: Vec<T>,
    pub stats: DumpStats,
}
#[derive(Debug, Clone, PartialEq)]
pub struct PriorityLevelRow {
    pub priority_level: String,
    pub active_queues: Option<u64>,
    pub is_idle: Option<bool>,
    pub is_quiescing: Option<bool>,
    pub waiting_requests: Option<u64>,
    pub executing_requests: Option<u64>,
    pub dispatched_requests: Option<u64>,
    pub rejected_requests: Option<u64>,
    pub timedout_requests: Option<u64>,
    pub cancelled_requests: Option<u64>,
}
#[derive(Debug, Clone, PartialEq)]
pub struct QueueRow {
    pub priority_level: String,
    pub index: Option<i64>,
    pub pending_requests: Option<u64>,
    pub executing_requests: Option<u64>,
    pub seats_in_use: Option<u64>,
    pub next_dispatch_r: Option<f64>,
    pub virtual_start: Option<f64>,
    pub initial_seats_sum: Option<u64>,
    pub max_seats_sum: Option<u64>,
    pub total_work_sum: Option<f64>,
}
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRow {
    pub priority_level: String,
    pub flow_schema: Option<String>,
    pub queue_index: Option<i64>,
    pub request_index_in_queue: Option<i64>,
    pub flow_distinguisher: Option<String>,
    pub arrive_time: Option<String>,
    pub initial_seats: Option<u64>,
    pub final_seats: Option<u64>,
    pub additional_latency: Option<String>,
    pub start_time: Option<String>,
    pub user_name: Option<String>,
    pub verb: Option<String>,
    pub api_path: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub api_version: Option<String>,
    pub resource: Option<String>,
    pub subresource: Option<String>,
}
impl RequestRow {
    pub fn is_executing(&self) -> bool {
        self.request_index_in_queue == Some(-1)
    }
    pub fn is_phantom(&self) -> bool {
        self.flow_schema.is_none() && self.queue_index.is_none()
    }
}
pub fn parse_priority_levels(_t: &str) -> Result<Dump<PriorityLevelRow>, DumpError> {
    Ok(Dump {
        rows: vec![],
        stats: DumpStats::default(),
    })
}
pub fn parse_queues(_t: &str) -> Result<Dump<QueueRow>, DumpError> {
    Ok(Dump {
        rows: vec![],
        stats: DumpStats::default(),
    })
}
pub fn parse_requests(_t: &str) -> Result<Dump<RequestRow>, DumpError> {
    Ok(Dump {
        rows: vec![],
        stats: DumpStats::default(),
    })
}
