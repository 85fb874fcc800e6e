//! `snapshots`: what a repository holds, chosen and grouped as restic's `snapshots` does.

use super::filters::SnapshotFilterArgs;
use super::Outcome;
use anyhow::Result;
use clap::Args;
use neverwiped::format::snapshot::Snapshot;
use neverwiped::ids::SnapshotId;
use neverwiped::repository::Repository;
use neverwiped::selection::{self, GroupBy, GroupKey};
use neverwiped::text;
use neverwiped::text::bytes;
use neverwiped::views::{GroupKeyView, SnapshotView};

#[derive(Debug, Args)]
pub struct SnapshotsArgs {
    /// Snapshots to show: id prefixes, or "latest" (the newest the filters choose). None: every
    /// snapshot the filters choose.
    #[arg(value_name = "SNAPSHOT")]
    pub snapshots: Vec<String>,
    #[command(flatten)]
    pub filter: SnapshotFilterArgs,
    /// Only the newest N snapshots of each host and set of paths.
    #[arg(long, value_name = "N")]
    pub latest: Option<usize>,
    /// Show the snapshots in groups by host, paths and/or tags, e.g. host,paths (with --json: an
    /// array of groups, each with its key and its snapshots).
    #[arg(long, short = 'g', value_name = "GROUP[,GROUP...]")]
    pub group_by: Option<GroupBy>,
}

/// Lists the snapshots chosen: a table (times in UTC) per group or, with `json`, an array of
/// snapshot objects (of groups with `--group-by`).
pub async fn snapshots(repo: &Repository, args: &SnapshotsArgs, json: bool) -> Result<Outcome> {
    let selection = args.filter.selection()?;
    let mut chosen = selection::select_snapshots(repo, &args.snapshots, &selection).await?;
    if let Some(count) = args.latest {
        chosen = selection::latest_of_each_source(chosen, count);
    }
    let Some(group_by) = args.group_by else {
        if json {
            println!("{}", serde_json::to_string_pretty(&views(&chosen))?);
        } else {
            print_table(&chosen);
            println!("{} snapshot(s)", chosen.len());
        }
        return Ok(Outcome::default());
    };
    let groups = group_by.group(chosen);
    if json {
        let printed: Vec<serde_json::Value> = groups
            .iter()
            .map(|(key, snapshots)| {
                serde_json::json!({
                    "groupKey": GroupKeyView::new(key),
                    "snapshots": views(snapshots),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&printed)?);
        return Ok(Outcome::default());
    }
    let mut total = 0;
    for (key, snapshots) in &groups {
        println!("snapshots for {}:", describe(key));
        print_table(snapshots);
        println!();
        total += snapshots.len();
    }
    println!("{total} snapshot(s) in {} group(s)", groups.len());
    Ok(Outcome::default())
}

fn views(snapshots: &[(SnapshotId, Snapshot)]) -> Vec<SnapshotView> {
    snapshots
        .iter()
        .map(|(id, snapshot)| SnapshotView::new(id, snapshot))
        .collect()
}

/// A group's key in words: `host h1, paths /a /b, tags a,b`.
fn describe(key: &GroupKey) -> String {
    let mut parts = Vec::new();
    if let Some(host) = &key.host {
        parts.push(format!("host {}", text::escaped(host)));
    }
    if let Some(paths) = &key.paths {
        let paths: Vec<String> = paths
            .iter()
            .map(|p| text::quoted(&p.0).into_owned())
            .collect();
        parts.push(format!("paths {}", paths.join(" ")));
    }
    if let Some(tags) = &key.tags {
        parts.push(format!("tags {}", text::escaped(&tags.join(","))));
    }
    parts.join(", ")
}

/// The table of `snapshots`, with its header.
fn print_table(snapshots: &[(SnapshotId, Snapshot)]) {
    println!(
        "{:<10} {:<20} {:<20} {:<16} {:>10} {:>10}  paths",
        "id", "time (UTC)", "host", "tags", "files", "size"
    );
    for (id, snapshot) in snapshots {
        let time = chrono::DateTime::parse_from_rfc3339(&snapshot.time)
            .map(|t| {
                t.with_timezone(&chrono::Utc)
                    .format("%Y-%m-%d %H:%M:%S")
                    .to_string()
            })
            .unwrap_or_else(|_| snapshot.time.clone());
        let paths: Vec<String> = snapshot
            .paths
            .iter()
            .map(|p| text::quoted(&p.0).into_owned())
            .collect();
        let tags = if snapshot.tags.is_empty() {
            "-".to_owned()
        } else {
            snapshot.tags.join(",")
        };
        println!(
            "{:<10} {:<20} {:<20} {:<16} {:>10} {:>10}  {}",
            id.short(),
            time,
            text::escaped(&snapshot.hostname),
            text::escaped(&tags),
            snapshot.summary.files,
            bytes(snapshot.summary.total_bytes),
            paths.join(" ")
        );
    }
}
