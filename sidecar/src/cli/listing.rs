//! `snapshots` and `ls`: what a repository and a snapshot hold.

use super::args::LsArgs;
use super::output::bytes;
use super::{select, Outcome};
use anyhow::Result;
use neverwiped::format::tree::NodeKind;
use neverwiped::repository::{IndexedRepository, Repository};
use neverwiped::restore;

/// Lists the snapshots: a table (times in UTC) or, with `json`, an array of snapshot objects.
pub async fn snapshots(repo: &Repository, json: bool) -> Result<Outcome> {
    let snapshots = repo.snapshots().await?;
    if json {
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
        "{:<10} {:<20} {:<20} {:<16} {:>10} {:>10}  paths",
        "id", "time (UTC)", "host", "tags", "files", "size"
    );
    for (id, snapshot) in &snapshots {
        let time = chrono::DateTime::parse_from_rfc3339(&snapshot.time)
            .map(|t| {
                t.with_timezone(&chrono::Utc)
                    .format("%Y-%m-%d %H:%M:%S")
                    .to_string()
            })
            .unwrap_or_else(|_| snapshot.time.clone());
        let paths: Vec<String> = snapshot.paths.iter().map(|p| p.display()).collect();
        let tags = if snapshot.tags.is_empty() {
            "-".to_owned()
        } else {
            snapshot.tags.join(",")
        };
        println!(
            "{:<10} {:<20} {:<20} {:<16} {:>10} {:>10}  {}",
            id.short(),
            time,
            snapshot.hostname,
            tags,
            snapshot.summary.files,
            bytes(snapshot.summary.total_bytes),
            paths.join(" ")
        );
    }
    println!("{} snapshot(s)", snapshots.len());
    Ok(Outcome::default())
}

/// Lists the entries of a snapshot: all, or `PATH` and what is below it.
pub async fn ls(repo: &IndexedRepository, args: &LsArgs, json: bool) -> Result<Outcome> {
    let (_, snapshot) = select::find(repo, &args.snapshot).await?;
    let entries = restore::list(repo, snapshot.tree, args.path.as_deref()).await?;
    for entry in entries {
        let path = restore::display_path(&entry.path);
        // The listing of a path also yields the folders leading to it: they are not below it.
        if !args
            .path
            .as_deref()
            .is_none_or(|wanted| select::is_at_or_below(&path, wanted))
        {
            continue;
        }
        if json {
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
