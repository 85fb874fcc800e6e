//! The maintenance commands: check, forget, prune, key.

use super::output::bytes;
use super::secrets::read_secret_file;
use super::{FailedAfter, Outcome};
use anyhow::Result;
use clap::{Args, Subcommand};
use neverwiped::maintenance::check::ReadData;
use neverwiped::maintenance::forget::KeepPolicy;
use neverwiped::maintenance::{
    check as checking, forget as forgetting, keys, prune as pruning, usage,
};
use neverwiped::repository::{IndexedRepository, Repository};
use neverwiped_contract::{CheckStats, PruneStats, RepositoryStats};
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Read back and authenticate every byte of every pack.
    #[arg(long, conflicts_with = "read_data_subset")]
    pub read_data: bool,
    /// Read back this share of the packs, e.g. 10% (chosen at random each run).
    #[arg(long, value_parser = parse_percent)]
    pub read_data_subset: Option<f64>,
    /// Before locking, remove every lock written on this host name (see backup).
    #[arg(long, value_name = "HOSTNAME")]
    pub remove_locks_of_host: Option<String>,
}

/// Retention rules: a snapshot is kept when any rule keeps it.
#[derive(Debug, Args, Default)]
pub struct KeepArgs {
    /// Keep the newest N snapshots.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub keep_last: u32,
    /// Keep the newest snapshot of each of the last N hours that have one.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub keep_hourly: u32,
    /// Keep the newest snapshot of each of the last N days that have one.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub keep_daily: u32,
    /// Keep the newest snapshot of each of the last N weeks that have one.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub keep_weekly: u32,
    /// Keep the newest snapshot of each of the last N months that have one.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub keep_monthly: u32,
    /// Keep the newest snapshot of each of the last N years that have one.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub keep_yearly: u32,
}

impl KeepArgs {
    pub fn policy(&self) -> KeepPolicy {
        KeepPolicy {
            last: self.keep_last,
            hourly: self.keep_hourly,
            daily: self.keep_daily,
            weekly: self.keep_weekly,
            monthly: self.keep_monthly,
            yearly: self.keep_yearly,
        }
    }
}

#[derive(Debug, Args)]
pub struct ForgetArgs {
    #[command(flatten)]
    pub keep: KeepArgs,
    /// Only snapshots of this host (the operator's NAMESPACE/PLAN).
    #[arg(long)]
    pub host: Option<String>,
    /// Show what would be removed and why, remove nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Show the plan, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Before locking, remove every lock written on this host name (see backup).
    #[arg(long, value_name = "HOSTNAME")]
    pub remove_locks_of_host: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// List the key objects.
    List,
    /// Add a password (read from a file).
    Add(NewPasswordArgs),
    /// Remove a key object by id prefix (not the one in use).
    Remove { id: String },
    /// Change the password: add the new one, remove the one in use.
    Passwd(NewPasswordArgs),
}

#[derive(Debug, Args)]
pub struct NewPasswordArgs {
    /// File holding the new password.
    #[arg(long, env = "NEVERWIPED_NEW_PASSWORD_FILE")]
    pub new_password_file: PathBuf,
}

fn parse_percent(text: &str) -> Result<f64, String> {
    let number = text.trim().trim_end_matches('%');
    match number.parse::<f64>() {
        Ok(value) if value > 0.0 && value <= 100.0 => Ok(value),
        _ => Err(format!(
            "{text:?} is not a percentage between 0 and 100, such as 10%"
        )),
    }
}

/// Removes the locks of `hostname`, when asked: the caller knows no process of it is alive.
pub async fn remove_locks_of(repo: &Repository, hostname: Option<&str>) -> Result<()> {
    if let Some(hostname) = hostname {
        let removed = neverwiped::locking::remove_locks_of_host(repo, hostname).await?;
        if removed > 0 {
            tracing::info!(
                removed,
                hostname,
                "removed locks left by earlier runs of this host"
            );
        }
    }
    Ok(())
}

/// The repository's size and snapshot count for the result; a failure to measure is logged, not
/// fatal: the command itself succeeded.
pub async fn repository_stats(repo: &Repository) -> Option<RepositoryStats> {
    match usage::measure(repo).await {
        Ok(usage) => Some(RepositoryStats {
            size_bytes: usage.bytes,
            snapshots: usage.snapshots,
        }),
        Err(error) => {
            tracing::warn!(%error, "cannot measure the repository's size");
            None
        }
    }
}

