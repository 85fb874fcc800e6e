//! A plan with one copy (`spec.copies`), as the operator binary sees it from the sidecar's
//! results. Emulated: the backup and copy Jobs' pods (the test plays the Job controller and the
//! kubelet, writing the results the real sidecar writes: a backup's snapshot and its listing of
//! the plan's snapshots; a copy's newest copied snapshot) and the passing of time between two
//! nights (snapshot times in the past). Real: the API server, the CRD's validation, the operator's
//! Jobs, status, Events and metrics endpoint.
//!
//! Night one's copy fails (the destination is down): the status shows the error and the lag, and
//! the lag metric is above zero. Night two's copy catches up both snapshots: the status names the
//! newest as copied, the lag is zero again.

use neverwiped_contract::{ExitStatus, HostSnapshots, Operation, RunResult, SnapshotEntry};
use serde_json::json;

use super::*;

const OFFSITE_PASSWORD: &str = "offsite password 2c9d";
const OFFSITE_GATE_PASSWORD: &str = "offsite-gate-password-5e1f";

/// A snapshot id whose first 8 hex digits are `prefix`.
fn snapshot_id(prefix: &str) -> String {
    format!("{prefix}{}", "0".repeat(56))
}

/// A backup's result that wrote `id` (taken `hours_ago`) and listed `listed` (id, hours ago),
/// newest first.
fn backup_result(id: &str, listed: &[(&str, i64)]) -> RunResult {
    let now = jiff::Timestamp::now();
    let time = |hours: i64| (now - jiff::SignedDuration::from_hours(hours)).to_string();
    let mut result = run_result(Operation::Backup, ExitStatus::Success);
    result.snapshot_id = Some(snapshot_id(id));
    result.host_snapshots = Some(HostSnapshots {
        host: String::new(),
        total: listed.len() as u64,
        newest: listed
            .iter()
            .map(|(id, hours)| SnapshotEntry {
                id: (*id).to_owned(),
                time: time(*hours),
                files: 10,
                size_bytes: 1000,
                tags: vec!["plan=nightly".into()],
            })
            .collect(),
    });
    result
}

async fn finish_with(
    client: &Client,
    namespace: &str,
    job: &str,
    exit_code: i32,
    result: RunResult,
) {
    let ending = Ending::Result {
        exit_code,
        result: Box::new(result),
    };
    finish_job(client, namespace, job, ending).await;
}

/// Waits until `status.copies[0]` satisfies `done`, and returns it.
async fn copy_status(namespace: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    eventually(what, ACT_TIMEOUT, || async {
        let copy = plan_status(namespace, "nightly")["copies"][0].clone();
        done(&copy).then_some(copy)
    })
    .await
}

