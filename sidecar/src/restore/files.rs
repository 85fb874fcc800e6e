//! The file-system side of a restore batch: creating entries relative to their directory's
//! descriptor, writing content through the descriptor each file was created with, setting
//! metadata on what was opened.
//!
//! Nothing here names an entry by a path: a directory swapped for a symlink during the restore is
//! never followed (see `dirs`), and a file is written only through the descriptor that created it
//! (`O_CREAT | O_EXCL | O_NOFOLLOW`), so an entry swapped in after it was made is never written.

use super::dirs::{DirFd, DirOpener};
use super::metadata;
use super::plan::{PlannedEntry, RestorePlan};
use crate::error::{Error, Result};
use crate::format::tree::{Metadata, NodeKind};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, SFlag};
use nix::unistd::UnlinkatFlags;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// Where a regular file of the batch stands.
pub(super) enum FileState {
    NotCreated,
    /// Created, some of its content still to come: writers share this descriptor.
    Open(Arc<File>),
    /// All content written and metadata set; closed.
    Finished,
    Failed,
    /// An existing file that already holds the content: it gets the metadata when the batch ends.
    Kept(Arc<File>),
    /// What stands at its place stays (the overwrite policy): nothing is written.
    Left,
}

/// A regular file of the batch: its state and how many of its blob targets are still to write.
struct FileSlot {
    state: Mutex<FileState>,
    remaining: AtomicU32,
}

/// The entries of one batch as the writing threads share them. A file is created by the first
/// write that needs it (so that creating tens of thousands of files, mostly kernel time, is
/// spread over the writing threads and overlaps the fetches), and gets its metadata and is
/// closed by the write that completes it.
pub struct BatchFiles {
    plan: Arc<RestorePlan>,
    /// Per directory of the plan, its descriptor (opened by [`prepare_batch`]).
    dir_fds: Vec<Option<DirFd>>,
    /// Per plan entry (regular files only are used).
    slots: Vec<FileSlot>,
    target: PathBuf,
    privileged: bool,
    warnings: Mutex<Vec<String>>,
    /// Whether a blob of the batch was lost to damage (its files then get their length set).
    damaged: AtomicBool,
}

