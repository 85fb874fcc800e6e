//! The plan's own snapshots in its status (`status.snapshots`), as the sidecar listed them at
//! the end of a backup or prune. The conditions' builder compares them with the plan's last
//! successful backup (`status/snapshots_listed.rs`): a gate that withholds the newest snapshots
//! (so that a restore of `latest` brings back an older one) shows as `SnapshotsListed=False`,
//! reason `SnapshotsWithheld`, and a Warning Event.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::{BackupPlanStatus, PlanSnapshots, SnapshotRecord};
use crate::conditions::Reason;
use crate::controller::effects::PlannedEvent;
use crate::recorder::EventType;
use crate::status::{binary_quantity, JobEnd};

/// Updates `status.snapshots` from a finished Job's result, when it listed the plan's snapshots
/// (a backup, and a prune, do; a failed run does not, and the last list stays).
pub fn record_snapshots(status: &mut BackupPlanStatus, end: &JobEnd, now: Timestamp) {
    let Some(listed) = end.result.as_ref().and_then(|r| r.host_snapshots.as_ref()) else {
        return;
    };
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
}

/// The Warning Event of a listing that newly withholds the last successful backup's snapshot
/// (`note` from [`crate::status::set_plan_conditions`]).
pub fn withheld_event(note: String) -> PlannedEvent {
    PlannedEvent {
        type_: EventType::Warning,
        reason: Reason::SnapshotsWithheld,
        note,
    }
}

#[cfg(test)]
#[path = "listing_tests.rs"]
mod tests;
