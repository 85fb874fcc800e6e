//! A plan's Prometheus metrics after a reconcile: counters for what finished in it, gauges from
//! its status (so they survive operator restarts).

use kube::ResourceExt;

use super::decision::PlanDecision;
use crate::api::BackupPlan;
use crate::metrics::{
    drill_outcome_label, outcome_label, CopyLabels, CopyPruneLabels, CopyRunLabels, DrillRunLabels,
    MaintenanceLabels, Metrics, PlanLabels, ReasonLabel, RunLabels,
};

/// Counts what finished in this reconcile and sets the plan's gauges.
pub fn record(metrics: &Metrics, plan: &BackupPlan, decision: &PlanDecision) {
    let namespace = plan.namespace().unwrap_or_default();
    let name = plan.name_any();
    let labels = PlanLabels {
        namespace: namespace.clone(),
        plan: name.clone(),
    };
    for (reason, record) in &decision.finished {
        metrics
            .backup_runs
            .get_or_create(&RunLabels {
                namespace: namespace.clone(),
                plan: name.clone(),
                result: outcome_label(record.result),
                reason: ReasonLabel(*reason),
            })
            .inc();
        if let Some(duration) = record.duration_seconds {
            metrics
                .backup_duration_seconds
                .get_or_create(&labels)
                .observe(duration as f64);
        }
        if let Some(bytes) = record.bytes_sent {
            metrics
                .backup_bytes_sent
                .get_or_create(&labels)
                .inc_by(bytes.max(0) as u64);
        }
    }
    if decision.newly_missed > 0 {
        metrics
            .backup_missed_runs
            .get_or_create(&labels)
            .inc_by(u64::from(decision.newly_missed));
    }
    for (kind, record) in &decision.finished_maintenance {
        metrics
            .maintenance_runs
            .get_or_create(&MaintenanceLabels {
                namespace: namespace.clone(),
                plan: name.clone(),
                kind: kind.label(),
                result: outcome_label(record.result),
            })
            .inc();
        if let Some(bytes) = record.bytes_freed {
            metrics
                .prune_freed_bytes
                .get_or_create(&labels)
                .inc_by(bytes.max(0) as u64);
        }
    }
    set_gauges(metrics, &labels, decision);
    record_copies(metrics, plan, &labels, decision);
    record_drills(metrics, plan, &labels, decision);
}

/// Counts the drills that finished, and sets the drill gauges from `status.verify` (the last
/// drill's recovery time and result, the last success) and `spec.verify` (the objective).
fn record_drills(
    metrics: &Metrics,
    plan: &BackupPlan,
    labels: &PlanLabels,
    decision: &PlanDecision,
) {
    let drills = &metrics.drills;
    for record in &decision.finished_drills {
        let run = DrillRunLabels {
            namespace: labels.namespace.clone(),
            plan: labels.plan.clone(),
            result: drill_outcome_label(record.result),
        };
        drills.runs.get_or_create(&run).inc();
    }
    let Some(status) = decision.status.verify.as_ref() else {
        return;
    };
    if let Some(last) = &status.last_run {
        drills
            .last_result
            .get_or_create(labels)
            .set(i64::from(last.result.is_success()));
        match last.recovery_seconds {
            Some(seconds) => {
                drills.duration_seconds.get_or_create(labels).set(seconds);
            }
            None => {
                drills.duration_seconds.remove(labels);
            }
        }
    }
    if let Some(time) = &status.last_success_time {
        drills
            .last_success_timestamp_seconds
            .get_or_create(labels)
            .set(time.0.as_second());
    }
    let objective = (plan.spec.verify.as_ref())
        .and_then(|v| v.recovery_time_objective.as_deref())
        .and_then(|o| crate::schedule::parse_duration(o).ok());
    match objective {
        Some(objective) => {
            drills
                .objective_seconds
                .get_or_create(labels)
                .set(objective.as_secs());
        }
        None => {
            drills.objective_seconds.remove(labels);
        }
    }
}

/// Counts the copies and destination prunes that finished, sets each destination's lag, and
/// forgets the series of destinations no longer in the spec.
fn record_copies(
    metrics: &Metrics,
    plan: &BackupPlan,
    labels: &PlanLabels,
    decision: &PlanDecision,
) {
    let copy_labels = |copy: &str| CopyLabels {
        namespace: labels.namespace.clone(),
        plan: labels.plan.clone(),
        copy: copy.to_owned(),
    };
    for (copy, outcome) in &decision.finished_copies {
        metrics
            .copies
            .runs
            .get_or_create(&CopyRunLabels {
                namespace: labels.namespace.clone(),
                plan: labels.plan.clone(),
                copy: copy.clone(),
                outcome: outcome_label(*outcome),
            })
            .inc();
    }
    for (copy, record) in &decision.finished_copy_prunes {
        metrics
            .copies
            .prune_runs
            .get_or_create(&CopyPruneLabels {
                namespace: labels.namespace.clone(),
                plan: labels.plan.clone(),
                copy: copy.clone(),
                result: outcome_label(record.result),
            })
            .inc();
        if let Some(bytes) = record.bytes_freed {
            metrics
                .copies
                .prune_freed_bytes
                .get_or_create(&copy_labels(copy))
                .inc_by(bytes.max(0) as u64);
        }
    }
    let now = jiff::Timestamp::now();
    for entry in &decision.status.copies {
        let lag = entry
            .behind_since
            .as_ref()
            .map_or(0, |since| now.duration_since(since.0).as_secs().max(0));
        metrics
            .copies
            .lag_seconds
            .get_or_create(&copy_labels(&entry.name))
            .set(lag);
    }
    let before = plan
        .status
        .as_ref()
        .map(|s| &s.copies[..])
        .unwrap_or_default();
    for gone in before
        .iter()
        .filter(|c| !decision.status.copies.iter().any(|n| n.name == c.name))
    {
        metrics.remove_copy(labels, &gone.name);
    }
}

/// The gauges of a plan, from its status.
fn set_gauges(metrics: &Metrics, labels: &PlanLabels, decision: &PlanDecision) {
    let status = &decision.status;
    if let Some(time) = &status.last_successful_time {
        metrics
            .backup_last_success_timestamp_seconds
            .get_or_create(labels)
            .set(time.0.as_second());
    }
    match decision.schedule_interval {
        Some(interval) => {
            metrics
                .backup_schedule_interval_seconds
                .get_or_create(labels)
                .set(interval.as_secs());
        }
        None => {
            metrics.backup_schedule_interval_seconds.remove(labels);
        }
    }
    if let Some(repository) = &status.repository {
        metrics
            .repository_size_bytes
            .get_or_create(labels)
            .set(repository.size_bytes);
        metrics
            .repository_snapshots
            .get_or_create(labels)
            .set(repository.snapshots);
    }
    metrics
        .suspicious_change
        .get_or_create(labels)
        .set(i64::from(status.suspicious_change.is_some()));
    if let Some(check) = &status.check.last_run {
        metrics
            .repository_check_ok
            .get_or_create(labels)
            .set(i64::from(check.result.is_success()));
    }
}
