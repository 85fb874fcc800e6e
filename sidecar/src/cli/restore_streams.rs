//! `restore --stream NAME=SLOT`: the snapshot's `/streams/NAME` into each restore container's
//! command, after its files and databases; and a restore without `--target` (databases,
//! streams, or both) from one snapshot.

use super::args::{Cli, RestoreArgs};
use super::output::bytes;
use super::{databases, open_indexed, select, Outcome, RunRecord};
use anyhow::{Context, Result};
use neverwiped::format::snapshot::Snapshot;
use neverwiped::repository::IndexedRepository;

/// Enters `--stream` in the run's record, before anything is opened: a mistake is a usage error.
pub fn enter(args: &RestoreArgs, record: &RunRecord) -> Result<()> {
    let start_timeout = args.streams.start_timeout.get();
    record
        .exchange
        .enter(args.streams.specs()?, Vec::new(), start_timeout);
    Ok(())
}

/// A restore without `--target`: its databases, then its streams, from one snapshot.
pub async fn restore_without_target(
    cli: &Cli,
    args: &RestoreArgs,
    record: &RunRecord,
) -> Result<Outcome> {
    let database_restores = databases::DatabaseRestores::enter(args, &record.databases)?;
    let repo = open_indexed(cli, record).await?;
    let (snapshot_id, snapshot) = select::for_restore(&repo, &args.selection()).await?;
    let mut outcome = database_restores
        .run(cli, args, &repo, snapshot_id, &snapshot)
        .await?;
    restore_streams(cli, record, &repo, &snapshot, &mut outcome).await?;
    Ok(outcome)
}

/// Each stream of the run into its command, in order; the first that fails fails the restore.
pub async fn restore_streams(
    cli: &Cli,
    record: &RunRecord,
    repo: &IndexedRepository,
    snapshot: &Snapshot,
    outcome: &mut Outcome,
) -> Result<()> {
    let start_timeout = record.exchange.start_timeout();
    for slot in record.exchange.streams() {
        let name = &slot.spec.name;
        let written =
            neverwiped::streams::restore::restore(repo, &snapshot.tree, &slot, start_timeout)
                .await
                .map_err(anyhow::Error::msg)
                .with_context(|| format!("stream {name}"))?;
        if cli.json {
            println!("{}", serde_json::json!({"stream": name, "bytes": written}));
        } else if !cli.quiet {
            println!("restored stream {name}: {}", bytes(written));
        }
        outcome.files += 1;
        outcome.bytes_read += written;
    }
    Ok(())
}
