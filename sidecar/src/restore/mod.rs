//! Restore: plan the whole restore, create the entries, fetch each pack's needed blobs once (in
//! parallel), write them at their offsets, then set metadata (directories last, deepest first).

mod files;
pub mod plan;

use crate::backend::ObjectKind;
use crate::error::{Error, Result};
use crate::progress::Progress;
use crate::repository::{open_blob, IndexedRepository};
use futures::StreamExt;
use plan::{PlannedBlob, RestorePlan};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;

pub use plan::plan_restore;

/// Fetches larger than this are split; blobs closer than `MERGE_GAP_BYTES` are read together.
const MAX_FETCH_BYTES: u64 = 32 * 1024 * 1024;
const MERGE_GAP_BYTES: u64 = 1024 * 1024;

pub struct RestoreOptions {
    pub target: PathBuf,
    /// Snapshot paths to restore (all when empty).
    pub includes: Vec<String>,
    /// Restore numeric owners (needs root); default: when running as root.
    pub restore_owner: bool,
    /// Packs fetched at once.
    pub concurrency: usize,
    pub progress: Arc<Progress>,
}

impl RestoreOptions {
    pub fn new(target: impl Into<PathBuf>) -> RestoreOptions {
        RestoreOptions {
            target: target.into(),
            includes: Vec::new(),
            restore_owner: nix::unistd::geteuid().is_root(),
            concurrency: 4,
            progress: Arc::new(Progress::default()),
        }
    }
}

#[derive(Debug, Default)]
pub struct RestoreReport {
    pub files: u64,
    pub bytes_written: u64,
    pub bytes_fetched: u64,
    pub warnings: Vec<String>,
}

/// Restores the tree `root` of a snapshot below `options.target`.
pub async fn restore(
    repo: &IndexedRepository,
    root: crate::ids::BlobId,
    options: &RestoreOptions,
) -> Result<RestoreReport> {
    // A shared lock keeps prune from deleting packs while they are read. Credentials that may
    // only read cannot write one: restore anyway, as nothing is changed.
    let lock = match crate::locking::acquire(repo, false, "restore").await {
        Ok(lock) => Some(lock),
        Err(Error::Backend(crate::backend::BackendError::Forbidden { .. })) => {
            tracing::warn!(
                "the repository cannot be locked with these credentials; restoring without a lock"
            );
            None
        }
        Err(error) => return Err(error),
    };
    let result = restore_unlocked(repo, root, options).await;
    if let Some(lock) = lock {
        if let Err(error) = lock.release().await {
            tracing::warn!(%error, "could not remove the restore's lock");
        }
    }
    result
}

async fn restore_unlocked(
    repo: &IndexedRepository,
    root: crate::ids::BlobId,
    options: &RestoreOptions,
) -> Result<RestoreReport> {
    let plan = plan_restore(repo, root, &options.includes).await?;
    options
        .progress
        .bytes_total
        .store(plan.total_bytes, std::sync::atomic::Ordering::Relaxed);
    std::fs::create_dir_all(&options.target)
        .map_err(|e| Error::io(format!("creating {}", options.target.display()), e))?;
    let paths: Arc<Vec<PathBuf>> = Arc::new(
        plan.entries
            .iter()
            .map(|entry| options.target.join(OsStr::from_bytes(&entry.path)))
            .collect(),
    );
    let mut warnings = Vec::new();
    let creation = {
        let (plan_entries, hard_links, paths) =
            (plan.entries.clone(), plan.hard_links.clone(), paths.clone());
        let restore_owner = options.restore_owner;
        tokio::task::spawn_blocking(move || {
            files::create_entries(&plan_entries, &hard_links, &paths, restore_owner)
        })
        .await
        .map_err(|e| Error::Interrupted(e.to_string()))??
    };
    warnings.extend(creation);
    let (bytes_written, bytes_fetched) = fetch_content(repo, &plan, paths.clone(), options).await?;
    let restore_owner = options.restore_owner;
    let finished = tokio::task::spawn_blocking(move || {
        files::apply_metadata(&plan.entries, &plan.hard_links, &paths, restore_owner)
    })
    .await
    .map_err(|e| Error::Interrupted(e.to_string()))??;
    warnings.extend(finished);
    Ok(RestoreReport {
        files: plan.files,
        bytes_written,
        bytes_fetched,
        warnings,
    })
}

