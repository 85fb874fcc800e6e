//! Prometheus metrics, served at `/metrics`.
//!
//! The one to alert on is `neverwiped_backup_last_success_timestamp_seconds`: it is set from each
//! plan's status on every reconcile, so it survives operator restarts, e.g.
//! `time() - neverwiped_backup_last_success_timestamp_seconds >
//! neverwiped_backup_schedule_interval_seconds + 2 * 3600`. The repository gauges (size,
//! snapshots, last check) are set from the status the same way, and so are the restore drills'
//! (`neverwiped_restore_drill_*`: the last drill's recovery seconds and result, its last success,
//! the plan's objective).

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

use crate::api::{DrillOutcome, RunOutcome};
use crate::conditions::Reason;
use crate::job::MaintenanceKind;

/// Labels of a plan's metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PlanLabels {
    pub namespace: String,
    pub plan: String,
}

/// Labels of a finished run.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RunLabels {
    pub namespace: String,
    pub plan: String,
    /// `Succeeded`, `SucceededWithWarnings` or `Failed` ([`outcome_label`]).
    pub result: &'static str,
    /// The run's reason, e.g. `WrongPassword`.
    pub reason: ReasonLabel,
}

/// Labels of a finished prune or check.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MaintenanceLabels {
    pub namespace: String,
    pub plan: String,
    /// `prune` or `check`.
    pub kind: &'static str,
    /// `Succeeded` or `Failed` ([`outcome_label`]).
    pub result: &'static str,
}

/// Labels of a plan's copy to one destination.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CopyLabels {
    pub namespace: String,
    pub plan: String,
    /// The destination's name in `spec.copies`.
    pub copy: String,
}

/// Labels of a finished copy.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CopyRunLabels {
    pub namespace: String,
    pub plan: String,
    pub copy: String,
    /// `Succeeded` or `Failed` ([`outcome_label`]).
    pub outcome: &'static str,
}

/// Labels of a finished restore drill.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DrillRunLabels {
    pub namespace: String,
    pub plan: String,
    /// `Succeeded`, `SucceededOverObjective` or `Failed` ([`drill_outcome_label`]).
    pub result: &'static str,
}

/// A drill's outcome as a label value.
pub fn drill_outcome_label(outcome: DrillOutcome) -> &'static str {
    match outcome {
        DrillOutcome::Succeeded => "Succeeded",
        DrillOutcome::SucceededOverObjective => "SucceededOverObjective",
        DrillOutcome::Failed => "Failed",
    }
}

/// Labels of a finished prune of a copy destination, as [`MaintenanceLabels`] of a plan's.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CopyPruneLabels {
    pub namespace: String,
    pub plan: String,
    pub copy: String,
    /// `Succeeded` or `Failed` ([`outcome_label`]).
    pub result: &'static str,
}

/// Labels of reconciliations.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// `BackupPlan` or `Restore`.
    pub kind: String,
}

/// Labels of reconcile errors.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub kind: String,
    /// The error's label, from [`crate::controller::Error::metric_label`].
    pub error: String,
}

/// Labels of the operator's requests to the API server.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiRequestLabels {
    /// `GET`, `WATCH`, `POST`, `PUT`, `PATCH`, `DELETE`.
    pub verb: String,
}

/// Labels of the concurrency queue's gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    /// `backup` or `maintenance`.
    pub class: String,
}

/// Every outcome a run can have (a new one fails to compile in [`outcome_label`] first).
const ALL_OUTCOMES: [RunOutcome; 3] = [
    RunOutcome::Succeeded,
    RunOutcome::SucceededWithWarnings,
    RunOutcome::Failed,
];

/// The `result` label of a finished run: the outcome's name in the API.
pub fn outcome_label(outcome: RunOutcome) -> &'static str {
    match outcome {
        RunOutcome::Succeeded => "Succeeded",
        RunOutcome::SucceededWithWarnings => "SucceededWithWarnings",
        RunOutcome::Failed => "Failed",
    }
}

/// A reason as a label value: the string conditions and Events carry (alerts match on it).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct ReasonLabel(pub Reason);

impl EncodeLabelValue for ReasonLabel {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(encoder, self.0.as_str())
    }
}

type HistogramConstructor = fn() -> Histogram;

