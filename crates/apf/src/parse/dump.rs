//! Header-driven parser of the three APF debug dumps
//! (`/debug/api_priority_and_fairness/dump_priority_levels`, `dump_queues`, `dump_requests`).
//!
//! The apiserver joins cells with `",\t"` and pads them with Go's tabwriter. The column set changed
//! across releases (5 to 18 columns), so every column is looked up by its header name and a
//! column this release does not print is `None`. Columns we do not know (future releases) are
//! ignored. One bad row never fails the dump: it is counted in [`DumpStats::invalid_rows`].
//!
//! Rows with more cells than the header: a user name can contain a comma. The extra cells are
//! merged back into the free-text column, `UserName` when the header has it, else
//! `FlowDistingsher` (which holds the user name for by-user flow schemas). If both hold the same
//! comma-containing name the merge goes entirely into `UserName` and `FlowDistingsher` keeps its
//! first piece: a known, rare imprecision that leaves every other column correct. Dumps without
//! a free-text column (levels, queues) count such a row as invalid. A 2020 details row that
//! stops early can hide an extra cell (it still has fewer cells than the header); nothing in
//! the text tells it apart, so such a row is read as is.

mod table;

use std::borrow::Cow;

use table::{Header, Row, Table};

/// Why a body is not usable at all.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// The first line is not a dump header: e.g. an HTML page from a proxy, or `Forbidden`.
    #[error("not an APF debug dump; first line: {first_line:?}")]
    NotADump {
        /// Truncated to 80 characters.
        first_line: String,
    },
    /// The header lacks a column that every row needs.
    #[error("APF debug dump header has no {column} column")]
    MissingColumn { column: &'static str },
}

/// Counters of one dump parse.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DumpStats {
    /// Rows returned.
    pub rows: u64,
    /// Blank lines and literal `...` lines (elided rows in documentation copies).
    pub skipped_lines: u64,
    /// Rows skipped because a cell did not parse or the priority level name was empty.
    pub invalid_rows: u64,
    /// Rows whose extra cells were merged into the free-text column.
    pub merged_rows: u64,
}

/// The rows of one dump and how they were read.
#[derive(Debug, Clone, PartialEq)]
pub struct Dump<T> {
    pub rows: Vec<T>,
    pub stats: DumpStats,
}

/// One row of `dump_priority_levels`. Counters after `executing_requests` exist from 1.27;
/// `exempt` prints `<none>` (all `None`) before 1.28.
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

/// One row of `dump_queues`. `virtual_start` is the 1.19–1.22 column; `next_dispatch_r` and the
/// seat columns exist from 1.23.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueRow {
    pub priority_level: String,
    pub index: Option<i64>,
    pub pending_requests: Option<u64>,
    pub executing_requests: Option<u64>,
    pub seats_in_use: Option<u64>,
    /// Seat-seconds (`ss` suffix removed).
    pub next_dispatch_r: Option<f64>,
    pub virtual_start: Option<f64>,
    pub initial_seats_sum: Option<u64>,
    pub max_seats_sum: Option<u64>,
    /// Seat-seconds (`ss` suffix removed).
    pub total_work_sum: Option<f64>,
}

/// One row of `dump_requests` (queued requests; from 1.28 executing ones too). The columns from
/// `user_name` on are present only with `?includeRequestDetails=1`. Its text borrows from the dump: a replica read
/// every few seconds lists thousands of requests, and a string per cell was most of what a read allocated.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRow<'a> {
    pub priority_level: Cow<'a, str>,
    pub flow_schema: Option<Cow<'a, str>>,
    pub queue_index: Option<i64>,
    pub request_index_in_queue: Option<i64>,
    pub flow_distinguisher: Option<Cow<'a, str>>,
    pub arrive_time: Option<Cow<'a, str>>,
    pub initial_seats: Option<u64>,
    pub final_seats: Option<u64>,
    pub additional_latency: Option<Cow<'a, str>>,
    pub start_time: Option<Cow<'a, str>>,
    pub user_name: Option<Cow<'a, str>>,
    pub verb: Option<Cow<'a, str>>,
    pub api_path: Option<Cow<'a, str>>,
    pub namespace: Option<Cow<'a, str>>,
    pub name: Option<Cow<'a, str>>,
    pub api_version: Option<Cow<'a, str>>,
    pub resource: Option<Cow<'a, str>>,
    pub subresource: Option<Cow<'a, str>>,
}

