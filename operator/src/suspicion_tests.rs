use std::collections::BTreeMap;

use jiff::Timestamp;
use kube::api::ObjectMeta;
use neverwiped_contract::{ChangeStats, ExitStatus, Operation, RunResult};

use super::*;
use crate::api::{BackupPlan, BackupPlanStatus};
use crate::conditions::find_condition;
use crate::fixtures::{plan_spec, run_result};

const NOW: &str = "2026-12-05T02:00:00Z";

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

/// A successful backup of a tree of `files` files, `changed` and `removed` of them against its
/// parent, with `new_bytes` of new content compressed to `compressed`.
fn night(files: u64, changed: u64, removed: u64, new_bytes: u64, compressed: u64) -> RunResult {
    let mut result = run_result(Operation::Backup, ExitStatus::Success);
    result.snapshot_id = Some(format!("{:08x}{}", changed * 7 + removed, "0".repeat(56)));
    result.bytes_read = 100 << 20;
    result.bytes_added = compressed;
    result.changes = Some(ChangeStats {
        has_parent: true,
        files_new: 0,
        files_changed: changed,
        files_unmodified: files - changed - removed,
        files_removed: removed,
        new_bytes_raw: new_bytes,
        new_bytes_compressed: compressed,
    });
    result
}

/// A usual night: 1000 files, a dozen changed, one removed, 8 MiB of new data compressed to 40%.
fn usual() -> RunResult {
    night(1000, 12, 1, 8 << 20, (8 << 20) * 2 / 5)
}

fn history(nights: usize) -> Vec<ChangeRatios> {
    (0..nights).map(|_| ratios(&usual()).unwrap()).collect()
}

fn judged(tonight: &RunResult, nights: usize) -> Option<Finding> {
    judge(
        &ratios(tonight).unwrap(),
        &history(nights),
        &Thresholds::default(),
    )
}

#[test]
fn most_files_rewritten_where_few_usually_are_is_a_mass_rewrite() {
    let finding = judged(&night(1000, 980, 0, 100 << 20, 99 << 20), 5).unwrap();
    assert_eq!(finding.reason, Reason::MassRewrite);
    assert_eq!(
        finding.message,
        "98% of the parent's 1000 files were changed or removed (usually 1%)"
    );
}

#[test]
fn many_files_removed_is_a_mass_delete() {
    let finding = judged(&night(1000, 0, 400, 0, 0), 5).unwrap();
    assert_eq!(finding.reason, Reason::MassDelete);
    assert_eq!(
        finding.message,
        "40% of the parent's 1000 files were removed (usually 0%)"
    );
}

#[test]
fn new_data_that_no_longer_compresses_is_flagged() {
    // Few files, but each rewritten with 64 MiB of data that does not compress.
    let finding = judged(&night(1000, 20, 0, 64 << 20, 63 << 20), 5).unwrap();
    assert_eq!(finding.reason, Reason::IncompressibleData);
    assert_eq!(
        finding.message,
        "67108864 bytes of new data compressed to 98% of their size (usually 40%)"
    );
}

#[test]
fn a_little_incompressible_data_is_not_flagged() {
    // A few new photos: 2 MiB that do not compress, below the 16 MiB floor.
    assert_eq!(judged(&night(1000, 12, 0, 2 << 20, 2 << 20), 5), None);
}

#[test]
fn incompressible_data_where_it_never_compressed_is_usual() {
    let photos: Vec<ChangeRatios> = (0..5)
        .map(|_| ratios(&night(1000, 10, 0, 50 << 20, 49 << 20)).unwrap())
        .collect();
    let tonight = ratios(&night(1000, 10, 0, 200 << 20, 199 << 20)).unwrap();
    assert_eq!(judge(&tonight, &photos, &Thresholds::default()), None);
}

#[test]
fn a_usual_night_is_quiet() {
    assert_eq!(judged(&usual(), 10), None);
}

#[test]
fn a_plan_that_rewrites_most_files_every_night_is_not_flagged_for_it() {
    let busy: Vec<ChangeRatios> = (0..5)
        .map(|_| ratios(&night(1000, 600, 0, 8 << 20, 3 << 20)).unwrap())
        .collect();
    let tonight = ratios(&night(1000, 900, 0, 8 << 20, 3 << 20)).unwrap();
    assert_eq!(judge(&tonight, &busy, &Thresholds::default()), None);
}

#[test]
fn the_first_nights_of_history_are_not_judged() {
    let attack = night(1000, 1000, 0, 100 << 20, 100 << 20);
    assert_eq!(judged(&attack, 2), None);
    assert!(judged(&attack, 3).is_some());
}

#[test]
fn a_first_backup_has_no_ratios() {
    let mut first = night(1000, 0, 0, 100 << 20, 40 << 20);
    first.changes.as_mut().unwrap().has_parent = false;
    assert_eq!(ratios(&first), None);
    first.changes = None;
    assert_eq!(ratios(&first), None);
}

#[test]
fn thresholds_move_the_line() {
    let tonight = ratios(&night(1000, 300, 0, 8 << 20, 3 << 20)).unwrap();
    assert_eq!(judge(&tonight, &history(5), &Thresholds::default()), None);
    let strict = Thresholds {
        rewritten_share: 0.25,
        ..Thresholds::default()
    };
    let finding = judge(&tonight, &history(5), &strict).unwrap();
    assert_eq!(finding.reason, Reason::MassRewrite);
}

fn status_with_history(nights: usize) -> BackupPlanStatus {
    BackupPlanStatus {
        change_history: history(nights),
        ..BackupPlanStatus::default()
    }
}

