//! `copy --from-repo SRC [filters] [--newer-than D] [ID…]`: snapshots of another repository
//! stored in this one, as restic's `copy`. The source is read under a shared lock, the
//! destination (`--repo`) written under the lock a backup takes.

use super::filters::SnapshotFilterArgs;
use super::location_arg::RepositoryLocationParser;
use super::{open_indexed, open_options, secrets, Cli, Outcome, RunRecord};
use anyhow::{Context, Result};
use clap::Args;
use neverwiped::copy::{self, CopiedSnapshot, CopyOptions, CopyOutcome};
use neverwiped::format::snapshot::Snapshot;
use neverwiped::ids::SnapshotId;
use neverwiped::locking;
use neverwiped::open::OpenError;
use neverwiped::repository::IndexedRepository;
use neverwiped::selection;
use neverwiped_contract::cli::env;
use neverwiped_contract::location::RepositoryLocation;
use neverwiped_contract::ExitStatus;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Args)]
pub struct CopyArgs {
    /// The repository to copy from: a folder or rest:http(s)://host[:port]/path/ (its gate login
    /// comes from NEVERWIPED_FROM_GATE_USERNAME and NEVERWIPED_FROM_GATE_PASSWORD_FILE).
    #[arg(long, value_name = "REPOSITORY", env = env::FROM_REPOSITORY,
          value_parser = RepositoryLocationParser)]
    pub from_repo: RepositoryLocation,
    /// File holding the password of --from-repo (or NEVERWIPED_FROM_PASSWORD).
    #[arg(long, value_name = "FILE", env = env::FROM_PASSWORD_FILE)]
    pub from_password_file: Option<PathBuf>,
    /// Snapshots to copy: id prefixes, or "latest" (the newest the filters choose). None: every
    /// snapshot the filters choose.
    #[arg(value_name = "ID")]
    pub ids: Vec<String>,
    /// File of PEM CA certificate(s) for the gate of --from-repo (or
    /// NEVERWIPED_FROM_GATE_CA_FILE); `--cacert` is the destination's.
    #[arg(long, value_name = "FILE", env = env::FROM_GATE_CA_FILE)]
    pub from_cacert: Option<PathBuf>,
    /// Create the destination repository (with the password of --repo) when there is none.
    #[arg(long)]
    pub init: bool,
    /// Only snapshots taken less than this long ago (e.g. 36h, 7d).
    #[arg(long, value_name = "DURATION", value_parser = super::durations::parse_duration)]
    pub newer_than: Option<Duration>,
    /// Only snapshots taken at or after the newest one the destination holds that the filters
    /// choose: what the destination's retention forgot is not copied again.
    #[arg(long)]
    pub after_newest_copy: bool,
    #[command(flatten)]
    pub filter: SnapshotFilterArgs,
}

/// Copies the chosen snapshots and says, for each, whether it was copied or already there.
pub async fn copy(cli: &Cli, args: &CopyArgs, record: &RunRecord) -> Result<Outcome> {
    args.filter.selection()?;
    let source = open_source(cli, args).await?;
    let destination =
        open_destination(cli, args, record)
            .await
            .with_context(|| match &cli.repo {
                Some(to) => format!("cannot open {to} (--repo), the repository copied to"),
                None => "cannot open --repo, the repository copied to".to_owned(),
            })?;
    let source_lock = locking::acquire_for_reading(&source, "copy").await?;
    let options = CopyOptions::default();
    let copied = copy_locked(&source, &destination, args, &options, cli).await;
    locking::release_read_lock(source_lock, "copy").await;
    let copied = copied.with_context(|| {
        let to = destination.backend().location();
        format!("cannot copy the snapshots to {to} (--repo)")
    })?;
    report(&copied, cli);
    let sent = neverwiped::progress::Progress::get(&options.progress.bytes_transferred);
    // The plaintext of the data blobs read from the source.
    let read = neverwiped::progress::Progress::get(&options.progress.bytes_processed);
    let newest = newest_held(&copied);
    Ok(Outcome {
        // The newest chosen snapshot, now in the destination, by its id in the source: how far
        // the destination has caught up.
        snapshot_id: newest.map(|c| c.source_id.to_hex()),
        snapshot_time: newest.map(|c| c.snapshot.time.clone()),
        // Snapshots stored by this run (the others were there already).
        files: copied
            .iter()
            .filter(|c| matches!(c.outcome, CopyOutcome::Copied { .. }))
            .count() as u64,
        bytes_read: read,
        bytes_added: sent,
        bytes_transferred: sent,
        ..Outcome::default()
    })
}

