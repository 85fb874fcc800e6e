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

/// Removes whatever is at `path` unless it is a directory (restoring over an earlier restore).
fn clear(path: &Path) -> Result<()> {
    match fs::symlink_metadata(path) {
        Ok(meta) if !meta.is_dir() => {
            fs::remove_file(path).map_err(|e| Error::io(format!("replacing {}", path.display()), e))
        }
        _ => Ok(()),
    }
}

/// Creates directories, empty files of the right size, links and special files. Returns warnings
/// for what could not be created (device files without privileges). Entries come in plan order
/// (parents before children); hard links last, once what they link to exists.
pub fn create_entries(
    entries: &[PlannedEntry],
    hard_links: &HashMap<usize, usize>,
    paths: &[PathBuf],
    privileged: bool,
) -> Result<Vec<String>> {
    let mut warnings = Vec::new();
    for (number, entry) in entries.iter().enumerate() {
        if !hard_links.contains_key(&number) {
            create_one(entry, &paths[number], None, privileged, &mut warnings)?;
        }
    }
    let mut links: Vec<(usize, usize)> = hard_links.iter().map(|(&n, &f)| (n, f)).collect();
    links.sort_unstable();
    for (number, first) in links {
        create_one(
            &entries[number],
            &paths[number],
            Some(&paths[first]),
            privileged,
            &mut warnings,
        )?;
    }
    Ok(warnings)
}

/// Creates one entry at `path` (a hard link to `link_to` when given).
fn create_one(
    entry: &PlannedEntry,
    path: &Path,
    link_to: Option<&Path>,
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
        NodeKind::File { size, .. } => {
            clear(path)?;
            if let Some(first) = link_to {
                fs::hard_link(first, path).map_err(io)?;
                return Ok(());
            }
            let file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(io)?;
            // Holes where content is all zeros stay holes: sparse files stay sparse.
            file.set_len(*size).map_err(io)?;
        }
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
            if let Err(error) = mknod(path, kind, Mode::from_bits_truncate(0o600), *rdev) {
                if privileged {
                    return Err(io(error.into()));
                }
                warnings.push(format!(
                    "cannot create the device file {}: {error} (restore as root)",
                    path.display()
                ));
            }
        }
    }
    Ok(())
}

/// Writes blobs' plaintext into restored files, keeping the last file open: the blobs of a pack
/// range often follow each other in one file.
#[derive(Default)]
pub struct FileWriter {
    open: Option<(usize, File)>,
}

impl FileWriter {
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
            let file = OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
            self.open = Some((entry, file));
        }
        Ok(&self.open.as_ref().expect("opened above").1)
    }
}

fn timespec(secs: i64, nanos: u32) -> TimeSpec {
    TimeSpec::new(secs, nanos as i64)
}

/// Owner, mode and times of one entry (owner only when privileged; mode not for symlinks).
fn set_metadata(path: &Path, kind: &NodeKind, meta: &Metadata, privileged: bool) -> Result<()> {
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
    .map_err(what)
}

/// Sets metadata on every entry: files first, then directories deepest first (writing into a
/// directory changes its modification time, and a read-only one could not be written into).
pub fn apply_metadata(
    entries: &[PlannedEntry],
    hard_links: &HashMap<usize, usize>,
    paths: &[PathBuf],
    privileged: bool,
) -> Result<Vec<String>> {
    let warnings = Vec::new();
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
        set_metadata(
            &paths[number],
            &entry.node.kind,
            &entry.node.meta,
            privileged,
        )?;
    }
    for (number, entry) in entries.iter().enumerate().rev() {
        if matches!(entry.node.kind, NodeKind::Dir { .. }) {
            set_metadata(
                &paths[number],
                &entry.node.kind,
                &entry.node.meta,
                privileged,
            )?;
        }
    }
    Ok(warnings)
}
