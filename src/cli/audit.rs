//! `apf-monitor audit`: who got the 429s, from kube-apiserver's audit log (or an export of it): every request
//! classified with kube-apiserver's own matching on the cluster's FlowSchemas (or files) and counted per user and
//! per flow ([`apf::audit`]).
use std::path::PathBuf;
use std::time::SystemTime;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use serde::Serialize;

use super::output::{errln, out, outln};
use super::table::{columns, seconds};
use super::{init_logging, load_config, TargetArgs};
use crate::audit::read::{read_file, read_lines, Malformed, Tally};
use apf::audit::{FlowRow, Ledger, Limits, UserRow};
use apf::parse::audit::AuditedRequest;

#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(flatten)]
    pub common: TargetArgs,
    /// An audit log as kube-apiserver writes it with --audit-log-format=json (one Event a line), plain or gzipped
    /// (rotated files: `audit-2026-11-24T10-00-00.000.log.gz`), or saved webhook batches (EventList). Repeatable;
    /// give the rotated files too, e.g. --file /var/log/kubernetes/audit/audit*. `-` reads standard input (an export
    /// piped in).
    #[arg(long = "file", short = 'f', value_name = "LOG", required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
    /// FlowSchemas and PriorityLevelConfigurations from a file (`kubectl get
    /// flowschemas,prioritylevelconfigurations -o yaml`) instead of the cluster. Repeatable. Use the objects in
    /// force when the log was written.
    #[arg(long = "objects", value_name = "FILE")]
    pub objects: Vec<PathBuf>,
    /// Only requests that completed at or after this time: RFC 3339 (2026-11-24T10:00:00Z) or a duration before
    /// now (90m, 2h).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Only requests that completed before this time: RFC 3339 or a duration before now.
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// Users and flows shown, worst first; 0 shows every one.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub top: usize,
    #[arg(long, value_enum, default_value = "table")]
    pub output: AuditOutput,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum AuditOutput {
    Table,
    Json,
}

/// Malformed lines listed by place; all of them are counted.
const MALFORMED_LISTED: usize = 20;

#[derive(Debug, Serialize)]
struct AuditReport {
    users: Vec<UserRow>,
    flows: Vec<FlowRow>,
    /// Requests counted (their last stage), in the period.
    requests: u64,
    /// Of them, answered 429.
    rejected: u64,
    /// Events of earlier stages (RequestReceived, ResponseStarted): the request is counted on its last.
    skipped_events: u64,
    /// Requests outside --since/--until, or without a time when those are given.
    outside_period: u64,
    malformed_lines: u64,
    /// The first malformed lines, with where they are.
    malformed: Vec<Malformed>,
    /// Requests no FlowSchema matched (objects without catch-all): not counted.
    unmatched: u64,
    files: Vec<String>,
    /// Where the FlowSchemas came from.
    objects: String,
    /// Users and flows beyond --top, not listed.
    users_not_shown: usize,
    flows_not_shown: usize,
}

/// A time flag: RFC 3339, or a duration before `now`.
fn parse_time(flag: &str, text: &str, now: SystemTime) -> Result<SystemTime> {
    crate::values::parse_time(text, now).map_err(|e| anyhow::anyhow!("--{flag} {e}"))
}

/// The event's time, as kube-apiserver writes it (RFC 3339 in UTC with microseconds).
fn event_time(r: &AuditedRequest) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(&r.timestamp).ok()
}

