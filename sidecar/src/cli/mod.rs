//! The commands of the CLI: each opens what it needs, calls the engine, and reports.

pub mod args;
mod cat;
mod copy;
mod databases;
mod describe;
mod diff;
mod drill;
mod dry_run;
mod dump;
mod durations;
mod files_from;
mod filters;
mod find;
mod forget;
pub mod hardening;
pub mod hooks;
pub mod launch;
mod listing;
mod location_arg;
mod locks;
mod ls;
mod maintenance;
pub mod mount;
pub mod output;
mod patterns;
mod progress_display;
mod repair;
mod repair_snapshots;
mod restore;
mod restore_progress;
mod restore_streams;
mod restore_verify;
pub mod result_file;
mod scoped_selection;
mod secrets;
mod select;
mod sources;
mod stats;
pub mod stop;
mod streams;
mod subset;
mod tag;

use anyhow::{Context, Result};
use args::{BackupArgs, Cli, Command};
use neverwiped::archive::{
    self, BackupOptions, ParentChoice, Source, StoredSnapshot, StreamSource,
};
use neverwiped::backend::retry::{self, RetryPolicy};
use neverwiped::backend::SharedBackend;
use neverwiped::crypto::KdfParams;
use neverwiped::open::{self, OpenError, OpenOptions};
use neverwiped::progress::Progress;
use neverwiped::repository::{IndexedRepository, Repository};
use neverwiped_contract::location::RepositoryLocation;
use neverwiped_contract::record::RecordedSources;
use neverwiped_contract::{
    ChangeStats, CheckStats, ExitStatus, HostSnapshots, PruneStats, RepositoryStats,
    VerificationStats,
};
use progress_display::ProgressDisplay;
use std::sync::Arc;

pub use databases::DatabaseRecord;
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
    /// What the run could not do: inputs a backup could not read, entries a restore could not
    /// give back as stored. Any makes the run partial (exit 3).
    pub incomplete: Vec<String>,
    /// Warnings of a run that lost nothing it could read (exit 0).
    pub warnings: Vec<String>,
    pub repository: Option<RepositoryStats>,
    pub snapshots_forgotten: Option<u64>,
    pub prune: Option<PruneStats>,
    pub check: Option<CheckStats>,
    /// The snapshots of the run's host after it (backup, forget, prune).
    pub host_snapshots: Option<HostSnapshots>,
    /// What a backup changed against its parent.
    pub changes: Option<ChangeStats>,
    /// `drill`: what was restored and checked.
    pub drill: Option<neverwiped_contract::drill::DrillStats>,
    /// What the snapshot `describe` resolved recorded of its sources.
    pub sources: Option<RecordedSources>,
    /// What `restore --verify` read back.
    pub verification: Option<VerificationStats>,
    /// A restore of files: bytes written per second, on average from its start to its end.
    pub bytes_per_second: Option<u64>,
}

/// A command that failed after measuring what its result should still report (a check's
/// findings).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct FailedAfter {
    pub message: String,
    pub outcome: Outcome,
    /// The exit status, when not [`ExitStatus::Failed`].
    pub status: Option<ExitStatus>,
}

/// What a failed run still reports: what [`FailedAfter`] carries, or nothing.
pub fn outcome_of_failure(error: &anyhow::Error) -> Option<&Outcome> {
    error.downcast_ref::<FailedAfter>().map(|f| &f.outcome)
}

/// What a run that did nothing reports.
pub static NO_OUTCOME: Outcome = Outcome {
    snapshot_id: None,
    snapshot_time: None,
    files: 0,
    bytes_read: 0,
    bytes_added: 0,
    bytes_transferred: 0,
    incomplete: Vec::new(),
    warnings: Vec::new(),
    repository: None,
    snapshots_forgotten: None,
    prune: None,
    check: None,
    host_snapshots: None,
    changes: None,
    drill: None,
    sources: None,
    verification: None,
    bytes_per_second: None,
};