/// A read of one contiguous range of a pack, covering several blobs.
struct Fetch {
    pack: crate::ids::PackId,
    start: u64,
    end: u64,
    blobs: Vec<PlannedBlob>,
}

fn group_fetches(plan: &RestorePlan) -> Vec<Fetch> {
    let mut fetches = Vec::new();
    for (pack, blobs) in &plan.packs {
        let mut current: Option<Fetch> = None;
        for blob in blobs {
            let start = blob.location.offset as u64;
            let end = start + blob.location.length as u64;
            if let Some(fetch) = current.as_mut() {
                if start <= fetch.end + MERGE_GAP_BYTES && end - fetch.start <= MAX_FETCH_BYTES {
                    fetch.end = fetch.end.max(end);
                    fetch.blobs.push(blob.clone());
                    continue;
                }
                fetches.push(current.take().expect("present"));
            }
            current = Some(Fetch {
                pack: *pack,
                start,
                end,
                blobs: vec![blob.clone()],
            });
        }
        fetches.extend(current);
    }
    fetches
}

async fn fetch_content(
    repo: &IndexedRepository,
    plan: &RestorePlan,
    paths: Arc<Vec<PathBuf>>,
    options: &RestoreOptions,
) -> Result<(u64, u64)> {
    let fetches = group_fetches(plan);
    let results = futures::stream::iter(fetches)
        .map(|fetch| {
            let (repo, paths, progress) = (repo.clone(), paths.clone(), options.progress.clone());
            async move {
                let bytes = repo
                    .backend()
                    .read_range(
                        ObjectKind::Data,
                        &fetch.pack.to_hex(),
                        fetch.start,
                        fetch.end - fetch.start,
                    )
                    .await?;
                progress.add_transferred(bytes.len() as u64);
                let fetched = bytes.len() as u64;
                let written = tokio::task::spawn_blocking(move || {
                    write_fetch(&repo, &fetch, &bytes, &paths, &progress)
                })
                .await
                .map_err(|e| Error::Interrupted(e.to_string()))??;
                Ok::<(u64, u64), Error>((written, fetched))
            }
        })
        .buffer_unordered(options.concurrency.max(1));
    futures::pin_mut!(results);
    let (mut written, mut fetched) = (0, 0);
    while let Some(result) = results.next().await {
        let (w, f) = result?;
        written += w;
        fetched += f;
    }
    Ok((written, fetched))
}

/// Opens every blob of a fetched range and writes it to each place it belongs.
fn write_fetch(
    repo: &IndexedRepository,
    fetch: &Fetch,
    bytes: &[u8],
    paths: &[PathBuf],
    progress: &Progress,
) -> Result<u64> {
    let mut written = 0;
    for blob in &fetch.blobs {
        let from = (blob.location.offset as u64 - fetch.start) as usize;
        let sealed = &bytes[from..from + blob.location.length as usize];
        let what = format!("blob {} in pack {}", blob.id, fetch.pack);
        let plaintext = open_blob(
            repo.keys(),
            blob.location.kind,
            &blob.id,
            sealed,
            blob.location.raw_length,
            &what,
        )?;
        for target in &blob.targets {
            files::write_at(&paths[target.entry], target.offset, &plaintext)?;
            written += plaintext.len() as u64;
            progress.add_processed(plaintext.len() as u64);
        }
    }
    Ok(written)
}

/// The snapshot path of each restored entry, for listings (`ls`).
pub fn display_path(path: &[u8]) -> String {
    format!("/{}", String::from_utf8_lossy(path))
}

/// Lists a snapshot's entries below `prefix` (all when empty).
pub async fn list(
    repo: &IndexedRepository,
    root: crate::ids::BlobId,
    prefix: Option<&str>,
) -> Result<Vec<plan::PlannedEntry>> {
    let includes: Vec<String> = prefix.map(|p| vec![p.to_owned()]).unwrap_or_default();
    let plan = plan_restore(repo, root, &includes).await?;
    Ok(plan.entries)
}
