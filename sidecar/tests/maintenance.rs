//! Retention, prune, check, locks and keys against real storage: the repository stays small,
//! sound and openable, and every kept snapshot restores identically.

mod support;

#[path = "maintenance/gate_pair.rs"]
mod gate_pair;

use support::fixtures;

use async_trait::async_trait;
use fixtures::{
    assert_same_tree, build_fidelity_tree, build_mixed_data, copy_dir, init_repository as init,
    is_root, open_repository as open, PASSWORD,
};
use neverwiped::archive::{backup, BackupOptions, Source};
use neverwiped::backend::local::LocalBackend;
use neverwiped::backend::rest::RestBackend;
use neverwiped::backend::{BackendError, BackendResult, ObjectKind, SharedBackend};
use neverwiped::format::snapshot::Snapshot;
use neverwiped::ids::SnapshotId;
use neverwiped::maintenance::check::{check, ReadData};
use neverwiped::maintenance::forget::{forget, KeepPolicy};
use neverwiped::maintenance::keys;
use neverwiped::maintenance::prune::{execute_prune, plan_prune};
use neverwiped::repository::{IndexedRepository, Repository};
use neverwiped::restore::{restore, RestoreOptions};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use support::hooked_backend::{Hook, HookedBackend, Mutation};
use support::RestServer;

async fn backup_dir(repo: &IndexedRepository, source: &Path) -> SnapshotId {
    backup(
        repo,
        BackupOptions::new(vec![Source::Path(source.to_path_buf())]),
    )
    .await
    .unwrap()
    .snapshot_id
}

async fn restore_matches(repo: &IndexedRepository, snapshot: &SnapshotId, source: &Path) {
    let snapshot: Snapshot = repo.read_snapshot(*snapshot).await.unwrap();
    let target = tempfile::tempdir().unwrap();
    restore(repo, snapshot.tree, &RestoreOptions::new(target.path()))
        .await
        .unwrap();
    assert_same_tree(
        source,
        &target.path().join(source.strip_prefix("/").unwrap()),
        is_root(),
    );
}

