//! The file-system side of a restore: creating entries, writing content, setting metadata.

use super::plan::PlannedEntry;
use crate::error::{Error, Result};
use crate::format::tree::{Metadata, NodeKind};
use nix::sys::stat::{mknod, Mode, SFlag};
use nix::sys::time::TimeSpec;
use nix::unistd::{Gid, Uid};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Condvar, Mutex};

/// Which regular files exist yet. A restore's writers create each file when they first write to
/// it, so that creating tens of thousands of files (mostly kernel time) is spread over the
/// writing threads and overlaps the fetches instead of coming first, on one thread; files no
/// write reaches (empty, or all holes) are created afterwards by [`finish_entries`].
pub struct FileCreation {
    /// Per plan entry: [`NOT_CREATED`], [`CREATING`], [`CREATED`] or [`FAILED`].
    states: Vec<AtomicU8>,
    /// Per plan entry: the size a created file is given (0 for other entries).
    sizes: Vec<u64>,
    /// Wakes writers that wait for a file another one is creating.
    lock: Mutex<()>,
    created: Condvar,
}

const NOT_CREATED: u8 = 0;
const CREATING: u8 = 1;
const CREATED: u8 = 2;
const FAILED: u8 = 3;

impl FileCreation {
    pub fn new(entries: &[PlannedEntry]) -> FileCreation {
        FileCreation {
            states: entries.iter().map(|_| AtomicU8::new(NOT_CREATED)).collect(),
            sizes: entries
                .iter()
                .map(|entry| match entry.node.kind {
                    NodeKind::File { size, .. } => size,
                    _ => 0,
                })
                .collect(),
            lock: Mutex::new(()),
            created: Condvar::new(),
        }
    }

    /// Opens entry `number` for writing, creating it (at its full size, so that skipped blocks
    /// of zeros stay holes) unless another thread did or does.
    fn open(&self, number: usize, path: &Path) -> Result<File> {
        let state = &self.states[number];
        match state.compare_exchange(NOT_CREATED, CREATING, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                let created = create_file(path, self.sizes[number]);
                let outcome = if created.is_ok() { CREATED } else { FAILED };
                {
                    let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
                    state.store(outcome, Ordering::Release);
                }
                self.created.notify_all();
                return created;
            }
            Err(CREATED) => {}
            Err(_) => {
                let mut guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
                while state.load(Ordering::Acquire) == CREATING {
                    guard = self.created.wait(guard).unwrap_or_else(|p| p.into_inner());
                }
                drop(guard);
                if state.load(Ordering::Acquire) == FAILED {
                    return Err(Error::Interrupted(format!(
                        "{} could not be created",
                        path.display()
                    )));
                }
            }
        }
        OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| Error::io(format!("opening {}", path.display()), e))
    }

    fn is_created(&self, number: usize) -> bool {
        self.states[number].load(Ordering::Acquire) == CREATED
    }
}

/// Creates a regular file that must not exist yet (see [`prepare_entries`]) at its full size.
fn create_file(path: &Path, size: u64) -> Result<File> {
    let io = |e| Error::io(format!("creating {}", path.display()), e);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io)?;
    // Holes where content is all zeros stay holes: sparse files stay sparse.
    file.set_len(size).map_err(io)?;
    Ok(file)
}

/// Removes whatever is at `path` unless it is a directory (restoring over an earlier restore).
fn clear(path: &Path) -> Result<()> {
    match fs::symlink_metadata(path) {
        Ok(meta) if !meta.is_dir() => {
            fs::remove_file(path).map_err(|e| Error::io(format!("replacing {}", path.display()), e))
        }
        _ => Ok(()),
    }
}

/// Makes room for a restore's entries before any content is written: creates directories,
/// symlinks and special files, and removes whatever stands where a file goes (restoring over an
/// earlier restore). Regular files are created by their first write, or by [`finish_entries`].
/// Returns warnings for what could not be created (device files without privileges). Entries
/// come in plan order, parents before children.
pub fn prepare_entries(
    entries: &[PlannedEntry],
    paths: &[PathBuf],
    privileged: bool,
) -> Result<Vec<String>> {
    let mut warnings = Vec::new();
    for (entry, path) in entries.iter().zip(paths) {
        create_one(entry, path, privileged, &mut warnings)?;
    }
    Ok(warnings)
}

/// Creates the files that no write created (empty ones, or ones all of zeros), then hard links,
/// once what they link to exists.
pub fn finish_entries(
    entries: &[PlannedEntry],
    hard_links: &HashMap<usize, usize>,
    paths: &[PathBuf],
    creation: &FileCreation,
) -> Result<()> {
    for (number, entry) in entries.iter().enumerate() {
        let is_file = matches!(entry.node.kind, NodeKind::File { .. });
        if is_file && !hard_links.contains_key(&number) && !creation.is_created(number) {
            create_file(&paths[number], creation.sizes[number])?;
        }
    }
    let mut links: Vec<(usize, usize)> = hard_links.iter().map(|(&n, &f)| (n, f)).collect();
    links.sort_unstable();
    for (number, first) in links {
        let path = &paths[number];
        clear(path)?;
        fs::hard_link(&paths[first], path)
            .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
    }
    Ok(())
}

