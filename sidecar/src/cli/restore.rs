//! `restore`: a snapshot's files back into a target (and its databases, at the same time), read
//! back and held to the snapshot with `--verify`; `--verify-only` holds a target to a snapshot
//! without restoring.

use super::args::{Cli, RestoreArgs};
use super::output::bytes;
use super::progress_display::{progress_interval, ProgressDisplay};
use super::{
    databases, open_indexed, restore_streams, restore_verify, select, FailedAfter, Outcome,
    RunRecord,
};
use anyhow::Result;
use neverwiped::filter::PathFilter;
use neverwiped::format::snapshot::Snapshot;
use neverwiped::ids::{BlobId, SnapshotId};
use neverwiped::progress::rate::average_bytes_per_second;
use neverwiped::repository::IndexedRepository;
use neverwiped::restore::{self, RestoreOptions};
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

/// What a restore did with what the target already held, for its summary line.
fn existing_entries(report: &restore::RestoreReport) -> String {
    let counts = [
        (report.files_kept, "already up to date"),
        (report.entries_left, "left as they were (--overwrite)"),
        (report.entries_deleted, "deleted (--delete)"),
    ];
    counts
        .iter()
        .filter(|(count, _)| *count > 0)
        .map(|(count, what)| format!(", {count} {what}"))
        .collect()
}

/// `restore`: the files of the snapshot into `--target` (held to it after with `--verify`) and
/// its databases at the same time; without a target, its databases only.
pub async fn restore_snapshot(
    cli: &Cli,
    args: &RestoreArgs,
    record: &RunRecord,
) -> Result<Outcome> {
    restore_streams::enter(args, record)?;
    let interval = progress_interval()?;
    let Some(target) = &args.target else {
        return restore_streams::restore_without_target(cli, args, record).await;
    };
    if args.verify_only {
        let settings = restore_verify::settings(&restore_options(args, target)?);
        return restore_verify::verify_only(cli, args, record, target, settings).await;
    }
    let database_restores = databases::DatabaseRestores::enter(args, &record.databases)?;
    let repo = open_indexed(cli, record).await?;
    let (snapshot_id, snapshot) = select::for_restore(&repo, &args.selection()).await?;
    let options = restore_options(args, target)?;
    // Said before anything is written: `latest` is whichever snapshot the repository shows.
    tracing::info!(
        "restoring snapshot {} of {} taken at {}",
        snapshot_id.short(),
        snapshot.hostname,
        snapshot.time
    );
    if matches!(options.filter, PathFilter::Everything) {
        let recorded = &snapshot.summary;
        options
            .progress
            .expect(recorded.total_bytes, recorded.files);
    }
    let chosen = (snapshot_id, &snapshot);
    // The files and the databases of the same snapshot at the same time: loading a dump is
    // mostly its server's work on one core, which writing the files leaves idle.
    let files = restore_files(cli, args, &repo, chosen, (options, interval));
    let dumps = async {
        if args.databases.is_empty() {
            return Ok(None);
        }
        let run = database_restores.run(cli, args, &repo, snapshot_id, &snapshot);
        run.await.map(Some)
    };
    let (files, dumps) = tokio::join!(files, dumps);
    let (mut restored, dumps) = match (files, dumps) {
        (Ok(files), Ok(dumps)) => (files, dumps),
        (Err(files), Err(dumps)) => {
            // One error ends the run; the other is said so that it is not lost.
            tracing::error!("the databases were not restored either: {dumps:#}");
            return Err(files);
        }
        (Err(error), Ok(_)) | (Ok(_), Err(error)) => return Err(error),
    };
    if let Some(dumps) = dumps {
        restored.files += dumps.files;
        restored.bytes_read += dumps.bytes_read;
    }
    restore_streams::restore_streams(cli, record, &repo, &snapshot, &mut restored).await?;
    Ok(restored)
}

