//! The commands of the CLI: each opens what it needs, calls the engine, and reports.

pub mod args;
mod databases;
mod maintenance;
mod output;
mod secrets;

use anyhow::{Context, Result};
use args::{BackupArgs, Cli, Command, LsArgs, RestoreArgs};
use neverwiped::archive::{self, BackupOptions, Excludes, ParentChoice, Source, StreamSource};
use neverwiped::backend::local::LocalBackend;
use neverwiped::backend::rest::{parse_rest_address, RestBackend, RestConfig};
use neverwiped::backend::SharedBackend;
use neverwiped::crypto::KdfParams;
use neverwiped::format::tree::NodeKind;
use neverwiped::progress::Progress;
use neverwiped::repository::{IndexedRepository, Repository, SnapshotFilter};
use neverwiped::restore::{self, RestoreOptions};
use neverwiped_contract::{
    CheckStats, ExitStatus, Operation, PruneStats, RepositoryStats, RunResult,
    RESULT_FORMAT_VERSION,
};
use output::{bytes, ProgressDisplay};
use std::sync::Arc;

pub use output::init_logging;

/// What a command achieved, for the exit code and the result file.
#[derive(Debug, Default)]
pub struct Outcome {
    pub snapshot_id: Option<String>,
    /// The time the snapshot records (restore: the one it took).
    pub snapshot_time: Option<String>,
    pub files: u64,
    pub bytes_read: u64,
    pub bytes_added: u64,
    pub bytes_transferred: u64,
    pub warnings: Vec<String>,
    pub repository: Option<RepositoryStats>,
    pub snapshots_forgotten: Option<u64>,
    pub prune: Option<PruneStats>,
    pub check: Option<CheckStats>,
}

/// A command that failed after measuring what its result should still report (a check's
/// findings).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct FailedAfter {
    pub message: String,
    pub outcome: Outcome,
}

/// What a failed run still reports: what [`FailedAfter`] carries, or nothing.
pub fn outcome_of_failure(error: &anyhow::Error) -> Option<&Outcome> {
    error.downcast_ref::<FailedAfter>().map(|f| &f.outcome)
}

pub fn operation_of(command: &Command) -> Operation {
    match command {
        Command::Init => Operation::Init,
        Command::Backup(_) => Operation::Backup,
        Command::Restore(_) | Command::Ls(_) | Command::Snapshots => Operation::Restore,
        Command::Unlock(_) | Command::Check(_) | Command::Key(_) => Operation::Check,
        Command::Forget(_) => Operation::Forget,
        Command::Prune(_) => Operation::Prune,
    }
}

/// Builds the JSON result of a run.
pub fn run_result(
    operation: Operation,
    status: ExitStatus,
    started: chrono::DateTime<chrono::Utc>,
    outcome: &Outcome,
    error: Option<String>,
) -> RunResult {
    let finished = chrono::Utc::now();
    const MAX_WARNINGS_KEPT: usize = 20;
    RunResult {
        version: RESULT_FORMAT_VERSION,
        operation,
        status,
        snapshot_id: outcome.snapshot_id.clone(),
        snapshot_time: outcome.snapshot_time.clone(),
        started_at: started.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        finished_at: finished.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        duration_secs: (finished - started).num_milliseconds() as f64 / 1000.0,
        files: outcome.files,
        bytes_read: outcome.bytes_read,
        bytes_added: outcome.bytes_added,
        bytes_transferred: outcome.bytes_transferred,
        databases: databases::results(error.is_some()),
        warnings_total: outcome.warnings.len() as u64,
        warnings: outcome
            .warnings
            .iter()
            .take(MAX_WARNINGS_KEPT)
            .cloned()
            .collect(),
        error,
        repository: outcome.repository,
        snapshots_forgotten: outcome.snapshots_forgotten,
        prune: outcome.prune,
        check: outcome.check,
    }
}

