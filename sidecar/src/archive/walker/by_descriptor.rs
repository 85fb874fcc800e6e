//! Reading a live tree without trusting its paths: every entry is looked up relative to its
//! directory's descriptor and opened without following a symlink, and what was opened is checked
//! (`fstat`) to be the entry the listing saw.
//!
//! A workload may rename, replace or swap any entry while the backup (root, able to read every
//! file) walks its volume. Opening by path would follow a symlink swapped in after the `lstat`,
//! and read a Secret outside the tree, `/proc/self/environ` or `/dev/urandom` into the snapshot,
//! or block forever on a FIFO. Here a symlink is never followed (`O_NOFOLLOW`), an open never
//! waits (`O_NONBLOCK`), and anything that is not what the listing saw is refused.

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};
use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// What an entry is, by the type bits of its mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryType {
    File,
    Dir,
    Symlink,
    Fifo,
    CharDevice,
    BlockDevice,
    Socket,
}

impl EntryType {
    pub fn of(stat: &FileStat) -> EntryType {
        match SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()) {
            SFlag::S_IFREG => EntryType::File,
            SFlag::S_IFDIR => EntryType::Dir,
            SFlag::S_IFLNK => EntryType::Symlink,
            SFlag::S_IFIFO => EntryType::Fifo,
            SFlag::S_IFCHR => EntryType::CharDevice,
            SFlag::S_IFBLK => EntryType::BlockDevice,
            _ => EntryType::Socket,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            EntryType::File => "a file",
            EntryType::Dir => "a directory",
            EntryType::Symlink => "a symlink",
            EntryType::Fifo => "a FIFO",
            EntryType::CharDevice => "a character device",
            EntryType::BlockDevice => "a block device",
            EntryType::Socket => "a socket",
        }
    }
}

/// Why an entry could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// The entry is no longer what the listing saw (replaced, renamed, swapped for a symlink).
    Changed(String),
    Io(std::io::Error),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Changed(how) => write!(f, "changed during the backup ({how})"),
            OpenError::Io(error) => error.fmt(f),
        }
    }
}

impl From<Errno> for OpenError {
    fn from(errno: Errno) -> OpenError {
        match errno {
            // O_NOFOLLOW met a symlink; O_DIRECTORY met something else.
            Errno::ELOOP => OpenError::Changed("it is now a symlink".into()),
            Errno::ENOTDIR => OpenError::Changed("it is no longer a directory".into()),
            Errno::ENOENT => OpenError::Changed("it was removed".into()),
            other => OpenError::Io(other.into()),
        }
    }
}

/// A directory being walked, open by descriptor.
pub struct OpenDir {
    dir: Dir,
    /// What the opened descriptor is (for the directory's own metadata).
    pub stat: FileStat,
}

impl OpenDir {
    fn fd(&self) -> RawFd {
        self.dir.as_raw_fd()
    }