/// Creates one entry at `path`; for a regular file, only makes room for it.
fn create_one(
    entry: &PlannedEntry,
    path: &Path,
    privileged: bool,
    warnings: &mut Vec<String>,
) -> Result<()> {
    let io = |e| Error::io(format!("creating {}", path.display()), e);
    match &entry.node.kind {
        NodeKind::Dir { .. } => match fs::create_dir(path) {
            Ok(()) => {}
            // An existing directory is reused; a symlink in its place is not followed.
            Err(e)
                if e.kind() == ErrorKind::AlreadyExists
                    && fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) => {}
            Err(e) => return Err(io(e)),
        },
        NodeKind::File { .. } => clear(path)?,
        NodeKind::Symlink { target } => {
            clear(path)?;
            std::os::unix::fs::symlink(OsStr::from_bytes(target), path).map_err(io)?;
        }
        NodeKind::Fifo => {
            clear(path)?;
            nix::unistd::mkfifo(path, Mode::from_bits_truncate(0o600)).map_err(|e| io(e.into()))?;
        }
        NodeKind::CharDevice { rdev } | NodeKind::BlockDevice { rdev } => {
            let kind = if matches!(entry.node.kind, NodeKind::CharDevice { .. }) {
                SFlag::S_IFCHR
            } else {
                SFlag::S_IFBLK
            };
            clear(path)?;
            match mknod(path, kind, Mode::from_bits_truncate(0o600), *rdev) {
                Ok(()) => {}
                // Creating device files takes CAP_MKNOD, which a restore pod may lack.
                Err(nix::errno::Errno::EPERM) => warnings.push(format!(
                    "skipped the device file {}: creating it needs root with CAP_MKNOD",
                    path.display()
                )),
                Err(error) if !privileged => warnings.push(format!(
                    "skipped the device file {}: {error} (restore as root)",
                    path.display()
                )),
                Err(error) => return Err(io(error.into())),
            }
        }
    }
    Ok(())
}

/// Writes blobs' plaintext into restored files, keeping the last file open: the blobs of a pack
/// range often follow each other in one file.
pub struct FileWriter {
    open: Option<(usize, File)>,
    creation: std::sync::Arc<FileCreation>,
}

impl FileWriter {
    pub fn new(creation: std::sync::Arc<FileCreation>) -> FileWriter {
        FileWriter {
            open: None,
            creation,
        }
    }

    /// Writes `data` into the file of entry `entry` at `offset`, skipping 4 KiB blocks of zeros:
    /// the file was created at its full length, so they read back as zeros and stay holes.
    pub fn write_at(
        &mut self,
        paths: &[PathBuf],
        entry: usize,
        offset: u64,
        data: &[u8],
    ) -> Result<()> {
        const BLOCK: usize = 4096;
        let path = &paths[entry];
        let is_zero = |block: &[u8]| block.iter().all(|&b| b == 0);
        let mut start = 0;
        while start < data.len() {
            let end_of = |at: usize| (at + BLOCK).min(data.len());
            if is_zero(&data[start..end_of(start)]) {
                start = end_of(start);
                continue;
            }
            let mut end = end_of(start);
            while end < data.len() && !is_zero(&data[end..end_of(end)]) {
                end = end_of(end);
            }
            let file = self.file(path, entry)?;
            file.write_all_at(&data[start..end], offset + start as u64)
                .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
            start = end;
        }
        Ok(())
    }

    fn file(&mut self, path: &Path, entry: usize) -> Result<&File> {
        if self.open.as_ref().map(|(open, _)| *open) != Some(entry) {
            self.open = None; // closed before the next one opens
            let file = self.creation.open(entry, path)?;
            self.open = Some((entry, file));
        }
        Ok(&self.open.as_ref().expect("opened above").1)
    }
}

fn timespec(secs: i64, nanos: u32) -> TimeSpec {
    TimeSpec::new(secs, nanos as i64)
}

