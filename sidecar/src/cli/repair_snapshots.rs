//! `repair snapshots [SNAPSHOT…] [--forget] [--dry-run] [filters]`: damaged snapshots written
//! again as restic's `repair snapshots` writes them, under the exclusive lock (a dry run reads
//! under a shared one and writes nothing), and what was found and done printed.

use super::filters::SnapshotFilterArgs;
use super::Outcome;
use anyhow::Result;
use clap::Args;
use neverwiped::locking;
use neverwiped::maintenance::repair_snapshots::{self as repair, Outcome as Done, Problem};
use neverwiped::maintenance::repair_snapshots::{Damage, RepairedSnapshot};
use neverwiped::repository::{IndexedRepository, Repository};
use neverwiped::selection;
use neverwiped::text;
use neverwiped::views::raw;

#[derive(Debug, Args)]
pub struct RepairSnapshotsArgs {
    /// Snapshots to repair: id prefixes, or "latest" (the newest the filters choose). None:
    /// every snapshot the filters choose.
    #[arg(value_name = "SNAPSHOT")]
    pub snapshots: Vec<String>,
    /// Remove each damaged snapshot once its repaired copy is saved (the copy then gets no
    /// `repaired` tag); without it both are kept.
    #[arg(long)]
    pub forget: bool,
    /// Print what would be done; write and remove nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    #[command(flatten)]
    pub filter: SnapshotFilterArgs,
}

/// Repairs the chosen snapshots and prints the report: text, or one JSON object
/// (`docs/schema/repair-snapshots.json`).
pub async fn repair_snapshots(
    repo: &Repository,
    args: &RepairSnapshotsArgs,
    json: bool,
    quiet: bool,
) -> Result<Outcome> {
    let only = args.filter.selection()?;
    let repo = repo.clone().load_index().await?;
    let work = async {
        let chosen = selection::select_snapshots(&repo, &args.snapshots, &only).await?;
        repair::repair_snapshots(&repo, chosen, args.dry_run, args.forget).await
    };
    let report = if args.dry_run {
        // Reads only: a shared lock, or none where the repository cannot take one.
        let purpose = "repair snapshots --dry-run";
        let lock = locking::acquire_for_reading(&repo, purpose).await?;
        let done = work.await;
        locking::release_read_lock(lock, purpose).await;
        done?
    } else {
        exclusive(&repo, work).await?
    };
    if json {
        println!("{}", report_json(&report, args.dry_run));
    } else if !quiet {
        print_report(&report, args.dry_run, args.forget);
    }
    Ok(Outcome::default())
}

/// Runs `work` under the exclusive lock, released whatever happened.
async fn exclusive<T>(
    repo: &IndexedRepository,
    work: impl std::future::Future<Output = neverwiped::Result<T>>,
) -> Result<T> {
    let lock = locking::acquire(repo, true, "repair snapshots").await?;
    let done = lock.held_while(work).await;
    lock.release().await?;
    Ok(done?)
}

fn report_json(report: &[RepairedSnapshot], dry_run: bool) -> serde_json::Value {
    let snapshots: Vec<serde_json::Value> = report
        .iter()
        .map(|one| {
            let (action, new_id, removed) = match &one.outcome {
                Done::Unchanged => ("unchanged", None, false),
                Done::Rewritten {
                    new_id,
                    original_removed,
                } => ("rewritten", *new_id, *original_removed),
                Done::Removed { done } => ("removed", None, *done),
            };
            serde_json::json!({
                "snapshotId": one.id.to_hex(),
                "action": action,
                "newSnapshotId": new_id.map(|id| id.to_hex()),
                "snapshotRemoved": removed,
                "damage": one.damage.iter().map(damage_json).collect::<Vec<_>>(),
            })
        })
        .collect();
    serde_json::json!({
        "dryRun": dry_run,
        "snapshots": snapshots,
        "changedSnapshots": report.iter().filter(|one| one.changed()).count(),
    })
}

fn damage_json(damage: &Damage) -> serde_json::Value {
    let mut shown = serde_json::json!({
        "path": String::from_utf8_lossy(&damage.path),
        "problem": damage.problem.name(),
    });
    if let Some(raw) = raw(&damage.path) {
        shown["pathRaw"] = raw.into();
    }
    shown
}

/// restic's lines, paths quoted and escaped.
fn print_report(report: &[RepairedSnapshot], dry_run: bool, forget: bool) {
    for one in report {
        let paths: Vec<String> = one
            .snapshot
            .paths
            .iter()
            .map(|path| text::quoted(&path.0).into_owned())
            .collect();
        println!(
            "\nsnapshot {} of [{}] at {}",
            &one.id.to_hex()[..8],
            paths.join(" "),
            one.snapshot.time
        );
        for damage in &one.damage {
            let path = text::quoted(&damage.path);
            match damage.problem {
                Problem::MissingContent => println!("  file {path}: removed missing content"),
                Problem::WrongSize => println!("  file {path}: fixed incorrect size"),
                Problem::UnreadableFolder => {
                    println!("  dir {path}: replaced with empty directory")
                }
                Problem::UnreadableRoot => println!("  dir {path}: not readable"),
            }
        }
        print_outcome(one, forget);
    }
    let changed = report.iter().filter(|one| one.changed()).count();
    println!();
    match (changed, dry_run) {
        (0, false) => println!("no snapshots were modified"),
        (0, true) => println!("no snapshots would be modified"),
        (count, false) => println!("modified {count} snapshots"),
        (count, true) => println!("would modify {count} snapshots"),
    }
}

fn print_outcome(one: &RepairedSnapshot, forget: bool) {
    let old = &one.id.to_hex()[..8];
    match &one.outcome {
        Done::Unchanged => {}
        Done::Removed { done: false } => println!("would delete empty snapshot"),
        Done::Removed { done: true } => println!("removed empty snapshot {old}"),
        Done::Rewritten { new_id: None, .. } => {
            println!("would save new snapshot");
            if forget {
                println!("would remove old snapshot");
            }
        }
        Done::Rewritten {
            new_id: Some(new_id),
            original_removed,
        } => {
            println!("saved new snapshot {}", &new_id.to_hex()[..8]);
            if *original_removed {
                println!("removed old snapshot {old}");
            }
        }
    }
}