/// The exit status of a failed run: the engine's own classification when the error came from it.
pub fn exit_status_of(error: &anyhow::Error) -> ExitStatus {
    if let Some(status) = error.downcast_ref::<FailedAfter>().and_then(|f| f.status) {
        return status;
    }
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

fn location(cli: &Cli) -> Result<&RepositoryLocation> {
    cli.repo
        .as_ref()
        .context("no repository given: use --repo or NEVERWIPED_REPOSITORY")
}

/// How the command line asks to talk to the repository: `--cacert`, the retry flags and
/// `--key-hint`.
fn open_options(cli: &Cli) -> Result<OpenOptions> {
    let ca_certificate_pem = match &cli.cacert {
        Some(path) => Some(
            std::fs::read(path)
                .with_context(|| format!("cannot read the CA file {}", path.display()))?,
        ),
        None => None,
    };
    let mut retry =
        RetryPolicy::with_budget(cli.retry_budget.unwrap_or(retry::DEFAULT_RETRY_BUDGET));
    if let Some(first_delay_ms) = cli.retry_delay_ms {
        retry.first_delay = std::time::Duration::from_millis(first_delay_ms);
    }
    Ok(OpenOptions {
        retry,
        ca_certificate_pem,
        key_hint: cli.key_hint.clone(),
        ..OpenOptions::default()
    })
}

fn open_backend(cli: &Cli) -> Result<SharedBackend> {
    let location = location(cli)?;
    open::open_backend(location, &secrets::gate_login(), &open_options(cli)?)
        .map_err(OpenError::into_anyhow)
}

/// Opens the repository, trying `--key-hint` first, and enters the key that opened it in
/// `record`, for the result.
async fn open_repository(cli: &Cli, record: &RunRecord) -> Result<Repository> {
    let location = location(cli)?;
    let password = secrets::repository_password_source(cli.password_file.as_deref())?;
    let options = open_options(cli)?;
    let repo = open::open(location, &password, &secrets::gate_login(), &options)
        .await
        .map_err(OpenError::into_anyhow)?;
    record.opened_with(&repo);
    let repo = repo.with_lock_wait(cli.retry_lock.unwrap_or_default());
    Ok(if cli.no_lock {
        repo.without_read_locks()
    } else {
        repo
    })
}

async fn open_indexed(cli: &Cli, record: &RunRecord) -> Result<IndexedRepository> {
    Ok(open_repository(cli, record).await?.load_index().await?)
}

/// What a run has done so far, kept where a stop signal can read it: the databases it dumps or
/// restores, entered as they start, and a backup's snapshot, the moment it is stored. The result
/// tells the truth whichever way the run ends.
#[derive(Debug, Default)]
pub struct RunRecord {
    pub databases: DatabaseRecord,
    pub snapshot: Arc<StoredSnapshot>,
    /// The id of the key object that opened the repository, once one did.
    pub key_id: std::sync::OnceLock<String>,
    /// The run's streams and hooks, and how each went.
    pub exchange: Arc<neverwiped::streams::Exchange>,
}

impl RunRecord {
    /// Enters the key that opened `repo` (the first, should the run open it twice).
    fn opened_with(&self, repo: &Repository) {
        let _ = self.key_id.set(repo.key_id().to_hex());
    }
}

/// Runs the command, entering what it has done in `record`.
pub async fn run(cli: &Cli, record: &RunRecord) -> Result<Outcome> {
    match &cli.command {
        Command::Init => init(cli).await,
        Command::Backup(args) => backup_with_hooks(cli, args, record).await,
        Command::Snapshots(args) => {
            let repo = open_repository(cli, record).await?;
            locks::read_locked(
                &repo,
                "snapshots",
                listing::snapshots(&repo, args, cli.json),
            )
            .await
        }
        Command::Ls(args) => {
            let repo = open_indexed(cli, record).await?;
            locks::read_locked(&repo, "ls", ls::ls(&repo, args, cli.json)).await
        }
        Command::Dump(args) => {
            let repo = open_indexed(cli, record).await?;
            locks::read_locked(&repo, "dump", dump::dump(&repo, args)).await
        }
        Command::Cat(args) => {
            let repo = open_indexed(cli, record).await?;
            locks::read_locked(&repo, "cat", cat::cat(&repo, args)).await
        }
        Command::Stats(args) => {
            let repo = open_indexed(cli, record).await?;
            locks::read_locked(&repo, "stats", stats::stats(&repo, args, cli.json)).await
        }
        Command::Diff(args) => {
            let repo = open_indexed(cli, record).await?;
            locks::read_locked(&repo, "diff", diff::diff(&repo, args, cli.json)).await
        }
        Command::Find(args) => {
            let repo = open_indexed(cli, record).await?;
            locks::read_locked(&repo, "find", find::find(&repo, args, cli.json)).await
        }
        Command::Restore(args) => restore::restore_snapshot(cli, args, record).await,
        Command::Drill(args) => drill::drill(cli, args, record).await,
        Command::Describe(args) => {
            let repo = open_repository(cli, record).await?;
            locks::read_locked(&repo, "describe", describe::describe(&repo, args, cli.json)).await
        }
        Command::Check(args) => {
            maintenance::check(&open_indexed(cli, record).await?, args, cli.json).await
        }
        Command::Forget(args) => {
            forget::forget(&open_indexed(cli, record).await?, args, cli.json).await
        }
        Command::Repair(command) => {
            repair::repair(
                &open_repository(cli, record).await?,
                command,
                cli.json,
                cli.quiet,
            )
            .await
        }
        Command::Tag(args) => {
            tag::tag(
                &open_repository(cli, record).await?,
                args,
                cli.json,
                cli.quiet,
            )
            .await
        }
        Command::Prune(args) => {
            maintenance::prune(&open_indexed(cli, record).await?, args, cli.json).await
        }
        Command::Key(command) => {
            let password = secrets::repository_password(cli.password_file.as_deref())?;
            maintenance::key(
                &open_repository(cli, record).await?,
                &password,
                command,
                cli.json,
            )
            .await
        }
        Command::Copy(args) => copy::copy(cli, args, record).await,
        Command::Mount(args) => {
            mount::mount(open_indexed(cli, record).await?, args, cli.quiet).await
        }
        Command::Unlock(args) => {
            locks::unlock(&open_repository(cli, record).await?, args, cli.json).await
        }
        Command::Hooks(args) => hooks::hooks(args, record).await,
    }
}

async fn init(cli: &Cli) -> Result<Outcome> {
    let backend = open_backend(cli)?;
    let password = secrets::repository_password(cli.password_file.as_deref())?;
    let repo = Repository::init(backend.clone(), &password, KdfParams::default()).await?;
    if cli.json {
        println!(
            "{}",
            serde_json::json!({"repositoryId": repo.params().id, "location": backend.location().to_string()})
        );
    } else {
        println!(
            "created neverwiped repository {} at {}",
            &repo.params().id[..10],
            backend.location()
        );
    }
    Ok(Outcome::default())
}

/// `backup` with its streams and hooks: the flags checked before anything runs, and the post
/// hooks run also when the backup failed before its end.
async fn backup_with_hooks(cli: &Cli, args: &BackupArgs, record: &RunRecord) -> Result<Outcome> {
    let exchange = &args.exchange;
    let (streams, hook_specs) = (exchange.streams()?, exchange.hooks.specs()?);
    let start_timeout = exchange.start_timeout.get();
    record.exchange.enter(streams, hook_specs, start_timeout);
    let outcome = backup(cli, args, record).await;
    hooks::finish(&record.exchange).await;
    outcome
}

async fn backup(cli: &Cli, args: &BackupArgs, record: &RunRecord) -> Result<Outcome> {
    let databases = &record.databases;
    let listed = args.files_from.read()?;
    let mut paths = listed.paths;
    paths.extend(args.paths.iter().cloned());
    let streams = record.exchange.backup_sources();
    if paths.is_empty() && !args.stdin && args.databases.is_empty() && streams.is_empty() {
        match args.files_from.any() {
            true => anyhow::bail!("nothing to back up: the --files-from lists name no file"),
            false => {
                anyhow::bail!("nothing to back up: give paths, --stdin, --database or --stream")
            }
        }
    }
    let claims = sources::claims(&args.claims, &paths)?;
    let (database_sources, dumped) =
        databases::backup_sources(&args.databases, &args.database_password_files, databases)?;
    let repo = open_for_backup(cli, args, record).await?;
    maintenance::remove_locks_of(&repo, args.remove_locks_of_host.as_deref()).await?;
    let mut sources: Vec<Source> = paths.iter().cloned().map(Source::Path).collect();
    sources.extend(database_sources);
    sources.extend(streams);
    if args.stdin {
        sources.push(Source::Stream(StreamSource {
            snapshot_path: format!("/{}", args.stdin_name.trim_start_matches('/')),
            label: "standard input".into(),
            reader: Box::new(std::io::stdin()),
            may_be_empty: false,
        }));
    }
    let mut options = backup_options(args, sources, &paths)?;
    options.stored = record.snapshot.clone();
    options.before_reading = Some(hooks::pre_hooks(record.exchange.clone()));
    options.recorded = Arc::new(move || RecordedSources {
        claims: claims.clone(),
        databases: dumped.record(),
        unknown: Default::default(),
    });
    options.parent = match (&args.parent, args.force) {
        (_, true) => ParentChoice::None,
        (Some(spec), false) => ParentChoice::Snapshot(select::find(&repo, spec).await?.0),
        (None, false) => ParentChoice::Latest,
    };
    if args.dry_run {
        let listed_warnings = listed.warnings;
        return dry_run::backup_dry_run(&repo, options, cli.json, cli.quiet, listed_warnings).await;
    }
    let progress = options.progress.clone();
    let display = ProgressDisplay::start(progress.clone(), cli.quiet);
    let report = archive::backup(&repo, options).await;
    display.finish();
    // Right after the snapshot (or the failure): the application's pause ends before retention.
    hooks::finish(&record.exchange).await;
    let report = report?;
    let summary = &report.snapshot.summary;
    // Printing cannot fail the run any more: the snapshot is stored.
    output::print_backup(&report, cli.json, cli.quiet);
    let mut warnings = listed.warnings;
    warnings.extend(report.notices);
    let snapshots_forgotten = apply_retention(
        &repo,
        args,
        &report.snapshot.hostname,
        cli.quiet || cli.json,
    )
    .await
    .unwrap_or_else(|error| {
        // The snapshot is written: a failed forget must not turn it into a failed backup.
        let warning = format!("retention not applied: {}", describe_chain(&error));
        tracing::warn!("{}", neverwiped::text::escaped(&warning));
        warnings.push(warning);
        None
    });
    Ok(Outcome {
        snapshot_id: Some(report.snapshot_id.to_hex()),
        files: summary.files,
        bytes_read: summary.bytes_read,
        bytes_added: summary.bytes_added,
        bytes_transferred: Progress::get(&progress.bytes_transferred),
        incomplete: report.warnings,
        warnings,
        repository: maintenance::repository_stats(&repo).await,
        snapshots_forgotten,
        host_snapshots: maintenance::host_snapshots(&repo, Some(&report.snapshot.hostname)).await,
        changes: Some(report.changes),
        ..Outcome::default()
    })
}

/// The repository of a backup; with `--init`, created first when there is none.
async fn open_for_backup(
    cli: &Cli,
    args: &BackupArgs,
    record: &RunRecord,
) -> Result<IndexedRepository> {
    Ok(match open_indexed(cli, record).await {
        Err(error) if args.init && exit_status_of(&error) == ExitStatus::NoRepository => {
            tracing::info!("no repository yet: creating it (--init)");
            if let Err(init_error) = init(cli).await {
                // Something that is not ours is there: the first error says what.
                return Err(error.context(format!(
                    "--init cannot create a repository there ({})",
                    describe_chain(&init_error)
                )));
            }
            open_indexed(cli, record).await?
        }
        opened => opened?,
    })
}

/// The options `backup`'s arguments set, for `sources`.
fn backup_options(
    args: &BackupArgs,
    sources: Vec<Source>,
    paths: &[std::path::PathBuf],
) -> Result<BackupOptions> {
    let mut options = BackupOptions::new(sources);
    if let Some(host) = &args.host {
        options.hostname = host.clone();
    }
    options.tags = args.tags.clone();
    options.excludes = args.excludes.filter()?;
    args.selection.apply(&mut options, paths)?;
    options.upload_limit_bytes_per_sec = args.limit_upload;
    if let Some(bytes) = args.upload_memory {
        options.upload_memory_bytes = bytes;
    }
    options.allow_empty = args.allow_empty;
    options.time = args.time;
    Ok(options)
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
    let window = args.keep.window();
    let groups = neverwiped::maintenance::forget::forget_protecting(
        repo,
        &policy,
        Some(host),
        false,
        window,
    )
    .await?;
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

/// The error and its causes on one line, each cause once.
pub fn describe_chain(error: &anyhow::Error) -> String {
    neverwiped::text::describe_chain(error.chain())
}
