//! A repository as a read-only FUSE file system, in restic's layout: `snapshots/<time>/`,
//! `snapshots/latest`, `hosts/<host>/<time>/`, `tags/<tag>/<time>/` and `ids/<short id>/`, each
//! snapshot folder holding the snapshot's files with their contents, sizes, modes, owners, times
//! and symlinks as backed up (hard links as one inode).
//!
//! Lazy and bounded: the snapshot list is read at mount time, each folder's tree on its first
//! lookup, each file's content blob by blob as it is read, through the engine's blob reading
//! (authenticated and checked); trees and blobs stay in caches of fixed size
//! ([`MountOptions::cache_bytes`]). What grows is only the table of the entries looked up so far.
//!
//! ```no_run
//! # async fn example(repo: neverwiped::repository::IndexedRepository) -> neverwiped::Result<()> {
//! let mut handle = neverwiped::mount::serve(repo, "/mnt/backups".as_ref(), Default::default()).await?;
//! handle.unmounted().await; // until `umount /mnt/backups`; or call handle.unmount()
//! # Ok(()) }
//! ```

mod cache;
mod fs;
mod inodes;
pub mod layout;
mod reader;

use crate::error::{Error, Result};
use crate::locking::LockGuard;
use crate::repository::IndexedRepository;
use layout::{build_layout, SnapshotSelection};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The default of [`MountOptions::cache_bytes`].
pub const DEFAULT_CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// How a repository is mounted.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// Which snapshots are shown (all by default).
    pub selection: SnapshotSelection,
    /// Memory for file content blobs read (and an eighth of it more for folder trees).
    pub cache_bytes: u64,
    /// Let other users than the one mounting use the mount (FUSE's `allow_other`); the files'
    /// own modes and owners still decide who reads what.
    pub allow_other: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            selection: SnapshotSelection::default(),
            cache_bytes: DEFAULT_CACHE_BYTES,
            allow_other: false,
        }
    }
}

/// A mounted repository. Dropping it unmounts (lazily, if the mount is in use); prefer
/// [`MountHandle::unmount`], which also removes the repository lock.
pub struct MountHandle {
    mountpoint: PathBuf,
    snapshots: usize,
    unmounter: fuser::SessionUnmounter,
    session: Option<std::thread::JoinHandle<std::io::Result<()>>>,
    ended: tokio::sync::watch::Receiver<bool>,
    lock: Option<LockGuard>,
}

/// Mounts the snapshots of `repo` at `mountpoint` (an existing folder) and serves them on a
/// thread of its own until the handle is unmounted or dropped, or the file system is unmounted
/// from outside. Holds a shared lock meanwhile, so that no prune removes what is read.
pub async fn serve(
    repo: IndexedRepository,
    mountpoint: &Path,
    options: MountOptions,
) -> Result<MountHandle> {
    // The session's thread blocks on this runtime for each read: a current-thread runtime
    // would only make progress while its own thread awaits, and would hang in blocking callers.
    let runtime = tokio::runtime::Handle::current();
    if runtime.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
        return Err(Error::Usage(
            "mounting needs a multi-threaded tokio runtime".into(),
        ));
    }
    let mountpoint = std::fs::canonicalize(mountpoint)
        .map_err(|e| Error::io(format!("the mount point {}", mountpoint.display()), e))?;
    if !mountpoint.is_dir() {
        return Err(Error::Usage(format!(
            "the mount point {} is not a folder",
            mountpoint.display()
        )));
    }
    let lock = crate::locking::acquire_for_reading(&repo, "mount").await?;
    let snapshots = repo.snapshots().await?;
    let layout = build_layout(&snapshots, &options.selection);
    let reader = reader::SnapshotReader::new(repo, options.cache_bytes / 8, options.cache_bytes);
    let file_system =
        fs::SnapshotFs::new(runtime, Arc::new(reader), inodes::InodeTable::new(&layout));
    let mut mount_options = vec![
        fuser::MountOption::RO,
        fuser::MountOption::FSName("neverwiped".into()),
        fuser::MountOption::Subtype("neverwiped".into()),
        fuser::MountOption::DefaultPermissions,
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
    ];
    if options.allow_other {
        mount_options.push(fuser::MountOption::AllowOther);
    }
    let mut session = fuser::Session::new(file_system, &mountpoint, &mount_options)
        .map_err(|e| Error::io(format!("mounting at {}", mountpoint.display()), e))?;
    let unmounter = session.unmount_callable();
    let (ended_sender, ended) = tokio::sync::watch::channel(false);
    let thread = std::thread::Builder::new()
        .name("neverwiped-mount".into())
        .spawn(move || {
            let served = session.run();
            drop(session);
            let _ = ended_sender.send(true);
            served
        })
        .map_err(|e| Error::io("starting the mount's thread", e))?;
    tracing::info!(
        "mounted {} snapshot(s) at {}",
        layout.snapshots.len(),
        mountpoint.display()
    );
    Ok(MountHandle {
        mountpoint,
        snapshots: layout.snapshots.len(),
        unmounter,
        session: Some(thread),
        ended,
        lock,
    })
}