/// The exit status of a failed run: the engine's own classification when the error came from it.
pub fn exit_status_of(error: &anyhow::Error) -> ExitStatus {
    error
        .chain()
        .find_map(|cause| cause.downcast_ref::<neverwiped::Error>())
        .map(neverwiped::Error::exit_status)
        .or_else(|| {
            error.chain().find_map(|cause| {
                cause
                    .downcast_ref::<neverwiped::backend::BackendError>()
                    .map(|e| match e {
                        neverwiped::backend::BackendError::NoRepository { .. } => {
                            ExitStatus::NoRepository
                        }
                        _ => ExitStatus::Failed,
                    })
            })
        })
        .unwrap_or(ExitStatus::Failed)
}

fn open_backend(cli: &Cli) -> Result<SharedBackend> {
    let address = cli
        .repo
        .as_deref()
        .context("no repository given: use --repo or NEVERWIPED_REPOSITORY")?;
    if address.starts_with("rest:") {
        let url = parse_rest_address(address)?;
        let (username, password) = secrets::gate_credentials()?;
        let ca_certificate_pem = match &cli.cacert {
            Some(path) => Some(
                std::fs::read(path)
                    .with_context(|| format!("cannot read the CA file {}", path.display()))?,
            ),
            None => None,
        };
        let config = RestConfig {
            url,
            username,
            password,
            ca_certificate_pem,
            ..RestConfig::default()
        };
        return Ok(Arc::new(RestBackend::new(config)?));
    }
    Ok(Arc::new(LocalBackend::new(address)))
}

async fn open_repository(cli: &Cli) -> Result<Repository> {
    let backend = open_backend(cli)?;
    let password = secrets::repository_password(cli.password_file.as_deref())?;
    let repo = Repository::open(backend, &password).await?;
    Ok(repo.with_lock_wait(cli.retry_lock.unwrap_or_default()))
}

async fn open_indexed(cli: &Cli) -> Result<IndexedRepository> {
    Ok(open_repository(cli).await?.load_index().await?)
}

pub async fn run(cli: &Cli) -> Result<Outcome> {
    match &cli.command {
        Command::Init => init(cli).await,
        Command::Backup(args) => backup(cli, args).await,
        Command::Snapshots => snapshots(cli).await,
        Command::Ls(args) => ls(cli, args).await,
        Command::Restore(args) => restore_snapshot(cli, args).await,
        Command::Check(args) => maintenance::check(&open_indexed(cli).await?, args).await,
        Command::Forget(args) => {
            maintenance::forget(&open_indexed(cli).await?, args, cli.json).await
        }
        Command::Prune(args) => maintenance::prune(&open_indexed(cli).await?, args).await,
        Command::Key(command) => {
            let password = secrets::repository_password(cli.password_file.as_deref())?;
            maintenance::key(&open_repository(cli).await?, &password, command).await
        }
        Command::Unlock(args) => {
            let repo = open_repository(cli).await?;
            let removed = neverwiped::locking::remove_locks(&repo, args.remove_all).await?;
            println!("removed {removed} lock(s)");
            Ok(Outcome::default())
        }
    }
}

async fn init(cli: &Cli) -> Result<Outcome> {
    let backend = open_backend(cli)?;
    let password = secrets::repository_password(cli.password_file.as_deref())?;
    let repo = Repository::init(backend.clone(), &password, KdfParams::default()).await?;
    println!(
        "created neverwiped repository {} at {}",
        &repo.params().id[..10],
        backend.location()
    );
    Ok(Outcome::default())
}

