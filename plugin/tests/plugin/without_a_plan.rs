//! The day the plan is gone: with only the repository's URL and its Secrets (created by hand in
//! a namespace of any name), `snapshots`, `ls`, `cat` and `download` read the snapshots of an
//! origin (`NAMESPACE/PLAN`) that no longer exists, as a real user with the download Role; and
//! `restore` creates a Restore from the repository alone, where the restore Role allows it.

use std::path::Path;
use std::process::Output;

use neverwiped_testkit::{kubectl, kubectl_json, kubectl_stdin};
use serde_json::json;

use super::support::{Persona, RestServer, TestNamespace, GATE_SECRET, PASSWORD_SECRET};
use super::{
    back_up, back_up_recording, failed, plugin, source_tree, succeeded, tree_facts, PASSWORD,
};

/// `args`, then the flags that name the repository at `url` and its Secrets.
fn with_repository(args: &[&str], url: &str) -> Vec<String> {
    let flags = [
        "--repository",
        url,
        "--password-secret",
        &format!("{PASSWORD_SECRET}:password"),
        "--login-secret",
        GATE_SECRET,
    ]
    .map(str::to_owned);
    args.iter().map(|a| (*a).to_owned()).chain(flags).collect()
}

fn run(kubeconfig: &Path, namespace: &str, args: &[String]) -> Output {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    plugin(kubeconfig, namespace, &args)
}

#[tokio::test(flavor = "multi_thread")]
async fn with_the_plan_gone_the_repository_and_its_secrets_are_enough_to_read_its_snapshots() {
    if !super::support::api_server_or_skip() {
        return;
    }
    let Some(server) = RestServer::start() else {
        return;
    };
    super::support::apply_crds();
    // Cluster 2's namespace: no plan, the Secrets made by hand.
    let namespace = TestNamespace::create("plugin-gone");
    let ns = namespace.name.as_str();
    let Some(kubeconfig) = Persona::Download.kubeconfig(&namespace) else {
        return;
    };
    server.create_plan_secrets(&namespace, PASSWORD);
    let url = server.url("gone");
    let rest_url = format!("rest:{url}");
    let source = tempfile::tempdir().unwrap();
    source_tree(source.path());
    let data = source.path().to_path_buf();
    let paths = std::slice::from_ref(&data);
    // Two nights of the plan `shop/nightly` of a cluster that is gone, and another plan's.
    let first = back_up(&rest_url, &server, "shop/nightly", paths).await;
    let config = data.join("app/conf/app.yaml");
    std::fs::write(&config, b"replicas: 5\n").unwrap();
    let second = back_up(&rest_url, &server, "shop/nightly", paths).await;
    let other = back_up(&rest_url, &server, "billing/orders", paths).await;

    // Every snapshot, with its origin.
    let all = run(&kubeconfig, ns, &with_repository(&["snapshots"], &url));
    let all = String::from_utf8(succeeded(all)).unwrap();
    for (id, origin) in [
        (&first, "shop/nightly"),
        (&second, "shop/nightly"),
        (&other, "billing/orders"),
    ] {
        let line = all.lines().find(|l| l.starts_with(&id[..8])).expect(id);
        assert!(line.contains(origin), "{line}");
    }
    assert!(all.contains("3 snapshot(s)"), "{all}");
    // One origin's, and its files: byte for byte, metadata as backed up.
    let listed = run(
        &kubeconfig,
        ns,
        &with_repository(&["snapshots", "shop/nightly"], &url),
    );
    let listed = String::from_utf8(succeeded(listed)).unwrap();
    assert!(listed.contains("2 snapshot(s) of shop/nightly"), "{listed}");
    assert!(!listed.contains(&other[..8]), "{listed}");
    let config_path = config.to_str().unwrap();
    let cat = ["cat", "shop/nightly", &first[..8], config_path];
    let old = succeeded(run(&kubeconfig, ns, &with_repository(&cat, &url)));
    assert_eq!(old, b"replicas: 3\n");
    let app = data.join("app");
    let to = tempfile::tempdir().unwrap();
    let out = to.path().join("out");
    let download = [
        "download",
        "shop/nightly",
        "latest",
        app.to_str().unwrap(),
        "--to",
        out.to_str().unwrap(),
    ];
    succeeded(run(&kubeconfig, ns, &with_repository(&download, &url)));
    let downloaded = out.join(app.strip_prefix("/").unwrap());
    assert_eq!(tree_facts(&downloaded), tree_facts(&app));

    // An origin the repository does not hold: the ones it holds are named.
    let origins = "the repository holds snapshots of billing/orders (1), shop/nightly (2)";
    for args in [
        vec!["snapshots", "shop/nightly-old"],
        vec!["ls", "shop/nightly-old", "latest"],
    ] {
        let refused = failed(run(&kubeconfig, ns, &with_repository(&args, &url)));
        assert!(
            refused.contains("shop/nightly-old") && refused.contains(origins),
            "{refused}"
        );
    }
    // A wrong password names its Secret (the gate login's password opens no key); --repository
    // without a password Secret is refused before anything is read.
    let wrong_secret = format!("{GATE_SECRET}:password");
    let wrong = [
        "snapshots",
        "--repository",
        &url,
        "--password-secret",
        &wrong_secret,
        "--login-secret",
        GATE_SECRET,
    ];
    let refused = failed(plugin(&kubeconfig, ns, &wrong));
    assert!(
        refused.contains(&format!(
            "the password in the Secret \"{GATE_SECRET}\" opens no key"
        )),
        "{refused}"
    );
    let bare = failed(plugin(
        &kubeconfig,
        ns,
        &["snapshots", "--repository", &url],
    ));
    assert!(bare.contains("--password-secret"), "{bare}");
}