impl MountHandle {
    /// Where the repository is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// How many snapshots the mount shows.
    pub fn snapshot_count(&self) -> usize {
        self.snapshots
    }

    /// Waits until the file system is unmounted from outside (`umount`, `fusermount3 -u`).
    pub async fn unmounted(&mut self) {
        let _ = self.ended.wait_for(|ended| *ended).await;
    }

    /// Unmounts (only detaches a mount in use: it goes once its last user leaves), waits for the
    /// session to end, and removes the repository lock.
    pub async fn unmount(mut self) -> Result<()> {
        let lock = self.lock.take();
        let ended = match self.detach() {
            Ok(Some(thread)) => tokio::task::spawn_blocking(move || join(thread))
                .await
                .map_err(|e| Error::Interrupted(e.to_string()))
                .and_then(|joined| joined),
            Ok(None) => Ok(()),
            Err(error) => Err(error),
        };
        if let Some(lock) = lock {
            if let Err(error) = lock.release().await {
                tracing::warn!(%error, "could not remove the mount's lock");
            }
        }
        ended.map_err(|error| match error {
            Error::Io { what, source } => Error::Io {
                what: format!("{what} ({})", self.mountpoint.display()),
                source,
            },
            other => other,
        })
    }

    /// Unmounts unless the session already ended; hands back its thread, to be joined, unless
    /// the mount was in use and could only be detached: then its thread serves the processes
    /// still in it until they leave (or this process ends).
    fn detach(&mut self) -> Result<Option<std::thread::JoinHandle<std::io::Result<()>>>> {
        let Some(thread) = self.session.take() else {
            return Ok(None);
        };
        if thread.is_finished() {
            return Ok(Some(thread));
        }
        // fuser's unmount only logs a failure (a mount in use): look whether it is still there.
        let _ = self.unmounter.unmount();
        if !is_mounted_here(&self.mountpoint) {
            return Ok(Some(thread));
        }
        tracing::info!(
            "{} is in use: detaching it; it goes once the last process in it leaves",
            self.mountpoint.display()
        );
        nix::mount::umount2(&self.mountpoint, nix::mount::MntFlags::MNT_DETACH)
            .map_err(|errno| Error::io("unmounting", std::io::Error::from(errno)))?;
        Ok(None)
    }
}

/// Whether a neverwiped FUSE file system is mounted at `mountpoint`, from the kernel's table
/// (`/proc/self/mountinfo`: the mount point is the fifth field, octal-escaped; the type and the
/// source follow the ` - ` separator).
fn is_mounted_here(mountpoint: &Path) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let wanted = mountpoint.as_os_str().as_encoded_bytes();
    table.lines().any(|line| {
        let mut fields = line.split(' ');
        let point = fields.nth(4).map(unescape_mountinfo);
        let mut after = line.split(" - ").nth(1).unwrap_or_default().split(' ');
        let (kind, source) = (after.next().unwrap_or_default(), after.next());
        // The type is `fuse` (`fuse.neverwiped` when mounted through fusermount3); the source
        // is the FSName.
        point.as_deref() == Some(wanted) && kind.starts_with("fuse") && source == Some("neverwiped")
    })
}

/// A mountinfo field with its `\NNN` octal escapes (space, tab, newline, backslash) undone.
fn unescape_mountinfo(field: &str) -> Vec<u8> {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let escaped = bytes.get(index + 1..index + 4).filter(|digits| {
            bytes[index] == b'\\' && digits.iter().all(|d| (b'0'..=b'7').contains(d))
        });
        match escaped {
            Some(digits) => {
                out.push(digits.iter().fold(0u8, |value, d| value * 8 + (d - b'0')));
                index += 4;
            }
            None => {
                out.push(bytes[index]);
                index += 1;
            }
        }
    }
    out
}

/// Waits for the session's thread: its end is the end of the mount.
fn join(thread: std::thread::JoinHandle<std::io::Result<()>>) -> Result<()> {
    thread
        .join()
        .map_err(|_| Error::Interrupted("the mount's thread panicked".into()))?
        .map_err(|e| Error::io("serving the mount", e))
}

impl Drop for MountHandle {
    fn drop(&mut self) {
        match self.detach() {
            Ok(Some(thread)) => {
                if let Err(error) = join(thread) {
                    tracing::warn!(%error, "unmounting {}", self.mountpoint.display());
                }
            }
            Ok(None) => {}
            Err(error) => tracing::warn!(%error, "unmounting {}", self.mountpoint.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape_mountinfo(r"/mnt/a\040b\134c"), b"/mnt/a b\\c");
        assert_eq!(unescape_mountinfo(r"/plain\0"), b"/plain\\0");
        assert!(!is_mounted_here(Path::new("/surely/not/a/mount/point")));
    }
}
