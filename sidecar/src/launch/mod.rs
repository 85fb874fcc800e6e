//! The launcher: a stream or hook container's entrypoint (`neverwiped-sidecar launch KIND --slot
//! SLOT [--timeout SECS] -- COMMAND…`). It runs the user's command wired to the slot's FIFO (or,
//! for a hook, when `SLOT.go` says so) and reports how it ended in `SLOT.status`, as
//! `contract/src/streams.rs` lays down. The status is the truth the sidecar reports: the launcher
//! exits 0 once it is written.
//!
//! Besides the contract, the launcher also exits (status error "skipped") when it finds
//! `SLOT.go` = `skip` while it waits for a stream's sidecar end, which the sidecar writes for
//! every slot it releases unused.

pub mod command;
pub mod fifo;
pub mod slot_files;

use command::Wiring;
use neverwiped_contract::streams::{LaunchKind, LaunchStatus, Slot};
use std::process::Stdio;
use std::time::Duration;

/// How often the launcher looks for `SLOT.go` or the sidecar's end of the FIFO.
pub const POLL: Duration = Duration::from_millis(100);

/// What to launch.
pub struct Launch {
    pub kind: LaunchKind,
    pub slot: Slot,
    /// Hooks: the command's time limit.
    pub timeout: Option<Duration>,
    pub command: Vec<String>,
}

/// Runs the launch to its status; `Err` only when the status could not be written.
pub fn launch(launch: &Launch) -> Result<(), String> {
    keep_going_on_sigterm();
    let slot = &launch.slot;
    if launch.kind != LaunchKind::Hook {
        slot_files::make_fifo(slot).map_err(|e| format!("cannot create the FIFO: {e}"))?;
    }
    let _alive = slot_files::AliveLock::take(slot)
        .map_err(|e| format!("cannot take the slot's alive lock: {e}"))?;
    let status = match wire(launch) {
        Ok(Some(wiring)) => command::run(&launch.command, wiring),
        Ok(None) => skipped(),
        Err(error) => LaunchStatus {
            error: Some(error),
            finished_at: Some(command::now()),
            ..LaunchStatus::default()
        },
    };
    slot_files::write_status(slot, &status)
        .map_err(|e| format!("cannot write the status {}: {e}", slot.status()))
}

/// The status of a launch the sidecar released without using it.
fn skipped() -> LaunchStatus {
    LaunchStatus {
        error: Some("skipped".into()),
        finished_at: Some(command::now()),
        ..LaunchStatus::default()
    }
}

/// Waits for the sidecar's side and wires the command to it; `None` when it released the slot.
fn wire(launch: &Launch) -> Result<Option<Wiring>, String> {
    let slot = &launch.slot;
    Ok(match launch.kind {
        LaunchKind::Stream => fifo::open_for_writing(slot)?.map(|fifo| Wiring {
            stdin: Stdio::null(),
            stdout: Stdio::from(fifo),
            timeout: None,
        }),
        LaunchKind::RestoreStream => fifo::open_for_reading(slot)?.map(|fifo| Wiring {
            stdin: Stdio::from(fifo),
            stdout: Stdio::inherit(),
            timeout: None,
        }),
        LaunchKind::Hook => wait_for_go(slot).then(|| Wiring {
            stdin: Stdio::null(),
            stdout: Stdio::inherit(),
            timeout: launch.timeout,
        }),
    })
}

/// Waits for `SLOT.go`; `false` when it says skip.
fn wait_for_go(slot: &Slot) -> bool {
    loop {
        if let Some(go) = slot_files::read_go(slot) {
            return go.trim() != neverwiped_contract::streams::GO_SKIP;
        }
        std::thread::sleep(POLL);
    }
}

extern "C" fn ignore(_: libc::c_int) {}

/// The launcher is PID 1 of its container and must outlive a stopping pod, so that a post hook
/// still runs: SIGTERM gets a handler that does nothing. A handler, not SIG_IGN, which the
/// command would inherit across exec; a handled signal is reset to its default there.
fn keep_going_on_sigterm() {
    // SAFETY: installs an async-signal-safe handler (it does nothing) for one signal.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = ignore as extern "C" fn(libc::c_int) as usize;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
    }
}
