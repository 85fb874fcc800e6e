//! `hooks --phase pre|post`: one phase of a plan's hooks alone (around its CSI snapshots), and
//! the pieces `backup` brackets its reading with: pre hooks once the repository is locked, post
//! hooks and the release of unused launchers on every way out.

use super::streams::{HookFlags, StartTimeoutFlag};
use super::{Outcome, RunRecord};
use anyhow::Result;
use clap::Args;
use neverwiped::archive::BeforeReading;
use neverwiped::launch::slot_files;
use neverwiped::streams::Exchange;
use neverwiped_contract::streams::{HookPhase, GO_SKIP};
use std::sync::Arc;

#[derive(Debug, Args)]
pub struct HooksArgs {
    /// Which hooks to run: pre or post (the others given are released unrun).
    #[arg(long, value_parser = parse_phase)]
    pub phase: HookPhase,
    #[command(flatten)]
    pub hooks: HookFlags,
    #[command(flatten)]
    pub start_timeout: StartTimeoutFlag,
}

fn parse_phase(text: &str) -> Result<HookPhase, String> {
    match text {
        "pre" => Ok(HookPhase::Pre),
        "post" => Ok(HookPhase::Post),
        _ => Err(format!("{text:?} is not a phase: give pre or post")),
    }
}

/// Runs the hooks of `--phase` in order. Pre: one failing with `Fail` fails the run and the
/// pre hooks after it are skipped. Post: every hook runs; one failing with `Fail` fails the run.
pub async fn hooks(args: &HooksArgs, record: &RunRecord) -> Result<Outcome> {
    let (ours, others): (Vec<_>, Vec<_>) = args
        .hooks
        .specs()?
        .into_iter()
        .partition(|hook| hook.phase == args.phase);
    for other in others {
        let _ = slot_files::write_go(&other.slot, GO_SKIP);
    }
    record
        .exchange
        .enter(Vec::new(), ours, args.start_timeout.get());
    let (exchange, phase) = (record.exchange.clone(), args.phase);
    tokio::task::spawn_blocking(move || exchange.run_phase(phase))
        .await?
        .map_err(anyhow::Error::msg)?;
    Ok(Outcome::default())
}

/// A backup's pre hooks, run once its repository is locked; the first failing with `Fail` fails
/// the backup before anything is read.
pub fn pre_hooks(exchange: Arc<Exchange>) -> BeforeReading {
    Box::new(move || {
        exchange
            .run_phase(HookPhase::Pre)
            .map_err(neverwiped::Error::Hook)
    })
}

/// The end of a run's streams and hooks: the post hooks if not run yet (a failure, a warning),
/// then every unused launcher released. On a thread: hooks block.
pub async fn finish(exchange: &Arc<Exchange>) {
    let exchange = exchange.clone();
    let _ = tokio::task::spawn_blocking(move || exchange.finish()).await;
}
