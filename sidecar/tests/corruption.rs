//! A damaged repository is detected on read and the damaged object is named: every object of a
//! small repository is damaged in turn (one flipped byte, a missing or truncated object), and
//! opening it, loading its index and restoring its latest snapshot must fail with an error that
//! names the object — never succeed silently, never panic.

mod support;

use support::fixtures;

use fixtures::{assert_same_tree, is_root, Noise, PASSWORD, TEST_KDF};
use neverwiped::archive::{backup, BackupOptions, Source};
use neverwiped::backend::local::LocalBackend;
use neverwiped::backend::{ObjectKind, SharedBackend};
use neverwiped::format::key::KeyFile;
use neverwiped::ids::{BlobId, ObjectId, PackId};
use neverwiped::index::BlobLocation;
use neverwiped::maintenance::check::{check, ReadData};
use neverwiped::maintenance::prune::plan_prune;
use neverwiped::repository::{IndexedRepository, Repository};
use neverwiped::restore::{restore, RestoreOptions};
use neverwiped::Error;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tempfile::TempDir;

/// A small repository after one backup, and the tree it holds.
struct Fixture {
    _work: TempDir,
    source: PathBuf,
    repo: PathBuf,
}

impl Fixture {
    /// Files of several chunks, small files, a subfolder: at least one data pack and one tree pack.
    async fn new() -> Fixture {
        let work = tempfile::tempdir().unwrap();
        let source = work.path().join("source");
        fs::create_dir_all(source.join("sub/deeper")).unwrap();
        let mut noise = Noise::new(17);
        fs::write(source.join("random.bin"), noise.bytes(3 * 1024 * 1024 + 5)).unwrap();
        let log: String = (0..20_000)
            .map(|i| format!("line {i} value {}\n", noise.next() % 1000))
            .collect();
        fs::write(source.join("sub/app.log"), log).unwrap();
        fs::write(source.join("small.txt"), b"hello\n").unwrap();
        fs::write(source.join("sub/deeper/leaf.txt"), b"leaf\n").unwrap();
        fs::write(source.join("empty"), b"").unwrap();

        let repo = work.path().join("repo");
        let indexed = Repository::init(backend(&repo), PASSWORD, TEST_KDF)
            .await
            .unwrap()
            .load_index()
            .await
            .unwrap();
        let report = backup(
            &indexed,
            BackupOptions::new(vec![Source::Path(source.clone())]),
        )
        .await
        .unwrap();
        assert!(report.warnings.is_empty(), "{:?}", report.warnings);
        let fixture = Fixture {
            _work: work,
            source,
            repo,
        };
        // The undamaged repository restores: every failure below comes from the damage.
        attempt(&fixture.repo)
            .await
            .expect_restored(&fixture.source);
        fixture
    }

    /// Every stored object (temporary files and locks left out), by kind: `config`, `keys`, ...
    fn objects(&self) -> BTreeMap<&'static str, Vec<PathBuf>> {
        let mut out: BTreeMap<&'static str, Vec<PathBuf>> = BTreeMap::new();
        for (path, _) in fixtures::repository_objects(&self.repo) {
            let relative = path
                .strip_prefix(&self.repo)
                .unwrap()
                .to_str()
                .unwrap()
                .to_owned();
            let kind = match relative.split('/').next().unwrap() {
                "config" => "config",
                "keys" => "keys",
                "index" => "index",
                "snapshots" => "snapshots",
                "data" => "data",
                "locks" => continue,
                other => panic!("unexpected object {other} in the repository"),
            };
            if !path.file_name().unwrap().to_string_lossy().starts_with('.') {
                out.entry(kind).or_default().push(path);
            }
        }
        out
    }

    /// The path of a pack.
    fn pack_path(&self, pack: &PackId) -> PathBuf {
        let name = pack.to_hex();
        self.repo.join("data").join(&name[..2]).join(name)
    }

    /// Every blob of the index, grouped by pack.
    async fn blobs_by_pack(&self) -> BTreeMap<PackId, Vec<(BlobId, BlobLocation)>> {
        let repo = open_indexed(&self.repo).await.unwrap();
        let index = repo.index();
        let mut out: BTreeMap<PackId, Vec<(BlobId, BlobLocation)>> = BTreeMap::new();
        for id in index.blob_ids() {
            let location = index.get(&id).unwrap();
            out.entry(location.pack).or_default().push((id, location));
        }
        for blobs in out.values_mut() {
            blobs.sort_by_key(|(_, location)| location.offset);
        }
        out
    }
}

