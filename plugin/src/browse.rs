//! `snapshots`, `ls`, `cat` and `download`: the plan's snapshots and their files, read from the
//! gate by the engine in this process.

use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context, Result};
use futures::{StreamExt, TryStreamExt};
use neverwiped::format::snapshot::Snapshot;
use neverwiped::format::tree::NodeKind;
use neverwiped::ids::SnapshotId;
use neverwiped::repository::{IndexedRepository, Repository, SnapshotFilter};
use neverwiped::restore::{self, plan::PlannedEntry, RestoreOptions};
use neverwiped::selection;

/// Which snapshot a command means: `latest` (the plan's newest, or its newest taken before
/// `before`) or an id prefix of one of the plan's snapshots.
#[derive(Debug, Clone)]
pub struct SnapshotChoice {
    pub spec: String,
    pub before: Option<chrono::DateTime<chrono::Utc>>,
}

/// Blobs of a file read ahead while `cat` writes the previous ones.
const CAT_READ_AHEAD: usize = 4;

/// Finds the snapshot of `host` that `choice` means.
pub async fn find(
    repo: &Repository,
    host: &str,
    choice: &SnapshotChoice,
) -> Result<(SnapshotId, Snapshot)> {
    let filter = SnapshotFilter {
        host: Some(host.to_owned()),
        before: choice.before,
    };
    Ok(selection::find_snapshot(repo, &choice.spec, &filter).await?)
}

