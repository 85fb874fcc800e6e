//! One hook, run through its launcher: wait for its container, say go, wait for its status
//! within its time limit and a grace, and what the run records of it.

use super::reader::{how_it_ended, with_stderr};
use super::wait::{self, NoStatus};
use super::HookSpec;
use crate::launch::slot_files;
use neverwiped_contract::streams::{HookResult, LaunchStatus};
use std::time::{Duration, Instant};

/// What the sidecar waits beyond a hook's time limit for its status: the launcher kills the
/// command at the limit and writes it at once; the grace covers a slow container.
pub const STATUS_GRACE: Duration = Duration::from_secs(30);

/// A hook that ran (or tried to), with the instants that bound the application's pause.
#[derive(Debug, Clone)]
pub struct HookRun {
    pub result: HookResult,
    pub started: Instant,
    pub ended: Instant,
}

impl HookRun {
    /// "pre hook NAME failed: exit 3: …", for a hook that did not succeed.
    pub fn failure(&self) -> Option<String> {
        let result = &self.result;
        let error = result.error.as_deref()?;
        let how = format!(
            "{} hook {} failed: {error}",
            result.phase.arg(),
            result.name
        );
        Some(with_stderr(&how, &result.stderr))
    }
}

/// Runs `spec`'s hook to its end.
pub fn run(spec: &HookSpec, start_timeout: Duration) -> HookRun {
    let started = Instant::now();
    let started_at = crate::launch::command::now();
    let status = go(spec, start_timeout);
    let ended = Instant::now();
    let mut result = HookResult {
        phase: spec.phase,
        name: spec.name.clone(),
        succeeded: false,
        duration_secs: (ended - started).as_secs_f64(),
        exit_code: None,
        error: None,
        stderr: String::new(),
        started_at: Some(started_at),
        finished_at: Some(crate::launch::command::now()),
    };
    match status {
        Ok(status) => {
            result.succeeded = status.succeeded();
            result.exit_code = status.exit_code;
            if !result.succeeded {
                result.error = Some(how_it_ended(&status));
            }
            result.stderr = status.stderr;
            result.started_at = status.started_at.or(result.started_at);
            result.finished_at = status.finished_at.or(result.finished_at);
        }
        Err(error) => result.error = Some(error),
    }
    HookRun {
        result,
        started,
        ended,
    }
}

/// Says go once the hook's container is up, and waits for its status.
fn go(spec: &HookSpec, start_timeout: Duration) -> Result<LaunchStatus, String> {
    wait::launcher_started(&spec.slot, start_timeout)?;
    slot_files::write_go(&spec.slot, "").map_err(|e| format!("cannot tell it to start: {e}"))?;
    let deadline = Instant::now() + spec.timeout + STATUS_GRACE;
    wait::status(&spec.slot, Some(deadline)).map_err(|why| match why {
        NoStatus::Killed => wait::killed_message().to_owned(),
        NoStatus::TimedOut => format!(
            "no status within its time limit of {} s and {} s more: its container is stuck",
            spec.timeout.as_secs(),
            STATUS_GRACE.as_secs()
        ),
        NoStatus::Unreadable(error) => format!("its status cannot be read: {error}"),
    })
}

/// The record of a hook that will not run.
pub fn skipped(spec: &HookSpec, why: &str) -> HookResult {
    HookResult {
        phase: spec.phase,
        name: spec.name.clone(),
        succeeded: false,
        duration_secs: 0.0,
        exit_code: None,
        error: Some(format!("skipped: {why}")),
        stderr: String::new(),
        started_at: None,
        finished_at: None,
    }
}