fn backend(repo: &Path) -> SharedBackend {
    Arc::new(LocalBackend::new(repo))
}

async fn open_indexed(repo: &Path) -> Result<IndexedRepository, Error> {
    Repository::open(backend(repo), PASSWORD)
        .await?
        .load_index()
        .await
}

/// What opening a repository and restoring its latest snapshot came to.
enum Attempt {
    Restored(TempDir),
    Failed(Error),
    Panicked(String),
}

impl Attempt {
    #[track_caller]
    fn expect_restored(self, source: &Path) {
        match self {
            Attempt::Restored(target) => assert_same_tree(
                source,
                &target.path().join(source.strip_prefix("/").unwrap()),
                is_root(),
            ),
            Attempt::Failed(error) => panic!("the restore failed: {error}"),
            Attempt::Panicked(message) => panic!("the restore panicked: {message}"),
        }
    }

    /// The error, or why there is none.
    fn error(self) -> Result<Error, String> {
        match self {
            Attempt::Failed(error) => Ok(error),
            Attempt::Restored(_) => Err("the restore succeeded: the damage went unnoticed".into()),
            Attempt::Panicked(message) => Err(format!("the engine panicked: {message}")),
        }
    }
}

/// Opens the repository with the password, loads the index and restores the latest snapshot into
/// a new folder. A panic (also one inside a blocking task of the engine) is caught and returned.
async fn attempt(repo: &Path) -> Attempt {
    let repo = repo.to_path_buf();
    let target = tempfile::tempdir().unwrap();
    let into = target.path().to_path_buf();
    let task = tokio::spawn(async move {
        let indexed = open_indexed(&repo).await?;
        let (_, snapshot) = indexed.find_snapshot("latest").await?;
        restore(&indexed, snapshot.tree, &RestoreOptions::new(into)).await
    });
    match task.await {
        Ok(Ok(_)) => Attempt::Restored(target),
        Ok(Err(Error::Interrupted(message))) => {
            Attempt::Panicked(format!("a task of the engine failed: {message}"))
        }
        Ok(Err(error)) => Attempt::Failed(error),
        Err(join_error) => Attempt::Panicked(join_error.to_string()),
    }
}

/// Runs `attempt` with `path` replaced by `damaged`, then puts the original bytes back.
async fn attempt_with(repo: &Path, path: &Path, damaged: &[u8]) -> Attempt {
    let original = fs::read(path).unwrap();
    fs::write(path, damaged).unwrap();
    let outcome = attempt(repo).await;
    fs::write(path, original).unwrap();
    outcome
}

fn flipped(bytes: &[u8], at: usize) -> Vec<u8> {
    let mut out = bytes.to_vec();
    out[at] ^= 0x01;
    out
}