/// The files of the snapshot `chosen` into the target of `options`, held to it after with
/// `--verify`; their summary printed.
async fn restore_files(
    cli: &Cli,
    args: &RestoreArgs,
    repo: &IndexedRepository,
    (snapshot_id, snapshot): (SnapshotId, &Snapshot),
    (options, interval): (RestoreOptions, Duration),
) -> Result<Outcome> {
    let target = options.target.clone();
    let (report, restore_secs) =
        restore_with_progress(cli, repo, snapshot.tree, &options, interval).await;
    let taken = Outcome {
        snapshot_id: Some(snapshot_id.to_hex()),
        snapshot_time: Some(snapshot.time.clone()),
        ..Outcome::default()
    };
    let report = match report {
        Err(error @ neverwiped::error::Error::RestoreIncomplete { .. }) => {
            let message = error.to_string();
            return Err(FailedAfter {
                message,
                outcome: taken,
                status: None,
            }
            .into());
        }
        report => report?,
    };
    for warning in &report.warnings {
        tracing::warn!("{}", neverwiped::text::escaped(warning));
    }
    let summary = Summary {
        snapshot_id: snapshot_id.to_hex(),
        snapshot_time: &snapshot.time,
        target: &target,
        report: &report,
        restore_secs,
    };
    let restored = Outcome {
        files: report.files,
        bytes_read: report.bytes_written,
        bytes_added: 0,
        bytes_transferred: report.bytes_fetched,
        incomplete: report.warnings.clone(),
        bytes_per_second: summary.bytes_per_second(),
        ..taken
    };
    if !args.verify {
        summary.print(cli, None);
        return Ok(restored);
    }
    let held = restore_verify::Verification {
        repo,
        tree: snapshot.tree,
        target: &target,
        settings: restore_verify::settings(&options),
        restore_secs: Some(restore_secs),
    };
    // The restore's own summary goes first, with the verification's in its JSON.
    held.run(cli, restored, |verification| {
        summary.print(cli, Some(verification).filter(|v| !v.is_null()))
    })
    .await
}

/// Restores the files of the snapshot's tree `root` with its progress shown (see
/// [`ProgressDisplay::restore`]); returns the report and the seconds the restore took.
async fn restore_with_progress(
    cli: &Cli,
    repo: &IndexedRepository,
    root: BlobId,
    options: &RestoreOptions,
    interval: Duration,
) -> (neverwiped::error::Result<restore::RestoreReport>, f64) {
    let display = ProgressDisplay::restore(options.progress.clone(), cli.quiet, interval);
    let started = std::time::Instant::now();
    let report = restore::restore(repo, root, options).await;
    let restore_secs = started.elapsed().as_secs_f64();
    display.finish();
    (report, restore_secs)
}

/// The restore options `restore`'s arguments set for the files restored into `target`.
pub fn restore_options(args: &RestoreArgs, target: &std::path::Path) -> Result<RestoreOptions> {
    let mut options = RestoreOptions::new(target);
    options.filter = args.patterns.filter()?;
    options.existing = restore::ExistingPolicy {
        overwrite: args.overwrite,
        delete: args.delete,
    };
    if let Some(bytes) = args.fetch_memory {
        options.memory_budget_bytes = bytes;
    }
    Ok(options)
}

/// What a restore of files did, for its summary line or JSON.
struct Summary<'a> {
    snapshot_id: String,
    snapshot_time: &'a str,
    target: &'a std::path::Path,
    report: &'a restore::RestoreReport,
    /// Wall seconds from the restore's start to its end.
    restore_secs: f64,
}

impl Summary<'_> {
    /// The restore's average speed: bytes written over its seconds.
    fn bytes_per_second(&self) -> Option<u64> {
        average_bytes_per_second(self.report.bytes_written, self.restore_secs)
    }

    /// Prints the summary; `verification`, when verified, goes into its JSON.
    fn print(&self, cli: &Cli, verification: Option<serde_json::Value>) {
        let report = self.report;
        if cli.json {
            let mut printed = serde_json::json!({
                "snapshotId": self.snapshot_id,
                "snapshotTime": self.snapshot_time,
                "target": self.target.to_string_lossy(),
                "files": report.files,
                "bytesWritten": report.bytes_written,
                "bytesFetched": report.bytes_fetched,
                "filesKept": report.files_kept,
                "entriesLeft": report.entries_left,
                "entriesDeleted": report.entries_deleted,
                "warnings": report.warnings,
                "restoreSecs": self.restore_secs,
            });
            if let Some(rate) = self.bytes_per_second() {
                printed["bytesPerSecond"] = rate.into();
            }
            if let Some(raw) = neverwiped::views::raw(self.target.as_os_str().as_bytes()) {
                printed["targetRaw"] = raw.into();
            }
            if let Some(verification) = verification {
                printed["verification"] = verification;
            }
            println!("{printed}");
        } else if !cli.quiet {
            println!(
                "restored snapshot {} (taken at {}) to {}: {} files, {} in {:.1}s ({}/s){}",
                &self.snapshot_id[..8],
                self.snapshot_time,
                self.target.display(),
                report.files,
                bytes(report.bytes_written),
                self.restore_secs,
                bytes(self.bytes_per_second().unwrap_or(0)),
                existing_entries(report)
            );
        }
    }
}
