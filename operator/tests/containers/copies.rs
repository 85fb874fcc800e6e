//! A plan with one copy, three nights, end to end through the built images: the operator from its
//! image, every backup, copy and restore Job a container of the sidecar image
//! (`support::kubelet`), the plan's gate and the destination's gate two rest-servers, each a
//! process of its own that the test stops and starts.
//!
//! Emulated: the nights (each a manual trigger, minutes apart instead of a day), a node lost under
//! the copy (its container killed once the first packs reached the destination) and a night
//! without the destination (its rest-server stopped, the copy giving up on it within the deadline).
//! Real: the API server, the operator's Jobs, status and metrics, the sidecar's backups, copies
//! and restores, the repositories.
//!
//! Night one's copy is killed mid-run: the destination still checks clean, the status shows the
//! failed copy and one snapshot behind. Night two the destination is down: the backup succeeds,
//! the status shows two snapshots behind, the copy's error, and a lag that grew
//! (`neverwiped_copy_lag_seconds`). Night three the destination is back: one copy catches up, the
//! lag is zero. Every snapshot restores identically from the copy through a Restore naming it
//! (every file's SHA-256, mode, owner, size and time), and `check --read-data` is clean at both
//! ends.

use std::collections::BTreeMap;

use super::*;

/// The destination's repository password: not the plan's.
const OFFSITE_PASSWORD: &str = "offsite password 2c9d";
/// The application's user, whose pod mounts the volume.
const APP: (u32, u32) = (1000, 1000);