fn record(status: &mut BackupPlanStatus, result: &RunResult, expected: bool) -> bool {
    let night = Night {
        result,
        expected,
        finished: now(),
    };
    record_night(status, night, &Thresholds::default(), Some(1)).is_some()
}

#[test]
fn a_flagged_night_sets_the_condition_and_stays_out_of_the_history() {
    let mut status = status_with_history(5);
    let attack = night(1000, 1000, 0, 100 << 20, 100 << 20);
    assert!(record(&mut status, &attack, false));
    assert_eq!(status.change_history.len(), 5);
    let flagged = status.suspicious_change.clone().unwrap();
    assert_eq!(flagged.reason, "MassRewrite");
    assert_eq!(&flagged.snapshot_id, attack.snapshot_id.as_ref().unwrap());
    let condition = find_condition(&status.conditions, types::SUSPICIOUS_CHANGE).unwrap();
    assert_eq!(condition.status, "True");
    assert_eq!(condition.reason, "MassRewrite");
    assert!(
        condition.message.contains(&format!(
            "neverwiped.io/acknowledge-suspicious-change={}",
            flagged.snapshot_id
        )),
        "{}",
        condition.message
    );

    // The quiet nights after it (the files are already encrypted) keep the flag.
    assert!(!record(&mut status, &usual(), false));
    assert_eq!(status.suspicious_change, Some(flagged));
    assert_eq!(status.change_history.len(), 6);
}

#[test]
fn a_usual_night_joins_the_history_and_says_so() {
    let mut status = status_with_history(CHANGE_HISTORY_LIMIT);
    assert!(!record(&mut status, &usual(), false));
    assert_eq!(status.change_history.len(), CHANGE_HISTORY_LIMIT);
    let condition = find_condition(&status.conditions, types::SUSPICIOUS_CHANGE).unwrap();
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "ChangeUsual")
    );
}

#[test]
fn an_expected_manual_run_is_neither_flagged_nor_learned() {
    let mut status = status_with_history(5);
    let migration = night(1000, 1000, 0, 100 << 20, 40 << 20);
    assert!(!record(&mut status, &migration, true));
    assert_eq!(status.suspicious_change, None);
    assert_eq!(status.change_history.len(), 5);
    assert!(status.conditions.is_empty());
}

fn plan_with(status: BackupPlanStatus, acknowledgement: Option<&str>) -> BackupPlan {
    let mut plan = BackupPlan::new("nightly", plan_spec());
    plan.metadata = ObjectMeta {
        namespace: Some("shop".into()),
        ..plan.metadata
    };
    plan.status = Some(status);
    if let Some(value) = acknowledgement {
        plan.metadata.annotations = Some(BTreeMap::from([(
            ANNOTATION_ACKNOWLEDGE_SUSPICIOUS_CHANGE.to_owned(),
            value.to_owned(),
        )]));
    }
    plan
}

fn keep_last(count: u32) -> KeepRules {
    KeepRules {
        last: Some(count),
        ..KeepRules::default()
    }
}

#[test]
fn retention_pauses_until_the_flagged_snapshot_is_acknowledged() {
    let mut status = status_with_history(5);
    let attack = night(1000, 1000, 0, 100 << 20, 100 << 20);
    record(&mut status, &attack, false);
    let id = attack.snapshot_id.clone().unwrap();

    let unacknowledged = plan_with(status.clone(), None);
    assert_eq!(
        retention(&unacknowledged, keep_last(1)),
        KeepRules::default()
    );
    // An acknowledgement of another snapshot does not count.
    let other = plan_with(status.clone(), Some("ffffffff"));
    assert_eq!(retention(&other, keep_last(1)), KeepRules::default());
    assert_eq!(acknowledge(&other, &mut status.clone(), now()), None);

    // The first 8 hex digits name it, as the snapshot listing shows them.
    let acknowledged = plan_with(status.clone(), Some(&id[..8]));
    assert_eq!(retention(&acknowledged, keep_last(1)), keep_last(1));
    let mut after = status.clone();
    assert!(acknowledge(&acknowledged, &mut after, now()).is_some());
    assert_eq!(after.suspicious_change, None);
    let condition = find_condition(&after.conditions, types::SUSPICIOUS_CHANGE).unwrap();
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "SuspiciousChangeAcknowledged")
    );
}

#[test]
fn a_plan_never_flagged_keeps_its_retention() {
    let plan = plan_with(status_with_history(3), None);
    assert_eq!(retention(&plan, keep_last(3)), keep_last(3));
}

#[test]
fn a_backup_always_keeps_its_parent_unless_retention_is_paused() {
    let plan = plan_with(status_with_history(3), None);
    assert_eq!(backup_retention(&plan, keep_last(1)), keep_last(2));
    assert_eq!(backup_retention(&plan, keep_last(5)), keep_last(5));
    let daily = KeepRules {
        daily: Some(1),
        ..KeepRules::default()
    };
    assert_eq!(
        backup_retention(&plan, daily),
        KeepRules {
            last: Some(2),
            ..daily
        }
    );
    assert_eq!(
        backup_retention(&plan, KeepRules::default()),
        KeepRules::default()
    );
    let mut status = status_with_history(5);
    record(&mut status, &night(1000, 1000, 0, 1 << 20, 1 << 20), false);
    let flagged = plan_with(status, None);
    assert_eq!(
        backup_retention(&flagged, keep_last(1)),
        KeepRules::default()
    );
}
