//! `snapshots`, `ls`, `cat` and `download`: the plan's snapshots and their files, read from the
//! gate by the engine in this process.

use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use anyhow::{bail, Context, Result};
use futures::{StreamExt, TryStreamExt};
use neverwiped::format::snapshot::Snapshot;
use neverwiped::format::tree::NodeKind;
use neverwiped::ids::SnapshotId;
use neverwiped::repository::{IndexedRepository, Repository, SnapshotFilter};
use neverwiped::restore::{self, plan::PlannedEntry, Privileges, RestoreOptions};
use neverwiped::views::SnapshotView;
use neverwiped::{selection, text};

/// Which snapshot a command means: `latest` (the plan's newest, or its newest taken before
/// `before`) or an id prefix of one of the plan's snapshots.
#[derive(Debug, Clone)]
pub struct SnapshotChoice {
    pub spec: String,
    pub before: Option<chrono::DateTime<chrono::Utc>>,
    /// The plan's last successful backup, which a plain `latest` should be (or be newer than).
    pub last_success: Option<crate::freshness::LastSuccess>,
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
    let (id, snapshot) = selection::find_snapshot(repo, &choice.spec, &filter).await?;
    let plain_latest = choice.spec == "latest" && choice.before.is_none();
    if let Some(last) = choice.last_success.as_ref().filter(|_| plain_latest) {
        let found = id.to_string();
        if let Some(warning) =
            crate::freshness::older_than_last_success(&found, &snapshot.time, last)
        {
            tracing::warn!("{warning}");
        }
    }
    Ok((id, snapshot))
}

/// Prints the snapshots of `host` (every origin's, with `None`), newest first: a table, or with
/// `json` an array; returns how many.
pub async fn snapshots(repo: &Repository, host: Option<&str>, json: bool) -> Result<usize> {
    let snapshots = match host {
        Some(host) => selection::snapshots_of_host(repo, host).await?,
        None => {
            let mut all = repo.snapshots().await?;
            all.reverse();
            all
        }
    };
    if json {
        let list: Vec<SnapshotView> = snapshots
            .iter()
            .map(|(id, snapshot)| SnapshotView::new(id, snapshot))
            .collect();
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(list.len());
    }
    let origin_column = host.is_none();
    let origin_header = if origin_column { "ORIGIN  " } else { "" };
    println!(
        "{:<8}  {origin_header}{:<20}  {:>9}  {:>10}  {:<20}  paths",
        "ID", "TIME (UTC)", "FILES", "SIZE", "TAGS"
    );
    for (id, snapshot) in &snapshots {
        let origin = if origin_column {
            // Whoever may write the repository writes the host name.
            format!("{}  ", text::escaped(&snapshot.hostname))
        } else {
            String::new()
        };
        println!("{}", snapshot_row(id, snapshot, &origin));
    }
    match host {
        Some(host) => println!("{} snapshot(s) of {host}", snapshots.len()),
        None => println!("{} snapshot(s)", snapshots.len()),
    }
    Ok(snapshots.len())
}

/// One line of the snapshot table, the origin (if shown) after the id.
fn snapshot_row(id: &SnapshotId, snapshot: &Snapshot, origin: &str) -> String {
    let entry = selection::snapshot_entry(id, snapshot);
    let paths: Vec<String> = snapshot
        .paths
        .iter()
        .map(|p| text::quoted(&p.0).into_owned())
        .collect();
    let tags = if entry.tags.is_empty() {
        "-".to_owned()
    } else {
        // Whoever may write the repository writes the tags.
        text::escaped(&entry.tags.join(",")).into_owned()
    };
    format!(
        "{:<8}  {origin}{:<20}  {:>9}  {:>10}  {:<20}  {}",
        entry.id,
        entry.time,
        entry.files,
        crate::table::bytes(entry.size_bytes),
        tags,
        paths.join(" ")
    )
}

/// The error for an origin (`NAMESPACE/PLAN`) the repository holds no snapshot of, naming the
/// origins it does hold, as the sidecar's `latest` says it.
pub async fn no_snapshot_of(repo: &Repository, origin: &str) -> Result<anyhow::Error> {
    let held = neverwiped::repository::hosts_held(&repo.snapshots().await?);
    let wanted = format!("any snapshot of host {origin}");
    Ok(neverwiped::Error::NoSnapshotOfHost { wanted, held }.into())
}

