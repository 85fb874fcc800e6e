//! A repository as a read-only FUSE file system, in restic's layout: `snapshots/<time>/`,
//! `snapshots/latest`, `hosts/<host>/<time>/`, `tags/<tag>/<time>/` and `ids/<short id>/`, each
//! snapshot folder holding the snapshot's files with their contents, sizes, modes, owners, times
//! and symlinks as backed up (hard links as one inode).
//!
//! Lazy and bounded: the snapshot list is read at mount time, each folder's tree on its first
//! lookup, each file's content blob by blob as it is read, through the engine's blob reading
//! (authenticated and checked); trees and blobs stay in caches of fixed size
//! ([`MountOptions::cache_bytes`]). The table of entries holds those the kernel holds: it forgets
//! what the kernel forgets.
//!
//! ```no_run
//! # async fn example(repo: neverwiped::repository::IndexedRepository) -> neverwiped::Result<()> {
//! let mut handle = neverwiped::mount::serve(repo, "/mnt/backups".as_ref(), Default::default()).await?;
//! handle.unmounted().await; // until `umount /mnt/backups`; or call handle.unmount()
//! # Ok(()) }
//! ```

mod attributes;
mod cache;
mod fs;
mod fuse;
mod inodes;
pub mod layout;
mod reader;

use crate::error::{Error, Result};
use crate::locking::LockGuard;
use crate::repository::IndexedRepository;
use layout::{build_layout, SnapshotSelection};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

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
    /// Mount on a folder that is not empty, hiding its entries until the mount ends (refused
    /// otherwise, as a mistyped path would hide a folder in use).
    pub allow_non_empty: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            selection: SnapshotSelection::default(),
            cache_bytes: DEFAULT_CACHE_BYTES,
            allow_other: false,
            allow_non_empty: false,
        }
    }
}

/// A mounted repository. Dropping it unmounts (lazily, if the mount is in use); prefer
/// [`MountHandle::unmount`], which also removes the repository lock.
pub struct MountHandle {
    mountpoint: PathBuf,
    snapshots: usize,
    /// fuser's unmount, until the session ends (its thread takes it then).
    unmounter: Arc<Mutex<Option<fuser::SessionUnmounter>>>,
    session: Option<std::thread::JoinHandle<std::io::Result<()>>>,
    ended: tokio::sync::watch::Receiver<bool>,
    lock: Option<LockGuard>,
    file_system: fuse::SharedFs,
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
    check_mount_point(&mountpoint, options.allow_non_empty)?;
    let lock = crate::locking::acquire_for_reading(&repo, "mount").await?;
    let snapshots = repo.snapshots().await?;
    let layout = build_layout(&snapshots, &options.selection);
    let reader = reader::SnapshotReader::new(repo, options.cache_bytes / 8, options.cache_bytes);
    let file_system: fuse::SharedFs = Arc::new(Mutex::new(Some(fs::SnapshotFs::new(
        runtime,
        Arc::new(reader),
        inodes::InodeTable::new(&layout),
    ))));
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
    let adapter = fuse::FuseAdapter::new(file_system.clone());
    let file_system_of_handle = file_system.clone();
    let mut session = fuser::Session::new(adapter, &mountpoint, &mount_options)
        .map_err(|e| Error::io(format!("mounting at {}", mountpoint.display()), e))?;
    let unmounter = Arc::new(Mutex::new(Some(session.unmount_callable())));
    let (ended_sender, ended) = tokio::sync::watch::channel(false);
    let thread = spawn_session(session, file_system, unmounter.clone(), ended_sender)?;
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
        file_system: file_system_of_handle,
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

    /// How many entries of snapshots the mount holds now: those the kernel has looked up and not
    /// forgotten (the folders above the snapshots are not counted).
    pub fn entries_held(&self) -> usize {
        locked(&self.file_system)
            .as_ref()
            .map_or(0, |fs| fs.entries_held())
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
        if let Some(unmounter) = locked(&self.unmounter).as_mut() {
            let _ = unmounter.unmount();
        }
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

/// Serves `session` on a thread of its own; at its end, drops the file system, takes the
/// unmounter away from the handle and lets go of the session, then says it `ended`.
fn spawn_session(
    mut session: fuser::Session<fuse::FuseAdapter>,
    file_system: fuse::SharedFs,
    unmounter: Arc<Mutex<Option<fuser::SessionUnmounter>>>,
    ended: tokio::sync::watch::Sender<bool>,
) -> Result<std::thread::JoinHandle<std::io::Result<()>>> {
    std::thread::Builder::new()
        .name("neverwiped-mount".into())
        .spawn(move || {
            let served = session.run();
            // The caches and the index go now, whatever becomes of the session.
            drop(locked(&file_system).take());
            drop(locked(&unmounter).take());
            match served {
                // The kernel ended the connection: the file system is unmounted already.
                Ok(()) => let_go(session),
                Err(_) => drop(session),
            }
            let _ = ended.send(true);
            served
        })
        .map_err(|e| Error::io("starting the mount's thread", e))
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Refuses a mount point that is not a folder, or (unless allowed) not an empty one.
fn check_mount_point(mountpoint: &Path, allow_non_empty: bool) -> Result<()> {
    if !mountpoint.is_dir() {
        return Err(Error::Usage(format!(
            "the mount point {} is not a folder",
            mountpoint.display()
        )));
    }
    let mut entries = std::fs::read_dir(mountpoint).map_err(|e| {
        Error::io(
            format!("listing the mount point {}", mountpoint.display()),
            e,
        )
    })?;
    if !allow_non_empty && entries.next().is_some() {
        return Err(Error::Usage(format!(
            "the mount point {} is not empty: the mount would hide what it holds; mount on an \
             empty folder, or allow a non-empty one (--allow-non-empty)",
            mountpoint.display()
        )));
    }
    Ok(())
}

/// Lets go of a session whose connection the kernel ended (the file system is unmounted) without
/// fuser's unmount of the path: fuser 0.15 takes a dead connection for a live one and unmounts
/// again, which fails with an error in the log or, were something else mounted there meanwhile,
/// unmounts that. Its file system is already dropped; only its descriptor of `/dev/fuse` is left
/// to close.
fn let_go<F: fuser::Filesystem>(session: fuser::Session<F>) {
    let descriptor = session.as_fd().as_raw_fd();
    std::mem::forget(session);
    // SAFETY: the session's channel and its mount share this one descriptor; the session is
    // forgotten and the unmounter that also reaches the mount was taken from the handle (under
    // its lock) before, so nothing else uses or closes it.
    drop(unsafe { OwnedFd::from_raw_fd(descriptor) });
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

    #[test]
    fn a_mount_point_must_be_an_empty_folder_unless_allowed() {
        let work = tempfile::tempdir().unwrap();
        let point = work.path().join("point");
        std::fs::create_dir(&point).unwrap();
        check_mount_point(&point, false).unwrap();
        std::fs::write(point.join(".hidden"), b"kept").unwrap();
        let refused = check_mount_point(&point, false).unwrap_err().to_string();
        assert!(refused.contains("is not empty"), "{refused}");
        assert!(refused.contains("--allow-non-empty"), "{refused}");
        check_mount_point(&point, true).unwrap();
        assert_eq!(std::fs::read(point.join(".hidden")).unwrap(), b"kept");
        let file = point.join(".hidden");
        let refused = check_mount_point(&file, true).unwrap_err().to_string();
        assert!(refused.contains("is not a folder"), "{refused}");
    }
}
