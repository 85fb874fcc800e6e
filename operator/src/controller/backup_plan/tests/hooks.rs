//! Hooks around CSI snapshots: the pre hook Job, the VolumeSnapshots, the post hook Job, then the
//! backup Job with no hooks in its pod; a failed pre hook, a failed snapshot, what the run's
//! record shows, and a restart in the middle (every decision from the objects alone).

use super::snapshots::{ready, snapshot_plan, snapshot_world, stored};
use super::streams::cache_stream;
use super::*;
use crate::api::{Hook, HookOnError, HookPhase};
use crate::csi::{VolumeSnapshotError, VolumeSnapshotStatus};
use crate::job::hook_phase_of;
use neverwiped_contract::streams::{self as contract, HookResult};

const PRE_JOB: &str = "nightly-hooks-pre-manual-1";
const POST_JOB: &str = "nightly-hooks-post-manual-1";
const RUN: &str = "nightly-manual-1";

fn hook(name: &str) -> Hook {
    Hook {
        name: name.into(),
        image: None,
        command: vec!["sh".into(), "-c".into(), "true".into()],
        env: Vec::new(),
        timeout_seconds: 60,
        on_error: HookOnError::Fail,
    }
}

/// A plan that reads its volume from a VolumeSnapshot, with a stream, a pre and a post hook.
fn hooks_plan() -> BackupPlan {
    let mut plan = snapshot_plan();
    plan.spec.hooks.pre = vec![hook("freeze")];
    plan.spec.hooks.post = vec![hook("thaw")];
    plan.spec.streams = vec![cache_stream()];
    plan
}

/// What the hook Job's sidecar reports: one hook of `phase` that exited `exit_code`, between the
/// two times.
fn hooks_result(
    phase: contract::HookPhase,
    name: &str,
    exit_code: i32,
    at: (&str, &str),
) -> RunResult {
    let succeeded = exit_code == 0;
    let status = if succeeded {
        ExitStatus::Success
    } else {
        ExitStatus::Failed
    };
    RunResult {
        snapshot_id: None,
        files: 0,
        bytes_read: 0,
        error: (!succeeded).then(|| format!("{} hook {name} failed", phase.arg())),
        hooks: vec![HookResult {
            phase,
            name: name.into(),
            succeeded,
            duration_secs: 1.0,
            exit_code: Some(exit_code),
            error: None,
            stderr: match succeeded {
                true => String::new(),
                false => format!("{} hook exits {exit_code}", phase.arg()),
            },
            started_at: Some(at.0.into()),
            finished_at: Some(at.1.into()),
        }],
        ..run_result(Operation::Hooks, status)
    }
}

/// `job` as stored, finished (complete or failed).
fn ended(job: Job, created: &str, complete: bool) -> Job {
    let mut job = stored(job, created);
    job.status = Some(JobStatus {
        conditions: Some(vec![JobCondition {
            type_: if complete { "Complete" } else { "Failed" }.into(),
            status: "True".into(),
            ..JobCondition::default()
        }]),
        ..JobStatus::default()
    });
    job
}

/// The hook Job's pod, ended with `result`.
fn hook_pod(job: &str, result: &RunResult) -> Pod {
    let exit = if result.status == ExitStatus::Success {
        0
    } else {
        1
    };
    pod_with_result(job, result, exit)
}

/// The pre Job (created as the run started) ended, its hook `freeze` exiting `exit_code`
/// between the two times.
fn pre_ended(observed: &mut ObservedPlan, pre: Job, exit_code: i32, ran: (&str, &str)) {
    observed.jobs = vec![ended(pre, "2026-11-30T12:00:00Z", exit_code == 0)];
    let result = hooks_result(contract::HookPhase::Pre, "freeze", exit_code, ran);
    observed.pods = vec![hook_pod(PRE_JOB, &result)];
}

