//! The ransomware night, end to end: the operator builds each backup Job, the real sidecar binary
//! runs its arguments (its volume mapped to a folder of this machine, its repository a real
//! rest-server on loopback), and its real result goes back as the pod's termination message.
//! Three usual nights of a tree, then its files replaced by random bytes of the same sizes, then
//! three more nightly backups with `keepLast: 1`: the plan shows `SuspiciousChange`, and the last
//! snapshot before the attack still restores identically (SHA-256, mode, size and times of every
//! file). The sidecar is `target/debug/neverwiped-sidecar`: `cargo build` it first.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use neverwiped_contract::RunResult;
use serde_json::json;

use super::*;

const PASSWORD: &str = "ransomware-night-password-5d1e";

/// 24 files of text that compresses, 32 KiB to 128 KiB each, in two folders.
fn write_tree(root: &Path) {
    for index in 0..24u32 {
        let folder = root.join(if index % 2 == 0 { "docs" } else { "db" });
        std::fs::create_dir_all(&folder).unwrap();
        let line = format!("order {index}: customer record, shipped, invoice paid\n");
        let size = (32 + (index as usize % 4) * 32) << 10;
        let text: String = line.repeat(size / line.len() + 1)[..size].to_owned();
        std::fs::write(folder.join(format!("file-{index:02}.txt")), text).unwrap();
    }
}

/// Every file's SHA-256, size, mode and modification time, by path below `root`.
fn fingerprint(root: &Path) -> BTreeMap<PathBuf, (String, u64, u32, i64)> {
    let mut files = BTreeMap::new();
    for folder in ["docs", "db"] {
        for entry in std::fs::read_dir(root.join(folder)).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::metadata(&path).unwrap();
            let sum = Command::new("sha256sum").arg(&path).output().unwrap();
            let sum = String::from_utf8_lossy(&sum.stdout);
            let relative = path.strip_prefix(root).unwrap().to_owned();
            let hash = sum.split_whitespace().next().unwrap().to_owned();
            files.insert(relative, (hash, meta.len(), meta.mode(), meta.mtime()));
        }
    }
    files
}

/// The attack: every file rewritten in place with random bytes of its size.
fn encrypt(root: &Path) {
    let mut random = std::fs::File::open("/dev/urandom").unwrap();
    for relative in fingerprint(root).keys() {
        let path = root.join(relative);
        let mut bytes = vec![0; std::fs::metadata(&path).unwrap().len() as usize];
        random.read_exact(&mut bytes).unwrap();
        std::fs::write(&path, bytes).unwrap();
    }
}

