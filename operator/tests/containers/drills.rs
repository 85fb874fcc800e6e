//! Restore drills end to end through the built images: the operator from its image, the backup Job
//! a container of the sidecar image and each drill Job a container of the drill image
//! (`support::kubelet`, under the pod's own security context), against rest-server and a real
//! PostgreSQL server; each drill's throwaway PostgreSQL server is the drill image's own.
//!
//! Emulated: the kubelet and the Job controller (the test runs each Job's pod as a container when
//! the operator created it). Real: the API server, the operator's Jobs, queue, status and
//! metrics, the sidecar's backup and drills, the repository, the servers.
//!
//! A drill asked for while the plan's first backup runs waits for it; it then proves the volume
//! (every file read back and held to the snapshot) and the database (its dump loaded into a
//! throwaway server and every table's rows counted) and records the recovery time of each. After
//! a pack of the photo is damaged and a night's dump is replaced by one that does not load, the
//! next drill fails naming the file and the server's own error.

use super::*;

/// The annotation that asks the operator for a drill now.
const VERIFY_NOW: &str = "neverwiped.io/verify-now";

/// Asks for a drill of the plan `nightly` with request `value`.
fn ask_for_drill(namespace: &str, value: &str) {
    kubectl(&[
        "annotate",
        "--overwrite",
        "backupplan",
        "nightly",
        "-n",
        namespace,
        &format!("{VERIFY_NOW}={value}"),
    ]);
}

/// The drill Job the operator started for a request after `previous` (a Job's name per minute:
/// a second drill may wait for the next minute).
async fn drill_job(namespace: &str, previous: Option<&str>) -> String {
    eventually(
        "the operator to start a drill Job",
        Duration::from_secs(150),
        || async {
            let verify = plan_status(namespace, "nightly")["verify"].clone();
            let job = verify["activeJob"].as_str()?.to_owned();
            (Some(job.as_str()) != previous).then_some(job)
        },
    )
    .await
}

/// `status.verify.lastRun` once the operator recorded the drill of `job`.
async fn drill_record(namespace: &str, job: &str) -> Value {
    eventually(
        &format!("the drill {job} in status.verify"),
        ACT_TIMEOUT,
        || async {
            let verify = plan_status(namespace, "nightly")["verify"].clone();
            (verify["lastRun"]["jobName"] == job && verify["activeJob"].is_null())
                .then(|| verify["lastRun"].clone())
        },
    )
    .await
}

/// Damages the middle of the repository's largest pack (the photo's 3 MB of noise), returning
/// its path and original bytes.
fn damage_largest_pack(repository: &Path) -> (PathBuf, Vec<u8>) {
    let mut packs = Vec::new();
    for dir in std::fs::read_dir(repository.join("data")).expect("the packs' folders") {
        for pack in std::fs::read_dir(dir.expect("a folder").path()).expect("a packs' folder") {
            packs.push(pack.expect("a pack").path());
        }
    }
    packs.sort_by_key(|pack| std::fs::metadata(pack).map(|m| m.len()).unwrap_or(0));
    let pack = packs.pop().expect("a pack");
    let original = std::fs::read(&pack).expect("the pack");
    let mut damaged = original.clone();
    let middle = damaged.len() / 2;
    damaged[middle..middle + 64]
        .iter_mut()
        .for_each(|b| *b ^= 0xff);
    std::fs::write(&pack, damaged).expect("the damaged pack");
    (pack, original)
}

