//! A stream's FIFO opened without blocking, by either side: the launcher can still notice a
//! sidecar that released the slot (`SLOT.go` = skip), the sidecar a launcher that died, instead
//! of waiting forever in `open`.

use super::{slot_files, POLL};
use neverwiped_contract::streams::Slot;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

/// The write end, once the sidecar reads; `None` when it released the slot.
pub fn open_for_writing(slot: &Slot) -> Result<Option<File>, String> {
    loop {
        if slot_files::skipped(slot) {
            return Ok(None);
        }
        match try_writing_end(slot)? {
            // Released: the sidecar writes `go` first, then opens and closes the FIFO.
            Some(_) if slot_files::skipped(slot) => return Ok(None),
            Some(file) => return blocking(file).map(Some),
            None => std::thread::sleep(POLL),
        }
    }
}

/// The write end, non-blocking; `None` while nobody reads (ENXIO).
pub fn try_writing_end(slot: &Slot) -> Result<Option<File>, String> {
    let opened = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(slot.fifo());
    match opened {
        Ok(file) => Ok(Some(file)),
        Err(error) if error.raw_os_error() == Some(libc::ENXIO) => Ok(None),
        Err(error) => Err(format!("cannot open the FIFO {}: {error}", slot.fifo())),
    }
}

/// The read end, non-blocking: it opens at once, writer or not.
pub fn reading_end(slot: &Slot) -> Result<File, String> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(slot.fifo())
        .map_err(|e| format!("cannot open the FIFO {}: {e}", slot.fifo()))
}

/// The read end, once the sidecar has opened it for writing; `None` when it released the slot.
pub fn open_for_reading(slot: &Slot) -> Result<Option<File>, String> {
    let file = reading_end(slot)?;
    loop {
        if slot_files::skipped(slot) {
            return Ok(None);
        }
        // A FIFO signals no hang-up before its first writer: readable or hung up means the
        // sidecar came (and, without data, maybe went: released).
        if poll_once(&file, libc::POLLIN) {
            if slot_files::skipped(slot) {
                return Ok(None);
            }
            return blocking(file).map(Some);
        }
    }
}

/// Whether `file` became ready for `events` (or hung up) within one poll period.
pub fn poll_once(file: &File, events: libc::c_short) -> bool {
    let mut fds = libc::pollfd {
        fd: file.as_raw_fd(),
        events,
        revents: 0,
    };
    // SAFETY: poll reads and writes the one pollfd it is given.
    let ready = unsafe { libc::poll(&mut fds, 1, POLL.as_millis() as libc::c_int) };
    ready > 0 && fds.revents & (events | libc::POLLHUP | libc::POLLERR) != 0
}

/// `file` made blocking again, for the command.
pub fn blocking(file: File) -> Result<File, String> {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl reads and sets the status flags of a descriptor this function owns.
    let done = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) == 0
    };
    match done {
        true => Ok(file),
        false => Err(format!(
            "cannot make the FIFO blocking: {}",
            io::Error::last_os_error()
        )),
    }
}
