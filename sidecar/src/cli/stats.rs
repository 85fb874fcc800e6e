//! `stats [SNAPSHOT…]`: the size a restore of the snapshots would write, the stored data they
//! reference, or their files by content or by blobs, as restic's `stats` modes count them.

use super::filters::SnapshotFilterArgs;
use super::Outcome;
use anyhow::Result;
use clap::{Args, ValueEnum};
use neverwiped::inspect::stats::{self, ContentsMode};
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
    /// The files of distinct content (the same list of blobs), each once: their count and sizes.
    FilesByContents,
    /// The blobs of the files of distinct content, each once per path: their count and
    /// uncompressed sizes, and the paths that have any.
    BlobsPerFile,
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
        StatsMode::RawData => print_raw_data(&stats::raw_data(repo, &roots).await?, count, json),
        StatsMode::FilesByContents | StatsMode::BlobsPerFile => {
            let (mode, name) = match args.mode {
                StatsMode::FilesByContents => (ContentsMode::FilesByContents, "files-by-contents"),
                _ => (ContentsMode::BlobsPerFile, "blobs-per-file"),
            };
            let counted = stats::by_contents(repo, &roots, mode).await?;
            if json {
                let mut printed = serde_json::json!({
                    "mode": name,
                    "snapshotsCount": count,
                    "totalSize": counted.bytes,
                    "totalFileCount": counted.files,
                });
                if mode == ContentsMode::BlobsPerFile {
                    printed["totalBlobCount"] = counted.blobs.into();
                }
                println!("{printed}");
            } else {
                println!("Stats in {name} mode:");
                println!("     Snapshots processed:  {count}");
                if mode == ContentsMode::BlobsPerFile {
                    println!("        Total Blob Count:  {}", counted.blobs);
                }
                println!("        Total File Count:  {}", counted.files);
                println!("              Total Size:  {}", bytes(counted.bytes));
            }
        }
    }
    Ok(Outcome::default())
}

/// restic's raw-data figures: the ratio over the blobs stored compressed, the share of the data
/// they hold (progress) and the space saved over all.
fn print_raw_data(raw: &stats::RawData, count: usize, json: bool) {
    let ratio =
        raw.compressed_uncompressed_bytes as f64 / raw.compressed_stored_bytes.max(1) as f64;
    let progress =
        100.0 * raw.compressed_uncompressed_bytes as f64 / raw.uncompressed_bytes.max(1) as f64;
    let saving = 100.0 * (1.0 - raw.stored_bytes as f64 / raw.uncompressed_bytes.max(1) as f64);
    if json {
        let printed = serde_json::json!({
            "mode": "raw-data",
            "snapshotsCount": count,
            "totalSize": raw.stored_bytes,
            "totalUncompressedSize": raw.uncompressed_bytes,
            "totalBlobCount": raw.blobs,
            "compressionRatio": ratio,
            "compressionProgress": progress,
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
        println!("    Compression Progress:  {progress:.2}%");
        println!("       Compression Ratio:  {ratio:.2}x");
        println!("Compression Space Saving:  {saving:.2} %");
    }
}