async fn data_bytes(backend: &SharedBackend) -> u64 {
    backend
        .list(ObjectKind::Data)
        .await
        .unwrap()
        .iter()
        .map(|o| o.size_bytes)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_year_of_nightly_snapshots_keeps_exactly_the_policy_set_on_rest_server() {
    let Some(server) = RestServer::start_with_login("a_year_of_nightly_snapshots") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("file"), b"nightly").unwrap();
    let backend: SharedBackend = Arc::new(RestBackend::new(server.rest_config()).unwrap());
    let repo = init(backend.clone()).await;
    let real = backup_dir(&repo, work.path()).await;
    let template: Snapshot = repo.read_snapshot(real).await.unwrap();
    backend
        .delete(ObjectKind::Snapshots, &real.to_hex())
        .await
        .unwrap();
    // A fake clock: one snapshot per night at 02:00 UTC for a year, ending 2026-11-30.
    let start = chrono::DateTime::parse_from_rfc3339("2025-12-01T02:00:00Z").unwrap();
    for day in 0..365 {
        let time = (start + chrono::Duration::days(day))
            .to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
        repo.write_object(
            ObjectKind::Snapshots,
            &Snapshot {
                time,
                ..template.clone()
            },
        )
        .await
        .unwrap();
    }
    let policy = KeepPolicy {
        daily: 7,
        weekly: 4,
        monthly: 12,
        ..Default::default()
    };
    let dry = forget(&repo, &policy, None, true).await.unwrap();
    assert_eq!(
        repo.snapshots().await.unwrap().len(),
        365,
        "a dry run removes nothing"
    );
    assert_eq!(dry[0].verdicts.iter().filter(|v| v.keep).count(), 20);

    forget(&repo, &policy, Some(&template.hostname), false)
        .await
        .unwrap();
    let mut kept: Vec<String> = repo
        .snapshots()
        .await
        .unwrap()
        .iter()
        .map(|(_, s)| s.time[..10].to_owned())
        .collect();
    kept.reverse();
    assert_eq!(
        kept,
        [
            "2026-11-30",
            "2026-11-29",
            "2026-11-28",
            "2026-11-27",
            "2026-11-26",
            "2026-11-25",
            "2026-11-24",
            "2026-11-22",
            "2026-11-15",
            "2026-10-31",
            "2026-09-30",
            "2026-08-31",
            "2026-07-31",
            "2026-06-30",
            "2026-05-31",
            "2026-04-30",
            "2026-03-31",
            "2026-02-28",
            "2026-01-31",
            "2025-12-31",
        ]
    );
    let error = forget(&repo, &KeepPolicy::default(), None, false)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("no keep rule"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_after_forget_shrinks_the_repository_and_kept_snapshots_restore_identically() {
    let Some(server) = RestServer::start_with_login("prune_after_forget") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("data");
    build_mixed_data(&source, 40, 7);
    let backend: SharedBackend = Arc::new(RestBackend::new(server.rest_config()).unwrap());
    let repo = init(backend.clone()).await;
    backup_dir(&repo, &source).await;
    // Replace the incompressible files: the old ones become garbage once their snapshot goes.
    for file in 0..5 {
        std::fs::write(
            source.join(format!("media/blob-{file}.bin")),
            fixtures::Noise::new(100 + file).bytes(3_000_000),
        )
        .unwrap();
    }
    let repo = open(backend.clone()).await;
    let kept = backup_dir(&repo, &source).await;
    let before = data_bytes(&backend).await;

    forget(
        &repo,
        &KeepPolicy {
            last: 1,
            ..Default::default()
        },
        None,
        false,
    )
    .await
    .unwrap();
    let repo = open(backend.clone()).await;
    let plan = plan_prune(&repo).await.unwrap();
    assert!(plan.bytes_freed > 10_000_000, "{plan:?}");
    let report = execute_prune(&repo, plan).await.unwrap();
    let after = data_bytes(&backend).await;
    assert!(after < before - 10_000_000, "{before} -> {after}");
    assert!(report.bytes_freed > 10_000_000);

    let repo = open(backend.clone()).await;
    let checked = check(&repo, ReadData::All).await.unwrap();
    assert!(checked.is_ok(), "{:?}", checked.problems);
    assert!(checked.unindexed_packs.is_empty());
    restore_matches(&repo, &kept, &source).await;
}

/// Fails every write and delete after a number of them, like a prune killed there.
#[derive(Debug)]
struct Crash {
    mutations_left: AtomicUsize,
}

#[async_trait]
impl Hook for Crash {
    async fn before(&self, _: &Mutation) -> BackendResult<()> {
        let left = self.mutations_left.load(Ordering::SeqCst);
        if left == 0 {
            return Err(BackendError::Transport {
                location: "crash".into(),
                message: "killed".into(),
            });
        }
        self.mutations_left.store(left - 1, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_killed_before_and_after_each_write_and_delete_leaves_a_valid_repository() {
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("data");
    build_fidelity_tree(&source);
    let template = work.path().join("template");
    let repo = init(Arc::new(LocalBackend::new(&template))).await;
    backup_dir(&repo, &source).await;
    std::fs::write(
        source.join("dir/large.bin"),
        fixtures::Noise::new(5).bytes(6_000_000),
    )
    .unwrap();
    std::fs::write(source.join("small.txt"), b"changed").unwrap();
    let kept = backup_dir(&open(Arc::new(LocalBackend::new(&template))).await, &source).await;
    forget(
        &repo,
        &KeepPolicy {
            last: 1,
            ..Default::default()
        },
        None,
        false,
    )
    .await
    .unwrap();

    let mut crash_point = 0;
    loop {
        let copy = work.path().join(format!("crash-{crash_point}"));
        copy_dir(&template, &copy);
        let crashing = Arc::new(HookedBackend {
            inner: LocalBackend::new(&copy),
            hook: Crash {
                mutations_left: AtomicUsize::new(crash_point),
            },
        });
        let repo = open(crashing).await;
        let plan = plan_prune(&repo).await.unwrap();
        let finished = execute_prune(&repo, plan).await.is_ok();

        // Whatever step it stopped at, the repository checks clean and restores.
        let repo = open(Arc::new(LocalBackend::new(&copy))).await;
        let checked = check(&repo, ReadData::All).await.unwrap();
        assert!(
            checked.is_ok(),
            "crash after {crash_point} mutations: {:?}",
            checked.problems
        );
        restore_matches(&repo, &kept, &source).await;
        // And a later prune completes the job.
        let plan = plan_prune(&repo).await.unwrap();
        execute_prune(&repo, plan).await.unwrap();
        let repo = open(Arc::new(LocalBackend::new(&copy))).await;
        let after = check(&repo, ReadData::All).await.unwrap();
        assert!(
            after.is_ok(),
            "second prune after a crash at {crash_point}: {:?}",
            after.problems
        );
        assert!(
            after.unindexed_packs.is_empty(),
            "crash at {crash_point}: {:?}",
            after.unindexed_packs
        );
        std::fs::remove_dir_all(&copy).unwrap();
        if finished {
            break;
        }
        crash_point += 1;
    }
    assert!(
        crash_point >= 4,
        "prune did only {crash_point} writes and deletes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_and_backup_never_overlap_and_both_restore_afterwards() {
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("data");
    build_fidelity_tree(&source);
    let backend: SharedBackend = Arc::new(LocalBackend::new(work.path().join("repo")));
    let repo = init(backend.clone()).await;
    backup_dir(&repo, &source).await;

    // A backup in progress holds a shared lock: prune cannot take its exclusive one.
    let backup_lock = neverwiped::locking::acquire(&repo, false, "backup")
        .await
        .unwrap();
    let error = neverwiped::locking::acquire(&repo, true, "prune")
        .await
        .unwrap_err();
    assert!(matches!(error, neverwiped::Error::Locked { .. }), "{error}");
    backup_lock.release().await.unwrap();

    // A prune in progress: a backup waits for nothing and fails clearly (exit code 11).
    let prune_lock = neverwiped::locking::acquire(&repo, true, "prune")
        .await
        .unwrap();
    let error = backup(
        &repo,
        BackupOptions::new(vec![Source::Path(source.clone())]),
    )
    .await
    .unwrap_err();
    assert!(
        error.to_string().contains("exclusive lock of prune"),
        "{error}"
    );
    assert_eq!(error.exit_status().code(), 11);
    prune_lock.release().await.unwrap();

    let latest = backup_dir(&repo, &source).await;
    let plan = plan_prune(&repo).await.unwrap();
    execute_prune(&repo, plan).await.unwrap();
    restore_matches(&open(backend).await, &latest, &source).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_names_each_kind_of_damage() {
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("data");
    build_mixed_data(&source, 40, 3);
    let template = work.path().join("template");
    let repo = init(Arc::new(LocalBackend::new(&template))).await;
    backup_dir(&repo, &source).await;
    assert!(check(&repo, ReadData::All).await.unwrap().is_ok());

    let fresh_copy = |name: &str| {
        let copy = work.path().join(name);
        copy_dir(&template, &copy);
        copy
    };
    let packs: Vec<String> = repo
        .backend()
        .list(ObjectKind::Data)
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.name)
        .collect();
    let pack_path = |root: &Path, name: &str| root.join("data").join(&name[..2]).join(name);
    let data_pack = packs
        .iter()
        .find(|name| std::fs::metadata(pack_path(&template, name)).unwrap().len() > 1_000_000)
        .unwrap()
        .clone();

    // A missing pack.
    let copy = fresh_copy("missing-pack");
    std::fs::remove_file(pack_path(&copy, &data_pack)).unwrap();
    let report = check(
        &open(Arc::new(LocalBackend::new(&copy))).await,
        ReadData::None,
    )
    .await
    .unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains(&data_pack) && p.contains("missing")),
        "{:?}",
        report.problems
    );

    // A truncated pack.
    let copy = fresh_copy("truncated-pack");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(pack_path(&copy, &data_pack))
        .unwrap();
    file.set_len(file.metadata().unwrap().len() - 100).unwrap();
    let report = check(
        &open(Arc::new(LocalBackend::new(&copy))).await,
        ReadData::None,
    )
    .await
    .unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains(&data_pack) && p.contains("truncated")),
        "{:?}",
        report.problems
    );

    // A flipped byte: structure looks fine, reading the data finds it and names the blob.
    let copy = fresh_copy("flipped-byte");
    let path = pack_path(&copy, &data_pack);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[1000] ^= 0x40;
    std::fs::write(&path, bytes).unwrap();
    let repo_copy = open(Arc::new(LocalBackend::new(&copy))).await;
    assert!(check(&repo_copy, ReadData::None).await.unwrap().is_ok());
    let report = check(&repo_copy, ReadData::All).await.unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains(&data_pack) && p.contains("failed authentication")),
        "{:?}",
        report.problems
    );
    let report = check(&repo_copy, ReadData::Subset(100.0)).await.unwrap();
    assert!(!report.is_ok());

    // A missing index entry: the index object is gone, so the snapshot's blobs are unknown.
    let copy = fresh_copy("missing-index");
    for entry in std::fs::read_dir(copy.join("index")).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    let report = check(
        &open(Arc::new(LocalBackend::new(&copy))).await,
        ReadData::None,
    )
    .await
    .unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("tree of / ") && p.contains("missing")),
        "{:?}",
        report.problems
    );
    assert!(!report.unindexed_packs.is_empty());

    // A snapshot pointing to a missing tree.
    let copy = fresh_copy("missing-tree");
    let repo_copy = open(Arc::new(LocalBackend::new(&copy))).await;
    let (_, mut snapshot) = repo_copy.find_snapshot("latest").await.unwrap();
    snapshot.tree = neverwiped::ids::BlobId::from_bytes([0xab; 32]);
    let broken = repo_copy
        .write_object(ObjectKind::Snapshots, &snapshot)
        .await
        .unwrap();
    let report = check(&repo_copy, ReadData::None).await.unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains(&broken.short()) && p.contains(&"ab".repeat(32))),
        "{:?}",
        report.problems
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_password_opens_the_repository_and_the_old_one_no_longer_does() {
    let work = tempfile::tempdir().unwrap();
    let backend: SharedBackend = Arc::new(LocalBackend::new(work.path().join("repo")));
    let repo = init(backend.clone()).await;
    std::fs::write(work.path().join("file"), b"kept across rotations").unwrap();
    let snapshot = backup_dir(&repo, &work.path().join("file")).await;

    let added = keys::add_key(&repo, PASSWORD, b"second password")
        .await
        .unwrap();
    assert_eq!(keys::list_keys(&repo).await.unwrap().len(), 2);
    let second = Repository::open(backend.clone(), b"second password")
        .await
        .unwrap();
    assert_eq!(second.key_id(), added);
    let error = keys::remove_key(&second, &added.to_hex()[..8])
        .await
        .unwrap_err();
    assert!(error.to_string().contains("key in use"), "{error}");

    let rotated = keys::change_password(&second, b"second password", b"third password")
        .await
        .unwrap();
    let error = Repository::open(backend.clone(), b"second password")
        .await
        .unwrap_err();
    assert!(matches!(error, neverwiped::Error::WrongPassword), "{error}");
    let third = Repository::open(backend.clone(), b"third password")
        .await
        .unwrap();
    assert_eq!(third.key_id(), rotated);
    // The first password still has its own key until it is removed.
    keys::remove_key(&third, &repo.key_id().to_hex())
        .await
        .unwrap();
    assert!(matches!(
        Repository::open(backend.clone(), PASSWORD)
            .await
            .unwrap_err(),
        neverwiped::Error::WrongPassword
    ));
    let reopened = third.load_index().await.unwrap();
    let snapshots = reopened.snapshots().await.unwrap();
    assert_eq!(snapshots[0].0, snapshot, "the data never moved");
}