impl BatchFiles {
    pub(super) fn new(
        plan: Arc<RestorePlan>,
        dir_fds: Vec<Option<DirFd>>,
        states: Vec<FileState>,
        target: &Path,
        privileged: bool,
    ) -> BatchFiles {
        let slots: Vec<FileSlot> = states
            .into_iter()
            .map(|state| FileSlot {
                state: Mutex::new(state),
                remaining: AtomicU32::new(0),
            })
            .collect();
        for (_, blobs) in &plan.packs {
            for target in blobs.iter().flat_map(|blob| &blob.targets) {
                slots[target.entry]
                    .remaining
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        BatchFiles {
            plan,
            dir_fds,
            slots,
            target: target.to_path_buf(),
            privileged,
            warnings: Mutex::new(Vec::new()),
            damaged: AtomicBool::new(false),
        }
    }

    /// The batch's plan (without the content of the files it keeps or leaves).
    pub fn plan(&self) -> &Arc<RestorePlan> {
        &self.plan
    }

    /// Whether the entry `number` is left as it stands (the overwrite policy).
    fn is_left(&self, number: usize) -> bool {
        let state = self.slots[number]
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        matches!(*state, FileState::Left)
    }

    /// Removes every file of the batch that was created but not finished (the restore stopped
    /// while writing it), so that no file in the target looks whole without being so. Returns
    /// their paths.
    pub fn remove_unfinished(&self) -> Vec<String> {
        let mut removed = Vec::new();
        for number in 0..self.slots.len() {
            let mut state = self.slots[number]
                .state
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if let FileState::Open(file) = &*state {
                match self.discard(number, file) {
                    Ok(()) => removed.push(self.display(number)),
                    Err(errno) => tracing::warn!(
                        "could not remove the unfinished file {}: {errno}",
                        self.display(number)
                    ),
                }
                *state = FileState::Failed;
            }
        }
        removed
    }

    /// Removes file `number` from its directory, if what stands there is still `file`.
    fn discard(&self, number: usize, file: &File) -> nix::Result<()> {
        let entry = &self.plan.entries[number];
        let dir = self.dir_fd(entry);
        let name = entry.node.name.as_slice();
        let ours = nix::sys::stat::fstat(file.as_raw_fd())?;
        let there = nix::sys::stat::fstatat(Some(dir), name, AtFlags::AT_SYMLINK_NOFOLLOW)?;
        if (ours.st_dev, ours.st_ino) != (there.st_dev, there.st_ino) {
            return Ok(());
        }
        nix::unistd::unlinkat(Some(dir), name, UnlinkatFlags::NoRemoveDir)
    }

    /// The restored path of entry `number`, for messages.
    pub fn display(&self, number: usize) -> String {
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::OsStr::from_bytes(&self.plan.entries[number].path);
        self.target.join(path).display().to_string()
    }

    fn dir_fd(&self, entry: &PlannedEntry) -> RawFd {
        self.dir_fds[entry.parent]
            .as_ref()
            .expect("prepare_batch opens the directory of every entry")
            .as_raw_fd()
    }

    /// The descriptor of file `number`, creating the file unless another thread did.
    fn open(&self, number: usize) -> Result<Arc<File>> {
        let mut state = self.slots[number]
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match &*state {
            FileState::Open(file) => Ok(file.clone()),
            FileState::NotCreated => match self.create(number) {
                Ok(file) => {
                    let file = Arc::new(file);
                    *state = FileState::Open(file.clone());
                    Ok(file)
                }
                Err(error) => {
                    *state = FileState::Failed;
                    Err(error)
                }
            },
            FileState::Finished | FileState::Failed | FileState::Kept(_) | FileState::Left => Err(
                Error::Interrupted(format!("{} could not be created", self.display(number))),
            ),
        }
    }

    fn size(&self, number: usize) -> u64 {
        match self.plan.entries[number].node.kind {
            NodeKind::File { size, .. } => size,
            _ => 0,
        }
    }

    /// Creates file `number` in its directory, empty, replacing what an earlier restore left
    /// there. (Its length is set where the writes do not reach it: see [`write_at`].)
    fn create(&self, number: usize) -> Result<File> {
        let entry = &self.plan.entries[number];
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let dir = self.dir_fd(entry);
        let name = entry.node.name.as_slice();
        let io = |e: Errno| Error::io(format!("creating {}", self.display(number)), e.into());
        let mode = Mode::from_bits_truncate(creation_mode(entry.node.meta.mode).unwrap_or(0o600));
        let open = || nix::fcntl::openat(Some(dir), name, flags, mode);
        let raw = match open() {
            Err(Errno::EEXIST) => {
                replace(dir, name).map_err(io)?;
                open().map_err(io)?
            }
            other => other.map_err(io)?,
        };
        // SAFETY: `raw` was just opened and is owned by nothing else.
        Ok(unsafe { File::from_raw_fd(raw) })
    }

    /// Gives file `number` its full length: its end was not written (zeros left as a hole, or
    /// content lost to damage).
    fn set_full_length(&self, number: usize, file: &File) -> Result<()> {
        file.set_len(self.size(number))
            .map_err(|e| Error::io(format!("writing {}", self.display(number)), e))
    }

    /// Records that a blob target of file `number` is lost to damage (it reads as zeros).
    pub fn target_damaged(&self, number: usize) -> Result<()> {
        self.damaged.store(true, Ordering::Relaxed);
        self.target_done(number).map(|_| ())
    }

    /// Records that one blob target of file `number` is written (or lost to damage); the last
    /// one sets the file's metadata and closes it. Returns whether it was the last one.
    pub fn target_done(&self, number: usize) -> Result<bool> {
        let last = self.slots[number].remaining.fetch_sub(1, Ordering::AcqRel) == 1;
        if last {
            self.finish(number)?;
        }
        Ok(last)
    }

    /// Sets the metadata of file `number` on its descriptor (creating it if no write did: empty,
    /// all zeros, or all damaged) and closes it.
    fn finish(&self, number: usize) -> Result<()> {
        let file = {
            let mut state = self.slots[number]
                .state
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            match std::mem::replace(&mut *state, FileState::Finished) {
                FileState::Open(file) if self.damaged.load(Ordering::Relaxed) => {
                    if let Err(error) = self.set_full_length(number, &file) {
                        let _ = self.discard(number, &file);
                        return Err(error);
                    }
                    file
                }
                FileState::Open(file) | FileState::Kept(file) => file,
                FileState::NotCreated => {
                    let file = self.create(number)?;
                    if self.size(number) > 0 {
                        if let Err(error) = self.set_full_length(number, &file) {
                            let _ = self.discard(number, &file);
                            return Err(error);
                        }
                    }
                    Arc::new(file)
                }
                FileState::Finished => return Ok(()),
                FileState::Left => {
                    *state = FileState::Left;
                    return Ok(());
                }
                FileState::Failed => {
                    *state = FileState::Failed;
                    return Ok(());
                }
            }
        };
        let meta = &self.plan.entries[number].node.meta;
        let what = || self.display(number);
        let mode_set = creation_mode(meta.mode).is_some();
        let lost =
            metadata::set_on_descriptor(file.as_raw_fd(), meta, self.privileged, mode_set, &what)?;
        self.warnings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(lost);
        Ok(())
    }
}

/// The mode to create a file with so that it needs no `fchmod`: its own, when the process's
/// umask leaves it whole and it has no set-user-ID, set-group-ID or sticky bit (an owner change
/// would clear the first two). `None`: create it private and set the mode afterwards.
fn creation_mode(mode: u32) -> Option<u32> {
    static UMASK: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    let umask = (*UMASK.get_or_init(read_umask))?;
    (mode & 0o7000 == 0 && mode & 0o777 & umask == 0).then_some(mode & 0o777)
}

/// The process's umask, read without changing it (`umask(2)` can only set it).
fn read_umask() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status
        .lines()
        .find_map(|line| line.strip_prefix("Umask:"))?;
    u32::from_str_radix(line.trim(), 8).ok()
}

/// Removes what stands at `name` in `dir` unless it is a directory (restoring over an earlier
/// restore); a directory is left for the retried creation to fail on.
fn replace(dir: RawFd, name: &[u8]) -> nix::Result<()> {
    let stat = nix::sys::stat::fstatat(Some(dir), name, AtFlags::AT_SYMLINK_NOFOLLOW)?;
    if SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFDIR {
        return Err(Errno::EEXIST);
    }
    match nix::unistd::unlinkat(Some(dir), name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(errno) => Err(errno),
    }
}

/// Runs `make` for `name` in `dir`; when something stands there, removes it and tries again.
pub(super) fn make_replacing(
    dir: RawFd,
    name: &[u8],
    make: impl Fn() -> nix::Result<()>,
) -> nix::Result<()> {
    match make() {
        Err(Errno::EEXIST) => {
            replace(dir, name)?;
            make()
        }
        other => other,
    }
}

/// Ends a batch: creates and finishes the files no write completed (empty ones, ones all of
/// zeros), then makes the hard links, once what they link to exists. Returns the warnings of
/// the batch's files.
pub fn finish_batch(files: &BatchFiles, opener: &mut DirOpener) -> Result<Vec<String>> {
    let plan = &files.plan;
    for (number, entry) in plan.entries.iter().enumerate() {
        let is_file = matches!(entry.node.kind, NodeKind::File { .. });
        if is_file && !plan.hard_links.contains_key(&number) {
            files.finish(number)?;
        }
    }
    let mut links: Vec<(usize, usize)> = plan.hard_links.iter().map(|(&n, &f)| (n, f)).collect();
    links.sort_unstable();
    links.retain(|(number, _)| !files.is_left(*number));
    for (number, first) in links {
        let from = &plan.entries[first];
        link(files, number, files.dir_fd(from), &from.node.name)?;
    }
    for (number, first_path) in &plan.earlier_links {
        if files.is_left(*number) {
            continue;
        }
        let (parent, name) = match first_path.iter().rposition(|&b| b == b'/') {
            Some(at) => (&first_path[..at], &first_path[at + 1..]),
            None => (&first_path[..0], first_path.as_slice()),
        };
        let from_dir = opener.open(parent)?;
        link(files, *number, from_dir.as_raw_fd(), name)?;
    }
    Ok(std::mem::take(
        &mut *files.warnings.lock().unwrap_or_else(|p| p.into_inner()),
    ))
}

/// Makes entry `number` a hard link to `name` in `from_dir` (the link itself, never a symlink's
/// target: `linkat` without `AT_SYMLINK_FOLLOW`).
fn link(files: &BatchFiles, number: usize, from_dir: RawFd, name: &[u8]) -> Result<()> {
    let entry = &files.plan.entries[number];
    let dir = files.dir_fd(entry);
    let new = entry.node.name.as_slice();
    make_replacing(dir, new, || {
        nix::unistd::linkat(Some(from_dir), name, Some(dir), new, AtFlags::empty())
    })
    .map_err(|e| Error::io(format!("creating {}", files.display(number)), e.into()))
}

/// Writes `data` into the file of entry `entry` at `offset`, skipping 4 KiB blocks of zeros, which
/// stay holes: the write that ends the file gives it its full length when its last blocks were
/// skipped.
pub fn write_at(files: &BatchFiles, entry: usize, offset: u64, data: &[u8]) -> Result<()> {
    const BLOCK: usize = 4096;
    let is_zero = |block: &[u8]| block.iter().all(|&b| b == 0);
    let mut start = 0;
    let mut written_to = 0;
    let mut file = None;
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
        let file = match &file {
            Some(file) => file,
            None => file.insert(files.open(entry)?),
        };
        file.write_all_at(&data[start..end], offset + start as u64)
            .map_err(|e| Error::io(format!("writing {}", files.display(entry)), e))?;
        written_to = end;
        start = end;
    }
    let ends_the_file = offset + data.len() as u64 == files.size(entry);
    if ends_the_file && written_to < data.len() {
        let file = match &file {
            Some(file) => file,
            None => file.insert(files.open(entry)?),
        };
        files.set_full_length(entry, file)?;
    }
    Ok(())
}

