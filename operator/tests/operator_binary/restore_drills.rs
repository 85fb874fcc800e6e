//! Restore drills (`spec.verify`), as the operator binary (the chart's ServiceAccount, in a
//! namespace of its own) sees them from the sidecar's results; the tenant is a real user with an
//! edit-like Role in its namespace. Emulated: the Jobs' pods (the test plays the Job controller
//! and the kubelet, ending each sidecar with its result as the termination message). Real: the
//! API server, the CRD's validation and printer columns, RBAC, the operator's Jobs, status,
//! Events and metrics.
//!
//! The tenant asks for a drill while the plan's first backup runs: it waits for the backup, then
//! starts with scratch space for the listed snapshot. It proves the data within the objective
//! (`Verified: Succeeded`, the seconds of each volume and database recorded); a second drill
//! finds a file that differs (exit 14, `VerifyFailed`); a scheduled one takes longer than the
//! objective (`SucceededOverObjective`).

use k8s_openapi::api::batch::v1::Job;
use kube::api::Api;
use kube::ResourceExt;
use neverwiped_contract::drill::{DrillDatabase, DrillStats, DrillVolume};
use neverwiped_contract::{ExitStatus, HostSnapshots, Operation, RunResult, SnapshotEntry};
use serde_json::json;

use super::*;
use crate::support::tenant::{apply_as, kubectl_as, patch_plan_as, tenant};

const SNAPSHOT: &str = "5f0c3e9a1b2d4c6e8f0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f506";
/// A drill's Job name is its minute: a second drill may wait for the next one.
const NEXT_DRILL: Duration = Duration::from_secs(150);

fn plan(namespace: &str) -> Value {
    tenant_plan(
        namespace,
        json!({
            "verify": {
                "schedule": "* * * * *",
                "recoveryTimeObjective": "10m",
                "suspend": true,
            },
            "maintenance": {"prune": {"suspend": true}, "check": {"suspend": true}},
        }),
    )
}

/// The first backup's result: one snapshot of 2 GiB in 1000 files, listed for the plan's host.
fn backup_result(namespace: &str) -> RunResult {
    let mut result = run_result(Operation::Backup, ExitStatus::Success);
    result.host_snapshots = Some(HostSnapshots {
        host: format!("{namespace}/nightly"),
        total: 1,
        newest: vec![SnapshotEntry {
            id: SNAPSHOT[..8].into(),
            time: jiff::Timestamp::now().to_string(),
            files: 1000,
            size_bytes: 2 << 30,
            tags: vec![],
        }],
    });
    result
}

/// A drill's result: the volume took `volume_secs`, the database 120 s.
fn drill_result(status: ExitStatus, volume_secs: f64, mismatched: u64) -> RunResult {
    let mut result = run_result(Operation::Drill, status);
    result.snapshot_id = Some(SNAPSHOT.into());
    result.drill = Some(DrillStats {
        sample_percent: 100,
        sample_round: 0,
        volumes: vec![DrillVolume {
            path: "/data/data".into(),
            files: 1000,
            bytes: 2 << 30,
            secs: volume_secs,
            mismatched,
        }],
        databases: vec![DrillDatabase {
            name: "orders".into(),
            engine: "postgresql".into(),
            bytes: 50 << 20,
            secs: 120.0,
            tables_checked: 7,
            error: None,
        }],
    });
    result
}

/// The plan's drill Jobs, by name.
async fn drill_jobs(jobs: &Api<Job>) -> Vec<Job> {
    labelled_jobs(
        jobs,
        "neverwiped.io/plan=nightly,neverwiped.io/operation=drill",
    )
    .await
}

/// Waits for a drill Job not among `seen`.
async fn new_drill(jobs: &Api<Job>, seen: &[String], timeout: Duration) -> Job {
    eventually("a new drill Job", timeout, || async {
        let found = drill_jobs(jobs).await;
        found
            .into_iter()
            .find(|job| !seen.contains(&job.name_any()))
    })
    .await
}

