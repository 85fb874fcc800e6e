//! `dump SNAPSHOT PATH`: a file's bytes, as stored, or a folder as a tar or zip archive (as restic's),
//! to standard output or to `--target FILE`.

use super::Outcome;
use anyhow::{bail, Context, Result};
use clap::Args;
use neverwiped::format::tree::NodeKind;
use neverwiped::inspect::{archive, walk, zip};
use neverwiped::repository::IndexedRepository;
use neverwiped::selection::snapshot_spec;
use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct DumpArgs {
    /// Snapshot id prefix, or "latest".
    pub snapshot: String,
    /// The absolute path of a file in the snapshot (any bytes), or of a folder ("/": the whole
    /// snapshot), written as an archive of what it holds.
    pub path: OsString,
    /// Write to this file (created, or truncated) instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub target: Option<PathBuf>,
    /// The archive a folder is written as, tar or zip, as restic writes each: entries named by
    /// their path from the snapshot's root, without the leading /. A file is written as its
    /// bytes.
    #[arg(long, value_enum, default_value = "tar")]
    pub archive: ArchiveFormat,
}

/// The archive a folder is written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ArchiveFormat {
    /// POSIX tar (ustar, with PAX headers where a value does not fit).
    Tar,
    /// Zip: files deflated, symbolic links stored with their target as content (as restic).
    Zip,
}

fn open_output(target: &Option<PathBuf>) -> Result<Box<dyn Write>> {
    Ok(match target {
        Some(target) => Box::new(
            std::fs::File::create(target)
                .with_context(|| format!("cannot create {}", target.display()))?,
        ),
        None => Box::new(std::io::stdout().lock()),
    })
}

/// Writes the file's content, blob by blob, authenticated as each is read; a folder as an
/// archive.
pub async fn dump(repo: &IndexedRepository, args: &DumpArgs) -> Result<Outcome> {
    let (_, snapshot) = repo.find_snapshot(&snapshot_spec(&args.snapshot)).await?;
    let path = walk::absolute_path(args.path.as_bytes())?;
    let shown = String::from_utf8_lossy(&path).into_owned();
    let node = match path.is_empty() {
        true => None,
        false => match walk::lookup(repo, &snapshot.tree, &path).await? {
            Some(node) => Some(node),
            None => bail!("{shown} is not in snapshot {}", args.snapshot),
        },
    };
    let (content, size) = match node.as_ref().map(|node| &node.kind) {
        Some(NodeKind::File { content, size }) => (content, *size),
        None | Some(NodeKind::Dir { .. }) => return dump_folder(repo, &snapshot.tree, &path, args).await,
        Some(_) => bail!("{shown} is neither a file nor a folder: dump writes a file's bytes or a folder's archive"),
    };
    let mut out = open_output(&args.target)?;
    let mut written = 0u64;
    for blob in content {
        let bytes = repo.read_blob(blob, &shown).await?;
        out.write_all(&bytes)
            .with_context(|| format!("cannot write {shown}"))?;
        written += bytes.len() as u64;
    }
    out.flush()
        .with_context(|| format!("cannot write {shown}"))?;
    if written != size {
        bail!("{shown}: its blobs hold {written} bytes, its entry says {size}: the snapshot is damaged");
    }
    Ok(Outcome {
        files: 1,
        bytes_read: written,
        ..Outcome::default()
    })
}

/// Writes what the folder `path` holds as an archive; refuses a terminal, as restic does.
async fn dump_folder(
    repo: &IndexedRepository,
    root: &neverwiped::ids::BlobId,
    path: &[u8],
    args: &DumpArgs,
) -> Result<Outcome> {
    if args.target.is_none() && std::io::stdout().is_terminal() {
        bail!("standard output is a terminal: redirect it, or give --target FILE, to receive the archive");
    }
    let mut out = open_output(&args.target)?;
    let count = match args.archive {
        ArchiveFormat::Tar => archive::write_tar(repo, root, path, &mut out).await?,
        ArchiveFormat::Zip => zip::write_zip(repo, root, path, &mut out).await?,
    };
    Ok(Outcome {
        files: count.entries,
        bytes_read: count.content_bytes,
        ..Outcome::default()
    })
}