#[tokio::test]
async fn copies_a_plan_after_each_backup_and_shows_the_lag_until_a_copy_catches_up() {
    let Some(TestWorld { namespace, client }) = test_world("copies").await else {
        return;
    };
    let ns = namespace.name.as_str();
    create_example_world(&client, ns).await;
    create_secret(ns, "offsite-repository", &[("password", OFFSITE_PASSWORD)]);
    create_basic_auth_secret(ns, "offsite-login", "offsite-user", OFFSITE_GATE_PASSWORD);
    let operator = Operator::start(ns);
    let mut plan = example_plan(ns);
    plan["spec"]["copies"] = json!([{
        "name": "offsite",
        "repository": {
            "url": "http://offsite.example.test:8000/shop",
            "passwordSecretRef": {"name": "offsite-repository", "key": "password"},
            "credentialsSecretRef": {"name": "offsite-login"},
        },
    }]);
    apply(&plan);

    // Night one: the backup writes snapshot aaaaaaaa, taken two hours ago.
    job_created(&client, ns, "nightly-manual-1").await;
    let night_one = backup_result("aaaaaaaa", &[("aaaaaaaa", 2)]);
    finish_with(&client, ns, "nightly-manual-1", 0, night_one).await;
    let copy = job_created(&client, ns, "nightly-copy-offsite-aaaaaaaa").await;
    assert_eq!(
        args_of(&copy),
        [
            "copy",
            "--repo",
            "rest:http://offsite.example.test:8000/shop",
            "--result-file",
            "/dev/termination-log",
            "--from-repo",
            "rest:http://gate.example.test:8000/shop",
            "--host",
            &format!("{ns}/nightly"),
            "--init",
            "--retry-lock",
            "1800s",
        ]
    );
    let job_json = serde_json::to_string(&copy).unwrap();
    for secret in [
        REPOSITORY_PASSWORD,
        GATE_PASSWORD,
        OFFSITE_PASSWORD,
        OFFSITE_GATE_PASSWORD,
    ] {
        assert!(!job_json.contains(secret), "a secret value: {job_json}");
    }
    let pod = copy.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let env: BTreeMap<String, Value> = pod.containers[0]
        .env
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| (e.name.clone(), serde_json::to_value(e).unwrap()))
        .collect();
    let from_secret = |name: &str| env[name]["valueFrom"]["secretKeyRef"]["name"].clone();
    assert_eq!(from_secret("NEVERWIPED_GATE_USERNAME"), "offsite-login");
    assert_eq!(from_secret("NEVERWIPED_FROM_GATE_USERNAME"), "gate-login");
    let volumes: BTreeMap<String, Value> = pod
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .map(|v| (v.name.clone(), serde_json::to_value(v).unwrap()))
        .collect();
    for (variable, volume, secret) in [
        (
            "NEVERWIPED_PASSWORD_FILE",
            "repository-password",
            "offsite-repository",
        ),
        (
            "NEVERWIPED_GATE_PASSWORD_FILE",
            "gate-password",
            "offsite-login",
        ),
        (
            "NEVERWIPED_FROM_PASSWORD_FILE",
            "from-repository-password",
            "shop-repository",
        ),
        (
            "NEVERWIPED_FROM_GATE_PASSWORD_FILE",
            "from-gate-password",
            "gate-login",
        ),
    ] {
        assert!(env[variable]["value"]
            .as_str()
            .unwrap()
            .starts_with("/var/run/neverwiped/"));
        assert_eq!(volumes[volume]["secret"]["secretName"], secret, "{volume}");
    }
    assert_eq!(
        pod.containers[0]
            .security_context
            .as_ref()
            .unwrap()
            .run_as_non_root,
        Some(true)
    );

    // The destination is down: the copy fails.
    let mut failed = run_result(Operation::Copy, ExitStatus::Failed);
    failed.error = Some("cannot reach offsite.example.test:8000: connection refused".into());
    finish_with(&client, ns, "nightly-copy-offsite-aaaaaaaa", 1, failed).await;
    let copy = copy_status(ns, "the failed copy on the status", |c| {
        c["lastRun"]["jobName"] == "nightly-copy-offsite-aaaaaaaa"
    })
    .await;
    assert_eq!(copy["name"], "offsite");
    assert_eq!(copy["lastRun"]["result"], "Failed");
    assert_eq!(copy["lastRun"]["reason"], "CopyFailed");
    assert!(
        copy["lastError"]
            .as_str()
            .unwrap()
            .contains("connection refused"),
        "{copy}"
    );
    assert_eq!(copy["behindSnapshots"], 1);
    assert!(copy["behindSince"].is_string(), "{copy}");
    assert!(copy.get("lastCopiedSnapshot").is_none(), "{copy}");
    event_seen(ns, "CopyFailed", "connection refused").await;
    let lag = format!(
        "neverwiped_copy_lag_seconds{{namespace=\"{ns}\",plan=\"nightly\",copy=\"offsite\"}}"
    );
    let runs = |outcome: &str| {
        format!("neverwiped_copy_runs_total{{namespace=\"{ns}\",plan=\"nightly\",copy=\"offsite\",outcome=\"{outcome}\"}}")
    };
    let behind = eventually("the lag metric", ACT_TIMEOUT, || async {
        operator.metric(&lag).filter(|seconds| *seconds > 0.0)
    })
    .await;
    assert!(
        behind >= 2.0 * 3600.0 - 60.0,
        "the snapshot was taken two hours ago: {behind}"
    );
    assert_eq!(operator.metric(&runs("Failed")), Some(1.0));

    // Night two: a new snapshot; its copy catches up both.
    trigger_backup(ns, "nightly", "second");
    job_created(&client, ns, "nightly-manual-2").await;
    let night_two = backup_result("bbbbbbbb", &[("bbbbbbbb", 1), ("aaaaaaaa", 2)]);
    finish_with(&client, ns, "nightly-manual-2", 0, night_two).await;
    let copy = copy_status(ns, "two snapshots behind", |c| c["behindSnapshots"] == 2).await;
    assert!(
        copy["lastError"].is_string(),
        "kept until a copy succeeds: {copy}"
    );
    job_created(&client, ns, "nightly-copy-offsite-bbbbbbbb").await;
    let mut caught_up = run_result(Operation::Copy, ExitStatus::Success);
    caught_up.snapshot_id = Some(snapshot_id("bbbbbbbb"));
    caught_up.snapshot_time =
        Some((jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1)).to_string());
    caught_up.files = 2;
    finish_with(&client, ns, "nightly-copy-offsite-bbbbbbbb", 0, caught_up).await;
    let copy = copy_status(ns, "the copy caught up", |c| {
        c["lastRun"]["jobName"] == "nightly-copy-offsite-bbbbbbbb"
    })
    .await;
    assert_eq!(copy["lastRun"]["result"], "Succeeded");
    assert_eq!(copy["lastRun"]["snapshotsCopied"], 2);
    assert_eq!(copy["lastCopiedSnapshot"]["id"], "bbbbbbbb");
    assert_eq!(copy["behindSnapshots"], 0);
    assert!(
        copy.get("behindSince").is_none() && copy.get("lastError").is_none(),
        "{copy}"
    );
    event_seen(ns, "CopySucceeded", "offsite").await;
    eventually("the lag back at zero", ACT_TIMEOUT, || async {
        (operator.metric(&lag) == Some(0.0)).then_some(())
    })
    .await;
    assert_eq!(operator.metric(&runs("Succeeded")), Some(1.0));
    // One copy per snapshot: no third Job.
    let copies = job_names(&client, ns, "neverwiped.io/operation=copy").await;
    assert_eq!(
        copies,
        [
            "nightly-copy-offsite-aaaaaaaa",
            "nightly-copy-offsite-bbbbbbbb"
        ]
    );
}
