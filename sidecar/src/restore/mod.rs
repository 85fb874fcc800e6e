//! Restore, a batch of entries at a time: plan the batch, settle what the target already holds
//! at each entry's place (the `--overwrite` policy, `--delete`: see `existing`), make its
//! directories, symlinks and special files, fetch each pack's needed blobs once (in parallel) and
//! write them at their offsets (each file created by its first write, given its metadata by its
//! last), create what no write did (empty files, hard links); at the end set the directories'
//! metadata (deepest first). Every entry is created and changed relative to its directory's
//! descriptor (see `dirs`). A restore that stops part way removes the files it had not finished
//! and still sets the metadata of every directory it made.
//!
//! Memory stays flat whatever the size of the snapshot: a batch holds a bounded number of
//! entries, fetched pack ranges live in a fixed set of reused buffers (the memory budget), and a
//! fixed pool of threads decodes them (see `fetch`). What outlives a batch is one path and
//! metadata per directory, and one path per hard-linked inode.

mod damage;
mod dirs;
mod existing;
mod fetch;
mod files;
mod metadata;
pub mod plan;
mod prepare;
mod privileges;
pub mod verify;

use crate::error::{Error, Result};
use crate::filter::{PathFilter, PatternList};
use crate::format::tree::{Metadata, NodeKind};
use crate::progress::Progress;
use crate::repository::IndexedRepository;
use dirs::DirOpener;
use fetch::FetchSettings;
use plan::{BatchLimits, PlanWalker, RestorePlan};
use std::path::PathBuf;
use std::sync::Arc;

pub use damage::{ByteRange, DamagedFile};
pub use existing::{ExistingPolicy, Overwrite};
pub use plan::plan_restore;
pub use privileges::Privileges;
pub use verify::{verify, Mismatch, VerifyReport, VerifySettings};

/// The default of [`RestoreOptions::memory_budget_bytes`].
pub const DEFAULT_MEMORY_BUDGET_BYTES: u64 = 32 * 1024 * 1024;

pub struct RestoreOptions {
    pub target: PathBuf,
    /// Which snapshot paths to restore, by restic's include or exclude rules (all by default).
    pub filter: PathFilter,
    /// Restore numeric owners (needs root); default: when running as root.
    pub restore_owner: bool,
    /// Device files, FIFOs and set-user-ID, set-group-ID and sticky bits; default: restored.
    pub privileges: Privileges,
    /// Pack ranges fetched at once (at most as many as the memory budget holds).
    pub concurrency: usize,
    /// Bytes of fetched pack data held at once, in ranges of up to 8 MiB (a quarter of the
    /// budget, at least 1 MiB); at least two ranges are always allowed. The restore's memory is
    /// about this plus one decoded blob (up to the chunker's maximum) per decode thread.
    pub memory_budget_bytes: u64,
    /// Threads that decrypt, decompress, check and write blobs; 0 means one per core.
    pub decoders: usize,
    /// Entries planned and restored at once (the restore's memory grows with it, not with the
    /// snapshot); 0 means the default, 8192 (fewer where the limit of open files is low).
    pub batch_entries: usize,
    /// What to do with what already stands in the target (`--overwrite`, `--delete`).
    pub existing: ExistingPolicy,
    pub progress: Arc<Progress>,
}

impl RestoreOptions {
    pub fn new(target: impl Into<PathBuf>) -> RestoreOptions {
        RestoreOptions {
            target: target.into(),
            filter: PathFilter::Everything,
            restore_owner: nix::unistd::geteuid().is_root(),
            privileges: Privileges::Keep,
            concurrency: 4,
            memory_budget_bytes: DEFAULT_MEMORY_BUDGET_BYTES,
            decoders: 0,
            batch_entries: 0,
            existing: ExistingPolicy::default(),
            progress: Arc::new(Progress::default()),
        }
    }
}

