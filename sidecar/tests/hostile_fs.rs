//! A workload that attacks the backup of its own volume: while the walk runs, it swaps files for
//! symlinks to a secret outside the tree, for a symlink to `/dev/urandom`, and for FIFOs. The
//! snapshot must never hold the secret's bytes, and the backup must never block.

mod support;

use support::fixtures;

use fixtures::init_repository as init;
use neverwiped::archive::{backup, BackupOptions, ParentChoice, Source};
use neverwiped::backend::local::LocalBackend;
use neverwiped::error::Error;
use neverwiped::format::tree::NodeKind;
use neverwiped::repository::IndexedRepository;
use neverwiped::restore::{restore, RestoreOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Files the workload keeps swapping.
const VICTIMS: usize = 8;
/// Backups raced against the swapping.
const ROUNDS: usize = 30;
/// Far more than a backup of this small tree takes: past it, the walk is stuck.
const BACKUP_TIMEOUT: Duration = Duration::from_secs(60);

fn victim(tree: &Path, number: usize) -> PathBuf {
    tree.join(format!("victim-{number:02}"))
}

/// What each victim is swapped with, outside the tree: a symlink to the secret (half of them), a
/// FIFO, or a symlink to `/dev/urandom`.
fn make_partners(spares: &Path, secret: &Path) -> Vec<PathBuf> {
    std::fs::create_dir(spares).unwrap();
    (0..VICTIMS)
        .map(|number| {
            let partner = spares.join(format!("partner-{number:02}"));
            match number % 4 {
                0 | 1 => std::os::unix::fs::symlink(secret, &partner).unwrap(),
                2 => nix::unistd::mkfifo(&partner, nix::sys::stat::Mode::from_bits_truncate(0o644))
                    .unwrap(),
                _ => std::os::unix::fs::symlink("/dev/urandom", &partner).unwrap(),
            }
            partner
        })
        .collect()
}

/// Exchanges each victim with its partner, atomically and again and again (one system call per
/// swap, `RENAME_EXCHANGE`), until `stop`: each victim is a plain file half the time. Counts the
/// swaps.
fn swap_files(tree: PathBuf, partners: Vec<PathBuf>, stop: Arc<AtomicBool>, swaps: Arc<AtomicU64>) {
    let mut round = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let number = round % VICTIMS;
        let exchanged = nix::fcntl::renameat2(
            None,
            &victim(&tree, number),
            None,
            &partners[number],
            nix::fcntl::RenameFlags::RENAME_EXCHANGE,
        );
        if exchanged.is_ok() {
            swaps.fetch_add(1, Ordering::Relaxed);
        }
        round += 1;
    }
}

/// Every regular file restored below `dir`, read whole.
fn restored_contents(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            restored_contents(&entry.path(), out);
        } else if kind.is_file() {
            out.push((entry.path(), std::fs::read(entry.path()).unwrap()));
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// What one backup round ended with.
enum Round {
    Stored(String),
    /// Every victim was found swapped: nothing could be read, and no snapshot was stored.
    NothingRead,
    Hung,
}

async fn backup_without_parent(repo: &IndexedRepository, tree: &Path) -> Round {
    let mut options = BackupOptions::new(vec![Source::Path(tree.to_path_buf())]);
    // Every file is opened on every round, as on a first backup.
    options.parent = ParentChoice::None;
    // A round may find every victim swapped for a symlink or a FIFO: a tree without a file.
    options.allow_empty = true;
    match tokio::time::timeout(BACKUP_TIMEOUT, backup(repo, options)).await {
        Ok(Ok(report)) => Round::Stored(report.snapshot_id.to_hex()),
        Ok(Err(Error::NothingRead { .. })) => Round::NothingRead,
        Ok(Err(error)) => panic!("a round failed: {error}"),
        Err(_) => Round::Hung,
    }
}

/// The attack of issue 13 item 2, tried for real: with a reader that checks an entry with
/// `lstat` and opens it by path, some rounds put the secret in the snapshot, and one that meets a
/// FIFO blocks for ever.
#[test]
fn files_swapped_during_a_backup_never_put_outside_content_in_the_snapshot_nor_block() {
    let work = tempfile::tempdir().unwrap();
    let tree = work.path().join("volume");
    std::fs::create_dir(&tree).unwrap();
    for number in 0..VICTIMS {
        std::fs::write(victim(&tree, number), format!("plain content of {number}")).unwrap();
    }
    let secret_bytes = b"pod-secret: the database password is hunter2-7f3a9c".to_vec();
    let secret = work.path().join("secret-outside-the-tree");
    std::fs::write(&secret, &secret_bytes).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let partners = make_partners(&work.path().join("spares"), &secret);
    let swapper = std::thread::spawn({
        let (tree, stop, swaps) = (tree.clone(), stop.clone(), swaps.clone());
        move || swap_files(tree, partners, stop, swaps)
    });

    // Built by hand: a walk stuck on a FIFO must fail this test, not hang it in the runtime's drop.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (snapshots, hung_round) = runtime.block_on(async {
        let repo = init(Arc::new(LocalBackend::new(work.path().join("repo")))).await;
        let mut snapshots = Vec::new();
        for round in 0..ROUNDS {
            match backup_without_parent(&repo, &tree).await {
                Round::Stored(id) => snapshots.push(id),
                Round::NothingRead => {}
                Round::Hung => return (snapshots, Some(round)),
            }
        }
        (snapshots, None)
    });
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    let swaps = swaps.load(Ordering::Relaxed);
    assert!(swaps > 100, "the workload swapped only {swaps} times");

    let leaked = runtime.block_on(async {
        let repo =
            fixtures::open_repository(Arc::new(LocalBackend::new(work.path().join("repo")))).await;
        let mut leaked = Vec::new();
        for id in &snapshots {
            let (_, snapshot) = repo.find_snapshot(id).await.unwrap();
            let target = tempfile::tempdir().unwrap();
            restore(&repo, snapshot.tree, &RestoreOptions::new(target.path()))
                .await
                .unwrap();
            let mut files = Vec::new();
            restored_contents(target.path(), &mut files);
            leaked.extend(
                files
                    .into_iter()
                    .filter(|(_, content)| contains(content, &secret_bytes))
                    .map(|(path, _)| format!("snapshot {id}: {}", path.display())),
            );
        }
        leaked
    });
    if hung_round.is_some() {
        runtime.shutdown_timeout(Duration::from_secs(1));
    }
    assert!(
        hung_round.is_none() && leaked.is_empty(),
        "backup {hung_round:?} did not finish in {BACKUP_TIMEOUT:?}; the secret is in {leaked:#?}"
    );
    // Rounds that read nothing stored nothing; enough others stored snapshots to look into
    // (about half of them: small files are opened by reader threads a little after the listing
    // saw them, so many rounds find every victim swapped by then).
    assert!(
        snapshots.len() >= ROUNDS / 4,
        "only {} of {ROUNDS} rounds stored a snapshot",
        snapshots.len()
    );
}

