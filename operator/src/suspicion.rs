//! Suspicious nights: whether a backup's changes against its parent are far outside the plan's
//! own history (ransomware rewriting every file, encrypted data that no longer compresses, mass
//! deletes), and what that does to the plan's status and retention. Pure: no I/O.
//!
//! A flagged night sets `status.suspiciousChange` and the `SuspiciousChange` condition; while it
//! is set and an admin has not acknowledged it (annotation
//! [`ANNOTATION_ACKNOWLEDGE_SUSPICIOUS_CHANGE`] naming its snapshot), [`retention`] gives the Job
//! builders no keep rules, so the last good snapshots cannot age out during an attack.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use neverwiped_contract::cli::KeepRules;
use neverwiped_contract::text::escaped;
use neverwiped_contract::RunResult;

use crate::api::{
    BackupPlan, BackupPlanStatus, ChangeRatios, SuspiciousChange,
    ANNOTATION_ACKNOWLEDGE_SUSPICIOUS_CHANGE,
};
use crate::conditions::{set_condition, types, ConditionStatus, Reason};

/// How many nights `status.changeHistory` keeps.
pub const CHANGE_HISTORY_LIMIT: usize = 10;

/// When a night counts as far outside the plan's history. The defaults are documented in
/// `docs/security.md` with their reasoning; the chart's `suspiciousChange` values set them.
#[derive(Debug, Clone, PartialEq)]
pub struct Thresholds {
    /// Nights of history needed before any night is judged: the first few nights of a plan set
    /// what is usual.
    pub min_history: usize,
    /// A night is outside the history only when its figure is at least this many times the
    /// history's median (as well as above the signal's own threshold).
    pub factor: f64,
    /// `MassRewrite`: this share of the parent's files changed or removed.
    pub rewritten_share: f64,
    /// `MassDelete`: this share of the parent's files removed.
    pub removed_share: f64,
    /// `IncompressibleData`: new data compressed to at least this share of its size…
    pub incompressible_share: f64,
    /// …where the history's median was at most this…
    pub usual_compressed_share: f64,
    /// …and at least this many new bytes (a few new photos do not count).
    pub min_new_bytes: u64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            min_history: 3,
            factor: 5.0,
            rewritten_share: 0.5,
            removed_share: 0.3,
            incompressible_share: 0.9,
            usual_compressed_share: 0.75,
            min_new_bytes: 16 << 20,
        }
    }
}

/// A night far outside the history: the signal (a `SuspiciousChange` reason) and what was seen.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub reason: Reason,
    pub message: String,
}

/// The shares of a successful backup's result; `None` without a parent (a first backup: every
/// file is new) or without change figures (a sidecar that does not report them).
pub fn ratios(result: &RunResult) -> Option<ChangeRatios> {
    let changes = result.changes.as_ref().filter(|c| c.has_parent)?;
    let parent_files = changes.files_changed + changes.files_unmodified + changes.files_removed;
    let share = |part: u64| match parent_files {
        0 => 0.0,
        all => part as f64 / all as f64,
    };
    Some(ChangeRatios {
        snapshot_id: result.snapshot_id.clone(),
        parent_files: to_i64(parent_files),
        rewritten_share: share(changes.files_changed + changes.files_removed),
        removed_share: share(changes.files_removed),
        new_bytes: to_i64(changes.new_bytes_raw),
        compressed_share: (changes.new_bytes_raw > 0)
            .then(|| changes.new_bytes_compressed as f64 / changes.new_bytes_raw as f64),
        added_per_read: (result.bytes_read > 0)
            .then(|| result.bytes_added as f64 / result.bytes_read as f64),
    })
}

/// Whether `tonight` is far outside `history` (the plan's usual nights, newest first). Quiet
/// while the history is shorter than [`Thresholds::min_history`]; otherwise the first signal
/// that fires, in the order rewrite, delete, compression.
pub fn judge(
    tonight: &ChangeRatios,
    history: &[ChangeRatios],
    thresholds: &Thresholds,
) -> Option<Finding> {
    if history.len() < thresholds.min_history.max(1) || tonight.parent_files == 0 {
        return None;
    }
    let usual_rewritten = median(history.iter().map(|n| n.rewritten_share))?;
    if tonight.rewritten_share >= thresholds.rewritten_share
        && tonight.rewritten_share >= thresholds.factor * usual_rewritten
    {
        return Some(Finding {
            reason: Reason::MassRewrite,
            message: format!(
                "{} of the parent's {} files were changed or removed (usually {})",
                percent(tonight.rewritten_share),
                tonight.parent_files,
                percent(usual_rewritten)
            ),
        });
    }
    let usual_removed = median(history.iter().map(|n| n.removed_share))?;
    if tonight.removed_share >= thresholds.removed_share
        && tonight.removed_share >= thresholds.factor * usual_removed
    {
        return Some(Finding {
            reason: Reason::MassDelete,
            message: format!(
                "{} of the parent's {} files were removed (usually {})",
                percent(tonight.removed_share),
                tonight.parent_files,
                percent(usual_removed)
            ),
        });
    }
    incompressible(tonight, history, thresholds)
}

/// `IncompressibleData`: enough new data that compressed to about its own size, where the
/// plan's new data usually compressed well.
fn incompressible(
    tonight: &ChangeRatios,
    history: &[ChangeRatios],
    thresholds: &Thresholds,
) -> Option<Finding> {
    let compressed = tonight.compressed_share?;
    let usual = median(history.iter().filter_map(|n| n.compressed_share))?;
    let enough = u64::try_from(tonight.new_bytes).unwrap_or(0) >= thresholds.min_new_bytes;
    (enough
        && compressed >= thresholds.incompressible_share
        && usual <= thresholds.usual_compressed_share)
        .then(|| Finding {
            reason: Reason::IncompressibleData,
            message: format!(
                "{} bytes of new data compressed to {} of their size (usually {})",
                tonight.new_bytes,
                percent(compressed),
                percent(usual)
            ),
        })
}