#[test]
fn a_restore_from_the_repository_alone_is_created_where_it_is_asked_for_with_the_callers_rights() {
    if !super::support::api_server_or_skip() {
        return;
    }
    super::support::apply_crds();
    // The origin's namespace (its plan long gone) and the clone's, where the user may restore.
    let origin = TestNamespace::create("plugin-origin");
    let clone = TestNamespace::create("plugin-clone");
    let (origin_ns, clone_ns) = (origin.name.as_str(), clone.name.as_str());
    let Some(kubeconfig) = Persona::Restore.kubeconfig(&clone) else {
        return;
    };
    let url = "https://gate.example.com/team-a/shop";
    let asked = [
        "restore",
        "nightly",
        "latest",
        "--volume",
        "data=data-copy",
        "--include",
        "/app",
        "--to-namespace",
        clone_ns,
        "--name",
        "cloned",
        "--no-wait",
    ];
    let output = run(&kubeconfig, origin_ns, &with_repository(&asked, url));
    let warned = String::from_utf8_lossy(&output.stderr).into_owned();
    let said = String::from_utf8(succeeded(output)).unwrap();
    assert!(
        said.contains(&format!("created Restore {clone_ns}/cloned")),
        "{said}"
    );
    let created = kubectl_json(&["get", "restores.neverwiped.io", "cloned", "-n", clone_ns]);
    let spec = &created["spec"];
    assert_eq!(
        spec["repository"],
        json!({
            "url": url,
            "passwordSecretRef": {"name": PASSWORD_SECRET, "key": "password"},
            "credentialsSecretRef": {"name": GATE_SECRET, "usernameKey": "username", "passwordKey": "password"},
        }),
        "{created:#}"
    );
    assert_eq!(
        spec["origin"],
        format!("{origin_ns}/nightly"),
        "{created:#}"
    );
    assert!(spec.get("backupPlanName").is_none(), "{created:#}");
    assert_eq!(
        spec["volumes"],
        json!([{"sourceClaimName": "data", "targetClaimName": "data-copy", "includes": ["/app"]}]),
        "{created:#}"
    );
    // The caller is recorded as its creator where the API server says who it is; this one serves
    // no SelfSubjectReview, and the plugin then says that the operator will not run it.
    match created["metadata"]["annotations"]["neverwiped.io/requested-by"].as_str() {
        Some(user) => assert_eq!(user, "plugin-restore", "{created:#}"),
        None => assert!(warned.contains("(RequesterUnknown)"), "{warned}"),
    }

    // Into a namespace where the user may not create Restores: the API server's refusal.
    let elsewhere = [
        "restore",
        "nightly",
        "--volume",
        "data",
        "--to-namespace",
        origin_ns,
        "--no-wait",
    ];
    let refused = failed(run(
        &kubeconfig,
        origin_ns,
        &with_repository(&elsewhere, url),
    ));
    assert!(refused.contains("403 Forbidden"), "{refused}");
    // What a Restore without a plan cannot know is asked for, before anything is created.
    for (args, expected) in [
        (vec!["restore", "nightly"], "--volume SOURCE[=TARGET]"),
        (
            vec![
                "restore",
                "nightly",
                "--volume",
                "data",
                "--database",
                "orders",
            ],
            "spec.databases",
        ),
        (
            vec!["restore", "Not/an/origin", "--volume", "data"],
            "not a plan's origin",
        ),
    ] {
        let refused = failed(run(&kubeconfig, clone_ns, &with_repository(&args, url)));
        assert!(refused.contains(expected), "{args:?}: {refused}");
    }
    let plain = ["restore", "nightly", "--to-namespace", clone_ns];
    let refused = failed(plugin(&kubeconfig, origin_ns, &plain));
    assert!(
        refused.contains("--to-namespace needs --repository"),
        "{refused}"
    );
    let listed = kubectl(&[
        "get",
        "restores.neverwiped.io",
        "-n",
        clone_ns,
        "-o",
        "name",
    ]);
    assert_eq!(listed.trim(), "restore.neverwiped.io/cloned", "{listed}");
}

