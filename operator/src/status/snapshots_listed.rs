//! The `SnapshotsListed` condition: the plan's listing (`status.snapshots`, as the sidecar listed
//! it at the end of a backup or prune) compared with the plan's last successful backup. A gate
//! that withholds the newest snapshots (so that a restore of `latest` brings back an older one)
//! shows as `SnapshotsListed=False`, reason `SnapshotsWithheld`.

use jiff::Timestamp;

use crate::api::{BackupPlanStatus, PlanSnapshots};
use crate::conditions::{find_condition, set_condition, types, ConditionStatus, Reason};

/// Sets `SnapshotsListed` from the listing in `status.snapshots` and the last successful backup
/// in `status.history`; the note of a Warning Event when it became `False`.
pub(super) fn set_snapshots_listed(
    status: &mut BackupPlanStatus,
    now: Timestamp,
) -> Option<String> {
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
    set_condition(
        &mut status.conditions,
        types::SNAPSHOTS_LISTED,
        state,
        reason,
        message,
        generation,
        now,
    );
    withheld.filter(|_| !was_false)
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
