//! The stream and hook containers of backup, restore and hook Jobs: their launch, user, mounts
//! and arguments, and the whole Jobs as golden files.

use std::collections::BTreeMap;

use jiff::SignedDuration;
use k8s_openapi::api::core::v1::Container;
use neverwiped_contract::streams::{HookPhase, LAUNCHER_PATH};

use super::golden_tests::assert_golden;
use super::tests::{container, from_plan, plan, pod_spec, restore, run, settings};
use super::*;
use crate::api::{BackupPlan, BackupStream, Hook, HookOnError, RestoreStream, StreamEnvVar};
use crate::mover::{Mover, MoverIdentity};
use crate::volumes::SnapshotRunInfo;

fn env(name: &str, value: Option<&str>, secret: Option<(&str, &str)>) -> StreamEnvVar {
    serde_json::from_value(match (value, secret) {
        (Some(value), _) => serde_json::json!({"name": name, "value": value}),
        (None, Some((secret, key))) => serde_json::json!({
            "name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}
        }),
        (None, None) => serde_json::json!({"name": name}),
    })
    .unwrap()
}

/// The test plan with a Redis dump reading the `data` claim, a pre hook in the sidecar's image
/// and a post hook in its own.
fn plan_with_streams() -> BackupPlan {
    let mut plan = plan();
    plan.spec.streams = vec![BackupStream {
        name: "cache".into(),
        image: "registry.example/redis:7".into(),
        command: vec!["redis-cli".into(), "--rdb".into(), "-".into()],
        env: vec![env("REDISCLI_AUTH", None, Some(("redis", "password")))],
        allow_empty: true,
        volume_mounts: serde_json::from_value(serde_json::json!([
            {"claimName": "data", "mountPath": "/var/lib/redis"},
            {"claimName": "spool", "mountPath": "/spool", "readOnly": false}
        ]))
        .unwrap(),
    }];
    let hook = |name: &str, image: Option<&str>, timeout: i64| Hook {
        name: name.into(),
        image: image.map(Into::into),
        command: vec!["psql".into(), "-c".into(), "CHECKPOINT".into()],
        env: vec![env("PGHOST", Some("pg"), None)],
        timeout_seconds: timeout,
        on_error: HookOnError::Fail,
    };
    plan.spec.hooks.pre = vec![hook("checkpoint", None, 30)];
    plan.spec.hooks.post = vec![hook("thaw", Some("registry.example/tools:1"), 90)];
    plan
}

fn extra<'a>(job: &'a Job, name: &str) -> &'a Container {
    let pod = pod_spec(job);
    pod.containers.iter().find(|c| c.name == name).unwrap()
}

#[test]
fn golden_backup_job_with_streams_and_hooks() {
    let job = backup_job(&plan_with_streams(), &run(), &settings());
    assert_golden("backup-streams-hooks", &job);
    let pod = pod_spec(&job);
    let names: Vec<&str> = pod.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "sidecar",
            "stream-cache",
            "hook-pre-checkpoint",
            "hook-post-thaw"
        ]
    );
    assert_eq!(
        pod.init_containers.as_ref().unwrap()[0].name,
        TOOLS_CONTAINER
    );
    // Long enough for the post hook while the pod stops.
    assert_eq!(pod.termination_grace_period_seconds, Some(120));
    let args = container(&job).args.clone().unwrap();
    for expected in [
        ["--stream", "cache=/neverwiped/exchange/stream-cache"],
        ["--stream-allow-empty", "cache"],
        [
            "--hook",
            "pre:checkpoint=/neverwiped/exchange/pre-checkpoint",
        ],
        ["--hook", "post:thaw=/neverwiped/exchange/post-thaw"],
    ] {
        assert!(
            args.windows(2).any(|w| w == expected),
            "{expected:?} in {args:?}"
        );
    }
    let hook = extra(&job, "hook-pre-checkpoint");
    assert_eq!(hook.image.as_deref(), Some(settings().image.as_str()));
    assert_eq!(
        hook.command.as_ref().unwrap()[..7],
        [
            LAUNCHER_PATH,
            "launch",
            "hook",
            "--slot",
            "/neverwiped/exchange/pre-checkpoint",
            "--timeout",
            "30"
        ]
    );
}

