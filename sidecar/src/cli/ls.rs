//! `ls`: the entries of a snapshot, as restic lists them — everything, or each folder given and
//! its direct entries (all below it with `--recursive`); `-l` in restic's long layout.

use super::Outcome;
use anyhow::{bail, Result};
use clap::Args;
use neverwiped::format::tree::{Node, NodeKind};
use neverwiped::inspect::walk::{self, Descend};
use neverwiped::repository::IndexedRepository;
use neverwiped::selection::{is_at_or_below, snapshot_spec};
use neverwiped::text;
use neverwiped::views::EntryView;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

#[derive(Debug, Args)]
pub struct LsArgs {
    /// Snapshot id prefix, or "latest".
    pub snapshot: String,
    /// Absolute folders of the snapshot (any bytes: names need not be UTF-8): each is listed with
    /// its direct entries only, as restic does. None: every entry of the snapshot.
    #[arg(value_name = "PATH")]
    pub paths: Vec<OsString>,
    /// List everything below the folders given, not only their direct entries.
    #[arg(long)]
    pub recursive: bool,
    /// restic's long layout: mode, uid, gid, size, modification time (UTC), path, and a
    /// symlink's target after `->`.
    #[arg(long, short = 'l')]
    pub long: bool,
}

/// Which entries of the snapshot `ls` prints, by restic's rules.
struct Wanted {
    folders: Vec<Vec<u8>>,
    recursive: bool,
    /// Whether each of `folders` was met in the snapshot.
    met: Vec<bool>,
}

impl Wanted {
    /// Whether to print the entry at `path`, and whether the walk goes on below it.
    fn judge(&mut self, path: &[u8]) -> (bool, Descend) {
        if self.folders.is_empty() {
            return (true, Descend::Into);
        }
        let mut shown = false;
        let mut descend = Descend::Past;
        for (folder, met) in self.folders.iter().zip(&mut self.met) {
            *met |= folder.as_slice() == path;
            if is_at_or_below(path, folder) {
                shown = true;
                if self.recursive || folder.as_slice() == path {
                    descend = Descend::Into;
                }
            } else if is_at_or_below(folder, path) {
                // On the way to a folder asked for.
                descend = Descend::Into;
            }
        }
        (shown, descend)
    }
}

/// Lists the entries of a snapshot (see the module's doc): text, or one JSON object per line.
pub async fn ls(repo: &IndexedRepository, args: &LsArgs, json: bool) -> Result<Outcome> {
    let (_, snapshot) = repo.find_snapshot(&snapshot_spec(&args.snapshot)).await?;
    let mut folders = Vec::new();
    for path in &args.paths {
        folders.push(walk::absolute_path(path.as_bytes())?);
    }
    let met = vec![false; folders.len()];
    let mut wanted = Wanted {
        folders,
        recursive: args.recursive,
        met,
    };
    let mut printed = Vec::new();
    walk::walk(repo, &snapshot.tree, |path, node| -> Result<Descend> {
        let (shown, descend) = wanted.judge(path);
        if shown {
            printed.extend(line(path, node, args.long, json)?);
            printed.push(b'\n');
            // Printed as it goes: a large snapshot is not held in memory.
            if printed.len() > 64 * 1024 {
                flush(&mut printed)?;
            }
        }
        Ok(descend)
    })
    .await?;
    flush(&mut printed)?;
    for (folder, met) in wanted.folders.iter().zip(&wanted.met) {
        if !met && !folder.is_empty() {
            // Escaped with the rest of the message where it is shown.
            bail!(
                "{} is not in snapshot {}",
                String::from_utf8_lossy(folder),
                args.snapshot
            );
        }
    }
    Ok(Outcome::default())
}

/// Writes what was gathered to standard output.
fn flush(printed: &mut Vec<u8>) -> Result<()> {
    use anyhow::Context;
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(printed)
        .and_then(|()| stdout.flush())
        .context("cannot write the listing to standard output")?;
    printed.clear();
    Ok(())
}

/// An RFC 3339 time as `YYYY-MM-DD HH:MM:SS` in UTC; as given when it cannot be read.
pub(super) fn utc_time(time: &str) -> String {
    chrono::DateTime::parse_from_rfc3339(time)
        .map(|t| {
            t.with_timezone(&chrono::Utc)
                .format("%Y-%m-%d %H:%M:%S")
                .to_string()
        })
        .unwrap_or_else(|_| time.to_owned())
}

/// One printed line of an entry (without its newline): `-l`'s layout when `long`, JSON when
/// `json`.
pub(super) fn line(path: &[u8], node: &Node, long: bool, json: bool) -> Result<Vec<u8>> {
    if json {
        return Ok(serde_json::to_vec(&EntryView::new(&path[1..], node))?);
    }
    let (kind, size) = match &node.kind {
        NodeKind::File { size, .. } => ('-', *size),
        NodeKind::Dir { .. } => ('d', 0),
        NodeKind::Symlink { .. } => ('l', 0),
        NodeKind::Fifo => ('p', 0),
        NodeKind::CharDevice { .. } => ('c', 0),
        NodeKind::BlockDevice { .. } => ('b', 0),
    };
    // Names are the workload's: quoted, they cannot drive the terminal or forge a line.
    let shown = text::quoted(path);
    let target = match &node.kind {
        NodeKind::Symlink { target } => format!(" -> {}", text::quoted(target)),
        _ => String::new(),
    };
    let meta = &node.meta;
    let printed = if long {
        let time = chrono::DateTime::from_timestamp(meta.mtime.secs, 0)
            .unwrap_or_default()
            .format("%Y-%m-%d %H:%M:%S");
        format!(
            "{} {:5} {:5} {size:6} {time} {shown}{target}",
            text::permissions(kind, meta.mode),
            meta.uid,
            meta.gid
        )
    } else {
        format!(
            "{kind}{:04o} {:>6} {:>6} {size:>12}  {shown}{target}",
            meta.mode, meta.uid, meta.gid
        )
    };
    Ok(printed.into_bytes())
}
