//! The BackupPlan reconciler: [`fetch`] what the plan names, [`decide`] (pure), then write the
//! decision's effects with [`crate::controller::effects::execute`].
//!
//! [`decide`] looks at the plan in a fixed order — its backup Jobs ([`runs`]), a run preparing
//! VolumeSnapshots ([`snapshots`]) between its hook Jobs ([`hooks`]), its prunes and checks
//! ([`maintenance`]) — to learn what occupies it ([`Occupant`]); resolves the spec ([`resolve`]);
//! then, if the plan is free, asks [`triggers`] whether a backup is due, or [`maintenance`]
//! whether a prune or check is. Beside those, [`copies`] copies to the destinations of
//! `spec.copies` and [`copy_prunes`] applies their retention; last, [`drills`] starts a restore
//! drill when one is due ([`drill_due`]) and nothing else of the plan runs or is due.

mod admit;
mod copies;
mod copy_prunes;
mod decide;
mod decision;
mod drill_due;
mod drills;
mod fetch;
mod hooks;
mod listing;
pub mod maintenance;
mod metrics;
mod occupant;
mod resolve;
mod runs;
mod snapshots;
mod suspect;
mod triggers;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::ResourceExt;
use serde_json::json;

use super::effects::{delete_object, execute, Delete};
use super::{list_if_served, Context, Error};
use crate::api::BackupPlan;
use crate::csi::VolumeSnapshot;
use crate::metrics::PlanLabels;

pub use decide::{decide, decide_with};
pub use decision::PlanDecision;
pub use fetch::{fetch, owned_by, ObservedPlan};
pub use occupant::Occupant;
pub use runs::plan_pod_alive;

/// The finalizer on every BackupPlan: deleting a plan first deletes what the operator created for
/// it (its Jobs, and the VolumeSnapshots and clones of its runs).
pub const FINALIZER: &str = "neverwiped.io/cleanup";

/// Reconciles one BackupPlan: adds the finalizer if it is missing and [`apply`] in the same
/// reconcile; or, once the plan is being deleted, [`cleanup`] and removes the finalizer.
///
/// The finalizer is added in the same reconcile that decides, so a new plan's first run does not
/// wait for the finalizer's own watch event.
#[tracing::instrument(name = "reconcile", skip_all, fields(kind = "BackupPlan", namespace = plan.namespace().unwrap_or_default(), name = %plan.name_any()))]
pub async fn reconcile(plan: Arc<BackupPlan>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = plan.namespace().ok_or(Error::Incomplete {
        kind: "BackupPlan",
        field: "namespace",
    })?;
    ctx.count_reconcile("BackupPlan");
    let api = Api::<BackupPlan>::namespaced(ctx.client.clone(), &namespace);
    let finalizers = plan.finalizers();
    let has_finalizer = finalizers.iter().any(|f| f == FINALIZER);
    if plan.metadata.deletion_timestamp.is_some() {
        if !has_finalizer {
            return Ok(Action::await_change());
        }
        let action = cleanup(plan.clone(), ctx).await?;
        let kept = finalizers.iter().filter(|f| *f != FINALIZER).cloned();
        set_finalizers(&api, &plan, kept.collect()).await?;
        return Ok(action);
    }
    if !has_finalizer {
        let mut with_ours = finalizers.to_vec();
        with_ours.push(FINALIZER.to_owned());
        set_finalizers(&api, &plan, with_ours).await?;
    }
    apply(plan, ctx).await
}