/// Writes a snapshot of the plan's host with the volume at `volume` and the database entry
/// `orders`, dumped by a `pg_dump` that writes SQL no server loads: the workspace's sidecar (as
/// an admin would run it by hand), the stand-in first on its `PATH`.
fn back_up_a_dump_that_does_not_load(url: &str, host: &str, volume: &Path, port: u16) {
    let scratch = Scratch::new("drills-fake-dump");
    let fake = scratch.0.join("bin");
    std::fs::create_dir_all(&fake).unwrap();
    std::fs::write(
        fake.join("pg_dump"),
        "#!/bin/sh\nprintf -- '--\\n-- PostgreSQL database dump\\n--\\n\\nCREATE TABLE broken (id integer,;\\n\\n--\\n-- PostgreSQL database dump complete\\n--\\n\\n'\n",
    )
    .unwrap();
    std::fs::set_permissions(
        fake.join("pg_dump"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let password = scratch.0.join("password");
    std::fs::write(&password, REPOSITORY_PASSWORD).unwrap();
    let db_password = scratch.0.join("db-password");
    std::fs::write(&db_password, PG_PASSWORD).unwrap();
    let psql = postgres_bin("psql").expect("psql");
    let path = format!(
        "{}:{}:{}",
        fake.display(),
        psql.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let claim = json!({"path": volume.to_str().unwrap(), "name": "uploads"}).to_string();
    let mut command = Command::new(workspace_sidecar_binary());
    command
        .args(["--repo", &format!("rest:{url}"), "backup"])
        .arg(volume)
        .args(["--host", host, "--claim", &claim])
        .args([
            "--database",
            &format!("orders=postgresql://{PG_ADMIN}@127.0.0.1:{port}/shop"),
        ])
        .args([
            "--database-password-file",
            &format!("orders={}", db_password.display()),
        ])
        .env("PATH", path);
    workspace_sidecar(&mut command, &password);
}

/// The test's parts: the namespace, rest-server, the source database, the volume's folder.
struct Parts {
    namespace: TestNamespace,
    rest: RestServer,
    source_db: Postgres,
    volumes: Scratch,
}

fn parts() -> Parts {
    let namespace = TestNamespace::create("drills");
    let ns = namespace.name.clone();
    let rest = RestServer::start(&ns);
    let source_db = Postgres::start(&format!("{ns}-source"));
    source_db.sql("postgres", "CREATE DATABASE shop");
    source_db.sql(
        "shop",
        "CREATE TABLE orders (id int PRIMARY KEY, item text NOT NULL, price numeric(10,2));
         INSERT INTO orders SELECT i, 'item ' || i, i * 1.25 FROM generate_series(1, 2000) AS i;
         CREATE TABLE customers (id int PRIMARY KEY, name text);
         INSERT INTO customers SELECT i, 'customer ' || i FROM generate_series(1, 300) AS i;",
    );
    let volumes = Scratch::new(&format!("{ns}-volumes"));
    fill_volume(&volumes.0.join("uploads"));
    secret(&ns, "repository", &[("password", REPOSITORY_PASSWORD)]);
    secret(
        &ns,
        "pg-backup",
        &[("username", PG_ADMIN), ("password", PG_PASSWORD)],
    );
    claim(&ns, "uploads");
    Parts {
        namespace,
        rest,
        source_db,
        volumes,
    }
}

#[tokio::test]
async fn a_drill_waits_for_the_backup_proves_the_volume_and_the_database_and_names_what_fails() {
    if !parts_or_skip() || !engine_or_skip(&[image("drill").as_str()]) {
        return;
    }
    apply_crds();
    let parts = parts();
    let ns = parts.namespace.name.as_str();
    let uploads = parts.volumes.0.join("uploads");
    let client = client().await;
    let mut kubelet = Kubelet::new(client.clone(), ns);
    kubelet.claim("uploads", &uploads);
    let policy = format!(r#"{{"privilegedMoverNamespaces":["{ns}"]}}"#);
    let drill_image = image("drill");
    let extra = [("NEVERWIPED_DRILL_IMAGE", drill_image.as_str())];
    let operator = OperatorContainer::start_in(Some(ns), ns, &policy, &extra);
    let database = json!([{
        "name": "orders", "type": "postgresql", "host": "127.0.0.1", "port": parts.source_db.port,
        "credentialsSecretRef": {"name": "pg-backup"}, "databases": ["shop"],
    }]);
    // Scheduled drills suspended: only the requests run one.
    let verify = json!({"recoveryTimeObjective": "10m", "suspend": true});
    apply(&plan(
        ns,
        "nightly",
        &parts.rest.url("shop"),
        json!({"volumes": [{"claimName": "uploads"}], "databases": database,
               "mover": {"mode": "Privileged"}, "verify": verify}),
    ));

    // Asked for while the first backup's Job runs: the drill waits, and says why.
    job_created(&client, ns, "nightly-manual-1").await;
    ask_for_drill(ns, "first");
    let waiting = eventually("the drill to wait", ACT_TIMEOUT, || async {
        let verify = plan_status(ns, "nightly")["verify"].clone();
        verify["waiting"].as_str().map(str::to_owned)
    })
    .await;
    assert!(
        plan_status(ns, "nightly")["verify"]["activeJob"].is_null(),
        "{waiting}"
    );
    let backup = run(&mut kubelet, &client, ns, "nightly-manual-1").await;
    assert!(succeeded(&backup), "{}", container_config(&backup));
    let snapshot = recorded(ns, "nightly", "nightly-manual-1").await["lastRun"]["snapshotId"]
        .as_str()
        .expect("a snapshot")
        .to_owned();

    let first = drill_job(ns, None).await;
    let drill = run(&mut kubelet, &client, ns, &first).await;
    assert!(succeeded(&drill), "{}", container_config(&drill));
    proved(&drill, &drill_record(ns, &first).await, &snapshot, &uploads);
    let listed = kubectl(&["get", "backupplans", "-n", ns]);
    assert!(
        listed.contains("VERIFIED") && listed.contains("Succeeded"),
        "{listed}"
    );
    let metrics = http_get(operator.port, "/metrics").expect("the operator's metrics");
    let duration =
        format!("neverwiped_restore_drill_duration_seconds{{namespace=\"{ns}\",plan=\"nightly\"}}");
    assert!(metrics.contains(&duration), "{metrics}");

    // A pack of the photo damaged, and a night whose dump no server loads.
    let repository = parts.rest.data().join("shop");
    let (pack, original) = damage_largest_pack(&repository);
    let host = format!("{ns}/nightly");
    back_up_a_dump_that_does_not_load(
        &parts.rest.url("shop"),
        &host,
        &uploads,
        parts.source_db.port,
    );
    ask_for_drill(ns, "second");
    let second = drill_job(ns, Some(&first)).await;
    let drill = run(&mut kubelet, &client, ns, &second).await;
    assert!(
        matches!(drill.ending, Ending::Exited { exit_code: 14, .. }),
        "{:?}\n{}",
        drill.ending,
        container_config(&drill)
    );
    let record = drill_record(ns, &second).await;
    let message = record["message"].as_str().unwrap_or_default();
    assert_eq!(
        (&record["result"], &record["reason"]),
        (&json!("Failed"), &json!("VerifyFailed")),
        "{record:#}"
    );
    assert!(message.contains("uploads/photo.jpg"), "the file: {message}");
    assert!(
        message.contains("database orders: the dump did not load"),
        "{message}"
    );
    assert!(
        message.contains("syntax error"),
        "the server's words: {message}"
    );
    let databases = &record["databases"][0];
    assert!(
        databases["error"]
            .as_str()
            .unwrap_or_default()
            .contains("syntax error"),
        "{record:#}"
    );
    std::fs::write(&pack, original).expect("the pack as it was");
}

/// The drill of `record` proved the volume at `uploads` and the database, and measured both.
fn proved(drill: &PodRun, record: &Value, snapshot: &str, uploads: &Path) {
    // The pod ran as the operator asked: the image's user, no capability, a read-only root.
    for option in ["--read-only", "--cap-drop=ALL", "no-new-privileges"] {
        assert!(
            drill.run_options.iter().any(|o| o == option),
            "{option}: {:?}",
            drill.run_options
        );
    }
    assert!(
        !drill.run_options.iter().any(|o| o.starts_with("--cap-add")),
        "{:?}",
        drill.run_options
    );
    assert_eq!(
        (&record["result"], &record["reason"]),
        (&json!("Succeeded"), &json!("Succeeded")),
        "{record:#}\n{}",
        drill.logs
    );
    assert_eq!(record["snapshotId"], &snapshot[..8], "{record:#}");
    let volume = &record["volumes"][0];
    assert_eq!(volume["path"], "/data/uploads", "{record:#}");
    assert_eq!(
        volume["bytes"].as_u64(),
        Some(regular_file_sizes(uploads)),
        "{record:#}"
    );
    assert_eq!(volume["mismatched"], 0, "{record:#}");
    assert!(volume["bytesPerSecond"].as_i64() > Some(0), "{record:#}");
    let database = &record["databases"][0];
    assert_eq!(database["name"], "orders", "{record:#}");
    assert_eq!(database["tablesChecked"], 2, "{record:#}");
    assert!(database["bytes"].as_i64() > Some(10_000), "{record:#}");
    assert!(database["error"].is_null(), "{record:#}");
    let seconds = record["recoverySeconds"]
        .as_f64()
        .expect("the recovery time");
    let parts = volume["seconds"].as_f64().unwrap() + database["seconds"].as_f64().unwrap();
    assert!(
        seconds > 0.0 && (seconds - parts).abs() < 0.01,
        "{record:#}"
    );
}
