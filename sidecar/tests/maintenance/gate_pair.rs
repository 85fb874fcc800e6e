//! History that the backups' own login cannot delete: two rest-servers on one data folder, one
//! append-only with the tenant's login, one full with the admin's (maintenance) login, behind one
//! URL that sends each login to its server, as the gate does. Everything
//! a backup pod holds (its login and the repository password) deletes nothing, and the admin's
//! `prune --protect-within` keeps every snapshot inside the window whole, even after a junk index
//! from the tenant and after being killed at any moment.

use super::support::fixtures::{assert_same_tree, copy_dir, Noise, PASSWORD};
use super::support::sidecar::{bare_command, read_result, run, Run};
use super::support::{GatePair, RestServer};
use bytes::Bytes;
use neverwiped::backend::rest::RestBackend;
use neverwiped::backend::{ObjectKind, SharedBackend};
use neverwiped::format::index::{IndexFile, IndexedBlob, IndexedPack};
use neverwiped::format::pack::{ClosedPack, PackBuilder};
use neverwiped::format::tree::NodeKind;
use neverwiped::ids::{BlobKind, SnapshotId};
use neverwiped::repository::Repository;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const HOST: &str = "shop/nightly";
/// The admin's prune of the tests: the host's last snapshot kept, inside a 14-day window.
const PRUNE_KEEPING_ONE: [&str; 7] = [
    "prune",
    "--host",
    HOST,
    "--keep-last",
    "1",
    "--protect-within",
    "14d",
];

/// The sidecar as one login runs it: its repository URL, gate login and the repository password.
struct Login {
    repo: String,
    gate_login: Option<(String, String)>,
    password_file: PathBuf,
}

impl Login {
    /// `server`'s login at the pair's one URL.
    fn of(pair: &GatePair, server: &RestServer, password_file: &Path) -> Login {
        let config = pair.rest_config(server);
        Login {
            repo: format!("rest:{}", config.url),
            gate_login: config.username.zip(config.password),
            password_file: password_file.to_path_buf(),
        }
    }

    fn local(repo: &Path, password_file: &Path) -> Login {
        Login {
            repo: repo.to_str().unwrap().to_owned(),
            gate_login: None,
            password_file: password_file.to_path_buf(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = bare_command();
        command
            .arg("--repo")
            .arg(&self.repo)
            .env("NEVERWIPED_PASSWORD_FILE", &self.password_file)
            .args(args);
        if let Some((username, password)) = &self.gate_login {
            command
                .env("NEVERWIPED_GATE_USERNAME", username)
                .env("NEVERWIPED_GATE_PASSWORD", password);
        }
        command
    }

    fn run(&self, args: &[&str]) -> Run {
        run(self.command(args))
    }

    /// Backs up `source` as the snapshot of `days_ago` days before now; returns its id.
    fn backup_aged(&self, source: &Path, days_ago: i64) -> String {
        let time = (chrono::Utc::now() - chrono::Duration::days(days_ago))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let source = source.to_str().unwrap();
        let run = self
            .run(&["backup", source, "--host", HOST, "--time", &time, "--json"])
            .expect_ok();
        let summary: serde_json::Value =
            serde_json::from_str(run.stdout.lines().last().unwrap_or_default())
                .unwrap_or_else(|e| panic!("backup --json is not JSON ({e}):\n{}", run.stdout));
        summary["snapshotId"].as_str().unwrap().to_owned()
    }

    fn snapshot_ids(&self) -> Vec<String> {
        let run = self.run(&["snapshots", "--json"]).expect_ok();
        let listed: Vec<serde_json::Value> = serde_json::from_str(&run.stdout).unwrap();
        let mut ids: Vec<String> = listed
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_owned())
            .collect();
        ids.sort();
        ids
    }

    /// Restores `snapshot` and checks every file (content, mode, times) against `state`, the
    /// tree `source` held when it was backed up.
    fn assert_restores(&self, snapshot: &str, source: &Path, state: &Path) {
        let target = tempfile::tempdir().unwrap();
        let target_text = target.path().to_str().unwrap();
        self.run(&["restore", snapshot, "--target", target_text])
            .expect_ok();
        let restored = target.path().join(source.strip_prefix("/").unwrap());
        assert_same_tree(state, &restored, false);
    }
}

/// Four nights of `source`, 40, 20, 2 and 0 days ago, each with a file of its own (random, so
/// that only its own snapshot holds it); each night's tree is kept in `states/N` for comparison.
fn four_nights(login: &Login, work: &Path) -> (PathBuf, Vec<PathBuf>, Vec<String>) {
    let source = work.join("source");
    let mut states = Vec::new();
    let mut ids = Vec::new();
    for (night, days_ago) in [40, 20, 2, 0].into_iter().enumerate() {
        let state = work.join("states").join(night.to_string());
        fs::create_dir_all(state.join("sub")).unwrap();
        fs::write(state.join("shared.txt"), b"the same every night\n").unwrap();
        let own = Noise::new(100 + night as u64).bytes(150_000);
        fs::write(state.join(format!("night-{night}.bin")), own).unwrap();
        fs::write(
            state.join("sub/log.txt"),
            format!("night {night}\n").repeat(500),
        )
        .unwrap();
        // The same path every night, so that the nights are one group of snapshots.
        fs::rename(&state, &source).unwrap();
        ids.push(login.backup_aged(&source, days_ago));
        fs::rename(&source, &state).unwrap();
        states.push(state);
    }
    (source, states, ids)
}

/// Asserts that the run failed because the gate refused to delete an object of `kind`, and says
/// so: not as damage.
fn assert_refused(run: Run, kind: &str) {
    assert_ne!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("the server forbids this operation (403 Forbidden)")
            && run.stderr.contains(&format!("deleting {kind}/"))
            && run.stderr.contains("append-only"),
        "{}",
        run.stderr
    );
    assert!(
        !run.stderr.to_lowercase().contains("corrupt"),
        "{}",
        run.stderr
    );
}

