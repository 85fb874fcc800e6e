//! A workload that attacks the restore of its own volume (issue 13 item 2, restore side): while
//! the restore creates entries and sets their metadata, it swaps each directory being restored
//! for a symlink to a folder outside the target, and back, again and again (one `RENAME_EXCHANGE`
//! per swap). A restore that creates or changes entries by path follows the symlink and creates,
//! removes, chmods, chowns or re-times files outside the target. Nothing outside may ever change.

mod support;

use neverwiped::archive::{backup, BackupOptions, Source};
use neverwiped::backend::local::LocalBackend;
use neverwiped::restore::{restore, RestoreOptions};
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::fixtures::{init_repository as init, is_root};

/// Directories of the snapshot the workload swaps.
const SWAPPED: usize = 6;
/// Files in each of them (and as many in a subdirectory of each).
const FILES_PER_DIR: usize = 40;
/// Restores raced against the swapping.
const ROUNDS: usize = 40;
/// Far more than a restore of this small tree takes.
const RESTORE_TIMEOUT: Duration = Duration::from_secs(60);

fn dir_name(number: usize) -> String {
    format!("d{number:02}")
}

fn file_name(number: usize) -> String {
    format!("f{number:03}")
}

/// The source: directories `dNN` of files `fNNN` and a subdirectory `sub` of files, with modes,
/// times (and, as root, owners) that differ from those of the folder outside.
fn build_source(source: &Path) {
    for dir in 0..SWAPPED {
        let dir = source.join(dir_name(dir));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        for file in 0..FILES_PER_DIR {
            for path in [
                dir.join(file_name(file)),
                dir.join("sub").join(file_name(file)),
            ] {
                std::fs::write(&path, format!("restored content of {}", path.display())).unwrap();
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o751)).unwrap();
                if is_root() {
                    std::os::unix::fs::lchown(&path, Some(4321), Some(4322)).unwrap();
                }
            }
        }
        std::fs::set_permissions(dir.join("sub"), std::fs::Permissions::from_mode(0o705)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o705)).unwrap();
    }
}

/// The folder outside the target that the symlinks point to: files of the same names as those
/// restored (so that a restore through the symlink meets them), a `sub` folder likewise.
fn build_outside(outside: &Path) {
    std::fs::create_dir_all(outside.join("sub")).unwrap();
    for file in 0..FILES_PER_DIR {
        for path in [
            outside.join(file_name(file)),
            outside.join("sub").join(file_name(file)),
        ] {
            std::fs::write(&path, b"outside: must never change").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            set_mtime(&path);
        }
    }
    set_mtime(&outside.join("sub"));
    set_mtime(outside);
}

/// A fixed modification time, so that a rebuilt outside folder looks as it did.
fn set_mtime(path: &Path) {
    let time = nix::sys::time::TimeSpec::new(1_500_000_000, 0);
    nix::sys::stat::utimensat(
        None,
        path,
        &time,
        &time,
        nix::sys::stat::UtimensatFlags::NoFollowSymlink,
    )
    .unwrap();
}

/// Everything observable about a folder tree: per path, its type, mode, owner, times and
/// content (a symlink's target).
fn observe(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut seen = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(path) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let content = if meta.is_dir() {
            let mut names: Vec<_> = std::fs::read_dir(&path)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            names.sort();
            let listing = format!("{names:?}");
            pending.extend(names);
            listing
        } else if meta.file_type().is_symlink() {
            format!("-> {:?}", std::fs::read_link(&path).unwrap())
        } else {
            String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned()
        };
        seen.insert(
            path,
            format!(
                "mode {:o} owner {}:{} mtime {}.{} size {} content {content}",
                meta.mode(),
                meta.uid(),
                meta.gid(),
                meta.mtime(),
                meta.mtime_nsec(),
                meta.len()
            ),
        );
    }
    seen
}

/// Exchanges each restored directory `restored/dNN` with the symlink `lures/dNN` (which points
/// outside), again and again until `stop`; counts the swaps that happened.
fn swap_directories(
    restored: PathBuf,
    lures: PathBuf,
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
) {
    let mut round = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let number = round % SWAPPED;
        // Only the target's own children are swapped: the workload never goes through a
        // symlink it made (it would change the outside itself).
        let exchanged = nix::fcntl::renameat2(
            None,
            &restored.join(dir_name(number)),
            None,
            &lures.join(dir_name(number)),
            nix::fcntl::RenameFlags::RENAME_EXCHANGE,
        );
        if exchanged.is_ok() {
            swaps.fetch_add(1, Ordering::Relaxed);
        }
        round += 1;
        if round % 64 == 0 {
            std::thread::yield_now();
        }
    }
}

#[test]
fn directories_swapped_for_symlinks_during_a_restore_never_let_it_change_anything_outside() {
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    build_source(&source);
    let outside = work.path().join("outside");
    build_outside(&outside);
    let before = observe(&outside);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let repo = runtime.block_on(async {
        let repo = init(Arc::new(LocalBackend::new(work.path().join("repo")))).await;
        backup(
            &repo,
            BackupOptions::new(vec![Source::Path(source.clone())]),
        )
        .await
        .unwrap();
        repo
    });
    let (_, snapshot) = runtime.block_on(repo.find_snapshot("latest")).unwrap();

    let mut total_swaps = 0;
    let mut completed = 0;
    let mut changes = Vec::new();
    for round in 0..ROUNDS {
        let target = work.path().join(format!("target-{round:02}"));
        let restored = target.join(source.strip_prefix("/").unwrap());
        // The lures live in the target, where the workload may write: symlinks to the outside.
        let lures = target.join("lures");
        std::fs::create_dir_all(&lures).unwrap();
        for number in 0..SWAPPED {
            std::os::unix::fs::symlink(&outside, lures.join(dir_name(number))).unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicU64::new(0));
        let swapper = std::thread::spawn({
            let (restored, stop, swaps) = (restored.clone(), stop.clone(), swaps.clone());
            move || swap_directories(restored, lures, stop, swaps)
        });
        let outcome = runtime.block_on(async {
            tokio::time::timeout(
                RESTORE_TIMEOUT,
                restore(&repo, snapshot.tree, &RestoreOptions::new(&target)),
            )
            .await
        });
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        total_swaps += swaps.load(Ordering::Relaxed);
        match outcome {
            Err(_) => panic!("restore {round} did not finish in {RESTORE_TIMEOUT:?}"),
            // Refusing to go on in a target under attack is fine; changing the outside is not.
            Ok(result) => completed += usize::from(result.is_ok()),
        }
        let after = observe(&outside);
        if after != before {
            let changed: Vec<_> = after
                .iter()
                .filter(|(path, facts)| before.get(*path) != Some(*facts))
                .map(|(path, facts)| format!("{}: {facts}", path.display()))
                .chain(
                    before
                        .keys()
                        .filter(|path| !after.contains_key(*path))
                        .map(|path| format!("{}: removed", path.display())),
                )
                .take(5)
                .collect();
            changes.push(format!("round {round}: {changed:#?}"));
            // Put the outside back, so that each round shows its own damage.
            std::fs::remove_dir_all(&outside).unwrap();
            build_outside(&outside);
            assert_eq!(observe(&outside), before);
        }
    }
    eprintln!(
        "{completed} of {ROUNDS} restores completed; the workload swapped {total_swaps} times"
    );
    assert!(
        total_swaps > 200,
        "the workload swapped only {total_swaps} times"
    );
    assert!(
        changes.is_empty(),
        "{} of {ROUNDS} restores ({completed} completed) changed the folder outside the target:\n{}",
        changes.len(),
        changes.join("\n")
    );
}