/// The chosen snapshot taken last (every chosen one is in the destination after a run).
fn newest_held(copied: &[CopiedSnapshot]) -> Option<&CopiedSnapshot> {
    copied.iter().max_by(|a, b| {
        let time = |c: &CopiedSnapshot| chrono::DateTime::parse_from_rfc3339(&c.snapshot.time).ok();
        time(a).cmp(&time(b))
    })
}

/// Opens `--repo`, creating it first with `--init` when there is none.
async fn open_destination(
    cli: &Cli,
    args: &CopyArgs,
    record: &RunRecord,
) -> Result<IndexedRepository> {
    match open_indexed(cli, record).await {
        Err(error) if args.init && super::exit_status_of(&error) == ExitStatus::NoRepository => {
            tracing::info!("no destination repository yet: creating it (--init)");
            super::init(cli)
                .await
                .context("--init cannot create the destination repository")?;
            open_indexed(cli, record).await
        }
        opened => opened,
    }
}

/// Chooses the snapshots and copies them under the destination's lock (the source's is held).
async fn copy_locked(
    source: &IndexedRepository,
    destination: &IndexedRepository,
    args: &CopyArgs,
    options: &CopyOptions,
    cli: &Cli,
) -> Result<Vec<CopiedSnapshot>> {
    let only = args.filter.selection()?;
    let chosen = selection::select_snapshots(source, &args.ids, &only).await?;
    let chosen = newer_than(chosen, args.newer_than)?;
    let chosen = match args.after_newest_copy {
        true => {
            let held = selection::select_snapshots(destination, &[], &only).await?;
            after_newest_copy(chosen, &held)?
        }
        false => chosen,
    };
    let lock = locking::acquire(destination, false, "copy").await?;
    let work = copy::copy_snapshots(source, destination, chosen, options, |done| {
        if !cli.json && !cli.quiet {
            println!("{}", line(done));
        }
    });
    let copied = lock.held_while(work).await;
    lock.release().await?;
    Ok(copied?)
}

/// Opens and indexes `--from-repo` with its own password and gate login.
async fn open_source(cli: &Cli, args: &CopyArgs) -> Result<IndexedRepository> {
    let password = secrets::source_password_source(args.from_password_file.as_deref())?;
    let mut options = open_options(cli)?;
    // The key hint names a key of the destination.
    options.key_hint = None;
    if let Some(path) = &args.from_cacert {
        let pem = std::fs::read(path)
            .with_context(|| format!("cannot read the CA file {}", path.display()))?;
        options.ca_certificate_pem = Some(pem);
    }
    let source = neverwiped::open(
        &args.from_repo,
        &password,
        &secrets::source_gate_login(),
        &options,
    )
    .await
    .map_err(OpenError::into_anyhow)
    .context("cannot open --from-repo")?;
    Ok(source.load_index().await?)
}

/// The snapshots of `chosen` taken less than `newer_than` ago (all without it).
fn newer_than(
    chosen: Vec<(SnapshotId, Snapshot)>,
    newer_than: Option<Duration>,
) -> Result<Vec<(SnapshotId, Snapshot)>> {
    let Some(age) = newer_than else {
        return Ok(chosen);
    };
    let since = chrono::Utc::now() - chrono::Duration::from_std(age)?;
    let mut kept = Vec::new();
    for (id, snapshot) in chosen {
        let taken = chrono::DateTime::parse_from_rfc3339(&snapshot.time)
            .with_context(|| format!("snapshot {id} has a time that does not parse"))?;
        if taken >= since {
            kept.push((id, snapshot));
        }
    }
    Ok(kept)
}

