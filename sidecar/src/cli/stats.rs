//! `stats [SNAPSHOT…]`: the size a restore of the snapshots would write, or the stored data
//! they reference, as restic's `stats` modes count them.

use super::filters::SnapshotFilterArgs;
use super::Outcome;
use anyhow::Result;
use clap::{Args, ValueEnum};
use neverwiped::inspect::stats;
use neverwiped::repository::IndexedRepository;
use neverwiped::selection;
use neverwiped::text::bytes;

/// What `stats` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatsMode {
    /// The files' sizes and the entries a restore would write (hard links counted once).
    RestoreSize,
    /// The blobs referenced, each once: stored (compressed) and uncompressed bytes.
    RawData,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Snapshots to count: id prefixes, or "latest". None: every snapshot the filters choose.
    #[arg(value_name = "SNAPSHOT")]
    pub snapshots: Vec<String>,
    #[command(flatten)]
    pub filter: SnapshotFilterArgs,
    /// What to count.
    #[arg(long, value_enum, default_value = "restore-size")]
    pub mode: StatsMode,
}

/// Counts and prints: text, or one JSON object (`docs/schema/stats.json`).
pub async fn stats(repo: &IndexedRepository, args: &StatsArgs, json: bool) -> Result<Outcome> {
    let selection = args.filter.selection()?;
    let snapshots = selection::select_snapshots(repo, &args.snapshots, &selection).await?;
    let roots: Vec<_> = snapshots
        .iter()
        .map(|(_, snapshot)| snapshot.tree)
        .collect();
    let count = snapshots.len();
    match args.mode {
        StatsMode::RestoreSize => {
            let size = stats::restore_size(repo, &roots).await?;
            if json {
                let printed = serde_json::json!({
                    "mode": "restore-size",
                    "snapshotsCount": count,
                    "totalSize": size.bytes,
                    "totalFileCount": size.entries,
                });
                println!("{printed}");
            } else {
                println!("Stats in restore-size mode:");
                println!("     Snapshots processed:  {count}");
                println!("        Total File Count:  {}", size.entries);
                println!("              Total Size:  {}", bytes(size.bytes));
            }
        }
        StatsMode::RawData => {
            let raw = stats::raw_data(repo, &roots).await?;
            let ratio = raw.uncompressed_bytes as f64 / raw.stored_bytes.max(1) as f64;
            let saving =
                100.0 * (1.0 - raw.stored_bytes as f64 / raw.uncompressed_bytes.max(1) as f64);
            if json {
                let printed = serde_json::json!({
                    "mode": "raw-data",
                    "snapshotsCount": count,
                    "totalSize": raw.stored_bytes,
                    "totalUncompressedSize": raw.uncompressed_bytes,
                    "totalBlobCount": raw.blobs,
                    "compressionRatio": ratio,
                    "compressionSpaceSaving": saving,
                });
                println!("{printed}");
            } else {
                println!("Stats in raw-data mode:");
                println!("     Snapshots processed:  {count}");
                println!("        Total Blob Count:  {}", raw.blobs);
                println!(
                    " Total Uncompressed Size:  {}",
                    bytes(raw.uncompressed_bytes)
                );
                println!("              Total Size:  {}", bytes(raw.stored_bytes));
                println!("       Compression Ratio:  {ratio:.2}x");
                println!("Compression Space Saving:  {saving:.2} %");
            }
        }
    }
    Ok(Outcome::default())
}
