//! A backup against a parent snapshot reuses the trees of unchanged directories by id and reads
//! their parent trees ahead of the walk. What it stores must be exactly what a backup without a
//! parent stores: the same tree ids, from the source folder down. Each kind of change a quiet
//! night could miss (content with the old size and times, a mode, an owner, an extended
//! attribute, a file swapped for another, folders gone and new) is made deep in a tree, and the
//! backup with a parent must then differ from the one before and equal a fresh walk. Likewise
//! a walk whose small files are read on reader threads stores what a walk on one thread stores.

mod support;

use neverwiped::archive::{backup, BackupOptions, BackupReport, ParentChoice, Source};
use neverwiped::backend::local::LocalBackend;
use neverwiped::format::tree::NodeKind;
use neverwiped::ids::BlobId;
use neverwiped::repository::IndexedRepository;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use support::fixtures::{init_repository, is_root, Noise};

/// Folders three deep, some empty, files of a few sizes, symlinks: more directories than the walk
/// reads ahead at once, so that reading ahead is given up and resumed.
fn build_tree(root: &Path) {
    let mut noise = Noise::new(15);
    for a in 0..6 {
        for b in 0..7 {
            let dir = root.join(format!("a{a}")).join(format!("b{b}"));
            std::fs::create_dir_all(dir.join("empty")).unwrap();
            for c in 0..3 {
                let leaf = dir.join(format!("c{c}"));
                std::fs::create_dir_all(&leaf).unwrap();
                for f in 0..4 {
                    let len = (noise.next() % 3000) as usize;
                    std::fs::write(leaf.join(format!("f{f}.txt")), noise.bytes(len)).unwrap();
                }
                std::os::unix::fs::symlink("f0.txt", leaf.join("link")).unwrap();
            }
        }
    }
    std::fs::write(root.join("top.txt"), b"top").unwrap();
}

async fn backup_with(
    repo: &IndexedRepository,
    source: &Path,
    parent: ParentChoice,
) -> BackupReport {
    let mut options = BackupOptions::new(vec![Source::Path(source.to_path_buf())]);
    options.parent = parent;
    let report = backup(repo, options).await.unwrap();
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    report
}

/// The id of the tree of `source` itself in a snapshot (the folders above it hold the times of
/// folders that other processes change).
async fn source_tree(repo: &IndexedRepository, report: &BackupReport, source: &Path) -> BlobId {
    *trees_down_to(repo, report.snapshot.tree, source)
        .await
        .last()
        .unwrap()
}

/// The trees from the snapshot root `root` down to `source`: the folders above it, then its own.
async fn trees_down_to(repo: &IndexedRepository, root: BlobId, source: &Path) -> Vec<BlobId> {
    let mut ids = vec![root];
    for part in source.strip_prefix("/").unwrap().components() {
        let tree = repo.read_tree(ids.last().unwrap(), "test").await.unwrap();
        let node = tree.find(part.as_os_str().as_bytes()).unwrap();
        match &node.kind {
            NodeKind::Dir { subtree } => ids.push(*subtree),
            other => panic!("{} is {other:?}", part.as_os_str().to_string_lossy()),
        }
    }
    ids
}

/// The trees of the folders above `source` that differ between two snapshots (by their root
/// trees). Those folders are the shared temporary folder and its parents: other tests change
/// their times, so a backup that adds nothing of the source may still store these trees anew.
async fn new_trees_above(
    repo: &IndexedRepository,
    earlier: BlobId,
    later: BlobId,
    source: &Path,
) -> u64 {
    let earlier = trees_down_to(repo, earlier, source).await;
    let later = trees_down_to(repo, later, source).await;
    let above = earlier.len() - 1;
    earlier[..above]
        .iter()
        .zip(&later[..above])
        .filter(|(before, after)| before != after)
        .count() as u64
}

struct Fixture {
    _work: tempfile::TempDir,
    source: PathBuf,
    repo: IndexedRepository,
    last: BlobId,
    /// The root tree of the latest snapshot.
    latest_root: BlobId,
}

impl Fixture {
    async fn new() -> Fixture {
        let work = tempfile::tempdir().unwrap();
        let source = work.path().join("source");
        build_tree(&source);
        let repo = init_repository(Arc::new(LocalBackend::new(work.path().join("repo")))).await;
        let first = backup_with(&repo, &source, ParentChoice::None).await;
        let last = source_tree(&repo, &first, &source).await;
        Fixture {
            _work: work,
            source,
            repo,
            last,
            latest_root: first.snapshot.tree,
        }
    }