/// The post Job created at `created` ended (in the place of its running self, if seen), its
/// hook `thaw` succeeding between the two times.
fn post_ended(observed: &mut ObservedPlan, post: Job, created: &str, ran: (&str, &str)) {
    observed
        .jobs
        .retain(|j| j.metadata.name != post.metadata.name);
    observed.jobs.push(ended(post, created, true));
    let result = hooks_result(contract::HookPhase::Post, "thaw", 0, ran);
    observed.pods.push(hook_pod(POST_JOB, &result));
}

/// What the plan decides at `time`, with the default settings.
fn decide_at(plan: &BackupPlan, observed: &ObservedPlan, time: &str) -> PlanDecision {
    decide(plan, observed, at(time), &settings())
}

fn running_reason(decision: &PlanDecision) -> (String, String) {
    let running = find_condition(&decision.status.conditions, types::RUNNING).unwrap();
    (running.reason.clone(), running.message.clone())
}

fn names(jobs: &Job) -> Vec<String> {
    let pod = jobs.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    pod.containers.iter().map(|c| c.name.clone()).collect()
}

/// The run up to its pre Job's end: the plan's status and what it created.
fn started(plan: &mut BackupPlan, observed: &ObservedPlan) -> Job {
    let decision = decide_at(plan, observed, "2026-11-30T12:00:00Z");
    plan.status = Some(decision.status);
    decision.create.expect("the pre hook Job")
}

