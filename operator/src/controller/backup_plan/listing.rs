//! The plan's own snapshots in its status (`status.snapshots`), as the sidecar listed them at
//! the end of a backup or prune, compared with the plan's last successful backup: a gate that
//! withholds the newest snapshots (so that a restore of `latest` brings back an older one) shows
//! as `SnapshotsListed=False`, reason `SnapshotsWithheld`, and a Warning Event.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::{BackupPlanStatus, PlanSnapshots, SnapshotRecord};
use crate::conditions::{find_condition, set_condition, types, ConditionStatus, Reason};
use crate::controller::effects::PlannedEvent;
use crate::recorder::EventType;
use crate::status::{binary_quantity, JobEnd};

/// Updates `status.snapshots` from a finished Job's result, when it listed the plan's snapshots
/// (a backup, and a prune, do; a failed run does not, and the last list stays), and the
/// `SnapshotsListed` condition; a Warning Event when the listing newly withholds the last
/// successful backup's snapshot.
pub fn record_snapshots(
    status: &mut BackupPlanStatus,
    end: &JobEnd,
    now: Timestamp,
) -> Option<PlannedEvent> {
    let listed = end
        .result
        .as_ref()
        .and_then(|r| r.host_snapshots.as_ref())?;
    let to_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    status.snapshots = Some(PlanSnapshots {
        total: to_i64(listed.total),
        newest: listed
            .newest
            .iter()
            .take(neverwiped_contract::HOST_SNAPSHOTS_LISTED)
            // The sidecar writes RFC 3339; an entry whose time does not parse is left out.
            .filter_map(|entry| {
                Some(SnapshotRecord {
                    id: entry.id.clone(),
                    time: Time(entry.time.parse().ok()?),
                    files: to_i64(entry.files),
                    size_bytes: to_i64(entry.size_bytes),
                    size: binary_quantity(entry.size_bytes),
                    tags: entry.tags.clone(),
                })
            })
            .collect(),
        listed_time: Time(end.completion_time.unwrap_or(now)),
    });
    compare_with_last_success(status, now)
}

/// Sets `SnapshotsListed` from the listing in `status.snapshots` and the last successful backup
/// in `status.history`; the Event when it became `False`.
fn compare_with_last_success(
    status: &mut BackupPlanStatus,
    now: Timestamp,
) -> Option<PlannedEvent> {
    let listing = status.snapshots.as_ref()?;
    let last = status
        .history
        .iter()
        .filter(|run| run.result.is_success())
        .filter_map(|run| Some((run.snapshot_id.as_deref()?, run.start_time.as_ref()?.0)))
        .max_by_key(|(_, started)| *started)?;
    let withheld = withheld_message(listing, last.0, last.1);
    let was_false = find_condition(&status.conditions, types::SNAPSHOTS_LISTED)
        .is_some_and(|c| ConditionStatus::of(c) == ConditionStatus::False);
    let generation = status.observed_generation;
    let (state, reason, message) = match &withheld {
        Some(message) => (
            ConditionStatus::False,
            Reason::SnapshotsWithheld,
            message.clone(),
        ),
        None => (
            ConditionStatus::True,
            Reason::SnapshotsListed,
            format!(
                "the gate's listing has the last successful backup's snapshot {}",
                last.0
            ),
        ),
    };
    let conditions = &mut status.conditions;
    set_condition(
        conditions,
        types::SNAPSHOTS_LISTED,
        state,
        reason,
        message,
        generation,
        now,
    );
    let note = withheld.filter(|_| !was_false)?;
    Some(PlannedEvent {
        type_: EventType::Warning,
        reason: Reason::SnapshotsWithheld,
        note,
    })
}

/// Why `listing` withholds the snapshot `last_id` of the last successful backup, started at
/// `last_started`: it lists neither that snapshot nor any taken since (a listing that pushed it
/// out of its newest few with newer ones withholds nothing).
pub fn withheld_message(
    listing: &PlanSnapshots,
    last_id: &str,
    last_started: Timestamp,
) -> Option<String> {
    let listed = |id: &str| id.starts_with(last_id) || last_id.starts_with(id);
    if listing.newest.iter().any(|s| listed(&s.id)) {
        return None;
    }
    let newest = listing.newest.iter().map(|s| s.time.0).max();
    if newest.is_some_and(|time| time >= last_started) {
        return None;
    }
    let newest = newest.map_or("no snapshot".to_owned(), |time| {
        format!("its newest from {time}")
    });
    Some(format!(
        "the gate's listing at {} has {newest}, not the snapshot {last_id} of the last successful backup (started {last_started}): the gate withholds snapshots, and a restore of latest would bring back an older one; check the gate and its storage",
        listing.listed_time.0
    ))
}

#[cfg(test)]
#[path = "listing_tests.rs"]
mod tests;