/// Runs the backup Job's arguments with the real sidecar: `/data/app` is `tree`, the password
/// file and the result file are scratch files. Returns the sidecar's result.
fn run_sidecar(job: &Job, tree: &Path, scratch: &Path) -> RunResult {
    let result_file = scratch.join("result.json");
    let args: Vec<String> = args_of(job)
        .into_iter()
        .map(|arg| match arg.as_str() {
            "/data/app" => tree.to_str().unwrap().to_owned(),
            "/dev/termination-log" => result_file.to_str().unwrap().to_owned(),
            // The claim's record names the volume's path too (`--claim`).
            claim if claim.starts_with("{\"path\":\"/data/app\"") => claim.replacen(
                "\"/data/app\"",
                &serde_json::to_string(tree.to_str().unwrap()).unwrap(),
                1,
            ),
            _ => arg,
        })
        .collect();
    let password = scratch.join("password");
    std::fs::write(&password, PASSWORD).unwrap();
    let output = Command::new(repo_root().join("target/debug/neverwiped-sidecar"))
        .args(&args)
        .env("NEVERWIPED_PASSWORD_FILE", &password)
        .env("TMPDIR", scratch)
        .output()
        .expect("the sidecar runs");
    let text = std::fs::read_to_string(&result_file).unwrap_or_default();
    let result = RunResult::from_json(&text).unwrap_or_else(|error| {
        panic!(
            "no result ({error}) from {args:?}:\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    assert!(
        result.changes.is_some(),
        "the sidecar reports no changes: an older build? run cargo build first"
    );
    result
}

/// Starts night `night` (a manual run), runs its Job with the real sidecar and records it.
async fn night(client: &Client, ns: &str, night: u32, tree: &Path, scratch: &Path) -> Value {
    if night > 1 {
        trigger_backup(ns, "app", &night.to_string());
    }
    let name = format!("app-manual-{night}");
    let job = job_created(client, ns, &name).await;
    let result = run_sidecar(&job, tree, scratch);
    assert_eq!(result.error, None, "night {night}: {result:?}");
    let ending = Ending::Result {
        exit_code: 0,
        result: Box::new(result),
    };
    finish_job(client, ns, &name, ending).await;
    run_recorded(ns, "app", &name).await
}

#[tokio::test]
async fn the_snapshot_before_a_ransomware_night_survives_three_nights_of_keep_last_one() {
    let Some(TestWorld { namespace, client }) = test_world("ransom").await else {
        return;
    };
    let ns = namespace.name.as_str();
    let scratch = std::env::temp_dir().join(format!("{ns}-ransomware"));
    let (tree, data) = (scratch.join("app"), scratch.join("rest"));
    std::fs::create_dir_all(&tree).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    let rest = neverwiped_testkit::RestServer::start(&data, None, false);
    create_secret(ns, "app-repository", &[("password", PASSWORD)]);
    create_claim(ns, "app", &[]);
    // Two nights of history with a parent are enough here (the chart's default is three).
    let _operator = Operator::start_with(
        ns,
        "operator",
        &[("NEVERWIPED_SUSPICIOUS_MIN_HISTORY", "2")],
    );
    let repository = rest.url("app");
    apply(&json!({
        "apiVersion": "neverwiped.io/v1alpha1", "kind": "BackupPlan",
        "metadata": {"name": "app", "namespace": ns},
        "spec": {
            "schedule": "30 2 * * *", "manualTrigger": "1",
            "repository": {"url": repository,
                           "passwordSecretRef": {"name": "app-repository", "key": "password"}},
            "volumes": [{"claimName": "app"}],
            "copyMethod": "Direct",
            "retention": {"keepLast": 1},
        },
    }));

    // Three usual nights: a file or two edited each night.
    write_tree(&tree);
    night(&client, ns, 1, &tree, &scratch).await;
    for n in 2..=3 {
        let path = tree.join("docs/file-00.txt");
        let edited = std::fs::read_to_string(&path).unwrap() + &format!("night {n}\n");
        std::fs::write(&path, edited).unwrap();
        night(&client, ns, n, &tree, &scratch).await;
    }
    let good = plan_status(ns, "app")["lastRun"]["snapshotId"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = fingerprint(&tree);
    std::fs::set_permissions(&tree, std::fs::Permissions::from_mode(0o755)).unwrap();

    // The attack, then three nightly backups.
    encrypt(&tree);
    for n in 4..=6 {
        night(&client, ns, n, &tree, &scratch).await;
    }
    let status = plan_status(ns, "app");
    let flagged = condition(&status, "SuspiciousChange");
    assert_eq!(
        (&flagged["status"], &flagged["reason"]),
        (&json!("True"), &json!("MassRewrite")),
        "{status}"
    );

    // The last snapshot before the attack restores identically.
    let target = scratch.join("restored");
    let output = Command::new(repo_root().join("target/debug/neverwiped-sidecar"))
        .args(["restore", &good, "--repo", &format!("rest:{repository}")])
        .arg("--target")
        .arg(&target)
        .env("NEVERWIPED_PASSWORD_FILE", scratch.join("password"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "restore of {good}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let restored = target.join(tree.strip_prefix("/").unwrap());
    assert_eq!(fingerprint(&restored), before);
    drop(rest);
    let _ = std::fs::remove_dir_all(&scratch);
}
