//! Making room for a restore batch: each entry's place in the target is settled by the
//! overwrite policy (see `existing`), directories, symlinks and special files are created,
//! `--delete` cleans the directories the batch restores whole, and the content of files that are
//! kept or left is taken out of the batch's plan.

use super::dirs::{self, DirFd, DirOpener};
use super::existing::{self, ContentCheck, Decision, ExistingPolicy};
use super::files::{make_replacing, BatchFiles, FileState};
use super::metadata;
use super::plan::{PlannedEntry, RestorePlan};
use crate::error::{Error, Result};
use crate::format::tree::NodeKind;
use nix::errno::Errno;
use nix::sys::stat::{Mode, SFlag};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

/// How a batch meets the target: as root or not, and what it does with what stands there.
#[derive(Clone)]
pub struct PrepareSettings {
    pub privileged: bool,
    pub policy: ExistingPolicy,
    /// The repository's keys, to compare existing files with the snapshot's content
    /// (`if-changed`).
    pub keys: Option<crate::crypto::RepositoryKeys>,
}

/// A batch made ready for its content.
pub struct PreparedBatch {
    pub files: BatchFiles,
    /// Entries not restored as stored, and other warnings.
    pub warnings: Vec<String>,
    /// Files that already held the snapshot's content (only their metadata was set).
    pub kept: u64,
    /// Entries left as they stood, as the overwrite policy asks.
    pub left: u64,
    /// Entries `--delete` removed.
    pub deleted: u64,
}

/// Makes room for a batch: opens the directory of every entry (by descriptor, from the target
/// down), settles what already stands at each entry's place (see `existing`), creates
/// directories, symlinks and special files and sets the metadata of symlinks and special files,
/// then removes (`--delete`) what the batch's complete directories should not hold. Regular
/// files are created by their first write, or when the batch ends. Entries come in plan order,
/// parents before children.
pub fn prepare_batch(
    mut plan: RestorePlan,
    opener: &mut DirOpener,
    settings: &PrepareSettings,
) -> Result<PreparedBatch> {
    let mut warnings = Vec::new();
    let (mut kept, mut left) = (0, 0);
    let mut dir_fds: Vec<Option<DirFd>> = vec![None; plan.dirs.len()];
    let content = ContentCheck::new(&plan, settings.keys.clone());
    let mut states = Vec::with_capacity(plan.entries.len());
    for (number, entry) in plan.entries.iter().enumerate() {
        let dir = match &dir_fds[entry.parent] {
            Some(dir) => dir.clone(),
            None => {
                let dir = opener.open(&plan.dirs[entry.parent])?;
                dir_fds[entry.parent] = Some(dir.clone());
                dir
            }
        };
        let what = || opener.display(&entry.path);
        let decision = existing::settle(
            dir.as_raw_fd(),
            number,
            entry,
            settings.policy,
            &content,
            &what,
        )?;
        states.push(match decision {
            Decision::Create => {
                warnings.extend(create_one(
                    entry,
                    dir.as_raw_fd(),
                    settings.privileged,
                    &what,
                )?);
                FileState::NotCreated
            }
            Decision::Keep(file) => {
                kept += 1;
                FileState::Kept(Arc::new(file))
            }
            Decision::Leave => {
                left += 1;
                FileState::Left
            }
            Decision::Blocked(message) => {
                warnings.push(message);
                FileState::Left
            }
        });
    }
    let mut deleted = 0;
    for (path, names) in &plan.complete_dirs {
        let dir = opener.open(path)?;
        deleted += existing::delete_extras(&dir, names).map_err(|errno| {
            let what = format!(
                "removing what the snapshot lacks from {}",
                opener.display(path)
            );
            Error::io(what, errno.into())
        })?;
    }
    let unwritten: Vec<bool> = states
        .iter()
        .map(|state| matches!(state, FileState::Kept(_) | FileState::Left))
        .collect();
    drop_content_of(&mut plan, &unwritten);
    let target = opener.target().to_path_buf();
    let files = BatchFiles::new(
        Arc::new(plan),
        dir_fds,
        states,
        &target,
        settings.privileged,
    );
    Ok(PreparedBatch {
        files,
        warnings,
        kept,
        left,
        deleted,
    })
}

/// Takes out of the plan the content of the entries that are not written.
fn drop_content_of(plan: &mut RestorePlan, unwritten: &[bool]) {
    let mut dropped = std::collections::HashSet::new();
    for (_, blobs) in &mut plan.packs {
        for blob in blobs.iter_mut() {
            blob.targets.retain(|target| {
                let drop = unwritten[target.entry];
                if drop {
                    dropped.insert(target.entry);
                }
                !drop
            });
        }
        blobs.retain(|blob| !blob.targets.is_empty());
    }
    plan.packs.retain(|(_, blobs)| !blobs.is_empty());
    for number in dropped {
        if let NodeKind::File { size, .. } = plan.entries[number].node.kind {
            plan.total_bytes -= size;
        }
    }
}

/// Creates one entry that is not a regular file in `dir`, with its metadata (a directory gets
/// its own at the end of the restore).
fn create_one(
    entry: &PlannedEntry,
    dir: RawFd,
    privileged: bool,
    what: &dyn Fn() -> String,
) -> Result<Option<String>> {
    let name = entry.node.name.as_slice();
    let io = |e: Errno| dirs::changed(format!("creating {}", what()), e);
    let special = |kind: SFlag, rdev: u64| {
        nix::sys::stat::mknodat(Some(dir), name, kind, Mode::from_bits_truncate(0o600), rdev)
    };
    let made = match &entry.node.kind {
        NodeKind::Dir { .. } => return dirs::make_child(dir, name).map(|()| None).map_err(io),
        NodeKind::File { .. } => return Ok(None),
        NodeKind::Symlink { target } => make_replacing(dir, name, || {
            nix::unistd::symlinkat(target.as_slice(), Some(dir), name)
        }),
        NodeKind::Fifo => make_replacing(dir, name, || special(SFlag::S_IFIFO, 0)),
        NodeKind::CharDevice { rdev } => {
            make_replacing(dir, name, || special(SFlag::S_IFCHR, *rdev))
        }
        NodeKind::BlockDevice { rdev } => {
            make_replacing(dir, name, || special(SFlag::S_IFBLK, *rdev))
        }
    };
    let is_device = matches!(
        entry.node.kind,
        NodeKind::CharDevice { .. } | NodeKind::BlockDevice { .. }
    );
    match made {
        Ok(()) => {}
        // Creating device files takes CAP_MKNOD, which a restore pod may lack.
        Err(Errno::EPERM) if is_device => {
            return Ok(Some(format!(
                "skipped the device file {}: creating it needs root with CAP_MKNOD",
                what()
            )))
        }
        Err(error) if is_device && !privileged => {
            return Ok(Some(format!(
                "skipped the device file {}: {error} (restore as root)",
                what()
            )))
        }
        Err(error) => return Err(io(error)),
    }
    metadata::set_by_name(
        dir,
        name,
        &entry.node.kind,
        &entry.node.meta,
        privileged,
        what,
    )
}
