//! `drill`: a restore drill of one snapshot into scratch space (see [`neverwiped::drill`]): each
//! volume's files (or a sample of them) restored, held to the snapshot and removed, and with
//! `--databases` each dump loaded into a throwaway server and its rows counted. Any difference
//! fails the run with [`ExitStatus::VerifyFailed`], naming the files and tables, with what was
//! measured still in the result.

use super::{open_indexed, select, Cli, FailedAfter, Outcome, RunRecord};
use anyhow::{Context, Result};
use neverwiped::drill::database::{drill_database, Failure};
use neverwiped::drill::volume::{drill_volume, volumes, VolumeDrill};
use neverwiped::format::snapshot::Snapshot;
use neverwiped::ids::SnapshotId;
use neverwiped::repository::IndexedRepository;
use neverwiped::text::bytes;
use neverwiped_contract::drill::{DrillSample, DrillStats};
use neverwiped_contract::ExitStatus;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Problems named in the error; the rest are counted.
const NAMED_AT_MOST: usize = 30;

/// The longest error a drill reports, in bytes.
const MESSAGE_AT_MOST: usize = 8192;

/// `drill`'s arguments, as [`neverwiped_contract::drill::DrillArgs::to_args`] writes them.
#[derive(Debug, clap::Args)]
pub struct DrillArgs {
    /// Snapshot id prefix, or "latest".
    pub snapshot: String,
    /// The scratch folder: files are restored under DIR/files, the servers' data directories
    /// are under DIR/databases; both are removed again. It needs room for the largest volume
    /// (its sampled share) and the largest loaded database.
    #[arg(long, value_name = "DIR")]
    pub scratch: PathBuf,
    /// With `latest`: the newest snapshot of this host; with an id, one of another host is
    /// refused.
    #[arg(long)]
    pub host: Option<String>,
    /// Restore about this share of each volume's files (1 to 100), chosen by their paths' hashes.
    #[arg(long, value_name = "P", requires = "sample_round",
          value_parser = clap::value_parser!(u8).range(1..=100))]
    pub sample_percent: Option<u8>,
    /// Which share: rounds 0, 1, 2, … take the next P% of the files each, so that
    /// ceil(100 / P) successive rounds restore every file once.
    #[arg(long, value_name = "N", requires = "sample_percent")]
    pub sample_round: Option<u64>,
    /// Load each database dump of the snapshot into a throwaway server too, and count its
    /// tables' rows against those the snapshot recorded.
    #[arg(long)]
    pub databases: bool,
}

impl DrillArgs {
    fn sample(&self) -> DrillSample {
        match (self.sample_percent, self.sample_round) {
            (Some(percent), round) => DrillSample::Percent {
                percent,
                round: round.unwrap_or(0),
            },
            (None, _) => DrillSample::All,
        }
    }
}

/// Runs the drill under a shared lock (or none where the repository cannot take one): it only
/// reads the repository.
pub async fn drill(cli: &Cli, args: &DrillArgs, record: &RunRecord) -> Result<Outcome> {
    let repo = open_indexed(cli, record).await?;
    let lock = neverwiped::locking::acquire_for_reading(&repo, "drill").await?;
    let result = run(cli, args, &repo).await;
    neverwiped::locking::release_read_lock(lock, "drill").await;
    result
}

/// What a drill found wrong: the problems named, and whether the data itself differs (else the
/// drill could not be run whole).
#[derive(Default)]
struct Findings {
    problems: Vec<String>,
    differs: bool,
}

