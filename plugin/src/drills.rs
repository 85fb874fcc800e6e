//! `verify`: a restore drill of the plan now, asked for with the `neverwiped.io/verify-now`
//! annotation and followed through `status.verify` to its end.

use anyhow::Result;
use neverwiped_api::{BackupPlan, DrillRecord};

use crate::cluster::Cluster;
use crate::runs::{status_text, trigger_value, RunFailed};
use crate::table::bytes;

/// The annotation whose new value asks the operator for a drill of the plan now.
pub const VERIFY_NOW_ANNOTATION: &str = "neverwiped.io/verify-now";

/// Where a requested drill is, from the plan's status.
#[derive(Debug, Clone, PartialEq)]
pub enum DrillProgress {
    /// The operator has not acted on the request yet.
    Queued,
    /// Acted on, but it waits (a backup of the plan is due or running, or the queue is full).
    Waiting(String),
    /// Its Job runs.
    Running { job_name: String },
    /// It ended.
    Finished(Box<DrillRecord>),
}

/// Where the drill of `request` is. `job` is the Job seen running for it, once seen.
pub fn drill_progress(plan: &BackupPlan, request: &str, job: Option<&str>) -> DrillProgress {
    let Some(verify) = plan.status.as_ref().and_then(|s| s.verify.as_ref()) else {
        return DrillProgress::Queued;
    };
    if verify.last_request.as_deref() != Some(request) {
        return match &verify.waiting {
            Some(why) => DrillProgress::Waiting(why.clone()),
            None => DrillProgress::Queued,
        };
    }
    if let Some(active) = &verify.active_job {
        if job.is_none_or(|job| job == active) {
            return DrillProgress::Running {
                job_name: active.clone(),
            };
        }
    }
    let finished = verify
        .history
        .iter()
        .chain(verify.last_run.iter())
        .find(|drill| job.is_none_or(|job| drill.job_name == job));
    match finished {
        Some(drill) => DrillProgress::Finished(Box::new(drill.clone())),
        None => DrillProgress::Queued,
    }
}

/// Asks for a drill of the plan now; with `wait`, follows it to its end, prints what came back
/// and how fast, and fails when the drill failed.
pub async fn verify(cluster: &Cluster, namespace: &str, name: &str, wait: bool) -> Result<()> {
    let request = trigger_value(jiff::Timestamp::now());
    cluster
        .annotate(namespace, name, VERIFY_NOW_ANNOTATION, &request)
        .await?;
    println!("restore drill of {namespace}/{name} asked for ({VERIFY_NOW_ANNOTATION}={request})");
    if !wait {
        return Ok(());
    }
    let mut job: Option<String> = None;
    let mut shown: Option<DrillProgress> = None;
    loop {
        let plan = cluster.plan(namespace, name).await?;
        let progress = drill_progress(&plan, &request, job.as_deref());
        if shown.as_ref() != Some(&progress) {
            match &progress {
                DrillProgress::Queued => println!("queued: waiting for the operator"),
                DrillProgress::Waiting(why) => println!("waiting: {}", status_text(why)),
                DrillProgress::Running { job_name } => {
                    println!("running: Job {}", status_text(job_name));
                    job = Some(job_name.clone());
                }
                DrillProgress::Finished(drill) => return finished(drill),
            }
            shown = Some(progress);
        }
        tokio::time::sleep(crate::runs::POLL_INTERVAL).await;
    }
}

/// Prints a finished drill: a line per volume and database, then the recovery time.
fn finished(drill: &DrillRecord) -> Result<()> {
    for line in drill_lines(drill) {
        println!("{line}");
    }
    if !drill.result.is_success() {
        return Err(RunFailed(format!(
            "the drill failed ({}): {}",
            status_text(&drill.reason),
            status_text(drill.message.as_deref().unwrap_or("no message"))
        ))
        .into());
    }
    Ok(())
}