async fn backup(cli: &Cli, args: &BackupArgs) -> Result<Outcome> {
    if args.paths.is_empty() && !args.stdin && args.databases.is_empty() {
        anyhow::bail!("nothing to back up: give paths, --stdin or --database");
    }
    let database_sources =
        databases::backup_sources(&args.databases, &args.database_password_files)?;
    let repo = match open_indexed(cli).await {
        Err(error) if args.init && exit_status_of(&error) == ExitStatus::NoRepository => {
            tracing::info!("no repository yet: creating it (--init)");
            if let Err(init_error) = init(cli).await {
                // Something that is not ours is there: the first error says what.
                return Err(error.context(format!(
                    "--init cannot create a repository there ({})",
                    describe_chain(&init_error)
                )));
            }
            open_indexed(cli).await?
        }
        opened => opened?,
    };
    maintenance::remove_locks_of(&repo, args.remove_locks_of_host.as_deref()).await?;
    let mut sources: Vec<Source> = args.paths.iter().cloned().map(Source::Path).collect();
    sources.extend(database_sources);
    if args.stdin {
        sources.push(Source::Stream(StreamSource {
            snapshot_path: format!("/{}", args.stdin_name.trim_start_matches('/')),
            label: "standard input".into(),
            reader: Box::new(std::io::stdin()),
        }));
    }
    let mut options = BackupOptions::new(sources);
    if let Some(host) = &args.host {
        options.hostname = host.clone();
    }
    options.tags = args.tags.clone();
    options.excludes = Excludes::new(&args.excludes)?;
    options.upload_limit_bytes_per_sec = args.limit_upload;
    if let Some(bytes) = args.upload_memory {
        options.upload_memory_bytes = bytes;
    }
    options.parent = match (&args.parent, args.force) {
        (_, true) => ParentChoice::None,
        (Some(spec), false) => ParentChoice::Snapshot(repo.find_snapshot(spec).await?.0),
        (None, false) => ParentChoice::Latest,
    };
    let progress = options.progress.clone();
    let display = ProgressDisplay::start(progress.clone(), cli.quiet, false);
    let report = archive::backup(&repo, options).await;
    display.finish();
    let report = report?;
    let summary = &report.snapshot.summary;
    if cli.json {
        println!(
            "{}",
            serde_json::to_string(
                &serde_json::json!({"snapshotId": report.snapshot_id, "summary": summary})
            )?
        );
    } else if !cli.quiet {
        println!(
            "snapshot {} saved: {} files ({} read, {} unchanged), {} in, {} added in {:.1}s",
            report.snapshot_id.short(),
            summary.files,
            summary.files_read,
            summary.files - summary.files_read,
            bytes(summary.bytes_read),
            bytes(summary.bytes_added),
            summary.duration_millis as f64 / 1000.0
        );
    }
    let mut warnings = report.warnings;
    let snapshots_forgotten = apply_retention(&repo, args, &report.snapshot.hostname, cli.quiet)
        .await
        .unwrap_or_else(|error| {
            // The snapshot is written: a failed forget must not turn it into a failed backup.
            let warning = format!("retention not applied: {}", describe_chain(&error));
            tracing::warn!("{warning}");
            warnings.push(warning);
            None
        });
    Ok(Outcome {
        snapshot_id: Some(report.snapshot_id.to_hex()),
        files: summary.files,
        bytes_read: summary.bytes_read,
        bytes_added: summary.bytes_added,
        bytes_transferred: Progress::get(&progress.bytes_transferred),
        warnings,
        repository: maintenance::repository_stats(&repo).await,
        snapshots_forgotten,
        ..Outcome::default()
    })
}

/// Forgets the snapshots of `host` that the backup's `--keep-*` rules do not keep; `None` when no
/// rule is given.
async fn apply_retention(
    repo: &IndexedRepository,
    args: &BackupArgs,
    host: &str,
    quiet: bool,
) -> Result<Option<u64>> {
    let policy = args.keep.policy();
    if policy.is_empty() {
        return Ok(None);
    }
    let groups = neverwiped::maintenance::forget::forget(repo, &policy, Some(host), false).await?;
    let removed = groups
        .iter()
        .flat_map(|group| &group.verdicts)
        .filter(|verdict| !verdict.keep)
        .count() as u64;
    if !quiet && removed > 0 {
        println!("retention: {removed} older snapshot(s) of {host} forgotten");
    }
    Ok(Some(removed))
}

/// The error and its causes on one line, each cause once: an error whose own message already
/// quotes its cause (e.g. a dump tool's output) does not repeat it.
pub fn describe_chain(error: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if message.contains(&text) {
            continue;
        }
        if !message.is_empty() {
            message.push_str(": ");
        }
        message.push_str(&text);
    }
    message
}