async fn run(cli: &Cli, args: &DrillArgs, repo: &IndexedRepository) -> Result<Outcome> {
    let selection = select::Selection {
        snapshot: &args.snapshot,
        host: args.host.as_deref(),
        before: None,
    };
    let (snapshot_id, snapshot) = select::for_restore(repo, &selection).await?;
    tracing::info!(
        "drilling snapshot {} of {} taken at {}",
        snapshot_id.short(),
        snapshot.hostname,
        snapshot.time
    );
    let sample = args.sample();
    let mut stats = DrillStats {
        sample_percent: sample.percent(),
        sample_round: args
            .sample_round
            .filter(|_| sample != DrillSample::All)
            .unwrap_or(0),
        ..DrillStats::default()
    };
    let mut findings = Findings::default();
    let scratch = prepare_scratch(&args.scratch)?;
    drill_volumes(
        cli,
        repo,
        &snapshot,
        sample,
        &scratch,
        &mut stats,
        &mut findings,
    )
    .await?;
    if args.databases {
        drill_databases(cli, repo, &snapshot, &scratch, &mut stats, &mut findings).await?;
    }
    print_summary(cli, &snapshot_id, &snapshot, &stats);
    finish(snapshot_id, &snapshot, stats, findings)
}

/// The outcome, or the failure that names what differs with the outcome in it.
fn finish(
    snapshot_id: SnapshotId,
    snapshot: &Snapshot,
    stats: DrillStats,
    findings: Findings,
) -> Result<Outcome> {
    let outcome = Outcome {
        snapshot_id: Some(snapshot_id.to_hex()),
        snapshot_time: Some(snapshot.time.clone()),
        files: stats.volumes.iter().map(|v| v.files).sum(),
        bytes_read: stats.volumes.iter().map(|v| v.bytes).sum::<u64>()
            + stats.databases.iter().map(|d| d.bytes).sum::<u64>(),
        drill: Some(stats),
        ..Outcome::default()
    };
    if findings.problems.is_empty() {
        return Ok(outcome);
    }
    let mut message = format!("drill failed: {}", findings.problems.join("; "));
    if message.len() > MESSAGE_AT_MOST {
        neverwiped_contract::text::truncate_at_char_boundary(&mut message, MESSAGE_AT_MOST);
        message.push_str(" …");
    }
    Err(FailedAfter {
        message,
        outcome,
        status: Some(match findings.differs {
            true => ExitStatus::VerifyFailed,
            false => ExitStatus::Failed,
        }),
    }
    .into())
}

/// Makes the scratch folder, removes what an earlier drill left in it, and when the servers
/// run as another user lets that user through it (to its own folders only); its absolute path.
fn prepare_scratch(scratch: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(scratch)
        .with_context(|| format!("cannot create the scratch folder {}", scratch.display()))?;
    let scratch = &std::fs::canonicalize(scratch)
        .with_context(|| format!("cannot find the scratch folder {}", scratch.display()))?;
    for leftover in ["files", "databases"] {
        neverwiped::drill::remove_tree(&scratch.join(leftover))?;
    }
    if neverwiped::drill::server::server_owner().is_some() {
        let meta = std::fs::metadata(scratch)?;
        let mode = meta.permissions().mode() | 0o001;
        std::fs::set_permissions(scratch, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("cannot open {} to the servers' user", scratch.display()))?;
    }
    Ok(scratch.clone())
}

async fn drill_volumes(
    cli: &Cli,
    repo: &IndexedRepository,
    snapshot: &Snapshot,
    sample: DrillSample,
    scratch: &Path,
    stats: &mut DrillStats,
    findings: &mut Findings,
) -> Result<()> {
    let target = scratch.join("files");
    for path in volumes(repo, snapshot.tree, &snapshot.sources).await? {
        let drilled = drill_volume(repo, snapshot.tree, &path, sample, &target).await;
        print_volume(cli, &drilled);
        if !drilled.problems.is_empty() {
            findings.differs = true;
            findings.problems.push(volume_problems(&drilled));
        }
        stats.volumes.push(drilled.stats);
    }
    Ok(())
}

