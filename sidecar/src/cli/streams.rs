//! `--stream`, `--stream-allow-empty`, `--hook`, `--hook-timeout`, `--hook-on-error` and
//! `--stream-start-timeout` of `backup`, `restore` and `hooks`: read and checked into the
//! engine's [`StreamSpec`]s and [`HookSpec`]s, every mistake a usage error that names the flag.

use super::durations::parse_duration;
use anyhow::{bail, Result};
use clap::Args;
use neverwiped::streams::{HookSpec, StreamSpec, DEFAULT_START_TIMEOUT};
use neverwiped_contract::streams::{HookPhase, LaunchKind, OnError, Slot};
use std::time::Duration;

/// Default time limit of a hook without `--hook-timeout`.
const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(300);

/// How long a stream's or hook's container may take to start.
#[derive(Debug, Args, Clone)]
pub struct StartTimeoutFlag {
    /// How long a stream's or hook's container may take to start (write its SLOT.alive) before
    /// the run fails, e.g. 10m (the default), 90s.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration,
          env = "NEVERWIPED_STREAM_START_TIMEOUT")]
    pub stream_start_timeout: Option<Duration>,
}

impl StartTimeoutFlag {
    pub fn get(&self) -> Duration {
        self.stream_start_timeout.unwrap_or(DEFAULT_START_TIMEOUT)
    }
}

/// `--stream NAME=SLOT` of `restore`.
#[derive(Debug, Args, Clone)]
pub struct RestoreStreamFlags {
    /// Write the snapshot's /streams/NAME into the restore container of slot SLOT (the path of
    /// its files without the suffix, e.g. /neverwiped/exchange/stream-cache); repeatable.
    #[arg(long = "stream", value_name = "NAME=SLOT")]
    pub streams: Vec<String>,
    #[command(flatten)]
    pub start_timeout: StartTimeoutFlag,
}

/// `--hook PHASE:NAME=SLOT` and its time limit and error policy.
#[derive(Debug, Args, Clone)]
pub struct HookFlags {
    /// Run the hook container of slot SLOT before (pre) or after (post) the data is read;
    /// hooks of a phase run in the order given (repeatable).
    #[arg(long = "hook", value_name = "PHASE:NAME=SLOT")]
    pub hooks: Vec<String>,
    /// The hook's time limit in seconds (default 300): its command is killed at the limit.
    #[arg(long = "hook-timeout", value_name = "PHASE:NAME=SECS")]
    pub hook_timeouts: Vec<String>,
    /// What a failing hook does: Fail (the default: a pre hook fails the run, nothing is read)
    /// or Continue (a warning).
    #[arg(long = "hook-on-error", value_name = "PHASE:NAME=Fail|Continue")]
    pub hook_on_errors: Vec<String>,
}

/// The streams and hooks of `backup`.
#[derive(Debug, Args, Clone)]
pub struct BackupStreamFlags {
    /// Store the output of the stream container of slot SLOT as /streams/NAME (repeatable).
    #[arg(long = "stream", value_name = "NAME=SLOT")]
    pub streams: Vec<String>,
    /// An empty output of stream NAME is right (repeatable); otherwise it fails the backup.
    #[arg(long = "stream-allow-empty", value_name = "NAME")]
    pub stream_allow_empty: Vec<String>,
    #[command(flatten)]
    pub hooks: HookFlags,
    #[command(flatten)]
    pub start_timeout: StartTimeoutFlag,
}

/// Whether `name` is a DNS label (RFC 1123): what a plan's stream and hook names are.
fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// `NAME=SLOT`, checked: a DNS label and an absolute slot.
fn name_and_slot<'a>(text: &'a str, flag: &str, key: &str) -> Result<(&'a str, Slot)> {
    let Some((name, slot)) = text.split_once('=') else {
        bail!("{flag} takes {key}=SLOT, not {text:?}");
    };
    if !slot.starts_with('/') {
        bail!("{flag} {text}: the slot {slot:?} must be an absolute path (the exchange folder and the slot's name)");
    }
    Ok((name, Slot(slot.to_owned())))
}

fn check_name(name: &str, what: &str) -> Result<()> {
    if !is_dns_label(name) {
        bail!("{what} name {name:?} is not a DNS label: lowercase letters, digits and '-', at most 63, starting and ending with a letter or digit");
    }
    Ok(())
}

/// The streams of `--stream` (`allow_empty`: the names of `--stream-allow-empty`).
pub fn stream_specs(
    flags: &[String],
    allow_empty: &[String],
    kind: LaunchKind,
) -> Result<Vec<StreamSpec>> {
    let mut specs: Vec<StreamSpec> = Vec::new();
    for text in flags {
        let (name, slot) = name_and_slot(text, "--stream", "NAME")?;
        check_name(name, "stream")?;
        if specs.iter().any(|s| s.name == name) {
            bail!("--stream names stream {name} twice");
        }
        let allow_empty = allow_empty.iter().any(|n| n == name);
        specs.push(StreamSpec {
            name: name.to_owned(),
            slot,
            allow_empty,
            kind,
        });
    }
    if let Some(name) = allow_empty
        .iter()
        .find(|n| !specs.iter().any(|s| &&s.name == n))
    {
        bail!("--stream-allow-empty names stream {name}, which no --stream gives");
    }
    Ok(specs)
}

impl BackupStreamFlags {
    pub fn streams(&self) -> Result<Vec<StreamSpec>> {
        stream_specs(&self.streams, &self.stream_allow_empty, LaunchKind::Stream)
    }
}

impl RestoreStreamFlags {
    pub fn specs(&self) -> Result<Vec<StreamSpec>> {
        stream_specs(&self.streams, &[], LaunchKind::RestoreStream)
    }
}