impl RequestRow<'_> {
    /// Executing, not waiting: `RequestIndexInQueue` is -1 (rows listed from 1.28).
    pub fn is_executing(&self) -> bool {
        self.request_index_in_queue == Some(-1)
    }

    /// The 1.19 all-`<none>` row for `exempt` (kubernetes/kubernetes#93376), not a request.
    pub fn is_phantom(&self) -> bool {
        self.flow_schema.is_none() && self.queue_index.is_none()
    }
}

const PRIORITY_LEVEL_NAME: &str = "PriorityLevelName";
/// Spelled this way by the apiserver; the correct spelling is accepted too, in case it is fixed.
const FLOW_DISTINGUISHER: [&str; 2] = ["FlowDistingsher", "FlowDistinguisher"];
const USER_NAME: &str = "UserName";

/// Parses `dump_priority_levels`.
pub fn parse_priority_levels(text: &str) -> Result<Dump<PriorityLevelRow>, DumpError> {
    parse_table::<LevelColumns>(text)
}

/// Parses `dump_queues`.
pub fn parse_queues(text: &str) -> Result<Dump<QueueRow>, DumpError> {
    parse_table::<QueueColumns>(text)
}

/// Parses `dump_requests`, with or without `includeRequestDetails`.
pub fn parse_requests<'t>(text: &'t str) -> Result<Dump<RequestRow<'t>>, DumpError> {
    let mut rows = Vec::new();
    let stats = fold_requests(text, |row| rows.push(row))?;
    Ok(Dump { rows, stats })
}

/// `dump_requests` row by row, to `each` as each is read: a dump of thousands of requests is never held as rows.
pub fn fold_requests<'t>(
    text: &'t str,
    each: impl FnMut(RequestRow<'t>),
) -> Result<DumpStats, DumpError> {
    table::fold_text::<RequestColumns>(text, each)
}

/// `dump_requests` read as its body arrives, chunk by chunk, each row to `each` as its line is complete: the body
/// is never held, only a line split between two chunks. The same rows and counts as [`fold_requests`] on the whole
/// body decoded with [`String::from_utf8_lossy`].
pub struct RequestsReader {
    reader: table::ChunkReader<RequestColumns>,
}

impl Default for RequestsReader {
    fn default() -> Self {
        RequestsReader {
            reader: table::ChunkReader::new(),
        }
    }
}

impl RequestsReader {
    /// The next bytes of the body; a chunk may end anywhere, even inside a character.
    pub fn feed(&mut self, chunk: &[u8], mut each: impl FnMut(RequestRow<'_>)) {
        self.reader.feed(chunk, &mut each);
    }

    /// The last line (when the body does not end with a line feed), and how the dump was read; the first error
    /// (not a dump, a missing column) when there was one, whatever came after it.
    pub fn finish(self, mut each: impl FnMut(RequestRow<'_>)) -> Result<DumpStats, DumpError> {
        self.reader.finish(&mut each)
    }
}

/// The rows of a whole dump.
fn parse_table<T>(text: &str) -> Result<Dump<T::Row<'_>>, DumpError>
where
    T: Table,
{
    let mut rows = Vec::new();
    let stats = table::fold_text::<T>(text, |row| rows.push(row))?;
    Ok(Dump { rows, stats })
}

/// The columns of `dump_priority_levels`.
struct LevelColumns {
    name: usize,
    active: Option<usize>,
    idle: Option<usize>,
    quiescing: Option<usize>,
    waiting: Option<usize>,
    executing: Option<usize>,
    dispatched: Option<usize>,
    rejected: Option<usize>,
    timedout: Option<usize>,
    cancelled: Option<usize>,
}

impl Table for LevelColumns {
    type Row<'l> = PriorityLevelRow;

    fn columns(h: &Header) -> Result<Self, DumpError> {
        Ok(LevelColumns {
            name: h.require(PRIORITY_LEVEL_NAME)?,
            active: h.col("ActiveQueues"),
            idle: h.col("IsIdle"),
            quiescing: h.col("IsQuiescing"),
            waiting: h.col("WaitingRequests"),
            executing: h.col("ExecutingRequests"),
            dispatched: h.col("DispatchedRequests"),
            rejected: h.col("RejectedRequests"),
            timedout: h.col("TimedoutRequests"),
            cancelled: h.col("CancelledRequests"),
        })
    }

    fn row<'l>(&self, r: &Row<'l>) -> Option<PriorityLevelRow> {
        Some(PriorityLevelRow {
            priority_level: r.level(self.name)?,
            active_queues: r.num(self.active)?,
            is_idle: r.boolean(self.idle)?,
            is_quiescing: r.boolean(self.quiescing)?,
            waiting_requests: r.num(self.waiting)?,
            executing_requests: r.num(self.executing)?,
            dispatched_requests: r.num(self.dispatched)?,
            rejected_requests: r.num(self.rejected)?,
            timedout_requests: r.num(self.timedout)?,
            cancelled_requests: r.num(self.cancelled)?,
        })
    }
}

/// The columns of `dump_queues`.
struct QueueColumns {
    name: usize,
    index: Option<usize>,
    pending: Option<usize>,
    executing: Option<usize>,
    seats: Option<usize>,
    next_r: Option<usize>,
    virtual_start: Option<usize>,
    initial: Option<usize>,
    max: Option<usize>,
    work: Option<usize>,
}

impl Table for QueueColumns {
    type Row<'l> = QueueRow;

