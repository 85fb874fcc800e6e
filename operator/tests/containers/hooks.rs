//! Hooks around CSI snapshots end to end: a plan reads its volume from a VolumeSnapshot, and its
//! pre and post hooks (the sidecar image's `psql`, against a real PostgreSQL standing in for the
//! application) bracket only the snapshot's creation. The operator runs from its image; its hook
//! Jobs and its backup Job run in `support::kubelet` with all their containers.
//!
//! Emulated: the kubelet and the Job controller, and the CSI snapshot controller (the test marks
//! the VolumeSnapshot ready after a pause of its choosing; the clone's volume is the source
//! claim's folder). Real: the API server, the operator, the sidecar, the launcher, `psql`, the
//! server, rest-server.
//!
//! The application is paused from the first pre hook to the last post hook, and not during the
//! upload: the run's record says how long, and the hooks' own rows in the database agree. A pre
//! hook that fails with `onError: Fail` fails the run, and the post hook runs all the same.

use super::*;
use support::csi::{apply_snapshot_crds, create_claim, snapshotter_makes_ready, Driver};

/// How long the test's snapshot controller takes to cut the snapshot.
const SNAPSHOT_TAKES: Duration = Duration::from_secs(3);

/// A hook that records its phase in the application's database, then exits with `exit_code`.
fn logging_hook(name: &str, port: u16, phase: &str, exit_code: i32) -> Value {
    let insert = format!("INSERT INTO hook_log (phase) VALUES ('{phase}')");
    let script = format!(
        "psql -h 127.0.0.1 -p {port} -U {PG_ADMIN} -d shop -v ON_ERROR_STOP=1 -c \"{insert}\" && \
         echo '{phase} hook exits {exit_code}' >&2 && exit {exit_code}"
    );
    json!({
        "name": name,
        "command": ["sh", "-c", script],
        "env": [{"name": "PGPASSWORD", "valueFrom": {"secretKeyRef": {"name": "pg-backup", "key": "password"}}}],
        "timeoutSeconds": 60,
        "onError": "Fail",
    })
}

/// The newest Job of the plan whose name holds `fragment` and that is not in `ran`.
async fn next_job(client: &kube::Client, ns: &str, fragment: &str, ran: &[String]) -> String {
    eventually(&format!("a Job {fragment}"), ACT_TIMEOUT, || async {
        let names = job_names(client, ns, "neverwiped.io/plan=nightly").await;
        names
            .into_iter()
            .find(|name| name.contains(fragment) && !ran.contains(name))
    })
    .await
}

/// Plays the snapshot controller for the run's VolumeSnapshots once they exist: ready after
/// [`SNAPSHOT_TAKES`].
async fn cut_snapshots(client: &kube::Client, ns: &str) {
    let snapshots = eventually("the run's VolumeSnapshot", ACT_TIMEOUT, || async {
        let listed = kubectl_json(&["get", "volumesnapshots", "-n", ns]);
        let names: Vec<String> = listed["items"]
            .as_array()?
            .iter()
            .filter(|s| s["status"]["readyToUse"] != true)
            .filter_map(|s| s["metadata"]["name"].as_str().map(str::to_owned))
            .collect();
        (!names.is_empty()).then_some(names)
    })
    .await;
    tokio::time::sleep(SNAPSHOT_TAKES).await;
    for name in snapshots {
        snapshotter_makes_ready(client, ns, &name, "1Gi").await;
    }
}

/// The phases the hooks wrote, in order, and the seconds from the first to the last.
fn hook_log(db: &Postgres) -> (Vec<String>, f64) {
    let rows = db.sql(
        "shop",
        "SELECT string_agg(phase, ',' ORDER BY id), \
         extract(epoch FROM max(at) - min(at)) FROM hook_log",
    );
    let (phases, seconds) = rows.trim().split_once('|').expect("two columns");
    (
        phases.split(',').map(str::to_owned).collect(),
        seconds.parse().expect("seconds"),
    )
}

