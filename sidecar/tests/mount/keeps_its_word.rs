//! What the mount promises beyond its files: it refuses a folder that is not empty (unless
//! allowed), shows holes of sparse files as holes (`SEEK_DATA`, `SEEK_HOLE`, `st_blocks`), keeps
//! inode numbers across the kernel forgetting them while holding only what the kernel holds, and
//! stays read-only, `nosuid` and `nodev`.

use super::*;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirEntryExt, MetadataExt};

/// One snapshot of the fidelity tree in a local repository, mounted with `options`.
async fn mounted(
    work: &Path,
    options: MountOptions,
) -> (neverwiped::mount::MountHandle, PathBuf, PathBuf) {
    let source = work.join("source");
    build_fidelity_tree(&source);
    let repo = init_repository(Arc::new(LocalBackend::new(work.join("repo")))).await;
    backup(
        &repo,
        BackupOptions::new(vec![Source::Path(source.clone())]),
    )
    .await
    .unwrap();
    let mountpoint = work.join("mnt");
    fs::create_dir_all(&mountpoint).unwrap();
    let handle = mount::serve(repo, &mountpoint, options).await.unwrap();
    (handle, mountpoint, source)
}

/// The mount options the kernel shows for `path` (mountinfo's sixth field).
fn mount_flags(path: &Path) -> Vec<String> {
    let table = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let wanted = path.to_str().unwrap();
    let line = table
        .lines()
        .find(|line| line.split(' ').nth(4) == Some(wanted))
        .unwrap_or_else(|| panic!("{wanted} is not mounted"));
    let flags = line.split(' ').nth(5).unwrap();
    flags.split(',').map(str::to_owned).collect()
}