async fn snapshots(cli: &Cli) -> Result<Outcome> {
    let repo = open_repository(cli).await?;
    let snapshots = repo.snapshots().await?;
    if cli.json {
        let list: Vec<serde_json::Value> = snapshots
            .iter()
            .map(|(id, s)| {
                let mut value = serde_json::to_value(s).unwrap_or_default();
                value["id"] = serde_json::Value::String(id.to_hex());
                value
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(Outcome::default());
    }
    println!(
        "{:<10} {:<25} {:<20} {:>10} {:>10}  paths",
        "id", "time", "host", "files", "size"
    );
    for (id, snapshot) in &snapshots {
        let time = chrono::DateTime::parse_from_rfc3339(&snapshot.time)
            .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
            .unwrap_or_else(|_| snapshot.time.clone());
        let paths: Vec<String> = snapshot.paths.iter().map(|p| p.display()).collect();
        println!(
            "{:<10} {:<25} {:<20} {:>10} {:>10}  {}",
            id.short(),
            time,
            snapshot.hostname,
            snapshot.summary.files,
            bytes(snapshot.summary.total_bytes),
            paths.join(" ")
        );
    }
    println!("{} snapshot(s)", snapshots.len());
    Ok(Outcome::default())
}

async fn ls(cli: &Cli, args: &LsArgs) -> Result<Outcome> {
    let repo = open_indexed(cli).await?;
    let (_, snapshot) = repo.find_snapshot(&args.snapshot).await?;
    let entries = restore::list(&repo, snapshot.tree, args.path.as_deref()).await?;
    for entry in entries {
        let path = restore::display_path(&entry.path);
        if cli.json {
            println!("{}", serde_json::json!({"path": path, "node": entry.node}));
            continue;
        }
        let (kind, size) = match &entry.node.kind {
            NodeKind::File { size, .. } => ('-', *size),
            NodeKind::Dir { .. } => ('d', 0),
            NodeKind::Symlink { .. } => ('l', 0),
            NodeKind::Fifo => ('p', 0),
            NodeKind::CharDevice { .. } => ('c', 0),
            NodeKind::BlockDevice { .. } => ('b', 0),
        };
        println!(
            "{kind}{:04o} {:>6} {:>6} {:>12}  {path}",
            entry.node.meta.mode, entry.node.meta.uid, entry.node.meta.gid, size
        );
    }
    Ok(Outcome::default())
}

/// Which snapshots `restore latest` may pick.
fn restore_filter(args: &RestoreArgs) -> SnapshotFilter {
    SnapshotFilter {
        host: args.host.clone(),
        before: args.before,
    }
}

async fn restore_snapshot(cli: &Cli, args: &RestoreArgs) -> Result<Outcome> {
    let Some(target) = &args.target else {
        return databases::restore(cli, args).await;
    };
    let repo = open_indexed(cli).await?;
    let (snapshot_id, snapshot) = repo
        .find_snapshot_where(&args.snapshot, &restore_filter(args))
        .await?;
    let mut options = RestoreOptions::new(target);
    options.includes = args.includes.clone();
    if let Some(bytes) = args.fetch_memory {
        options.memory_budget_bytes = bytes;
    }
    // Said before anything is written: `latest` is whichever snapshot the repository shows.
    tracing::info!(
        "restoring snapshot {} of {} taken at {}",
        snapshot_id.short(),
        snapshot.hostname,
        snapshot.time
    );
    let display = ProgressDisplay::start(options.progress.clone(), cli.quiet, true);
    let report = restore::restore(&repo, snapshot.tree, &options).await;
    display.finish();
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
            }
            .into());
        }
        report => report?,
    };
    for warning in &report.warnings {
        tracing::warn!("{warning}");
    }
    if !cli.quiet {
        println!(
            "restored snapshot {} (taken at {}) to {}: {} files, {}",
            snapshot_id.short(),
            snapshot.time,
            target.display(),
            report.files,
            bytes(report.bytes_written)
        );
    }
    Ok(Outcome {
        files: report.files,
        bytes_read: report.bytes_written,
        bytes_added: 0,
        bytes_transferred: report.bytes_fetched,
        warnings: report.warnings,
        ..taken
    })
}
