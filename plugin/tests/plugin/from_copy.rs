//! `--copy NAME`: the commands that read a plan's repository read that copy of it (an entry of
//! the plan's `spec.copies`) with the copy's own Secrets, and `restore --copy` creates a Restore
//! that names the copy. The plan's own repository here names Secrets that do not exist: reading
//! it would fail.

use neverwiped_testkit::kubectl_json;
use serde_json::json;

use super::support::{Persona, RestServer, TestNamespace, GATE_SECRET, PASSWORD_SECRET};
use super::{back_up, failed, plugin, source_tree, succeeded, PASSWORD};

#[tokio::test(flavor = "multi_thread")]
async fn with_copy_the_plugin_reads_the_copy_and_restores_from_it() {
    if !super::support::api_server_or_skip() {
        return;
    }
    let Some(server) = RestServer::start() else {
        return;
    };
    super::support::apply_crds();
    let namespace = TestNamespace::create("plugin-copy");
    let ns = namespace.name.as_str();
    let Some(reader) = Persona::Download.kubeconfig(&namespace) else {
        return;
    };
    let Some(restorer) = Persona::Restore.kubeconfig(&namespace) else {
        return;
    };
    server.create_plan_secrets(&namespace, PASSWORD);
    let offsite = server.url("offsite");
    namespace.create_object(&json!({
        "apiVersion": "neverwiped.io/v1alpha1", "kind": "BackupPlan",
        "metadata": {"name": "nightly"},
        "spec": {
            "schedule": "@daily",
            "suspend": true,
            "repository": {
                "url": server.url("lost"),
                "passwordSecretRef": {"name": "lost-repository", "key": "password"},
            },
            "copies": [{"name": "offsite", "repository": {
                "url": offsite,
                "passwordSecretRef": {"name": PASSWORD_SECRET, "key": "password"},
                "credentialsSecretRef": {"name": GATE_SECRET},
            }}],
            "volumes": [{"claimName": "data"}],
        },
    }));
    let source = tempfile::tempdir().unwrap();
    source_tree(source.path());
    let data = source.path().to_path_buf();
    // The copy keeps the plan's host.
    let host = format!("{ns}/nightly");
    let copied = back_up(
        &format!("rest:{offsite}"),
        &server,
        &host,
        std::slice::from_ref(&data),
    )
    .await;

    let listed = succeeded(plugin(
        &reader,
        ns,
        &["snapshots", "nightly", "--copy", "offsite"],
    ));
    let listed = String::from_utf8(listed).unwrap();
    assert!(listed.contains(&copied[..8]), "{listed}");
    let config = data.join("app/conf/app.yaml");
    let printed = succeeded(plugin(
        &reader,
        ns,
        &[
            "cat",
            "nightly",
            "latest",
            config.to_str().unwrap(),
            "--copy",
            "offsite",
        ],
    ));
    assert_eq!(printed, std::fs::read(&config).unwrap());

    let unknown = failed(plugin(
        &reader,
        ns,
        &["snapshots", "nightly", "--copy", "attic"],
    ));
    assert!(unknown.contains("has no copy named"), "{unknown}");
    assert!(unknown.contains("[offsite]"), "{unknown}");
    let own = failed(plugin(&reader, ns, &["snapshots", "nightly"]));
    assert!(
        own.contains("lost-repository"),
        "the plan's own Secret: {own}"
    );

    let asked = [
        "restore",
        "nightly",
        "--copy",
        "offsite",
        "--name",
        "from-offsite",
        "--no-wait",
    ];
    succeeded(plugin(&restorer, ns, &asked));
    let created = kubectl_json(&["get", "restores.neverwiped.io", "from-offsite", "-n", ns]);
    assert_eq!(created["spec"]["backupPlanName"], "nightly", "{created:#}");
    assert_eq!(created["spec"]["copy"], "offsite", "{created:#}");
}