#[test]
fn the_hooks_bracket_the_snapshots_creation_and_the_backup_pod_runs_none() {
    let mut plan = hooks_plan();
    let mut observed = snapshot_world();

    // (a) The run starts with its pre hook Job, not with the VolumeSnapshots.
    let decision = decide_at(&plan, &observed, "2026-11-30T12:00:00Z");
    let pre = decision.create.clone().expect("the pre hook Job");
    assert_eq!(pre.metadata.name.as_deref(), Some(PRE_JOB));
    assert_eq!(hook_phase_of(&pre), Some(contract::HookPhase::Pre));
    assert_eq!(args(&pre)[..3], ["hooks", "--phase", "pre"]);
    assert!(decision.create_snapshots.is_empty());
    assert_eq!(decision.status.active_run.as_ref().unwrap().job_name, RUN);
    assert_eq!(decision.events[0].reason, Reason::BackupStarted);
    plan.status = Some(decision.status);

    // The pre hooks run: the run waits for them, and says so.
    observed.jobs = vec![stored(pre.clone(), "2026-11-30T12:00:00Z")];
    let decision = decide_at(&plan, &observed, "2026-11-30T12:00:05Z");
    assert!(decision.create.is_none() && decision.create_snapshots.is_empty());
    let (reason, message) = running_reason(&decision);
    assert_eq!(reason, "RunningHooks");
    assert!(message.contains(PRE_JOB), "{message}");
    assert_eq!(decision.status.active_run.as_ref().unwrap().job_name, RUN);
    assert!(decision.finished.is_empty(), "a hook Job is no backup Job");
    plan.status = Some(decision.status);

    // (b) The pre Job succeeded: the snapshots are taken, no post Job yet.
    pre_ended(
        &mut observed,
        pre,
        0,
        ("2026-11-30T12:00:06Z", "2026-11-30T12:00:07Z"),
    );
    let decision = decide_at(&plan, &observed, "2026-11-30T12:00:08Z");
    assert!(
        decision.create.is_none(),
        "no post Job before the snapshots"
    );
    assert_eq!(decision.create_snapshots.len(), 1);
    let snapshot = decision.create_snapshots[0].clone();
    assert_eq!(
        snapshot.metadata.name.as_deref(),
        Some("nightly-manual-1-0")
    );
    plan.status = Some(decision.status);

    // Not ready yet: no post Job.
    observed.snapshots = vec![stored(snapshot.clone(), "2026-11-30T12:00:08Z")];
    let decision = decide_at(&plan, &observed, "2026-11-30T12:00:09Z");
    assert!(decision.create.is_none() && decision.create_snapshots.is_empty());
    assert_eq!(running_reason(&decision).0, "PreparingSnapshots");
    plan.status = Some(decision.status);

    // (c) Ready: the post hook Job, and still no clone nor backup Job.
    observed.snapshots = vec![ready(stored(snapshot, "2026-11-30T12:00:08Z"))];
    let decision = decide_at(&plan, &observed, "2026-11-30T12:00:12Z");
    let post = decision.create.clone().expect("the post hook Job");
    assert_eq!(post.metadata.name.as_deref(), Some(POST_JOB));
    assert_eq!(args(&post)[..3], ["hooks", "--phase", "post"]);
    assert!(decision.create_claims.is_empty() && decision.create_snapshots.is_empty());
    assert!(decision.delete_snapshots.is_empty());
    plan.status = Some(decision.status);

    // The post hooks run.
    observed
        .jobs
        .push(stored(post.clone(), "2026-11-30T12:00:12Z"));
    let decision = decide_at(&plan, &observed, "2026-11-30T12:00:13Z");
    assert!(decision.create.is_none());
    let (reason, message) = running_reason(&decision);
    assert_eq!(reason, "RunningHooks");
    assert!(message.contains(POST_JOB), "{message}");
    plan.status = Some(decision.status);

    // (d) The post Job ended: the clone and the backup Job, with its stream and no hook.
    post_ended(
        &mut observed,
        post,
        "2026-11-30T12:00:12Z",
        ("2026-11-30T12:00:14Z", "2026-11-30T12:00:15Z"),
    );
    let decision = decide_at(&plan, &observed, "2026-11-30T12:00:16Z");
    let job = decision.create.clone().expect("the backup Job");
    assert_eq!(job.metadata.name.as_deref(), Some(RUN));
    assert_eq!(decision.create_claims.len(), 1);
    assert_eq!(names(&job), ["sidecar", "stream-cache"]);
    let job_args = args(&job);
    assert!(!job_args.contains(&"--hook".to_string()), "{job_args:?}");
    assert!(job_args.contains(&"--stream".to_string()), "{job_args:?}");
    plan.status = Some(decision.status);

    // (g) The backup Job ends: its record holds both Jobs' hooks and the pause between them.
    observed.jobs.push(ended(job, "2026-11-30T12:00:16Z", true));
    observed.pods.push(pod_for(RUN));
    let decision = decide_at(&plan, &observed, "2026-11-30T12:30:00Z");
    let record = decision.status.last_run.as_ref().expect("the run's record");
    assert_eq!(
        (record.job_name.as_str(), record.result),
        (RUN, RunOutcome::Succeeded)
    );
    assert_eq!(record.paused_seconds, Some(9.0));
    let hooks: Vec<(HookPhase, &str)> = record
        .hooks
        .iter()
        .map(|h| (h.phase, h.name.as_str()))
        .collect();
    assert_eq!(
        hooks,
        [(HookPhase::Pre, "freeze"), (HookPhase::Post, "thaw")]
    );
    assert_eq!(decision.delete_snapshots, ["nightly-manual-1-0"]);
    assert!(decision.create.is_none());
}

