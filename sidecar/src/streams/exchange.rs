//! What a run does with its [`Exchange`]: enters its streams and hooks, runs a phase of hooks,
//! releases what it did not use, and reports each.

use super::{hooks, lock, Exchange, HookSpec, HookState, StreamSlot, StreamSpec};
use crate::launch::slot_files;
use neverwiped_contract::streams::{HookPhase, HookResult, OnError, StreamResult, GO_SKIP};
use std::sync::Arc;
use std::time::Duration;

impl Exchange {
    /// Enters the run's streams and hooks, and how long their containers may take to start.
    pub fn enter(&self, streams: Vec<StreamSpec>, hooks: Vec<HookSpec>, start_timeout: Duration) {
        lock(&self.streams).extend(streams.into_iter().map(|s| Arc::new(StreamSlot::new(s))));
        lock(&self.hooks).extend(hooks.into_iter().map(|h| (h, HookState::Waiting)));
        *lock(&self.start_timeout) = Some(start_timeout);
    }

    pub fn start_timeout(&self) -> Duration {
        lock(&self.start_timeout).unwrap_or(super::DEFAULT_START_TIMEOUT)
    }

    /// The run's streams.
    pub fn streams(&self) -> Vec<Arc<StreamSlot>> {
        lock(&self.streams).clone()
    }

    /// Runs the waiting hooks of `phase` in order (blocking). A pre hook that fails with `Fail`
    /// skips the pre hooks after it, as does a stop; its message is returned. Post hooks run
    /// once, all of them, whatever happens; a failing one with `Fail` is returned too. Failures
    /// with `Continue` become warnings.
    pub fn run_phase(&self, phase: HookPhase) -> Result<(), String> {
        let mut post_done = lock(&self.phases);
        if phase == HookPhase::Post {
            if *post_done {
                return Ok(());
            }
            *post_done = true;
        }
        let mut failure: Option<String> = None;
        for index in self.waiting(phase) {
            let spec = lock(&self.hooks)[index].0.clone();
            let stopping = crate::stopping::is_requested();
            if phase == HookPhase::Pre && (failure.is_some() || stopping) {
                let why = match stopping {
                    true => "the run is stopping",
                    false => "an earlier pre hook failed",
                };
                let _ = slot_files::write_go(&spec.slot, GO_SKIP);
                lock(&self.hooks)[index].1 = HookState::Skipped(hooks::skipped(&spec, why));
                continue;
            }
            tracing::info!(hook = %spec.name, phase = spec.phase.arg(), "running hook");
            let run = hooks::run(&spec, self.start_timeout());
            if let Some(message) = run.failure() {
                tracing::warn!("{}", crate::text::escaped(&message));
                match (spec.on_error, &failure) {
                    (OnError::Fail, None) => failure = Some(message),
                    _ => lock(&self.warnings).push(message),
                }
            }
            lock(&self.hooks)[index].1 = HookState::Ran(run);
        }
        failure.map_or(Ok(()), Err)
    }

    fn waiting(&self, phase: HookPhase) -> Vec<usize> {
        let hooks = lock(&self.hooks);
        (0..hooks.len())
            .filter(|&i| hooks[i].0.phase == phase && matches!(hooks[i].1, HookState::Waiting))
            .collect()
    }

    /// The end of a run (blocking): the post hooks, if they have not run, as warnings; then
    /// every launcher not used is released. Safe to call more than once.
    pub fn finish(&self) {
        if let Err(message) = self.run_phase(HookPhase::Post) {
            lock(&self.warnings).push(message);
        }
        self.release();
    }

    /// Releases the launchers of streams not reached and hooks not run.
    pub fn release(&self) {
        for stream in self.streams() {
            stream.release();
        }
        let mut hooks = lock(&self.hooks);
        for (spec, state) in hooks.iter_mut() {
            if matches!(state, HookState::Waiting) {
                let _ = slot_files::write_go(&spec.slot, GO_SKIP);
                *state = HookState::Skipped(hooks::skipped(spec, "the run ended before it"));
            }
        }
    }

    /// Warnings of hooks that failed without failing the run.
    pub fn warnings(&self) -> Vec<String> {
        lock(&self.warnings).clone()
    }

    /// Each stream's bytes and end; with `run_failed`, one never reached says so.
    pub fn stream_results(&self, run_failed: bool) -> Vec<StreamResult> {
        self.streams()
            .iter()
            .map(|s| s.result(run_failed))
            .collect()
    }

    /// Each hook that ran or was skipped, in the order given.
    pub fn hook_results(&self) -> Vec<HookResult> {
        lock(&self.hooks)
            .iter()
            .filter_map(|(_, state)| match state {
                HookState::Waiting => None,
                HookState::Ran(run) => Some(run.result.clone()),
                HookState::Skipped(result) => Some(result.clone()),
            })
            .collect()
    }

    /// Seconds from the first pre hook's start to the last post hook's end, once both ran.
    pub fn paused_secs(&self) -> Option<f64> {
        let hooks = lock(&self.hooks);
        let ran = |phase: HookPhase| {
            hooks.iter().filter_map(move |(spec, state)| match state {
                HookState::Ran(run) if spec.phase == phase => Some(run),
                _ => None,
            })
        };
        let first = ran(HookPhase::Pre).map(|run| run.started).min()?;
        let last = ran(HookPhase::Post).map(|run| run.ended).max()?;
        Some((last - first).as_secs_f64())
    }
}

impl Exchange {
    /// A backup's streams, as sources read into `/streams/NAME`.
    pub fn backup_sources(&self) -> Vec<crate::archive::Source> {
        let start_timeout = self.start_timeout();
        self.streams()
            .into_iter()
            .map(|slot| crate::archive::Source::Stream(super::reader::source(slot, start_timeout)))
            .collect()
    }
}
