//! The target's directories, open by descriptor: every entry a restore creates or changes is
//! named relative to its directory's descriptor, never by a path a concurrent writer could
//! redirect.
//!
//! A workload may own the volume being restored and swap any directory for a symlink to a
//! folder outside the target while the restore runs. A directory is therefore opened one
//! component at a time with `O_NOFOLLOW | O_DIRECTORY` (a symlink in the way is refused, not
//! followed) and, once open, its descriptor stays the directory whatever is renamed around it.

use crate::error::{Error, Result};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A directory of the target, open by descriptor (shared by the threads that create in it).
pub type DirFd = Arc<OwnedFd>;

/// Opens `name` in `parent` as a directory, never following a symlink.
pub fn open_child(parent: RawFd, name: &[u8]) -> nix::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let raw = nix::fcntl::openat(Some(parent), name, flags, Mode::empty())?;
    // SAFETY: `raw` was just opened and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Creates the directory `name` in `parent` (reusing one that exists: restoring over an earlier
/// restore). It is created private; its own mode is set once everything in it is restored.
pub fn make_child(parent: RawFd, name: &[u8]) -> nix::Result<()> {
    match nix::sys::stat::mkdirat(Some(parent), name, Mode::from_bits_truncate(0o700)) {
        // Whether it is a directory (and not a symlink) is checked when it is opened.
        Ok(()) | Err(Errno::EEXIST) => Ok(()),
        Err(errno) => Err(errno),
    }
}

/// Opens directories below the target by their paths (relative to the target, components joined
/// by `/`), one component at a time without following symlinks, keeping open the chain of the
/// last one opened: a restore visits directories parents first (and, setting their metadata,
/// deepest first), so each open is mostly one `openat` from an open parent.
pub struct DirOpener {
    target: PathBuf,
    root: DirFd,
    /// The open chain: each directory's path and descriptor, the target's children first.
    chain: Vec<(Vec<u8>, DirFd)>,
}

impl DirOpener {
    /// Opens the target (creating it and its parents): its own path is the user's, trusted.
    pub fn new(target: &Path) -> Result<DirOpener> {
        std::fs::create_dir_all(target)
            .map_err(|e| Error::io(format!("creating {}", target.display()), e))?;
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let raw = nix::fcntl::open(target, flags, Mode::empty())
            .map_err(|e| Error::io(format!("opening {}", target.display()), e.into()))?;
        // SAFETY: `raw` was just opened and is owned by nothing else.
        let root = Arc::new(unsafe { OwnedFd::from_raw_fd(raw) });
        Ok(DirOpener {
            target: target.to_path_buf(),
            root,
            chain: Vec::new(),
        })
    }

    /// The path of `relative` below the target, for messages.
    pub fn display(&self, relative: &[u8]) -> String {
        use std::os::unix::ffi::OsStrExt;
        if relative.is_empty() {
            return self.target.display().to_string();
        }
        self.target
            .join(std::ffi::OsStr::from_bytes(relative))
            .display()
            .to_string()
    }

    pub fn target(&self) -> &Path {
        &self.target
    }

    /// The directory at `path` (empty: the target itself).
    pub fn open(&mut self, path: &[u8]) -> Result<DirFd> {
        while let Some((open, _)) = self.chain.last() {
            let is_prefix = path.starts_with(open)
                && (path.len() == open.len() || path.get(open.len()) == Some(&b'/'));
            if is_prefix {
                break;
            }
            self.chain.pop();
        }
        let done = self.chain.last().map_or(0, |(open, _)| open.len());
        if done == path.len() {
            return Ok(self.chain.last().map_or(&self.root, |(_, fd)| fd).clone());
        }
        let rest = &path[done..];
        let rest = rest.strip_prefix(b"/").unwrap_or(rest);
        let mut end = path.len() - rest.len();
        for name in rest.split(|&byte| byte == b'/') {
            end += name.len();
            let parent = self.chain.last().map_or(&self.root, |(_, fd)| fd);
            let opened = open_child(parent.as_raw_fd(), name).map_err(|errno| {
                let what = format!("opening the directory {}", self.display(&path[..end]));
                changed(what, errno)
            })?;
            self.chain.push((path[..end].to_vec(), Arc::new(opened)));
            end += 1;
        }
        Ok(self.chain.last().expect("pushed above").1.clone())
    }
}

/// The error of an `*at` call on an entry of the target; a symlink or other entry where a
/// directory was made says that the target changed under the restore.
pub fn changed(what: String, errno: Errno) -> Error {
    match errno {
        Errno::ELOOP | Errno::ENOTDIR => Error::io(
            what,
            std::io::Error::other(
                "it is not the directory the restore made: something changed the target during the restore",
            ),
        ),
        errno => Error::io(what, errno.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlink_in_the_way_is_refused_not_followed() {
        let work = tempfile::tempdir().unwrap();
        let target = work.path().join("target");
        std::fs::create_dir_all(target.join("a/b")).unwrap();
        std::fs::create_dir(work.path().join("outside")).unwrap();
        std::os::unix::fs::symlink(work.path().join("outside"), target.join("a/link")).unwrap();
        let mut opener = DirOpener::new(&target).unwrap();
        opener.open(b"a/b").unwrap();
        opener.open(b"a").unwrap();
        let error = opener.open(b"a/link").unwrap_err().to_string();
        assert!(error.contains("changed the target"), "{error}");
        let error = opener.open(b"a/link/x").unwrap_err().to_string();
        assert!(error.contains("a/link"), "{error}");
        opener.open(b"").unwrap();
    }
}