#[test]
fn a_failed_pre_hook_takes_no_snapshot_runs_the_post_hooks_at_once_and_fails_the_run() {
    let mut plan = hooks_plan();
    let mut observed = snapshot_world();
    let pre = started(&mut plan, &observed);

    // (e) The pre Job failed: no snapshot, the post Job at once.
    pre_ended(
        &mut observed,
        pre,
        4,
        ("2026-11-30T12:00:06Z", "2026-11-30T12:00:07Z"),
    );
    let decision = decide_at(&plan, &observed, "2026-11-30T12:00:08Z");
    let post = decision.create.clone().expect("the post hook Job");
    assert_eq!(post.metadata.name.as_deref(), Some(POST_JOB));
    assert!(decision.create_snapshots.is_empty());
    assert!(
        decision.status.last_run.is_none(),
        "not over before the post hooks"
    );
    plan.status = Some(decision.status);

    // The post hooks run: nothing more.
    observed
        .jobs
        .push(stored(post.clone(), "2026-11-30T12:00:08Z"));
    let decision = decide_at(&plan, &observed, "2026-11-30T12:00:09Z");
    assert!(decision.create.is_none() && decision.create_snapshots.is_empty());
    assert_eq!(running_reason(&decision).0, "RunningHooks");
    plan.status = Some(decision.status);

    // They ended: the run is recorded as failed, with the pre hook's name, exit and stderr.
    post_ended(
        &mut observed,
        post,
        "2026-11-30T12:00:08Z",
        ("2026-11-30T12:00:10Z", "2026-11-30T12:00:11Z"),
    );
    let decision = decide_at(&plan, &observed, "2026-11-30T12:00:12Z");
    let record = decision.status.last_run.as_ref().expect("the run's record");
    assert_eq!(record.job_name, RUN);
    assert_eq!(
        (record.result, record.reason.as_str()),
        (RunOutcome::Failed, "HookFailed")
    );
    let message = record.message.as_deref().unwrap();
    assert!(
        message.contains("\"freeze\"")
            && message.contains("code 4")
            && message.contains("pre hook exits 4"),
        "{message}"
    );
    assert_eq!(record.hooks.len(), 2);
    assert_eq!(record.paused_seconds, Some(5.0));
    assert_eq!(decision.status.history[0].job_name, RUN);
    assert!(decision.create.is_none() && decision.create_snapshots.is_empty());
    assert!(decision.status.active_run.is_none());
    assert!(decision
        .events
        .iter()
        .any(|e| e.reason == Reason::BackupFailed));
    let last = find_condition(&decision.status.conditions, types::LAST_BACKUP_SUCCEEDED).unwrap();
    assert_eq!(
        (last.status.as_str(), last.reason.as_str()),
        ("False", "HookFailed")
    );
    plan.status = Some(decision.status);

    // Recorded once.
    let again = decide_at(&plan, &observed, "2026-11-30T12:00:20Z");
    assert!(again.finished.is_empty() && again.create.is_none());
}

#[test]
fn a_failed_snapshot_still_runs_the_post_hooks_then_fails_the_run() {
    let mut plan = hooks_plan();
    let mut observed = snapshot_world();
    let pre = started(&mut plan, &observed);
    pre_ended(
        &mut observed,
        pre,
        0,
        ("2026-11-30T12:00:01Z", "2026-11-30T12:00:02Z"),
    );
    let decision = decide_at(&plan, &observed, "2026-11-30T12:00:03Z");
    let mut snapshot = stored(decision.create_snapshots[0].clone(), "2026-11-30T12:00:03Z");
    plan.status = Some(decision.status);

    // (f) The driver fails the snapshot: the post hooks run all the same.
    snapshot.status = Some(VolumeSnapshotStatus {
        ready_to_use: Some(false),
        error: Some(VolumeSnapshotError {
            message: Some("rpc error: code = ResourceExhausted desc = quota".into()),
            time: None,
        }),
        ..VolumeSnapshotStatus::default()
    });
    observed.snapshots = vec![snapshot];
    let decision = decide_at(&plan, &observed, "2026-11-30T12:00:30Z");
    let post = decision.create.clone().expect("the post hook Job");
    assert_eq!(post.metadata.name.as_deref(), Some(POST_JOB));
    assert!(decision.status.last_run.is_none());
    assert!(decision.delete_snapshots.is_empty());
    plan.status = Some(decision.status);

    // Once they ended, the run fails with the driver's message; no clone, no backup Job.
    post_ended(
        &mut observed,
        post,
        "2026-11-30T12:00:30Z",
        ("2026-11-30T12:00:31Z", "2026-11-30T12:00:32Z"),
    );
    let decision = decide_at(&plan, &observed, "2026-11-30T12:00:40Z");
    let record = decision.status.last_run.as_ref().unwrap();
    assert_eq!(record.reason, "SnapshotFailed");
    assert!(record
        .message
        .as_ref()
        .unwrap()
        .contains("ResourceExhausted"));
    assert_eq!(record.paused_seconds, Some(31.0));
    assert!(decision.create.is_none() && decision.create_claims.is_empty());
    assert_eq!(decision.delete_snapshots, ["nightly-manual-1-0"]);
}

