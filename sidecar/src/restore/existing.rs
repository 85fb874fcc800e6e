//! What a restore does where the target already holds something: restic's `--overwrite`
//! policies, type conflicts (a folder where a file belongs, or the reverse) and `--delete`.
//!
//! Everything is looked at and removed relative to its directory's descriptor without following
//! a symlink: a symlink in the target is an entry like any other, replaced or removed itself,
//! never what it points to.

use super::plan::{PlannedEntry, RestorePlan};
use crate::crypto::RepositoryKeys;
use crate::error::{Error, Result};
use crate::format::tree::NodeKind;
use crate::ids::{BlobId, BlobKind};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};
use nix::unistd::UnlinkatFlags;
use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;

pub use neverwiped_contract::cli::Overwrite;

/// What a restore does with what already stands in the target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExistingPolicy {
    pub overwrite: Overwrite,
    /// Remove, in every folder restored whole, what the snapshot does not hold there; a folder
    /// that is not empty may then be replaced by a file of the snapshot.
    pub delete: bool,
}

/// What becomes of one entry's place in the target.
#[derive(Debug)]
pub enum Decision {
    /// Nothing stands there (any more): create the entry. (A folder where a folder goes is
    /// reused.)
    Create,
    /// The file already holds the snapshot's content: only its metadata is set, on this
    /// descriptor.
    Keep(File),
    /// What stands there stays as it is: the policy keeps it.
    Leave,
    /// What stands there stays although the policy would replace it (a folder that is not empty
    /// where a non-folder goes, without `--delete`): the message says so.
    Blocked(String),
}

/// Whether the existing entry `stat` is a directory.
fn is_dir(stat: &FileStat) -> bool {
    SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFDIR
}

fn is_file(stat: &FileStat) -> bool {
    SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFREG
}

/// What stands at `name` in `dir`, without following a symlink; `None` when nothing does.
fn look(dir: RawFd, name: &[u8]) -> nix::Result<Option<FileStat>> {
    match nix::sys::stat::fstatat(Some(dir), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) => Ok(Some(stat)),
        Err(Errno::ENOENT) => Ok(None),
        Err(errno) => Err(errno),
    }
}

/// Decides, and makes room for, one entry of the plan in its directory `dir`: removes what the
/// policy replaces, keeps a file that already holds the snapshot's content.
pub fn settle(
    dir: RawFd,
    number: usize,
    entry: &PlannedEntry,
    policy: ExistingPolicy,
    content: &ContentCheck,
    what: &dyn Fn() -> String,
) -> Result<Decision> {
    let name = entry.node.name.as_slice();
    let io = |action: &str, errno: Errno| Error::io(format!("{action} {}", what()), errno.into());
    let Some(stat) = look(dir, name).map_err(|e| io("looking at", e))? else {
        return Ok(Decision::Create);
    };
    if matches!(entry.node.kind, NodeKind::Dir { .. }) {
        if !is_dir(&stat) {
            remove_entry(dir, name).map_err(|e| io("replacing", e))?;
        }
        return Ok(Decision::Create);
    }
    let replace = match policy.overwrite {
        Overwrite::Always | Overwrite::IfChanged => true,
        Overwrite::IfNewer => {
            let snapshot = (
                entry.node.meta.mtime.secs,
                i64::from(entry.node.meta.mtime.nanos),
            );
            snapshot > (stat.st_mtime, stat.st_mtime_nsec)
        }
        Overwrite::Never => false,
    };
    if !replace {
        return Ok(Decision::Leave);
    }
    if is_dir(&stat) {
        if policy.delete {
            remove_tree(dir, name).map_err(|e| io("replacing the folder", e))?;
            return Ok(Decision::Create);
        }
        return match nix::unistd::unlinkat(Some(dir), name, UnlinkatFlags::RemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(Decision::Create),
            Err(Errno::ENOTEMPTY | Errno::EEXIST) => Ok(Decision::Blocked(format!(
                "{} was not restored: a folder that is not empty stands there; restore with \
                 --delete to replace it",
                what()
            ))),
            Err(errno) => Err(io("replacing the folder", errno)),
        };
    }
    if policy.overwrite == Overwrite::IfChanged && is_file(&stat) {
        if let Some(file) = content
            .identical(dir, number, entry, &stat)
            .map_err(|e| Error::io(format!("comparing {}", what()), e))?
        {
            return Ok(Decision::Keep(file));
        }
    }
    remove_entry(dir, name).map_err(|e| io("replacing", e))?;
    Ok(Decision::Create)
}

/// Removes the non-directory `name` of `dir` (gone already is fine).
fn remove_entry(dir: RawFd, name: &[u8]) -> nix::Result<()> {
    match nix::unistd::unlinkat(Some(dir), name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(errno) => Err(errno),
    }
}