/// Opens of `path` reported by inotify since the watch began.
struct OpenWatch {
    fd: std::os::fd::OwnedFd,
}

impl OpenWatch {
    fn new(path: &Path) -> OpenWatch {
        use std::os::fd::FromRawFd;
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: plain system calls on a descriptor this function owns.
        unsafe {
            let raw = libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC);
            assert!(
                raw >= 0,
                "inotify_init1: {}",
                std::io::Error::last_os_error()
            );
            let watch =
                libc::inotify_add_watch(raw, path.as_ptr(), libc::IN_OPEN | libc::IN_ACCESS);
            assert!(
                watch >= 0,
                "inotify_add_watch: {}",
                std::io::Error::last_os_error()
            );
            OpenWatch {
                fd: std::os::fd::OwnedFd::from_raw_fd(raw),
            }
        }
    }

    /// Whether any event arrived (each one is an open or a read of the watched file).
    fn saw_any(&self) -> bool {
        use std::os::fd::AsRawFd;
        let mut buffer = [0u8; 4096];
        // SAFETY: reads into a local buffer of the length given.
        let read = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                buffer.as_mut_ptr().cast(),
                buffer.len(),
            )
        };
        read > 0
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_in_the_tree_is_stored_as_a_fifo_and_never_opened() {
    let work = tempfile::tempdir().unwrap();
    let tree = work.path().join("volume");
    std::fs::create_dir(&tree).unwrap();
    std::fs::write(tree.join("file"), b"content").unwrap();
    let fifo = tree.join("pipe");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o640)).unwrap();

    // The watch sees an open of the FIFO: it would see the backup's.
    let probe = OpenWatch::new(&fifo);
    drop(
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap(),
    );
    assert!(
        probe.saw_any(),
        "inotify does not report opens of a FIFO here"
    );

    let watch = OpenWatch::new(&fifo);
    let repo = init(Arc::new(LocalBackend::new(work.path().join("repo")))).await;
    let report = tokio::time::timeout(
        BACKUP_TIMEOUT,
        backup(&repo, BackupOptions::new(vec![Source::Path(tree.clone())])),
    )
    .await
    .expect("the backup blocked")
    .unwrap();
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    assert!(!watch.saw_any(), "the backup opened the FIFO");

    let entries = neverwiped::restore::list(&repo, report.snapshot.tree, None)
        .await
        .unwrap();
    let pipe = entries
        .iter()
        .find(|entry| entry.path.ends_with(b"/pipe"))
        .expect("the FIFO is in the snapshot");
    assert_eq!(pipe.node.kind, NodeKind::Fifo);
    assert_eq!(pipe.node.meta.mode, 0o640);
}