#[test]
fn a_restarted_operator_decides_from_the_jobs_and_snapshots_and_starts_no_second_post_job() {
    let mut plan = hooks_plan();
    let mut observed = snapshot_world();
    let pre = started(&mut plan, &observed);
    // The status as the operator last wrote it: the run had just started.
    let written = plan.status.clone();
    pre_ended(
        &mut observed,
        pre,
        0,
        ("2026-11-30T12:00:01Z", "2026-11-30T12:00:02Z"),
    );
    let decision = decide_at(&plan, &observed, "2026-11-30T12:00:03Z");
    observed.snapshots = vec![ready(stored(
        decision.create_snapshots[0].clone(),
        "2026-11-30T12:00:03Z",
    ))];
    let decision = decide_at(&plan, &observed, "2026-11-30T12:00:05Z");
    let post = decision.create.clone().expect("the post hook Job");
    observed
        .jobs
        .push(stored(post.clone(), "2026-11-30T12:00:05Z"));

    // (h) Whatever the status says (what it was before, or the plan's first), the objects say
    // the post hooks run: no second post Job, no snapshot, no new run.
    let mut fresh = plan.clone();
    fresh.status = snapshot_plan().status;
    for status in [written, fresh.status.clone()] {
        let plan = BackupPlan {
            status,
            ..plan.clone()
        };
        let decision = decide_at(&plan, &observed, "2026-11-30T12:00:06Z");
        let created = decision.create.as_ref().map(|j| j.metadata.name.clone());
        assert!(created.is_none(), "{created:?}");
        assert!(decision.create_snapshots.is_empty() && decision.delete_snapshots.is_empty());
        assert_eq!(decision.status.active_run.as_ref().unwrap().job_name, RUN);
        assert_eq!(decision.status.last_manual_trigger.as_deref(), Some("now"));
        assert_eq!(running_reason(&decision).0, "RunningHooks");
    }

    // The post Job ended while the operator was away: the backup Job starts, once.
    observed.jobs[1] = ended(post, "2026-11-30T12:00:05Z", true);
    let decision = decide_at(&fresh, &observed, "2026-11-30T12:01:00Z");
    let job = decision.create.expect("the backup Job");
    assert_eq!(job.metadata.name.as_deref(), Some(RUN));
    observed.jobs.push(stored(job, "2026-11-30T12:01:00Z"));
    let decision = decide_at(&fresh, &observed, "2026-11-30T12:01:05Z");
    assert!(decision.create.is_none());
    assert_eq!(running_reason(&decision).0, "BackupRunning");
}