pub async fn run(args: AuditArgs) -> Result<()> {
    let now = SystemTime::now();
    let since = args
        .since
        .as_deref()
        .map(|t| parse_time("since", t, now))
        .transpose()?;
    let until = args
        .until
        .as_deref()
        .map(|t| parse_time("until", t, now))
        .transpose()?;
    if let (Some(s), Some(u)) = (since, until) {
        if s >= u {
            bail!("--since must be before --until");
        }
    }
    // Every file is looked at before the cluster is asked: a wrong path fails fast.
    for f in args.files.iter().filter(|f| f.as_os_str() != "-") {
        std::fs::metadata(f).with_context(|| format!("--file {}", f.display()))?;
    }
    let (schemas, levels, source) = if args.objects.is_empty() {
        let config = load_config(&args.common, None, None)?;
        init_logging(config.log.format, "warn")?;
        super::matching::from_cluster(&config).await.context(
            "the FlowSchemas classify the events; without a cluster give them with --objects FILE",
        )?
    } else {
        super::matching::from_files(&args.objects)?
    };

    let mut ledger = Ledger::new(Limits {
        max_users: usize::MAX,
        keep_waits: true,
    });
    let mut tally = Tally::default();
    let (mut malformed, mut outside, mut unmatched_first) = (Vec::new(), 0u64, None);
    let mut lines = 0u64;
    for path in &args.files {
        let mut each = |r: AuditedRequest| {
            if since.is_some() || until.is_some() {
                let inside = event_time(&r)
                    .is_some_and(|t| since.is_none_or(|s| t >= s) && until.is_none_or(|u| t < u));
                if !inside {
                    outside += 1;
                    return;
                }
            }
            if let Err(e) = ledger.classify(&r, &schemas, &levels) {
                unmatched_first.get_or_insert(e);
            }
        };
        let mut bad = |m: Malformed| {
            if malformed.len() < MALFORMED_LISTED {
                malformed.push(m);
            }
        };
        if path.as_os_str() == "-" {
            let mut stdin = std::io::stdin().lock();
            lines += read_lines(&mut stdin, "stdin", &mut tally, &mut bad, &mut each)
                .context("cannot read standard input")?;
        } else {
            lines += read_file(path, &mut tally, &mut bad, &mut each)
                .with_context(|| format!("cannot read {}", path.display()))?;
        }
    }
    if tally.counted + tally.skipped == 0 {
        bail!(
            "{}: {}",
            args.files
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            no_event(lines, tally.malformed, malformed.first())
        );
    }
    if let Some(e) = unmatched_first {
        errln!("warning: {e}: those requests are not counted");
    }
    let counts = ledger.counts();
    let mut users = ledger.users();
    let mut flows = ledger.flows();
    let rejected = users.iter().map(|u| u.rejected).sum();
    let (users_not_shown, flows_not_shown) = if args.top > 0 {
        let hidden = (
            users.len().saturating_sub(args.top),
            flows.len().saturating_sub(args.top),
        );
        users.truncate(args.top);
        flows.truncate(args.top);
        hidden
    } else {
        (0, 0)
    };
    let report = AuditReport {
        users,
        flows,
        requests: counts.requests,
        rejected,
        skipped_events: tally.skipped,
        outside_period: outside,
        malformed_lines: tally.malformed,
        malformed,
        unmatched: counts.unmatched,
        files: args.files.iter().map(|p| p.display().to_string()).collect(),
        objects: source,
        users_not_shown,
        flows_not_shown,
    };
    match args.output {
        AuditOutput::Json => outln!("{}", serde_json::to_string_pretty(&report)?),
        AuditOutput::Table => out!("{}", render(&report)),
    }
}

/// Why input without one audit Event is refused: it is not an audit log (or an empty one), and what to give.
fn no_event(lines: u64, malformed: u64, first: Option<&Malformed>) -> String {
    let what = match first {
        Some(m) => format!(
            "no line is an audit Event ({malformed} of {lines} lines malformed, the first {}:{}: {})",
            m.file, m.line, m.error
        ),
        None if lines == 0 => "empty: no audit Event".to_string(),
        None => format!("no line is an audit Event ({lines} lines, none holding one)"),
    };
    format!(
        "{what}. Give kube-apiserver's audit log as --audit-log-format=json writes it (one Event a line), or its \
         webhook's EventList batches (docs/guides/audit.md)"
    )
}

/// An RFC 3339 time to the second (`2026-11-24 10:00:16`); the whole text when it is not one.
fn clock(t: &Option<String>) -> String {
    match t {
        None => "-".into(),
        Some(t) if t.len() >= 19 && t.is_char_boundary(19) && t.as_bytes()[10] == b'T' => {
            t[..19].replacen('T', " ", 1)
        }
        Some(t) => t.clone(),
    }
}

