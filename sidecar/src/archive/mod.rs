//! Backup: walk → chunk → hash → dedup → compress → seal → pack → upload → index → snapshot.
//!
//! Threads: one walker reads and chunks (it alone decides what goes into which tree), a few
//! readers read small files for it, a pool of workers compresses and seals, one packer fills
//! packs, and async tasks upload them concurrently.
//! Channels between them are bounded, so memory stays flat whatever the size of the input.

pub(crate) mod pipeline;
pub mod skip;
pub mod source;
pub(crate) mod uploader;
mod walker;

pub use skip::{ScopedSkip, SkipRules, SourceDevices, TagFile};
pub use source::{CountedReader, Source, StreamSource};
pub use uploader::{Throttle, UploadStats};
pub use walker::WalkStats;

use crate::error::{Error, Result};
use crate::filter::PathFilter;
use crate::format::snapshot::{Snapshot, SnapshotPath, SnapshotSummary};
use crate::ids::{BlobId, SnapshotId};
use crate::locking;
use crate::progress::Progress;
use crate::repository::IndexedRepository;
use neverwiped_contract::record::RecordedSources;
use neverwiped_contract::ChangeStats;
use pipeline::{run_packer, run_worker, JobBatch, Recycler, SealedBlob};
use source::SourceTree;
use std::sync::Arc;
use std::time::Instant;
use walker::{Walker, WalkerParts};

/// The cores this process may use (2 when that cannot be told).
fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
}

/// The default of [`BackupOptions::upload_memory_bytes`]: two packs of the default 8 MiB stored
/// at once (uploads overlap the round trips of a remote gate, and the gate's work on one pack its
/// work on the next) while the next one fills.
pub const DEFAULT_UPLOAD_MEMORY_BYTES: u64 = 16 * 1024 * 1024;

/// Makes the C allocator give large buffers back to the system when they are freed.
///
/// Backups and restores pass hundreds of buffers of 128 KiB to 16 MiB (chunks, sealed blobs,
/// packs) between threads. glibc's malloc serves such sizes with their own mappings at first, but
/// raises that threshold to the size of each one freed (up to 32 MiB); from then on they are cut
/// from per-thread arenas, which keep freed memory and fragment, so a process's memory grows with
/// the data it moves. A fixed threshold keeps every such buffer in its own mapping, unmapped when
/// freed: memory follows what is live. Called by [`backup`] and [`crate::restore::restore`].
pub fn return_large_buffers_to_the_system() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: mallopt only changes a tunable of the allocator; any value is valid, and
            // an allocator that refuses it keeps its default behaviour.
            unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
            }
        });
    }
}

/// Which earlier snapshot lets unchanged files be skipped.
#[derive(Debug, Clone, Default)]
pub enum ParentChoice {
    /// The newest snapshot of the same host and paths.
    #[default]
    Latest,
    /// Read every file.
    None,
    Snapshot(SnapshotId),
}

pub struct BackupOptions {
    pub sources: Vec<Source>,
    /// Recorded as the snapshot's host; the operator uses `namespace/plan`.
    pub hostname: String,
    pub tags: Vec<String>,
    /// Paths left out, by restic's rules (`PathFilter::Exclude`).
    pub excludes: PathFilter,
    /// Leave out files (anything but folders) larger than this many bytes.
    pub exclude_larger_than: Option<u64>,
    /// Leave out the contents of folders holding one of these tag files (but the tag file).
    pub exclude_if_present: Vec<TagFile>,
    /// Do not cross file-system boundaries below each source (a mount point is kept, empty).
    pub one_file_system: bool,
    /// Size and tag-file rules that act only below one folder each.
    pub scoped_skips: Vec<ScopedSkip>,
    pub parent: ParentChoice,
    pub upload_limit_bytes_per_sec: Option<u64>,
    /// Compress-and-seal threads; 0 means one per core.
    pub workers: usize,
    /// Threads that read small files beside the walk (one per core by default); 0 reads every
    /// file on the walk's own thread.
    pub read_threads: usize,
    /// Uploads in flight at once (at most as many as `upload_memory_bytes` holds).
    pub upload_concurrency: usize,
    /// Bytes of closed packs held at once, waiting for or in upload (at least one pack is always
    /// allowed). With the pack being filled, the blobs in the channels and the reader's buffer,
    /// this sets the memory of a backup; more lets uploads overlap on a slow link.
    pub upload_memory_bytes: u64,
    /// Store a snapshot that holds no file, or a stream that gave no byte. Off by default: an
    /// empty input is most often a producer that failed (`pg_dumpall … |` without `pipefail`).
    pub allow_empty: bool,
    /// The time the snapshot records instead of the start of the run (restic's `--time`).
    pub time: Option<chrono::DateTime<chrono::FixedOffset>>,
    pub progress: Arc<Progress>,
    /// Set the moment the snapshot object is stored, for whoever must report a run that is
    /// stopped after that point (a signal): its snapshot exists.
    pub stored: Arc<StoredSnapshot>,
    /// What the snapshot records of its claims and databases, asked when the snapshot is written
    /// (a dump's tables are counted as it streams).
    pub recorded: SourcesRecord,
    /// Called once the repository is locked, before anything is read (a plan's pre hooks): an
    /// error fails the backup with nothing read. Blocking; it runs on a thread of its own.
    pub before_reading: Option<BeforeReading>,
}

