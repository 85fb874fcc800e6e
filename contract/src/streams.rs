//! Streams and hooks: the extra containers of a backup or restore pod, and how the sidecar
//! container talks to them without exec'ing anywhere.
//!
//! Every container of the pod mounts one shared `emptyDir` at [`EXCHANGE_DIR`]. An init
//! container of the sidecar's image copies the sidecar's (static) binary to [`TOOLS_DIR`], another
//! `emptyDir`, and each stream or hook container runs it as its entrypoint
//! ([`LaunchArgs::command`]): `neverwiped-sidecar launch KIND --slot SLOT -- COMMAND…`. The
//! launcher runs the user's command and reports through the slot's files:
//!
//! | file | written by | means |
//! |---|---|---|
//! | `SLOT.fifo` | either side creates it (`mkfifo`, an existing one is fine) | the data |
//! | `SLOT.alive` | the launcher, `flock`ed for as long as it lives | a free lock: the launcher is gone |
//! | `SLOT.go` | the sidecar (hooks only) | run the hook now |
//! | `SLOT.status` | the launcher, once, when the command ended ([`LaunchStatus`], JSON, written to `.tmp` and renamed) | how it ended |
//!
//! - `stream`: the command's standard output is the FIFO's write end. The sidecar reads the FIFO
//!   to its end into the snapshot as `/streams/NAME`, then reads the status: a command that
//!   exited non-zero or was killed, a launcher that died without a status (its lock is free), or
//!   no bytes at all (unless the plan allows an empty stream) fails the run.
//! - `restore-stream`: the FIFO's read end is the command's standard input; the sidecar writes
//!   the snapshot's `/streams/NAME` into it and closes it, then reads the status.
//! - `hook`: the launcher waits for `SLOT.go`, runs the command with a time limit (its process
//!   group is killed at the limit), and writes the status. The launcher ignores SIGTERM, so a post
//!   hook still runs while the pod is being stopped.
//!
//! A launcher whose sidecar never comes (the sidecar failed before it reached the stream) is
//! released by the sidecar: before it exits, it opens and closes every FIFO it did not read, and
//! writes `SLOT.go` for every hook it will not run with the content `skip`.

use serde::{Deserialize, Serialize};

/// Where the shared `emptyDir` is mounted in every container of the pod.
pub const EXCHANGE_DIR: &str = "/neverwiped/exchange";
/// Where the init container copies the sidecar's binary, in every stream and hook container.
pub const TOOLS_DIR: &str = "/neverwiped/bin";
/// The launcher, as stream and hook containers run it.
pub const LAUNCHER_PATH: &str = "/neverwiped/bin/neverwiped-sidecar";
/// Where a stream's content is in a snapshot: `/streams/NAME`.
pub const SNAPSHOT_FOLDER: &str = "/streams";
/// The most bytes of a command's standard error kept in its status and the run record: the
/// last ones, where tools put their error.
pub const STDERR_TAIL_BYTES: usize = 512;
/// The content of `SLOT.go` that tells a hook's launcher to exit without running its command.
pub const GO_SKIP: &str = "skip";

/// The files of one stream or hook in the exchange folder: `DIR/KIND-NAME.*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot(pub String);

impl Slot {
    /// The slot of a stream (`stream-NAME`) or hook (`pre-NAME`, `post-NAME`) under `dir`.
    pub fn new(dir: &str, kind: &str, name: &str) -> Slot {
        Slot(format!("{}/{kind}-{name}", dir.trim_end_matches('/')))
    }
    pub fn fifo(&self) -> String {
        format!("{}.fifo", self.0)
    }
    pub fn alive(&self) -> String {
        format!("{}.alive", self.0)
    }
    pub fn go(&self) -> String {
        format!("{}.go", self.0)
    }
    pub fn status(&self) -> String {
        format!("{}.status", self.0)
    }
}

/// What the launcher runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LaunchKind {
    /// The command's standard output into the FIFO.
    Stream,
    /// The FIFO into the command's standard input.
    RestoreStream,
    /// The command, when the sidecar says go, within a time limit.
    Hook,
}

impl LaunchKind {
    pub fn arg(self) -> &'static str {
        match self {
            LaunchKind::Stream => "stream",
            LaunchKind::RestoreStream => "restore-stream",
            LaunchKind::Hook => "hook",
        }
    }
}