/// The snapshots of `chosen` taken at or after the newest of `held` (the destination's, of the
/// same filters). Copies go oldest first, so everything older than the destination's newest copy
/// was there once; what is missing of it was forgotten there on purpose. With nothing held,
/// every chosen snapshot.
fn after_newest_copy(
    chosen: Vec<(SnapshotId, Snapshot)>,
    held: &[(SnapshotId, Snapshot)],
) -> Result<Vec<(SnapshotId, Snapshot)>> {
    let taken = |id: &SnapshotId, snapshot: &Snapshot| {
        chrono::DateTime::parse_from_rfc3339(&snapshot.time)
            .with_context(|| format!("snapshot {id} has a time that does not parse"))
    };
    let mut newest = None;
    for (id, snapshot) in held {
        let time = taken(id, snapshot)?;
        newest = newest.max(Some(time));
    }
    let Some(newest) = newest else {
        return Ok(chosen);
    };
    let mut kept = Vec::new();
    for (id, snapshot) in chosen {
        if taken(&id, &snapshot)? >= newest {
            kept.push((id, snapshot));
        }
    }
    Ok(kept)
}

/// One snapshot's line, as restic's words.
fn line(done: &CopiedSnapshot) -> String {
    let what = format!(
        "snapshot {} of {:?} at {}",
        &done.source_id.to_hex()[..8],
        done.snapshot
            .paths
            .iter()
            .map(|path| path.display())
            .collect::<Vec<_>>(),
        done.snapshot.time
    );
    match &done.outcome {
        CopyOutcome::Copied { copy_id, added } => format!(
            "copied {what}: saved as {} ({} new blobs, {} bytes sent)",
            &copy_id.to_hex()[..8],
            added.blobs,
            added.bytes
        ),
        CopyOutcome::AlreadyThere { copy_id } => format!(
            "skipped {what}: already in the repository as {}",
            &copy_id.to_hex()[..8]
        ),
    }
}

/// The summary line, or the JSON of `docs/schema/copy.json`.
fn report(copied: &[CopiedSnapshot], cli: &Cli) {
    let count = |there: bool| {
        copied
            .iter()
            .filter(|c| matches!(c.outcome, CopyOutcome::AlreadyThere { .. }) == there)
            .count()
    };
    let (new, there) = (count(false), count(true));
    let sent: u64 = copied.iter().map(|c| added_of(c).bytes).sum();
    let packs: u64 = copied.iter().map(|c| added_of(c).packs).sum();
    if cli.json {
        let snapshots: Vec<serde_json::Value> = copied.iter().map(json_of).collect();
        let printed = serde_json::json!({
            "snapshots": snapshots,
            "copiedSnapshots": new,
            "alreadyThereSnapshots": there,
            "packsSent": packs,
            "bytesSent": sent,
        });
        println!("{printed}");
    } else if !cli.quiet {
        println!("copied {new} snapshots, {there} already there; sent {packs} packs, {sent} bytes");
    }
}

fn added_of(copied: &CopiedSnapshot) -> neverwiped::archive::UploadStats {
    match &copied.outcome {
        CopyOutcome::Copied { added, .. } => *added,
        CopyOutcome::AlreadyThere { .. } => Default::default(),
    }
}

fn json_of(copied: &CopiedSnapshot) -> serde_json::Value {
    let (outcome, copy_id) = match &copied.outcome {
        CopyOutcome::Copied { copy_id, .. } => ("copied", copy_id),
        CopyOutcome::AlreadyThere { copy_id } => ("alreadyThere", copy_id),
    };
    let added = added_of(copied);
    serde_json::json!({
        "sourceSnapshotId": copied.source_id.to_hex(),
        "snapshotId": copy_id.to_hex(),
        "outcome": outcome,
        "blobsSent": added.blobs,
        "bytesSent": added.bytes,
    })
}