/// `lseek(file, offset, whence)`: the offset found, or the errno.
fn seek(file: &fs::File, offset: i64, whence: i32) -> Result<i64, i32> {
    let found = unsafe { libc::lseek(file.as_raw_fd(), offset, whence) };
    if found < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    } else {
        Ok(found)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_that_is_not_empty_is_refused_unless_allowed_and_keeps_its_files() {
    if !fuse_or_skip("a_folder_that_is_not_empty_is_refused_unless_allowed_and_keeps_its_files") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let mountpoint = work.path().join("mnt");
    fs::create_dir(&mountpoint).unwrap();
    fs::write(mountpoint.join("notes.txt"), b"in use").unwrap();
    let repo = init_repository(Arc::new(LocalBackend::new(work.path().join("repo")))).await;
    let refused = mount::serve(repo.clone(), &mountpoint, MountOptions::default()).await;
    let message = refused
        .err()
        .expect("a folder with a file is refused")
        .to_string();
    assert!(message.contains("is not empty"), "{message}");
    assert!(!is_mounted(&mountpoint), "nothing was mounted");
    assert_eq!(fs::read(mountpoint.join("notes.txt")).unwrap(), b"in use");

    // The CLI says the same and exits 1.
    let password_file = work.path().join("password");
    fs::write(&password_file, PASSWORD).unwrap();
    let mut command = bare_command();
    command
        .arg("--repo")
        .arg(work.path().join("repo"))
        .arg("mount")
        .arg(&mountpoint)
        .env("NEVERWIPED_PASSWORD_FILE", &password_file);
    let run = support::sidecar::run(command);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("is not empty"), "{run:?}");
    assert!(run.stderr.contains("--allow-non-empty"), "{run:?}");
    assert!(!is_mounted(&mountpoint));

    // Allowed: mounted over the file, which is back once unmounted.
    let options = MountOptions {
        allow_non_empty: true,
        ..MountOptions::default()
    };
    let handle = mount::serve(repo, &mountpoint, options).await.unwrap();
    assert!(is_mounted(&mountpoint));
    assert_eq!(names(&mountpoint), ["hosts", "ids", "snapshots", "tags"]);
    handle.unmount().await.unwrap();
    assert_eq!(fs::read(mountpoint.join("notes.txt")).unwrap(), b"in use");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holes_of_a_sparse_file_are_holes_in_the_mount() {
    if !fuse_or_skip("holes_of_a_sparse_file_are_holes_in_the_mount") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let (handle, mountpoint, source) = mounted(work.path(), MountOptions::default()).await;
    let flags = mount_flags(&mountpoint);
    for wanted in ["ro", "nosuid", "nodev"] {
        assert!(
            flags.iter().any(|flag| flag == wanted),
            "{wanted}: {flags:?}"
        );
    }
    // sparse.img: 64 MiB, 28 bytes of data at 20 MiB, holes around them.
    let sparse = inside(&mountpoint.join("snapshots/latest"), &source).join("sparse.img");
    let size = 64 * 1024 * 1024;
    let data_at = 20 * 1024 * 1024;
    let metadata = fs::metadata(&sparse).unwrap();
    assert_eq!(metadata.len(), size as u64);
    let held = metadata.blocks() * 512;
    assert!(held < size as u64 / 4, "{held} bytes held of {size}");
    let file = fs::File::open(&sparse).unwrap();
    let data = seek(&file, 0, libc::SEEK_DATA).unwrap();
    assert!(data > 0 && data <= data_at, "the first data at {data}");
    let hole = seek(&file, data, libc::SEEK_HOLE).unwrap();
    assert!(
        hole >= data_at + 28 && hole < size,
        "the hole after it at {hole}"
    );
    assert_eq!(
        seek(&file, 0, libc::SEEK_HOLE),
        Ok(0),
        "it starts with a hole"
    );
    // The zeros at the very end are shorter than a whole blob of zeros: data, or no more data.
    match seek(&file, hole, libc::SEEK_DATA) {
        Ok(tail) => assert!(tail > hole && tail >= size - 8 * 1024 * 1024, "{tail}"),
        Err(errno) => assert_eq!(errno, libc::ENXIO),
    }
    assert_eq!(seek(&file, size, libc::SEEK_DATA), Err(libc::ENXIO));
    assert_eq!(seek(&file, size, libc::SEEK_HOLE), Err(libc::ENXIO));
    // What is read is still the source, byte for byte.
    assert_eq!(
        fixtures::sha256_file(&sparse),
        fixtures::sha256_file(&source.join("sparse.img"))
    );
    drop(file);
    handle.unmount().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_the_kernel_forgets_leave_the_table_and_come_back_with_their_numbers() {
    if !fuse_or_skip("entries_the_kernel_forgets_leave_the_table_and_come_back_with_their_numbers")
    {
        return;
    }
    // Only root can make the kernel drop its cache (and so forget) on demand.
    if !neverwiped_testkit::require_that(
        is_root(),
        "root (to drop the kernel's caches)",
        "run the tests as root",
    ) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let (handle, mountpoint, source) = mounted(work.path(), MountOptions::default()).await;
    let latest = inside(&mountpoint.join("snapshots/latest"), &source);
    let numbers = |root: &Path| -> Vec<(PathBuf, u64)> {
        fixtures::walk(root)
            .into_iter()
            .map(|path| {
                let number = fs::symlink_metadata(&path).unwrap().ino();
                (path, number)
            })
            .collect()
    };
    let before = numbers(&latest);
    assert!(before.len() > 15, "{before:?}");
    assert!(
        handle.entries_held() >= before.len() - 2,
        "hard links share"
    );
    // A listing shows the number a stat shows.
    for entry in fs::read_dir(&latest).unwrap() {
        let entry = entry.unwrap();
        assert_eq!(
            entry.ino(),
            fs::symlink_metadata(entry.path()).unwrap().ino()
        );
    }
    let hard = |path: &str| fs::metadata(latest.join(path)).unwrap().ino();
    assert_eq!(hard("dir/hardlinked"), hard("hard-2"));

    // The kernel drops its unused inodes and forgets them: the table empties.
    let started = Instant::now();
    loop {
        fs::write("/proc/sys/vm/drop_caches", b"2").unwrap();
        if handle.entries_held() == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{} entries still held a minute after dropping the caches",
            handle.entries_held()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Looked up again: the same numbers, the same files.
    assert_eq!(numbers(&latest), before);
    assert_eq!(hard("dir/nested/hard-3"), hard("hard-2"));
    assert_same_tree(&source, &latest, true);
    handle.unmount().await.unwrap();
}