    fn columns(h: &Header) -> Result<Self, DumpError> {
        Ok(QueueColumns {
            name: h.require(PRIORITY_LEVEL_NAME)?,
            index: h.col("Index"),
            pending: h.col("PendingRequests"),
            executing: h.col("ExecutingRequests"),
            seats: h.col("SeatsInUse"),
            next_r: h.col("NextDispatchR"),
            virtual_start: h.col("VirtualStart"),
            initial: h.col("InitialSeatsSum"),
            max: h.col("MaxSeatsSum"),
            work: h.col("TotalWorkSum"),
        })
    }

    fn row<'l>(&self, r: &Row<'l>) -> Option<QueueRow> {
        Some(QueueRow {
            priority_level: r.level(self.name)?,
            index: r.num(self.index)?,
            pending_requests: r.num(self.pending)?,
            executing_requests: r.num(self.executing)?,
            seats_in_use: r.num(self.seats)?,
            next_dispatch_r: r.seat_seconds(self.next_r)?,
            virtual_start: r.seat_seconds(self.virtual_start)?,
            initial_seats_sum: r.num(self.initial)?,
            max_seats_sum: r.num(self.max)?,
            total_work_sum: r.seat_seconds(self.work)?,
        })
    }
}

/// The columns of `dump_requests`.
struct RequestColumns {
    name: usize,
    schema: Option<usize>,
    queue: Option<usize>,
    in_queue: Option<usize>,
    distinguisher: Option<usize>,
    arrive: Option<usize>,
    initial: Option<usize>,
    fin: Option<usize>,
    latency: Option<usize>,
    start: Option<usize>,
    user: Option<usize>,
    verb: Option<usize>,
    path: Option<usize>,
    namespace: Option<usize>,
    obj: Option<usize>,
    version: Option<usize>,
    resource: Option<usize>,
    sub: Option<usize>,
}

impl Table for RequestColumns {
    type Row<'l> = RequestRow<'l>;

    fn columns(h: &Header) -> Result<Self, DumpError> {
        Ok(RequestColumns {
            name: h.require(PRIORITY_LEVEL_NAME)?,
            schema: h.col("FlowSchemaName"),
            queue: h.col("QueueIndex"),
            in_queue: h.col("RequestIndexInQueue"),
            distinguisher: h.col_any(&FLOW_DISTINGUISHER),
            arrive: h.col("ArriveTime"),
            initial: h.col("InitialSeats"),
            fin: h.col("FinalSeats"),
            latency: h.col("AdditionalLatency"),
            start: h.col("StartTime"),
            user: h.col(USER_NAME),
            verb: h.col("Verb"),
            path: h.col("APIPath"),
            namespace: h.col("Namespace"),
            obj: h.col("Name"),
            version: h.col("APIVersion"),
            resource: h.col("Resource"),
            sub: h.col("SubResource"),
        })
    }

    fn free_text(h: &Header) -> Option<usize> {
        h.col(USER_NAME).or_else(|| h.col_any(&FLOW_DISTINGUISHER))
    }