/// Runs the sidecar image on `repository` with `password`, as an admin would by hand: the host's
/// network, a read-only root, no capability, the image's user.
fn sidecar_on(repository: &str, password: &str, args: &[&str]) -> std::process::Output {
    let secrets = Scratch::new(&format!("copies-secrets-{}", free_port()));
    std::fs::write(secrets.0.join("password"), password).expect("the password file");
    std::fs::set_permissions(
        &secrets.0,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("a readable folder");
    let mount = format!(
        "type=bind,source={},target=/secrets,readonly",
        secrets.0.display()
    );
    let repo = format!("rest:{repository}");
    let mut command = vec!["run", "--rm", "--network", "host", "--read-only"];
    command.extend(["--tmpfs", "/tmp", "--cap-drop=ALL", "--mount", &mount]);
    command.extend(["--env", "NEVERWIPED_PASSWORD_FILE=/secrets/password"]);
    command.extend(["--env", "HOME=/tmp", "--env", "TMPDIR=/tmp"]);
    command.extend([SIDECAR_IMAGE_DEV.as_str(), "--repo", &repo]);
    command.extend(args);
    docker(&command)
}

/// Asserts `check --read-data` finds nothing wrong in the repository.
fn check_read_data_is_clean(repository: &str, password: &str) {
    let check = sidecar_on(repository, password, &["check", "--read-data"]);
    assert!(
        check.status.success(),
        "check --read-data of {repository}:\n{}",
        String::from_utf8_lossy(&check.stderr)
    );
}

/// The files below `dir` (the packs of a repository's `data/`).
fn files_below(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let paths = entries.map(|entry| entry.expect("an entry").path());
    paths
        .map(|path| match path.is_dir() {
            true => files_below(&path),
            false => 1,
        })
        .sum()
}

/// The plan's `status.copies[0]`.
fn offsite(ns: &str) -> Value {
    plan_status(ns, "nightly")["copies"][0].clone()
}

/// The operator's `neverwiped_copy_lag_seconds` of the plan's copy.
fn lag_seconds(operator: &OperatorContainer, ns: &str) -> f64 {
    let metrics = http_get(operator.port, "/metrics").expect("the operator's metrics");
    let series = format!(
        "neverwiped_copy_lag_seconds{{namespace=\"{ns}\",plan=\"nightly\",copy=\"offsite\"}}"
    );
    let sample = metrics.lines().find_map(|line| line.strip_prefix(&series));
    let value = sample.and_then(|v| v.trim().parse().ok());
    value.unwrap_or_else(|| panic!("{series} in:\n{metrics}"))
}

/// The night's change of the application's files: one file rewritten, one added (night one
/// writes 96 MiB that does not compress, for a copy long enough to be killed half-way).
fn change(data: &Path, night: u64) {
    if night == 1 {
        folder(data, "", APP, 0o750);
        folder(data, "media", APP, 0o750);
        for part in 0..6 {
            let path = format!("media/part-{part}.bin");
            put(data, &path, &noise(16 << 20, 10 + part), APP, 0o640);
        }
    }
    let log = format!("night {night}: orders shipped\n").repeat(4000);
    put(data, "orders.log", log.as_bytes(), APP, 0o600);
    let added = format!("media/night-{night}.bin");
    put(data, &added, &noise(2 << 20, 20 + night), APP, 0o640);
}

/// Runs night `night`'s backup (the plan's manual trigger) as a container; returns its snapshot
/// id once the status records it.
async fn backup(kubelet: &mut Kubelet, client: &kube::Client, ns: &str, night: u64) -> String {
    if night > 1 {
        trigger_backup(ns, "nightly", &night.to_string());
    }
    let job = format!("nightly-manual-{night}");
    let run = run(kubelet, client, ns, &job).await;
    assert!(succeeded(&run), "night {night}: {}", container_config(&run));
    let status = recorded(ns, "nightly", &job).await;
    assert_eq!(status["lastRun"]["result"], "Succeeded", "{status:#}");
    let id = status["lastRun"]["snapshotId"].as_str().expect("an id");
    id.to_owned()
}

/// The copy Job after the backup of `snapshot`, and `status.copies[0]` once it is recorded.
async fn copy_recorded(ns: &str, snapshot: &str) -> Value {
    let job = format!("nightly-copy-offsite-{}", &snapshot[..8]);
    eventually(&format!("{job} on the status"), ACT_TIMEOUT, || async {
        let copy = offsite(ns);
        (copy["lastRun"]["jobName"] == job.as_str() && copy["activeJob"].is_null()).then_some(copy)
    })
    .await
}

/// Kills the container of the copy Job `job` (SIGKILL, as a node lost) once a pack of it has
/// reached the destination's `data/`, and before it ends.
async fn kill_once_packs_land(ns: &str, job: &str, packs: &Path) {
    let prefix = format!("nw-{ns}-{job}");
    let deadline = std::time::Instant::now() + RUN_TIMEOUT;
    // The container is found first, so that the kill follows the first pack at once: the copy
    // may take well under a second.
    let container = loop {
        let listed = docker(&["ps", "--quiet", "--filter", &format!("name={prefix}")]);
        let container = String::from_utf8_lossy(&listed.stdout).trim().to_owned();
        if !container.is_empty() {
            break container;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no container of {job}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    while files_below(packs) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no pack of {job} landed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let killed = docker(&["kill", "--signal", "KILL", &container]);
    assert!(
        killed.status.success(),
        "the container of {job} ended before a kill: {}",
        String::from_utf8_lossy(&killed.stderr)
    );
}

/// The copies' ids at the destination, by the id of their original in the plan's repository.
fn copies_by_original(url: &str) -> BTreeMap<String, String> {
    let listed = sidecar_on(url, OFFSITE_PASSWORD, &["snapshots", "--json"]);
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let snapshots: Vec<Value> = serde_json::from_slice(&listed.stdout).expect("JSON");
    let pair = |s: &Value| {
        let original = s["original"].as_str().expect("a copy names its original");
        (
            original.to_owned(),
            s["id"].as_str().expect("an id").to_owned(),
        )
    };
    snapshots.iter().map(pair).collect()
}

#[tokio::test]
async fn three_nights_with_a_copy_killed_and_the_destination_down_catch_up_and_restore_identically()
{
    if !parts_or_skip() {
        return;
    }
    apply_crds();
    let namespace = TestNamespace::create("copies");
    let ns = namespace.name.as_str();
    let client = client().await;
    let gate = RestServer::start(&format!("{ns}-gate"));
    let mut offsite_gate = RestServer::start(&format!("{ns}-offsite"));
    let offsite_url = offsite_gate.url("shop-offsite");
    let offsite_packs = offsite_gate.data().join("shop-offsite/data");
    let volumes = Scratch::new(&format!("{ns}-volumes"));
    let data = volumes.0.join("app");
    secret(ns, "repository", &[("password", REPOSITORY_PASSWORD)]);
    secret(ns, "offsite-repository", &[("password", OFFSITE_PASSWORD)]);
    claim(ns, "app");
    application_pod(ns, "app");
    let mut kubelet = Kubelet::new(client.clone(), ns);
    kubelet.claim("app", &data);
    let operator = OperatorContainer::start(ns);
    let copies = json!([{"name": "offsite", "repository": {
        "url": offsite_url, "passwordSecretRef": {"name": "offsite-repository", "key": "password"},
    }}]);
    // The shortest deadline the API allows: the night without the destination ends there.
    let spec = json!({"volumes": [{"claimName": "app"}], "copies": copies, "deadline": "1m"});
    apply(&plan(ns, "nightly", &gate.url("shop"), spec));

    // Night one: the copy's container is killed once its first packs reached the destination.
    let mut trees = BTreeMap::new();
    change(&data, 1);
    let first = backup(&mut kubelet, &client, ns, 1).await;
    trees.insert(first.clone(), tree(&data));
    let job = format!("nightly-copy-offsite-{}", &first[..8]);
    let (killed, ()) = tokio::join!(
        run(&mut kubelet, &client, ns, &job),
        kill_once_packs_land(ns, &job, &offsite_packs)
    );
    assert!(!succeeded(&killed), "{}", container_config(&killed));
    let copy = copy_recorded(ns, &first).await;
    assert_eq!(copy["lastRun"]["result"], "Failed", "{copy:#}");
    assert_eq!(copy["behindSnapshots"], 1, "{copy:#}");
    assert!(copy["lastError"].is_string(), "{copy:#}");
    let check = sidecar_on(&offsite_url, OFFSITE_PASSWORD, &["check"]);
    assert!(
        check.status.success(),
        "a killed copy left the destination invalid: {check:?}"
    );
    let lag_after_kill = lag_seconds(&operator, ns);
    assert!(lag_after_kill > 0.0, "{lag_after_kill}");

    // Night two: the destination's gate is down. The backup succeeds, the copy waits for it.
    offsite_gate.stop();
    change(&data, 2);
    let second = backup(&mut kubelet, &client, ns, 2).await;
    trees.insert(second.clone(), tree(&data));
    let pending = offsite(ns);
    assert_eq!(
        pending["behindSnapshots"], 2,
        "the copy is pending: {pending:#}"
    );
    let job = format!("nightly-copy-offsite-{}", &second[..8]);
    let down = run(&mut kubelet, &client, ns, &job).await;
    assert!(!succeeded(&down), "{}", container_config(&down));
    let copy = copy_recorded(ns, &second).await;
    assert_eq!(copy["lastRun"]["result"], "Failed", "{copy:#}");
    // The sidecar gives up on the gate at half the plan's deadline, and says why: the status
    // names the destination and the retries spent, not merely the deadline.
    assert_ne!(copy["lastRun"]["reason"], "DeadlineExceeded", "{copy:#}");
    assert_eq!(copy["behindSnapshots"], 2, "{copy:#}");
    let error = copy["lastError"].as_str().unwrap_or_default();
    assert!(
        error.contains("(--repo)") && error.contains("retry budget is spent"),
        "{copy:#}"
    );
    let lag_while_down = lag_seconds(&operator, ns);
    assert!(
        lag_while_down > lag_after_kill,
        "{lag_while_down} after {lag_after_kill}"
    );

    // Night three: the destination is back, and one copy catches up.
    offsite_gate.start_again();
    change(&data, 3);
    let third = backup(&mut kubelet, &client, ns, 3).await;
    trees.insert(third.clone(), tree(&data));
    let job = format!("nightly-copy-offsite-{}", &third[..8]);
    let caught_up = run(&mut kubelet, &client, ns, &job).await;
    assert!(succeeded(&caught_up), "{}", container_config(&caught_up));
    let copy = copy_recorded(ns, &third).await;
    assert_eq!(copy["lastRun"]["result"], "Succeeded", "{copy:#}");
    assert_eq!(copy["lastRun"]["snapshotsCopied"], 3, "{copy:#}");
    assert_eq!(copy["behindSnapshots"], 0, "{copy:#}");
    assert_eq!(copy["lastCopiedSnapshot"]["id"], &third[..8], "{copy:#}");
    assert!(copy.get("lastError").is_none(), "{copy:#}");
    let lag = eventually("the lag back to 0", ACT_TIMEOUT, || async {
        (lag_seconds(&operator, ns) == 0.0).then_some(())
    });
    lag.await;

    // Every snapshot restores identically from the copy, and both ends check clean.
    let by_original = copies_by_original(&offsite_url);
    assert_eq!(by_original.len(), 3, "{by_original:?}");
    for (index, (original, expected)) in trees.iter().enumerate() {
        let target = volumes.0.join(format!("restored-{index}"));
        folder(&target, "", (0, 1000), 0o2775);
        let claim_name = format!("app-restored-{index}");
        claim(ns, &claim_name);
        kubelet.claim(&claim_name, &target);
        let volumes = json!([{"sourceClaimName": "app", "targetClaimName": claim_name}]);
        let copy_id = by_original.get(original).expect("a copy of every snapshot");
        let spec = json!({"copy": "offsite", "snapshot": copy_id, "volumes": volumes});
        restore(
            &mut kubelet,
            &client,
            ns,
            &format!("from-offsite-{index}"),
            spec,
        )
        .await;
        let (mut expected, mut got) = (expected.clone(), tree(&target));
        // The target's root keeps its own owner and mode (see the unprivileged test).
        assert!(expected.remove("/").is_some() && got.remove("/").is_some());
        assert_eq!(got, expected, "snapshot {original} from the copy");
    }
    check_read_data_is_clean(&gate.url("shop"), REPOSITORY_PASSWORD);
    check_read_data_is_clean(&offsite_url, OFFSITE_PASSWORD);
}