/// What runs between taking the lock and reading the sources.
pub type BeforeReading = Box<dyn FnOnce() -> Result<()> + Send>;

/// Gives what a snapshot records of its sources, once every source has been read.
pub type SourcesRecord = Arc<dyn Fn() -> RecordedSources + Send + Sync>;

/// The id of a backup's snapshot once it is stored; empty before.
#[derive(Debug, Default)]
pub struct StoredSnapshot(std::sync::OnceLock<SnapshotId>);

impl StoredSnapshot {
    fn record(&self, id: SnapshotId) {
        // A backup stores one snapshot: a second record cannot happen.
        let _ = self.0.set(id);
    }

    /// The stored snapshot's id, if the backup got that far.
    pub fn get(&self) -> Option<SnapshotId> {
        self.0.get().copied()
    }
}

impl BackupOptions {
    pub fn new(sources: Vec<Source>) -> BackupOptions {
        BackupOptions {
            sources,
            hostname: crate::host::hostname(),
            tags: Vec::new(),
            excludes: PathFilter::Everything,
            exclude_larger_than: None,
            exclude_if_present: Vec::new(),
            one_file_system: false,
            scoped_skips: Vec::new(),
            parent: ParentChoice::Latest,
            upload_limit_bytes_per_sec: None,
            workers: 0,
            read_threads: cores(),
            upload_concurrency: 4,
            upload_memory_bytes: DEFAULT_UPLOAD_MEMORY_BYTES,
            allow_empty: false,
            time: None,
            progress: Arc::new(Progress::default()),
            stored: Arc::default(),
            recorded: Arc::new(RecordedSources::default),
            before_reading: None,
        }
    }
}

/// A finished backup.
#[derive(Debug)]
pub struct BackupReport {
    pub snapshot_id: SnapshotId,
    pub snapshot: Snapshot,
    /// Inputs that could not be read; the snapshot lacks them.
    pub warnings: Vec<String>,
    /// Warnings that lost no readable input (a socket skipped, a parent tree unreadable).
    pub notices: Vec<String>,
    /// Files stored as another name of a file read earlier in this backup.
    pub hard_links: u64,
    /// What the backup changed against its parent snapshot.
    pub changes: ChangeStats,
}

/// Counters of the streams of a backup, to refuse a snapshot of an empty one.
struct StreamCounters(Vec<(String, Arc<std::sync::atomic::AtomicU64>)>);

impl StreamCounters {
    /// Wraps each stream's reader in a counter.
    fn wrap(sources: &mut [Source]) -> StreamCounters {
        let mut counters = Vec::new();
        for source in sources {
            if let Source::Stream(stream) = source {
                if stream.may_be_empty {
                    continue;
                }
                let reader = std::mem::replace(&mut stream.reader, Box::new(std::io::empty()));
                let (counted, bytes_read) = CountedReader::new(reader);
                stream.reader = Box::new(counted);
                counters.push((stream.label.clone(), bytes_read));
            }
        }
        StreamCounters(counters)
    }

    /// The label of the first stream that gave no byte.
    fn first_empty(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(_, bytes)| bytes.load(std::sync::atomic::Ordering::Relaxed) == 0)
            .map(|(label, _)| label.as_str())
    }
}

/// Refuses a backup that read nothing: always when what it found could not be read (an
/// unprivileged mover that may read none of a volume's files), else unless the caller said an
/// empty input is expected.
fn refuse_empty(
    walk: &walker::WalkStats,
    streams: &StreamCounters,
    unreadable: &[String],
    allow_empty: bool,
) -> Result<()> {
    if walk.files == 0 && !unreadable.is_empty() {
        return Err(Error::NothingRead {
            reason: nothing_readable(unreadable),
        });
    }
    if allow_empty {
        return Ok(());
    }
    if let Some(label) = streams.first_empty() {
        return Err(Error::NothingRead {
            reason: format!(
                "{label} was empty (0 bytes), which usually means its producer failed; \
                 give --allow-empty if an empty stream is expected"
            ),
        });
    }
    if walk.files == 0 {
        return Err(Error::NothingRead {
            reason: "the sources hold no file; give --allow-empty to store a snapshot of \
                     folders without files"
                .into(),
        });
    }
    Ok(())
}