pub async fn check(repo: &IndexedRepository, args: &CheckArgs) -> Result<Outcome> {
    let read_data = match (args.read_data, args.read_data_subset) {
        (true, _) => ReadData::All,
        (false, Some(percent)) => ReadData::Subset(percent),
        (false, None) => ReadData::None,
    };
    remove_locks_of(repo, args.remove_locks_of_host.as_deref()).await?;
    // A shared lock: a prune running meanwhile would show up as missing packs.
    let lock = neverwiped::locking::acquire(repo, false, "check").await?;
    let report = checking::check(repo, read_data).await;
    lock.release().await?;
    let report = report?;
    println!(
        "checked {} snapshot(s) and {} pack(s); read {} pack(s), {}",
        report.snapshots,
        report.packs,
        report.packs_read,
        bytes(report.bytes_read)
    );
    if !report.unindexed_packs.is_empty() {
        println!(
            "{} pack(s) are in no index (left by interrupted backups; prune removes them)",
            report.unindexed_packs.len()
        );
    }
    for problem in &report.problems {
        println!("error: {problem}");
    }
    let outcome = Outcome {
        repository: repository_stats(repo).await,
        check: Some(CheckStats {
            snapshots: report.snapshots as u64,
            packs: report.packs as u64,
            packs_read: report.packs_read as u64,
            problems: report.problems.len() as u64,
        }),
        ..Outcome::default()
    };
    if let Some(first) = report.problems.first() {
        let more = match report.problems.len() {
            1 => String::new(),
            n => format!(" (and {} more)", n - 1),
        };
        return Err(FailedAfter {
            message: format!(
                "the repository has {} problem(s): {first}{more}",
                report.problems.len()
            ),
            outcome,
        }
        .into());
    }
    println!("no errors were found");
    Ok(outcome)
}

pub async fn forget(repo: &IndexedRepository, args: &ForgetArgs, json: bool) -> Result<Outcome> {
    let policy = args.keep.policy();
    let groups = forgetting::forget(repo, &policy, args.host.as_deref(), args.dry_run).await?;
    let mut removed = 0;
    for group in &groups {
        if !json {
            println!("host {} paths {}", group.hostname, group.paths.join(" "));
        }
        for verdict in &group.verdicts {
            removed += u64::from(!verdict.keep);
            let action = match (verdict.keep, args.dry_run) {
                (true, _) => "keep",
                (false, true) => "would remove",
                (false, false) => "removed",
            };
            if json {
                println!(
                    "{}",
                    serde_json::json!({"id": verdict.id, "time": verdict.time, "keep": verdict.keep, "reasons": verdict.reasons})
                );
            } else {
                println!(
                    "  {} {} {:<12} {}",
                    verdict.id.short(),
                    verdict.time.format("%Y-%m-%d %H:%M"),
                    action,
                    verdict.reasons.join(", ")
                );
            }
        }
    }
    if !json {
        println!(
            "{removed} snapshot(s) {}",
            if args.dry_run {
                "would be removed"
            } else {
                "removed"
            }
        );
    }
    Ok(Outcome {
        files: removed,
        ..Outcome::default()
    })
}

pub async fn prune(repo: &IndexedRepository, args: &PruneArgs) -> Result<Outcome> {
    remove_locks_of(repo, args.remove_locks_of_host.as_deref()).await?;
    let lock = neverwiped::locking::acquire(repo, true, "prune").await?;
    let result: Result<Outcome> = async {
        let plan = pruning::plan_prune(repo).await?;
        println!(
            "{} pack(s) kept, {} to repack, {} to delete: {} freed, {} kept",
            plan.keep.len(),
            plan.repack.len(),
            plan.delete.len(),
            bytes(plan.bytes_freed),
            bytes(plan.bytes_kept + plan.bytes_repacked)
        );
        if args.dry_run {
            return Ok(Outcome::default());
        }
        // A prune whose lock was lost stops: a backup may have started on the repository.
        let report = lock.held_while(pruning::execute_prune(repo, plan)).await?;
        println!(
            "deleted {} pack(s), wrote {}: {} freed, {} kept",
            report.packs_deleted,
            report.packs_written,
            bytes(report.bytes_freed),
            bytes(report.bytes_kept)
        );
        Ok(Outcome {
            prune: Some(PruneStats {
                bytes_freed: report.bytes_freed,
                bytes_kept: report.bytes_kept,
                packs_deleted: report.packs_deleted,
            }),
            ..Outcome::default()
        })
    }
    .await;
    lock.release().await?;
    let mut outcome = result?;
    outcome.repository = repository_stats(repo).await;
    Ok(outcome)
}

pub async fn key(repo: &Repository, password: &[u8], command: &KeyCommand) -> Result<Outcome> {
    match command {
        KeyCommand::List => {
            for key in keys::list_keys(repo).await? {
                let marker = if key.current { "*" } else { " " };
                println!(
                    "{marker} {} {} {}@{}",
                    key.id.short(),
                    key.created,
                    key.username,
                    key.hostname
                );
            }
        }
        KeyCommand::Add(args) => {
            let new_password = read_secret_file(&args.new_password_file)?;
            let id = keys::add_key(repo, password, &new_password).await?;
            println!("added key {}", id.short());
        }
        KeyCommand::Remove { id } => {
            let removed = keys::remove_key(repo, id).await?;
            println!("removed key {}", removed.short());
        }
        KeyCommand::Passwd(args) => {
            let new_password = read_secret_file(&args.new_password_file)?;
            let id = keys::change_password(repo, password, &new_password).await?;
            println!(
                "password changed: key {} replaces {}",
                id.short(),
                repo.key_id().short()
            );
        }
    }
    Ok(Outcome::default())
}