#[test]
fn a_failed_post_hook_is_a_warning_of_a_run_whose_data_is_captured() {
    let mut plan = hooks_plan();
    let mut observed = snapshot_world();
    let pre = started(&mut plan, &observed);
    let post = crate::job::hooks_job_name(&plan, RUN, contract::HookPhase::Post);
    let pre_result = hooks_result(
        contract::HookPhase::Pre,
        "freeze",
        0,
        ("2026-11-30T12:00:01Z", "2026-11-30T12:00:02Z"),
    );
    let post_result = hooks_result(
        contract::HookPhase::Post,
        "thaw",
        3,
        ("2026-11-30T12:00:04Z", "2026-11-30T12:00:05Z"),
    );
    let mut post_job = ended(pre.clone(), "2026-11-30T12:00:04Z", false);
    post_job.metadata.name = Some(post.clone());
    post_job
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(crate::job::LABEL_HOOK_PHASE.into(), "post".into());
    let mut backup = ended(pre.clone(), "2026-11-30T12:00:06Z", true);
    backup.metadata.name = Some(RUN.into());
    backup.metadata.labels = None;
    observed.jobs = vec![ended(pre, "2026-11-30T12:00:00Z", true), post_job, backup];
    observed.pods = vec![
        hook_pod(PRE_JOB, &pre_result),
        hook_pod(&post, &post_result),
        pod_for(RUN),
    ];
    let decision = decide_at(&plan, &observed, "2026-11-30T12:30:00Z");
    let record = decision.status.last_run.as_ref().unwrap();
    assert_eq!(record.result, RunOutcome::SucceededWithWarnings);
    assert_eq!(record.reason, "SucceededWithWarnings");
    assert!(record
        .message
        .as_deref()
        .unwrap()
        .contains("post hook \"thaw\" failed"));
    assert_eq!(record.paused_seconds, Some(4.0));
    assert!(!record.hooks[1].succeeded);
}

#[test]
fn the_hook_jobs_of_recorded_runs_go_with_the_finished_jobs_beyond_the_kept() {
    let mut plan = hooks_plan();
    let observed = snapshot_world();
    let pre = started(&mut plan, &observed);
    let keep = settings().finished_jobs_to_keep;
    let mut observed = observed;
    let mut status = plan.status.take().unwrap();
    for run in ["nightly-manual-1", "nightly-2", "nightly-3", "nightly-4"] {
        let mut job = ended(pre.clone(), "2026-11-30T12:00:00Z", true);
        job.metadata.name = Some(format!("{run}-pre"));
        let labels = job.metadata.labels.as_mut().unwrap();
        labels.insert(crate::job::LABEL_RUN.into(), run.to_string());
        observed.jobs.push(job);
        status.history.insert(
            0,
            crate::api::RunRecord::without_figures(
                run.to_string(),
                RunTrigger::Schedule,
                RunOutcome::Succeeded,
                "Succeeded".into(),
            ),
        );
    }
    plan.status = Some(status);
    let decision = decide_at(&plan, &observed, "2026-11-30T13:00:00Z");
    assert_eq!(keep, 3);
    assert_eq!(decision.delete, ["nightly-manual-1-pre"]);
}

#[test]
fn snapshots_never_created_by_the_deadline_still_release_the_application() {
    let mut plan = hooks_plan();
    plan.spec.deadline = "1h".into();
    let mut observed = snapshot_world();
    let pre = started(&mut plan, &observed);
    pre_ended(
        &mut observed,
        pre,
        0,
        ("2026-11-30T12:00:01Z", "2026-11-30T12:00:02Z"),
    );
    // Every create of the snapshot failed (say, the operator may not create them) for an hour.
    let decision = decide_at(&plan, &observed, "2026-11-30T13:00:01Z");
    let post = decision.create.expect("the post hook Job");
    assert_eq!(post.metadata.name.as_deref(), Some(POST_JOB));
    assert!(decision.create_snapshots.is_empty(), "the run has failed");
}

#[test]
fn a_volume_read_directly_keeps_the_hooks_in_the_backup_pod() {
    // Auto, and the driver has no VolumeSnapshotClass: the volume is read directly.
    let mut plan = hooks_plan();
    plan.spec.copy_method = CopyMethod::Auto;
    let mut observed = snapshot_world();
    observed.snapshot_classes = Some(Vec::new());
    let decision = decide_at(&plan, &observed, "2026-11-30T12:00:00Z");
    assert!(decision.create_snapshots.is_empty());
    let job = decision.create.expect("the backup Job");
    assert_eq!(job.metadata.name.as_deref(), Some(RUN));
    assert_eq!(
        names(&job),
        [
            "sidecar",
            "stream-cache",
            "hook-pre-freeze",
            "hook-post-thaw"
        ]
    );
}
