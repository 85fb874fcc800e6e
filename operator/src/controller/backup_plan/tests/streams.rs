//! Plans with streams and hooks: the image policy before any Job, the in-pod hooks of a plan
//! that reads its volumes directly, and what a run's record shows of its streams and hooks.

use super::*;
use crate::api::{BackupStream, Hook, HookOnError, HookPhase};
use neverwiped_contract::streams::{self as contract, HookResult, StreamResult};

/// The plans' stream: a Redis dump on its standard output.
pub(super) fn cache_stream() -> BackupStream {
    BackupStream {
        name: "cache".into(),
        image: "docker.io/library/redis:7".into(),
        command: vec!["redis-cli".into(), "--rdb".into(), "-".into()],
        env: Vec::new(),
        allow_empty: false,
        volume_mounts: Vec::new(),
    }
}

fn plan_with_streams() -> BackupPlan {
    let mut plan = plan();
    plan.spec.streams = vec![cache_stream()];
    plan.spec.hooks.pre = vec![Hook {
        name: "checkpoint".into(),
        image: None,
        command: vec!["psql".into(), "-c".into(), "CHECKPOINT".into()],
        env: Vec::new(),
        timeout_seconds: 60,
        on_error: HookOnError::Fail,
    }];
    plan.status = Some(BackupPlanStatus {
        last_schedule_time: Some(Time(at("2026-11-29T02:30:00Z"))),
        ..BackupPlanStatus::default()
    });
    plan
}

fn policy_settings(json: &str) -> Settings {
    Settings {
        tenant_policy: crate::tenant_policy::TenantPolicy::from_json(json).unwrap(),
        ..settings()
    }
}

#[test]
fn an_image_the_policy_does_not_allow_makes_the_plan_not_ready_and_starts_nothing() {
    let now = at("2026-11-30T02:30:02Z");
    let settings = policy_settings(r#"{"allowedImages": {"shop": ["registry.example/redis"]}}"#);
    let decision = decide(&plan_with_streams(), &observed(), now, &settings);
    assert!(decision.create.is_none());
    let ready = find_condition(&decision.status.conditions, types::READY).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "ImageNotAllowed")
    );
    assert!(
        ready.message.contains("docker.io/library/redis:7"),
        "{}",
        ready.message
    );
    assert!(
        ready.message.contains("registry.example/redis"),
        "{}",
        ready.message
    );
    // The hook runs the sidecar's image: an allowed stream image is all it takes.
    let settings = policy_settings(r#"{"allowedImages": {"*": ["docker.io/library/"]}}"#);
    let decision = decide(&plan_with_streams(), &observed(), now, &settings);
    assert!(decision.create.is_some());
}

#[test]
fn a_plan_read_directly_runs_its_streams_and_hooks_in_the_backup_pod() {
    let now = at("2026-11-30T02:30:02Z");
    let decision = decide(&plan_with_streams(), &observed(), now, &settings());
    let job = decision.create.expect("a backup Job");
    let args = args(&job);
    assert!(args.iter().any(|a| a == "--stream"), "{args:?}");
    assert!(args
        .iter()
        .any(|a| a == "pre:checkpoint=/neverwiped/exchange/pre-checkpoint"));
    let pod = job.spec.unwrap().template.spec.unwrap();
    let names: Vec<String> = pod.containers.iter().map(|c| c.name.clone()).collect();
    assert_eq!(names, ["sidecar", "stream-cache", "hook-pre-checkpoint"]);
}

fn hook_result(phase: contract::HookPhase, succeeded: bool, at: (&str, &str)) -> HookResult {
    HookResult {
        phase,
        name: "checkpoint".into(),
        succeeded,
        duration_secs: 0.4,
        exit_code: Some(if succeeded { 0 } else { 2 }),
        error: None,
        stderr: if succeeded {
            String::new()
        } else {
            "FATAL: no".into()
        },
        started_at: Some(at.0.into()),
        finished_at: Some(at.1.into()),
    }
}

#[test]
fn a_run_records_its_pause_streams_and_hooks() {
    let mut observed = observed();
    observed
        .jobs
        .push(finished_job("nightly-1", "2026-11-30T02:30:00Z"));
    let result = RunResult {
        paused_secs: Some(3.5),
        streams: vec![StreamResult {
            name: "cache".into(),
            bytes: 4096,
            ..StreamResult::default()
        }],
        hooks: vec![hook_result(
            contract::HookPhase::Pre,
            true,
            ("2026-11-30T02:00:00Z", "2026-11-30T02:00:00.4Z"),
        )],
        ..run_result(Operation::Backup, ExitStatus::Success)
    };
    observed.pods.push(pod_with_result("nightly-1", &result, 0));
    let decision = decide(
        &plan_with_streams(),
        &observed,
        at("2026-11-30T02:40:00Z"),
        &settings(),
    );
    let record = decision.status.last_run.expect("recorded");
    assert_eq!(record.paused_seconds, Some(3.5));
    assert_eq!(record.streams[0].bytes, 4096);
    assert_eq!(record.hooks[0].phase, HookPhase::Pre);
    assert!(record.hooks[0].succeeded);
}

#[test]
fn a_failed_stream_or_pre_hook_names_itself_in_the_run() {
    let mut observed = observed();
    observed
        .jobs
        .push(finished_job("nightly-1", "2026-11-30T02:30:00Z"));
    observed
        .jobs
        .push(finished_job("nightly-2", "2026-11-30T02:31:00Z"));
    let stream_failed = RunResult {
        streams: vec![StreamResult {
            name: "cache".into(),
            bytes: 0,
            error: Some("no bytes".into()),
            ..StreamResult::default()
        }],
        error: Some("stream cache failed".into()),
        ..run_result(Operation::Backup, ExitStatus::Failed)
    };
    let hook_failed = RunResult {
        files: 0,
        bytes_read: 0,
        hooks: vec![hook_result(
            contract::HookPhase::Pre,
            false,
            ("2026-11-30T02:00:00Z", "2026-11-30T02:00:01Z"),
        )],
        ..run_result(Operation::Backup, ExitStatus::Failed)
    };
    observed
        .pods
        .push(pod_with_result("nightly-1", &stream_failed, 1));
    observed
        .pods
        .push(pod_with_result("nightly-2", &hook_failed, 1));
    let decision = decide(
        &plan_with_streams(),
        &observed,
        at("2026-11-30T02:40:00Z"),
        &settings(),
    );
    let reasons: Vec<&str> = decision
        .status
        .history
        .iter()
        .map(|r| r.reason.as_str())
        .collect();
    assert_eq!(reasons, ["HookFailed", "StreamFailed"]);
    let hook = &decision.status.history[0];
    assert!(hook.message.as_deref().unwrap().contains("checkpoint"));
    assert!(hook.hooks[0]
        .error
        .as_deref()
        .unwrap()
        .contains("FATAL: no"));
}