/// Every metric the operator exports.
pub struct Metrics {
    registry: Registry,
    pub backup_runs: Family<RunLabels, Counter>,
    pub backup_duration_seconds: Family<PlanLabels, Histogram, HistogramConstructor>,
    pub backup_last_success_timestamp_seconds: Family<PlanLabels, Gauge>,
    pub backup_bytes_sent: Family<PlanLabels, Counter>,
    pub backup_missed_runs: Family<PlanLabels, Counter>,
    /// The nominal time between two scheduled backups of a plan.
    pub backup_schedule_interval_seconds: Family<PlanLabels, Gauge>,
    pub repository_size_bytes: Family<PlanLabels, Gauge>,
    pub repository_snapshots: Family<PlanLabels, Gauge>,
    /// 1 when the plan's last check found the repository sound, 0 when it failed.
    pub repository_check_ok: Family<PlanLabels, Gauge>,
    /// 1 while a backup far outside the plan's usual changes waits for an admin's
    /// acknowledgement (its retention is paused), 0 otherwise.
    pub suspicious_change: Family<PlanLabels, Gauge>,
    pub maintenance_runs: Family<MaintenanceLabels, Counter>,
    pub prune_freed_bytes: Family<PlanLabels, Counter>,
    pub reconciliations: Family<ReconcileLabels, Counter>,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    /// 1 while this replica holds the leader Lease and runs the controllers.
    pub leader: Gauge,
    /// The concurrency limits' queue.
    pub queue: QueueMetrics,
    /// The plans' copies to other repositories.
    pub copies: CopyMetrics,
    /// The plans' restore drills.
    pub drills: DrillMetrics,
    /// Requests the operator sent to the API server, by verb.
    pub api_requests: Family<ApiRequestLabels, Counter>,
}

fn duration_histogram() -> Histogram {
    // 1 s to about 9 hours.
    Histogram::new(exponential_buckets(1.0, 2.0, 16))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("neverwiped");
        let metrics = Metrics {
            backup_runs: Family::default(),
            backup_duration_seconds: Family::new_with_constructor(
                duration_histogram as HistogramConstructor,
            ),
            backup_last_success_timestamp_seconds: Family::default(),
            backup_bytes_sent: Family::default(),
            backup_missed_runs: Family::default(),
            backup_schedule_interval_seconds: Family::default(),
            repository_size_bytes: Family::default(),
            repository_snapshots: Family::default(),
            repository_check_ok: Family::default(),
            suspicious_change: Family::default(),
            maintenance_runs: Family::default(),
            prune_freed_bytes: Family::default(),
            reconciliations: Family::default(),
            reconcile_errors: Family::default(),
            leader: Gauge::default(),
            queue: QueueMetrics::default(),
            copies: CopyMetrics::default(),
            drills: DrillMetrics::default(),
            api_requests: Family::default(),
            registry: Registry::default(),
        };
        registry.register(
            "backup_runs",
            "Finished backup runs by plan, result and reason",
            metrics.backup_runs.clone(),
        );
        registry.register(
            "backup_duration_seconds",
            "Duration of finished backup runs",
            metrics.backup_duration_seconds.clone(),
        );
        registry.register(
            "backup_last_success_timestamp_seconds",
            "Unix time when the plan's last successful backup completed",
            metrics.backup_last_success_timestamp_seconds.clone(),
        );
        registry.register(
            "backup_bytes_sent",
            "Bytes sent to the repository by finished backup runs",
            metrics.backup_bytes_sent.clone(),
        );
        registry.register(
            "backup_missed_runs",
            "Scheduled backups that did not start on time",
            metrics.backup_missed_runs.clone(),
        );
        registry.register(
            "backup_schedule_interval_seconds",
            "Nominal seconds between two scheduled backups of the plan",
            metrics.backup_schedule_interval_seconds.clone(),
        );
        registry.register(
            "repository_size_bytes",
            "Bytes the gate stores for the plan's repository, as last measured",
            metrics.repository_size_bytes.clone(),
        );
        registry.register(
            "repository_snapshots",
            "Snapshots in the plan's repository, as last measured",
            metrics.repository_snapshots.clone(),
        );
        registry.register(
            "repository_check_ok",
            "1 when the plan's last repository check found no problem, 0 when it failed",
            metrics.repository_check_ok.clone(),
        );
        registry.register(
            "maintenance_runs",
            "Finished prunes and checks by plan, kind and result",
            metrics.maintenance_runs.clone(),
        );
        registry.register(
            "prune_freed_bytes",
            "Bytes freed in the repository by the plan's prunes",
            metrics.prune_freed_bytes.clone(),
        );
        registry.register(
            "reconciliations",
            "Reconciliations by kind",
            metrics.reconciliations.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Failed reconciliations by kind and error",
            metrics.reconcile_errors.clone(),
        );
        register_queue_metrics(&mut registry, &metrics);
        Metrics {
            registry,
            ..metrics
        }
    }
}

