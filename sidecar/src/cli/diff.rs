//! `diff SNAPSHOT1 SNAPSHOT2`: what changed from the first snapshot to the second, as restic
//! prints it (see [`neverwiped::inspect::diff`]), with a closing count.

use super::Outcome;
use anyhow::Result;
use clap::Args;
use neverwiped::inspect::diff::{self, SideStats};
use neverwiped::repository::IndexedRepository;
use neverwiped::selection::snapshot_spec;
use neverwiped::text::{self, bytes};
use neverwiped::views::raw;

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The snapshot compared from: id prefix, or "latest".
    pub snapshot1: String,
    /// The snapshot compared to: id prefix, or "latest".
    pub snapshot2: String,
    /// Also list entries whose metadata alone changed (mode, owner, times, inode), marked U.
    #[arg(long)]
    pub metadata: bool,
}

fn side_json(side: &SideStats) -> serde_json::Value {
    serde_json::json!({
        "files": side.files,
        "dirs": side.dirs,
        "others": side.others,
        "dataBlobs": side.data_blobs,
        "bytes": side.bytes,
    })
}

/// Prints the changes and their counts: text, or one JSON object (`docs/schema/diff.json`).
pub async fn diff(repo: &IndexedRepository, args: &DiffArgs, json: bool) -> Result<Outcome> {
    let (id1, first) = repo.find_snapshot(&snapshot_spec(&args.snapshot1)).await?;
    let (id2, second) = repo.find_snapshot(&snapshot_spec(&args.snapshot2)).await?;
    let (changes, stats) = diff::diff(repo, &first.tree, &second.tree, args.metadata).await?;
    if json {
        let changes: Vec<serde_json::Value> = changes
            .iter()
            .map(|change| {
                let mut shown = serde_json::json!({
                    "path": String::from_utf8_lossy(&change.path),
                    "modifier": change.modifier,
                });
                if let Some(raw) = raw(&change.path) {
                    shown["pathRaw"] = raw.into();
                }
                shown
            })
            .collect();
        let printed = serde_json::json!({
            "sourceSnapshot": id1.to_hex(),
            "targetSnapshot": id2.to_hex(),
            "changes": changes,
            "changedFiles": stats.changed_files,
            "added": side_json(&stats.added),
            "removed": side_json(&stats.removed),
        });
        println!("{printed}");
        return Ok(Outcome::default());
    }
    println!("comparing snapshot {} to {}:\n", id1.short(), id2.short());
    for change in &changes {
        // The workload's names, quoted: they cannot drive the terminal.
        println!("{:<5}{}", change.modifier, text::quoted(&change.path));
    }
    let (added, removed) = (&stats.added, &stats.removed);
    println!();
    println!(
        "Files:       {:5} new, {:5} removed, {:5} changed",
        added.files, removed.files, stats.changed_files
    );
    println!(
        "Dirs:        {:5} new, {:5} removed",
        added.dirs, removed.dirs
    );
    println!(
        "Others:      {:5} new, {:5} removed",
        added.others, removed.others
    );
    println!(
        "Data Blobs:  {:5} new, {:5} removed",
        added.data_blobs, removed.data_blobs
    );
    println!("  Added:   {}", bytes(added.bytes));
    println!("  Removed: {}", bytes(removed.bytes));
    Ok(Outcome::default())
}
