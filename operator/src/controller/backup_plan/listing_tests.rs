use super::*;
use crate::api::{RunOutcome, RunRecord, RunTrigger};
use crate::conditions::{find_condition, types};
use crate::fixtures::snapshot_record as snapshot;
use crate::status::{set_plan_conditions, withheld_message, PlanConditions};

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn listing(newest: Vec<SnapshotRecord>) -> PlanSnapshots {
    PlanSnapshots {
        total: newest.len() as i64,
        newest,
        listed_time: Time(at("2026-12-02T03:00:00Z")),
    }
}

fn success(id: &str, started: &str) -> RunRecord {
    RunRecord {
        start_time: Some(Time(at(started))),
        snapshot_id: Some(id.into()),
        ..RunRecord::without_figures(
            "nightly-1".into(),
            RunTrigger::Schedule,
            RunOutcome::Succeeded,
            "Succeeded".into(),
        )
    }
}

#[test]
fn a_listing_without_the_last_success_or_anything_newer_withholds_it() {
    let older = listing(vec![snapshot("aaaa1111", "2026-11-30T02:30:05Z")]);
    let message = withheld_message(&older, "bbbb2222", at("2026-12-01T02:30:00Z")).unwrap();
    assert!(
        message.contains("bbbb2222") && message.contains("withholds"),
        "{message}"
    );
    assert!(withheld_message(&listing(vec![]), "bbbb2222", at("2026-12-01T02:30:00Z")).is_some());
}

#[test]
fn a_listing_with_the_last_success_or_newer_snapshots_withholds_nothing() {
    let with_it = listing(vec![
        snapshot("bbbb2222cccc", "2026-12-01T02:30:05Z"),
        snapshot("aaaa1111", "2026-11-30T02:30:05Z"),
    ]);
    assert_eq!(
        withheld_message(&with_it, "bbbb2222", at("2026-12-01T02:30:00Z")),
        None
    );
    let newer_only = listing(vec![snapshot("dddd4444", "2026-12-02T02:30:05Z")]);
    assert_eq!(
        withheld_message(&newer_only, "bbbb2222", at("2026-12-01T02:30:00Z")),
        None
    );
}

/// The conditions' builder at the end of a reconcile that recorded a listing; the Event it asks
/// for.
fn compare_with_last_success(
    status: &mut BackupPlanStatus,
    now: Timestamp,
) -> Option<PlannedEvent> {
    let conditions = PlanConditions {
        problems: &[],
        ready_message: "",
        preparing: None,
        unmatched_selectors: None,
        listing_recorded: true,
    };
    set_plan_conditions(status, conditions, None, now).map(withheld_event)
}

#[test]
fn the_condition_turns_false_with_one_event_and_back_to_true() {
    let now = at("2026-12-02T03:00:00Z");
    let mut status = BackupPlanStatus {
        history: vec![
            success("bbbb2222", "2026-12-01T02:30:00Z"),
            success("aaaa1111", "2026-11-30T02:30:00Z"),
        ],
        ..BackupPlanStatus::default()
    };
    status.snapshots = Some(listing(vec![snapshot("aaaa1111", "2026-11-30T02:30:05Z")]));
    let event = compare_with_last_success(&mut status, now).expect("a Warning Event");
    assert_eq!(event.reason, Reason::SnapshotsWithheld);
    assert_eq!(event.type_, EventType::Warning);
    let condition = find_condition(&status.conditions, types::SNAPSHOTS_LISTED).unwrap();
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "SnapshotsWithheld")
    );
    assert!(
        compare_with_last_success(&mut status, now).is_none(),
        "one Event, not one per listing"
    );

    status.snapshots = Some(listing(vec![snapshot("bbbb2222", "2026-12-01T02:30:05Z")]));
    assert!(compare_with_last_success(&mut status, now).is_none());
    let condition = find_condition(&status.conditions, types::SNAPSHOTS_LISTED).unwrap();
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("True", "SnapshotsListed")
    );
}