fn render(r: &AuditReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} requests, {} answered 429, in {} (classified on {})",
        r.requests,
        r.rejected,
        r.files.join(", "),
        r.objects
    );
    let mut notes = Vec::new();
    if r.skipped_events > 0 {
        notes.push(format!(
            "{} events of earlier stages skipped (a request counts once, on ResponseComplete)",
            r.skipped_events
        ));
    }
    if r.outside_period > 0 {
        notes.push(format!(
            "{} requests outside --since/--until",
            r.outside_period
        ));
    }
    if r.unmatched > 0 {
        notes.push(format!(
            "{} requests matched no FlowSchema and there is no catch-all: not counted",
            r.unmatched
        ));
    }
    if r.malformed_lines > 0 {
        let first = &r.malformed[0];
        notes.push(format!(
            "{} malformed lines skipped (first: {}:{}: {})",
            r.malformed_lines, first.file, first.line, first.error
        ));
    }
    for n in notes {
        let _ = writeln!(out, "  {n}");
    }
    if r.requests == 0 {
        let _ = writeln!(
            out,
            "\nNo request completed in these events: is the log at level Metadata or above, with stage \
             ResponseComplete not omitted (docs/guides/audit.md)?"
        );
        return out;
    }
    let _ = writeln!(out, "\nUsers, most 429s first");
    let mut rows = vec![[
        "USER",
        "FLOW SCHEMA",
        "PRIORITY LEVEL",
        "REQUESTS",
        "429s",
        "WAIT P50",
        "WAIT P99",
        "FIRST 429",
        "LAST 429",
        "USER AGENT",
    ]
    .map(String::from)
    .to_vec()];
    for u in &r.users {
        let mut user = u.user.clone();
        if let Some(by) = u.impersonated_by.first() {
            user.push_str(&format!(" (impersonated by {by})"));
        }
        rows.push(vec![
            user,
            u.flow_schema.clone(),
            u.priority_level.clone(),
            u.requests.to_string(),
            u.rejected.to_string(),
            seconds(u.queue_wait_p50_seconds),
            seconds(u.queue_wait_p99_seconds),
            clock(&u.first_rejection),
            clock(&u.last_rejection),
            u.user_agents.first().cloned().unwrap_or_else(|| "-".into()),
        ]);
    }
    out.push_str(&columns(&rows));
    if r.users_not_shown > 0 {
        let _ = writeln!(
            out,
            "({} more users: --top 0 lists every one)",
            r.users_not_shown
        );
    }
    let _ = writeln!(out, "\nFlows, most 429s first");
    let mut rows = vec![[
        "FLOW SCHEMA",
        "DISTINGUISHER",
        "PRIORITY LEVEL",
        "REQUESTS",
        "429s",
        "USERS",
    ]
    .map(String::from)
    .to_vec()];
    for f in &r.flows {
        rows.push(vec![
            f.flow_schema.clone(),
            if f.flow_distinguisher.is_empty() {
                "-".into()
            } else {
                f.flow_distinguisher.clone()
            },
            f.priority_level.clone(),
            f.requests.to_string(),
            f.rejected.to_string(),
            format!("{}{}", f.users, if f.more_users { "+" } else { "" }),
        ]);
    }
    out.push_str(&columns(&rows));
    if r.flows_not_shown > 0 {
        let _ = writeln!(
            out,
            "({} more flows: --top 0 lists every one)",
            r.flows_not_shown
        );
    }
    let _ = writeln!(
        out,
        "\nA 429 counts whatever answered it (APF, or rarely a webhook or the max-in-flight filter). Waits are the \
         apiserver.latency.k8s.io/apf-queue-wait annotation (kube-apiserver 1.31+), which it writes only on requests \
         slower than 500 ms: the percentiles are of those."
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_or_a_duration_before_now() {
        let now = humantime::parse_rfc3339("2026-11-24T12:00:00Z").unwrap();
        assert_eq!(
            parse_time("since", "2h", now).unwrap(),
            humantime::parse_rfc3339("2026-11-24T10:00:00Z").unwrap()
        );
        assert_eq!(
            parse_time("since", "2026-11-24T10:00:16.000200Z", now).unwrap(),
            humantime::parse_rfc3339("2026-11-24T10:00:16.000200Z").unwrap()
        );
        let e = parse_time("until", "yesterday", now)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--until yesterday: not a time"), "{e}");
    }

    #[test]
    fn input_without_an_event_says_what_it_holds() {
        let first = Malformed {
            file: "metrics.txt".into(),
            line: 1,
            error: "not JSON".into(),
        };
        let e = no_event(3, 3, Some(&first));
        assert!(
            e.starts_with(
                "no line is an audit Event (3 of 3 lines malformed, the first metrics.txt:1: not JSON). Give"
            ),
            "{e}"
        );
        assert!(no_event(0, 0, None).starts_with("empty: no audit Event. Give"));
        assert!(no_event(2, 0, None).contains("(2 lines, none holding one)"));
    }

    #[test]
    fn waits_and_clocks_read_short() {
        assert_eq!(seconds(Some(15.000012)), "15s");
        assert_eq!(seconds(Some(1.2)), "1.2s");
        assert_eq!(seconds(Some(0.0123)), "12ms");
        assert_eq!(seconds(Some(0.00085)), "850µs");
        assert_eq!(seconds(None), "-");
        assert_eq!(
            clock(&Some("2026-11-24T10:00:16.000200Z".into())),
            "2026-11-24 10:00:16"
        );
        assert_eq!(clock(&Some("soon".into())), "soon");
    }
}