#[test]
fn extra_containers_never_run_as_root_and_reuse_the_sidecars_claims() {
    // The mover is root here: the extra containers still are not.
    let job = backup_job(&plan_with_streams(), &run(), &settings());
    let stream = extra(&job, "stream-cache");
    let security = stream.security_context.as_ref().unwrap();
    assert_eq!(security.run_as_user, Some(65532));
    assert_eq!(security.run_as_non_root, Some(true));
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(
        security.capabilities.as_ref().unwrap().drop,
        Some(vec!["ALL".into()])
    );
    let mounts = stream.volume_mounts.as_ref().unwrap();
    let data = mounts
        .iter()
        .find(|m| m.mount_path == "/var/lib/redis")
        .unwrap();
    assert!(
        data.name.starts_with("data-"),
        "the sidecar's volume: {}",
        data.name
    );
    assert_eq!(data.read_only, Some(true));
    let spool = mounts.iter().find(|m| m.mount_path == "/spool").unwrap();
    assert_eq!(spool.read_only, None);
    // The secret stays a reference.
    let variable = &stream.env.as_ref().unwrap()[0];
    assert_eq!(variable.value, None);
    assert!(variable.value_from.is_some());

    let mover = MoverIdentity {
        uid: 1001,
        gid: 1002,
        ..MoverIdentity::default()
    };
    let unprivileged = BackupRun {
        mover: Mover::Unprivileged(mover),
        ..run()
    };
    let job = backup_job(&plan_with_streams(), &unprivileged, &settings());
    let security = extra(&job, "hook-post-thaw")
        .security_context
        .clone()
        .unwrap();
    assert_eq!(
        (security.run_as_user, security.run_as_group),
        (Some(1001), Some(1002))
    );
}

#[test]
fn a_backup_whose_hooks_ran_around_its_snapshots_has_its_streams_but_no_hooks() {
    let run = BackupRun {
        hooks_in_pod: false,
        ..run()
    };
    let job = backup_job(&plan_with_streams(), &run, &settings());
    let names: Vec<&str> = pod_spec(&job)
        .containers
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["sidecar", "stream-cache"]);
    assert!(!container(&job)
        .args
        .clone()
        .unwrap()
        .contains(&"--hook".to_string()));
    // A plan without streams or hooks gets the pod it always had.
    let plain = backup_job(&plan(), &super::tests::run(), &settings());
    assert!(pod_spec(&plain).init_containers.is_none());
}

#[test]
fn golden_restore_job_with_streams_only() {
    let mut restore = restore();
    restore.spec.volumes.clear();
    restore.spec.databases.clear();
    restore.spec.streams = vec![RestoreStream {
        name: "cache".into(),
        image: None,
        command: vec!["redis-cli".into(), "--pipe".into()],
        env: Vec::new(),
        volume_mounts: serde_json::from_value(serde_json::json!([
            {"claimName": "redis-data", "mountPath": "/data"}
        ]))
        .unwrap(),
    }];
    let plan = plan_with_streams();
    let run = RestoreRun {
        deadline: SignedDuration::from_hours(12),
        database_types: BTreeMap::new(),
        mover: Mover::Privileged,
        stream_images: BTreeMap::from([("cache".into(), "registry.example/redis:7".into())]),
    };
    let job = restore_job(&restore, &from_plan(&restore, &plan), &run, &settings());
    assert_golden("restore-streams", &job);
    let stream = extra(&job, "stream-cache");
    assert_eq!(stream.command.as_ref().unwrap()[2], "restore-stream");
    let args = container(&job).args.clone().unwrap();
    assert!(args
        .windows(2)
        .any(|w| w == ["--stream", "cache=/neverwiped/exchange/stream-cache"]));
    assert!(!args.contains(&"--target".to_string()), "{args:?}");
    let mount = &stream.volume_mounts.as_ref().unwrap()[3];
    assert_eq!(
        (mount.mount_path.as_str(), mount.read_only),
        ("/data", None)
    );
}

#[test]
fn golden_hook_jobs_around_snapshots() {
    let plan = plan_with_streams();
    let info = SnapshotRunInfo {
        trigger: RunTrigger::Schedule,
        scheduled_time: Some("2026-11-30T01:30:00Z".parse().unwrap()),
        manual_trigger: None,
    };
    let run_name = backup_job_name(&plan, &run());
    for (phase, golden) in [
        (HookPhase::Pre, "hooks-pre"),
        (HookPhase::Post, "hooks-post"),
    ] {
        let hooks_run = HooksRun {
            run: &run_name,
            info: &info,
            phase,
            deadline: hooks_deadline(&plan, phase, SignedDuration::from_hours(2)),
            mover: &Mover::Privileged,
        };
        let job = hooks_job(&plan, &hooks_run, &settings());
        assert_golden(golden, &job);
        assert_eq!(hook_phase_of(&job), Some(phase));
        assert_eq!(
            job.metadata.name.as_deref(),
            Some(format!("nightly-hooks-{}-29933370", phase.arg()).as_str())
        );
        let args = container(&job).args.clone().unwrap();
        assert_eq!(args[..3], ["hooks", "--phase", phase.arg()]);
        // The queue counts it as the plan's backup, on the plan's repository host.
        let (_, key, footprint) =
            crate::controller::queue::watch::job_footprint(&job).expect("an operator Job");
        assert_eq!(footprint.class, crate::controller::queue::RunClass::Backup);
        assert_eq!(footprint.host.as_deref(), Some("gate.example.com"));
        assert_eq!(key.namespace, "shop");
    }
    assert_eq!(hook_phase_of(&backup_job(&plan, &run(), &settings())), None);
}