#[tokio::test(flavor = "multi_thread")]
async fn create_claims_makes_the_claims_the_snapshot_recorded_before_the_restore_that_fills_them() {
    if !super::support::api_server_or_skip() {
        return;
    }
    let Some(server) = RestServer::start() else {
        return;
    };
    super::support::apply_crds();
    // A new cluster's namespace: the repository's Secrets made by hand, no claim, no plan.
    let namespace = TestNamespace::create("plugin-claims");
    let ns = namespace.name.as_str();
    let Some(kubeconfig) = Persona::Restore.kubeconfig(&namespace) else {
        return;
    };
    server.create_plan_secrets(&namespace, PASSWORD);
    let url = server.url("claims");
    let source = tempfile::tempdir().unwrap();
    source_tree(source.path());
    let recorded = json!({"claims": [{
        "path": source.path().to_str().unwrap(), "name": "orders", "requestedSize": "2Gi",
        "storageClassName": "fast", "accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem",
        "labels": {"app": "shop"}, "annotations": {"example.com/team": "payments"},
    }]});
    let paths = [source.path().to_path_buf()];
    let sources = serde_json::from_value(recorded).unwrap();
    let id = back_up_recording(
        &format!("rest:{url}"),
        &server,
        "shop/nightly",
        &paths,
        sources,
    )
    .await;

    let standard = format!("{ns}-standard");
    let mapped = format!("fast={standard}");
    // The restore Role cannot look storage classes up: the class is said unchecked.
    let unchecked = [
        "restore",
        "shop/nightly",
        "--create-claims",
        "--storage-class",
        &mapped,
        "--volume",
        "orders=orders-unchecked",
        "--name",
        "unchecked",
        "--no-wait",
    ];
    let output = run(&kubeconfig, ns, &with_repository(&unchecked, &url));
    let warned = String::from_utf8_lossy(&output.stderr).into_owned();
    succeeded(output);
    assert!(
        warned.contains(&format!(
            "cannot check that the storage class {standard:?} exists"
        )),
        "{warned}"
    );
    // A user of the same Role who may also get storage classes: a class the cluster lacks is
    // refused before anything is created, naming the mapping that would do.
    let Some(checker) = class_reader(ns) else {
        return;
    };
    let provisioner = json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": standard}, "provisioner": "example.com/none",
    });
    kubectl_stdin(&["apply", "-f", "-"], Some(&provisioner.to_string()));
    let unmapped = ["restore", "shop/nightly", "--create-claims", "--no-wait"];
    let refused = failed(run(&checker, ns, &with_repository(&unmapped, &url)));
    assert!(
        refused.contains("the storage class \"fast\" of the claim \"orders\" does not exist")
            && refused.contains("--storage-class fast=CLASS"),
        "{refused}"
    );
    let asked = [
        "restore",
        "shop/nightly",
        "--create-claims",
        "--storage-class",
        &mapped,
        "--name",
        "recreated",
        "--no-wait",
    ];
    let said =
        String::from_utf8(succeeded(run(&checker, ns, &with_repository(&asked, &url)))).unwrap();
    assert!(
        said.contains(&format!(
            "created PersistentVolumeClaim {ns}/orders (2Gi, storage class {standard})"
        )),
        "{said}"
    );
    let claim = kubectl_json(&["get", "persistentvolumeclaims", "orders", "-n", ns]);
    assert_eq!(
        claim["spec"]["resources"]["requests"]["storage"], "2Gi",
        "{claim:#}"
    );
    assert_eq!(
        claim["spec"]["storageClassName"],
        standard.as_str(),
        "{claim:#}"
    );
    assert_eq!(
        claim["spec"]["accessModes"],
        json!(["ReadWriteOnce"]),
        "{claim:#}"
    );
    assert_eq!(claim["spec"]["volumeMode"], "Filesystem", "{claim:#}");
    assert_eq!(claim["metadata"]["labels"]["app"], "shop", "{claim:#}");
    assert_eq!(
        claim["metadata"]["annotations"]["example.com/team"], "payments",
        "{claim:#}"
    );
    // The Restore restores the very snapshot whose record made the claim, into it.
    let restore = kubectl_json(&["get", "restores.neverwiped.io", "recreated", "-n", ns]);
    assert_eq!(restore["spec"]["snapshot"], id.as_str(), "{restore:#}");
    assert_eq!(restore["spec"]["origin"], "shop/nightly", "{restore:#}");
    assert_eq!(
        restore["spec"]["volumes"],
        json!([{"sourceClaimName": "orders", "targetClaimName": "orders"}]),
        "{restore:#}"
    );

    // Once the claim exists, the same command is refused before anything is created.
    let again = [
        "restore",
        "shop/nightly",
        "--create-claims",
        "--name",
        "again",
        "--no-wait",
    ];
    let refused = failed(run(&kubeconfig, ns, &with_repository(&again, &url)));
    assert!(
        refused.contains(&format!("the claim {ns}/orders exists already")),
        "{refused}"
    );
    let unknown = [
        "restore",
        "shop/nightly",
        "--create-claims",
        "--volume",
        "media",
        "--no-wait",
    ];
    let refused = failed(run(&kubeconfig, ns, &with_repository(&unknown, &url)));
    assert!(refused.contains("it records orders"), "{refused}");
    let listed = kubectl(&["get", "restores.neverwiped.io", "-n", ns, "-o", "name"]);
    assert_eq!(
        listed.trim(),
        "restore.neverwiped.io/recreated\nrestore.neverwiped.io/unchecked",
        "{listed}"
    );
}

/// A user of the restore Role's group in `namespace` who may also get storage classes (a
/// ClusterRole of this test's own, bound to that user alone).
fn class_reader(namespace: &str) -> Option<std::path::PathBuf> {
    let user = format!("{namespace}-class-reader");
    let kubeconfig = neverwiped_testkit::user_kubeconfig(&user, &["shop-backup-operators"])?;
    let name = format!("{namespace}-storage-classes");
    let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": name},
         "rules": [{"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]},
    ]});
    kubectl_stdin(&["apply", "-f", "-"], Some(&objects.to_string()));
    Some(kubeconfig)
}