fn first_name(dir: &Path) -> String {
    let mut files = super::support::fixtures::walk(dir);
    files.retain(|path| path.is_file());
    files.sort();
    files[0].file_name().unwrap().to_str().unwrap().to_owned()
}

fn folder_bytes(dir: &Path) -> u64 {
    super::support::fixtures::walk(dir)
        .iter()
        .filter(|path| path.is_file())
        .map(|path| fs::metadata(path).unwrap().len())
        .sum()
}

/// As the tenant: a pack of junk under the blob ids of `snapshot` (trees and contents), and an
/// index object that says those blobs are in it and, when `forge` is set, that it supersedes
/// every index object stored before it.
async fn append_junk_index(pair: &GatePair, snapshot: &str, forge: bool) {
    let backend: SharedBackend =
        Arc::new(RestBackend::new(pair.rest_config(&pair.tenant)).unwrap());
    let repo = Repository::open(backend.clone(), PASSWORD).await.unwrap();
    let repo = repo.load_index().await.unwrap();
    let snapshot = repo
        .read_snapshot(snapshot.parse::<SnapshotId>().unwrap())
        .await
        .unwrap();
    let mut builder = PackBuilder::default();
    let mut pending = vec![snapshot.tree];
    while let Some(tree_id) = pending.pop() {
        builder.add(BlobKind::Tree, tree_id, &[7u8; 64], 48);
        for node in repo.read_tree(&tree_id, "junk").await.unwrap().nodes {
            match node.kind {
                NodeKind::Dir { subtree } => pending.push(subtree),
                NodeKind::File { content, .. } => {
                    for id in content {
                        builder.add(BlobKind::Data, id, &[9u8; 64], 48);
                    }
                }
                _ => {}
            }
        }
    }
    let supersedes = match forge {
        true => repo.list_ids(ObjectKind::Index).await.unwrap(),
        false => vec![],
    };
    let ClosedPack { id, bytes, entries } = builder.finish(&repo.keys().sealer);
    backend
        .write(ObjectKind::Data, &id.to_hex(), Bytes::from(bytes))
        .await
        .unwrap();
    let file = IndexFile {
        packs: vec![IndexedPack {
            id,
            blobs: entries.iter().map(IndexedBlob::from).collect(),
        }],
        supersedes,
    };
    repo.write_object(ObjectKind::Index, &file).await.unwrap();
}