/// The concurrency limits' queue, by class (`backup`, `maintenance`).
#[derive(Default)]
pub struct QueueMetrics {
    /// Runs waiting for a slot.
    pub queued_runs: Family<QueueLabels, Gauge>,
    /// Runs holding a slot (their Job runs, or was just admitted).
    pub running_runs: Family<QueueLabels, Gauge>,
    /// Runs that had to wait for a slot before they started.
    pub runs_queued: Family<QueueLabels, Counter>,
}

/// The plans' copies, by destination.
#[derive(Default)]
pub struct CopyMetrics {
    /// Seconds since the oldest of the plan's snapshots the destination lacks was taken; 0 when
    /// it holds them all. Set at each reconcile of the plan (every few minutes while it lags).
    pub lag_seconds: Family<CopyLabels, Gauge>,
    /// Finished copy Jobs by outcome.
    pub runs: Family<CopyRunLabels, Counter>,
    /// Finished prunes of destinations (their retention) by result.
    pub prune_runs: Family<CopyPruneLabels, Counter>,
    /// Bytes the destinations' prunes freed.
    pub prune_freed_bytes: Family<CopyLabels, Counter>,
}

/// The plans' restore drills, set from each plan's `status.verify` at every reconcile (so they
/// survive operator restarts), the run counter when a drill finishes.
#[derive(Default)]
pub struct DrillMetrics {
    /// The last finished drill's recovery time: every volume and database, one after the other.
    pub duration_seconds: Family<PlanLabels, Gauge<f64, AtomicU64>>,
    /// When the last drill that proved the data (within its objective or not) ended.
    pub last_success_timestamp_seconds: Family<PlanLabels, Gauge>,
    /// 1 when the last finished drill proved the data, 0 when it failed.
    pub last_result: Family<PlanLabels, Gauge>,
    /// `spec.verify.recoveryTimeObjective` in seconds, while one is set.
    pub objective_seconds: Family<PlanLabels, Gauge>,
    /// Finished drills by result.
    pub runs: Family<DrillRunLabels, Counter>,
}

fn register_drill_metrics(registry: &mut Registry, drills: &DrillMetrics) {
    registry.register(
        "restore_drill_duration_seconds",
        "Recovery seconds of the plan's last finished restore drill (every volume and database)",
        drills.duration_seconds.clone(),
    );
    registry.register(
        "restore_drill_last_success_timestamp_seconds",
        "Unix time when the plan's last restore drill that proved the data ended",
        drills.last_success_timestamp_seconds.clone(),
    );
    registry.register(
        "restore_drill_last_result",
        "1 when the plan's last restore drill proved the data (within its objective or not), 0 when it failed",
        drills.last_result.clone(),
    );
    registry.register(
        "restore_drill_objective_seconds",
        "The plan's recovery time objective (spec.verify.recoveryTimeObjective) in seconds",
        drills.objective_seconds.clone(),
    );
    registry.register(
        "restore_drill_runs",
        "Finished restore drills by plan and result",
        drills.runs.clone(),
    );
}

fn register_copy_metrics(registry: &mut Registry, copies: &CopyMetrics) {
    registry.register(
        "copy_lag_seconds",
        "Seconds since the oldest snapshot of the plan that the copy destination lacks was taken; 0 when it holds them all",
        copies.lag_seconds.clone(),
    );
    registry.register(
        "copy_runs",
        "Finished copy Jobs by plan, destination and outcome",
        copies.runs.clone(),
    );
    registry.register(
        "copy_prune_runs",
        "Finished prunes of copy destinations by plan, destination and result",
        copies.prune_runs.clone(),
    );
    registry.register(
        "copy_prune_freed_bytes",
        "Bytes freed in copy destinations by their prunes",
        copies.prune_freed_bytes.clone(),
    );
}

