//! The maintenance commands: check, forget, prune, key.

use super::args::{CheckArgs, KeyCommand, PruneArgs};
use super::output::bytes;
use super::secrets::read_secret_file;
use super::{FailedAfter, Outcome};
use anyhow::Result;
use neverwiped::ids::SnapshotId;
use neverwiped::maintenance::check::ReadData;
use neverwiped::maintenance::forget::{self, ForgetRequest};
use neverwiped::maintenance::{check as checking, keys, prune as pruning, usage};
use neverwiped::repository::{IndexedRepository, Repository};
use neverwiped::selection::filter::SnapshotMatch;
use neverwiped_contract::{CheckStats, HostSnapshots, PruneStats, RepositoryStats};
use std::collections::HashSet;

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

/// The snapshots of `host` for the result, when a host is given; like the size, a failure to
/// list them is logged, not fatal.
pub async fn host_snapshots(repo: &Repository, host: Option<&str>) -> Option<HostSnapshots> {
    match neverwiped::selection::host_snapshots(repo, host?).await {
        Ok(listed) => Some(listed),
        Err(error) => {
            tracing::warn!(%error, "cannot list the snapshots of the host");
            None
        }
    }
}

pub async fn check(repo: &IndexedRepository, args: &CheckArgs, json: bool) -> Result<Outcome> {
    let read_data = match (args.read_data, args.read_data_subset) {
        (true, _) => ReadData::All,
        (false, Some(subset)) => subset,
        (false, None) => ReadData::None,
    };
    remove_locks_of(repo, args.remove_locks_of_host.as_deref()).await?;
    // A shared lock: a prune running meanwhile would show up as missing packs. A check repairs
    // nothing, so a repository that cannot be written is checked without one.
    let lock = neverwiped::locking::acquire_for_reading(repo, "check").await?;
    let report = checking::check(repo, read_data).await;
    neverwiped::locking::release_read_lock(lock, "check").await;
    let report = report?;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "snapshots": report.snapshots,
                "packs": report.packs,
                "packsRead": report.packs_read,
                "bytesRead": report.bytes_read,
                "unindexedPacks": report.unindexed_packs.len(),
                "problems": report.problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
            })
        );
    } else {
        print_check(&report);
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
            status: None,
        }
        .into());
    }
    if !json {
        println!("no errors were found");
    }
    Ok(outcome)
}

fn print_check(report: &checking::CheckReport) {
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
}

/// `prune --keep-*`: forgets the snapshots (of `--host`, when given) the rules do not keep, none
/// inside `--protect-within`, and names them (a dry run only names them); `None` when no rule is
/// given.
async fn forget_before_prune(
    repo: &IndexedRepository,
    args: &PruneArgs,
    json: bool,
) -> Result<Option<HashSet<SnapshotId>>> {
    let policy = args.keep.policy();
    if policy.is_empty() {
        return Ok(None);
    }
    let request = ForgetRequest {
        policy,
        only: SnapshotMatch {
            hosts: args.host.iter().cloned().collect(),
            ..SnapshotMatch::default()
        },
        dry_run: args.dry_run,
        protect: args.keep.window(),
        ..ForgetRequest::default()
    };
    let groups = forget::forget_where(repo, &request).await?;
    let verdicts = || groups.iter().flat_map(|group| &group.verdicts);
    let removed: HashSet<SnapshotId> = verdicts()
        .filter(|verdict| !verdict.keep)
        .map(|verdict| verdict.id)
        .collect();
    if !json {
        let done = match args.dry_run {
            true => "would be forgotten",
            false => "forgotten",
        };
        let protected = verdicts()
            .filter(|v| v.reasons.iter().any(|r| r.starts_with("protected")))
            .count();
        let count = removed.len();
        println!("{count} snapshot(s) {done}, {protected} kept by the protection window");
    }
    Ok(Some(removed))
}

