//! Backup and restore through the engine, against a local folder and real restic REST servers,
//! compared file by file (SHA-256) and by metadata.

mod support;

use support::fixtures;

use fixtures::{
    assert_same_tree, build_fidelity_tree, build_mixed_data, init_repository as init, is_root,
    open_repository as reopen,
};
use neverwiped::archive::{backup, BackupOptions, BackupReport, Source};
use neverwiped::backend::local::LocalBackend;
use neverwiped::backend::rest::RestBackend;
use neverwiped::backend::{BackendResult, ObjectKind, SharedBackend};
use neverwiped::filter::{PathFilter, PatternList};
use neverwiped::repository::IndexedRepository;
use neverwiped::restore::{restore, RestoreOptions};
use std::path::Path;
use std::sync::Arc;
use support::hooked_backend::{Hook, HookedBackend, Mutation};
use support::{RcloneServer, RcloneServerOptions, RestServer, RestServerOptions};

async fn backup_paths(repo: &IndexedRepository, paths: &[&Path]) -> BackupReport {
    let sources = paths
        .iter()
        .map(|p| Source::Path(p.to_path_buf()))
        .collect();
    backup(repo, BackupOptions::new(sources)).await.unwrap()
}

/// Restores the latest snapshot and checks it against `source`.
async fn restore_and_compare(repo: &IndexedRepository, source: &Path) {
    let target = tempfile::tempdir().unwrap();
    let (_, snapshot) = repo.find_snapshot("latest").await.unwrap();
    let report = restore(repo, snapshot.tree, &RestoreOptions::new(target.path()))
        .await
        .unwrap();
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    // Restored below the target by its absolute path, as restic does.
    let restored = target.path().join(source.strip_prefix("/").unwrap());
    assert_same_tree(source, &restored, is_root());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_entry_restores_identically_from_a_local_repository() {
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    build_fidelity_tree(&source);
    let repo = init(Arc::new(LocalBackend::new(work.path().join("repo")))).await;
    let report = backup_paths(&repo, &[&source]).await;
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    assert!(report.snapshot.summary.files >= 14);
    restore_and_compare(&repo, &source).await;

    // Holes stay holes: the 64 MiB sparse file holds one block of data.
    let target = tempfile::tempdir().unwrap();
    restore(
        &repo,
        report.snapshot.tree,
        &RestoreOptions::new(target.path()),
    )
    .await
    .unwrap();
    let sparse = target
        .path()
        .join(source.strip_prefix("/").unwrap())
        .join("sparse.img");
    assert!(
        fixtures::allocated_bytes(&sparse) <= 64 * 1024,
        "{} bytes allocated",
        fixtures::allocated_bytes(&sparse)
    );
}

/// A restore into a folder that holds an earlier, since tampered, restore: files replaced by
/// symlinks to elsewhere, by a hard link to an outside file, or by a fifo are replaced in turn,
/// never written through, and what lies outside stays untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restoring_over_a_tampered_earlier_restore_replaces_entries_and_writes_nothing_outside() {
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    build_fidelity_tree(&source);
    let repo = init(Arc::new(LocalBackend::new(work.path().join("repo")))).await;
    let report = backup_paths(&repo, &[&source]).await;
    let target = work.path().join("target");
    let options = RestoreOptions::new(&target);
    restore(&repo, report.snapshot.tree, &options)
        .await
        .unwrap();
    let restored = target.join(source.strip_prefix("/").unwrap());

    let outside = work.path().join("outside.txt");
    std::fs::write(&outside, b"must stay as it is").unwrap();
    let small = restored.join("small.txt");
    std::fs::remove_file(&small).unwrap();
    std::os::unix::fs::symlink(&outside, &small).unwrap();
    let empty = restored.join("empty.txt");
    std::fs::remove_file(&empty).unwrap();
    std::fs::hard_link(&outside, &empty).unwrap();
    let sparse = restored.join("sparse.img");
    std::fs::remove_file(&sparse).unwrap();
    nix::unistd::mkfifo(&sparse, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();

    restore(&repo, report.snapshot.tree, &options)
        .await
        .unwrap();
    assert_same_tree(&source, &restored, is_root());
    assert_eq!(std::fs::read(&outside).unwrap(), b"must stay as it is");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_data_through_rest_server_with_auth_restores_and_deduplicates() {
    let Some(server) = RestServer::start_with_login("mixed_data_through_rest_server") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("data");
    build_mixed_data(&source, 230, 1);
    let backend: SharedBackend = Arc::new(RestBackend::new(server.rest_config()).unwrap());
    let repo = init(backend.clone()).await;
    let first = backup_paths(&repo, &[&source]).await;
    assert!(
        first.snapshot.summary.bytes_read > 180_000_000,
        "{:?}",
        first.snapshot.summary
    );
    assert!(
        first.snapshot.summary.bytes_added < first.snapshot.summary.bytes_read,
        "logs and JSON compress"
    );

    // Nothing changed: no file is read again and almost nothing is added.
    let repo = reopen(backend.clone()).await;
    let second = backup_paths(&repo, &[&source]).await;
    assert_eq!(second.snapshot.summary.files_read, 0);
    assert!(
        second.snapshot.summary.bytes_added < 64 * 1024,
        "{:?}",
        second.snapshot.summary
    );
    assert_eq!(second.snapshot.parent, Some(first.snapshot_id));

    // 1 MiB changed in the middle of a 16 MiB file: about one new chunk.
    let changed = source.join("media/blob-2.bin");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&changed)
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &vec![0x5a; 1024 * 1024], 8 * 1024 * 1024)
        .unwrap();
    drop(file);
    let repo = reopen(backend.clone()).await;
    let third = backup_paths(&repo, &[&source]).await;
    assert_eq!(third.snapshot.summary.files_read, 1);
    let max_chunk = repo.params().chunker.max_bytes as u64;
    assert!(
        third.snapshot.summary.bytes_added <= 2 * max_chunk,
        "{:?}",
        third.snapshot.summary
    );
    assert!(
        third.snapshot.summary.bytes_added >= 1024 * 1024 / 2,
        "the change itself is stored"
    );

    restore_and_compare(&reopen(backend).await, &source).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_only_rest_server_takes_backups_and_restores_them() {
    let options = RestServerOptions {
        auth: true,
        append_only: true,
        ..Default::default()
    };
    let Some(server) = RestServer::start("append_only_rest_server", options) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    build_fidelity_tree(&source);
    let backend: SharedBackend = Arc::new(RestBackend::new(server.rest_config()).unwrap());
    let repo = init(backend.clone()).await;
    backup_paths(&repo, &[&source]).await;
    backup_paths(&reopen(backend.clone()).await, &[&source]).await;
    // The locks were released (deleting locks is allowed in append-only mode).
    assert!(repo
        .list_ids(neverwiped::backend::ObjectKind::Locks)
        .await
        .unwrap()
        .is_empty());
    restore_and_compare(&reopen(backend).await, &source).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rclone_serve_restic_with_auth_and_append_only_round_trips() {
    let Some(server) = RcloneServer::start(
        "rclone_round_trip",
        RcloneServerOptions {
            auth: true,
            append_only: true,
        },
    ) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    build_fidelity_tree(&source);
    build_mixed_data(&source.join("mixed"), 20, 2);
    let backend: SharedBackend = Arc::new(RestBackend::new(server.rest_config()).unwrap());
    let repo = init(backend.clone()).await;
    backup_paths(&repo, &[&source]).await;
    restore_and_compare(&reopen(backend).await, &source).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_plaintext_of_the_data_or_names_appears_in_the_repository() {
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    std::fs::create_dir_all(&source).unwrap();
    let marker = "NEVERWIPED-PLAINTEXT-MARKER";
    std::fs::write(
        source.join(format!("{marker}-name.txt")),
        format!("{marker}\n").repeat(50_000),
    )
    .unwrap();
    std::fs::write(source.join("short.txt"), marker).unwrap();
    let repo_dir = work.path().join("repo");
    let repo = init(Arc::new(LocalBackend::new(&repo_dir))).await;
    backup_paths(&repo, &[&source]).await;
    let objects = fixtures::repository_objects(&repo_dir);
    assert!(objects.len() >= 5);
    for (path, bytes) in objects {
        let found = bytes.windows(marker.len()).any(|w| w == marker.as_bytes());
        assert!(!found, "{} holds plaintext", path.display());
        let found_name = bytes.windows(9).any(|w| w == b"short.txt");
        assert!(!found_name, "{} holds a file name", path.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sources_and_an_include_restore_only_what_was_asked() {
    let work = tempfile::tempdir().unwrap();
    let (a, b) = (work.path().join("a"), work.path().join("b"));
    build_fidelity_tree(&a);
    std::fs::create_dir_all(b.join("keep")).unwrap();
    std::fs::write(b.join("keep/file"), b"kept").unwrap();
    std::fs::write(b.join("other"), b"left out").unwrap();
    let repo = init(Arc::new(LocalBackend::new(work.path().join("repo")))).await;
    let report = backup_paths(&repo, &[&a, &b]).await;
    assert_eq!(report.snapshot.paths.len(), 2);

    let target = tempfile::tempdir().unwrap();
    let mut options = RestoreOptions::new(target.path());
    let include = b.join("keep");
    options.filter = PathFilter::including(vec![PatternList::paths(&[include
        .into_os_string()
        .into_encoded_bytes()])]);
    restore(&repo, report.snapshot.tree, &options)
        .await
        .unwrap();
    let restored_b = target.path().join(b.strip_prefix("/").unwrap());
    assert_eq!(
        std::fs::read(restored_b.join("keep/file")).unwrap(),
        b"kept"
    );
    assert!(!restored_b.join("other").exists());
    assert!(!target.path().join(a.strip_prefix("/").unwrap()).exists());

    options.filter = PathFilter::including(vec![PatternList::paths(&[b"/not/in/the/snapshot"])]);
    let error = restore(&repo, report.snapshot.tree, &options)
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("/not/in/the/snapshot is not in the snapshot"),
        "{error}"
    );
}

/// Issue 20 item 8: one damaged pack costs only the files whose content it holds. Everything else
/// is restored identically (SHA-256 and metadata), every entry (the FIFO too) gets its metadata,
/// and the error names the damaged file and byte range.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_pack_costs_only_its_files_and_names_them_with_their_byte_ranges() {
    use neverwiped::error::Error;
    use neverwiped::ids::BlobKind;
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    build_fidelity_tree(&source);
    let repo_dir = work.path().join("repo");
    let repo = init(Arc::new(LocalBackend::new(&repo_dir))).await;
    let report = backup_paths(&repo, &[&source]).await;

    // A data blob of dir/large.bin, the only file big enough to span several blobs.
    let large = source.join("dir/large.bin");
    let large_path = large
        .strip_prefix("/")
        .unwrap()
        .as_os_str()
        .as_encoded_bytes();
    let plan =
        neverwiped::restore::plan_restore(&repo, report.snapshot.tree, &PathFilter::Everything)
            .await
            .unwrap();
    let large_entry = plan
        .entries
        .iter()
        .position(|entry| entry.path == large_path)
        .unwrap();
    let (pack, blob) = plan
        .packs
        .iter()
        .flat_map(|(pack, blobs)| blobs.iter().map(move |blob| (pack, blob)))
        .find(|(_, blob)| {
            blob.location.kind == BlobKind::Data
                && blob.targets.iter().any(|t| t.entry == large_entry)
                && blob.targets.len() == 1
        })
        .expect("a blob of large.bin");
    let damaged_range = (
        blob.targets[0].offset,
        blob.targets[0].offset + u64::from(blob.location.raw_length),
    );
    let pack_hex = pack.to_hex();
    let pack_file = repo_dir.join("data").join(&pack_hex[..2]).join(&pack_hex);
    let mut stored = std::fs::read(&pack_file).unwrap();
    stored[blob.location.offset as usize + blob.location.length as usize / 2] ^= 0x40;
    std::fs::write(&pack_file, &stored).unwrap();

    let target = work.path().join("target");
    let error = restore(
        &reopen(Arc::new(LocalBackend::new(&repo_dir))).await,
        report.snapshot.tree,
        &RestoreOptions::new(&target),
    )
    .await
    .expect_err("a restore with damaged content must not succeed");
    let message = error.to_string();
    let Error::RestoreIncomplete { damaged } = error else {
        panic!("not an incomplete restore: {message}");
    };
    let expected_name = format!("/{}", large.strip_prefix("/").unwrap().display());
    assert_eq!(damaged.len(), 1, "{message}");
    let damaged = &damaged[0];
    assert_eq!(damaged.path, expected_name);
    assert_eq!(
        damaged
            .ranges
            .iter()
            .map(|r| (r.start, r.end))
            .collect::<Vec<_>>(),
        vec![damaged_range]
    );
    let named = format!(
        "{expected_name} (bytes {}-{}",
        damaged_range.0,
        damaged_range.1 - 1
    );
    assert!(message.contains(&named), "{message}");

    // Everything else is identical; the damaged file has its metadata, its size, and every byte
    // outside the damaged range.
    let restored = target.join(source.strip_prefix("/").unwrap());
    let mut expected = fixtures::facts(&source);
    let mut actual = fixtures::facts(&restored);
    let damaged_key = b"dir/large.bin".to_vec();
    expected.get_mut(&damaged_key).unwrap().sha256 = None;
    actual.get_mut(&damaged_key).unwrap().sha256 = None;
    assert_eq!(expected, actual);
    let original = std::fs::read(&large).unwrap();
    let partial = std::fs::read(restored.join("dir/large.bin")).unwrap();
    let (start, end) = (damaged_range.0 as usize, damaged_range.1 as usize);
    assert_eq!(original[..start], partial[..start]);
    assert_eq!(original[end..], partial[end..]);
    assert!(partial[start..end].iter().all(|&b| b == 0));
    let fifo = expected
        .iter()
        .find(|(_, facts)| facts.kind == "fifo")
        .expect("the tree has a FIFO");
    assert_ne!(
        fifo.1.mode, 0o600,
        "the fixture's FIFO must not have the creation mode"
    );
}

/// Issue 13 item 4: a restore pod is root without CAP_MKNOD and CAP_FSETID. Device files are then
/// skipped and set-group-ID bits cannot hold: each is a warning naming the file, and everything
/// else is restored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_without_mknod_and_fsetid_warns_naming_each_device_and_setgid_file() {
    let setpriv = Path::new("/usr/bin/setpriv").exists();
    if !neverwiped_testkit::require_that(
        is_root(),
        "dropping capabilities from root needs root",
        "run the tests as root (scripts/test.sh does)",
    ) || !neverwiped_testkit::require_that(
        setpriv,
        "/usr/bin/setpriv is missing",
        "install Debian's util-linux",
    ) {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    std::fs::create_dir_all(source.join("shared")).unwrap();
    std::fs::write(source.join("plain.txt"), b"plain").unwrap();
    let setgid = source.join("shared/tool");
    std::fs::write(&setgid, b"#!/bin/sh\n").unwrap();
    let foreign_group = Some(nix::unistd::Gid::from_raw(4321));
    nix::unistd::chown(&setgid, None, foreign_group).unwrap();
    std::fs::set_permissions(&setgid, std::fs::Permissions::from_mode(0o2755)).unwrap();
    let device = source.join("null");
    nix::sys::stat::mknod(
        &device,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(1, 3),
    )
    .unwrap();
    let repo_dir = work.path().join("repo");
    let repo = init(Arc::new(LocalBackend::new(&repo_dir))).await;
    backup_paths(&repo, &[&source]).await;

    let password_file = work.path().join("password");
    std::fs::write(&password_file, fixtures::PASSWORD).unwrap();
    let target = work.path().join("target");
    let output = std::process::Command::new("/usr/bin/setpriv")
        .args([
            "--bounding-set=-mknod,-fsetid",
            "--inh-caps=-mknod,-fsetid",
            "--",
        ])
        .arg(env!("CARGO_BIN_EXE_neverwiped-sidecar"))
        .args(["restore", "latest", "--target"])
        .arg(&target)
        .arg("--repo")
        .arg(&repo_dir)
        .env("NEVERWIPED_PASSWORD_FILE", &password_file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    // A restore with warnings exits 0 or 3 (partial): which one is the CLI's table's to say.
    assert!(matches!(output.status.code(), Some(0 | 3)), "{stderr}");
    let restored = target.join(source.strip_prefix("/").unwrap());
    let restored_device = restored.join("null");
    assert!(
        stderr.contains("skipped the device file")
            && stderr.contains(&restored_device.display().to_string()),
        "{stderr}"
    );
    assert!(std::fs::symlink_metadata(&restored_device).is_err());
    let restored_tool = restored.join("shared/tool");
    assert!(
        stderr.contains("set-group-ID") && stderr.contains(&restored_tool.display().to_string()),
        "{stderr}"
    );
    assert_eq!(std::fs::read(restored.join("plain.txt")).unwrap(), b"plain");
    assert_eq!(std::fs::read(&restored_tool).unwrap(), b"#!/bin/sh\n");
}

/// Issue 13 item 4: the restore target is a mount point that may be someone else's: its own mode
/// and owner are never changed, whatever the snapshot holds. (Its modification time moves as
/// entries are created in it: the kernel's doing, not set by the restore.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_leaves_the_targets_own_mode_and_owner_untouched() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    build_fidelity_tree(&source);
    let repo = init(Arc::new(LocalBackend::new(work.path().join("repo")))).await;
    let report = backup_paths(&repo, &[&source]).await;
    let target = work.path().join("mount-point");
    std::fs::create_dir(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o1731)).unwrap();
    if is_root() {
        let other = Some(nix::unistd::Uid::from_raw(4321));
        nix::unistd::chown(&target, other, Some(nix::unistd::Gid::from_raw(4322))).unwrap();
    }
    let own = |path: &Path| {
        let meta = std::fs::symlink_metadata(path).unwrap();
        (meta.mode(), meta.uid(), meta.gid())
    };
    let before = own(&target);
    restore(&repo, report.snapshot.tree, &RestoreOptions::new(&target))
        .await
        .unwrap();
    assert_eq!(own(&target), before);
    assert_same_tree(
        &source,
        &target.join(source.strip_prefix("/").unwrap()),
        is_root(),
    );
}

/// A stream waits for nothing but its producer: the files are read while it is, even when its
/// place sorts first in the snapshot (`/databases` before `/tmp`). The stream here ends only
/// once the walk has read the file, as a long dump ends only after the files would have been
/// read beside it; a walk that waited at the stream's place first would never get there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_files_are_read_while_a_stream_that_sorts_first_is() {
    use neverwiped::progress::Progress;

    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    std::fs::create_dir_all(&source).unwrap();
    std::fs::write(source.join("data.bin"), vec![7u8; 256 * 1024]).unwrap();
    let repo = init(Arc::new(LocalBackend::new(work.path().join("repo")))).await;
    let progress = Arc::new(Progress::default());
    let stream = AfterTheFiles {
        progress: progress.clone(),
        content: Ok(std::io::Cursor::new(b"-- dump\n".to_vec())),
        bytes: 256 * 1024,
    }
    .dump_of_main();
    let mut options =
        BackupOptions::new(vec![Source::Path(source.clone()), Source::Stream(stream)]);
    options.progress = progress;
    let report = backup(&repo, options)
        .await
        .expect("the backup waited at the stream");
    assert_eq!(report.snapshot.summary.files, 2);
    restore_and_compare(&repo, &source).await;
}

/// A stream that fails stops the walk at the next folder, though the files come first: a
/// wrong database password must not cost a whole first backup's reading and upload before it
/// is reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_fails_stops_the_walk_at_the_next_folder() {
    use neverwiped::progress::Progress;

    const FOLDERS: u64 = 3000;
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    for folder in 0..FOLDERS {
        let folder = source.join(format!("d{folder:04}"));
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("file"), folder.as_os_str().as_encoded_bytes()).unwrap();
    }
    let repo = init(Arc::new(LocalBackend::new(work.path().join("repo")))).await;
    let progress = Arc::new(Progress::default());
    let stream = AfterTheFiles {
        progress: progress.clone(),
        content: Err("password authentication failed for user \"postgres\""),
        bytes: 1,
    }
    .dump_of_main();
    let mut options = BackupOptions::new(vec![Source::Path(source), Source::Stream(stream)]);
    options.progress = progress.clone();
    let error = backup(&repo, options).await.unwrap_err().to_string();
    assert!(
        error.contains("reading the dump of main") && error.contains("password authentication"),
        "{error}"
    );
    let files = progress.files.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        files < FOLDERS / 2,
        "the walk went on: {files} of {FOLDERS} files read"
    );
}

