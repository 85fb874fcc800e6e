//! The sidecar's side of streams and hooks (`contract/src/streams.rs`): a run's [`Exchange`]
//! holds its streams and hooks and how each went, runs the hooks of a phase in order, and
//! releases, on every way out, the launchers it did not use.
//!
//! - `wait.rs`: waiting on a launcher (its start, its status, its end of the FIFO)
//! - `reader.rs`: a backup's stream, read from its FIFO into the snapshot
//! - `restore.rs`: a restore's stream, written from the snapshot into its FIFO
//! - `hooks.rs`: one hook, run through its launcher

mod exchange;
pub mod hooks;
pub mod reader;
pub mod restore;
pub mod wait;

use crate::launch::{fifo, slot_files};
use hooks::HookRun;
use neverwiped_contract::streams::{
    HookPhase, HookResult, LaunchKind, LaunchStatus, OnError, Slot, StreamResult, GO_SKIP,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How long a stream's or hook's container may take to start by default.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(600);

/// One stream of a backup (`--stream NAME=SLOT`) or restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSpec {
    pub name: String,
    pub slot: Slot,
    /// Backup: zero bytes is a good stream.
    pub allow_empty: bool,
    /// [`LaunchKind::Stream`] (backup) or [`LaunchKind::RestoreStream`].
    pub kind: LaunchKind,
}

/// One hook (`--hook PHASE:NAME=SLOT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookSpec {
    pub phase: HookPhase,
    pub name: String,
    pub slot: Slot,
    pub timeout: Duration,
    pub on_error: OnError,
}

/// A stream of the run and how it went, shared by its reader or writer and the run's result.
#[derive(Debug)]
pub struct StreamSlot {
    pub spec: StreamSpec,
    touched: AtomicBool,
    bytes: AtomicU64,
    result: Mutex<StreamResult>,
}

impl StreamSlot {
    fn new(spec: StreamSpec) -> StreamSlot {
        StreamSlot {
            result: Mutex::new(StreamResult {
                name: spec.name.clone(),
                ..StreamResult::default()
            }),
            spec,
            touched: AtomicBool::new(false),
            bytes: AtomicU64::new(0),
        }
    }

    /// The run reached the stream: it is the reader's or writer's to end, not the release's.
    fn touch(&self) {
        self.touched.store(true, Ordering::SeqCst);
    }

    fn add_bytes(&self, count: u64) {
        self.bytes.fetch_add(count, Ordering::Relaxed);
    }

    fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Records how the stream ended: its command's status when read, the first error.
    fn ended(&self, status: Option<LaunchStatus>, error: Option<String>) {
        let mut result = lock(&self.result);
        if let Some(status) = status {
            result.exit_code = status.exit_code;
            result.stderr = status.stderr;
        }
        if result.error.is_none() {
            result.error = error.map(|e| format!("stream {}: {e}", self.spec.name));
        }
    }

    fn result(&self, run_failed: bool) -> StreamResult {
        let mut result = lock(&self.result).clone();
        result.bytes = self.bytes();
        if run_failed && result.error.is_none() && !self.touched.load(Ordering::SeqCst) {
            result.error = Some(format!(
                "stream {}: not done: the run ended before it",
                result.name
            ));
        }
        result
    }

    /// Lets an unused launcher go: `go` = skip, then the FIFO opened and closed, so that a
    /// launcher blocked opening its end wakes up.
    fn release(&self) {
        let slot = &self.spec.slot;
        if self.touched.load(Ordering::SeqCst) || slot_files::write_go(slot, GO_SKIP).is_err() {
            return;
        }
        let _ = match self.spec.kind {
            LaunchKind::RestoreStream => fifo::try_writing_end(slot).map(drop),
            _ => fifo::reading_end(slot).map(drop),
        };
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// A hook of the run: waiting, run, or skipped.
enum HookState {
    Waiting,
    Ran(HookRun),
    Skipped(HookResult),
}

/// The streams and hooks of one run.
#[derive(Default)]
pub struct Exchange {
    streams: Mutex<Vec<Arc<StreamSlot>>>,
    hooks: Mutex<Vec<(HookSpec, HookState)>>,
    /// Held while hooks run, so the post hooks of a stop wait for a pre hook under way; `true`
    /// once the post hooks ran.
    phases: Mutex<bool>,
    warnings: Mutex<Vec<String>>,
    start_timeout: Mutex<Option<Duration>>,
}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchange")
            .field("streams", &lock(&self.streams).len())
            .field("hooks", &lock(&self.hooks).len())
            .finish_non_exhaustive()
    }
}