/// A finished backup, as the suspicion check sees it.
#[derive(Debug, Clone, Copy)]
pub struct Night<'a> {
    /// The sidecar's result of a successful backup.
    pub result: &'a RunResult,
    /// A manual run the plan's `neverwiped.io/expected-change` annotation names.
    pub expected: bool,
    pub finished: Timestamp,
}

/// Judges a successful backup against the plan's history and records it on `status`: a flagged
/// night sets `suspiciousChange` and the condition (returned, for the Event); a usual one joins
/// the history. An expected night or one without a parent does neither. A flag already set stays
/// until acknowledged, whatever the nights after it look like.
pub fn record_night(
    status: &mut BackupPlanStatus,
    night: Night,
    thresholds: &Thresholds,
    generation: Option<i64>,
) -> Option<SuspiciousChange> {
    let tonight = ratios(night.result)?;
    if night.expected {
        return None;
    }
    let Some(finding) = judge(&tonight, &status.change_history, thresholds) else {
        status.change_history.insert(0, tonight);
        status.change_history.truncate(CHANGE_HISTORY_LIMIT);
        if status.suspicious_change.is_none() {
            set_condition(
                &mut status.conditions,
                types::SUSPICIOUS_CHANGE,
                ConditionStatus::False,
                Reason::ChangeUsual,
                "the last backup's changes look like the plan's usual ones",
                generation,
                night.finished,
            );
        }
        return None;
    };
    let snapshot_id = tonight.snapshot_id.clone().unwrap_or_default();
    let acknowledge = format!(
        "{ANNOTATION_ACKNOWLEDGE_SUSPICIOUS_CHANGE}={}",
        escaped(&snapshot_id)
    );
    let message = format!(
        "snapshot {}: {}; retention is paused until an admin annotates the plan {acknowledge}",
        escaped(&snapshot_id),
        finding.message
    );
    let flagged = SuspiciousChange {
        snapshot_id,
        reason: finding.reason.as_str().to_owned(),
        message: message.clone(),
        time: Time(night.finished),
    };
    // The first flag is the one to look at: later nights of the same attack do not replace it.
    if status.suspicious_change.is_none() {
        status.suspicious_change = Some(flagged.clone());
        set_condition(
            &mut status.conditions,
            types::SUSPICIOUS_CHANGE,
            ConditionStatus::True,
            finding.reason,
            message,
            generation,
            night.finished,
        );
    }
    Some(flagged)
}

/// Clears a flag the plan's acknowledgement annotation names (condition `False`, reason
/// `SuspiciousChangeAcknowledged`); returns the flag it cleared.
pub fn acknowledge(
    plan: &BackupPlan,
    status: &mut BackupPlanStatus,
    now: Timestamp,
) -> Option<SuspiciousChange> {
    let flagged = status.suspicious_change.as_ref()?;
    if !acknowledged(plan, flagged) {
        return None;
    }
    let cleared = status.suspicious_change.take()?;
    set_condition(
        &mut status.conditions,
        types::SUSPICIOUS_CHANGE,
        ConditionStatus::False,
        Reason::SuspiciousChangeAcknowledged,
        format!(
            "an admin acknowledged snapshot {} ({}); retention runs again",
            escaped(&cleared.snapshot_id),
            cleared.reason
        ),
        plan.metadata.generation,
        now,
    );
    Some(cleared)
}

/// Whether the plan's acknowledgement annotation names the flagged snapshot: its id, or a prefix
/// of it of at least 8 hex digits (as `kubectl neverwiped snapshots` shows them).
fn acknowledged(plan: &BackupPlan, flagged: &SuspiciousChange) -> bool {
    let annotation = plan
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_ACKNOWLEDGE_SUSPICIOUS_CHANGE))
        .map(|value| value.trim());
    let id = flagged.snapshot_id.as_str();
    annotation.is_some_and(|value| {
        !id.is_empty() && (value == id || (value.len() >= 8 && id.starts_with(value)))
    })
}

/// Whether the plan's retention is paused: a flagged night its annotation does not acknowledge.
pub fn retention_paused(plan: &BackupPlan) -> bool {
    plan.status
        .as_ref()
        .and_then(|s| s.suspicious_change.as_ref())
        .is_some_and(|flagged| !acknowledged(plan, flagged))
}

/// The keep rules a Job of `plan` gets: `rules`, or none while its retention is paused.
pub fn retention(plan: &BackupPlan, rules: KeepRules) -> KeepRules {
    if retention_paused(plan) {
        KeepRules::default()
    } else {
        rules
    }
}

/// The keep rules a backup Job of `plan` gets: none while its retention is paused; otherwise
/// `rules` keeping at least the two newest snapshots. A night is judged only after its backup
/// has ended, so the backup that writes an attack's first snapshot must not forget its parent,
/// the last good one (with `keepLast: 1` it would): the flag set after it then pauses the rest.
pub fn backup_retention(plan: &BackupPlan, rules: KeepRules) -> KeepRules {
    let rules = retention(plan, rules);
    if rules.is_empty() {
        return rules;
    }
    KeepRules {
        last: Some(rules.last.unwrap_or(0).max(2)),
        ..rules
    }
}

fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut values: Vec<f64> = values.filter(|v| v.is_finite()).collect();
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    Some(if values.len().is_multiple_of(2) {
        (values[middle - 1] + values[middle]) / 2.0
    } else {
        values[middle]
    })
}

fn percent(share: f64) -> String {
    format!("{:.0}%", share * 100.0)
}

fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
#[path = "suspicion_tests.rs"]
mod tests;
