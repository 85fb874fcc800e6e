//! What a run's streams and hooks did, as its record shows them: each stream's bytes and error,
//! each hook's phase, time and error (bounded, one line), and how long the application was
//! paused — from the sidecar's result, or from the two hook Jobs around a plan's VolumeSnapshots.

use jiff::Timestamp;
use neverwiped_contract::streams::{self as contract, HookResult, StreamResult};
use neverwiped_contract::text::{escaped, truncate_at_char_boundary};
use neverwiped_contract::RunResult;

use crate::api::{HookPhase, HookRecord, StreamRecord};
use crate::conditions::Reason;

/// The most bytes of an error (with its command's standard error) a record keeps: a status stays
/// small however many streams and hooks a plan has.
const ERROR_MAX_BYTES: usize = 600;

/// The records of a run's streams.
pub fn stream_records(results: &[StreamResult]) -> Vec<StreamRecord> {
    results
        .iter()
        .map(|stream| StreamRecord {
            name: stream.name.clone(),
            bytes: i64::try_from(stream.bytes).unwrap_or(i64::MAX),
            error: failure_text(stream.error.as_deref(), &stream.stderr),
        })
        .collect()
}

/// The records of a run's hooks, in the order they ran.
pub fn hook_records(results: &[HookResult]) -> Vec<HookRecord> {
    results
        .iter()
        .map(|hook| HookRecord {
            phase: match hook.phase {
                contract::HookPhase::Pre => HookPhase::Pre,
                contract::HookPhase::Post => HookPhase::Post,
            },
            name: hook.name.clone(),
            succeeded: hook.succeeded,
            seconds: (hook.duration_secs * 10.0).round() / 10.0,
            error: match hook.succeeded {
                true => None,
                false => failure_text(hook.error.as_deref(), &hook.stderr)
                    .or_else(|| Some(exit_text(hook.exit_code))),
            },
        })
        .collect()
}

/// How long the application was paused between two hook Jobs: from the pre Job's first hook's
/// start to the post Job's last hook's end; `None` when either did not run a hook.
pub fn paused_between(pre: &[HookResult], post: &[HookResult]) -> Option<f64> {
    let time = |text: Option<&String>| text?.parse::<Timestamp>().ok();
    let started = time(pre.iter().find_map(|h| h.started_at.as_ref()))?;
    let ended = time(post.iter().rev().find_map(|h| h.finished_at.as_ref()))?;
    let seconds = ended.duration_since(started).as_secs_f64().max(0.0);
    Some((seconds * 10.0).round() / 10.0)
}

/// The first hook of `phase` that failed, as one bounded line: its name, how it exited and the
/// end of its standard error (`pre hook "freeze" failed (exited with code 4): standard error: …`).
pub fn failed_hook(results: &[HookResult], phase: contract::HookPhase) -> Option<String> {
    let hook = results.iter().find(|h| h.phase == phase && !h.succeeded)?;
    let exit = exit_text(hook.exit_code);
    let head = format!("{} hook {:?} failed ({exit})", phase.arg(), hook.name);
    Some(match failure_text(hook.error.as_deref(), &hook.stderr) {
        Some(error) => format!("{head}: {error}"),
        None => head,
    })
}

/// Why a run that failed failed, when its streams or hooks say: a stream that failed, or a pre
/// hook that failed before anything was read (only `onError: Fail` stops the read).
pub fn stream_or_hook_failure(result: &RunResult) -> Option<(Reason, String)> {
    if let Some(stream) = result.streams.iter().find(|s| s.error.is_some()) {
        let error = failure_text(stream.error.as_deref(), &stream.stderr).unwrap_or_default();
        return Some((
            Reason::StreamFailed,
            format!("stream {:?} failed: {error}", stream.name),
        ));
    }
    let nothing_read = result.files == 0 && result.bytes_read == 0;
    let failed_pre = result
        .hooks
        .iter()
        .find(|h| h.phase == contract::HookPhase::Pre && !h.succeeded);
    let hook = failed_pre.filter(|_| nothing_read)?;
    let error = failure_text(hook.error.as_deref(), &hook.stderr)
        .unwrap_or_else(|| exit_text(hook.exit_code));
    Some((
        Reason::HookFailed,
        format!(
            "pre hook {:?} failed, so nothing was read (the post hooks ran): {error}",
            hook.name
        ),
    ))
}

/// An error and the end of the command's standard error, as one bounded line.
fn failure_text(error: Option<&str>, stderr: &str) -> Option<String> {
    let stderr = stderr.trim();
    let mut text = match (error, stderr) {
        (None, "") => return None,
        (Some(error), "") => error.to_owned(),
        (None, stderr) => format!("standard error: {stderr}"),
        (Some(error), stderr) => format!("{error}; standard error: {stderr}"),
    };
    text = escaped(&text).into_owned();
    truncate_at_char_boundary(&mut text, ERROR_MAX_BYTES);
    Some(text)
}

fn exit_text(code: Option<i32>) -> String {
    match code {
        Some(code) => format!("exited with code {code}"),
        None => "did not run".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(phase: contract::HookPhase, started: &str, finished: &str) -> HookResult {
        HookResult {
            phase,
            name: "h".into(),
            succeeded: true,
            duration_secs: 1.0,
            exit_code: Some(0),
            error: None,
            stderr: String::new(),
            started_at: Some(started.into()),
            finished_at: Some(finished.into()),
        }
    }

    #[test]
    fn the_pause_runs_from_the_first_pre_hooks_start_to_the_last_post_hooks_end() {
        let pre = [
            hook(
                contract::HookPhase::Pre,
                "2026-11-30T02:00:00Z",
                "2026-11-30T02:00:01Z",
            ),
            hook(
                contract::HookPhase::Pre,
                "2026-11-30T02:00:01Z",
                "2026-11-30T02:00:02Z",
            ),
        ];
        let post = [hook(
            contract::HookPhase::Post,
            "2026-11-30T02:00:09Z",
            "2026-11-30T02:00:12.5Z",
        )];
        assert_eq!(paused_between(&pre, &post), Some(12.5));
        assert_eq!(paused_between(&pre, &[]), None);
    }

    #[test]
    fn a_failed_hook_keeps_its_error_and_standard_error_bounded_on_one_line() {
        let mut failed = hook(contract::HookPhase::Pre, "x", "y");
        failed.succeeded = false;
        failed.exit_code = Some(2);
        failed.stderr = format!("FATAL: no\n{}", "x".repeat(2000));
        let record = &hook_records(&[failed])[0];
        let error = record.error.as_deref().unwrap();
        assert!(error.starts_with("standard error: FATAL: no\\n"), "{error}");
        assert!(error.len() <= ERROR_MAX_BYTES);
        assert_eq!(record.phase, HookPhase::Pre);
    }
}