/// A stream that waits until `bytes` of files have been read (or 20 s), then gives its content
/// or fails.
struct AfterTheFiles {
    progress: Arc<neverwiped::progress::Progress>,
    content: Result<std::io::Cursor<Vec<u8>>, &'static str>,
    bytes: u64,
}

impl AfterTheFiles {
    /// The stream as a database's dump, whose place (`/databases`) sorts before the files'.
    fn dump_of_main(self) -> neverwiped::archive::StreamSource {
        neverwiped::archive::StreamSource {
            snapshot_path: "/databases/main/dump.sql".into(),
            label: "the dump of main".into(),
            reader: Box::new(self),
            may_be_empty: false,
        }
    }
}

impl std::io::Read for AfterTheFiles {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = &self.progress.bytes_processed;
        let waited = std::time::Instant::now();
        while read.load(std::sync::atomic::Ordering::Relaxed) < self.bytes {
            if waited.elapsed() > std::time::Duration::from_secs(20) {
                let message = "no file was read while the stream was";
                return Err(std::io::Error::other(message));
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        match &mut self.content {
            Ok(content) => content.read(buf),
            Err(message) => Err(std::io::Error::other(*message)),
        }
    }
}

/// The upload budget holds one pack in flight for each 8 MiB, as `--upload-memory` says: a
/// closed pack is a little over the 8 MiB target (the blob that crossed it, the header), and
/// counting its whole size had let the default 16 MiB hold only one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upload_budget_lets_one_pack_upload_for_each_8_mib() {
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    std::fs::create_dir_all(&source).unwrap();
    let mut noise = fixtures::Noise::new(43);
    for file in 0..6 {
        let name = source.join(format!("random-{file}.bin"));
        std::fs::write(name, noise.bytes(8 * 1024 * 1024)).unwrap();
    }
    for (budget_mib, in_flight) in [(8, 1), (16, 2), (24, 3)] {
        let writes = Arc::new(HookedBackend {
            inner: LocalBackend::new(work.path().join(format!("r{budget_mib}"))),
            hook: SlowPackWrites::default(),
        });
        let repo = init(writes.clone()).await;
        let mut options = BackupOptions::new(vec![Source::Path(source.clone())]);
        options.upload_memory_bytes = budget_mib * 1024 * 1024;
        backup(&repo, options).await.unwrap();
        assert_eq!(
            writes.hook.most_at_once(),
            in_flight,
            "packs uploading at once with --upload-memory {budget_mib}M"
        );
    }
}

/// Writes of full packs that take 300 ms each, counting how many run at once.
#[derive(Debug, Default)]
struct SlowPackWrites {
    now: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

impl SlowPackWrites {
    fn most_at_once(&self) -> usize {
        self.most.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Full packs of file data only: the last pack of trees is small and may go beside them.
    fn counts(mutation: &Mutation) -> bool {
        mutation.kind == ObjectKind::Data && mutation.bytes >= Some(4 * 1024 * 1024)
    }
}

#[async_trait::async_trait]
impl Hook for SlowPackWrites {
    async fn before(&self, mutation: &Mutation) -> BackendResult<()> {
        use std::sync::atomic::Ordering::SeqCst;
        if Self::counts(mutation) {
            let now = self.now.fetch_add(1, SeqCst) + 1;
            self.most.fetch_max(now, SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        }
        Ok(())
    }

    fn after(&self, mutation: &Mutation) {
        if Self::counts(mutation) {
            self.now.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}