#[derive(Debug, Default)]
pub struct RestoreReport {
    pub files: u64,
    pub bytes_written: u64,
    pub bytes_fetched: u64,
    /// Files that already held the snapshot's content: left in place, given its metadata.
    pub files_kept: u64,
    /// Entries left as they stood because the overwrite policy keeps them.
    pub entries_left: u64,
    /// Entries removed because the snapshot does not hold them (`--delete`).
    pub entries_deleted: u64,
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
    // A shared lock keeps prune from deleting packs while they are read; a repository that cannot
    // be written (a read-only copy, read-only credentials) is restored from without one.
    let lock = crate::locking::acquire_for_reading(repo, "restore").await?;
    let result = restore_unlocked(repo, root, options).await;
    crate::locking::release_read_lock(lock, "restore").await;
    result
}

async fn restore_unlocked(
    repo: &IndexedRepository,
    root: crate::ids::BlobId,
    options: &RestoreOptions,
) -> Result<RestoreReport> {
    let mut walker = PlanWalker::new(repo, root, &options.filter)
        .await?
        .with_privileges(options.privileges);
    if options.existing.delete {
        walker.record_complete_dirs();
    }
    let opener = DirOpener::new(&options.target)?;
    let limits = batch_limits(options.batch_entries);
    let mut restored = Restored {
        opener: Some(opener),
        ..Restored::default()
    };
    // The next batch is planned (its trees read) while this one is restored.
    let mut stopped = None;
    // A walk that fails before anything is written is a failed restore, not a partial one.
    let mut next: Result<_> = Ok(walker.next_batch(repo, limits).await?);
    loop {
        let batch = match next {
            Ok(Some(batch)) => batch,
            Ok(None) => break,
            Err(error) => {
                stopped = Some(error);
                break;
            }
        };
        let (done, upcoming) = tokio::join!(
            restore_batch(repo, batch, &mut restored, options),
            walker.next_batch(repo, limits)
        );
        if let Err(error) = done {
            stopped = Some(error);
            break;
        }
        next = upcoming;
    }
    finish_restore(restored, stopped, options).await
}

/// Ends a restore, whether it went through or stopped: sets the metadata of every directory
/// made (deepest first: writing into a directory changes its modification time, and a read-only
/// one could not be written into), then says what is missing.
async fn finish_restore(
    restored: Restored,
    stopped: Option<Error>,
    options: &RestoreOptions,
) -> Result<RestoreReport> {
    let Restored {
        opener,
        dirs,
        mut report,
        damaged,
        removed,
    } = restored;
    let privileged = options.restore_owner;
    let mut opener = match opener {
        Some(opener) => opener,
        // Lost with the blocking work that failed.
        None => DirOpener::new(&options.target)?,
    };
    let partial = stopped.is_some();
    let lost =
        blocking(move || files::set_dirs_metadata(&dirs, &mut opener, privileged, partial)).await;
    let stopped = match (stopped, lost) {
        (Some(cause), lost) => {
            if let Err(error) = lost {
                tracing::warn!("{error}");
            }
            Some(cause)
        }
        (None, Ok(lost)) => {
            report.warnings.extend(lost);
            None
        }
        (None, Err(error)) => Some(error),
    };
    if let Some(cause) = stopped {
        for warning in &report.warnings {
            tracing::warn!("{warning}");
        }
        return Err(Error::RestoreStopped {
            cause: Box::new(cause),
            removed,
        });
    }
    if !damaged.is_empty() {
        // Every entry is restored and has its metadata: the error names what is missing.
        for warning in &report.warnings {
            tracing::warn!("{}", crate::text::escaped(warning));
        }
        return Err(Error::RestoreIncomplete { damaged });
    }
    Ok(report)
}

/// What the batches restored so far leave for the next ones and the end.
#[derive(Default)]
struct Restored {
    /// The target's directories by descriptor (moved into each batch's blocking work; lost when
    /// that fails).
    opener: Option<DirOpener>,
    /// Every directory restored, with its metadata, parents first.
    dirs: Vec<(Vec<u8>, Metadata)>,
    report: RestoreReport,
    damaged: Vec<DamagedFile>,
    /// Files removed because the restore stopped before they were whole.
    removed: Vec<String>,
}