/// `neverwiped-sidecar launch KIND --slot SLOT [--timeout SECS] -- COMMAND…`: a stream or hook
/// container's entrypoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchArgs {
    pub kind: LaunchKind,
    pub slot: Slot,
    /// Hooks: the command's time limit in seconds.
    pub timeout_secs: Option<u64>,
    /// The user's command and its arguments, never a secret (those come by environment).
    pub command: Vec<String>,
}

/// Pushes `FLAG VALUE` as two words, the form of every option these command lines pass.
fn push_flag(args: &mut Vec<String>, flag: &str, value: impl std::fmt::Display) {
    args.push(flag.to_owned());
    args.push(value.to_string());
}

impl LaunchArgs {
    /// The container's whole command, [`LAUNCHER_PATH`] first.
    pub fn command(&self) -> Vec<String> {
        let mut args = vec![
            LAUNCHER_PATH.to_owned(),
            "launch".to_owned(),
            self.kind.arg().to_owned(),
        ];
        push_flag(&mut args, "--slot", &self.slot.0);
        if let Some(secs) = self.timeout_secs {
            push_flag(&mut args, "--timeout", secs);
        }
        args.push("--".to_owned());
        args.extend(self.command.iter().cloned());
        args
    }
}

/// How a launched command ended, as the launcher writes it to `SLOT.status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LaunchStatus {
    /// The command's exit code, when it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that killed it, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Why it did not run or did not finish: it could not start, or outlived its time limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The last [`STDERR_TAIL_BYTES`] of its standard error, as text (invalid UTF-8 replaced).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr: String,
    /// RFC 3339 times the command started and ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
}

impl LaunchStatus {
    /// Whether the command ran and exited 0.
    pub fn succeeded(&self) -> bool {
        self.exit_code == Some(0) && self.error.is_none()
    }
}

/// When a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum HookPhase {
    Pre,
    Post,
}

impl HookPhase {
    pub fn arg(self) -> &'static str {
        match self {
            HookPhase::Pre => "pre",
            HookPhase::Post => "post",
        }
    }
}

/// What a failing hook does to the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OnError {
    /// The run fails (a pre hook: nothing is read; post hooks still run).
    Fail,
    /// A warning; the run goes on.
    Continue,
}

/// `--stream NAME=SLOT` (and `--stream-allow-empty NAME`) of `backup`, or `--stream NAME=SLOT`
/// of `restore`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamArg {
    pub name: String,
    pub slot: Slot,
    /// Backup only: zero bytes is a success.
    pub allow_empty: bool,
}

impl StreamArg {
    pub fn push_args(&self, args: &mut Vec<String>) {
        push_flag(
            args,
            "--stream",
            format_args!("{}={}", self.name, self.slot.0),
        );
        if self.allow_empty {
            push_flag(args, "--stream-allow-empty", &self.name);
        }
    }
}

/// `--hook PHASE:NAME=SLOT` with `--hook-timeout NAME=SECS` and `--hook-on-error NAME=Fail|Continue`
/// of `backup` and `hooks`. Hooks of one phase run in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookArg {
    pub phase: HookPhase,
    pub name: String,
    pub slot: Slot,
    pub timeout_secs: u64,
    pub on_error: OnError,
}

impl HookArg {
    pub fn push_args(&self, args: &mut Vec<String>) {
        let key = format!("{}:{}", self.phase.arg(), self.name);
        let on_error = match self.on_error {
            OnError::Fail => "Fail",
            OnError::Continue => "Continue",
        };
        push_flag(args, "--hook", format_args!("{key}={}", self.slot.0));
        push_flag(
            args,
            "--hook-timeout",
            format_args!("{key}={}", self.timeout_secs),
        );
        push_flag(args, "--hook-on-error", format_args!("{key}={on_error}"));
    }
}

/// `neverwiped-sidecar hooks --phase pre|post --result-file PATH --hook …`: one phase's hooks
/// alone, for a plan whose volumes are read from CSI snapshots — the operator runs the `pre`
/// Job, takes the snapshots once it succeeded, and runs the `post` Job when they are ready or
/// failed, so the application pauses for the snapshots' creation only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HooksArgs {
    pub phase: HookPhase,
    pub result_file: String,
    pub hooks: Vec<HookArg>,
}

