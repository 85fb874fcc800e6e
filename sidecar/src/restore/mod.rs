//! Restore: plan the whole restore, make the directories, fetch each pack's needed blobs once (in
//! parallel) and write them at their offsets (each file created by its first write), create what
//! no write did (empty files, hard links), then set metadata (directories last, deepest first).
//!
//! Memory stays flat whatever the size of the snapshot: fetched pack ranges live in a fixed set
//! of reused buffers (the memory budget), and a fixed pool of threads decodes them (see `fetch`).

mod damage;
mod fetch;
mod files;
pub mod plan;

use crate::error::{Error, Result};
use crate::progress::Progress;
use crate::repository::IndexedRepository;
use fetch::FetchSettings;
use files::FileCreation;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;

pub use damage::{ByteRange, DamagedFile};
pub use plan::plan_restore;

/// The default of [`RestoreOptions::memory_budget_bytes`].
pub const DEFAULT_MEMORY_BUDGET_BYTES: u64 = 32 * 1024 * 1024;

pub struct RestoreOptions {
    pub target: PathBuf,
    /// Snapshot paths to restore (all when empty).
    pub includes: Vec<String>,
    /// Restore numeric owners (needs root); default: when running as root.
    pub restore_owner: bool,
    /// Pack ranges fetched at once (at most as many as the memory budget holds).
    pub concurrency: usize,
    /// Bytes of fetched pack data held at once, in ranges of up to 8 MiB (a quarter of the
    /// budget, at least 1 MiB); at least two ranges are always allowed. The restore's memory is
    /// about this plus one decoded blob (up to the chunker's maximum) per decode thread.
    pub memory_budget_bytes: u64,
    /// Threads that decrypt, decompress, check and write blobs; 0 means one per core.
    pub decoders: usize,
    pub progress: Arc<Progress>,
}

impl RestoreOptions {
    pub fn new(target: impl Into<PathBuf>) -> RestoreOptions {
        RestoreOptions {
            target: target.into(),
            includes: Vec::new(),
            restore_owner: nix::unistd::geteuid().is_root(),
            concurrency: 4,
            memory_budget_bytes: DEFAULT_MEMORY_BUDGET_BYTES,
            decoders: 0,
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

/// Restores the tree `root` of a snapshot below `options.target`. When some content is damaged
/// in the repository, everything else is still restored and the error
/// [`Error::RestoreIncomplete`] names each damaged file and byte range.
pub async fn restore(
    repo: &IndexedRepository,
    root: crate::ids::BlobId,
    options: &RestoreOptions,
) -> Result<RestoreReport> {
    crate::archive::return_large_buffers_to_the_system();
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
    // Shared with the blocking tasks, not copied: the plan grows with the number of files.
    let plan = Arc::new(plan_restore(repo, root, &options.includes).await?);
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
    let mut warnings = blocking({
        let (plan, paths) = (plan.clone(), paths.clone());
        let restore_owner = options.restore_owner;
        move || files::prepare_entries(&plan.entries, &paths, restore_owner)
    })
    .await?;
    let creation = Arc::new(FileCreation::new(&plan.entries));
    let settings = FetchSettings {
        memory_budget_bytes: options.memory_budget_bytes,
        concurrency: options.concurrency,
        decoders: options.decoders,
    };
    let fetched = fetch::fetch_content(
        repo,
        &plan,
        paths.clone(),
        creation.clone(),
        options.progress.clone(),
        settings,
    )
    .await?;
    blocking({
        let (plan, paths) = (plan.clone(), paths.clone());
        move || files::finish_entries(&plan.entries, &plan.hard_links, &paths, &creation)
    })
    .await?;
    let restore_owner = options.restore_owner;
    let files = plan.files;
    let finished = blocking({
        let plan = plan.clone();
        move || files::apply_metadata(&plan.entries, &plan.hard_links, &paths, restore_owner)
    })
    .await?;
    warnings.extend(finished);
    let damaged = damage::damaged_files(&plan, &fetched.damaged);
    if !damaged.is_empty() {
        // Every entry is restored and has its metadata: the error names what is missing.
        for warning in &warnings {
            tracing::warn!("{warning}");
        }
        return Err(Error::RestoreIncomplete { damaged });
    }
    Ok(RestoreReport {
        files,
        bytes_written: fetched.bytes_written,
        bytes_fetched: fetched.bytes_fetched,
        warnings,
    })
}

/// Runs blocking work off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Error::Interrupted(e.to_string()))?
}

/// Threads for the CPU and file-system work of a restore: `decoders`, or one per core when 0.
fn decoder_threads(decoders: usize) -> usize {
    match decoders {
        0 => std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2),
        n => n,
    }
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
