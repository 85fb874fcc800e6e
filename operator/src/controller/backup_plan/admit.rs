//! A plan's runs at the gate ([`crate::controller::queue`]): what a run takes from the limits, its
//! admission, and how a run that waits shows in the status.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::resolve::ReadyPlan;
use super::triggers::RunRequest;
use crate::api::{BackupPlan, BackupPlanStatus, QueuedRun, RunKind, RunTrigger};
use crate::controller::queue::{Admission, Demand, Footprint, Gate, RunClass, RunKey};

/// The plan's place in the ledger.
pub fn run_key(plan: &BackupPlan) -> RunKey {
    RunKey::plan(plan.namespace().unwrap_or_default(), plan.name_any())
}

/// What a backup (`class` Backup, pinned to the node of directly read volumes) or a prune or
/// check (never pinned) takes.
pub fn footprint(plan: &BackupPlan, ready: &ReadyPlan, class: RunClass) -> Footprint {
    Footprint {
        class,
        node: match class {
            RunClass::Backup => ready.direct_node.clone(),
            _ => None,
        },
        host: plan.spec.repository.location().ok().map(|url| url.host()),
    }
}

/// The run that waits, as the status will show it when the gate says no.
pub struct Waiting {
    pub kind: RunKind,
    pub trigger: RunTrigger,
    pub scheduled_time: Option<Timestamp>,
    pub manual_trigger: Option<String>,
}

impl Waiting {
    pub fn backup(request: &RunRequest) -> Waiting {
        Waiting {
            kind: RunKind::Backup,
            trigger: request.trigger,
            scheduled_time: request.scheduled_time,
            manual_trigger: request.manual_trigger.clone(),
        }
    }
}

/// Asks the gate whether `waiting` may start now; when it may not, `status.queued` says where it
/// waits and why. Returns whether it starts.
pub fn admit(
    plan: &BackupPlan,
    footprint: Footprint,
    waiting: Waiting,
    status: &mut BackupPlanStatus,
    gate: &mut dyn Gate,
    now: Timestamp,
) -> bool {
    let since = status
        .queued
        .as_ref()
        .filter(|queued| queued.kind == waiting.kind)
        .map_or(now, |queued| queued.since.0);
    let demand = Demand {
        key: run_key(plan),
        footprint,
        since,
    };
    match gate.admit(&demand, now) {
        Admission::Admitted => {
            status.queued = None;
            true
        }
        Admission::Queued {
            position,
            waiting: total,
            blocked_by,
        } => {
            let mut queued = QueuedRun {
                kind: waiting.kind,
                trigger: waiting.trigger,
                scheduled_time: waiting.scheduled_time.map(Time),
                manual_trigger: waiting.manual_trigger,
                since: Time(since),
                position: i64::try_from(position).unwrap_or(i64::MAX),
                waiting: i64::try_from(total).unwrap_or(i64::MAX),
                message: blocked_by.to_string(),
            };
            if let Some(shown) = status
                .queued
                .as_ref()
                .filter(|s| place_still_shown(s, &queued))
            {
                (queued.position, queued.waiting) = (shown.position, shown.waiting);
            }
            status.queued = Some(queued);
            false
        }
    }
}

/// Whether the place `shown` in the status may stay for the run now at `now`'s place: the same
/// run, waiting for the same limit, at a position that has neither halved nor doubled. Each
/// status write is one more reconcile of the plan, and every admission moves every run behind
/// it: with the position rewritten at each change, a thousand waiting plans would rewrite their
/// status in turn for as long as the queue moves. This way a run's place is written a few times
/// (about log₂ of its first position), and is right within a factor of two.
fn place_still_shown(shown: &QueuedRun, now: &QueuedRun) -> bool {
    let same_run = (
        shown.kind,
        shown.trigger,
        &shown.scheduled_time,
        &shown.manual_trigger,
    ) == (
        now.kind,
        now.trigger,
        &now.scheduled_time,
        &now.manual_trigger,
    );
    same_run
        && shown.since == now.since
        && shown.message == now.message
        && now.position.saturating_mul(2) > shown.position
        && now.position < shown.position.saturating_mul(2)
}
