//! The file system's answers without a kernel: a real backup in an in-memory repository, looked
//! up, listed, read and forgotten through [`SnapshotFs`] as the FUSE requests would.

use super::*;
use crate::archive::{backup, BackupOptions, Source};
use crate::mount::inodes::ROOT_INODE;
use crate::mount::layout::{build_layout, SnapshotSelection};
use crate::repository::IndexedRepository;
use std::path::{Path, PathBuf};

struct Mounted {
    fs: SnapshotFs,
    /// Where the source is in the snapshot: its inode number.
    source: u64,
    /// The zero blob's length: holes come in these.
    hole_bytes: u64,
    _runtime: tokio::runtime::Runtime,
    _work: tempfile::TempDir,
}

/// The source of the backup, and the sparse file's layout: data, a long run of zeros, data.
fn build_source(root: &Path, zeros: usize) {
    std::fs::create_dir_all(root.join("dir/sub")).unwrap();
    std::fs::write(root.join("dir/a.txt"), b"file a\n").unwrap();
    std::fs::write(root.join("dir/sub/b.txt"), b"file b\n").unwrap();
    std::os::unix::fs::symlink("dir/a.txt", root.join("link")).unwrap();
    std::fs::write(root.join("first"), b"linked twice").unwrap();
    std::fs::hard_link(root.join("first"), root.join("second")).unwrap();
    let mut sparse = vec![7u8; 100_000];
    sparse.resize(100_000 + zeros, 0);
    sparse.extend_from_slice(&[9u8; 50_000]);
    std::fs::write(root.join("sparse.bin"), sparse).unwrap();
}

async fn test_repository() -> IndexedRepository {
    let kdf = crate::crypto::KdfParams {
        memory_kib: 1024,
        iterations: 1,
        parallelism: 1,
    };
    let backend = Arc::new(crate::backend::memory::MemoryBackend::new());
    crate::repository::Repository::init(backend, b"pw", kdf)
        .await
        .unwrap()
        .load_index()
        .await
        .unwrap()
}

/// One backup of the source, served by a file system with small caches.
fn mounted() -> Mounted {
    // What a failed read says goes to the test's output.
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    let source: PathBuf = work.path().join("source");
    let (repo, layout, hole_bytes) = runtime.block_on(async {
        let repo = test_repository().await;
        let params = repo.chunker().params();
        // Two and a half of the largest chunks: at least one whole blob of zeros.
        build_source(&source, params.max_bytes as usize * 5 / 2);
        backup(
            &repo,
            BackupOptions::new(vec![Source::Path(source.clone())]),
        )
        .await
        .unwrap();
        let snapshots = repo.snapshots().await.unwrap();
        let layout = build_layout(&snapshots, &SnapshotSelection::default());
        let zeros = vec![0u8; params.max_bytes as usize * 2];
        let hole_bytes = repo.chunker().cut(&zeros) as u64;
        (repo, layout, hole_bytes)
    });
    let reader = SnapshotReader::new(repo, 1 << 20, 8 << 20);
    let mut fs = SnapshotFs::new(
        runtime.handle().clone(),
        Arc::new(reader),
        InodeTable::new(&layout),
    );
    let snapshots = fs.look_up(ROOT_INODE, b"snapshots").unwrap().0;
    let latest = fs.look_up(snapshots, b"latest").unwrap().0;
    let target = fs.read_link(latest).unwrap();
    let mut at = fs.look_up(snapshots, &target).unwrap().0;
    for component in source.strip_prefix("/").unwrap().components() {
        at = fs
            .look_up(at, component.as_os_str().as_encoded_bytes())
            .unwrap()
            .0;
    }
    Mounted {
        fs,
        source: at,
        hole_bytes,
        _runtime: runtime,
        _work: work,
    }
}

fn names(listing: &Listing) -> Vec<String> {
    listing
        .iter()
        .map(|(name, _, _)| String::from_utf8_lossy(name).into_owned())
        .collect()
}

#[test]
fn a_file_is_looked_up_read_and_forgotten_and_keeps_its_number() {
    let served = mounted();
    // `served` keeps the runtime and the source until the test ends.
    let Mounted { mut fs, source, .. } = served;
    let dir = fs.look_up(source, b"dir").unwrap().0;
    let (file, attributes) = fs.look_up(dir, b"a.txt").unwrap();
    assert_eq!((attributes.kind, attributes.size), (EntryKind::File, 7));
    assert_eq!(attributes.blocks, 1);
    let handle = fs.open(file, libc::O_RDONLY).unwrap();
    assert_eq!(fs.read(handle, 0, 4096).unwrap(), b"file a\n");
    assert_eq!(fs.read(handle, 5, 4096).unwrap(), b"a\n");
    assert_eq!(fs.read(handle, 7, 4096).unwrap(), b"");
    assert_eq!(fs.read(handle, -1, 1), Err(libc::EINVAL));
    fs.release(handle);
    assert_eq!(fs.read(handle, 0, 1), Err(libc::EBADF), "released");

    let held = fs.inodes.entry_count();
    fs.forget(file, 1);
    assert_eq!(fs.attributes(file), Err(libc::ENOENT), "forgotten");
    assert_eq!(fs.inodes.entry_count(), held - 1);
    let (again, _) = fs.look_up(dir, b"a.txt").unwrap();
    assert_eq!(again, file, "looked up again: the same number");
    assert_eq!(fs.inodes.entry_count(), held);
}