#[tokio::test]
async fn hooks_bracket_the_snapshot_and_a_failing_pre_hook_still_runs_the_post_hook() {
    if !parts_or_skip() {
        return;
    }
    apply_crds();
    apply_snapshot_crds();
    let namespace = TestNamespace::create("hooks");
    let ns = namespace.name.as_str();
    let client = client().await;
    let rest = RestServer::start(ns);
    let db = Postgres::start(&format!("{ns}-app"));
    db.sql("postgres", "CREATE DATABASE shop");
    db.sql(
        "shop",
        "CREATE TABLE hook_log (id serial PRIMARY KEY, phase text, at timestamptz DEFAULT clock_timestamp())",
    );
    let driver = Driver::install(ns);
    create_claim(ns, "uploads", Some(&driver.storage_class));
    let volumes = Scratch::new(&format!("{ns}-volumes"));
    let uploads = volumes.0.join("uploads");
    fill_volume(&uploads);
    secret(ns, "repository", &[("password", REPOSITORY_PASSWORD)]);
    secret(
        ns,
        "pg-backup",
        &[("username", PG_ADMIN), ("password", PG_PASSWORD)],
    );
    let mut kubelet = Kubelet::new(client.clone(), ns);
    kubelet.claim("uploads", &uploads);
    let operator = OperatorContainer::start(ns);
    let hooks = json!({
        "pre": [logging_hook("freeze", db.port, "pre", 0)],
        "post": [logging_hook("thaw", db.port, "post", 0)],
    });
    apply(&plan(
        ns,
        "nightly",
        &rest.url("shop"),
        json!({"volumes": [{"claimName": "uploads"}], "copyMethod": "Snapshot",
               "mover": {"mode": "Privileged"}, "hooks": hooks}),
    ));

    // Pre hooks, the snapshot cut while the application is paused, post hooks, then the backup.
    let mut ran = Vec::new();
    let pre = next_job(&client, ns, "hooks-pre", &ran).await;
    let pre_run = run(&mut kubelet, &client, ns, &pre).await;
    assert!(succeeded(&pre_run), "{}", pod_report(&pre_run));
    ran.push(pre);
    cut_snapshots(&client, ns).await;
    let post = next_job(&client, ns, "hooks-post", &ran).await;
    let post_run = run(&mut kubelet, &client, ns, &post).await;
    assert!(succeeded(&post_run), "{}", pod_report(&post_run));
    ran.push(post);
    let (phases, paused) = hook_log(&db);
    assert_eq!(phases, ["pre", "post"]);
    assert!(paused >= SNAPSHOT_TAKES.as_secs_f64(), "paused {paused} s");

    let backup = job_created(&client, ns, "nightly-manual-1").await;
    for volume in backup
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .volumes
        .unwrap_or_default()
    {
        if let Some(clone) = volume.persistent_volume_claim {
            kubelet.claim(&clone.claim_name, &uploads);
        }
    }
    let backup_run = run(&mut kubelet, &client, ns, "nightly-manual-1").await;
    assert!(succeeded(&backup_run), "{}", pod_report(&backup_run));
    let status = recorded(ns, "nightly", "nightly-manual-1").await;
    let last = &status["lastRun"];
    assert_eq!(last["result"], "Succeeded", "{status:#}");
    let recorded_pause = last["pausedSeconds"].as_f64().expect("the pause");
    // The hooks' own clock against the run's record: the pause spans the snapshot, not the
    // upload, and is measured from the hooks' start and end.
    assert!(
        recorded_pause >= paused && recorded_pause < paused + 30.0,
        "recorded {recorded_pause} s, the hooks saw {paused} s: {status:#}"
    );
    let (phases, _) = hook_log(&db);
    assert_eq!(phases, ["pre", "post"], "the backup Job ran no hook");

    // A pre hook that fails with onError: Fail: no snapshot, a failed run, the post hook ran.
    let failing = json!({"spec": {"manualTrigger": "again", "hooks": {
        "pre": [logging_hook("freeze", db.port, "pre", 4)],
        "post": [logging_hook("thaw", db.port, "post", 0)],
    }}});
    kubectl(&[
        "patch",
        "backupplan",
        "nightly",
        "-n",
        ns,
        "--type",
        "merge",
        "-p",
        &failing.to_string(),
    ]);
    let pre = next_job(&client, ns, "hooks-pre", &ran).await;
    let pre_run = run(&mut kubelet, &client, ns, &pre).await;
    assert!(!succeeded(&pre_run), "{}", pod_report(&pre_run));
    ran.push(pre);
    let post = next_job(&client, ns, "hooks-post", &ran).await;
    let post_run = run(&mut kubelet, &client, ns, &post).await;
    assert!(succeeded(&post_run), "{}", pod_report(&post_run));
    let status = eventually("the failed run on the status", ACT_TIMEOUT, || async {
        let status = plan_status(ns, "nightly");
        (status["lastRun"]["result"] == "Failed").then_some(status)
    })
    .await;
    let last = &status["lastRun"];
    assert_eq!(last["reason"], "HookFailed", "{status:#}");
    let message = last["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("freeze") && message.contains("pre hook exits 4"),
        "{message}"
    );
    let (phases, _) = hook_log(&db);
    assert_eq!(phases, ["pre", "post", "pre", "post"]);
    let snapshots = kubectl_json(&["get", "volumesnapshots", "-n", ns]);
    assert!(
        snapshots["items"]
            .as_array()
            .is_some_and(|items| items.iter().all(|s| s["status"]["readyToUse"] == true)),
        "no snapshot after a failed pre hook: {snapshots:#}"
    );
    drop(operator);
}