fn name_of(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

/// Checks that a damaged repository fails naming `name`; returns what was wrong instead.
fn check_named(outcome: Attempt, name: &str, damage: &str) -> Result<(), String> {
    let error = outcome.error().map_err(|why| format!("{damage}: {why}"))?;
    let message = error.to_string();
    if !message.contains(name) {
        return Err(format!(
            "{damage}: the error does not name {name}: {message}"
        ));
    }
    Ok(())
}

#[track_caller]
fn assert_no_problems(problems: &[String], checked: usize) {
    assert!(checked > 0, "nothing was checked");
    assert!(
        problems.is_empty(),
        "{} of {checked} damages were not reported properly:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// One flipped byte in each object
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_flipped_byte_of_the_config_is_detected_and_names_the_config() {
    let fixture = Fixture::new().await;
    let config = fixture.repo.join("config");
    let bytes = fs::read(&config).unwrap();
    let mut problems = Vec::new();
    for at in 0..bytes.len() {
        let outcome = attempt_with(&fixture.repo, &config, &flipped(&bytes, at)).await;
        let damage = format!("config byte {at} ({:?})", bytes[at] as char);
        problems.extend(check_named(outcome, "the config object", &damage).err());
    }
    assert_no_problems(&problems, bytes.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_flipped_byte_of_a_key_is_detected_and_never_opens_the_repository() {
    let fixture = Fixture::new().await;
    let keys = &fixture.objects()["keys"];
    assert_eq!(keys.len(), 1);
    let mut problems = Vec::new();
    let mut checked = 0;
    for key in keys {
        let name = name_of(key);
        let bytes = fs::read(key).unwrap();
        for at in 0..bytes.len() {
            checked += 1;
            let damage = format!("key {name} byte {at}");
            // A damaged key cannot be told from a wrong password; either is fine, a success is not.
            match attempt_with(&fixture.repo, key, &flipped(&bytes, at))
                .await
                .error()
            {
                Ok(Error::WrongPassword) => {}
                Ok(error) if error.to_string().contains(&name) => {}
                Ok(error) => problems.push(format!(
                    "{damage}: the error does not name the key: {error}"
                )),
                Err(why) => problems.push(format!("{damage}: {why}")),
            }
        }
    }
    assert_no_problems(&problems, checked);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_flipped_byte_of_an_index_or_snapshot_object_is_detected_and_names_it() {
    let fixture = Fixture::new().await;
    let objects = fixture.objects();
    let mut problems = Vec::new();
    let mut checked = 0;
    for kind in ["index", "snapshots"] {
        assert!(!objects[kind].is_empty(), "no {kind} object");
        for object in &objects[kind] {
            let name = name_of(object);
            let bytes = fs::read(object).unwrap();
            for at in 0..bytes.len() {
                checked += 1;
                let outcome = attempt_with(&fixture.repo, object, &flipped(&bytes, at)).await;
                problems
                    .extend(check_named(outcome, &name, &format!("{kind}/{name} byte {at}")).err());
            }
        }
    }
    assert_no_problems(&problems, checked);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_byte_in_any_blob_of_any_pack_is_detected_and_names_the_pack() {
    let fixture = Fixture::new().await;
    let packs = fixture.blobs_by_pack().await;
    assert_eq!(
        packs.len(),
        fixture.objects()["data"].len(),
        "every pack is indexed"
    );
    assert!(packs.len() >= 2, "a data pack and a tree pack");
    let mut problems = Vec::new();
    let mut checked = 0;
    for (pack, blobs) in &packs {
        let path = fixture.pack_path(pack);
        let bytes = fs::read(&path).unwrap();
        for (blob, location) in blobs {
            let (start, length) = (location.offset as usize, location.length as usize);
            // The nonce, the middle of the ciphertext, the last byte of the tag.
            for at in [start, start + length / 2, start + length - 1] {
                checked += 1;
                let damage = format!("pack {pack} byte {at} ({:?} blob {blob})", location.kind);
                let outcome = attempt_with(&fixture.repo, &path, &flipped(&bytes, at)).await;
                problems.extend(check_named(outcome, &pack.to_hex(), &damage).err());
            }
        }
    }
    assert_no_problems(&problems, checked);
}

// ---------------------------------------------------------------------------------------------
// Missing and truncated objects
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_pack_fails_the_restore_naming_the_pack() {
    let fixture = Fixture::new().await;
    let mut problems = Vec::new();
    let packs = fixture.objects()["data"].clone();
    for pack in &packs {
        let name = name_of(pack);
        let original = fs::read(pack).unwrap();
        fs::remove_file(pack).unwrap();
        let outcome = attempt(&fixture.repo).await;
        fs::write(pack, original).unwrap();
        problems.extend(check_named(outcome, &name, &format!("pack {name} removed")).err());
    }
    assert_no_problems(&problems, packs.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_index_object_makes_the_blobs_unknown_and_the_restore_names_a_missing_blob() {
    let fixture = Fixture::new().await;
    let tree = {
        let repo = open_indexed(&fixture.repo).await.unwrap();
        repo.find_snapshot("latest").await.unwrap().1.tree
    };
    for index in &fixture.objects()["index"] {
        fs::remove_file(index).unwrap();
    }
    match attempt(&fixture.repo).await.error() {
        Ok(Error::BlobMissing { id, context }) => {
            assert_eq!(id, tree, "the root tree is the first blob a restore needs");
            let message = Error::BlobMissing { id, context }.to_string();
            assert!(
                message.contains(&tree.to_hex()) && message.contains("not in the index"),
                "{message}"
            );
        }
        Ok(other) => panic!("expected BlobMissing, got: {other}"),
        Err(why) => panic!("{why}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_pack_fails_the_restore_naming_the_pack() {
    let fixture = Fixture::new().await;
    let packs = fixture.blobs_by_pack().await;
    let mut problems = Vec::new();
    let mut checked = 0;
    for (pack, blobs) in &packs {
        let path = fixture.pack_path(pack);
        let bytes = fs::read(&path).unwrap();
        let blobs_end = blobs
            .iter()
            .map(|(_, l)| (l.offset + l.length) as usize)
            .max()
            .unwrap();
        // Cut inside the last blob, in the middle of the blobs, and to nothing at all.
        for keep in [blobs_end - 1, blobs_end / 2, 0] {
            checked += 1;
            let outcome = attempt_with(&fixture.repo, &path, &bytes[..keep]).await;
            problems.extend(
                check_named(
                    outcome,
                    &pack.to_hex(),
                    &format!("pack {pack} cut to {keep} bytes"),
                )
                .err(),
            );
        }
    }
    assert_no_problems(&problems, checked);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_snapshot_object_is_not_restored_as_another() {
    let fixture = Fixture::new().await;
    for snapshot in &fixture.objects()["snapshots"] {
        fs::remove_file(snapshot).unwrap();
    }
    match attempt(&fixture.repo).await.error() {
        Ok(Error::SnapshotNotFound(spec)) => assert_eq!(spec, "latest"),
        Ok(other) => panic!("expected SnapshotNotFound, got: {other}"),
        Err(why) => panic!("{why}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repository_without_keys_says_so() {
    let fixture = Fixture::new().await;
    for key in &fixture.objects()["keys"] {
        fs::remove_file(key).unwrap();
    }
    match attempt(&fixture.repo).await.error() {
        Ok(Error::NoKeys) => {}
        Ok(other) => panic!("expected NoKeys, got: {other}"),
        Err(why) => panic!("{why}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Passwords and keys
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_told_apart_from_damage() {
    let fixture = Fixture::new().await;
    let error = Repository::open(backend(&fixture.repo), b"not the password")
        .await
        .unwrap_err();
    assert!(matches!(error, Error::WrongPassword), "{error}");
    assert!(error.to_string().contains("wrong password"), "{error}");
    assert_eq!(
        error.exit_status(),
        neverwiped_contract::ExitStatus::WrongPassword
    );
}

/// Adds a key object wrapping the repository's master key under `password`; returns its id.
fn add_key(fixture: &Fixture, password: &[u8]) -> ObjectId {
    let first_key = &fixture.objects()["keys"][0];
    let stored = fs::read(first_key).unwrap();
    let master = KeyFile::parse(&stored, "the first key")
        .unwrap()
        .unwrap_master(PASSWORD, "the first key")
        .unwrap();
    let key = KeyFile::wrap(&master, password, TEST_KDF)
        .unwrap()
        .to_bytes();
    let id = ObjectId::of_bytes(&key);
    fs::write(fixture.repo.join("keys").join(id.to_hex()), &key).unwrap();
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_key_wrapping_the_same_master_key_opens_the_repository_too() {
    let fixture = Fixture::new().await;
    let first_key = fixture.objects()["keys"][0].clone();
    let second_id = add_key(&fixture, b"the second password");

    let by_first = Repository::open(backend(&fixture.repo), PASSWORD)
        .await
        .unwrap();
    let by_second = Repository::open(backend(&fixture.repo), b"the second password")
        .await
        .unwrap();
    assert_eq!(by_second.key_id(), second_id, "the second key opened it");
    assert_eq!(by_first.key_id().to_hex(), name_of(&first_key));
    assert_eq!(
        by_first.params(),
        by_second.params(),
        "one repository, one master key"
    );

    let indexed = by_second.load_index().await.unwrap();
    let (_, snapshot) = indexed.find_snapshot("latest").await.unwrap();
    let target = tempfile::tempdir().unwrap();
    restore(&indexed, snapshot.tree, &RestoreOptions::new(target.path()))
        .await
        .unwrap();
    assert_same_tree(
        &fixture.source,
        &target
            .path()
            .join(fixture.source.strip_prefix("/").unwrap()),
        is_root(),
    );

    // With two keys, a password of neither is still a wrong password.
    let error = Repository::open(backend(&fixture.repo), b"a third password")
        .await
        .unwrap_err();
    assert!(matches!(error, Error::WrongPassword), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_config_is_named_and_not_taken_for_a_wrong_password_when_there_are_several_keys()
{
    let fixture = Fixture::new().await;
    add_key(&fixture, b"the password of another admin");
    let config = fixture.repo.join("config");
    let bytes = fs::read(&config).unwrap();
    let mut problems = Vec::new();
    for at in 0..bytes.len() {
        let outcome = attempt_with(&fixture.repo, &config, &flipped(&bytes, at)).await;
        let damage = format!("config byte {at} ({:?})", bytes[at] as char);
        problems.extend(check_named(outcome, "the config object", &damage).err());
    }
    assert_no_problems(&problems, bytes.len());
}

// ---------------------------------------------------------------------------------------------
// Another tool's repository
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repository_of_another_tool_fails_fast_as_not_a_neverwiped_repository() {
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("restic");
    // restic's layout, but neither its keys nor the rest: the config alone must be enough to stop.
    fs::create_dir_all(&repo).unwrap();
    fs::write(
        repo.join("config"),
        br#"{"version":2,"id":"5bcd4a23c1d2c5d1e4f5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091","chunker_polynomial":"3da3358b4dc173"}"#,
    )
    .unwrap();
    let error = Repository::open(backend(&repo), PASSWORD)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("not a neverwiped repository"),
        "{error}"
    );

    // A neverwiped repository of a newer format version is refused by version, not misread.
    let fixture = Fixture::new().await;
    let config = fixture.repo.join("config");
    let newer = fs::read_to_string(&config)
        .unwrap()
        .replace("\"version\": 1", "\"version\": 2");
    fs::write(&config, newer).unwrap();
    let error = Repository::open(backend(&fixture.repo), PASSWORD)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("version 2 is not supported"),
        "{error}"
    );
}

// ---------------------------------------------------------------------------------------------
// One bad object beside good ones (junk posted with append-only credentials, a torn object)
// ---------------------------------------------------------------------------------------------

/// Stores `bytes` as an object of `kind`, named by their SHA-256 as a REST server requires.
async fn post_junk(repo: &Path, kind: ObjectKind, bytes: &[u8]) -> String {
    let name = hex::encode(Sha256::digest(bytes));
    backend(repo)
        .write(kind, &name, bytes::Bytes::copy_from_slice(bytes))
        .await
        .unwrap();
    name
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junk_index_snapshot_and_lock_objects_are_skipped_and_backup_and_restore_go_on() {
    let fixture = Fixture::new().await;
    let junk_index = post_junk(&fixture.repo, ObjectKind::Index, b"not an index").await;
    let junk_snapshot = post_junk(&fixture.repo, ObjectKind::Snapshots, b"{\"time\":1}").await;
    let junk_lock = post_junk(&fixture.repo, ObjectKind::Locks, b"\x00\x01 torn lock").await;

    // The latest (readable) snapshot restores identically; a backup takes its lock and goes on.
    attempt(&fixture.repo)
        .await
        .expect_restored(&fixture.source);
    let repo = open_indexed(&fixture.repo).await.unwrap();
    let report = backup(
        &repo,
        BackupOptions::new(vec![Source::Path(fixture.source.clone())]),
    )
    .await
    .expect("a backup beside junk objects");
    let listed: Vec<_> = repo.snapshots().await.unwrap();
    assert_eq!(listed.len(), 2, "both real snapshots, not the junk");
    assert!(listed.iter().any(|(id, _)| *id == report.snapshot_id));

    // The damage is named where it must be dealt with.
    let damaged: Vec<String> = repo
        .damaged_objects()
        .await
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        damaged.contains(&format!("index/{junk_index}")),
        "{damaged:?}"
    );
    assert!(
        damaged.contains(&format!("snapshots/{junk_snapshot}")),
        "{damaged:?}"
    );
    let checked = check(&repo, ReadData::All).await.unwrap();
    let problems = checked.problems.join("\n");
    assert!(problems.contains(&junk_index), "{problems}");
    assert!(problems.contains(&junk_snapshot), "{problems}");
    let refused = plan_prune(&repo).await.unwrap_err().to_string();
    assert!(refused.contains(&junk_index), "{refused}");
    assert!(refused.contains(&junk_snapshot), "{refused}");
    assert!(
        refused.contains("delete it"),
        "says how to deal with it: {refused}"
    );
    assert!(
        fixture.repo.join("locks").join(&junk_lock).exists(),
        "the junk lock was skipped, not judged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_never_reuses_data_that_only_a_damaged_index_vouches_for() {
    let fixture = Fixture::new().await;
    let index = fixture.objects()["index"][0].clone();
    let bytes = fs::read(&index).unwrap();
    fs::write(&index, flipped(&bytes, bytes.len() / 2)).unwrap();

    let repo = open_indexed(&fixture.repo).await.unwrap();
    assert_eq!(
        repo.index().skipped.len(),
        1,
        "the damaged index is skipped"
    );
    let report = backup(
        &repo,
        BackupOptions::new(vec![Source::Path(fixture.source.clone())]),
    )
    .await
    .unwrap();
    assert!(
        report.snapshot.summary.bytes_added > 3 * 1024 * 1024,
        "the data is stored again: {} bytes added",
        report.snapshot.summary.bytes_added
    );
    // The new snapshot needs nothing from the damaged index: it restores identically.
    attempt(&fixture.repo)
        .await
        .expect_restored(&fixture.source);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_asking_for_an_absurd_kdf_cost_is_skipped_and_the_good_key_opens() {
    let fixture = Fixture::new().await;
    let good = fs::read(&fixture.objects()["keys"][0]).unwrap();
    let mut key: serde_json::Value = serde_json::from_slice(&good).unwrap();
    key["kdf"]["memoryKib"] = serde_json::json!(64u64 * 1024 * 1024);
    key["kdf"]["iterations"] = serde_json::json!(4_000_000u64);
    let absurd = serde_json::to_vec(&key).unwrap();
    let error = KeyFile::parse(&absurd, "the absurd key").unwrap_err();
    assert!(error.to_string().contains("above the limit"), "{error}");
    post_junk(&fixture.repo, ObjectKind::Keys, &absurd).await;

    let started = std::time::Instant::now();
    Repository::open(backend(&fixture.repo), PASSWORD)
        .await
        .expect("the good key opens the repository");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}
