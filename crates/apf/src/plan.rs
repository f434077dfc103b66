//! What-if on the APF configuration (`apf-monitor plan`): change fields of PriorityLevelConfigurations and see every
//! level's limits before and after, with the arithmetic of [`super::limits`] (kube-apiserver's own).
use std::collections::BTreeMap;

use serde::Serialize;

use super::limits::{nominal_limit, seat_limits, SeatLimits};
use super::PriorityLevelConfig;

/// kube-apiserver's default server concurrency: `--max-requests-inflight` 400 + `--max-mutating-requests-inflight`
/// 200 (kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/server/options/server_run_options.go).
pub const DEFAULT_SERVER_CONCURRENCY: u32 = 600;

/// A field `--set LEVEL.FIELD=N` may change, named as the PriorityLevelConfiguration spec names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Shares,
    LendablePercent,
    BorrowingLimitPercent,
    Queues,
    HandSize,
    QueueLengthLimit,
}

impl Field {
    const NAMES: [(&'static str, Field); 7] = [
        ("shares", Field::Shares),
        ("nominalConcurrencyShares", Field::Shares),
        ("lendablePercent", Field::LendablePercent),
        ("borrowingLimitPercent", Field::BorrowingLimitPercent),
        ("queues", Field::Queues),
        ("handSize", Field::HandSize),
        ("queueLengthLimit", Field::QueueLengthLimit),
    ];

    pub fn name(self) -> &'static str {
        match self {
            Field::Shares => "shares",
            Field::LendablePercent => "lendablePercent",
            Field::BorrowingLimitPercent => "borrowingLimitPercent",
            Field::Queues => "queues",
            Field::HandSize => "handSize",
            Field::QueueLengthLimit => "queueLengthLimit",
        }
    }
}

/// One `--set LEVEL.FIELD=N`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub level: String,
    pub field: Field,
    pub value: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("--set {0}: expected LEVEL.FIELD=N, e.g. workload-low.shares=150")]
    Syntax(String),
    #[error("--set {given}: unknown field {field}; one of shares, lendablePercent, borrowingLimitPercent, queues, handSize, queueLengthLimit")]
    UnknownField { given: String, field: String },
    #[error("--set {given}: {value} is not a whole number of 0 or more")]
    NotANumber { given: String, value: String },
    #[error("--set {level}.…: no priority level {level}; the levels are {known}")]
    UnknownLevel { level: String, known: String },
    #[error("--set {level}.{field}: {why}")]
    Invalid {
        level: String,
        field: &'static str,
        why: String,
    },
    #[error("no PriorityLevelConfiguration to plan on")]
    NoLevels,
}

impl std::str::FromStr for Change {
    type Err = PlanError;

    /// `LEVEL.FIELD=N`; a level name may itself contain dots, so the field is what follows the last one.
    fn from_str(s: &str) -> Result<Self, PlanError> {
        let (target, value) = s
            .split_once('=')
            .ok_or_else(|| PlanError::Syntax(s.into()))?;
        let (level, field) = target
            .rsplit_once('.')
            .filter(|(l, f)| !l.is_empty() && !f.is_empty())
            .ok_or_else(|| PlanError::Syntax(s.into()))?;
        let field = Field::NAMES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(field))
            .map(|(_, f)| *f)
            .ok_or_else(|| PlanError::UnknownField {
                given: s.into(),
                field: field.into(),
            })?;
        let value = value.trim().parse().map_err(|_| PlanError::NotANumber {
            given: s.into(),
            value: value.into(),
        })?;
        Ok(Change {
            level: level.into(),
            field,
            value,
        })
    }
}