/// Sets the plan's finalizers; the resource version makes the patch fail (and the reconcile
/// retry) if they changed since the plan was read.
async fn set_finalizers(
    api: &Api<BackupPlan>,
    plan: &BackupPlan,
    finalizers: Vec<String>,
) -> Result<(), Error> {
    let patch = json!({
        "metadata": {"resourceVersion": plan.resource_version(), "finalizers": finalizers},
    });
    api.patch(
        &plan.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// Fetches what a plan names, [`decide`]s, and applies the decision.
pub async fn apply(plan: Arc<BackupPlan>, ctx: Arc<Context>) -> Result<Action, Error> {
    let own_namespace = ctx.settings.job.protection.jobs_namespace();
    let observed = fetch(&ctx.client, &plan, own_namespace).await?;
    let now = Timestamp::now();
    let decision = ctx.queue.with_gate(now, &admit::run_key(&plan), |gate| {
        decide_with(&plan, &observed, now, &ctx.settings, gate)
    });
    execute(&ctx, plan.as_ref(), &decision.effects()).await?;
    metrics::record(&ctx.metrics, &plan, &decision);
    let queued_before = plan.status.as_ref().and_then(|s| s.queued.as_ref());
    if let (None, Some(queued)) = (queued_before, &decision.status.queued) {
        let class = match queued.kind {
            crate::api::RunKind::Backup => "backup",
            _ => "maintenance",
        };
        let labels = crate::metrics::QueueLabels {
            class: class.into(),
        };
        ctx.metrics.queue.runs_queued.get_or_create(&labels).inc();
    }
    Ok(Action::requeue(decision.requeue_after))
}

/// Deletes what the operator created for a plan that is being deleted: its backup Jobs (a running
/// one is stopped; the repository stays valid, the next backup of another plan reuses what it
/// uploaded) and the VolumeSnapshots and clones of its runs. The plan's metrics go too, so an
/// alert on its last success does not fire forever.
pub async fn cleanup(plan: Arc<BackupPlan>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = plan.namespace().unwrap_or_default();
    let name = plan.name_any();
    let client = &ctx.client;
    // Backups, prunes and checks; restores are owned by their Restore, not by the plan.
    let jobs = Api::<Job>::namespaced(client.clone(), &namespace)
        .list(&ListParams::default().labels(&fetch::plan_selector(&name)))
        .await?;
    let runs = ListParams::default().labels(&fetch::run_selector(&name));
    let snapshots = list_if_served(
        &Api::<VolumeSnapshot>::namespaced(client.clone(), &namespace),
        &runs,
    )
    .await?
    .unwrap_or_default();
    let clones = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &namespace)
        .list(&runs)
        .await?;
    let plan = plan.as_ref();
    let deletes = (jobs.items.iter().filter(|j| owned_by(*j, plan)))
        .map(|j| Delete::Job(j.name_any()))
        .chain(
            (snapshots.iter().filter(|s| owned_by(*s, plan)))
                .map(|s| Delete::Snapshot(s.name_any())),
        )
        .chain(
            (clones.items.iter().filter(|c| owned_by(*c, plan)))
                .map(|c| Delete::Claim(c.name_any())),
        );
    for delete in deletes {
        delete_object(client, &namespace, &delete).await?;
    }
    if let Some(own_namespace) = ctx.settings.job.protection.jobs_namespace() {
        delete_remote_jobs(client, plan, own_namespace).await?;
    }
    ctx.queue.forget(&admit::run_key(plan), Timestamp::now());
    ctx.queue.forget(&drills::drill_key(plan), Timestamp::now());
    let labels = PlanLabels {
        namespace,
        plan: name,
    };
    for copy in &plan.spec.copies {
        ctx.queue
            .forget(&copies::copy_key(plan, &copy.name), Timestamp::now());
        ctx.queue.forget(
            &copy_prunes::copy_prune_key(plan, &copy.name),
            Timestamp::now(),
        );
        ctx.metrics.remove_copy(&labels, &copy.name);
    }
    ctx.metrics.remove_plan(&labels);
    tracing::info!(jobs = jobs.items.len(), "cleaned up a deleted BackupPlan");
    Ok(Action::await_change())
}

/// Deletes a plan's prune Jobs in the operator's namespace, with their password copies.
async fn delete_remote_jobs(
    client: &kube::Client,
    plan: &BackupPlan,
    own_namespace: &str,
) -> Result<(), Error> {
    let namespace = plan.namespace().unwrap_or_default();
    if own_namespace == namespace {
        return Ok(());
    }
    let selector = fetch::remote_selector(&namespace, &plan.name_any());
    let jobs = Api::<Job>::namespaced(client.clone(), own_namespace)
        .list(&ListParams::default().labels(&selector))
        .await?;
    for job in jobs
        .items
        .iter()
        .filter(|j| crate::job::remote_job_of(j, plan))
    {
        let delete = Delete::RemoteJob {
            namespace: own_namespace.to_owned(),
            name: job.name_any(),
        };
        delete_object(client, own_namespace, &delete).await?;
    }
    Ok(())
}