/// The concurrency queue's metrics, the operator's API requests, the leader and suspicious-change
/// gauges, the copies' and the drills'.
fn register_queue_metrics(registry: &mut Registry, metrics: &Metrics) {
    registry.register(
        "leader",
        "1 while this replica holds the leader Lease and runs the controllers",
        metrics.leader.clone(),
    );
    register_copy_metrics(registry, &metrics.copies);
    register_drill_metrics(registry, &metrics.drills);
    registry.register(
        "suspicious_change",
        "1 while a backup far outside the plan's usual changes waits for an admin's acknowledgement (retention paused), 0 otherwise",
        metrics.suspicious_change.clone(),
    );
    registry.register(
        "queued_runs",
        "Runs waiting for a slot under the concurrency limits",
        metrics.queue.queued_runs.clone(),
    );
    registry.register(
        "running_runs",
        "Runs holding a slot under the concurrency limits",
        metrics.queue.running_runs.clone(),
    );
    registry.register(
        "runs_queued",
        "Runs that waited for a slot before they started",
        metrics.queue.runs_queued.clone(),
    );
    registry.register(
        "api_requests",
        "Requests the operator sent to the Kubernetes API server, by verb",
        metrics.api_requests.clone(),
    );
}

impl Metrics {
    /// Forgets every series of a deleted plan, so that no alert fires for it forever and no
    /// counter of it stays behind: the families keyed by plan, and every result, reason and
    /// maintenance kind of those that have more labels (the label values are closed sets).
    pub fn remove_plan(&self, plan: &PlanLabels) {
        for gauge in [
            &self.backup_last_success_timestamp_seconds,
            &self.backup_schedule_interval_seconds,
            &self.repository_size_bytes,
            &self.repository_snapshots,
            &self.repository_check_ok,
            &self.suspicious_change,
        ] {
            gauge.remove(plan);
        }
        for counter in [
            &self.backup_bytes_sent,
            &self.backup_missed_runs,
            &self.prune_freed_bytes,
        ] {
            counter.remove(plan);
        }
        self.backup_duration_seconds.remove(plan);
        self.remove_drills(plan);
        for result in ALL_OUTCOMES.map(outcome_label) {
            for &reason in Reason::ALL {
                self.backup_runs.remove(&RunLabels {
                    namespace: plan.namespace.clone(),
                    plan: plan.plan.clone(),
                    result,
                    reason: ReasonLabel(reason),
                });
            }
            for kind in MaintenanceKind::ALL {
                self.maintenance_runs.remove(&MaintenanceLabels {
                    namespace: plan.namespace.clone(),
                    plan: plan.plan.clone(),
                    kind: kind.label(),
                    result,
                });
            }
        }
    }

    /// Forgets the drill series of a plan (deleted, or its drills' status gone).
    pub fn remove_drills(&self, plan: &PlanLabels) {
        let drills = &self.drills;
        drills.duration_seconds.remove(plan);
        for gauge in [
            &drills.last_success_timestamp_seconds,
            &drills.last_result,
            &drills.objective_seconds,
        ] {
            gauge.remove(plan);
        }
        for outcome in [
            DrillOutcome::Succeeded,
            DrillOutcome::SucceededOverObjective,
            DrillOutcome::Failed,
        ] {
            drills.runs.remove(&DrillRunLabels {
                namespace: plan.namespace.clone(),
                plan: plan.plan.clone(),
                result: drill_outcome_label(outcome),
            });
        }
    }

    /// Forgets the series of a plan's copy to `copy` (a destination removed, or the plan deleted).
    pub fn remove_copy(&self, plan: &PlanLabels, copy: &str) {
        let labels = CopyLabels {
            namespace: plan.namespace.clone(),
            plan: plan.plan.clone(),
            copy: copy.to_owned(),
        };
        self.copies.lag_seconds.remove(&labels);
        self.copies.prune_freed_bytes.remove(&labels);
        for outcome in ALL_OUTCOMES.map(outcome_label) {
            self.copies.prune_runs.remove(&CopyPruneLabels {
                namespace: labels.namespace.clone(),
                plan: labels.plan.clone(),
                copy: labels.copy.clone(),
                result: outcome,
            });
            self.copies.runs.remove(&CopyRunLabels {
                namespace: labels.namespace.clone(),
                plan: labels.plan.clone(),
                copy: labels.copy.clone(),
                outcome,
            });
        }
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