/// Says that nothing could be read, naming the first inputs that could not.
fn nothing_readable(unreadable: &[String]) -> String {
    const NAMED: usize = 3;
    let mut reason = format!(
        "nothing could be read ({} input{} unreadable): {}",
        unreadable.len(),
        if unreadable.len() == 1 { "" } else { "s" },
        unreadable[..unreadable.len().min(NAMED)].join("; ")
    );
    if unreadable.len() > NAMED {
        reason.push_str("; …");
    }
    reason
}

/// Backs up the sources into a new snapshot.
pub async fn backup(repo: &IndexedRepository, mut options: BackupOptions) -> Result<BackupReport> {
    return_large_buffers_to_the_system();
    let started = Instant::now();
    let start_time = chrono::Utc::now();
    let streams = StreamCounters::wrap(&mut options.sources);
    let tree = SourceTree::build(std::mem::take(&mut options.sources))?;
    let paths: Vec<SnapshotPath> = tree.paths.iter().cloned().map(SnapshotPath).collect();
    let lock = locking::acquire(repo, false, "backup").await?;
    let before_reading = options.before_reading.take();
    let result: Result<BackupReport> = async {
        // The work stops if the lock is lost; the snapshot write below is never cut halfway.
        let (snapshot, outcome) = lock
            .held_while(async {
                if let Some(before) = before_reading {
                    tokio::task::spawn_blocking(before)
                        .await
                        .map_err(|e| Error::Hook(format!("the pre hooks' thread failed: {e}")))??;
                }
                repo.refresh_index().await?;
                let parent = find_parent(repo, &options.parent, &options.hostname, &paths).await?;
                let parent_tree = parent.map(|(_, tree)| tree);
                let outcome = run_pipeline(repo, tree, parent_tree, &options, false).await?;
                refuse_empty(
                    &outcome.walk,
                    &streams,
                    &outcome.warnings,
                    options.allow_empty,
                )?;
                let summary = SnapshotSummary {
                    files: outcome.walk.files,
                    dirs: outcome.walk.dirs,
                    files_read: outcome.walk.files_read,
                    bytes_read: outcome.walk.bytes_read,
                    total_bytes: outcome.walk.total_bytes,
                    bytes_added: outcome.upload.bytes,
                    blobs_added: outcome.upload.blobs,
                    warnings: (outcome.warnings.len() + outcome.notices.len()) as u64,
                    duration_millis: started.elapsed().as_millis() as u64,
                };
                let snapshot = Snapshot {
                    time: options
                        .time
                        .unwrap_or(start_time.fixed_offset())
                        .to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
                    hostname: options.hostname.clone(),
                    username: crate::host::username(),
                    paths,
                    tags: options.tags.clone(),
                    tree: outcome.root,
                    parent: parent.map(|(id, _)| id),
                    original: None,
                    summary,
                    program_version: format!("neverwiped {}", env!("CARGO_PKG_VERSION")),
                    sources: (options.recorded)(),
                    unknown: Default::default(),
                };
                Ok((snapshot, outcome))
            })
            .await?;
        // A prune that took the repository over a lost lock may have deleted our packs.
        lock.ensure_still_held().await?;
        // Last: the snapshot makes the backup visible only once everything it needs is stored,
        // and never after a stop signal (a stop waits for a write under way).
        let snapshot_id = crate::stopping::unless_stopping(async {
            let snapshot_id = repo.write_snapshot(&snapshot).await?;
            options.stored.record(snapshot_id);
            Ok(snapshot_id)
        })
        .await?;
        let changes = change_stats(&outcome, snapshot.parent.is_some());
        Ok(BackupReport {
            snapshot_id,
            snapshot,
            warnings: outcome.warnings,
            notices: outcome.notices,
            hard_links: outcome.walk.hard_links,
            changes,
        })
    }
    .await;
    if let Err(error) = lock.release().await {
        // The snapshot is written: a lock left behind goes stale and is removed by the next run.
        tracing::warn!(%error, "could not remove the backup's lock");
    }
    result
}