impl HooksArgs {
    pub fn to_args(&self) -> Vec<String> {
        let mut args = vec!["hooks".to_owned()];
        push_flag(&mut args, "--phase", self.phase.arg());
        push_flag(&mut args, "--result-file", &self.result_file);
        for hook in &self.hooks {
            hook.push_args(&mut args);
        }
        args
    }
}

/// One stream of a backup or restore, in the run's result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamResult {
    pub name: String,
    /// Bytes read from (backup) or written to (restore) the command.
    pub bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Why the stream failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The end of the command's standard error (at most [`STDERR_TAIL_BYTES`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr: String,
}

/// One hook of a run, in the run's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookResult {
    pub phase: HookPhase,
    pub name: String,
    /// Whether it ran and exited 0.
    pub succeeded: bool,
    pub duration_secs: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr: String,
    /// RFC 3339 times it started and ended (none when it did not run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
}

/// How short the standard-error tails of a result's streams and hooks are made first, when the
/// result does not fit in a termination message.
pub const STDERR_SHORT_BYTES: usize = 120;

/// Shortens `text` to at most `limit` bytes (at a character boundary, `…` appended); whether it
/// changed. A limit too small for the mark empties it.
fn shorten(text: &mut String, limit: usize) -> bool {
    if text.len() <= limit {
        return false;
    }
    let mark = "…";
    if limit <= mark.len() {
        text.clear();
        return true;
    }
    // The end is kept: tools put their error last. The mark counts within the limit.
    let mut start = text.len() - limit.saturating_sub(mark.len());
    while !text.is_char_boundary(start) {
        start += 1;
    }
    *text = format!("{mark}{}", &text[start..]);
    true
}

/// Shortens every stream's and hook's standard error to `limit` bytes (0: none), and with
/// `errors` their errors too; whether anything changed.
pub fn shorten_reports(
    streams: &mut [StreamResult],
    hooks: &mut [HookResult],
    limit: usize,
    errors: bool,
) -> bool {
    let mut changed = false;
    let mut texts: Vec<&mut String> = Vec::new();
    for stream in streams.iter_mut() {
        texts.push(&mut stream.stderr);
        if let (true, Some(error)) = (errors, stream.error.as_mut()) {
            texts.push(error);
        }
    }
    for hook in hooks.iter_mut() {
        texts.push(&mut hook.stderr);
        if let (true, Some(error)) = (errors, hook.error.as_mut()) {
            texts.push(error);
        }
    }
    for text in texts {
        changed |= shorten(text, limit);
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_container_runs_the_launcher_with_the_users_command_after_a_double_dash() {
        let launch = LaunchArgs {
            kind: LaunchKind::Hook,
            slot: Slot::new(EXCHANGE_DIR, "pre", "checkpoint"),
            timeout_secs: Some(30),
            command: vec!["psql".into(), "-c".into(), "CHECKPOINT".into()],
        };
        assert_eq!(
            launch.command(),
            [
                LAUNCHER_PATH,
                "launch",
                "hook",
                "--slot",
                "/neverwiped/exchange/pre-checkpoint",
                "--timeout",
                "30",
                "--",
                "psql",
                "-c",
                "CHECKPOINT"
            ]
        );
    }

    #[test]
    fn hook_flags_name_the_phase_and_the_hook() {
        let mut args = Vec::new();
        HookArg {
            phase: HookPhase::Post,
            name: "thaw".into(),
            slot: Slot::new("/x/", "post", "thaw"),
            timeout_secs: 60,
            on_error: OnError::Continue,
        }
        .push_args(&mut args);
        assert_eq!(
            args,
            [
                "--hook",
                "post:thaw=/x/post-thaw",
                "--hook-timeout",
                "post:thaw=60",
                "--hook-on-error",
                "post:thaw=Continue"
            ]
        );
    }

    #[test]
    fn a_status_succeeds_only_for_exit_zero_without_an_error() {
        let ok = LaunchStatus {
            exit_code: Some(0),
            ..LaunchStatus::default()
        };
        assert!(ok.succeeded());
        let killed = LaunchStatus {
            signal: Some(9),
            ..LaunchStatus::default()
        };
        assert!(!killed.succeeded());
        let timed_out = LaunchStatus {
            exit_code: Some(0),
            error: Some("outlived its 30 s".into()),
            ..LaunchStatus::default()
        };
        assert!(!timed_out.succeeded());
    }
}