/// Removes `name` of `dir` and, when it is a directory, everything below it: each directory is
/// opened without following a symlink, so a symlink below is removed, never followed.
pub fn remove_tree(dir: RawFd, name: &[u8]) -> nix::Result<()> {
    let Some(stat) = look(dir, name)? else {
        return Ok(());
    };
    if !is_dir(&stat) {
        return remove_entry(dir, name);
    }
    let child = super::dirs::open_child(dir, name)?;
    for entry_name in names_in(&child)? {
        remove_tree(child.as_raw_fd(), &entry_name)?;
    }
    drop(child);
    match nix::unistd::unlinkat(Some(dir), name, UnlinkatFlags::RemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(errno) => Err(errno),
    }
}

/// The names in the open directory `dir` (without `.` and `..`).
pub fn names_in(dir: &OwnedFd) -> nix::Result<Vec<Vec<u8>>> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let mut listing = nix::dir::Dir::openat(Some(dir.as_raw_fd()), ".", flags, Mode::empty())?;
    let mut names = Vec::new();
    for entry in listing.iter() {
        let name = entry?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            names.push(name);
        }
    }
    Ok(names)
}

/// Removes from the open directory `dir` every entry whose name `snapshot_names` (sorted) lacks;
/// returns how many were removed.
pub fn delete_extras(dir: &OwnedFd, snapshot_names: &[Vec<u8>]) -> nix::Result<u64> {
    let mut removed = 0;
    for name in names_in(dir)? {
        if snapshot_names.binary_search(&name).is_err() {
            remove_tree(dir.as_raw_fd(), &name)?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Tells whether an existing file holds a planned file's content: by size and modification
/// time, else by reading it and comparing each piece with the blob the snapshot has there.
pub struct ContentCheck {
    keys: Option<RepositoryKeys>,
    /// Per file entry of the plan, its blobs by offset: (offset, length, id).
    layout: HashMap<usize, Vec<(u64, u32, BlobId)>>,
}

impl ContentCheck {
    /// The check for `plan`; `None` keys: no file is ever taken as identical.
    pub fn new(plan: &RestorePlan, keys: Option<RepositoryKeys>) -> ContentCheck {
        let mut layout: HashMap<usize, Vec<(u64, u32, BlobId)>> = HashMap::new();
        if keys.is_some() {
            for blob in plan.packs.iter().flat_map(|(_, blobs)| blobs) {
                for target in &blob.targets {
                    layout.entry(target.entry).or_default().push((
                        target.offset,
                        blob.location.raw_length,
                        blob.id,
                    ));
                }
            }
            for pieces in layout.values_mut() {
                pieces.sort_unstable_by_key(|piece| piece.0);
            }
        }
        ContentCheck { keys, layout }
    }

    /// The existing file `name` in `dir`, opened, when it holds the content of entry `number`.
    fn identical(
        &self,
        dir: RawFd,
        number: usize,
        entry: &PlannedEntry,
        stat: &FileStat,
    ) -> std::io::Result<Option<File>> {
        let (Some(keys), NodeKind::File { size, .. }) = (&self.keys, &entry.node.kind) else {
            return Ok(None);
        };
        let pieces = self.layout.get(&number).map_or(&[][..], Vec::as_slice);
        // A hard link of the plan has no pieces of its own: it is linked anew.
        if u64::try_from(stat.st_size) != Ok(*size) || (*size > 0 && pieces.is_empty()) {
            return Ok(None);
        }
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let name = entry.node.name.as_slice();
        let raw = nix::fcntl::openat(Some(dir), name, flags, Mode::empty())?;
        // SAFETY: `raw` was just opened and is owned by nothing else.
        let file = unsafe { File::from_raw_fd(raw) };
        let opened = nix::sys::stat::fstat(file.as_raw_fd())?;
        if (opened.st_dev, opened.st_ino) != (stat.st_dev, stat.st_ino) {
            return Ok(None);
        }
        let meta = &entry.node.meta;
        if (opened.st_mtime, opened.st_mtime_nsec) == (meta.mtime.secs, i64::from(meta.mtime.nanos))
        {
            return Ok(Some(file));
        }
        let mut buffer = Vec::new();
        for (offset, length, id) in pieces {
            buffer.resize(*length as usize, 0);
            match file.read_exact_at(&mut buffer, *offset) {
                Ok(()) => {}
                // Shortened since it was looked at: not the snapshot's content.
                Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
                Err(error) => return Err(error),
            }
            if keys.blob_id(BlobKind::Data, &buffer) != *id {
                return Ok(None);
            }
        }
        Ok(Some(file))
    }
}