/// What a backup changed against its parent (`has_parent`): the walk's file counts and the new
/// data blobs' bytes.
fn change_stats(outcome: &PipelineOutcome, has_parent: bool) -> ChangeStats {
    let files = outcome.walk.changes;
    ChangeStats {
        has_parent,
        files_new: files.new,
        files_changed: files.changed,
        files_unmodified: files.unmodified,
        files_removed: files.removed,
        new_bytes_raw: outcome.upload.data_bytes_raw,
        new_bytes_compressed: outcome.upload.data_bytes_compressed,
    }
}

/// What a backup would read and add: [`dry_run`]'s answer.
#[derive(Debug)]
pub struct DryRunReport {
    /// What the walk found and read (files whose content was not reused from the parent
    /// snapshot were read and chunked).
    pub walk: WalkStats,
    /// The packs, blobs and bytes the backup would store: the new blobs after deduplication
    /// against the index, compressed and sealed, and the new trees.
    pub would_add: UploadStats,
    /// Inputs that could not be read.
    pub warnings: Vec<String>,
    /// Warnings that lost no readable input.
    pub notices: Vec<String>,
}

/// Reads and chunks the sources as [`backup`] would, against the repository's index and parent
/// snapshot, and stores nothing: no pack, index, snapshot or lock is written (a lock would be
/// the only write; a prune running meanwhile makes the estimate too low, never harms the data).
pub async fn dry_run(repo: &IndexedRepository, mut options: BackupOptions) -> Result<DryRunReport> {
    return_large_buffers_to_the_system();
    let streams = StreamCounters::wrap(&mut options.sources);
    let tree = SourceTree::build(std::mem::take(&mut options.sources))?;
    let paths: Vec<SnapshotPath> = tree.paths.iter().cloned().map(SnapshotPath).collect();
    repo.refresh_index().await?;
    let parent = find_parent(repo, &options.parent, &options.hostname, &paths).await?;
    let parent_tree = parent.map(|(_, tree)| tree);
    let outcome = run_pipeline(repo, tree, parent_tree, &options, true).await?;
    refuse_empty(
        &outcome.walk,
        &streams,
        &outcome.warnings,
        options.allow_empty,
    )?;
    Ok(DryRunReport {
        walk: outcome.walk,
        would_add: outcome.upload,
        warnings: outcome.warnings,
        notices: outcome.notices,
    })
}

async fn find_parent(
    repo: &IndexedRepository,
    choice: &ParentChoice,
    hostname: &str,
    paths: &[SnapshotPath],
) -> Result<Option<(SnapshotId, BlobId)>> {
    match choice {
        ParentChoice::None => Ok(None),
        ParentChoice::Snapshot(id) => {
            let snapshot = repo.read_snapshot(*id).await?;
            Ok(Some((*id, snapshot.tree)))
        }
        ParentChoice::Latest => Ok(repo
            .snapshots()
            .await?
            .into_iter()
            .rev()
            .find(|(_, s)| s.hostname == hostname && s.paths == paths)
            .map(|(id, s)| (id, s.tree))),
    }
}

struct PipelineOutcome {
    root: BlobId,
    walk: walker::WalkStats,
    upload: uploader::UploadStats,
    warnings: Vec<String>,
    notices: Vec<String>,
}

/// The compress-and-seal workers and the packer, running on threads of their own.
pub(crate) struct SealingThreads {
    workers: Vec<std::thread::JoinHandle<()>>,
    packer: std::thread::JoinHandle<bool>,
}

