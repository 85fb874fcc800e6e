//! When a plan's restore drill is due, and why a due one is put off: a request
//! (`neverwiped.io/verify-now`) first, then `spec.verify.schedule`. A drill never runs beside the
//! plan's backup, prune or check, nor while a backup is due, and needs a snapshot to drill; a
//! put-off drill keeps its scheduled time and starts once what held it is done. Also how much
//! scratch space it gets. No I/O.

use jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use super::occupant::Occupant;
use super::resolve::ReadyPlan;
use crate::api::{
    BackupPlan, BackupPlanStatus, RunKind, RunTrigger, VerifySpec, VerifyStatus,
    ANNOTATION_VERIFY_NOW,
};
use crate::plan::pending_manual_trigger;
use crate::schedule::{self, Schedule, ScheduleDecision, ScheduleState};

/// The least room a drill that loads databases gets for them, when the plan's runs recorded no
/// dump (or small ones): a throwaway server's own files take a few hundred MiB.
pub const DUMP_ROOM_FLOOR: u64 = 1 << 30;
/// A loaded database takes more room than its dump (indexes, free space, the write-ahead log).
const DUMP_ROOM_FACTOR: u64 = 3;
/// Each restored file may end in a partly used block of the scratch filesystem.
const FILE_BLOCK: u64 = 4096;

/// A drill due now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueDrill {
    pub trigger: RunTrigger,
    /// The scheduled time it runs for; `None` for a request.
    pub scheduled_time: Option<Timestamp>,
    /// The `neverwiped.io/verify-now` value it acts on.
    pub request: Option<String>,
}

/// The `neverwiped.io/verify-now` value not acted on yet.
pub fn pending_request<'a>(plan: &'a BackupPlan, status: Option<&VerifyStatus>) -> Option<&'a str> {
    let value = plan.annotations().get(ANNOTATION_VERIFY_NOW)?;
    let acted_on = status.and_then(|s| s.last_request.as_deref());
    (acted_on != Some(value.as_str())).then_some(value.as_str())
}

/// The plan's drill schedule, in `spec.timeZone`, `H` hashed from the plan and `verify`.
pub fn drill_schedule(plan: &BackupPlan, verify: &VerifySpec) -> Result<Schedule, String> {
    let seed = format!(
        "{}/{}/verify",
        plan.namespace().unwrap_or_default(),
        plan.name_any()
    );
    Schedule::parse_hashed(&verify.schedule, &plan.spec.time_zone, &seed)
        .map_err(|error| format!("spec.verify.schedule: {error}"))
}

/// What the schedule says at `now` (only for a plan with `spec.verify`): a missed drill runs
/// late rather than never, whatever its age.
pub fn scheduled(
    plan: &BackupPlan,
    schedule: &Schedule,
    verify: &VerifySpec,
    status: &VerifyStatus,
    now: Timestamp,
) -> ScheduleDecision {
    let state = ScheduleState {
        last_schedule_time: status.last_schedule_time.as_ref().map(|t| t.0),
        created: (plan.metadata.creation_timestamp.as_ref()).map_or(now, |t| t.0),
        suspended: verify.suspend,
    };
    schedule::decide(schedule, &state, now, SignedDuration::MAX)
}

/// Why a due drill waits, or `None` when it may start: what occupies the plan, a backup that is
/// due (queued, requested, or its scheduled time passed), or no snapshot to drill.
pub fn put_off(
    plan: &BackupPlan,
    ready: &ReadyPlan,
    occupant: &Occupant,
    status: &BackupPlanStatus,
    now: Timestamp,
) -> Option<String> {
    if let Some(run) = occupant.active_run() {
        let what = match run.kind {
            RunKind::Backup => "a backup",
            RunKind::Prune => "a prune",
            RunKind::Check => "a check",
        };
        return Some(format!("{what} of the plan runs (Job {})", run.job_name));
    }
    if let Some(queued) = &status.queued {
        let what = match queued.kind {
            RunKind::Backup => "a backup",
            RunKind::Prune => "a prune",
            RunKind::Check => "a check",
        };
        return Some(format!(
            "{what} of the plan waits for a slot; the drill runs after it"
        ));
    }
    if pending_manual_trigger(&plan.spec, Some(status)).is_some() {
        return Some("a manual backup of the plan is due; the drill runs after it".into());
    }
    if let Some(due) = backup_due(plan, ready, status, now) {
        return Some(format!(
            "the backup scheduled at {due} is due; the drill runs after it"
        ));
    }
    let listed = status.snapshots.as_ref();
    if listed.is_none_or(|s| s.total == 0 || s.newest.is_empty()) {
        return Some("the plan has no snapshot yet; the drill runs after its first backup".into());
    }
    None
}

/// A scheduled backup time that passed and that no run acted on yet.
fn backup_due(
    plan: &BackupPlan,
    ready: &ReadyPlan,
    status: &BackupPlanStatus,
    now: Timestamp,
) -> Option<Timestamp> {
    if plan.spec.suspend {
        return None;
    }
    let last = ready.plan.schedule.last_at_or_before(now)?;
    let created = plan.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let acted_on = status.last_schedule_time.as_ref().map(|t| t.0);
    let since = acted_on.or(created);
    since.is_none_or(|since| last > since).then_some(last)
}

/// The scratch space a drill of `verify.snapshot` needs: the snapshot's content (with a block
/// per file), and, when it loads databases, three times the largest dumps a run of the plan
/// recorded, at least [`DUMP_ROOM_FLOOR`]. A snapshot not in the listing (an older id) is sized
/// as the largest listed.
pub fn scratch_bytes(plan: &BackupPlan, verify: &VerifySpec, status: &BackupPlanStatus) -> u64 {
    let listed = status.snapshots.as_ref().map(|s| &s.newest[..]);
    let listed = listed.unwrap_or_default();
    let chosen = match verify.snapshot.as_str() {
        "latest" => listed.first(),
        id => listed
            .iter()
            .find(|s| s.id.starts_with(id) || id.starts_with(&s.id)),
    };
    let largest = listed.iter().max_by_key(|s| s.size_bytes);
    let files_room = chosen.or(largest).map_or(0, |s| {
        let size = u64::try_from(s.size_bytes).unwrap_or(0);
        let files = u64::try_from(s.files).unwrap_or(0);
        size.saturating_add(files.saturating_mul(FILE_BLOCK))
    });
    if !verify.databases || plan.spec.databases.is_empty() {
        return files_room;
    }
    let dumps = (status.history.iter())
        .map(|run| {
            let bytes = run.databases.iter().map(|d| d.dump_bytes.max(0) as u64);
            bytes.fold(0u64, u64::saturating_add)
        })
        .max()
        .unwrap_or(0);
    let dump_room = dumps.saturating_mul(DUMP_ROOM_FACTOR).max(DUMP_ROOM_FLOOR);
    files_room.saturating_add(dump_room)
}