    fn row<'l>(&self, r: &Row<'l>) -> Option<RequestRow<'l>> {
        Some(RequestRow {
            priority_level: r.borrowed(Some(self.name))?,
            flow_schema: r.borrowed(self.schema),
            queue_index: r.num(self.queue)?,
            request_index_in_queue: r.num(self.in_queue)?,
            flow_distinguisher: r.borrowed(self.distinguisher),
            arrive_time: r.borrowed(self.arrive),
            initial_seats: r.num(self.initial)?,
            final_seats: r.num(self.fin)?,
            additional_latency: r.borrowed(self.latency),
            start_time: r.borrowed(self.start),
            user_name: r.borrowed(self.user),
            verb: r.borrowed(self.verb),
            api_path: r.borrowed(self.path),
            namespace: r.borrowed(self.namespace),
            name: r.borrowed(self.obj),
            api_version: r.borrowed(self.version),
            resource: r.borrowed(self.resource),
            subresource: r.borrowed(self.sub),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = format!("{}/../../tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn ok<T>(r: Result<Dump<T>, DumpError>) -> Dump<T> {
        r.unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn levels_2020_six_columns_trailing_comma_and_none_exempt() {
        let d = ok(parse_priority_levels(&fixture(
            "k8swebsite-2020-dump_priority_levels.txt",
        )));
        assert_eq!(d.rows.len(), 7);
        assert_eq!(
            d.stats,
            DumpStats {
                rows: 7,
                ..DumpStats::default()
            }
        );
        let low = &d.rows[0];
        assert_eq!(low.priority_level, "workload-low");
        assert_eq!(low.active_queues, Some(0));
        assert_eq!(low.is_idle, Some(true));
        assert_eq!(low.is_quiescing, Some(false));
        assert_eq!(low.executing_requests, Some(0));
        assert_eq!(low.dispatched_requests, None, "no such column before 1.27");
        let exempt = d.rows.iter().find(|r| r.priority_level == "exempt");
        assert_eq!(
            exempt,
            Some(&PriorityLevelRow {
                priority_level: "exempt".into(),
                active_queues: None,
                is_idle: None,
                is_quiescing: None,
                waiting_requests: None,
                executing_requests: None,
                dispatched_requests: None,
                rejected_requests: None,
                timedout_requests: None,
                cancelled_requests: None,
            })
        );
    }

    #[test]
    fn levels_2023_ten_columns() {
        let d = ok(parse_priority_levels(&fixture(
            "k8swebsite-2023-dump_priority_levels.txt",
        )));
        assert_eq!(d.stats.rows, 8);
        let wh = d.rows.iter().find(|r| r.priority_level == "workload-high");
        assert_eq!(wh.and_then(|r| r.dispatched_requests), Some(500));
        let exempt = d.rows.iter().find(|r| r.priority_level == "exempt");
        assert_eq!(exempt.and_then(|r| r.executing_requests), Some(0));
        let gd = d.rows.iter().find(|r| r.priority_level == "global-default");
        assert_eq!(gd.and_then(|r| r.dispatched_requests), Some(46));
        assert_eq!(gd.and_then(|r| r.cancelled_requests), Some(0));
        assert_eq!(gd.and_then(|r| r.timedout_requests), Some(0));
    }

    #[test]
    fn queues_2020_virtual_start_and_ellipsis() {
        let d = ok(parse_queues(&fixture("k8swebsite-2020-dump_queues.txt")));
        assert_eq!(d.stats.rows, 5);
        assert_eq!(d.stats.skipped_lines, 1);
        let last = &d.rows[4];
        assert_eq!(last.priority_level, "leader-election");
        assert_eq!(last.index, Some(15));
        assert_eq!(last.virtual_start, Some(0.0));
        assert_eq!(last.next_dispatch_r, None);
        assert_eq!(last.seats_in_use, None);
    }

    #[test]
    fn queues_2023_seat_seconds() {
        let d = ok(parse_queues(&fixture("k8swebsite-2023-dump_queues.txt")));
        assert_eq!(d.stats.rows, 6);
        assert_eq!(d.stats.skipped_lines, 2);
        let q14 = &d.rows[0];
        assert_eq!(q14.priority_level, "workload-low");
        assert_eq!(q14.index, Some(14));
        assert_eq!(q14.pending_requests, Some(27));
        assert_eq!(q14.next_dispatch_r, Some(77.64342019));
        assert_eq!(q14.initial_seats_sum, Some(270));
        assert_eq!(q14.max_seats_sum, Some(270));
        assert_eq!(q14.total_work_sum, Some(0.81));
        assert_eq!(q14.virtual_start, None);
        let le0 = &d.rows[2];
        assert_eq!(
            (le0.priority_level.as_str(), le0.next_dispatch_r),
            ("leader-election", Some(5088.87053833))
        );
    }

    #[test]
    fn requests_2020_and_phantom() {
        let text = fixture("k8swebsite-2020-dump_requests.txt");
        let d = ok(parse_requests(&text));
        assert_eq!(d.rows.len(), 2);
        assert!(d.rows[0].is_phantom());
        assert_eq!(d.rows[0].priority_level, "exempt");
        let r = &d.rows[1];
        assert!(!r.is_phantom() && !r.is_executing());
        assert_eq!(r.flow_schema.as_deref(), Some("system-nodes"));
        assert_eq!(r.queue_index, Some(12));
        assert_eq!(r.request_index_in_queue, Some(0));
        assert_eq!(
            r.flow_distinguisher.as_deref(),
            Some("system:node:127.0.0.1")
        );
        assert_eq!(
            r.arrive_time.as_deref(),
            Some("2020-07-23T15:26:57.179170694Z")
        );
        assert_eq!(r.initial_seats, None);

        let text = fixture("k8s-issue-93376-dump_requests-phantom.txt");
        let d = ok(parse_requests(&text));
        assert_eq!(d.rows.len(), 1);
        assert!(d.rows[0].is_phantom());
        assert_eq!(d.rows[0].user_name, None);
    }

    #[test]
    fn requests_2020_details_rows_stop_early() {
        let text = fixture("k8swebsite-2020-dump_requests-includeRequestDetails.txt");
        let d = ok(parse_requests(&text));
        assert_eq!(d.stats.rows, 2);
        assert_eq!(d.stats.invalid_rows, 0);
        assert_eq!(d.stats.merged_rows, 0);
        for r in &d.rows {
            assert_eq!(r.user_name.as_deref(), Some("system:node:127.0.0.1"));
            assert_eq!(r.verb.as_deref(), Some("create"));
            assert_eq!(
                r.api_path.as_deref(),
                Some("/api/v1/namespaces/scaletest/configmaps")
            );
            assert_eq!(r.namespace, None);
            assert_eq!(r.name, None);
            assert_eq!(r.api_version, None);
            assert_eq!(r.resource, None);
            assert_eq!(r.subresource, None);
        }
        assert_eq!(d.rows[1].request_index_in_queue, Some(1));
    }

    #[test]
    fn requests_2023_ten_and_eighteen_columns() {
        let text = fixture("k8swebsite-2023-dump_requests.txt");
        let d = ok(parse_requests(&text));
        assert_eq!(d.stats.rows, 3);
        let exempt = &d.rows[0];
        assert_eq!(exempt.queue_index, Some(-1));
        assert!(exempt.is_executing());
        assert!(!exempt.is_phantom());
        assert_eq!(exempt.flow_distinguisher, None);
        assert_eq!(
            exempt.start_time.as_deref(),
            Some("2023-07-15T04:51:25.596404345Z")
        );
        let low = &d.rows[1];
        assert_eq!(low.initial_seats, Some(10));
        assert_eq!(low.final_seats, Some(0));
        assert_eq!(low.additional_latency.as_deref(), Some("0s"));
        assert_eq!(low.start_time.as_deref(), Some("0001-01-01T00:00:00Z"));
        assert_eq!(low.user_name, None);

        let text = fixture("k8swebsite-2023-dump_requests-includeRequestDetails.txt");
        let d = ok(parse_requests(&text));
        assert_eq!(d.stats.rows, 3);
        let r = &d.rows[1];
        assert_eq!(
            r.user_name.as_deref(),
            Some("system:serviceaccount:default:loadtest")
        );
        assert_eq!(r.verb.as_deref(), Some("list"));
        assert_eq!(r.namespace.as_deref(), Some("kube-stress"));
        assert_eq!(r.name, None);
        assert_eq!(r.api_version.as_deref(), Some("v1"));
        assert_eq!(r.resource.as_deref(), Some("configmaps"));
        assert_eq!(r.subresource, None);
        assert_eq!(
            d.rows[0].user_name.as_deref(),
            Some("system:serviceaccount:system:admin")
        );
    }

    const DETAILS_HEADER: &str = "PriorityLevelName, FlowSchemaName, QueueIndex, RequestIndexInQueue, FlowDistingsher, ArriveTime, InitialSeats, FinalSeats, AdditionalLatency, StartTime, UserName, Verb, APIPath, Namespace, Name, APIVersion, Resource, SubResource\n";

    #[test]
    fn comma_in_user_name_is_merged_into_user_name() {
        let text = format!(
            "{DETAILS_HEADER}workload-low, service-accounts, 3, 0, , 2026-03-02T10:15:04Z, 1, 0, 0s, 0001-01-01T00:00:00Z, CN=alice, O=dev,  get,  /api/v1/pods, ns1, , v1, pods, \n"
        );
        let d = ok(parse_requests(&text));
        assert_eq!(d.stats.merged_rows, 1);
        assert_eq!(d.stats.rows, 1);
        let r = &d.rows[0];
        assert_eq!(r.user_name.as_deref(), Some("CN=alice, O=dev"));
        assert_eq!(r.verb.as_deref(), Some("get"));
        assert_eq!(r.api_path.as_deref(), Some("/api/v1/pods"));
        assert_eq!(r.namespace.as_deref(), Some("ns1"));
        assert_eq!(r.resource.as_deref(), Some("pods"));

        // Without details, the distinguisher (the user name for by-user schemas) gets the merge.
        let text = "PriorityLevelName, FlowSchemaName, QueueIndex, RequestIndexInQueue, FlowDistingsher, ArriveTime\nworkload-low, service-accounts, 3, 0, a,b,c, 2026-03-02T10:15:04Z\n";
        let d = ok(parse_requests(text));
        assert_eq!(d.stats.merged_rows, 1);
        assert_eq!(d.rows[0].flow_distinguisher.as_deref(), Some("a,b,c"));
        assert_eq!(
            d.rows[0].arrive_time.as_deref(),
            Some("2026-03-02T10:15:04Z")
        );

        // 2020 layout: every line ends with `,`, which is not an extra cell.
        let text = "PriorityLevelName, FlowSchemaName, QueueIndex, RequestIndexInQueue, FlowDistingsher, ArriveTime,\nsystem, system-nodes, 12, 0, a,b, 2020-07-23T15:26:57Z,\n";
        let d = ok(parse_requests(text));
        assert_eq!(d.stats.merged_rows, 1);
        assert_eq!(d.rows[0].flow_distinguisher.as_deref(), Some("a,b"));
        assert_eq!(
            d.rows[0].arrive_time.as_deref(),
            Some("2020-07-23T15:26:57Z")
        );

        // Levels have no free-text column: an over-long row is invalid, not misread.
        let d = ok(parse_priority_levels(
            "PriorityLevelName, ActiveQueues\nx, 1, 2\ny, 3\n",
        ));
        assert_eq!((d.stats.rows, d.stats.invalid_rows), (1, 1));
    }

    #[test]
    fn crlf_trailing_spaces_and_unknown_columns() {
        let text = "PriorityLevelName, Index,  PendingRequests, FutureColumn, NextDispatchR   \r\nworkload-low,      1,      14,              zzz,          3124.99112057ss   \r\n\r\n";
        let d = ok(parse_queues(text));
        assert_eq!(d.stats.rows, 1);
        assert_eq!(d.stats.skipped_lines, 1);
        let q = &d.rows[0];
        assert_eq!(q.pending_requests, Some(14));
        assert_eq!(q.next_dispatch_r, Some(3124.99112057));
        assert_eq!(q.total_work_sum, None);
    }

    #[test]
    fn blank_body_is_empty_and_non_dumps_are_errors() {
        for blank in ["", "\n", "  \r\n\n"] {
            let d = ok(parse_requests(blank));
            assert!(d.rows.is_empty());
        }
        for body in [
            "Forbidden",
            "Forbidden\n",
            "<html><head><title>502 Bad Gateway</title></head>\n<body></body></html>\n",
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"code\":403}",
            "404 page not found\n",
        ] {
            match parse_queues(body) {
                Err(DumpError::NotADump { first_line }) => {
                    assert!(first_line.len() <= 80);
                    assert!(!first_line.contains('\n'));
                }
                other => panic!("{body:?}: {:?}", other.map(|d| d.rows)),
            }
        }
        let long = "x".repeat(500);
        match parse_queues(&long) {
            Err(DumpError::NotADump { first_line }) => assert_eq!(first_line.len(), 80),
            other => panic!("{:?}", other.map(|d| d.rows)),
        }
        match parse_priority_levels("Index, PendingRequests\n0, 1\n") {
            Err(
                e @ DumpError::MissingColumn {
                    column: "PriorityLevelName",
                },
            ) => {
                assert!(e.to_string().contains("PriorityLevelName"))
            }
            other => panic!("{:?}", other.map(|d| d.rows)),
        }
    }

    #[test]
    fn header_only_is_an_empty_dump() {
        // 1.28+ dump_queues when no level has queues, or dump_requests when nothing waits.
        let d = ok(parse_requests(
            "PriorityLevelName, FlowSchemaName, QueueIndex, RequestIndexInQueue, FlowDistingsher, ArriveTime, InitialSeats, FinalSeats, AdditionalLatency, StartTime\n",
        ));
        assert!(d.rows.is_empty());
        assert_eq!(d.stats, DumpStats::default());
    }

    #[test]
    fn bad_rows_are_counted_not_fatal() {
        let text = "PriorityLevelName, ActiveQueues, IsIdle, IsQuiescing, WaitingRequests, ExecutingRequests\n\
                    a, 1, false, false, 2, 3\n\
                    b, many, false, false, 2, 3\n\
                    c, 1, maybe, false, 2, 3\n\
                    , 1, false, false, 2, 3\n\
                    d, -1, false, false, 2, 3\n\
                    e, 0, true, false, 0, 0\n";
        let d = ok(parse_priority_levels(text));
        assert_eq!(
            d.rows
                .iter()
                .map(|r| r.priority_level.as_str())
                .collect::<Vec<_>>(),
            ["a", "e"]
        );
        assert_eq!(d.stats.invalid_rows, 4);
        let d = ok(parse_queues(
            "PriorityLevelName, Index, NextDispatchR\nx, 0, 12.5ss\nx, 1, NaNss\nx, 2, abcss\n",
        ));
        assert_eq!(d.stats.rows, 1);
        assert_eq!(d.stats.invalid_rows, 2);
    }

    #[test]
    fn exempt_none_rows_of_1_20_to_1_26() {
        let text = "PriorityLevelName, ActiveQueues, IsIdle, IsQuiescing, WaitingRequests, ExecutingRequests\n\
                    workload-low,      3,            false,  false,       41,              24\n\
                    exempt,            <none>,       <none>, <none>,      <none>,          <none>\n";
        let d = ok(parse_priority_levels(text));
        assert_eq!(d.stats.rows, 2);
        assert_eq!(d.rows[0].waiting_requests, Some(41));
        assert_eq!(d.rows[1].priority_level, "exempt");
        assert_eq!(d.rows[1].is_idle, None);
        assert_eq!(d.rows[1].executing_requests, None);
        let q = ok(parse_queues(
            "PriorityLevelName, Index, PendingRequests, ExecutingRequests, SeatsInUse, NextDispatchR, InitialSeatsSum, MaxSeatsSum, TotalWorkSum\n\
             exempt, <none>, <none>, <none>, <none>, <none>, <none>, <none>, <none>\n",
        ));
        assert_eq!(q.rows[0].index, None);
        assert_eq!(q.rows[0].next_dispatch_r, None);
    }

    #[test]
    fn phantom_row_of_1_19() {
        let text = "PriorityLevelName, FlowSchemaName, QueueIndex, RequestIndexInQueue, FlowDistingsher, ArriveTime,\n\
                    exempt,            <none>,         <none>,     <none>,              <none>,          <none>,\n";
        let d = ok(parse_requests(text));
        assert!(d.rows[0].is_phantom());
        assert!(!d.rows[0].is_executing());
    }

    #[test]
    fn executing_requests_of_1_28() {
        let text = "PriorityLevelName, FlowSchemaName,          QueueIndex, RequestIndexInQueue, FlowDistingsher,                 ArriveTime,                     InitialSeats, FinalSeats, AdditionalLatency, StartTime\n\
exempt,            exempt,                  -1,         -1,                  ,                                2026-03-02T10:15:04.118829403Z, 1,            0,          0s,                2026-03-02T10:15:04.118830011Z\n\
workload-low,      service-accounts,        1,          0,                   system:serviceaccount:ci:runner, 2026-03-02T10:15:04.001877210Z, 10,           0,          0s,                0001-01-01T00:00:00Z\n\
workload-high,     kube-controller-manager, 37,         -1,                  kube-system,                     2026-03-02T10:15:04.117001337Z, 1,            3,          12.5ms,            2026-03-02T10:15:04.117002001Z\n";
        let d = ok(parse_requests(text));
        assert_eq!(d.stats.rows, 3);
        let executing: Vec<_> = d.rows.iter().filter(|r| r.is_executing()).collect();
        assert_eq!(executing.len(), 2);
        assert_eq!(executing[1].queue_index, Some(37));
        assert_eq!(executing[1].final_seats, Some(3));
        assert_eq!(executing[1].additional_latency.as_deref(), Some("12.5ms"));
        assert_eq!(
            executing[1].start_time.as_deref(),
            Some("2026-03-02T10:15:04.117002001Z")
        );
        assert_eq!(
            d.rows[1].start_time.as_deref(),
            Some("0001-01-01T00:00:00Z")
        );
        assert!(!d.rows[1].is_executing());
        assert!(d.rows.iter().all(|r| !r.is_phantom()));
    }

    #[test]
    fn corrected_spelling_of_flow_distinguisher_is_accepted() {
        let d = ok(parse_requests(
            "PriorityLevelName, FlowSchemaName, QueueIndex, RequestIndexInQueue, FlowDistinguisher\nx, y, 1, 0, alice\n",
        ));
        assert_eq!(d.rows[0].flow_distinguisher.as_deref(), Some("alice"));
    }

    #[test]
    fn never_panics_on_junk() {
        use rand::{Rng, SeedableRng};
        let alphabet = ",<none>\r\n \t.-0123456789ssPriorityLevelName,Index,UserName,";
        let chars: Vec<char> = alphabet.chars().chain(['é', '\u{feff}', '…']).collect();
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for _ in 0..2000 {
            let len = rng.gen_range(0..120);
            let mut text: String = (0..len)
                .map(|_| chars[rng.gen_range(0..chars.len())])
                .collect();
            if rng.gen_bool(0.5) {
                text.insert_str(0, DETAILS_HEADER);
            }
            let _ = parse_requests(&text);
            let _ = parse_queues(&text);
            let _ = parse_priority_levels(&text);
        }
    }

    /// Each row as text (a `Cow` prints its string either way), or the error, of `bytes` read in chunks of `size`.
    fn streamed(bytes: &[u8], size: usize) -> Result<(Vec<String>, DumpStats), String> {
        let mut rows = Vec::new();
        let mut reader = RequestsReader::default();
        for chunk in bytes.chunks(size.max(1)) {
            reader.feed(chunk, |r| rows.push(format!("{r:?}")));
        }
        let stats = reader
            .finish(|r| rows.push(format!("{r:?}")))
            .map_err(|e| e.to_string())?;
        Ok((rows, stats))
    }

    /// The same, of the whole body decoded at once.
    fn whole(bytes: &[u8]) -> Result<(Vec<String>, DumpStats), String> {
        let text = String::from_utf8_lossy(bytes);
        let mut rows = Vec::new();
        let stats =
            fold_requests(&text, |r| rows.push(format!("{r:?}"))).map_err(|e| e.to_string())?;
        Ok((rows, stats))
    }

    #[test]
    fn chunks_read_as_the_whole_body_wherever_they_split() {
        let mut bodies: Vec<Vec<u8>> = [
            "k8swebsite-2020-dump_requests.txt",
            "k8swebsite-2020-dump_requests-includeRequestDetails.txt",
            "k8swebsite-2023-dump_requests.txt",
            "k8swebsite-2023-dump_requests-includeRequestDetails.txt",
            "k8s-issue-93376-dump_requests-phantom.txt",
        ]
        .iter()
        .map(|f| fixture(f).into_bytes())
        .collect();
        // A byte-order mark, CRLF line ends, a comma in a user name, a broken character, a last line without its
        // line feed (keeping its carriage return), blank and elided lines.
        let mut odd = b"\xef\xbb\xbf".to_vec();
        odd.extend_from_slice(DETAILS_HEADER.as_bytes());
        odd.extend_from_slice(
            b"\r\n\r\nwl, sa, 1, 0, bob, t, 1, 0, 0s, t, b\xc3o,b, get, /p, ns, n, v1, pods, \r\n...\n\
              wl, sa, 2, 0, caf\xc3\xa9, t, 1, 0, 0s, t, caf\xc3\xa9, list, /p, ns, , v1, pods,\r",
        );
        bodies.push(odd);
        bodies.push(b"<html>Forbidden</html>\nPriorityLevelName, FlowSchemaName\n".to_vec());
        bodies.push(b"\n\n".to_vec());
        bodies.push(Vec::new());
        for body in &bodies {
            let expected = whole(body);
            for size in [1, 2, 3, 5, 7, 64, 1000, body.len().max(1)] {
                assert_eq!(
                    streamed(body, size),
                    expected,
                    "chunks of {size} bytes of {:?}",
                    String::from_utf8_lossy(&body[..body.len().min(60)])
                );
            }
        }
        let odd = whole(&bodies[5]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(odd.1.rows, 2);
        assert_eq!(odd.1.merged_rows, 1);
        assert_eq!(odd.1.skipped_lines, 3, "two blank lines and `...`");
        assert!(
            odd.0[0].contains("user_name: Some(\"b\u{fffd}o,b\")"),
            "{}",
            odd.0[0]
        );
        assert!(odd.0[1].contains("caf\u{e9}"), "{}", odd.0[1]);
        assert!(whole(&bodies[6]).is_err(), "not a dump");
    }
}
