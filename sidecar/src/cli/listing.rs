//! `snapshots` and `ls`: what a repository and a snapshot hold.

use super::args::LsArgs;
use super::output::bytes;
use super::{select, Outcome};
use anyhow::Result;
use neverwiped::format::tree::NodeKind;
use neverwiped::repository::{IndexedRepository, Repository};
use neverwiped::views::{EntryView, SnapshotView};
use neverwiped::{restore, text};
use std::os::unix::ffi::OsStrExt;

/// Lists the snapshots: a table (times in UTC) or, with `json`, an array of snapshot objects.
pub async fn snapshots(repo: &Repository, json: bool) -> Result<Outcome> {
    let snapshots = repo.snapshots().await?;
    if json {
        let list: Vec<SnapshotView> = snapshots
            .iter()
            .map(|(id, snapshot)| SnapshotView::new(id, snapshot))
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
    let wanted = args.path.as_deref().map(OsStrExt::as_bytes);
    let entries = restore::list(repo, snapshot.tree, wanted).await?;
    for entry in entries {
        let path = [b"/", entry.path.as_slice()].concat();
        // The listing of a path also yields the folders leading to it: they are not below it.
        if !wanted.is_none_or(|wanted| select::is_at_or_below(&path, wanted)) {
            continue;
        }
        if json {
            let view = EntryView::new(&entry.path, &entry.node);
            println!("{}", serde_json::to_string(&view)?);
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
        // The name is the workload's: quoted, it cannot drive the terminal or forge a line.
        let shown = text::quoted(&path);
        println!(
            "{kind}{:04o} {:>6} {:>6} {:>12}  {shown}",
            entry.node.meta.mode, entry.node.meta.uid, entry.node.meta.gid, size
        );
    }
    Ok(Outcome::default())
}