    /// Opens the directory that holds a source, following the path as the user wrote it (the
    /// source's own last component is then looked up without following, like any entry).
    pub fn of_source(path: &Path) -> std::io::Result<OpenDir> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        let dir = Dir::open(path, flags, Mode::empty())?;
        let stat = nix::sys::stat::fstat(dir.as_raw_fd())?;
        Ok(OpenDir { dir, stat })
    }

    /// The names in the directory, sorted, without `.` and `..`; read through the descriptor.
    pub fn names(&mut self) -> std::io::Result<Vec<Vec<u8>>> {
        let mut names = Vec::new();
        for entry in self.dir.iter() {
            let name = entry?.file_name().to_bytes().to_vec();
            if name != b"." && name != b".." {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    /// The entry `name`'s own status (a symlink is not followed).
    pub fn stat(&self, name: &[u8]) -> std::io::Result<FileStat> {
        let name = OsStr::from_bytes(name);
        Ok(nix::sys::stat::fstatat(
            Some(self.fd()),
            name,
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )?)
    }

    /// A symlink's target, read without following it.
    pub fn read_link(&self, name: &[u8]) -> Result<Vec<u8>, OpenError> {
        match nix::fcntl::readlinkat(Some(self.fd()), OsStr::from_bytes(name)) {
            Ok(target) => Ok(target.into_encoded_bytes()),
            Err(Errno::EINVAL) => Err(OpenError::Changed("it is no longer a symlink".into())),
            Err(errno) => Err(errno.into()),
        }
    }

    /// Opens the subdirectory `name`, which the listing saw as `seen`.
    pub fn open_dir(&self, name: &[u8], seen: &FileStat) -> Result<OpenDir, OpenError> {
        open_dir_at(self.fd(), name, seen)
    }

    /// A second descriptor of this directory, from which other threads may open its
    /// subdirectories ([`DirHandle::open_dir`]) while this one is walked.
    pub fn handle(&self) -> std::io::Result<DirHandle> {
        let fd = nix::fcntl::fcntl(self.fd(), nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(0))?;
        // SAFETY: `fd` was just made and is owned by nothing else.
        Ok(DirHandle(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Opens the regular file `name`, which the listing saw as `seen` (see [`open_file_at`]).
    pub fn open_file(
        &self,
        name: &[u8],
        seen: &FileStat,
        no_atime: &AtomicBool,
    ) -> Result<(File, FileStat), OpenError> {
        open_file_at(self.fd(), name, seen, no_atime)
    }
}

/// A directory's descriptor shared with the threads that list its subdirectories ahead and read
/// its small files.
pub struct DirHandle(OwnedFd);

impl DirHandle {
    /// Opens the subdirectory `name`, which the listing saw as `seen`, as
    /// [`OpenDir::open_dir`] does.
    pub fn open_dir(&self, name: &[u8], seen: &FileStat) -> Result<OpenDir, OpenError> {
        open_dir_at(self.0.as_raw_fd(), name, seen)
    }

    /// Opens the regular file `name`, which the listing saw as `seen`, as
    /// [`OpenDir::open_file`] does.
    pub fn open_file(
        &self,
        name: &[u8],
        seen: &FileStat,
        no_atime: &AtomicBool,
    ) -> Result<(File, FileStat), OpenError> {
        open_file_at(self.0.as_raw_fd(), name, seen, no_atime)
    }
}

/// Opens the regular file `name` of the directory `at`, which the listing saw as `seen`: returns
/// it and its status as opened. Never follows a symlink, never waits on a FIFO or device, never
/// reads what is not that file. `no_atime` is whether to ask that reading leave the access time
/// alone: allowed where the process owns the file or has CAP_FOWNER, and dropped (for the rest of
/// the walk, on every thread) the first time it is refused.
fn open_file_at(
    at: RawFd,
    name: &[u8],
    seen: &FileStat,
    no_atime: &AtomicBool,
) -> Result<(File, FileStat), OpenError> {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW;
    let fd = if no_atime.load(Ordering::Relaxed) {
        match open_entry_at(at, name, flags | OFlag::O_NOATIME) {
            Err(OpenError::Io(error)) if error.raw_os_error() == Some(libc::EPERM) => {
                no_atime.store(false, Ordering::Relaxed);
                open_entry_at(at, name, flags)?
            }
            other => other?,
        }
    } else {
        open_entry_at(at, name, flags)?
    };
    let stat = check_same(&fd, seen)?;
    Ok((File::from(fd), stat))
}

fn open_dir_at(at: RawFd, name: &[u8], seen: &FileStat) -> Result<OpenDir, OpenError> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW;
    let fd = open_entry_at(at, name, flags)?;
    let stat = check_same(&fd, seen)?;
    Ok(OpenDir {
        dir: Dir::from(fd)?,
        stat,
    })
}

fn open_entry_at(at: RawFd, name: &[u8], flags: OFlag) -> Result<OwnedFd, OpenError> {
    let flags = flags | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
    let raw = nix::fcntl::openat(Some(at), OsStr::from_bytes(name), flags, Mode::empty())?;
    // SAFETY: `raw` was just opened and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// The status of what `fd` is, when it is the entry the listing saw (same type, device and
/// inode); else what it is now.
fn check_same(fd: &OwnedFd, seen: &FileStat) -> Result<FileStat, OpenError> {
    let opened = nix::sys::stat::fstat(fd.as_raw_fd())?;
    let (was, is) = (EntryType::of(seen), EntryType::of(&opened));
    if was != is {
        return Err(OpenError::Changed(format!(
            "it was {} and is now {}",
            was.describe(),
            is.describe()
        )));
    }
    if (opened.st_dev, opened.st_ino) != (seen.st_dev, seen.st_ino) {
        return Err(OpenError::Changed("it was replaced by another one".into()));
    }
    Ok(opened)
}

/// A source path split into the directory that holds it and its own name, resolving `.` and `..`
/// lexically as the snapshot's recorded paths do. `None` for the root itself.
pub fn split_source(path: &Path) -> Option<(PathBuf, Vec<u8>)> {
    let mut parts: Vec<&OsStr> = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => parts.push(part),
            Component::ParentDir => {
                parts.pop();
            }
            _ => {}
        }
    }
    let name = parts.pop()?.as_bytes().to_vec();
    let mut parent = PathBuf::from("/");
    parent.extend(parts);
    Some((parent, name))
}

/// A path's own status, not following a last symlink (for the directories above a source).
pub fn lstat(path: &Path) -> Option<FileStat> {
    nix::sys::stat::lstat(path).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_split_lexically() {
        assert_eq!(
            split_source(Path::new("/data/a/../b/./c")),
            Some((PathBuf::from("/data/b"), b"c".to_vec()))
        );
        assert_eq!(split_source(Path::new("/")), None);
    }

    #[test]
    fn a_symlink_in_place_of_a_file_is_refused_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("secret"), b"secret").unwrap();
        std::fs::write(dir.path().join("file"), b"plain").unwrap();
        let open = OpenDir::of_source(dir.path()).unwrap();
        let seen = open.stat(b"file").unwrap();
        std::fs::remove_file(dir.path().join("file")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), dir.path().join("file")).unwrap();
        let error = open
            .open_file(b"file", &seen, &AtomicBool::new(true))
            .unwrap_err();
        assert!(matches!(error, OpenError::Changed(_)), "{error}");
    }

    #[test]
    fn a_fifo_in_place_of_a_file_is_refused_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("file"), b"plain").unwrap();
        let open = OpenDir::of_source(dir.path()).unwrap();
        let seen = open.stat(b"file").unwrap();
        std::fs::remove_file(dir.path().join("file")).unwrap();
        nix::unistd::mkfifo(&dir.path().join("file"), Mode::from_bits_truncate(0o644)).unwrap();
        let error = open
            .open_file(b"file", &seen, &AtomicBool::new(true))
            .unwrap_err();
        assert!(error.to_string().contains("is now a FIFO"), "{error}");
    }

    #[test]
    fn a_file_replaced_by_another_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("file"), b"first").unwrap();
        let open = OpenDir::of_source(dir.path()).unwrap();
        let seen = open.stat(b"file").unwrap();
        std::fs::write(dir.path().join("other"), b"second").unwrap();
        std::fs::rename(dir.path().join("other"), dir.path().join("file")).unwrap();
        let error = open
            .open_file(b"file", &seen, &AtomicBool::new(true))
            .unwrap_err();
        assert!(error.to_string().contains("replaced"), "{error}");
    }
}