/// A snapshot path as given (`data/app`, `/data/app/`) as the snapshot names it: `/data/app`.
fn snapshot_path(path: &OsStr) -> Vec<u8> {
    let mut trimmed = path.as_bytes();
    while let Some(rest) = trimmed.strip_prefix(b"/") {
        trimmed = rest;
    }
    [b"/", trimmed].concat()
}

/// The entries of the snapshot at `path` and below (all when `None`), each with its path from
/// `/`.
async fn entries(
    repo: &IndexedRepository,
    snapshot: &Snapshot,
    path: Option<&[u8]>,
) -> Result<Vec<(Vec<u8>, PlannedEntry)>> {
    let entries = restore::list(repo, snapshot.tree, path).await?;
    Ok(entries
        .into_iter()
        .map(|entry| ([b"/", entry.path.as_slice()].concat(), entry))
        // The listing of a path also yields the folders leading to it: they are not below it.
        .filter(|(full, _)| path.is_none_or(|wanted| selection::is_at_or_below(full, wanted)))
        .collect())
}

/// Lists the entries of a snapshot, as `ls -l` shows them.
pub async fn ls(
    repo: &IndexedRepository,
    host: &str,
    choice: &SnapshotChoice,
    path: Option<&OsStr>,
) -> Result<()> {
    let (id, snapshot) = find(repo, host, choice).await?;
    let wanted = path.map(snapshot_path);
    let listed = entries(repo, &snapshot, wanted.as_deref()).await?;
    if let (true, Some(wanted)) = (listed.is_empty(), &wanted) {
        bail!("snapshot {} has no {}", id.short(), text::quoted(wanted));
    }
    let mut out = std::io::stdout().lock();
    for (full, entry) in listed {
        // The names are the workload's: quoted, they cannot drive the terminal or forge a line.
        let shown = text::quoted(&full);
        let meta = &entry.node.meta;
        let (kind, size, target) = match &entry.node.kind {
            NodeKind::File { size, .. } => ('-', *size, String::new()),
            NodeKind::Dir { .. } => ('d', 0, String::new()),
            NodeKind::Symlink { target } => ('l', 0, format!(" -> {}", text::quoted(target))),
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
    path: &OsStr,
    out: &mut dyn Write,
) -> Result<u64> {
    let (id, snapshot) = find(repo, host, choice).await?;
    let wanted_bytes = snapshot_path(path);
    let listed = entries(repo, &snapshot, Some(&wanted_bytes)).await?;
    let wanted = text::quoted(&wanted_bytes).into_owned();
    let Some((_, entry)) = listed.into_iter().find(|(full, _)| *full == wanted_bytes) else {
        bail!("snapshot {} has no {wanted}", id.short());
    };
    let content = match entry.node.kind {
        NodeKind::File { content, .. } => content,
        NodeKind::Dir { .. } => {
            bail!("{wanted} is a directory: list it with `ls`, or fetch it with `download`")
        }
        NodeKind::Symlink { target } => {
            bail!("{wanted} is a symbolic link to {}", text::quoted(&target))
        }
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
/// its path in the snapshot (`/data/app/conf` lands in `TO/data/app/conf`), with its contents,
/// plain modes and times; with `keep_privileges`, also owners (as root), device files, FIFOs and
/// special mode bits. What was left out is in the report's warnings.
pub async fn download(
    repo: &IndexedRepository,
    host: &str,
    choice: &SnapshotChoice,
    path: &OsStr,
    to: &Path,
    keep_privileges: bool,
) -> Result<restore::RestoreReport> {
    let (id, snapshot) = find(repo, host, choice).await?;
    let wanted_bytes = snapshot_path(path);
    let wanted = text::quoted(&wanted_bytes).into_owned();
    let whole = wanted_bytes == b"/";
    if !whole
        && entries(repo, &snapshot, Some(&wanted_bytes))
            .await?
            .is_empty()
    {
        bail!("snapshot {} has no {wanted}", id.short());
    }
    let mut options = RestoreOptions::new(to);
    if !keep_privileges {
        // A workload's files must not give it rights on the machine of whoever downloads them.
        options.restore_owner = false;
        options.privileges = Privileges::Drop;
    }
    if !whole {
        options.filter = neverwiped::filter::PathFilter::including(vec![
            neverwiped::filter::PatternList::paths(&[wanted_bytes]),
        ]);
    }
    let report = restore::restore(repo, snapshot.tree, &options)
        .await
        .with_context(|| format!("cannot download {wanted} of snapshot {}", id.short()))?;
    Ok(report)
}
