//! Prune and check of a plan's repository, run by the `neverwiped-operator` binary against real
//! Kubernetes API machinery: the prune Job it schedules, and what its result does to the plan's
//! status, printer columns and metrics. The test plays the Job controller and the kubelet.

mod support;

#[path = "maintenance/protected.rs"]
mod protected;

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kube::api::Api;
use neverwiped_contract::{ExitStatus, Operation, PruneStats, RepositoryStats};
use neverwiped_operator::job::lock_hostname;
use serde_json::{json, Value};
use support::*;

/// A prune every minute: the test waits for at most one.
const PRUNE_WAIT: Duration = Duration::from_secs(90);

fn plan(namespace: &str) -> Value {
    json!({
        "apiVersion": "neverwiped.io/v1alpha1",
        "kind": "BackupPlan",
        "metadata": {"name": "orders", "namespace": namespace},
        "spec": {
            "schedule": "0 3 * * *",
            "manualTrigger": "first",
            "repository": {
                "url": "http://gate.example.test:8000/orders",
                "passwordSecretRef": {"name": "orders-repository", "key": "password"},
            },
            "databases": [{
                "name": "orders",
                "type": "postgresql",
                "host": "postgres.orders.svc",
                "credentialsSecretRef": {"name": "orders-db"},
            }],
            "retention": {"keepDaily": 7, "keepWeekly": 4, "keepMonthly": 12},
            "maintenance": {
                "prune": {"schedule": "* * * * *"},
                "check": {"suspend": true},
            },
        },
    })
}

#[tokio::test]
async fn retention_runs_with_each_backup_and_a_scheduled_prune_reports_what_it_freed() {
    let Some(TestWorld { namespace, client }) = test_world("prune").await else {
        return;
    };
    let ns = namespace.name.as_str();
    create_secret(
        ns,
        "orders-repository",
        &[("password", "repository-password-5a1e")],
    );
    create_basic_auth_secret(ns, "orders-db", "backup", "db-password-77c0");
    let operator = Operator::start(ns);
    kubectl_stdin(&["apply", "-f", "-"], Some(&plan(ns).to_string()));

    // The manual backup carries the retention rules; its result measures the repository.
    let backup = job_created(&client, ns, "orders-manual-1").await;
    let args = args_of(&backup);
    for pair in [
        ["--keep-daily", "7"],
        ["--keep-weekly", "4"],
        ["--keep-monthly", "12"],
    ] {
        assert!(args.windows(2).any(|w| w == pair), "{pair:?} in {args:?}");
    }
    let mut backed_up = run_result(Operation::Backup, ExitStatus::Success);
    backed_up.snapshots_forgotten = Some(1);
    backed_up.repository = Some(RepositoryStats {
        size_bytes: 600_000_000,
        snapshots: 9,
    });
    finish_job(
        &client,
        ns,
        "orders-manual-1",
        Ending::Result {
            exit_code: 0,
            result: Box::new(backed_up),
        },
    )
    .await;

    // Then, at the next minute, the prune: its own Job, without privileges or volumes, that
    // clears the plan's stale locks first.
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let prune = eventually("a prune Job", PRUNE_WAIT, || async {
        let names = job_names(&client, ns, "neverwiped.io/operation=prune").await;
        match names.first() {
            Some(name) => jobs.get(name).await.ok(),
            None => None,
        }
    })
    .await;
    let prune_name = prune.metadata.name.clone().unwrap();
    assert!(prune_name.starts_with("orders-prune-"), "{prune_name}");
    let args = args_of(&prune);
    assert_eq!(args[0], "prune");
    let hostname = lock_hostname(ns, "orders");
    assert!(
        args.windows(2)
            .any(|w| w == ["--remove-locks-of-host", hostname.as_str()]),
        "{args:?}"
    );
    let pod = prune.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let security = pod.containers[0].security_context.as_ref().unwrap();
    assert_eq!(security.run_as_non_root, Some(true));
    assert!(security.capabilities.as_ref().unwrap().add.is_none());
    let status = kubectl_json(&["get", "backupplan", "orders", "-n", ns])["status"].clone();
    assert_eq!(status["activeRun"]["kind"], "Prune");
    assert_eq!(status["repository"]["size"], "572Mi");

    let mut pruned = run_result(Operation::Prune, ExitStatus::Success);
    pruned.snapshot_id = None;
    pruned.prune = Some(PruneStats {
        bytes_freed: 42_000_000,
        bytes_kept: 558_000_000,
        packs_deleted: 3,
    });
    pruned.repository = Some(RepositoryStats {
        size_bytes: 558_000_000,
        snapshots: 9,
    });
    finish_job(
        &client,
        ns,
        &prune_name,
        Ending::Result {
            exit_code: 0,
            result: Box::new(pruned),
        },
    )
    .await;
    let status = eventually("the prune recorded", ACT_TIMEOUT, || async {
        let status = kubectl_json(&["get", "backupplan", "orders", "-n", ns])["status"].clone();
        (status["prune"]["lastRun"]["jobName"] == json!(prune_name)).then_some(status)
    })
    .await;
    let last = &status["prune"]["lastRun"];
    assert_eq!(last["result"], "Succeeded");
    assert_eq!(last["bytesFreed"], 42_000_000);
    assert_eq!(status["repository"]["sizeBytes"], 558_000_000);
    assert_eq!(status["repository"]["snapshots"], 9);
    assert!(status["prune"]["nextScheduleTime"].is_string(), "{status}");

    // `kubectl get backupplans` shows the repository's size; `-o wide` its snapshots.
    let rows = table(&kubectl(&["get", "backupplans", "-n", ns]));
    assert_eq!(rows[0]["REPOSITORY"], "532Mi", "{rows:?}");
    let wide = table(&kubectl(&["get", "backupplans", "-n", ns, "-o", "wide"]));
    assert_eq!(wide[0]["SNAPSHOTS"], "9", "{wide:?}");
    let series = format!("neverwiped_repository_size_bytes{{namespace=\"{ns}\",plan=\"orders\"}}");
    let size = eventually("the size metric", ACT_TIMEOUT, || async {
        operator.metric(&series)
    })
    .await;
    assert_eq!(size, 558_000_000.0);
    let freed = operator.metric(&format!(
        "neverwiped_prune_freed_bytes_total{{namespace=\"{ns}\",plan=\"orders\"}}"
    ));
    assert_eq!(freed, Some(42_000_000.0));
    let interval = operator.metric(&format!(
        "neverwiped_backup_schedule_interval_seconds{{namespace=\"{ns}\",plan=\"orders\"}}"
    ));
    assert_eq!(interval, Some(86_400.0));
}