#[test]
fn a_listing_numbers_entries_as_lookups_do_and_keeps_none() {
    let served = mounted();
    // `served` keeps the runtime and the source until the test ends.
    let Mounted { mut fs, source, .. } = served;
    let held = fs.inodes.entry_count();
    let listing = fs.listing(source, 0).unwrap();
    assert_eq!(
        names(&listing),
        [".", "..", "dir", "first", "link", "second", "sparse.bin"]
    );
    assert_eq!(listing[0].1, source);
    assert_eq!(fs.inodes.entry_count(), held, "a listing is not a lookup");
    for (name, number, kind) in listing.iter().skip(2) {
        let (looked_up, attributes) = fs.look_up(source, name).unwrap();
        assert_eq!(looked_up, *number, "{name:?}");
        assert_eq!(attributes.kind, *kind, "{name:?}");
    }
    // Hard links share one number; `..` of a folder is the folder above.
    assert_eq!(listing[3].1, listing[5].1, "first and second are one file");
    assert_eq!(fs.attributes(listing[3].1).unwrap().links, 2);
    let dir = listing[2].1;
    assert_eq!(fs.listing(dir, 0).unwrap()[1].1, source);
    // A continued listing is the one read before.
    let continued = fs.listing(dir, 3).unwrap();
    assert_eq!(names(&continued), [".", "..", "a.txt", "sub"]);
    // The layout above the snapshots lists its own folders.
    assert_eq!(
        names(&fs.listing(ROOT_INODE, 0).unwrap()),
        [".", "..", "hosts", "ids", "snapshots", "tags"]
    );
}

#[test]
fn links_folders_and_missing_entries_get_the_errno_a_program_expects() {
    let served = mounted();
    // `served` keeps the runtime and the source until the test ends.
    let Mounted { mut fs, source, .. } = served;
    let (link, attributes) = fs.look_up(source, b"link").unwrap();
    assert_eq!((attributes.kind, attributes.size), (EntryKind::Symlink, 9));
    assert_eq!(fs.read_link(link).unwrap(), b"dir/a.txt");
    assert_eq!(fs.open(link, libc::O_RDONLY), Err(libc::EINVAL));
    let dir = fs.look_up(source, b"dir").unwrap().0;
    assert_eq!(fs.read_link(dir), Err(libc::EINVAL));
    assert_eq!(fs.open(dir, libc::O_RDONLY), Err(libc::EISDIR));
    assert_eq!(fs.open(ROOT_INODE, libc::O_RDONLY), Err(libc::EISDIR));
    assert_eq!(fs.look_up(dir, b"missing"), Err(libc::ENOENT));
    assert_eq!(fs.look_up(ROOT_INODE, b"missing"), Err(libc::ENOENT));
    let file = fs.look_up(source, b"first").unwrap().0;
    assert_eq!(fs.look_up(file, b"inside"), Err(libc::ENOTDIR));
    assert_eq!(fs.listing(file, 0).map(|_| ()), Err(libc::ENOTDIR));
    assert_eq!(fs.open(file, libc::O_WRONLY), Err(libc::EROFS));
    assert_eq!(fs.open(file, libc::O_RDWR), Err(libc::EROFS));
    assert_eq!(fs.attributes(u64::MAX), Err(libc::ENOENT));
    assert_eq!(fs.open(u64::MAX, libc::O_RDONLY), Err(libc::ENOENT));
    let handle = fs.open(file, libc::O_RDONLY).unwrap();
    assert_eq!(fs.seek(handle, 0, libc::SEEK_SET), Err(libc::EINVAL));
    assert_eq!(fs.seek(handle + 1, 0, libc::SEEK_DATA), Err(libc::EBADF));
}

#[test]
fn a_run_of_zeros_is_a_hole_for_stat_seek_and_read() {
    let served = mounted();
    // `served` keeps the runtime and the source until the test ends.
    let Mounted {
        mut fs,
        source,
        hole_bytes,
        ..
    } = served;
    let (file, attributes) = fs.look_up(source, b"sparse.bin").unwrap();
    let size = attributes.size;
    assert!(
        attributes.blocks * 512 < size - hole_bytes + 512,
        "{} blocks for {size} bytes with a hole of at least {hole_bytes}",
        attributes.blocks
    );
    assert!(attributes.blocks * 512 >= 150_000, "the data counts");
    let handle = fs.open(file, libc::O_RDONLY).unwrap();
    assert_eq!(fs.seek(handle, 0, libc::SEEK_DATA), Ok(0));
    let hole = fs.seek(handle, 0, libc::SEEK_HOLE).unwrap();
    assert!(hole >= 100_000 && (hole as u64) < size - 50_000, "{hole}");
    let data = fs.seek(handle, hole, libc::SEEK_DATA).unwrap();
    assert!(data > hole && (data as u64) <= size - 50_000, "{data}");
    assert_eq!(
        fs.seek(handle, data, libc::SEEK_HOLE).map(|end| end as u64),
        Ok(size)
    );
    assert_eq!(
        fs.seek(handle, size as i64, libc::SEEK_DATA),
        Err(libc::ENXIO)
    );
    // A hole reads as zeros, and the data after it as stored.
    let read = fs.read(handle, hole - 2, 8).unwrap();
    let before_hole = if hole == 100_000 { 7 } else { 0 };
    assert_eq!(read, [before_hole, before_hole, 0, 0, 0, 0, 0, 0]);
    let tail = fs.read(handle, size as i64 - 3, 10).unwrap();
    assert_eq!(tail, [9, 9, 9]);
}
