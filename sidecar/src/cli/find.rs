//! `find PATTERN…`: the entries of snapshots whose paths match restic's patterns (a pattern
//! without `/` matches a name at any depth, a matching folder everything below it; `-i` ignores
//! case), within modification-time bounds, newest snapshot first.

use super::filters::SnapshotFilterArgs;
use super::ls;
use super::Outcome;
use anyhow::{Context, Result};
use clap::Args;
use neverwiped::filter::PatternList;
use neverwiped::format::tree::Node;
use neverwiped::inspect::walk::{self, Descend};
use neverwiped::repository::IndexedRepository;
use neverwiped::selection;
use neverwiped::text;
use neverwiped::views::EntryView;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

#[derive(Debug, Args)]
pub struct FindArgs {
    /// restic patterns (any bytes): `*.txt` matches a name at any depth, `/data/app` that path,
    /// and a folder that matches matches all below it.
    #[arg(value_name = "PATTERN", required = true)]
    pub patterns: Vec<OsString>,
    /// Compare in lower case, the patterns and the paths alike.
    #[arg(long, short = 'i')]
    pub ignore_case: bool,
    /// Search only this snapshot (id prefix or "latest"; repeatable). None: every snapshot the
    /// filters choose.
    #[arg(long = "snapshot", short = 's', value_name = "ID")]
    pub snapshots: Vec<String>,
    #[command(flatten)]
    pub filter: SnapshotFilterArgs,
    /// Only entries modified at or after this time (UTC): 2026-01-31, "2026-01-31 15:04" or
    /// "2026-01-31 15:04:05".
    #[arg(long, short = 'O', value_name = "TIME", value_parser = parse_time)]
    pub oldest: Option<chrono::NaiveDateTime>,
    /// Only entries modified at or before this time (UTC), written as for --oldest.
    #[arg(long, short = 'N', value_name = "TIME", value_parser = parse_time)]
    pub newest: Option<chrono::NaiveDateTime>,
    /// Oldest snapshot first.
    #[arg(long, short = 'R')]
    pub reverse: bool,
    /// The long layout of `ls -l` instead of the path alone.
    #[arg(long, short = 'l')]
    pub long: bool,
}

/// A time as restic's `find` takes it, in UTC.
fn parse_time(text: &str) -> Result<chrono::NaiveDateTime, String> {
    for format in ["%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M"] {
        if let Ok(time) = chrono::NaiveDateTime::parse_from_str(text, format) {
            return Ok(time);
        }
    }
    chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .map(|day| day.and_time(chrono::NaiveTime::MIN))
        .map_err(|_| {
            format!("{text:?} is not a time such as 2026-01-31, \"2026-01-31 15:04\" or \"2026-01-31 15:04:05\"")
        })
}

/// Whether `node` was modified within the bounds given.
fn within_times(args: &FindArgs, node: &Node) -> bool {
    let mtime = chrono::DateTime::from_timestamp(node.meta.mtime.secs, node.meta.mtime.nanos)
        .unwrap_or_default()
        .naive_utc();
    args.oldest.is_none_or(|oldest| mtime >= oldest)
        && args.newest.is_none_or(|newest| mtime <= newest)
}

/// Searches the snapshots chosen and prints what matches: per snapshot a heading and a line per
/// entry, or with `json` an array of `{snapshot, snapshotTime, hits, matches}`.
pub async fn find(repo: &IndexedRepository, args: &FindArgs, json: bool) -> Result<Outcome> {
    let patterns: Vec<&[u8]> = args.patterns.iter().map(|p| p.as_bytes()).collect();
    let list = PatternList::new(&patterns, args.ignore_case, "find")?;
    let selection = args.filter.selection()?;
    let mut snapshots = selection::select_snapshots(repo, &args.snapshots, &selection).await?;
    if !args.reverse {
        snapshots.reverse();
    }
    let mut printed = Vec::new();
    for (id, snapshot) in &snapshots {
        let mut matches: Vec<(Vec<u8>, Node)> = Vec::new();
        walk::walk(repo, &snapshot.tree, |path, node| -> Result<Descend> {
            let (matched, below) = list.check(path);
            if matched && within_times(args, node) {
                matches.push((path.to_vec(), node.clone()));
            }
            // A matching folder matches all below it; otherwise only go where a match may be.
            Ok(if matched || below {
                Descend::Into
            } else {
                Descend::Past
            })
        })
        .await
        .with_context(|| format!("cannot search snapshot {}", id.short()))?;
        if json {
            let views: Vec<EntryView> = matches
                .iter()
                .map(|(path, node)| EntryView::new(&path[1..], node))
                .collect();
            printed.push(serde_json::json!({
                "snapshot": id.to_hex(),
                "snapshotTime": snapshot.time,
                "hits": views.len(),
                "matches": views,
            }));
            continue;
        }
        if matches.is_empty() {
            continue;
        }
        println!(
            "Found matching entries in snapshot {} from {}",
            id.short(),
            ls::utc_time(&snapshot.time)
        );
        for (path, node) in &matches {
            if args.long {
                println!(
                    "{}",
                    String::from_utf8_lossy(&ls::line(path, node, true, false)?)
                );
            } else {
                // The workload's names, quoted: they cannot drive the terminal.
                println!("{}", text::quoted(path));
            }
        }
        println!();
    }
    if json {
        println!("{}", serde_json::to_string(&printed)?);
    }
    Ok(Outcome::default())
}