/// Prints the plan's snapshots, newest first: a table, or with `json` an array.
pub async fn snapshots(repo: &Repository, host: &str, json: bool) -> Result<()> {
    let snapshots = selection::snapshots_of_host(repo, host).await?;
    if json {
        let list: Vec<serde_json::Value> = snapshots
            .iter()
            .map(|(id, snapshot)| {
                let mut value = serde_json::to_value(snapshot).unwrap_or_default();
                value["id"] = serde_json::Value::String(id.to_hex());
                value
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(());
    }
    println!(
        "{:<8}  {:<20}  {:>9}  {:>10}  {:<20}  paths",
        "ID", "TIME (UTC)", "FILES", "SIZE", "TAGS"
    );
    for (id, snapshot) in &snapshots {
        let entry = selection::snapshot_entry(id, snapshot);
        let paths: Vec<String> = snapshot.paths.iter().map(|p| p.display()).collect();
        let tags = if entry.tags.is_empty() {
            "-".to_owned()
        } else {
            entry.tags.join(",")
        };
        println!(
            "{:<8}  {:<20}  {:>9}  {:>10}  {:<20}  {}",
            entry.id,
            entry.time,
            entry.files,
            crate::table::bytes(entry.size_bytes),
            tags,
            paths.join(" ")
        );
    }
    println!("{} snapshot(s) of {host}", snapshots.len());
    Ok(())
}

/// The entries of the snapshot at `path` and below (all when `None`).
async fn entries(
    repo: &IndexedRepository,
    snapshot: &Snapshot,
    path: Option<&str>,
) -> Result<Vec<(String, PlannedEntry)>> {
    let entries = restore::list(repo, snapshot.tree, path).await?;
    Ok(entries
        .into_iter()
        .map(|entry| (restore::display_path(&entry.path), entry))
        // The listing of a path also yields the folders leading to it: they are not below it.
        .filter(|(shown, _)| path.is_none_or(|wanted| selection::is_at_or_below(shown, wanted)))
        .collect())
}

/// Lists the entries of a snapshot, as `ls -l` shows them.
pub async fn ls(
    repo: &IndexedRepository,
    host: &str,
    choice: &SnapshotChoice,
    path: Option<&str>,
) -> Result<()> {
    let (id, snapshot) = find(repo, host, choice).await?;
    let listed = entries(repo, &snapshot, path).await?;
    if listed.is_empty() {
        if let Some(path) = path {
            bail!("snapshot {} has no {path}", id.short());
        }
    }
    let mut out = std::io::stdout().lock();
    for (shown, entry) in listed {
        let meta = &entry.node.meta;
        let (kind, size, target) = match &entry.node.kind {
            NodeKind::File { size, .. } => ('-', *size, String::new()),
            NodeKind::Dir { .. } => ('d', 0, String::new()),
            NodeKind::Symlink { target } => {
                ('l', 0, format!(" -> {}", String::from_utf8_lossy(target)))
            }
            NodeKind::Fifo => ('p', 0, String::new()),
            NodeKind::CharDevice { .. } => ('c', 0, String::new()),
            NodeKind::BlockDevice { .. } => ('b', 0, String::new()),
        };
        let mtime = chrono::DateTime::from_timestamp(meta.mtime.secs, meta.mtime.nanos)
            .map(|t| t.format("%Y-%m-%d %H:%M").to_string())
            .unwrap_or_default();
        writeln!(
            out,
            "{kind}{:04o} {:>6} {:>6} {size:>12} {mtime}  {shown}{target}",
            meta.mode, meta.uid, meta.gid
        )?;
    }
    Ok(())
}

/// Writes the content of the file `path` of a snapshot to `out`, byte for byte; returns its size.
pub async fn cat(
    repo: &IndexedRepository,
    host: &str,
    choice: &SnapshotChoice,
    path: &str,
    out: &mut dyn Write,
) -> Result<u64> {
    let (id, snapshot) = find(repo, host, choice).await?;
    let wanted = format!("/{}", path.trim_start_matches('/'));
    let listed = entries(repo, &snapshot, Some(&wanted)).await?;
    let Some((_, entry)) = listed.into_iter().find(|(shown, _)| *shown == wanted) else {
        bail!("snapshot {} has no {wanted}", id.short());
    };
    let content = match entry.node.kind {
        NodeKind::File { content, .. } => content,
        NodeKind::Dir { .. } => {
            bail!("{wanted} is a directory: list it with `ls`, or fetch it with `download`")
        }
        NodeKind::Symlink { target } => bail!(
            "{wanted} is a symbolic link to {}",
            String::from_utf8_lossy(&target)
        ),
        _ => bail!("{wanted} is not a regular file"),
    };
    let context = format!("content of {wanted}");
    let mut blobs = std::pin::pin!(futures::stream::iter(content)
        .map(|blob| {
            let context = &context;
            async move { repo.read_blob(&blob, context).await }
        })
        .buffered(CAT_READ_AHEAD));
    let mut written = 0u64;
    while let Some(bytes) = blobs.try_next().await? {
        out.write_all(&bytes).context("cannot write the file out")?;
        written += bytes.len() as u64;
    }
    out.flush().context("cannot write the file out")?;
    Ok(written)
}

/// Restores `path` of a snapshot (a file or a folder, with everything below it) into `to`, at
/// its path in the snapshot (`/data/app/conf` lands in `TO/data/app/conf`), with its modes and
/// times (and owners, as root).
pub async fn download(
    repo: &IndexedRepository,
    host: &str,
    choice: &SnapshotChoice,
    path: &str,
    to: &Path,
) -> Result<restore::RestoreReport> {
    let (id, snapshot) = find(repo, host, choice).await?;
    let wanted = format!("/{}", path.trim_start_matches('/'));
    if wanted != "/" && entries(repo, &snapshot, Some(&wanted)).await?.is_empty() {
        bail!("snapshot {} has no {wanted}", id.short());
    }
    let mut options = RestoreOptions::new(to);
    if wanted != "/" {
        options.filter = neverwiped::filter::PathFilter::including(vec![
            neverwiped::filter::PatternList::paths(std::slice::from_ref(&wanted)),
        ]);
    }
    let report = restore::restore(repo, snapshot.tree, &options)
        .await
        .with_context(|| format!("cannot download {wanted} of snapshot {}", id.short()))?;
    for warning in &report.warnings {
        tracing::warn!("{warning}");
    }
    Ok(report)
}