/// Raw HTTP as the tenant at the gate's URL: `DELETE` of a snapshot, a pack, an index and a key
/// object, and a `POST` over `config`, each answered 403 and without effect.
async fn raw_deletes_are_refused(pair: &GatePair, repo_dir: &Path) {
    let client = reqwest::Client::new();
    let (user, password) = (pair.tenant.username().unwrap(), pair.tenant.password());
    for kind in ["snapshots", "data", "index", "keys"] {
        let name = first_name(&repo_dir.join(kind));
        let url = pair.url().join(&format!("{kind}/{name}")).unwrap();
        let answer = client
            .delete(url)
            .basic_auth(user, password)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status().as_u16(), 403, "DELETE {kind}/{name}");
        let still = super::support::fixtures::walk(&repo_dir.join(kind));
        assert!(still.iter().any(|p| p.ends_with(&name)), "{kind}/{name}");
    }
    let config = fs::read(repo_dir.join("config")).unwrap();
    let answer = client
        .post(pair.url().join("config").unwrap())
        .basic_auth(user, password)
        .body(b"not a config".to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 403, "POST config");
    assert_eq!(fs::read(repo_dir.join("config")).unwrap(), config);
}

/// The gate's URL lets in only the logins its servers know: the admin's password under the
/// tenant's name, an unknown name and no login at all are each answered 401.
async fn other_logins_are_refused(pair: &GatePair) {
    let client = reqwest::Client::new();
    let config = pair.url().join("config").unwrap();
    let admin_password = pair.admin.password();
    for (user, password) in [
        (pair.tenant.username(), admin_password),
        (Some("intruder"), admin_password),
        (None, None),
    ] {
        let request = client.get(config.clone());
        let request = match user {
            Some(user) => request.basic_auth(user, password),
            None => request,
        };
        let answer = request.send().await.unwrap();
        assert_eq!(answer.status().as_u16(), 401, "GET config as {user:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tenant_deletes_nothing_and_the_admins_prune_keeps_the_window_whole() {
    let Some(pair) = GatePair::start("gate_pair") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let password_file = work.path().join("password");
    fs::write(&password_file, [PASSWORD, b"\n"].concat()).unwrap();
    let tenant = Login::of(&pair, &pair.tenant, &password_file);
    let admin = Login::of(&pair, &pair.admin, &password_file);
    tenant.run(&["init"]).expect_ok();
    let (source, states, ids) = four_nights(&tenant, work.path());
    let repo_dir = pair.data_dir().join("repo");

    // Everything the backup pod holds deletes nothing.
    assert_refused(tenant.run(&["forget", "--keep-last", "1"]), "snapshots");
    assert_refused(tenant.run(&["forget", &ids[0][..12]]), "snapshots");
    let prune = PRUNE_KEEPING_ONE;
    assert_refused(tenant.run(&prune), "snapshots");
    let second_password = work.path().join("second-password");
    fs::write(&second_password, "another password\n").unwrap();
    let added = admin
        .run(&[
            "key",
            "add",
            "--new-password-file",
            second_password.to_str().unwrap(),
            "--json",
        ])
        .expect_ok();
    let added: serde_json::Value = serde_json::from_str(&added.stdout).unwrap();
    let second_key = added["added"].as_str().unwrap().to_owned();
    assert_refused(tenant.run(&["key", "remove", &second_key[..12]]), "keys");
    raw_deletes_are_refused(&pair, &repo_dir).await;
    other_logins_are_refused(&pair).await;
    assert_eq!(tenant.snapshot_ids().len(), 4);
    assert_eq!(fs::read_dir(repo_dir.join("keys")).unwrap().count(), 2);

    // rest-server's append-only mode lets any login delete locks (restic needs it): the tenant's
    // unlock --remove-all does remove the admin's lock. A prune that loses its lock stops.
    let lock_backend: SharedBackend =
        Arc::new(RestBackend::new(pair.rest_config(&pair.admin)).unwrap());
    let lock_repo = Repository::open(lock_backend, PASSWORD).await.unwrap();
    let mut lock = neverwiped::format::lock::Lock::new(true, "prune");
    lock.hostname = "maintenance-job".into();
    lock_repo
        .write_object(ObjectKind::Locks, &lock)
        .await
        .unwrap();
    tenant.run(&["unlock", "--remove-all"]).expect_ok();
    assert_eq!(fs::read_dir(repo_dir.join("locks")).unwrap().count(), 0);

    // A junk index from the tenant says the protected snapshots' blobs are in a junk pack; the
    // second also claims to supersede every real index object.
    append_junk_index(&pair, &ids[2], false).await;
    append_junk_index(&pair, &ids[3], true).await;

    // The admin's prune forgets the two nights outside the window and frees the data only they
    // held: the second night's pack. The first night's pack also holds the file every night
    // shares, which the protected snapshots need, so it is kept whole (never repacked).
    let before = folder_bytes(&repo_dir.join("data"));
    let result_file = work.path().join("result.json");
    let mut admin_prune = prune.to_vec();
    admin_prune.extend(["--result-file", result_file.to_str().unwrap()]);
    admin.run(&admin_prune).expect_ok();
    assert_eq!(read_result(&result_file).snapshots_forgotten, Some(2));
    let after = folder_bytes(&repo_dir.join("data"));
    assert!(
        after + 140_000 < before && after + 2 * 140_000 > before,
        "{before} bytes before, {after} after"
    );
    let mut kept = vec![ids[2].clone(), ids[3].clone()];
    kept.sort();
    assert_eq!(admin.snapshot_ids(), kept);
    admin.run(&["check", "--read-data"]).expect_ok();
    for night in [2, 3] {
        tenant.assert_restores(&ids[night], &source, &states[night]);
    }
    // The junk packs are in no index any more: the next prune removes them.
    admin.run(&["prune"]).expect_ok();
    admin.run(&["check", "--read-data"]).expect_ok();
}

#[test]
fn a_prune_killed_at_any_moment_loses_nothing_a_protected_snapshot_needs() {
    let work = tempfile::tempdir().unwrap();
    let password_file = work.path().join("password");
    fs::write(&password_file, [PASSWORD, b"\n"].concat()).unwrap();
    let pristine = work.path().join("pristine");
    let login = Login::local(&pristine, &password_file);
    login.run(&["init"]).expect_ok();
    let (source, states, ids) = four_nights(&login, work.path());
    let prune = PRUNE_KEEPING_ONE;
    let mut killed_before_the_end = 0;
    for delay_ms in [0, 10, 30, 60, 100, 150, 250, 400] {
        let repo = work.path().join(format!("round-{delay_ms}"));
        copy_dir(&pristine, &repo);
        let login = Login::local(&repo, &password_file);
        let mut child = login
            .command(&prune)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let ended_by_itself = child.try_wait().unwrap().is_some();
        let _ = child.kill();
        child.wait().unwrap();
        killed_before_the_end += u32::from(!ended_by_itself);
        // A fresh prune (after the killed one's lock is removed) completes; nothing is lost.
        login.run(&["unlock", "--remove-all"]).expect_ok();
        login.run(&prune).expect_ok();
        login.run(&["check", "--read-data"]).expect_ok();
        for night in [2, 3] {
            login.assert_restores(&ids[night], &source, &states[night]);
        }
        assert_eq!(login.snapshot_ids().len(), 2, "after {:?}", started);
        fs::remove_dir_all(&repo).unwrap();
    }
    assert!(
        killed_before_the_end >= 3,
        "only {killed_before_the_end} rounds killed the prune before it ended"
    );
}

/// The plan `prune --dry-run --keep-*` shows is the one the prune then carries out: the
/// snapshots it would forget count as gone, so their packs are in its plan to delete.
#[test]
fn a_dry_run_shows_the_plan_the_prune_then_carries_out() {
    let work = tempfile::tempdir().unwrap();
    let password_file = work.path().join("password");
    fs::write(&password_file, [PASSWORD, b"\n"].concat()).unwrap();
    let login = Login::local(&work.path().join("repo"), &password_file);
    login.run(&["init"]).expect_ok();
    four_nights(&login, work.path());
    let prune = ["--json", "prune", "--host", HOST, "--keep-last", "1"];
    let plan_of = |run: Run| -> serde_json::Value {
        let line = run.stdout.lines().last().unwrap_or_default().to_owned();
        let printed: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("prune --json is not JSON ({e}):\n{}", run.stdout));
        printed["plan"].clone()
    };
    let mut dry_run = prune.to_vec();
    dry_run.push("--dry-run");
    let shown = plan_of(login.run(&dry_run).expect_ok());
    assert_eq!(login.snapshot_ids().len(), 4, "a dry run forgets nothing");
    let done = plan_of(login.run(&prune).expect_ok());
    assert_eq!(login.snapshot_ids().len(), 1);
    assert!(done["packsToDelete"].as_u64().unwrap() > 0, "{done}");
    assert_eq!(shown, done);
}