/// Sets the metadata of every restored directory on its own descriptor, deepest first (`dirs`
/// come parents first). After a restore that stopped (`stopped`), a directory that cannot be
/// opened or set is passed over with a warning and the others still get theirs.
pub fn set_dirs_metadata(
    dirs: &[(Vec<u8>, Metadata)],
    opener: &mut DirOpener,
    privileged: bool,
    stopped: bool,
) -> Result<Vec<String>> {
    let mut warnings = Vec::new();
    for (path, meta) in dirs.iter().rev() {
        match set_dir_metadata(path, meta, opener, privileged) {
            Ok(warning) => warnings.extend(warning),
            Err(error) if stopped => tracing::warn!("{error}"),
            Err(error) => return Err(error),
        }
    }
    Ok(warnings)
}

fn set_dir_metadata(
    path: &[u8],
    meta: &Metadata,
    opener: &mut DirOpener,
    privileged: bool,
) -> Result<Option<String>> {
    let dir = opener.open(path)?;
    let what = || opener.display(path);
    // Unprivileged, a folder of another owner can only be one that was there before the
    // restore: a volume's root as its provisioner made it, or a folder the container runtime
    // made to mount it. What is in it is restored; it keeps its owner's mode and times.
    if !privileged && !metadata::owned_by_us(dir.as_raw_fd(), &what)? {
        tracing::info!(
            "{} belongs to another user: its mode and times stay",
            what()
        );
        return Ok(None);
    }
    metadata::set_on_descriptor(dir.as_raw_fd(), meta, privileged, false, &what)
}