pub async fn prune(repo: &IndexedRepository, args: &PruneArgs, json: bool) -> Result<Outcome> {
    remove_locks_of(repo, args.remove_locks_of_host.as_deref()).await?;
    let lock = neverwiped::locking::acquire(repo, true, "prune").await?;
    let result: Result<Outcome> = async {
        let gone = forget_before_prune(repo, args, json).await?;
        let forgotten = gone.as_ref().map(|gone| gone.len() as u64);
        let window = args.keep.window();
        let gone = gone.unwrap_or_default();
        let plan = pruning::plan_prune_protecting(repo, window.as_ref(), &gone).await?;
        let planned = serde_json::json!({
            "packsKept": plan.keep.len(),
            "packsToRepack": plan.repack.len(),
            "packsToDelete": plan.delete.len(),
            "bytesToFree": plan.bytes_freed,
            "bytesToKeep": plan.bytes_kept + plan.bytes_repacked,
        });
        if !json {
            println!(
                "{} pack(s) kept, {} to repack, {} to delete: {} freed, {} kept",
                plan.keep.len(),
                plan.repack.len(),
                plan.delete.len(),
                bytes(plan.bytes_freed),
                bytes(plan.bytes_kept + plan.bytes_repacked)
            );
        }
        if args.dry_run {
            if json {
                println!("{}", serde_json::json!({ "dryRun": true, "plan": planned }));
            }
            return Ok(Outcome {
                snapshots_forgotten: forgotten,
                ..Outcome::default()
            });
        }
        // A prune whose lock was lost stops: a backup may have started on the repository.
        let report = lock.held_while(pruning::execute_prune(repo, plan)).await?;
        if json {
            println!(
                "{}",
                serde_json::json!({
                    "dryRun": false,
                    "plan": planned,
                    "packsDeleted": report.packs_deleted,
                    "packsWritten": report.packs_written,
                    "bytesFreed": report.bytes_freed,
                    "bytesKept": report.bytes_kept,
                })
            );
        } else {
            println!(
                "deleted {} pack(s), wrote {}: {} freed, {} kept",
                report.packs_deleted,
                report.packs_written,
                bytes(report.bytes_freed),
                bytes(report.bytes_kept)
            );
        }
        Ok(Outcome {
            prune: Some(PruneStats {
                bytes_freed: report.bytes_freed,
                bytes_kept: report.bytes_kept,
                packs_deleted: report.packs_deleted,
            }),
            snapshots_forgotten: forgotten,
            ..Outcome::default()
        })
    }
    .await;
    lock.release().await?;
    let mut outcome = result?;
    outcome.repository = repository_stats(repo).await;
    outcome.host_snapshots = host_snapshots(repo, args.host.as_deref()).await;
    Ok(outcome)
}

pub async fn key(
    repo: &Repository,
    password: &[u8],
    command: &KeyCommand,
    json: bool,
) -> Result<Outcome> {
    // Each command prints one line of text, or one JSON value.
    let (text, value) = match command {
        KeyCommand::List => {
            let listed = keys::list_keys(repo).await?;
            if json {
                let list: Vec<serde_json::Value> = listed
                    .iter()
                    .map(|key| {
                        serde_json::json!({
                            "id": key.id.to_hex(),
                            "current": key.current,
                            "created": key.created,
                            "username": key.username,
                            "hostname": key.hostname,
                        })
                    })
                    .collect();
                println!("{}", serde_json::Value::Array(list));
                return Ok(Outcome::default());
            }
            let lines: Vec<String> = listed
                .iter()
                .map(|key| {
                    let marker = if key.current { "*" } else { " " };
                    format!(
                        "{marker} {} {} {}@{}",
                        key.id.short(),
                        key.created,
                        key.username,
                        key.hostname
                    )
                })
                .collect();
            (lines.join("\n"), serde_json::Value::Null)
        }
        KeyCommand::Add(args) => {
            let new_password = read_secret_file(&args.new_password_file)?;
            let id = keys::add_key(repo, password, &new_password).await?;
            (
                format!("added key {}", id.short()),
                serde_json::json!({ "added": id.to_hex() }),
            )
        }
        KeyCommand::Remove { id } => {
            let removed = keys::remove_key(repo, id).await?;
            (
                format!("removed key {}", removed.short()),
                serde_json::json!({ "removed": removed.to_hex() }),
            )
        }
        KeyCommand::Passwd(args) => {
            let new_password = read_secret_file(&args.new_password_file)?;
            let id = keys::change_password(repo, password, &new_password).await?;
            (
                format!(
                    "password changed: key {} replaces {}",
                    id.short(),
                    repo.key_id().short()
                ),
                serde_json::json!({ "added": id.to_hex(), "removed": repo.key_id().to_hex() }),
            )
        }
    };
    if json {
        println!("{value}");
    } else if !text.is_empty() {
        println!("{text}");
    }
    Ok(Outcome::default())
}
