//! `snapshots`: what a repository holds.

use super::output::bytes;
use super::Outcome;
use anyhow::Result;
use neverwiped::repository::Repository;
use neverwiped::text;
use neverwiped::views::SnapshotView;

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