/// Restores one batch of the plan: makes its entries, fetches and writes its content, finishes
/// its files and hard links. When that fails, the files it left unfinished are removed.
async fn restore_batch(
    repo: &IndexedRepository,
    plan: RestorePlan,
    restored: &mut Restored,
    options: &RestoreOptions,
) -> Result<()> {
    // Recorded first: whatever happens next, the directories made get their metadata.
    restored.dirs.extend(
        plan.entries
            .iter()
            .filter(|entry| matches!(entry.node.kind, NodeKind::Dir { .. }))
            .map(|entry| (entry.path.clone(), entry.node.meta.clone())),
    );
    let planned_files = plan.files;
    // Not written: later names of hard-linked files, and (below) what the target already holds.
    let unwritten_bytes = plan.linked_bytes() + plan.total_bytes;
    let mut opener = restored.opener.take().expect("kept between batches");
    let settings = prepare::PrepareSettings {
        privileged: options.restore_owner,
        policy: options.existing,
        keys: (options.existing.overwrite == Overwrite::IfChanged).then(|| repo.keys().clone()),
    };
    let (prepared, opener) = blocking(move || {
        let prepared = prepare::prepare_batch(plan, &mut opener, &settings)?;
        Ok((prepared, opener))
    })
    .await?;
    let files = Arc::new(prepared.files);
    let report = &mut restored.report;
    report.warnings.extend(prepared.warnings);
    report
        .warnings
        .extend(files.plan().privileges_dropped.iter().cloned());
    report.files_kept += prepared.kept;
    report.entries_left += prepared.left;
    report.entries_deleted += prepared.deleted;
    let to_write = files.plan().total_bytes;
    options.progress.add_planned(
        to_write,
        planned_files,
        unwritten_bytes.saturating_sub(to_write),
    );
    let settings = FetchSettings {
        memory_budget_bytes: options.memory_budget_bytes,
        concurrency: options.concurrency,
        decoders: options.decoders,
    };
    let plan = files.plan().clone();
    let progress = options.progress.clone();
    let written = match fetch::fetch_content(repo, &plan, files.clone(), progress, settings).await {
        Ok(fetched) => {
            let mut opener = opener;
            let finished = blocking({
                let files = files.clone();
                move || Ok((files::finish_batch(&files, &mut opener), opener))
            })
            .await?;
            let (warnings, opener) = finished;
            restored.opener = Some(opener);
            warnings.map(|warnings| (fetched, warnings))
        }
        Err(error) => Err(error),
    };
    let (fetched, warnings) = match written {
        Ok(written) => written,
        Err(error) => {
            let unfinished = files.clone();
            restored.removed.extend(
                blocking(move || Ok(unfinished.remove_unfinished()))
                    .await
                    .unwrap_or_default(),
            );
            return Err(error);
        }
    };
    let report = &mut restored.report;
    report.warnings.extend(warnings);
    report.files += planned_files;
    // Files no write finished (empty, kept, hard links) count once their batch is done.
    options
        .progress
        .files
        .store(report.files, std::sync::atomic::Ordering::Relaxed);
    report.bytes_written += fetched.bytes_written;
    report.bytes_fetched += fetched.bytes_fetched;
    restored
        .damaged
        .extend(damage::damaged_files(&plan, &fetched.damaged));
    Ok(())
}

/// How big a batch may be: its entries' directories and files may all be open at once, within
/// the process's limit of open files (raised to its maximum).
fn batch_limits(asked: usize) -> BatchLimits {
    const MOST_ENTRIES: usize = 8192;
    const MOST_DIRS: usize = 512;
    let open_files = raise_open_file_limit();
    let room = open_files.saturating_sub(MOST_DIRS + 128);
    let entries = match asked {
        0 => room.clamp(64, MOST_ENTRIES),
        asked => asked,
    };
    BatchLimits {
        entries,
        dirs: MOST_DIRS.min(entries),
    }
}

/// Raises the soft limit of open files to the hard one; returns the limit now in force.
fn raise_open_file_limit() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain system calls on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1024;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
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
    prefix: Option<&[u8]>,
) -> Result<Vec<plan::PlannedEntry>> {
    let paths: Vec<&[u8]> = prefix.into_iter().collect();
    let filter = PathFilter::including(vec![PatternList::paths(&paths)]);
    let plan = plan_restore(repo, root, &filter).await?;
    Ok(plan.entries)
}