/// Ends drill `job` with `result` and waits for it in `status.verify.lastRun`.
async fn finish_drill(
    client: &Client,
    ns: &str,
    job: &str,
    exit_code: i32,
    result: RunResult,
) -> Value {
    let ending = Ending::Result {
        exit_code,
        result: Box::new(result),
    };
    finish_job(client, ns, job, ending).await;
    eventually("the drill on status.verify", ACT_TIMEOUT, || async {
        let verify = plan_status(ns, "nightly")["verify"].clone();
        (verify["lastRun"]["jobName"] == json!(job)).then_some(verify)
    })
    .await
}

fn request_drill(tenant: &std::path::Path, ns: &str, value: &str) {
    let annotation = format!("neverwiped.io/verify-now={value}");
    let args = [
        "annotate",
        "backupplan",
        "nightly",
        "-n",
        ns,
        &annotation,
        "--overwrite",
    ];
    let annotated = kubectl_as(tenant, &args);
    assert!(annotated.status.success(), "{annotated:?}");
}

#[tokio::test]
async fn drills_prove_the_plans_snapshot_after_its_backup_and_record_the_recovery_time() {
    let Some(TestWorld { namespace, client }) = test_world("verify").await else {
        return;
    };
    let ns = namespace.name.as_str();
    let own = TestNamespace::create("verify-op");
    let own_ns = own.name.as_str();
    create_tenant_plan_secrets(ns);
    let drill_image = ("NEVERWIPED_DRILL_IMAGE", "ghcr.io/neverwiped/drill:test");
    let operator = Operator::start_as_chart(ns, own_ns, &[drill_image]);
    let tenant = tenant(ns);
    apply_as(&tenant, &plan(ns));
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);

    // The first backup runs; a drill asked for meanwhile waits for it.
    job_created(&client, ns, "nightly-manual-1").await;
    request_drill(&tenant, ns, "first");
    let waiting = eventually("the drill waiting for the backup", ACT_TIMEOUT, || async {
        let verify = plan_status(ns, "nightly")["verify"].clone();
        verify["waiting"].as_str().map(str::to_owned)
    })
    .await;
    assert!(waiting.contains("nightly-manual-1"), "{waiting}");
    assert!(
        drill_jobs(&jobs).await.is_empty(),
        "no drill beside the backup"
    );

    // Once the backup listed its snapshot, the drill starts: the plan's host, scratch for the
    // snapshot and three times no dump (the 1 GiB floor), no claim, the drill image.
    let ending = Ending::Result {
        exit_code: 0,
        result: Box::new(backup_result(ns)),
    };
    finish_job(&client, ns, "nightly-manual-1", ending).await;
    run_recorded(ns, "nightly", "nightly-manual-1").await;
    let first = new_drill(&jobs, &[], ACT_TIMEOUT).await;
    let first_name = first.name_any();
    assert!(first_name.starts_with("nightly-verify-"), "{first_name}");
    let args = args_of(&first);
    assert_eq!(&args[..2], ["drill", "latest"]);
    assert!(
        args.windows(2)
            .any(|w| w == ["--host", &format!("{ns}/nightly")]),
        "{args:?}"
    );
    assert!(args.contains(&"--databases".to_owned()), "{args:?}");
    let pod = first.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let volumes = pod.volumes.as_deref().unwrap_or_default();
    assert!(volumes.iter().all(|v| v.persistent_volume_claim.is_none()));
    let scratch = volumes.iter().find(|v| v.name == "scratch").unwrap();
    let limit = scratch
        .empty_dir
        .as_ref()
        .unwrap()
        .size_limit
        .clone()
        .unwrap();
    assert_eq!(
        limit.0, "3076Mi",
        "2 GiB, 1000 blocks and the 1 GiB dump floor"
    );
    assert_eq!(
        pod.containers[0].image.as_deref(),
        Some("ghcr.io/neverwiped/drill:test")
    );
    assert_eq!(
        plan_status(ns, "nightly")["verify"]["activeJob"],
        json!(first_name)
    );

    // It proves the data in 420 s, within the 10m objective.
    let verify = finish_drill(
        &client,
        ns,
        &first_name,
        0,
        drill_result(ExitStatus::Success, 300.0, 0),
    )
    .await;
    let last = &verify["lastRun"];
    assert_eq!(last["result"], "Succeeded", "{verify}");
    assert_eq!(last["recoverySeconds"], 420.0, "{verify}");
    assert_eq!(last["snapshotId"], json!(&SNAPSHOT[..8]));
    assert_eq!(last["volumes"][0]["seconds"], 300.0, "{verify}");
    assert_eq!(last["databases"][0]["name"], "orders");
    assert_eq!(last["databases"][0]["seconds"], 120.0, "{verify}");
    assert_eq!(last["databases"][0]["tablesChecked"], 7);
    assert_eq!(verify["lastRequest"], "first");
    assert_eq!(verify["drills"], 1);
    assert!(verify["lastSuccessTime"].is_string(), "{verify}");
    assert_eq!(plan_row(ns, "nightly")["VERIFIED"], "Succeeded");
    event_seen(ns, "DrillSucceeded", &first_name).await;
    let series = |name: &str| format!("{name}{{namespace=\"{ns}\",plan=\"nightly\"}}");
    eventually("the drill's metrics", ACT_TIMEOUT, || async {
        let duration = operator.metric(&series("neverwiped_restore_drill_duration_seconds"));
        let result = operator.metric(&series("neverwiped_restore_drill_last_result"));
        let objective = operator.metric(&series("neverwiped_restore_drill_objective_seconds"));
        (duration == Some(420.0) && result == Some(1.0) && objective == Some(600.0)).then_some(())
    })
    .await;

    // A second drill finds a file that differs: VerifyFailed, the file named.
    request_drill(&tenant, ns, "second");
    let second = new_drill(&jobs, std::slice::from_ref(&first_name), NEXT_DRILL).await;
    let second_name = second.name_any();
    let mut differs = drill_result(ExitStatus::VerifyFailed, 30.0, 1);
    differs.error = Some(
        "1 file differs from the snapshot: /scratch/files/data/data/orders.db (content)".into(),
    );
    let verify = finish_drill(&client, ns, &second_name, 14, differs).await;
    let last = &verify["lastRun"];
    assert_eq!(last["result"], "Failed", "{verify}");
    assert_eq!(last["reason"], "VerifyFailed", "{verify}");
    assert!(
        last["message"].as_str().unwrap().contains("orders.db"),
        "{verify}"
    );
    assert_eq!(last["volumes"][0]["mismatched"], 1);
    assert_eq!(plan_row(ns, "nightly")["VERIFIED"], "Failed");
    event_seen(ns, "VerifyFailed", "orders.db").await;
    eventually("the failed drill's metric", ACT_TIMEOUT, || async {
        let result = operator.metric(&series("neverwiped_restore_drill_last_result"));
        (result == Some(0.0)).then_some(())
    })
    .await;

    // The tenant lets the schedule run: the next minute's drill takes longer than 10 minutes.
    let patch = json!({"spec": {"verify": {"suspend": false}}});
    patch_plan_as(&tenant, ns, "nightly", &patch);
    let third = new_drill(&jobs, &[first_name, second_name], NEXT_DRILL).await;
    let third_name = third.name_any();
    let trigger = &third.annotations()["neverwiped.io/trigger"];
    assert!(
        ["Schedule", "CatchUp"].contains(&trigger.as_str()),
        "{trigger}"
    );
    let slow = drill_result(ExitStatus::Success, 780.0, 0);
    let verify = finish_drill(&client, ns, &third_name, 0, slow).await;
    let last = &verify["lastRun"];
    assert_eq!(last["result"], "SucceededOverObjective", "{verify}");
    assert_eq!(last["reason"], "OverObjective", "{verify}");
    assert_eq!(last["recoverySeconds"], 900.0, "{verify}");
    assert_eq!(last["recoveryTimeObjective"], "10m");
    assert_eq!(verify["history"].as_array().unwrap().len(), 3, "{verify}");
    assert_eq!(
        plan_row(ns, "nightly")["VERIFIED"],
        "SucceededOverObjective"
    );
    event_seen(ns, "OverObjective", &third_name).await;
    eventually("the slow drill's metrics", ACT_TIMEOUT, || async {
        let duration = operator.metric(&series("neverwiped_restore_drill_duration_seconds"));
        let result = operator.metric(&series("neverwiped_restore_drill_last_result"));
        (duration == Some(900.0) && result == Some(1.0)).then_some(())
    })
    .await;
}
