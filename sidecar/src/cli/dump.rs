//! `dump SNAPSHOT PATH`: a file's bytes, as stored, to standard output or to `--target FILE`.

use super::Outcome;
use anyhow::{bail, Context, Result};
use clap::Args;
use neverwiped::format::tree::NodeKind;
use neverwiped::inspect::walk;
use neverwiped::repository::IndexedRepository;
use neverwiped::selection::snapshot_spec;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct DumpArgs {
    /// Snapshot id prefix, or "latest".
    pub snapshot: String,
    /// The absolute path of a file in the snapshot (any bytes).
    pub path: OsString,
    /// Write to this file (created, or truncated) instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub target: Option<PathBuf>,
}

/// Writes the file's content, blob by blob, authenticated as each is read.
pub async fn dump(repo: &IndexedRepository, args: &DumpArgs) -> Result<Outcome> {
    let (_, snapshot) = repo.find_snapshot(&snapshot_spec(&args.snapshot)).await?;
    let path = walk::absolute_path(args.path.as_bytes())?;
    let shown = String::from_utf8_lossy(&path).into_owned();
    let Some(node) = walk::lookup(repo, &snapshot.tree, &path).await? else {
        bail!("{shown} is not in snapshot {}", args.snapshot);
    };
    let NodeKind::File { content, size } = &node.kind else {
        bail!("{shown} is not a file: dump writes a file's bytes (folders as tar or zip are not offered yet)");
    };
    let mut out: Box<dyn Write> = match &args.target {
        Some(target) => Box::new(
            std::fs::File::create(target)
                .with_context(|| format!("cannot create {}", target.display()))?,
        ),
        None => Box::new(std::io::stdout().lock()),
    };
    let mut written = 0u64;
    for blob in content {
        let bytes = repo.read_blob(blob, &shown).await?;
        out.write_all(&bytes)
            .with_context(|| format!("cannot write {shown}"))?;
        written += bytes.len() as u64;
    }
    out.flush()
        .with_context(|| format!("cannot write {shown}"))?;
    if written != *size {
        bail!("{shown}: its blobs hold {written} bytes, its entry says {size}: the snapshot is damaged");
    }
    Ok(Outcome {
        files: 1,
        bytes_read: written,
        ..Outcome::default()
    })
}
