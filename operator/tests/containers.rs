//! End to end through real containers: the operator runs from its image (a container on the host
//! network, its kubeconfig mounted) against the real API server, and every Job it creates runs as
//! a container of the sidecar image under the pod's own security context (`support::kubelet`),
//! against rest-server and real PostgreSQL servers on loopback.
//!
//! Needs a container engine with `neverwiped/operator:dev`, `neverwiped/sidecar:dev` and
//! `neverwiped/drill:dev` (`scripts/build-images.sh`), an API server (`KUBECONFIG`), rest-server and PostgreSQL. Without
//! them the tests skip loudly; under CI they fail (`neverwiped_testkit::require_that`).

mod support;

#[path = "containers/copies.rs"]
mod copies;
#[path = "containers/drills.rs"]
mod drills;
#[path = "containers/hooks.rs"]
mod hooks;
#[path = "containers/never_wiped.rs"]
mod never_wiped;
#[path = "containers/streams.rs"]
mod streams;

use std::path::{Path, PathBuf};
use std::process::Command;

use std::time::Duration;

use serde_json::{json, Value};
use support::containers::*;
use support::kubelet::{docker, docker_ok, engine_or_skip, Ending, Kubelet, PodRun};
use support::postgres::*;
use support::volumes::*;
use support::*;

