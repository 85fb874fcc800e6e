//! Files: a volume of several owners and modes, and what a restore must give back (every entry's
//! content hash and metadata).

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Bytes that do not compress or deduplicate (a fixed xorshift sequence).
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

pub fn put(root: &Path, path: &str, bytes: &[u8], owner: (u32, u32), mode: u32) {
    let file = root.join(path);
    std::fs::create_dir_all(file.parent().expect("a parent")).expect("a folder");
    std::fs::write(&file, bytes).expect("a file");
    std::os::unix::fs::chown(&file, Some(owner.0), Some(owner.1)).expect("an owner");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).expect("a mode");
}

pub fn folder(root: &Path, path: &str, owner: (u32, u32), mode: u32) {
    let dir = root.join(path);
    std::fs::create_dir_all(&dir).expect("a folder");
    std::os::unix::fs::chown(&dir, Some(owner.0), Some(owner.1)).expect("an owner");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).expect("a mode");
}

/// An application's volume: files of three owners, private files (0600) and folders (0700) that
/// only their owner may read, a symlink, an empty folder, megabytes of data, and what only a
/// restore with CAP_MKNOD and CAP_FSETID gives back: a character device (`mknod c 1 3`) and a
/// set-group-ID file of a group root is not in.
pub fn fill_volume(root: &Path) {
    folder(root, "", (0, 0), 0o755);
    put(root, "index.html", b"<h1>shop</h1>\n", (0, 0), 0o644);
    put(
        root,
        "config/app.key",
        b"not a real key, but private\n",
        (1001, 1001),
        0o600,
    );
    folder(root, "config", (1001, 1001), 0o750);
    put(
        root,
        "uploads/private/invoice-1.pdf",
        &noise(300_000, 7),
        (1002, 1002),
        0o600,
    );
    put(
        root,
        "uploads/private/invoice-2.pdf",
        &noise(1, 9),
        (1002, 1002),
        0o600,
    );
    folder(root, "uploads/private", (1002, 1002), 0o700);
    put(
        root,
        "uploads/photo.jpg",
        &noise(3_000_000, 11),
        (1000, 1000),
        0o640,
    );
    put(root, "uploads/empty.txt", b"", (1000, 1000), 0o644);
    folder(root, "uploads", (1000, 1000), 0o755);
    folder(root, "cache-empty", (1001, 1002), 0o711);
    put(
        root,
        "bin/report",
        b"#!/bin/sh\necho report\n",
        (1000, 1002),
        0o2755,
    );
    folder(root, "bin", (1000, 1000), 0o755);
    let made = Command::new("mknod")
        .arg(root.join("bin/null"))
        .args(["c", "1", "3"])
        .status()
        .expect("mknod");
    assert!(made.success(), "mknod: {made}");
    std::os::unix::fs::lchown(root.join("bin/null"), Some(1001), Some(1002)).expect("its owner");
    std::fs::set_permissions(
        root.join("bin/null"),
        std::fs::Permissions::from_mode(0o660),
    )
    .expect("its mode");
    std::os::unix::fs::symlink("../index.html", root.join("uploads/home")).expect("a symlink");
    std::os::unix::fs::lchown(root.join("uploads/home"), Some(1000), Some(1000))
        .expect("its owner");
    for path in [
        "uploads/private/invoice-1.pdf",
        "uploads/photo.jpg",
        "index.html",
    ] {
        let file = std::fs::File::options()
            .write(true)
            .open(root.join(path))
            .expect("a file");
        file.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000))
            .expect("a time");
    }
}

/// Every entry below `root`: type, mode, owner, size, modification time, SHA-256 or link target.
pub fn tree(root: &Path) -> BTreeMap<String, String> {
    let mut entries = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(path) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path).expect("metadata");
        let relative = path
            .strip_prefix(root)
            .expect("below root")
            .display()
            .to_string();
        let content = if meta.file_type().is_symlink() {
            format!(
                "-> {}",
                std::fs::read_link(&path).expect("a link").display()
            )
        } else if meta.is_dir() {
            for entry in std::fs::read_dir(&path).expect("a folder") {
                pending.push(entry.expect("an entry").path());
            }
            "dir".to_owned()
        } else if meta.file_type().is_char_device() || meta.file_type().is_block_device() {
            let kind = if meta.file_type().is_char_device() {
                "char"
            } else {
                "block"
            };
            format!("{kind} device rdev={:#x}", meta.rdev())
        } else {
            sha256(&path)
        };
        // The folder itself is the claim's root: its time is the restore's, not the backup's.
        let mtime = if relative.is_empty() || meta.file_type().is_symlink() {
            0
        } else {
            meta.mtime()
        };
        entries.insert(
            format!("/{relative}"),
            format!(
                "{content} mode={:o} owner={}:{} size={} mtime={mtime}",
                meta.mode() & 0o7777,
                meta.uid(),
                meta.gid(),
                if meta.is_dir() { 0 } else { meta.size() }
            ),
        );
    }
    entries
}

/// The bytes of the regular files below `root`.
pub fn regular_file_sizes(root: &Path) -> u64 {
    let mut total = 0;
    let mut pending = vec![root.to_path_buf()];
    while let Some(path) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path).expect("metadata");
        if meta.is_dir() {
            pending.extend(
                std::fs::read_dir(&path)
                    .expect("a folder")
                    .map(|e| e.expect("an entry").path()),
            );
        } else if meta.is_file() {
            total += meta.size();
        }
    }
    total
}

pub fn sha256(path: &Path) -> String {
    let output = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum runs");
    assert!(output.status.success(), "sha256sum {}", path.display());
    String::from_utf8_lossy(&output.stdout)
        .split(' ')
        .next()
        .unwrap_or_default()
        .to_owned()
}
