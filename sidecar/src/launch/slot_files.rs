//! The files of one slot in the exchange folder (`contract/src/streams.rs`), as both sides touch
//! them: the FIFO, the launcher's `alive` lock, `go`, and the status written once, atomically.
//!
//! The containers of a pod may run as different users, so every file is made readable and
//! writable by all (0666), set explicitly after creation whatever the umask.

use neverwiped_contract::streams::{LaunchStatus, Slot};
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};

/// Mode of every slot file: the other containers' users read and write them.
const SHARED_MODE: u32 = 0o666;

/// Creates the slot's FIFO (an existing one is fine; anything else there is an error).
pub fn make_fifo(slot: &Slot) -> io::Result<()> {
    let path = slot.fifo();
    let c_path = CString::new(path.clone()).map_err(io::Error::other)?;
    // SAFETY: mkfifo reads a NUL-terminated path and creates a file; no memory is shared.
    if unsafe { libc::mkfifo(c_path.as_ptr(), SHARED_MODE as libc::mode_t) } != 0 {
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::AlreadyExists {
            return Err(with_path(&path, error));
        }
        if !fs::metadata(&path)?.file_type().is_fifo() {
            return Err(io::Error::other(format!("{path} exists and is not a FIFO")));
        }
    }
    share(&path);
    Ok(())
}

/// Makes `path` readable and writable by all; only its owner can, so another side's file is left.
fn share(path: &str) {
    let _ = fs::set_permissions(path, fs::Permissions::from_mode(SHARED_MODE));
}

fn with_path(path: &str, error: io::Error) -> io::Error {
    io::Error::new(error.kind(), format!("{path}: {error}"))
}

/// The launcher's `SLOT.alive`, locked exclusively for as long as this value lives.
pub struct AliveLock(#[allow(dead_code)] File);

impl AliveLock {
    pub fn take(slot: &Slot) -> io::Result<AliveLock> {
        let path = slot.alive();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(SHARED_MODE)
            .open(&path)
            .map_err(|e| with_path(&path, e))?;
        share(&path);
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(with_path(&path, io::Error::last_os_error()));
        }
        Ok(AliveLock(file))
    }
}

/// Whether the launcher's `SLOT.alive` exists (its container started).
pub fn launcher_started(slot: &Slot) -> bool {
    fs::metadata(slot.alive()).is_ok()
}

/// Whether a launcher that started is gone: nobody holds its lock any more.
pub fn launcher_gone(slot: &Slot) -> bool {
    let Ok(file) = File::open(slot.alive()) else {
        return false;
    };
    // SAFETY: flock on a descriptor this function owns; closing it releases the lock.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// Writes `content` to `path` through `path.tmp` and a rename, so a reader never sees half of it.
fn write_atomically(path: &str, content: &[u8]) -> io::Result<()> {
    let temporary = format!("{path}.tmp");
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(SHARED_MODE)
        .open(&temporary)
        .map_err(|e| with_path(&temporary, e))?;
    file.write_all(content)?;
    file.sync_all()?;
    share(&temporary);
    fs::rename(&temporary, path).map_err(|e| with_path(path, e))
}

/// Writes the status, once, when the command ended.
pub fn write_status(slot: &Slot, status: &LaunchStatus) -> io::Result<()> {
    let json = serde_json::to_vec(status).map_err(io::Error::other)?;
    write_atomically(&slot.status(), &json)
}

/// The status, once the launcher wrote it.
pub fn read_status(slot: &Slot) -> Option<io::Result<LaunchStatus>> {
    match fs::read(slot.status()) {
        Ok(json) => Some(serde_json::from_slice(&json).map_err(io::Error::other)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => None,
        Err(error) => Some(Err(error)),
    }
}

/// Writes `SLOT.go`: empty to run a hook, [`neverwiped_contract::streams::GO_SKIP`] to release.
pub fn write_go(slot: &Slot, content: &str) -> io::Result<()> {
    write_atomically(&slot.go(), content.as_bytes())
}

/// The content of `SLOT.go`, once the sidecar wrote it.
pub fn read_go(slot: &Slot) -> Option<String> {
    fs::read_to_string(slot.go()).ok()
}

/// Whether the sidecar released the slot without using it.
pub fn skipped(slot: &Slot) -> bool {
    read_go(slot).is_some_and(|go| go.trim() == neverwiped_contract::streams::GO_SKIP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_shared_whatever_the_umask_and_the_lock_tells_the_launcher_is_alive() {
        let dir = tempfile::tempdir().unwrap();
        let slot = Slot::new(dir.path().to_str().unwrap(), "stream", "cache");
        // SAFETY: umask only changes this process's file creation mask.
        let old = unsafe { libc::umask(0o077) };
        make_fifo(&slot).unwrap();
        make_fifo(&slot).unwrap();
        let lock = AliveLock::take(&slot).unwrap();
        write_status(&slot, &LaunchStatus::default()).unwrap();
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        for path in [slot.fifo(), slot.alive(), slot.status()] {
            let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o666, "{path}");
        }
        assert!(launcher_started(&slot) && !launcher_gone(&slot));
        drop(lock);
        assert!(launcher_gone(&slot));
        assert_eq!(
            read_status(&slot).unwrap().unwrap(),
            LaunchStatus::default()
        );
        assert!(!skipped(&slot));
        write_go(&slot, "skip").unwrap();
        assert!(skipped(&slot));
    }
}