/// Runs the workspace's sidecar (`cargo build` it first) with `password` as the repository's:
/// what an admin runs by hand beside the cluster. Panics with its error when it fails.
fn workspace_sidecar(command: &mut Command, password: &Path) -> Vec<u8> {
    let output = command
        .env("NEVERWIPED_PASSWORD_FILE", password)
        .output()
        .unwrap_or_else(|e| panic!("{command:?} does not run ({e}): cargo build first"));
    assert!(
        output.status.success(),
        "{command:?}:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// The workspace's sidecar binary.
fn workspace_sidecar_binary() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/neverwiped-sidecar")
}

/// The `sources` that snapshot `id` of the repository at `url` records, as the workspace's
/// sidecar lists them.
fn recorded_sources(url: &str, id: &str) -> Value {
    let scratch = Scratch::new("sources");
    let password = scratch.0.join("password");
    std::fs::write(&password, REPOSITORY_PASSWORD).unwrap();
    let repository = format!("rest:{url}");
    let mut command = Command::new(workspace_sidecar_binary());
    command.args(["--repo", &repository, "snapshots", "--json"]);
    let listed = workspace_sidecar(&mut command, &password);
    let snapshots: Vec<Value> = serde_json::from_slice(&listed).unwrap();
    let snapshot = snapshots.into_iter().find(|s| s["id"] == id);
    snapshot.expect("the snapshot is listed")["sources"].clone()
}

/// Every container of a pod's run: its ending and logs.
fn pod_report(run: &PodRun) -> String {
    run.containers
        .iter()
        .map(|c| format!("== {}: {:?}\n{}\n", c.name, c.ending, c.logs))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The tests.

#[tokio::test]
async fn a_volume_and_a_database_backed_up_in_containers_restore_identically() {
    if !parts_or_skip() {
        return;
    }
    apply_crds();
    let namespace = TestNamespace::create("containers");
    let ns = namespace.name.as_str();
    let client = client().await;
    let rest = RestServer::start(ns);
    let source_db = Postgres::start(&format!("{ns}-source"));
    let target_db = Postgres::start(&format!("{ns}-target"));
    source_db.sql("postgres", "CREATE DATABASE shop");
    source_db.sql(
        "shop",
        "CREATE TABLE orders (id int PRIMARY KEY, item text NOT NULL, price numeric(10,2), placed timestamptz);
         INSERT INTO orders SELECT i, 'item ' || i || ' ''quoted'' ü', i * 1.25, '2026-01-01'::timestamptz + i * interval '1 hour'
           FROM generate_series(1, 2000) AS i;
         CREATE INDEX orders_placed ON orders (placed);",
    );
    let volumes = Scratch::new(&format!("{ns}-volumes"));
    let uploads = volumes.0.join("uploads");
    let restored = volumes.0.join("uploads-restored");
    fill_volume(&uploads);
    folder(&restored, "", (0, 0), 0o755);
    let source_tree = tree(&uploads);

    secret(ns, "repository", &[("password", REPOSITORY_PASSWORD)]);
    secret(
        ns,
        "pg-backup",
        &[("username", PG_ADMIN), ("password", PG_PASSWORD)],
    );
    claim(ns, "uploads");
    let mut kubelet = Kubelet::new(client.clone(), ns);
    kubelet.claim("uploads", &uploads);
    kubelet.claim("uploads-restored", &restored);
    let operator = OperatorContainer::start(ns);

    let database = json!([{
        "name": "orders", "type": "postgresql", "host": "127.0.0.1", "port": source_db.port,
        "credentialsSecretRef": {"name": "pg-backup"}, "databases": ["shop"],
    }]);
    apply(&plan(
        ns,
        "nightly",
        &rest.url("shop"),
        // Files of several owners, 0600 and 0700: only root with DAC_READ_SEARCH reads them all.
        json!({"volumes": [{"claimName": "uploads"}], "databases": database, "mover": {"mode": "Privileged"}}),
    ));
    let backup = run(&mut kubelet, &client, ns, "nightly-manual-1").await;
    assert!(
        succeeded(&backup),
        "the backup pod failed: {:?}\n{}",
        backup.ending,
        container_config(&backup)
    );
    // The pod ran as the operator asked: root with DAC_READ_SEARCH only, on a read-only root.
    for option in [
        "--read-only",
        "--cap-drop=ALL",
        "--cap-add=DAC_READ_SEARCH",
        "no-new-privileges",
    ] {
        assert!(
            backup.run_options.iter().any(|o| o == option),
            "{option} missing: {:?}",
            backup.run_options
        );
    }
    let status = recorded(ns, "nightly", "nightly-manual-1").await;
    assert_eq!(
        status["lastRun"]["result"],
        "Succeeded",
        "{status:#}\n{}",
        container_config(&backup)
    );
    let snapshot = status["lastRun"]["snapshotId"]
        .as_str()
        .expect("a snapshot id")
        .to_owned();
    assert_eq!(snapshot.len(), 64, "{status:#}");
    let Ending::Exited { message, .. } = &backup.ending else {
        unreachable!("succeeded")
    };
    let result: Value =
        serde_json::from_str(message).expect("the termination message is the result");
    assert_eq!(result["snapshotId"], snapshot.as_str());
    // Every byte of every file was read (none skipped for its owner or mode), and the dump.
    assert_eq!(result["warningsTotal"], 0, "{result:#}");
    let file_bytes: u64 = regular_file_sizes(&uploads);
    let dump_bytes = result["databases"][0]["dumpBytes"]
        .as_u64()
        .expect("a dump");
    assert!(dump_bytes > 100_000, "{result:#}");
    assert_eq!(
        result["bytesRead"].as_u64(),
        Some(file_bytes + dump_bytes),
        "{result:#}"
    );
    // The snapshot records what the claim and the database were, to recreate them elsewhere.
    let sources = recorded_sources(&rest.url("shop"), &snapshot);
    let claim = &sources["claims"][0];
    assert_eq!(
        (&claim["path"], &claim["name"], &claim["requestedSize"]),
        (&json!("/data/uploads"), &json!("uploads"), &json!("1Gi")),
        "{sources:#}"
    );
    assert_eq!(
        claim["accessModes"],
        json!(["ReadWriteOnce"]),
        "{sources:#}"
    );
    let database = &sources["databases"][0];
    assert_eq!(database["engine"], "postgresql", "{sources:#}");
    assert_eq!(database["databases"], json!(["shop"]), "{sources:#}");
    let version = source_db.sql("postgres", "SHOW server_version");
    assert_eq!(
        database["serverVersion"].as_str(),
        Some(version.trim()),
        "{sources:#}"
    );

    secret(
        ns,
        "pg-admin",
        &[("username", PG_ADMIN), ("password", PG_PASSWORD)],
    );
    // One Restore for the volume and the database, from the same snapshot. The target server
    // may be older than the image's pg_dump 18 (here PostgreSQL 15): its dump still restores.
    let everything = json!({
        "volumes": [{"sourceClaimName": "uploads", "targetClaimName": "uploads-restored", "createClaim": {"storage": "1Gi"}}],
        "databases": [{"name": "orders", "host": "127.0.0.1", "port": target_db.port, "credentialsSecretRef": {"name": "pg-admin"}}],
    });
    let (status, restore_run) = restore(&mut kubelet, &client, ns, "all-back", everything).await;
    assert_eq!(status["snapshotId"], snapshot.as_str(), "{status:#}");
    // Root with the restore's capabilities only, on a read-only root: no metadata of a mount
    // point of that root is changed (it could not be), and the device file and the set-group-ID
    // bit come back (checked by the tree below).
    for option in [
        "--read-only",
        "--cap-drop=ALL",
        "--cap-add=CHOWN",
        "--cap-add=DAC_OVERRIDE",
        "--cap-add=FOWNER",
        "--cap-add=FSETID",
        "--cap-add=MKNOD",
        "no-new-privileges",
    ] {
        assert!(
            restore_run.run_options.iter().any(|o| o == option),
            "{option} missing: {:?}",
            restore_run.run_options
        );
    }
    let Ending::Exited { message, .. } = &restore_run.ending else {
        unreachable!("succeeded")
    };
    let result: Value = serde_json::from_str(message).expect("the restore's result");
    assert_eq!(result["warningsTotal"], 0, "{result:#}");
    assert_eq!(
        tree(&restored),
        source_tree,
        "the restored volume differs from the source"
    );
    assert!(
        source_tree["/bin/null"].starts_with("char device rdev=0x103 mode=660 owner=1001:1002")
            && source_tree["/bin/report"].contains("mode=2755 owner=1000:1002"),
        "{source_tree:#?}"
    );
    let query = "SELECT id, item, price, placed FROM orders ORDER BY id";
    assert_eq!(target_db.sql("shop", query), source_db.sql("shop", query));
    assert_eq!(
        target_db.sql(
            "shop",
            "SELECT indexname FROM pg_indexes WHERE tablename = 'orders' ORDER BY 1"
        ),
        "orders_pkey\norders_placed\n"
    );
    drop(operator);
}

#[tokio::test]
async fn an_oom_killed_backup_and_one_past_its_deadline_say_so_with_the_real_reason() {
    if !parts_or_skip() {
        return;
    }
    apply_crds();
    let namespace = TestNamespace::create("container-ends");
    let ns = namespace.name.as_str();
    let client = client().await;
    let rest = RestServer::start(ns);
    let volumes = Scratch::new(&format!("{ns}-volumes"));
    let data = volumes.0.join("data");
    put(&data, "big.bin", &noise(64 << 20, 3), (0, 0), 0o644);
    secret(ns, "repository", &[("password", REPOSITORY_PASSWORD)]);
    claim(ns, "data");
    let mut oom_kubelet = Kubelet::new(client.clone(), ns);
    oom_kubelet.claim("data", &data);
    let mut slow_kubelet = Kubelet::new(client.clone(), ns);
    slow_kubelet.claim("data", &data);
    let _operator = OperatorContainer::start(ns);

    let volume = json!([{"claimName": "data"}]);
    let tiny_memory = json!({"resources": {"limits": {"memory": "24Mi"}}});
    apply(&plan(
        ns,
        "tight",
        &rest.url("tight"),
        json!({"volumes": volume, "pod": tiny_memory}),
    ));
    apply(&plan(
        ns,
        "slow",
        &rest.url("slow"),
        json!({"volumes": volume, "deadline": "1m", "limits": {"uploadBytesPerSecond": 65536}}),
    ));
    let (oom, slow) = tokio::join!(
        run(&mut oom_kubelet, &client, ns, "tight-manual-1"),
        run(&mut slow_kubelet, &client, ns, "slow-manual-1"),
    );

    let Ending::Exited {
        exit_code, reason, ..
    } = &oom.ending
    else {
        panic!("the tight backup did not exit: {:?}", oom.ending)
    };
    assert_eq!(
        (*exit_code, reason.as_str()),
        (137, "OOMKilled"),
        "{}",
        container_config(&oom)
    );
    let status = recorded(ns, "tight", "tight-manual-1").await;
    assert_eq!(status["lastRun"]["result"], "Failed", "{status:#}");
    assert_eq!(status["lastRun"]["reason"], "OOMKilled", "{status:#}");
    let message = status["lastRun"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("memory limit 24Mi"), "{message}");

    assert!(
        matches!(slow.ending, Ending::DeadlineExceeded { .. }),
        "{:?}\n{}",
        slow.ending,
        container_config(&slow)
    );
    let status = recorded(ns, "slow", "slow-manual-1").await;
    assert_eq!(status["lastRun"]["result"], "Failed", "{status:#}");
    assert_eq!(
        status["lastRun"]["reason"], "DeadlineExceeded",
        "{status:#}"
    );
    let message = status["lastRun"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("deadline of 1m"), "{message}");
}

/// The `--version` line of a tool in the sidecar image, run as a Job runs the image.
fn tool_version(tool: &str) -> String {
    docker_ok(&[
        "run",
        "--rm",
        "--network",
        "host",
        "--read-only",
        "--cap-drop=ALL",
        "--user",
        "65532:65532",
        "--entrypoint",
        tool,
        SIDECAR_IMAGE_DEV.as_str(),
        "--version",
    ])
}

/// The first number of `text` after `prefix`.
fn major_after(text: &str, prefix: &str) -> u32 {
    let rest = &text[text
        .find(prefix)
        .unwrap_or_else(|| panic!("{prefix:?} in {text:?}"))
        + prefix.len()..];
    rest.trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a version in {text:?}"))
}

#[test]
fn the_sidecar_image_carries_pg_dump_18_and_the_mariadb_clients() {
    if !engine_or_skip(&[SIDECAR_IMAGE_DEV.as_str()]) {
        return;
    }
    // pg_dump and psql 18 dump and restore PostgreSQL 13 to 18 (docs/images.md).
    for tool in ["pg_dump", "pg_dumpall", "psql"] {
        let version = tool_version(tool);
        assert!(
            major_after(&version, "(PostgreSQL)") >= 18,
            "{tool}: {version}"
        );
    }
    for tool in ["mariadb-dump", "mariadb"] {
        let version = tool_version(tool);
        // "… 11.8.3-MariaDB …": the server release the client belongs to.
        let release = version
            .split_whitespace()
            .find_map(|word| {
                word.split_once("-MariaDB")
                    .map(|(number, _)| number.to_owned())
            })
            .unwrap_or_else(|| panic!("{tool}: no MariaDB release in {version:?}"));
        assert!(major_after(&release, "") >= 10, "{tool}: {version}");
    }
    let version = tool_version("neverwiped-sidecar");
    assert!(version.starts_with("neverwiped-sidecar "), "{version}");
}

#[test]
fn the_harness_expands_variables_and_reads_quantities_as_kubernetes_does() {
    use support::kubelet::{expand_variables, quantity_bytes};
    let env = vec![
        ("USER_NAME".to_owned(), "backup".to_owned()),
        ("EMPTY".to_owned(), String::new()),
    ];
    assert_eq!(
        expand_variables("postgresql://$(USER_NAME)@db:5432", &env),
        "postgresql://backup@db:5432"
    );
    assert_eq!(
        expand_variables("$(MISSING)/$(EMPTY)x", &env),
        "$(MISSING)/x"
    );
    assert_eq!(
        expand_variables("$$(USER_NAME) costs $5", &env),
        "$(USER_NAME) costs $5"
    );
    assert_eq!(quantity_bytes("24Mi"), 24 << 20);
    assert_eq!(quantity_bytes("1Gi"), 1 << 30);
    assert_eq!(quantity_bytes("500M"), 500_000_000);
    assert_eq!(quantity_bytes("1048576"), 1_048_576);
}

/// An application's volume as its own user (1000) writes it: private files and folders of that
/// user, one file of another owner (1001, mode 0600) that user cannot read.
fn fill_application_volume(root: &Path) -> usize {
    let app = (1000, 1000);
    folder(root, "", app, 0o750);
    put(root, "index.html", b"<h1>shop</h1>\n", app, 0o644);
    put(
        root,
        "config/app.key",
        b"the application's own key\n",
        app,
        0o600,
    );
    folder(root, "config", app, 0o700);
    put(root, "uploads/photo.jpg", &noise(2_000_000, 5), app, 0o640);
    put(root, "uploads/empty.txt", b"", app, 0o600);
    folder(root, "uploads", app, 0o750);
    std::os::unix::fs::symlink("../index.html", root.join("uploads/home")).expect("a symlink");
    std::os::unix::fs::lchown(root.join("uploads/home"), Some(1000), Some(1000))
        .expect("its owner");
    put(
        root,
        "other-owner.key",
        b"not the application's\n",
        (1001, 1001),
        0o600,
    );
    4
}

/// The application's pod: it mounts `claim` as user 1000 (the operator takes the backup's user
/// from it). No kubelet runs it; it only has to exist, bound to the harness's node.
fn application_pod(namespace: &str, claim: &str) {
    apply(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "shop-0", "namespace": namespace},
        "spec": {
            "nodeName": "kubelet-harness",
            "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000},
            "containers": [{
                "name": "shop", "image": "shop:1",
                "volumeMounts": [{"name": "data", "mountPath": "/srv"}],
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }));
}

#[tokio::test]
async fn an_unprivileged_backup_reads_the_applications_files_and_warns_of_another_owners() {
    if !parts_or_skip() {
        return;
    }
    apply_crds();
    let namespace = TestNamespace::create("unprivileged");
    let ns = namespace.name.as_str();
    // What a cluster with PodSecurity admission enforces (the test API server has no such plugin:
    // the pod spec is checked against `restricted` by operator/tests/pod_security.rs).
    kubectl(&[
        "label",
        "namespace",
        ns,
        "pod-security.kubernetes.io/enforce=restricted",
    ]);
    let client = client().await;
    let rest = RestServer::start(ns);
    let volumes = Scratch::new(&format!("{ns}-volumes"));
    let data = volumes.0.join("data");
    let readable_files = fill_application_volume(&data);
    let restored = volumes.0.join("data-restored");
    // A new volume's root as a provisioner makes it: root's; the restore pod's fsGroup (the
    // application's, 1000) lets the kubelet make it group-writable, as here.
    folder(&restored, "", (0, 1000), 0o2775);
    secret(ns, "repository", &[("password", REPOSITORY_PASSWORD)]);
    claim(ns, "data");
    claim(ns, "data-restored");
    application_pod(ns, "data");
    let mut kubelet = Kubelet::new(client.clone(), ns);
    kubelet.claim("data", &data);
    kubelet.claim("data-restored", &restored);
    let _operator = OperatorContainer::start(ns);

    apply(&plan(
        ns,
        "nightly",
        &rest.url("shop"),
        json!({"volumes": [{"claimName": "data"}]}),
    ));
    let backup = run(&mut kubelet, &client, ns, "nightly-manual-1").await;
    // A snapshot with warnings ends the sidecar with its "partial" code, 3: the Job fails, and
    // the status (below) says what the result says.
    assert!(
        matches!(&backup.ending, Ending::Exited { exit_code: 3, .. }),
        "the backup pod did not end as partial: {:?}\n{}",
        backup.ending,
        container_config(&backup)
    );
    // The application's user, no capability at all, nothing that restricted refuses.
    for option in [
        "--read-only",
        "--cap-drop=ALL",
        "no-new-privileges",
        "1000:1000",
    ] {
        assert!(
            backup.run_options.iter().any(|o| o == option),
            "{option} missing: {:?}",
            backup.run_options
        );
    }
    assert!(
        !backup
            .run_options
            .iter()
            .any(|o| o.starts_with("--cap-add")),
        "{:?}",
        backup.run_options
    );
    let status = recorded(ns, "nightly", "nightly-manual-1").await;
    assert_eq!(status["mover"]["mode"], "Unprivileged", "{status:#}");
    assert_eq!(status["mover"]["runAsUser"], 1000, "{status:#}");
    let mover_message = status["mover"]["message"].as_str().unwrap_or_default();
    assert!(mover_message.contains("\"shop-0\""), "{mover_message}");
    let last = &status["lastRun"];
    assert_eq!(last["result"], "SucceededWithWarnings", "{status:#}");
    assert_eq!(last["reason"], "SucceededWithWarnings", "{status:#}");
    assert_eq!(last["warnings"], 1, "{status:#}");
    let message = last["message"].as_str().unwrap_or_default();
    assert!(message.contains("other-owner.key"), "{message}");
    assert!(message.contains("ermission denied"), "{message}");
    assert_eq!(last["filesRead"], readable_files as i64, "{status:#}");
    let readable_bytes = regular_file_sizes(&data) - b"not the application's\n".len() as u64;
    assert_eq!(
        last["bytesRead"].as_u64(),
        Some(readable_bytes),
        "{status:#}"
    );

    // Back, as the same user: every file it could read, with its content, mode and times.
    let (status, _) = restore(
        &mut kubelet,
        &client,
        ns,
        "back",
        json!({"volumes": [{"sourceClaimName": "data", "targetClaimName": "data-restored"}]}),
    )
    .await;
    assert_eq!(status["mover"]["runAsUser"], 1000, "{status:#}");
    let mut expected = tree(&data);
    assert!(
        expected.remove("/other-owner.key").is_some(),
        "{expected:#?}"
    );
    let mut got = tree(&restored);
    // The target volume's root keeps its own mode and owner: an unprivileged restore does not
    // own it, and leaves it as its provisioner made it.
    assert!(expected.remove("/").is_some(), "{expected:#?}");
    assert!(got.remove("/").is_some(), "{got:#?}");
    assert_eq!(
        got, expected,
        "the restored volume differs from what the user could read"
    );
}

#[tokio::test]
async fn a_plan_asking_for_root_where_the_admin_did_not_allow_it_gets_no_job() {
    if !parts_or_skip() {
        return;
    }
    apply_crds();
    let namespace = TestNamespace::create("not-allowed");
    let ns = namespace.name.as_str();
    let client = client().await;
    secret(ns, "repository", &[("password", REPOSITORY_PASSWORD)]);
    claim(ns, "data");
    // The operator's policy allows privileged movers in another namespace only.
    let _operator = OperatorContainer::start_with_policy(
        ns,
        r#"{"privilegedMoverNamespaces":["backup-admin"]}"#,
    );
    apply(&plan(
        ns,
        "as-root",
        "http://127.0.0.1:1/nowhere",
        json!({"volumes": [{"claimName": "data"}], "mover": {"mode": "Privileged"}}),
    ));
    // The status of a reconcile of the plan as applied, manual trigger and all: a reconcile
    // creates its Jobs before it applies its status, so any Job it started exists by then.
    let (ready, status) = eventually("the plan's Ready=False", ACT_TIMEOUT, || async {
        let plan = kubectl_json(&["get", "backupplans.neverwiped.io", "as-root", "-n", ns]);
        let status = plan["status"].clone();
        if status["observedGeneration"] != plan["metadata"]["generation"] {
            return None;
        }
        let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
        let ready = conditions
            .into_iter()
            .find(|c| c["type"] == "Ready" && c["status"] == "False")?;
        Some((ready, status))
    })
    .await;
    assert_eq!(ready["reason"], "PrivilegedMoverNotAllowed", "{ready:#}");
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("policy.privilegedMoverNamespaces"),
        "{message}"
    );
    assert!(message.contains(ns), "{message}");
    // Nothing was started, nor left waiting for a slot to start later.
    assert!(status["activeRun"].is_null(), "{status:#}");
    assert!(status["queued"].is_null(), "{status:#}");
    let jobs: kube::Api<k8s_openapi::api::batch::v1::Job> = kube::Api::namespaced(client, ns);
    let listed = jobs.list(&Default::default()).await.expect("the Jobs");
    assert!(listed.items.is_empty(), "{:?}", listed.items);
}