impl SealingThreads {
    /// Starts `workers` sealers reading `jobs` and one packer handing closed packs to `packs`,
    /// each pack holding its share of `upload_memory_bytes` until it is stored.
    pub(crate) fn start(
        repo: &IndexedRepository,
        workers: usize,
        upload_memory_bytes: u64,
        jobs: crossbeam_channel::Receiver<JobBatch>,
        blob_buffers: Recycler,
        packs: tokio::sync::mpsc::Sender<pipeline::FinishedPack>,
    ) -> Result<SealingThreads> {
        let (sealed_tx, sealed_rx) = crossbeam_channel::bounded::<Vec<SealedBlob>>(0);
        // Closed packs hold a share of the budget (in KiB) from the moment they are closed until
        // they are stored: the packer waits for it, and with it the whole pipeline.
        let budget_kib = u32::try_from(upload_memory_bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .clamp(1, tokio::sync::Semaphore::MAX_PERMITS as u32);
        let budget = Arc::new(tokio::sync::Semaphore::new(budget_kib as usize));
        let runtime = tokio::runtime::Handle::current();
        let mut threads = Vec::new();
        for number in 0..workers {
            let (keys, jobs, sealed) = (repo.keys().clone(), jobs.clone(), sealed_tx.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("seal-{number}"))
                    .spawn(move || run_worker(keys, jobs, sealed))
                    .map_err(|e| Error::io("starting a worker thread", e))?,
            );
        }
        drop((jobs, sealed_tx));
        let keys = repo.keys().clone();
        let pack_target = repo.params().pack_target_bytes as usize;
        let packer = std::thread::Builder::new()
            .name("packer".into())
            .spawn(move || {
                run_packer(keys, pack_target, sealed_rx, &blob_buffers, |mut pack| {
                    // A pack is charged at most the target: it closes a little over it (the blob
                    // that crossed it, the header), and each 8 MiB of the budget is to let one
                    // more pack upload at once.
                    let charged = pack.bytes.len().min(pack_target);
                    let kib = u32::try_from(charged.div_ceil(1024))
                        .unwrap_or(u32::MAX)
                        .min(budget_kib);
                    match runtime.block_on(budget.clone().acquire_many_owned(kib)) {
                        Ok(permit) => pack.budget = Some(permit),
                        Err(_) => return false,
                    }
                    packs.blocking_send(pack).is_ok()
                })
            })
            .map_err(|e| Error::io("starting the packer thread", e))?;
        Ok(SealingThreads {
            workers: threads,
            packer,
        })
    }

    /// Waits for every thread to end (they do once the walker's job channel closes).
    pub(crate) async fn join(self) {
        let _ = tokio::task::spawn_blocking(move || {
            for thread in self.workers {
                let _ = thread.join();
            }
            self.packer.join().unwrap_or(false)
        })
        .await;
    }
}

async fn run_pipeline(
    repo: &IndexedRepository,
    tree: SourceTree,
    parent_root: Option<BlobId>,
    options: &BackupOptions,
    count_only: bool,
) -> Result<PipelineOutcome> {
    let workers = match options.workers {
        0 => cores(),
        n => n,
    };
    // Shallow channels: each batch in them is up to a maximum chunk of memory. The buffers of
    // the large blobs are in one of them, with the walker, a reader, a worker or the packer:
    // that many are kept for reuse. The packer only copies, so sealed blobs are handed over
    // directly.
    let (job_tx, job_rx) = crossbeam_channel::bounded::<JobBatch>(1);
    let blob_buffers = Recycler::new(workers + options.read_threads + 3);
    let (pack_tx, pack_rx) = tokio::sync::mpsc::channel(1);
    let sealing = SealingThreads::start(
        repo,
        workers,
        options.upload_memory_bytes,
        job_rx,
        blob_buffers.clone(),
        pack_tx,
    )?;
    let uploads = tokio::spawn(uploader::run_uploader(
        repo.clone(),
        pack_rx,
        options.upload_concurrency,
        options.upload_limit_bytes_per_sec.map(Throttle::new),
        options.progress.clone(),
        count_only,
    ));

    let mut skip_rules = SkipRules::new(
        options.excludes.clone(),
        options.exclude_larger_than,
        options.exclude_if_present.clone(),
    );
    if options.one_file_system {
        skip_rules.one_file_system = Some(SourceDevices::of(&tree.disk_paths));
    }
    skip_rules.scoped = options.scoped_skips.clone();
    let parts = WalkerParts {
        jobs: job_tx,
        buffers: blob_buffers,
        skip_rules,
        progress: options.progress.clone(),
        read_threads: options.read_threads,
    };
    let mut walker = Walker::new(repo.clone(), tokio::runtime::Handle::current(), parts)?;
    let walked = tokio::task::spawn_blocking(move || {
        let root = walker.archive_root(tree, parent_root);
        // Dropping the walker closes the job channel: the workers and packer drain and finish.
        let Walker {
            stats,
            warnings,
            notices,
            ..
        } = walker;
        (root, stats, warnings, notices)
    })
    .await
    .map_err(|e| Error::Interrupted(format!("the walker failed: {e}")))?;
    let upload_result = uploads
        .await
        .map_err(|e| Error::Interrupted(format!("the uploader failed: {e}")))?;
    sealing.join().await;

    let (root, walk, warnings, notices) = walked;
    // An upload error explains a walker that stopped because the pipeline closed.
    let upload = upload_result?;
    let root = root?;
    if walk.sources_read == 0 {
        let reason = match warnings.is_empty() {
            true => "no source could be read".to_owned(),
            false => nothing_readable(&warnings),
        };
        return Err(Error::NothingRead { reason });
    }
    Ok(PipelineOutcome {
        root,
        walk,
        upload,
        warnings,
        notices,
    })
}