/// The levels with the changes applied, each checked as the API server's validation would
/// (kubernetes/kubernetes pkg/apis/flowcontrol/validation/validation.go).
pub fn apply(
    levels: &[PriorityLevelConfig],
    changes: &[Change],
) -> Result<Vec<PriorityLevelConfig>, PlanError> {
    let mut after = levels.to_vec();
    for c in changes {
        let Some(pl) = after.iter_mut().find(|l| l.name == c.level) else {
            return Err(PlanError::UnknownLevel {
                level: c.level.clone(),
                known: levels
                    .iter()
                    .map(|l| l.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        let invalid = |why: &str| PlanError::Invalid {
            level: c.level.clone(),
            field: c.field.name(),
            why: why.into(),
        };
        match c.field {
            Field::Shares => pl.shares = Some(c.value),
            Field::LendablePercent if c.value > 100 => {
                return Err(invalid("a percent is 0 to 100"))
            }
            Field::LendablePercent => pl.lendable_percent = Some(c.value),
            Field::BorrowingLimitPercent if pl.exempt => {
                return Err(invalid("the exempt level has no borrowing limit (it borrows without one)"))
            }
            Field::BorrowingLimitPercent => pl.borrowing_limit_percent = Some(c.value),
            Field::Queues | Field::HandSize | Field::QueueLengthLimit if !pl.queuing => {
                return Err(invalid(
                    "the level has no queues (exempt, or limitResponse Reject): a request without a seat is \
                     rejected at once",
                ))
            }
            Field::Queues | Field::HandSize | Field::QueueLengthLimit if c.value == 0 => {
                return Err(invalid("must be at least 1"))
            }
            Field::Queues => pl.queues = Some(c.value),
            Field::HandSize => pl.hand_size = Some(c.value),
            Field::QueueLengthLimit => pl.queue_length_limit = Some(c.value),
        }
        if let (Some(hand), Some(queues)) = (pl.hand_size, pl.queues) {
            if hand > queues {
                return Err(invalid(&format!(
                    "handSize {hand} is more than queues {queues}: a hand is dealt from the queues"
                )));
            }
        }
    }
    Ok(after)
}

/// One level's settings and limits, as `plan` prints them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LevelPlan {
    pub shares: u32,
    pub lendable_percent: u32,
    /// Absent: borrowing is bounded only by the server concurrency.
    pub borrowing_limit_percent: Option<u32>,
    pub queues: Option<u32>,
    pub hand_size: Option<u32>,
    pub queue_length_limit: Option<u32>,
    pub nominal_limit_seats: u32,
    pub lower_limit_seats: u32,
    pub upper_limit_seats: u32,
}

/// `borrowing`: whether the cluster lends and borrows seats (1.26+). Before, a level's limit is its nominal one,
/// so lower and upper are too.
fn level_plan(pl: &PriorityLevelConfig, limits: SeatLimits, borrowing: bool) -> LevelPlan {
    let (lower, upper) = if borrowing {
        (limits.lower, limits.upper)
    } else {
        (limits.nominal, limits.nominal)
    };
    LevelPlan {
        shares: pl.shares_or_default(),
        lendable_percent: pl.lendable_percent_or_default(),
        borrowing_limit_percent: if pl.exempt {
            None
        } else {
            pl.borrowing_limit_percent
        },
        queues: pl.queues,
        hand_size: pl.hand_size,
        queue_length_limit: pl.queue_length_limit,
        nominal_limit_seats: limits.nominal,
        lower_limit_seats: lower,
        upper_limit_seats: upper,
    }
}

/// Every level before and after the changes, at one server concurrency.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanRow {
    pub priority_level: String,
    pub changed: bool,
    pub before: LevelPlan,
    pub after: LevelPlan,
}

/// Whether objects come from a cluster that borrows (1.26+): objects of older clusters have no lendablePercent.
pub fn objects_borrow(levels: &[PriorityLevelConfig]) -> bool {
    levels.iter().any(|l| l.lendable_percent.is_some())
}

/// Every level before and after `changes`, and the objects that change.
pub fn plan(
    levels: &[PriorityLevelConfig],
    changes: &[Change],
    server_concurrency: u32,
    borrowing: bool,
) -> Result<(Vec<PlanRow>, Vec<PriorityLevelConfig>), PlanError> {
    if levels.is_empty() {
        return Err(PlanError::NoLevels);
    }
    let after = apply(levels, changes)?;
    let before_limits = seat_limits(levels, server_concurrency);
    let after_limits = seat_limits(&after, server_concurrency);
    let rows = levels
        .iter()
        .zip(&after)
        .zip(before_limits.into_iter().zip(after_limits))
        .map(|((b, a), (bl, al))| {
            let before = level_plan(b, bl, borrowing);
            let after = level_plan(a, al, borrowing);
            PlanRow {
                priority_level: b.name.clone(),
                changed: before != after,
                before,
                after,
            }
        })
        .collect();
    let changed_objects = levels
        .iter()
        .zip(&after)
        .filter(|(b, a)| b != a)
        .map(|(_, a)| a.clone())
        .collect();
    Ok((rows, changed_objects))
}

/// The server concurrency a replica runs with, from the nominal limits it serves: the largest integer for which
/// the shares reproduce every served nominal limit exactly. `None` when no value does: the served limits come from other shares than `levels` (the objects
/// changed since, or a level is missing).
pub fn infer_server_concurrency(
    levels: &[PriorityLevelConfig],
    served_nominal: &BTreeMap<String, f64>,
) -> Option<u32> {
    let sum_shares: u64 = levels
        .iter()
        .map(|l| u64::from(l.shares_or_default()))
        .sum();
    let known: Vec<(u32, u32)> = levels
        .iter()
        .filter_map(|l| {
            let served = *served_nominal.get(&l.name)?;
            (served >= 0.0 && served.fract() == 0.0)
                .then_some((l.shares_or_default(), served as u32))
        })
        .collect();
    // Without a level that has shares, any value fits: nothing is told.
    if !known.iter().any(|(shares, _)| *shares > 0) {
        return None;
    }
    // ceil(S·shares/Σ) = n bounds S by n·Σ/shares: the search starts at the tightest such bound.
    let top = known
        .iter()
        .filter(|(shares, _)| *shares > 0)
        .map(|&(shares, n)| u64::from(n) * sum_shares / u64::from(shares))
        .min()?;
    let top = u32::try_from(top).unwrap_or(u32::MAX);
    (1..=top).rev().find(|s| {
        known
            .iter()
            .all(|&(shares, n)| nominal_limit(*s, shares, sum_shares) == n)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::defaults::default_priority_levels;
    use crate::KubeVersion;

    fn row<'a>(rows: &'a [PlanRow], name: &str) -> &'a PlanRow {
        rows.iter().find(|r| r.priority_level == name).unwrap()
    }

    #[test]
    fn set_parses_level_field_and_value() {
        let c: Change = "workload-low.shares=150".parse().unwrap();
        assert_eq!(
            c,
            Change {
                level: "workload-low".into(),
                field: Field::Shares,
                value: 150
            }
        );
        let c: Change = "my.level.lendablePercent=10".parse().unwrap();
        assert_eq!(
            (c.level.as_str(), c.field),
            ("my.level", Field::LendablePercent)
        );
        assert!(matches!("x=1".parse::<Change>(), Err(PlanError::Syntax(_))));
        assert!(matches!(
            "x.weight=1".parse::<Change>(),
            Err(PlanError::UnknownField { .. })
        ));
        assert!(matches!(
            "x.shares=-1".parse::<Change>(),
            Err(PlanError::NotANumber { .. })
        ));
    }

    #[test]
    fn more_shares_for_workload_low_take_seats_from_every_other_level() {
        let levels = default_priority_levels(KubeVersion::new(33, 0));
        let changes = ["workload-low.shares=150".parse().unwrap()];
        let (rows, changed) = plan(&levels, &changes, 600, true).unwrap();
        // Σ shares 245 -> 295: workload-low ceil(600·150/295) = 306, global-default ceil(600·20/295) = 41.
        let wl = row(&rows, "workload-low");
        assert_eq!(
            (wl.before.nominal_limit_seats, wl.after.nominal_limit_seats),
            (245, 306)
        );
        assert_eq!(wl.after.lower_limit_seats, 306 - 275); // lends round(0.9·306) = 275
        let gd = row(&rows, "global-default");
        assert!(gd.changed);
        assert_eq!(gd.after.nominal_limit_seats, 41);
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].shares, Some(150));
    }

    #[test]
    fn invalid_changes_are_refused_with_the_reason() {
        let levels = default_priority_levels(KubeVersion::new(33, 0));
        let err = |s: &str| {
            apply(&levels, &[s.parse().unwrap()])
                .unwrap_err()
                .to_string()
        };
        assert!(err("nope.shares=1").contains("no priority level nope"));
        assert!(err("catch-all.queues=8").contains("has no queues"));
        assert!(err("workload-low.lendablePercent=101").contains("0 to 100"));
        assert!(err("workload-low.handSize=200").contains("more than queues 128"));
        assert!(err("exempt.borrowingLimitPercent=5").contains("exempt"));
    }

    #[test]
    fn server_concurrency_is_inferred_from_served_nominal_limits() {
        let levels = default_priority_levels(KubeVersion::new(33, 0));
        for server_cl in [600, 1000, 2000, 3000, 601] {
            let served: BTreeMap<String, f64> = levels
                .iter()
                .zip(seat_limits(&levels, server_cl))
                .map(|(l, s)| (l.name.clone(), f64::from(s.nominal)))
                .collect();
            let inferred = infer_server_concurrency(&levels, &served).unwrap();
            // The largest value that reproduces every limit: the true one, or one the ceils cannot tell from it.
            let again: Vec<u32> = seat_limits(&levels, inferred)
                .iter()
                .map(|s| s.nominal)
                .collect();
            let want: Vec<u32> = seat_limits(&levels, server_cl)
                .iter()
                .map(|s| s.nominal)
                .collect();
            assert_eq!(again, want, "{server_cl}");
            assert!(inferred >= server_cl, "{server_cl} -> {inferred}");
        }
        // The EKS guide's paste: workload-low 245 at 600.
        let mut served = BTreeMap::new();
        served.insert("workload-low".to_string(), 245.0);
        served.insert("catch-all".to_string(), 13.0);
        let s = infer_server_concurrency(&levels, &served).unwrap();
        assert_eq!(
            seat_limits(&levels, s)[levels
                .iter()
                .position(|l| l.name == "workload-low")
                .unwrap()]
            .nominal,
            245
        );
        // Limits from other shares: nothing fits.
        served.insert("catch-all".to_string(), 100.0);
        assert_eq!(infer_server_concurrency(&levels, &served), None);
    }
}
