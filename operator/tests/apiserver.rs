//! The reconcilers against real Kubernetes API machinery: CRD validation, server-side apply of
//! status, Jobs, Events. The test plays the Job controller and the kubelet.
//!
//! The server is found through `KUBECONFIG` (e.g. `../shared/tools/real-apiserver.sh up`). Without
//! one the test skips loudly; under CI a missing server fails it.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use neverwiped_contract::{ExitStatus, Operation, RunResult, RESULT_FORMAT_VERSION};
use neverwiped_operator::api::{BackupPlan, Restore};
use neverwiped_operator::controller::{backup_plan, Context, Settings};
use neverwiped_operator::metrics::Metrics;
use serde_json::json;

mod support;

use support::test_world;

async fn create<K>(client: &Client, namespace: &str, object: serde_json::Value)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object).expect("a valid object");
    Api::<K>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &object)
        .await
        .expect("created");
}

#[tokio::test]
async fn backup_plan_runs_a_job_and_reports_its_result() {
    // The namespace goes when `world` does, also when the test fails.
    let Some(world) = test_world("op-test").await else {
        return;
    };
    let client = world.client.clone();
    let namespace = world.namespace.name.clone();
    create::<Secret>(
        &client,
        &namespace,
        json!({"metadata": {"name": "repo"}, "stringData": {"password": "pw"}}),
    )
    .await;
    create::<PersistentVolumeClaim>(
        &client,
        &namespace,
        json!({"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .await;
    let plans: Api<BackupPlan> = Api::namespaced(client.clone(), &namespace);
    let plan: BackupPlan = serde_json::from_value(json!({
        "apiVersion": "neverwiped.io/v1alpha1", "kind": "BackupPlan",
        "metadata": {"name": "nightly", "namespace": namespace},
        "spec": {
            "schedule": "30 2 * * *", "timeZone": "Europe/Berlin", "manualTrigger": "first",
            "repository": {"url": "http://127.0.0.1:8000/repo", "passwordSecretRef": {"name": "repo", "key": "password"}},
            "volumes": [{"claimName": "data"}]
        }
    }))
    .unwrap();
    plans
        .create(&PostParams::default(), &plan)
        .await
        .expect("plan created");

    // A schema-invalid plan never reaches the operator.
    let mut invalid = plan.clone();
    invalid.metadata.name = Some("invalid".into());
    invalid.spec.volumes[0].selector = Some(Default::default());
    let error = plans
        .create(&PostParams::default(), &invalid)
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("set exactly one of claimName or selector"),
        "{error}"
    );

    let ctx = Arc::new(Context::new(
        client.clone(),
        Arc::new(Metrics::default()),
        Settings::with_image("sidecar:test"),
    ));
    backup_plan::apply(Arc::new(plans.get("nightly").await.unwrap()), ctx.clone())
        .await
        .expect("reconcile");

    let jobs: Api<Job> = Api::namespaced(client.clone(), &namespace);
    let job = jobs
        .get("nightly-manual-1")
        .await
        .expect("the manual run's Job");
    let pod_spec = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    assert_eq!(pod_spec.automount_service_account_token, Some(false));
    let args = pod_spec.containers[0].args.clone().unwrap();
    assert_eq!(&args[..2], ["backup", "/data/data"]);
    let status = plans.get_status("nightly").await.unwrap().status.unwrap();
    assert_eq!(
        status.active_run.as_ref().unwrap().job_name,
        "nightly-manual-1"
    );
    assert_eq!(status.last_manual_trigger.as_deref(), Some("first"));

    // Play the kubelet and the Job controller.
    let result = RunResult {
        hooks: Vec::new(),
        paused_secs: None,
        streams: Vec::new(),
        verification: None,
        version: RESULT_FORMAT_VERSION,
        operation: Operation::Backup,
        status: ExitStatus::Success,
        snapshot_id: Some("0123456789abcdef".into()),
        snapshot_time: None,
        started_at: "2026-11-30T02:30:00Z".into(),
        finished_at: "2026-11-30T02:31:00Z".into(),
        duration_secs: 60.0,
        files: 7,
        bytes_read: 7000,
        bytes_added: 700,
        bytes_transferred: 750,
        bytes_per_second: None,
        databases: vec![],
        warnings_total: 0,
        warnings: vec![],
        error: None,
        repository: None,
        snapshots_forgotten: None,
        prune: None,
        check: None,
        host_snapshots: None,
        key_id: None,
        changes: None,
        drill: None,
        sources: None,
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "nightly-manual-1-x", "labels": {"batch.kubernetes.io/job-name": "nightly-manual-1"}},
        "spec": {"containers": [{"name": "sidecar", "image": "sidecar:test"}], "restartPolicy": "Never"}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let pod_status = json!({"status": {"phase": "Succeeded", "containerStatuses": [{
        "name": "sidecar", "image": "sidecar:test", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": result.to_termination_message()}}
    }]}});
    pods.patch_status(
        "nightly-manual-1-x",
        &PatchParams::default(),
        &Patch::Merge(&pod_status),
    )
    .await
    .unwrap();
    let job_status = json!({"status": {
        "startTime": "2026-11-30T02:30:00Z", "completionTime": "2026-11-30T02:31:00Z", "succeeded": 1,
        "conditions": [
            {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": "2026-11-30T02:31:00Z"},
            {"type": "Complete", "status": "True", "lastTransitionTime": "2026-11-30T02:31:00Z"}
        ]
    }});
    jobs.patch_status(
        "nightly-manual-1",
        &PatchParams::default(),
        &Patch::Merge(&job_status),
    )
    .await
    .unwrap();

    backup_plan::apply(Arc::new(plans.get("nightly").await.unwrap()), ctx.clone())
        .await
        .expect("reconcile");
    let status = plans.get_status("nightly").await.unwrap().status.unwrap();
    let last = status.last_run.as_ref().expect("the run is recorded");
    assert_eq!(last.snapshot_id.as_deref(), Some("0123456789abcdef"));
    assert_eq!(last.bytes_sent, Some(750));
    assert!(status.active_run.is_none());
    let conditions: BTreeMap<_, _> = status
        .conditions
        .iter()
        .map(|c| (c.type_.as_str(), (c.status.as_str(), c.reason.as_str())))
        .collect();
    // The plan keeps snapshots and the operator has no maintenance login: its backups forget
    // with their own login, which Ready names while the plan still runs.
    assert_eq!(conditions["Ready"], ("True", "BackupLoginCanDeleteHistory"));
    assert_eq!(conditions["Running"], ("False", "Idle"));
    assert_eq!(conditions["LastBackupSucceeded"], ("True", "Succeeded"));
    assert!(status.next_schedule_time.is_some());

    // A missing Secret: Ready=False with its reason, no Job.
    plans
        .patch(
            "nightly",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"manualTrigger": "second", "repository": {"passwordSecretRef": {"name": "gone"}}}})),
        )
        .await
        .unwrap();
    backup_plan::apply(Arc::new(plans.get("nightly").await.unwrap()), ctx)
        .await
        .expect("reconcile");
    let status = plans.get_status("nightly").await.unwrap().status.unwrap();
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "SecretNotFound")
    );
    assert!(jobs.get_opt("nightly-manual-2").await.unwrap().is_none());
}

#[tokio::test]
async fn the_examples_are_accepted_by_the_api_server() {
    // The namespace goes when `world` does, also when the test fails.
    let Some(world) = test_world("op-test").await else {
        return;
    };
    let client = world.client.clone();
    let namespace = world.namespace.name.clone();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples");
    let mut plan: BackupPlan =
        serde_saphyr::from_str(&std::fs::read_to_string(root.join("backupplan.yaml")).unwrap())
            .unwrap();
    plan.metadata.namespace = Some(namespace.clone());
    Api::<BackupPlan>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &plan)
        .await
        .expect("the BackupPlan example is valid");
    let mut restore: Restore =
        serde_saphyr::from_str(&std::fs::read_to_string(root.join("restore.yaml")).unwrap())
            .unwrap();
    restore.metadata.namespace = Some(namespace.clone());
    Api::<Restore>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &restore)
        .await
        .expect("the Restore example is valid");
}
