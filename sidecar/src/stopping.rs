//! A clean stop on SIGHUP, SIGINT or SIGTERM. The CLI calls [`begin`] when a signal arrives: it
//! waits for a snapshot write already under way and keeps any later one from starting
//! ([`unless_stopping`]), so a snapshot never appears after the signal. The run is then dropped
//! (its uploads abandoned) and [`crate::locking::release_all_held`] removes its locks. A command
//! that must end itself first (a mount unmounts) waits for [`requested`].

use crate::error::{Error, Result};
use neverwiped_contract::ExitStatus;
use std::future::Future;
use std::sync::LazyLock;

/// A signal that asks a run to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    Hangup,
    Interrupt,
    Terminate,
}

impl StopSignal {
    /// The signal's name, e.g. "SIGTERM".
    pub fn name(self) -> &'static str {
        match self {
            StopSignal::Hangup => "SIGHUP",
            StopSignal::Interrupt => "SIGINT",
            StopSignal::Terminate => "SIGTERM",
        }
    }

    /// The status a run it stopped ends with (128 + its number, as restic and shells report).
    pub fn exit_status(self) -> ExitStatus {
        match self {
            StopSignal::Hangup => ExitStatus::Hangup,
            StopSignal::Interrupt => ExitStatus::Interrupted,
            StopSignal::Terminate => ExitStatus::Terminated,
        }
    }
}

impl std::fmt::Display for StopSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Serialises commits (snapshot writes) with the start of a stop.
#[derive(Debug, Default)]
struct CommitGate {
    /// Held while a commit runs; `true` once a stop began.
    stopping: tokio::sync::Mutex<bool>,
}

impl CommitGate {
    async fn unless_stopping<T>(&self, commit: impl Future<Output = Result<T>>) -> Result<T> {
        let stopping = self.stopping.lock().await;
        if *stopping {
            return Err(Error::Stopping);
        }
        commit.await
    }

    async fn begin(&self) {
        *self.stopping.lock().await = true;
    }
}

static GATE: LazyLock<CommitGate> = LazyLock::new(CommitGate::default);

/// Runs `commit` unless a stop began; a stop that begins meanwhile waits for it to end.
pub async fn unless_stopping<T>(commit: impl Future<Output = Result<T>>) -> Result<T> {
    GATE.unless_stopping(commit).await
}

/// Begins a stop: waits for a commit under way, and refuses every later one.
pub async fn begin() {
    GATE.begin().await;
}

static REQUESTED: LazyLock<tokio::sync::watch::Sender<Option<StopSignal>>> =
    LazyLock::new(|| tokio::sync::watch::Sender::new(None));

/// Asks the running command to stop, for [`requested`].
pub fn request(signal: StopSignal) {
    REQUESTED.send_replace(Some(signal));
}

/// Whether a stop was [`request`]ed.
pub fn is_requested() -> bool {
    REQUESTED.borrow().is_some()
}

/// Waits until a stop is [`request`]ed; the signal that asked for it.
pub async fn requested() -> StopSignal {
    let mut requests = REQUESTED.subscribe();
    loop {
        if let Some(signal) = *requests.borrow_and_update() {
            return signal;
        }
        // The sender is a static: it is never dropped.
        let _ = requests.changed().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn a_stop_waits_for_the_commit_under_way_and_refuses_later_ones() {
        let gate = Arc::new(CommitGate::default());
        let written = Arc::new(AtomicBool::new(false));
        let (started_sender, started) = tokio::sync::oneshot::channel();
        let commit = tokio::spawn({
            let (gate, written) = (gate.clone(), written.clone());
            async move {
                gate.unless_stopping(async move {
                    started_sender.send(()).unwrap();
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    written.store(true, Ordering::SeqCst);
                    Ok(())
                })
                .await
            }
        });
        started.await.unwrap();
        gate.begin().await;
        // The commit under way was not cut short: the stop waited for it.
        assert!(written.load(Ordering::SeqCst));
        commit.await.unwrap().unwrap();
        let refused = gate.unless_stopping(async { Ok(()) }).await.unwrap_err();
        assert!(matches!(refused, Error::Stopping), "{refused:?}");
    }
}