    /// A backup with the latest snapshot as parent, checked against a fresh walk; returns
    /// whether its tree differs from the last one, the report, and how many trees above the
    /// source it stored anew (see [`new_trees_above`]).
    async fn night(&mut self) -> (bool, BackupReport, u64) {
        let quiet = backup_with(&self.repo, &self.source, ParentChoice::Latest).await;
        assert!(quiet.snapshot.parent.is_some());
        let above = new_trees_above(
            &self.repo,
            self.latest_root,
            quiet.snapshot.tree,
            &self.source,
        )
        .await;
        let with_parent = source_tree(&self.repo, &quiet, &self.source).await;
        let fresh = backup_with(&self.repo, &self.source, ParentChoice::None).await;
        let without_parent = source_tree(&self.repo, &fresh, &self.source).await;
        assert_eq!(
            with_parent, without_parent,
            "a backup with a parent stored other trees than a fresh walk"
        );
        let changed = with_parent != self.last;
        self.last = with_parent;
        self.latest_root = fresh.snapshot.tree;
        (changed, quiet, above)
    }

    fn deep(&self, name: &str) -> PathBuf {
        self.source.join("a3/b5/c1").join(name)
    }
}

fn set_mtime(path: &Path, mtime: &std::fs::Metadata) {
    use std::os::unix::fs::MetadataExt;
    support::fixtures::set_mtime(path, mtime.mtime(), mtime.mtime_nsec());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_night_reads_nothing_adds_nothing_and_stores_the_same_trees_as_a_fresh_walk() {
    let mut fixture = Fixture::new().await;
    let (changed, quiet, above) = fixture.night().await;
    assert!(!changed);
    assert_eq!(quiet.snapshot.summary.files_read, 0);
    assert_eq!(quiet.snapshot.summary.blobs_added, above);
    assert_eq!(quiet.snapshot.summary.files, 6 * 7 * 3 * 4 + 1);
    assert_eq!(
        quiet.snapshot.summary.dirs,
        fixture_dirs() + root_dirs(&fixture.source)
    );
}

/// Folders in the fixture, the source itself included.
fn fixture_dirs() -> u64 {
    1 + 6 + 6 * 7 * (1 + 1 + 3)
}

/// The folders above the source, which the snapshot holds too.
fn root_dirs(source: &Path) -> u64 {
    source.components().count() as u64 - 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_content_with_the_old_size_and_times_is_read_again() {
    let mut fixture = Fixture::new().await;
    let file = fixture.deep("f2.txt");
    let before = std::fs::symlink_metadata(&file).unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    bytes.iter_mut().for_each(|byte| *byte = !*byte);
    std::fs::write(&file, &bytes).unwrap();
    set_mtime(&file, &before);
    let (changed, report, _) = fixture.night().await;
    assert!(
        changed,
        "content rewritten under the old size and mtime was missed"
    );
    assert_eq!(report.snapshot.summary.files_read, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_mode_is_caught() {
    let mut fixture = Fixture::new().await;
    let file = fixture.deep("f1.txt");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(fixture.night().await.0, "a mode change was missed");
    let dir = fixture.source.join("a1/b2/empty");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert!(fixture.night().await.0, "a folder's mode change was missed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_owner_is_caught() {
    if !neverwiped_testkit::require_that(
        is_root(),
        "changing a file's owner needs root",
        "run the tests as root (scripts/test.sh does)",
    ) {
        return;
    }
    let mut fixture = Fixture::new().await;
    let file = fixture.deep("f3.txt");
    std::os::unix::fs::lchown(&file, Some(4242), Some(4343)).unwrap();
    assert!(fixture.night().await.0, "an owner change was missed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_extended_attribute_is_caught() {
    let mut fixture = Fixture::new().await;
    let file = fixture.deep("f0.txt");
    let before = std::fs::symlink_metadata(&file).unwrap();
    let path = CString::new(file.as_os_str().as_bytes()).unwrap();
    let value = b"on";
    // SAFETY: both pointers are to live buffers of the lengths given.
    let set = unsafe {
        libc::lsetxattr(
            path.as_ptr(),
            c"user.neverwiped.test".as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if set != 0 {
        neverwiped_testkit::missing(
            format_args!(
                "the temporary folder's file system refuses user attributes: {}",
                std::io::Error::last_os_error()
            ),
            "point TMPDIR at a file system with user extended attributes (ext4, xfs, tmpfs)",
        );
        return;
    }
    set_mtime(&file, &before);
    assert!(fixture.night().await.0, "an attribute change was missed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_swapped_for_another_with_the_same_size_and_times_is_read_again() {
    let mut fixture = Fixture::new().await;
    let file = fixture.deep("f1.txt");
    let before = std::fs::symlink_metadata(&file).unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    bytes.reverse();
    bytes.push(b'!');
    bytes.remove(0);
    let swap = fixture.deep("swap.tmp");
    std::fs::write(&swap, &bytes).unwrap();
    set_mtime(&swap, &before);
    std::fs::rename(&swap, &file).unwrap();
    // The folder's times changed with the rename; the file's look as before but for its inode.
    let (changed, report, _) = fixture.night().await;
    assert!(changed);
    assert_eq!(report.snapshot.summary.files_read, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn folders_gone_and_new_are_caught_and_the_rest_is_still_reused() {
    let mut fixture = Fixture::new().await;
    std::fs::remove_dir_all(fixture.source.join("a2/b0")).unwrap();
    std::fs::remove_dir_all(fixture.source.join("a2/b4/c2")).unwrap();
    std::fs::create_dir_all(fixture.source.join("a2/b3/new/deeper")).unwrap();
    std::fs::write(fixture.source.join("a2/b3/new/deeper/n.txt"), b"new").unwrap();
    let (changed, report, _) = fixture.night().await;
    assert!(changed);
    assert_eq!(report.snapshot.summary.files_read, 1);
    assert!(
        !fixture.night().await.0,
        "a quiet night after the change stored new trees"
    );
}

/// Small files are read by reader threads beside the walk: what they store must be exactly what
/// one thread stores, whatever order they finish in. Sizes around the default minimum chunk
/// (256 KiB: below it a file is one blob), empty files, equal files in different folders and a
/// file of two names, beside the fixture's many small files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_files_read_on_threads_store_the_same_trees_as_one_thread() {
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    build_tree(&source);
    let min = 256 * 1024;
    let mut noise = Noise::new(99);
    let sizes = source.join("sizes");
    std::fs::create_dir_all(&sizes).unwrap();
    for (n, size) in [0, 1, min - 1, min, min + 1, 3 << 20]
        .into_iter()
        .enumerate()
    {
        std::fs::write(sizes.join(format!("s{n}")), noise.bytes(size)).unwrap();
    }
    let same = noise.bytes(5000);
    for dir in ["same-1", "same-2/deeper"] {
        std::fs::create_dir_all(source.join(dir)).unwrap();
        std::fs::write(source.join(dir).join("copy.txt"), &same).unwrap();
    }
    std::fs::hard_link(sizes.join("s2"), source.join("same-1/second-name")).unwrap();
    let repo = init_repository(Arc::new(LocalBackend::new(work.path().join("repo")))).await;

    let walk = |read_threads| {
        let mut options = BackupOptions::new(vec![Source::Path(source.clone())]);
        options.parent = ParentChoice::None;
        options.read_threads = read_threads;
        let repo = repo.clone();
        async move {
            let report = backup(&repo, options).await.unwrap();
            assert!(report.warnings.is_empty(), "{:?}", report.warnings);
            report
        }
    };
    let threads = walk(3).await;
    let one = walk(0).await;
    assert_eq!(
        source_tree(&repo, &threads, &source).await,
        source_tree(&repo, &one, &source).await,
        "reader threads stored other trees than one thread"
    );
    assert_eq!(
        one.snapshot.summary.blobs_added,
        new_trees_above(&repo, threads.snapshot.tree, one.snapshot.tree, &source).await,
        "the threads left blobs out"
    );
    let (a, b) = (&threads.snapshot.summary, &one.snapshot.summary);
    assert_eq!(
        (a.files, a.files_read, a.bytes_read, a.total_bytes),
        (b.files, b.files_read, b.bytes_read, b.total_bytes)
    );
    assert_eq!(a.files, 6 * 7 * 3 * 4 + 1 + 6 + 2 + 1);
    assert_eq!((threads.hard_links, one.hard_links), (1, 1));
}
