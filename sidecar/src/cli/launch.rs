//! `neverwiped-sidecar launch KIND --slot SLOT [--timeout SECS] -- COMMAND…`: a stream or hook
//! container's entrypoint, kept off the main command line (and its `--help`): it opens no
//! repository and writes no result, only the slot's status (see [`neverwiped::launch`]).

use clap::Parser;
use neverwiped::launch::{self, Launch};
use neverwiped_contract::streams::{LaunchKind, Slot};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    name = "neverwiped-sidecar launch",
    about = "Run a stream's or hook's command for the sidecar container of the same pod."
)]
struct LaunchCommand {
    /// stream, restore-stream or hook.
    #[arg(value_parser = parse_kind)]
    kind: LaunchKind,
    /// The slot: the path of its files without their suffix (SLOT.fifo, SLOT.status, …).
    #[arg(long)]
    slot: String,
    /// Hooks: the command's time limit in seconds; its process group is killed at the limit.
    #[arg(long, value_name = "SECS")]
    timeout: Option<u64>,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

fn parse_kind(text: &str) -> Result<LaunchKind, String> {
    [
        LaunchKind::Stream,
        LaunchKind::RestoreStream,
        LaunchKind::Hook,
    ]
    .into_iter()
    .find(|kind| kind.arg() == text)
    .ok_or_else(|| format!("{text:?} is not one of stream, restore-stream, hook"))
}

/// Runs the launcher when the command line asks for it (`launch` first); `None` otherwise.
pub fn run_if_asked() -> Option<ExitCode> {
    let mut args = std::env::args_os();
    let binary = args.next()?;
    if args.next()? != "launch" {
        return None;
    }
    let parsed = LaunchCommand::try_parse_from(std::iter::once(binary).chain(args));
    let command = match parsed {
        Ok(command) => command,
        Err(error) => {
            let _ = error.print();
            return Some(ExitCode::from(if error.use_stderr() { 2 } else { 0 }));
        }
    };
    let launched = launch::launch(&Launch {
        kind: command.kind,
        slot: Slot(command.slot),
        timeout: command.timeout.map(Duration::from_secs),
        command: command.command,
    });
    Some(match launched {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: launch: {error}");
            ExitCode::FAILURE
        }
    })
}