/// The problems of a volume, the first [`NAMED_AT_MOST`] named.
fn volume_problems(drilled: &VolumeDrill) -> String {
    let named: Vec<String> = drilled
        .problems
        .iter()
        .take(NAMED_AT_MOST)
        .map(|(path, problem)| format!("{path} ({problem})"))
        .collect();
    let more = match drilled.problems.len().saturating_sub(named.len()) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    format!(
        "volume {}: {} of {} files differ from the snapshot or could not be restored: {}{more}",
        neverwiped::text::escaped(&drilled.stats.path),
        drilled.problems.len(),
        drilled.stats.files.max(drilled.problems.len() as u64),
        named.join(", ")
    )
}

async fn drill_databases(
    cli: &Cli,
    repo: &IndexedRepository,
    snapshot: &Snapshot,
    scratch: &Path,
    stats: &mut DrillStats,
    findings: &mut Findings,
) -> Result<()> {
    let databases = scratch.join("databases");
    if !snapshot.sources.databases.is_empty() {
        std::fs::create_dir_all(&databases)?;
        std::fs::set_permissions(&databases, std::fs::Permissions::from_mode(0o711))?;
    }
    for recorded in &snapshot.sources.databases {
        let (drilled, failure) = drill_database(repo, snapshot.tree, recorded, &databases).await;
        print_database(cli, &drilled);
        if let (Some(failure), Some(error)) = (failure, &drilled.error) {
            findings.differs |= failure == Failure::Differs;
            let name = neverwiped::text::escaped(&drilled.name);
            findings.problems.push(format!("database {name}: {error}"));
        }
        stats.databases.push(drilled);
    }
    neverwiped::drill::remove_tree(&databases)
}

/// Megabytes a second, for the human lines.
fn rate(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / 1_000_000.0 / secs.max(0.001)
}

fn print_volume(cli: &Cli, drilled: &VolumeDrill) {
    if cli.json || cli.quiet {
        return;
    }
    let stats = &drilled.stats;
    println!(
        "volume {}: {} files, {} in {:.2} s ({:.1} MB/s){}",
        neverwiped::text::escaped(&stats.path),
        stats.files,
        bytes(stats.bytes),
        stats.secs,
        rate(stats.bytes, stats.secs),
        match stats.mismatched {
            0 => String::new(),
            n => format!(", {n} differ"),
        }
    );
}

fn print_database(cli: &Cli, drilled: &neverwiped_contract::drill::DrillDatabase) {
    if cli.json || cli.quiet {
        return;
    }
    println!(
        "database {} ({}): {} loaded, {} tables checked in {:.2} s ({:.1} MB/s){}",
        neverwiped::text::escaped(&drilled.name),
        drilled.engine,
        bytes(drilled.bytes),
        drilled.tables_checked,
        drilled.secs,
        rate(drilled.bytes, drilled.secs),
        match &drilled.error {
            Some(error) => format!(": FAILED: {error}"),
            None => String::new(),
        }
    );
}

fn print_summary(cli: &Cli, snapshot_id: &SnapshotId, snapshot: &Snapshot, stats: &DrillStats) {
    if cli.json {
        match serde_json::to_value(stats) {
            Ok(mut printed) => {
                printed["snapshotId"] = snapshot_id.to_hex().into();
                printed["snapshotTime"] = snapshot.time.clone().into();
                printed["recoverySecs"] = stats.recovery_secs().into();
                println!("{printed}");
            }
            Err(error) => tracing::warn!("cannot print the drill as JSON: {error}"),
        }
        return;
    }
    if cli.quiet {
        return;
    }
    let sample = match stats.sample_percent {
        100 => "every file".to_owned(),
        p => format!("{p}% of the files (round {})", stats.sample_round),
    };
    println!(
        "drilled snapshot {} (taken at {}): {} volume(s), {} database(s), {sample}; recovery time {:.2} s",
        snapshot_id.short(),
        snapshot.time,
        stats.volumes.len(),
        stats.databases.len(),
        stats.recovery_secs()
    );
}