/// Owner, mode and times of one entry (owner only when privileged; mode not for symlinks).
/// Returns a warning when a set-user-ID or set-group-ID bit did not hold: the kernel clears
/// set-group-ID without an error where the process lacks CAP_FSETID and the file's group.
fn set_metadata(
    path: &Path,
    kind: &NodeKind,
    meta: &Metadata,
    privileged: bool,
) -> Result<Option<String>> {
    let what =
        |e: nix::Error| Error::io(format!("setting metadata of {}", path.display()), e.into());
    let is_symlink = matches!(kind, NodeKind::Symlink { .. });
    if privileged {
        nix::unistd::fchownat(
            None,
            path,
            Some(Uid::from_raw(meta.uid)),
            Some(Gid::from_raw(meta.gid)),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(what)?;
    }
    if !is_symlink {
        fs::set_permissions(path, fs::Permissions::from_mode(meta.mode))
            .map_err(|e| Error::io(format!("setting the mode of {}", path.display()), e))?;
    }
    let mtime = timespec(meta.mtime.secs, meta.mtime.nanos);
    nix::sys::stat::utimensat(
        None,
        path,
        &TimeSpec::UTIME_OMIT,
        &mtime,
        nix::sys::stat::UtimensatFlags::NoFollowSymlink,
    )
    .map_err(what)?;
    Ok(special_bits_lost(path, kind, meta.mode))
}

/// A warning when `path` lacks set-user-ID or set-group-ID bits `mode` asks for.
fn special_bits_lost(path: &Path, kind: &NodeKind, mode: u32) -> Option<String> {
    let wanted = mode & 0o6000;
    if wanted == 0 || matches!(kind, NodeKind::Symlink { .. }) {
        return None;
    }
    let has = fs::symlink_metadata(path).ok()?.permissions().mode() & 0o6000;
    (has != wanted).then(|| {
        format!(
            "the set-user-ID or set-group-ID bit of {} was not restored (mode {:04o} asked, {:04o} set): it needs root with CAP_FSETID",
            path.display(),
            mode,
            has | (mode & 0o1777)
        )
    })
}

/// Sets metadata on every entry: files first, then directories deepest first (writing into a
/// directory changes its modification time, and a read-only one could not be written into).
pub fn apply_metadata(
    entries: &[PlannedEntry],
    hard_links: &HashMap<usize, usize>,
    paths: &[PathBuf],
    privileged: bool,
) -> Result<Vec<String>> {
    let mut warnings = Vec::new();
    for (number, entry) in entries.iter().enumerate() {
        if matches!(entry.node.kind, NodeKind::Dir { .. }) || hard_links.contains_key(&number) {
            continue;
        }
        if matches!(
            entry.node.kind,
            NodeKind::CharDevice { .. } | NodeKind::BlockDevice { .. }
        ) && fs::symlink_metadata(&paths[number]).is_err()
        {
            continue; // not created, already warned about
        }
        warnings.extend(set_metadata(
            &paths[number],
            &entry.node.kind,
            &entry.node.meta,
            privileged,
        )?);
    }
    for (number, entry) in entries.iter().enumerate().rev() {
        if matches!(entry.node.kind, NodeKind::Dir { .. }) {
            warnings.extend(set_metadata(
                &paths[number],
                &entry.node.kind,
                &entry.node.meta,
                privileged,
            )?);
        }
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::tree::Node;
    use std::sync::Arc;

    fn file_entry(size: u64) -> PlannedEntry {
        PlannedEntry {
            path: b"f".to_vec(),
            node: Node {
                name: b"f".to_vec(),
                kind: NodeKind::File {
                    size,
                    content: vec![],
                },
                meta: Metadata {
                    mode: 0o644,
                    uid: 0,
                    gid: 0,
                    mtime: Default::default(),
                    ctime: Default::default(),
                    inode: 1,
                    device: 1,
                    links: 1,
                },
            },
        }
    }

    /// Writers racing to a file that does not exist yet: one creates it, the others wait and
    /// open it, and every write lands.
    #[test]
    fn racing_writers_create_a_file_once_and_all_their_writes_land() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Arc::new(vec![dir.path().join("f")]);
        let creation = Arc::new(FileCreation::new(&[file_entry(8 * 4096)]));
        let writers: Vec<_> = (0..8u8)
            .map(|n| {
                let (paths, creation) = (paths.clone(), creation.clone());
                std::thread::spawn(move || {
                    let mut writer = FileWriter::new(creation);
                    let block = vec![n + 1; 4096];
                    writer
                        .write_at(&paths, 0, u64::from(n) * 4096, &block)
                        .unwrap();
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        let written = fs::read(&paths[0]).unwrap();
        assert_eq!(written.len(), 8 * 4096);
        for (n, block) in written.chunks(4096).enumerate() {
            assert!(block.iter().all(|&b| b == n as u8 + 1), "block {n}");
        }
    }

    /// A file that cannot be created fails its first writer with the reason, and every writer
    /// that waited for it with an error rather than a hang.
    #[test]
    fn a_file_that_cannot_be_created_fails_every_writer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing-dir/f");
        let creation = FileCreation::new(&[file_entry(10)]);
        let first = creation.open(0, &path).unwrap_err();
        assert!(first.to_string().contains("creating"), "{first}");
        assert!(creation.open(0, &path).is_err());
        assert!(!creation.is_created(0));
    }
}