/// `PHASE:NAME` of a hook flag.
fn phase_and_name(key: &str, flag: &str) -> Result<(HookPhase, String)> {
    let (phase, name) = match key.split_once(':') {
        Some(("pre", name)) => (HookPhase::Pre, name),
        Some(("post", name)) => (HookPhase::Post, name),
        _ => bail!("{flag} takes pre:NAME or post:NAME before '=', not {key:?}"),
    };
    check_name(name, "hook")?;
    Ok((phase, name.to_owned()))
}

/// `PHASE:NAME=VALUE` settings of one flag, each hook at most once and only a hook `--hook` gives.
fn settings<'a>(
    flags: &'a [String],
    flag: &str,
    hooks: &[HookSpec],
) -> Result<Vec<(HookPhase, String, &'a str)>> {
    let mut found: Vec<(HookPhase, String, &str)> = Vec::new();
    for text in flags {
        let Some((key, value)) = text.split_once('=') else {
            bail!("{flag} takes PHASE:NAME=VALUE, not {text:?}");
        };
        let (phase, name) = phase_and_name(key, flag)?;
        if !hooks.iter().any(|h| h.phase == phase && h.name == name) {
            bail!("{flag} names hook {key}, which no --hook gives");
        }
        if found.iter().any(|(p, n, _)| *p == phase && *n == name) {
            bail!("{flag} names hook {key} twice");
        }
        found.push((phase, name, value));
    }
    Ok(found)
}

impl HookFlags {
    /// The hooks, in the order given, with their time limits and error policies.
    pub fn specs(&self) -> Result<Vec<HookSpec>> {
        let mut specs: Vec<HookSpec> = Vec::new();
        for text in &self.hooks {
            let (key, slot) = name_and_slot(text, "--hook", "PHASE:NAME")?;
            let (phase, name) = phase_and_name(key, "--hook")?;
            if specs.iter().any(|h| h.phase == phase && h.name == name) {
                bail!("--hook names hook {key} twice");
            }
            let (timeout, on_error) = (DEFAULT_HOOK_TIMEOUT, OnError::Fail);
            specs.push(HookSpec {
                phase,
                name,
                slot,
                timeout,
                on_error,
            });
        }
        for (phase, name, value) in settings(&self.hook_timeouts, "--hook-timeout", &specs)? {
            let secs: u64 = value.parse().map_err(|_| {
                anyhow::anyhow!(
                    "--hook-timeout {}:{name}={value}: give whole seconds",
                    phase.arg()
                )
            })?;
            find(&mut specs, phase, &name).timeout = Duration::from_secs(secs);
        }
        for (phase, name, value) in settings(&self.hook_on_errors, "--hook-on-error", &specs)? {
            find(&mut specs, phase, &name).on_error = match value {
                "Fail" => OnError::Fail,
                "Continue" => OnError::Continue,
                _ => bail!(
                    "--hook-on-error {}:{name}={value}: give Fail or Continue",
                    phase.arg()
                ),
            };
        }
        Ok(specs)
    }
}

fn find<'a>(specs: &'a mut [HookSpec], phase: HookPhase, name: &str) -> &'a mut HookSpec {
    specs
        .iter_mut()
        .find(|h| h.phase == phase && h.name == name)
        .expect("checked by settings")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hooks(hooks: &[&str], timeouts: &[&str], on_errors: &[&str]) -> Result<Vec<HookSpec>> {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        HookFlags {
            hooks: strings(hooks),
            hook_timeouts: strings(timeouts),
            hook_on_errors: strings(on_errors),
        }
        .specs()
    }

    #[test]
    fn hooks_take_their_settings_by_phase_and_name() {
        let specs = hooks(
            &["pre:freeze=/x/pre-freeze", "post:freeze=/x/post-freeze"],
            &["post:freeze=7"],
            &["pre:freeze=Continue"],
        )
        .unwrap();
        assert_eq!(
            (specs[0].timeout, specs[0].on_error),
            (DEFAULT_HOOK_TIMEOUT, OnError::Continue)
        );
        assert_eq!(
            (specs[1].timeout, specs[1].on_error),
            (Duration::from_secs(7), OnError::Fail)
        );
        for (bad, needle) in [
            (hooks(&["during:x=/s"], &[], &[]), "pre:NAME or post:NAME"),
            (hooks(&["pre:X=/s"], &[], &[]), "not a DNS label"),
            (hooks(&["pre:x=s"], &[], &[]), "absolute"),
            (hooks(&["pre:x=/s", "pre:x=/t"], &[], &[]), "twice"),
            (
                hooks(&["pre:x=/s"], &["post:x=3"], &[]),
                "which no --hook gives",
            ),
            (
                hooks(&["pre:x=/s"], &[], &["pre:x=Maybe"]),
                "Fail or Continue",
            ),
        ] {
            let error = bad.unwrap_err().to_string();
            assert!(error.contains(needle), "{error}");
        }
    }

    #[test]
    fn streams_are_dns_labels_named_once() {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let specs = stream_specs(
            &strings(&["cache=/x/stream-cache"]),
            &strings(&["cache"]),
            LaunchKind::Stream,
        )
        .unwrap();
        assert!(specs[0].allow_empty);
        for (flags, empty, needle) in [
            (vec!["a_b=/s"], vec![], "DNS label"),
            (vec!["a=/s", "a=/t"], vec![], "twice"),
            (vec!["a"], vec![], "NAME=SLOT"),
            (vec!["a=/s"], vec!["b"], "no --stream gives"),
        ] {
            let error = stream_specs(&strings(&flags), &strings(&empty), LaunchKind::Stream)
                .unwrap_err()
                .to_string();
            assert!(error.contains(needle), "{error}");
        }
    }
}