/// What a drill brought back, a line per part, and the verdict.
pub fn drill_lines(drill: &DrillRecord) -> Vec<String> {
    let rate = |per_second: i64| format!("{}/s", bytes(u64::try_from(per_second).unwrap_or(0)));
    let mut lines = Vec::new();
    for volume in &drill.volumes {
        lines.push(format!(
            "volume {}: {} file(s), {} in {:.1} s ({}){}",
            status_text(&volume.path),
            volume.files,
            bytes(u64::try_from(volume.bytes).unwrap_or(0)),
            volume.seconds,
            rate(volume.bytes_per_second),
            match volume.mismatched {
                0 => String::new(),
                n => format!(", {n} differ"),
            }
        ));
    }
    for database in &drill.databases {
        lines.push(format!(
            "database {} ({}): {} in {:.1} s ({}), {} table(s) checked{}",
            status_text(&database.name),
            status_text(&database.engine),
            bytes(u64::try_from(database.bytes).unwrap_or(0)),
            database.seconds,
            rate(database.bytes_per_second),
            database.tables_checked,
            database
                .error
                .as_deref()
                .map(|e| format!(": {}", status_text(e)))
                .unwrap_or_default()
        ));
    }
    let objective = drill
        .recovery_time_objective
        .as_deref()
        .map(|o| format!(" (objective {})", status_text(o)))
        .unwrap_or_default();
    lines.push(format!(
        "{:?}: snapshot {}, recovered in {:.1} s{objective}",
        drill.result,
        status_text(drill.snapshot_id.as_deref().unwrap_or("-")),
        drill.recovery_seconds.unwrap_or(0.0),
    ));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use neverwiped_api::{DrillOutcome, DrilledDatabase, DrilledVolume, VerifyStatus};

    fn drill(job: &str, result: DrillOutcome) -> DrillRecord {
        DrillRecord {
            job_name: job.into(),
            result,
            reason: "Succeeded".into(),
            message: None,
            snapshot_id: Some("0123abcd".into()),
            start_time: None,
            completion_time: None,
            recovery_seconds: Some(12.5),
            recovery_time_objective: Some("30m".into()),
            sample_percent: Some(100),
            volumes: vec![DrilledVolume {
                path: "/data/orders".into(),
                files: 3,
                bytes: 3 << 20,
                seconds: 2.0,
                bytes_per_second: 3 << 19,
                mismatched: 0,
            }],
            databases: vec![DrilledDatabase {
                name: "shop".into(),
                engine: "postgresql".into(),
                bytes: 1 << 20,
                seconds: 10.5,
                bytes_per_second: 99_864,
                tables_checked: 4,
                error: None,
            }],
        }
    }

    fn plan_with(verify: VerifyStatus) -> BackupPlan {
        let mut plan = BackupPlan::new("nightly", serde_json::from_value(serde_json::json!({
            "schedule": "@daily",
            "repository": {"url": "https://gate.example/r", "passwordSecretRef": {"name": "p", "key": "password"}},
            "volumes": [{"claimName": "data"}],
        })).unwrap());
        plan.status = Some(neverwiped_api::BackupPlanStatus {
            verify: Some(verify),
            ..Default::default()
        });
        plan
    }

    #[test]
    fn a_request_is_queued_then_waits_runs_and_finishes_with_its_own_job() {
        let request = "kubectl-neverwiped-1";
        let mut verify = VerifyStatus::default();
        assert_eq!(
            drill_progress(&plan_with(verify.clone()), request, None),
            DrillProgress::Queued
        );
        verify.waiting = Some("a backup of the plan is due".into());
        assert_eq!(
            drill_progress(&plan_with(verify.clone()), request, None),
            DrillProgress::Waiting("a backup of the plan is due".into())
        );
        verify.last_request = Some(request.into());
        verify.active_job = Some("nightly-verify-1".into());
        verify.last_run = Some(drill("nightly-verify-0", DrillOutcome::Failed));
        assert_eq!(
            drill_progress(&plan_with(verify.clone()), request, None),
            DrillProgress::Running {
                job_name: "nightly-verify-1".into()
            }
        );
        // An older drill's record is not the requested one's.
        verify.active_job = None;
        assert_eq!(
            drill_progress(
                &plan_with(verify.clone()),
                request,
                Some("nightly-verify-1")
            ),
            DrillProgress::Queued
        );
        let done = drill("nightly-verify-1", DrillOutcome::Succeeded);
        verify.history = vec![done.clone()];
        assert_eq!(
            drill_progress(&plan_with(verify), request, Some("nightly-verify-1")),
            DrillProgress::Finished(Box::new(done))
        );
    }

    #[test]
    fn a_finished_drill_prints_each_part_with_its_speed_and_the_recovery_time() {
        let lines = drill_lines(&drill("j", DrillOutcome::SucceededOverObjective));
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(
            lines[0].starts_with("volume /data/orders: 3 file(s), "),
            "{lines:?}"
        );
        assert!(lines[0].contains(" in 2.0 s ("), "{lines:?}");
        assert!(lines[1].contains("database shop (postgresql)"), "{lines:?}");
        assert!(lines[1].ends_with("4 table(s) checked"), "{lines:?}");
        assert_eq!(
            lines[2],
            "SucceededOverObjective: snapshot 0123abcd, recovered in 12.5 s (objective 30m)"
        );
    }

    #[test]
    fn a_failed_drill_fails_with_its_reason_and_message() {
        let mut failed = drill("j", DrillOutcome::Failed);
        failed.reason = "VerifyFailed".into();
        failed.message = Some("2 files differ: /data/orders/a".into());
        let error = finished(&failed).unwrap_err().to_string();
        assert_eq!(
            error,
            "the drill failed (VerifyFailed): 2 files differ: /data/orders/a"
        );
    }
}
