//! `repair index`: the index written again from the packs; `repair snapshots`: snapshots
//! written again without what is gone. Both under the exclusive lock, and what changed printed.

use super::Outcome;
use anyhow::Result;
use clap::{Args, Subcommand};
use neverwiped::locking;
use neverwiped::maintenance::repair::{self, IndexRepair};
use neverwiped::repository::Repository;

#[derive(Debug, Subcommand)]
pub enum RepairCommand {
    /// Write the index again from the packs: drop the entries of packs that are gone, index the
    /// packs no index lists (and those whose size does not match their entries).
    Index(RepairIndexArgs),
    /// Write damaged snapshots again: files lose the content that is gone (and are cut short by
    /// it), folders that cannot be read become empty, snapshots whose root cannot be read are
    /// removed. Run `repair index` first.
    Snapshots(super::repair_snapshots::RepairSnapshotsArgs),
}

#[derive(Debug, Args)]
pub struct RepairIndexArgs {
    /// Read the header of every pack, not only of those the index lacks or gets wrong.
    #[arg(long)]
    pub read_all_packs: bool,
}

/// Runs the repair and prints its report: text, or one JSON object
/// (`docs/schema/repair-index.json`).
pub async fn repair(
    repo: &Repository,
    command: &RepairCommand,
    json: bool,
    quiet: bool,
) -> Result<Outcome> {
    let args = match command {
        RepairCommand::Index(args) => args,
        RepairCommand::Snapshots(args) => {
            return super::repair_snapshots::repair_snapshots(repo, args, json, quiet).await
        }
    };
    let lock = locking::acquire(repo, true, "repair index").await?;
    let report = lock
        .held_while(repair::repair_index(repo, args.read_all_packs))
        .await;
    lock.release().await?;
    let report = report?;
    if json {
        println!("{}", report_json(&report));
    } else if !quiet {
        print_report(&report);
    }
    Ok(Outcome::default())
}

fn report_json(report: &IndexRepair) -> serde_json::Value {
    let ids = |packs: &[neverwiped::ids::PackId]| -> Vec<String> {
        packs.iter().map(|id| id.to_hex()).collect()
    };
    let unreadable: Vec<serde_json::Value> = report
        .packs_unreadable
        .iter()
        .map(|(id, reason)| serde_json::json!({ "pack": id.to_hex(), "reason": reason }))
        .collect();
    serde_json::json!({
        "packsRead": report.packs_read,
        "packsMissing": ids(&report.packs_missing),
        "packsAdded": ids(&report.packs_added),
        "packsUnreadable": unreadable,
        "packsIndexed": report.packs_indexed,
        "blobsIndexed": report.blobs_indexed,
        "indexObjectsRemoved": report.index_objects_removed,
    })
}

fn print_report(report: &IndexRepair) {
    println!("read the headers of {} pack(s)", report.packs_read);
    for id in &report.packs_missing {
        println!(
            "pack {} is gone: its index entries are removed",
            id.to_hex()
        );
    }
    for id in &report.packs_added {
        println!("pack {} was in no index: indexed", id.to_hex());
    }
    for (id, reason) in &report.packs_unreadable {
        println!(
            "pack {} cannot be read, left out of the index: {}",
            id.to_hex(),
            neverwiped::text::escaped(reason)
        );
    }
    println!(
        "wrote a new index of {} pack(s) and {} blob(s); removed {} old index object(s)",
        report.packs_indexed, report.blobs_indexed, report.index_objects_removed
    );
    if !report.packs_missing.is_empty() {
        println!(
            "snapshots may now name blobs no pack holds: run `check`, then restore what is left"
        );
    }
}
