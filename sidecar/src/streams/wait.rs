//! The sidecar waiting on a launcher: for its container to start (`SLOT.alive`), for its status,
//! or for the sign that it died without one (its lock free), and for its end of the FIFO.

use crate::launch::fifo;
use crate::launch::slot_files;
use neverwiped_contract::streams::{LaunchStatus, Slot};
use std::fs::File;
use std::time::{Duration, Instant};

/// How often the sidecar looks at a slot's files.
const POLL: Duration = crate::launch::POLL;

/// A duration as Go writes it (`10m0s`, `1h0m0s`, `45s`), as users read it in Kubernetes.
pub fn go_duration(duration: Duration) -> String {
    let secs = duration.as_secs();
    let (hours, minutes, seconds) = (secs / 3600, secs / 60 % 60, secs % 60);
    match (hours, minutes) {
        (0, 0) => format!("{seconds}s"),
        (0, _) => format!("{minutes}m{seconds}s"),
        _ => format!("{hours}h{minutes}m{seconds}s"),
    }
}

/// Waits for the launcher's container to start, up to `limit`.
pub fn launcher_started(slot: &Slot, limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    while !slot_files::launcher_started(slot) {
        if Instant::now() >= deadline {
            return Err(format!(
                "its container did not start within {} (is its image right and pulled?)",
                go_duration(limit)
            ));
        }
        std::thread::sleep(POLL);
    }
    Ok(())
}

/// How waiting for a status can end without one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoStatus {
    /// The launcher is gone without writing it: its container was killed.
    Killed,
    /// Still running at the deadline.
    TimedOut,
    /// Written, but not readable as a status.
    Unreadable(String),
}

/// Waits for the launcher's status, until `deadline` if any.
pub fn status(slot: &Slot, deadline: Option<Instant>) -> Result<LaunchStatus, NoStatus> {
    loop {
        if let Some(read) = slot_files::read_status(slot) {
            return read.map_err(|e| NoStatus::Unreadable(e.to_string()));
        }
        if slot_files::launcher_gone(slot) {
            // It may have written the status just before it exited.
            return match slot_files::read_status(slot) {
                Some(read) => read.map_err(|e| NoStatus::Unreadable(e.to_string())),
                None => Err(NoStatus::Killed),
            };
        }
        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            return Err(NoStatus::TimedOut);
        }
        std::thread::sleep(POLL);
    }
}

/// The FIFO's read end, once the launcher's command writes to it; an error when the launcher
/// died first.
pub fn fifo_for_reading(slot: &Slot) -> Result<File, String> {
    slot_files::make_fifo(slot).map_err(|e| e.to_string())?;
    let file = fifo::reading_end(slot)?;
    loop {
        if fifo::poll_once(&file, libc::POLLIN) {
            return fifo::blocking(file);
        }
        if slot_files::launcher_gone(slot) {
            return Err(killed_message().into());
        }
    }
}

/// The FIFO's write end, once the launcher's command reads from it.
pub fn fifo_for_writing(slot: &Slot) -> Result<File, String> {
    slot_files::make_fifo(slot).map_err(|e| e.to_string())?;
    loop {
        if let Some(file) = fifo::try_writing_end(slot)? {
            return fifo::blocking(file);
        }
        if slot_files::launcher_gone(slot) {
            return Err(killed_message().into());
        }
        std::thread::sleep(POLL);
    }
}

/// What a launcher gone without a status means.
pub fn killed_message() -> &'static str {
    "its container was killed before its command ended (out of memory?)"
}
