//! The CLI's side of a clean stop on SIGHUP, SIGINT or SIGTERM (see [`neverwiped::stopping`]):
//! no snapshot after the signal, the run dropped within a bounded time, its locks removed, the
//! result saying it was interrupted, and the exit status 129, 130 or 143.

use super::output::Closing;
use super::result_file::{ResultFile, RunEnd};
use super::{Outcome, RunRecord};
use neverwiped::stopping::{self, StopSignal};
use std::time::Duration;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::oneshot;

/// How long a mount may take to unmount on a signal before it is dropped like any other run.
const UNMOUNT_GRACE: Duration = Duration::from_secs(10);
/// How long a dropped run may take to end (a future is dropped at its next pause).
const DROP_GRACE: Duration = Duration::from_secs(5);
/// How long removing the locks may take (a gate that does not answer is not waited for).
const UNLOCK_GRACE: Duration = Duration::from_secs(15);

/// The stop signals, listened to.
struct StopSignals {
    hangup: Signal,
    interrupt: Signal,
    terminate: Signal,
}

impl StopSignals {
    /// Listens; `None` when the signals cannot be watched (then their default action applies).
    fn listen() -> Option<StopSignals> {
        Some(StopSignals {
            hangup: signal(SignalKind::hangup()).ok()?,
            interrupt: signal(SignalKind::interrupt()).ok()?,
            terminate: signal(SignalKind::terminate()).ok()?,
        })
    }

    /// The next stop signal.
    async fn recv(&mut self) -> StopSignal {
        tokio::select! {
            _ = self.hangup.recv() => StopSignal::Hangup,
            _ = self.interrupt.recv() => StopSignal::Interrupt,
            _ = self.terminate.recv() => StopSignal::Terminate,
        }
    }
}

/// What the stop reports about the run.
pub struct StoppedRun {
    pub report: ResultFile,
    pub closing: Closing,
    pub record: std::sync::Arc<RunRecord>,
    /// A mount: it unmounts on the request and ends by itself, rather than being dropped.
    pub ends_itself: bool,
}

/// The run's side of a stop: when to drop the run, and how to say that it is gone.
pub struct RunControl {
    /// Fires when the run must be dropped.
    pub drop_now: oneshot::Receiver<()>,
    /// Told once the run was dropped or has ended after a stop began.
    pub gone: oneshot::Sender<()>,
}

/// Listens for the stop signals (from now on, before the run starts: their default action would
/// end the process without removing its lock) and stops the run on the first. The stop runs on a
/// task of its own, so it proceeds even while the run keeps its thread busy. `None` when the
/// signals cannot be watched.
pub fn watch(stopped: StoppedRun) -> Option<RunControl> {
    let signals = StopSignals::listen()?;
    let (drop_sender, drop_now) = oneshot::channel();
    let (gone, gone_receiver) = oneshot::channel();
    tokio::spawn(stop_on_signal(signals, stopped, drop_sender, gone_receiver));
    Some(RunControl { drop_now, gone })
}

/// Waits for a stop signal; then stops the run, reports it and exits with the signal's status.
async fn stop_on_signal(
    mut signals: StopSignals,
    stopped: StoppedRun,
    drop_run: oneshot::Sender<()>,
    run_gone: oneshot::Receiver<()>,
) {
    let signal = signals.recv().await;
    tracing::info!("{signal}: stopping");
    stopping::request(signal);
    // From here no snapshot is written; one being written is finished first.
    stopping::begin().await;
    let grace = if stopped.ends_itself {
        UNMOUNT_GRACE
    } else {
        let _ = drop_run.send(());
        DROP_GRACE
    };
    if tokio::time::timeout(grace, run_gone).await.is_err() {
        tracing::warn!("the run did not end within {grace:?} of {signal}");
    }
    // The post hooks still run (the application must not stay paused), after a pre hook under
    // way, and before the result is written.
    super::hooks::finish(&stopped.record.exchange).await;
    match tokio::time::timeout(UNLOCK_GRACE, neverwiped::locking::release_all_held()).await {
        Ok(removed) => tracing::debug!(removed, "removed the run's locks"),
        Err(_) => tracing::warn!(
            "the run's locks could not be removed within {UNLOCK_GRACE:?}; they go stale"
        ),
    }
    report(signal, &stopped);
    std::process::exit(signal.exit_status().code());
}

/// Says that the run was interrupted: on standard error and in the result file. A backup whose
/// snapshot was stored before the signal names it.
fn report(signal: StopSignal, stopped: &StoppedRun) {
    let snapshot = stopped.record.snapshot.get();
    let message = match snapshot {
        Some(snapshot_id) => format!(
            "interrupted: stopped by {signal} after snapshot {} was stored; what follows a \
             backup (retention) did not run",
            snapshot_id.short()
        ),
        None => format!(
            "interrupted: stopped by {signal} before the run was complete; no snapshot was \
             written, its lock is removed, and the next run reuses what was uploaded"
        ),
    };
    stopped.closing.error(&message);
    let outcome = Outcome {
        snapshot_id: snapshot.map(|id| id.to_hex()),
        ..Outcome::default()
    };
    let end = RunEnd {
        status: signal.exit_status(),
        outcome: &outcome,
        error: Some(message),
    };
    stopped
        .report
        .write(end, Some(stopped.record.as_ref()), &stopped.closing);
}
