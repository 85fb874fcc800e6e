//! What a finished copy Job means for its destination's `status.copies[]` entry, and how far the
//! destination is behind the plan's snapshots. Pure: no client, no clock.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::outcome::JobEnd;
use crate::api::{CopiedSnapshot, CopyRun, CopyStatus, PlanSnapshots, RunOutcome};

/// How many hex digits of an id the status shows (what a Restore's `snapshot` accepts).
const SHORT_ID_LEN: usize = 8;

/// How far a destination is behind: the plan's listed snapshots it does not hold yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyLag {
    pub behind_snapshots: i64,
    /// When the oldest of them was taken.
    pub behind_since: Option<Timestamp>,
}

impl CopyLag {
    /// Seconds between `behind_since` and `now`; 0 when caught up.
    pub fn seconds_at(&self, now: Timestamp) -> i64 {
        self.behind_since
            .map_or(0, |since| now.duration_since(since).as_secs().max(0))
    }
}

/// The lag of a destination that holds `copied` (none known: nothing yet), against the plan's
/// snapshots as `listed` (none listed yet: nothing to copy). A snapshot taken after the copied
/// one is behind; without a copied one, every snapshot of the plan is.
pub fn copy_lag(listed: Option<&PlanSnapshots>, copied: Option<&CopiedSnapshot>) -> CopyLag {
    let Some(listed) = listed else {
        return CopyLag {
            behind_snapshots: 0,
            behind_since: None,
        };
    };
    let newer: Vec<Timestamp> = listed
        .newest
        .iter()
        .filter(|s| copied.is_none_or(|c| s.time.0 > c.time.0 && s.id != c.id))
        .map(|s| s.time.0)
        .collect();
    let counted = i64::try_from(newer.len()).unwrap_or(i64::MAX);
    let behind_snapshots = match copied {
        // The listing holds the newest few: the total counts the older ones too.
        None => listed.total.max(counted),
        Some(_) => counted,
    };
    CopyLag {
        behind_snapshots,
        behind_since: newer.into_iter().min(),
    }
}

/// Records the copy Job `job_name` that ended as `end` on its destination's entry: the run, its
/// error (cleared by a success), and the newest snapshot a success put in the destination.
pub fn record_copy_run(entry: &mut CopyStatus, job_name: &str, end: &JobEnd, now: Timestamp) {
    let result = end.result.as_ref();
    let to_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let succeeded = end.outcome.is_success();
    entry.last_run = Some(CopyRun {
        job_name: job_name.to_owned(),
        result: if succeeded {
            RunOutcome::Succeeded
        } else {
            RunOutcome::Failed
        },
        reason: end.reason.into(),
        completion_time: Some(Time(end.completion_time.unwrap_or(now))),
        snapshots_copied: result.map(|r| to_i64(r.files)),
        bytes_sent: result.map(|r| to_i64(r.bytes_transferred)),
    });
    if entry.active_job.as_deref() == Some(job_name) {
        entry.active_job = None;
    }
    if !succeeded {
        entry.last_error = Some(
            end.message
                .clone()
                .unwrap_or_else(|| end.reason.as_str().to_owned()),
        );
        return;
    }
    entry.last_error = None;
    let copied = result.and_then(|r| {
        let id = r.snapshot_id.as_deref()?;
        let time = r.snapshot_time.as_deref()?.parse().ok()?;
        Some(CopiedSnapshot {
            id: id.chars().take(SHORT_ID_LEN).collect(),
            time: Time(time),
        })
    });
    // A run that chose nothing (no snapshot of the plan yet) leaves the last one known.
    let newer = |c: &CopiedSnapshot| {
        entry
            .last_copied_snapshot
            .as_ref()
            .is_none_or(|known| c.time.0 >= known.time.0)
    };
    if let Some(copied) = copied.filter(newer) {
        entry.last_copied_snapshot = Some(copied);
    }
}

/// Sets the entry's lag from the plan's listed snapshots.
pub fn set_copy_lag(entry: &mut CopyStatus, listed: Option<&PlanSnapshots>) -> CopyLag {
    let lag = copy_lag(listed, entry.last_copied_snapshot.as_ref());
    entry.behind_snapshots = lag.behind_snapshots;
    entry.behind_since = lag.behind_since.map(Time);
    lag
}
