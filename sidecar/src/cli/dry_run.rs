//! `backup --dry-run`: what a backup would read and add, with nothing stored.

use super::output::bytes;
use super::progress_display::ProgressDisplay;
use super::Outcome;
use anyhow::Result;
use neverwiped::archive::{self, BackupOptions, DryRunReport};
use neverwiped::repository::IndexedRepository;

/// Runs the backup's reading half, prints what it would add, and reports it (no snapshot id:
/// nothing was stored). `listed_warnings` are the `--files-from` globs that matched nothing.
pub async fn backup_dry_run(
    repo: &IndexedRepository,
    options: BackupOptions,
    json: bool,
    quiet: bool,
    listed_warnings: Vec<String>,
) -> Result<Outcome> {
    let display = ProgressDisplay::start(options.progress.clone(), quiet);
    let report = archive::dry_run(repo, options).await;
    display.finish();
    let report = report?;
    let mut warnings = listed_warnings;
    warnings.extend(report.notices.iter().cloned());
    print(&report, &warnings, json, quiet);
    Ok(Outcome {
        files: report.walk.files,
        bytes_read: report.walk.bytes_read,
        incomplete: report.warnings,
        warnings,
        ..Outcome::default()
    })
}

/// Files neither read nor stored as another name of a file read earlier: reused unchanged.
fn unmodified(report: &DryRunReport) -> u64 {
    let walk = &report.walk;
    walk.files
        .saturating_sub(walk.files_read)
        .saturating_sub(walk.hard_links)
}

fn print(report: &DryRunReport, warnings: &[String], json: bool, quiet: bool) {
    let (walk, would_add) = (&report.walk, &report.would_add);
    if json {
        let all_warnings: Vec<&String> = report.warnings.iter().chain(warnings).collect();
        println!(
            "{}",
            serde_json::json!({
                "dryRun": true,
                "files": walk.files,
                "filesRead": walk.files_read,
                "filesUnmodified": unmodified(report),
                "hardLinks": walk.hard_links,
                "dirs": walk.dirs,
                "bytesRead": walk.bytes_read,
                "totalBytes": walk.total_bytes,
                "wouldAdd": {
                    "bytes": would_add.bytes,
                    "blobs": would_add.blobs,
                    "packs": would_add.packs,
                },
                "warnings": all_warnings,
            })
        );
    } else if !quiet {
        println!(
            "Files: {} read (new or changed), {} unmodified, {} hard links",
            walk.files_read,
            unmodified(report),
            walk.hard_links
        );
        println!("Dirs:  {}", walk.dirs);
        println!(
            "Read:  {} of {}",
            bytes(walk.bytes_read),
            bytes(walk.total_bytes)
        );
        println!(
            "Would add to the repository: {} ({} blobs in {} packs)",
            bytes(would_add.bytes),
            would_add.blobs,
            would_add.packs
        );
        println!("dry run: nothing was stored");
    }
}
