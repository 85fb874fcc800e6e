//! A Restore that names a copy of its plan (`copy`): the restore Job reads the copy's repository
//! with the copy's Secrets, and the plan's snapshots there (host `NAMESPACE/PLAN`); a copy the
//! plan does not have leaves the Restore `Ready=False`, `CopyNotFound`, and creates no Job. Real:
//! the API server, the CRD's validation, the operator's Jobs, status and Events.

use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use serde_json::{json, Value};

use super::{apply, condition, create_example_world, event_seen, example_plan, secret_names};
use crate::support::*;

fn restore_of_copy(namespace: &str, name: &str, copy: &str) -> Value {
    json!({
        "apiVersion": "neverwiped.io/v1alpha1", "kind": "Restore",
        "metadata": {"name": name, "namespace": namespace, "annotations": {
            "neverwiped.io/requested-by": "admin",
            "neverwiped.io/requested-by-groups": "system:masters",
        }},
        "spec": {
            "backupPlanName": "nightly",
            "copy": copy,
            "volumes": [{"sourceClaimName": "uploads", "targetClaimName": "uploads"}],
        },
    })
}

#[tokio::test]
async fn a_restore_from_a_copy_reads_the_copys_repository_and_an_unknown_copy_waits() {
    let Some(TestWorld { namespace, client }) = test_world("fromcopy").await else {
        return;
    };
    let ns = namespace.name.as_str();
    create_example_world(&client, ns).await;
    create_secret(ns, "offsite-repository", &[("password", "offsite pw 81a0")]);
    create_basic_auth_secret(ns, "offsite-login", "offsite-user", "offsite-gate-pw-3d7e");
    let _operator = Operator::start(ns);
    let mut plan = example_plan(ns);
    let spec = plan["spec"].as_object_mut().unwrap();
    spec.remove("manualTrigger");
    spec.insert(
        "copies".into(),
        json!([{
            "name": "offsite",
            "repository": {
                "url": "http://offsite.example.test:8000/shop",
                "passwordSecretRef": {"name": "offsite-repository", "key": "password"},
                "credentialsSecretRef": {"name": "offsite-login"},
            },
        }]),
    );
    apply(&plan);

    apply(&restore_of_copy(ns, "from-offsite", "offsite"));
    let job = job_created(&client, ns, "from-offsite-restore").await;
    let args = args_of(&job);
    assert_eq!(
        args[..4],
        [
            "restore",
            "latest",
            "--repo",
            "rest:http://offsite.example.test:8000/shop"
        ]
    );
    let host = args.iter().position(|arg| arg == "--host").expect("--host");
    assert_eq!(args[host + 1], format!("{ns}/nightly"), "the plan's host");
    assert_eq!(
        secret_names(&job),
        ["offsite-login", "offsite-repository"],
        "the copy's Secrets, never the plan's"
    );
    let text = serde_json::to_string(&job).unwrap();
    assert!(
        !text.contains("gate.example.test"),
        "the plan's URL: {text}"
    );

    apply(&restore_of_copy(ns, "from-attic", "attic"));
    let status = eventually("Restore from-attic not ready", ACT_TIMEOUT, || async {
        let status = kubectl_json(&["get", "restores.neverwiped.io", "from-attic", "-n", ns])
            ["status"]
            .clone();
        (condition(&status, "Ready")["reason"] == "CopyNotFound").then_some(status)
    })
    .await;
    assert_eq!(condition(&status, "Ready")["status"], "False");
    let message = condition(&status, "Ready")["message"].as_str().unwrap();
    assert!(message.contains("[offsite]"), "{message}");
    event_seen(ns, "CopyNotFound", "has no copy named").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    assert!(jobs.get_opt("from-attic-restore").await.unwrap().is_none());
    assert!(jobs.get_opt("from-attic-describe").await.unwrap().is_none());
}
