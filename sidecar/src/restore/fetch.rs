//! The content side of a restore: pack ranges are fetched a few at a time into a fixed set of
//! reused buffers, and a fixed pool of decode threads opens their blobs where they lie and writes
//! each plaintext at its offsets.
//!
//! Memory is bounded by construction and does not grow with the size of the restore: at most
//! `slots` buffers of fetched bytes exist at once (each at most one fetch long), and each decode
//! thread keeps one zstd context and one plaintext buffer of at most one blob.

use super::files::BatchFiles;
use super::plan::{PlannedBlob, RestorePlan};
use crate::backend::ObjectKind;
use crate::compress::Decoder;
use crate::crypto::{blob_associated_data, CryptoError, RepositoryKeys};
use crate::error::{Error, Result};
use crate::ids::PackId;
use crate::progress::Progress;
use crate::repository::IndexedRepository;
use futures::StreamExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Blobs closer than this in a pack are read together, gap included.
const MERGE_GAP_BYTES: u64 = 1024 * 1024;
/// The largest range fetched at once (a single larger blob is fetched alone).
const MAX_FETCH_BYTES: u64 = 8 * 1024 * 1024;
/// The smallest range a memory budget can shrink fetches to.
const MIN_FETCH_BYTES: u64 = 1024 * 1024;

/// How the content of a restore is fetched and decoded.
#[derive(Debug, Clone, Copy)]
pub struct FetchSettings {
    /// Bytes of fetched pack data held at once (being fetched, queued or being decoded).
    pub memory_budget_bytes: u64,
    /// Fetches in flight at once (fewer when the budget holds fewer).
    pub concurrency: usize,
    /// Decode threads (0: one per core).
    pub decoders: usize,
}

impl FetchSettings {
    /// The size of one fetch: about a quarter of the budget, between 1 and 8 MiB.
    fn fetch_bytes(&self) -> u64 {
        (self.memory_budget_bytes / 4).clamp(MIN_FETCH_BYTES, MAX_FETCH_BYTES)
    }

    /// Buffers of fetched bytes: as many fetches as the budget holds, at least two so that
    /// fetching and decoding overlap.
    fn slots(&self) -> usize {
        ((self.memory_budget_bytes / self.fetch_bytes()) as usize).max(2)
    }

    fn decoders(&self) -> usize {
        super::decoder_threads(self.decoders)
    }
}

/// A read of one contiguous range of a pack, covering several blobs.
pub struct Fetch {
    pub pack: PackId,
    pub start: u64,
    pub end: u64,
    pub blobs: Vec<PlannedBlob>,
}

impl Fetch {
    /// The first entry (in plan order) that this range writes to.
    fn first_entry(&self) -> usize {
        self.blobs
            .iter()
            .flat_map(|blob| blob.targets.iter().map(|target| target.entry))
            .min()
            .unwrap_or(usize::MAX)
    }
}

/// Cuts each pack's needed blobs into ranges of at most `max_bytes` (or one blob), in the order
/// of the first file each range writes: files are then created and written about in plan order,
/// each directory's files together.
pub fn group_fetches(plan: &RestorePlan, max_bytes: u64) -> Vec<Fetch> {
    let mut fetches = Vec::new();
    for (pack, blobs) in &plan.packs {
        let mut current: Option<Fetch> = None;
        for blob in blobs {
            let start = blob.location.offset as u64;
            let end = start + blob.location.length as u64;
            if let Some(fetch) = current.as_mut() {
                if start <= fetch.end + MERGE_GAP_BYTES && end - fetch.start <= max_bytes {
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
    fetches.sort_by_cached_key(Fetch::first_entry);
    fetches
}

/// A blob that could not be restored: its pack range was missing or it did not open. The
/// restore goes on without it; the files it belongs to are named at the end.
#[derive(Debug, Clone)]
pub struct DamagedBlob {
    pub blob: PlannedBlob,
    pub pack: PackId,
    pub reason: String,
}

/// What the content side of a restore did.
#[derive(Debug, Default)]
pub struct FetchOutcome {
    pub bytes_written: u64,
    pub bytes_fetched: u64,
    pub damaged: Vec<DamagedBlob>,
}

/// Whether an error is damage to the repository's content (restore the rest), rather than a
/// failure of the restore itself (a full disk, a lost connection: stop).
fn is_damage(error: &Error) -> bool {
    matches!(
        error,
        Error::Corrupt { .. }
            | Error::Format(_)
            | Error::Backend(crate::backend::BackendError::NotFound { .. })
    )
}

/// A fetched range on its way to a decode thread, with the buffer slot it holds.
struct Job {
    fetch: Fetch,
    bytes: Vec<u8>,
    _slot: OwnedSemaphorePermit,
}

/// What the decode threads share.
struct Shared {
    keys: RepositoryKeys,
    /// The batch's files: a writer creates each one it is the first to need.
    files: Arc<BatchFiles>,
    progress: Arc<Progress>,
    /// Free fetch buffers; a slot permit guarantees one is here (or may be made).
    buffers: Mutex<Vec<Vec<u8>>>,
    /// A buffer that grew past this (a fetch of one huge blob) is not kept.
    keep_buffer_bytes: usize,
    failed: AtomicBool,
    error: Mutex<Option<Error>>,
    written: AtomicU64,
    damaged: Mutex<Vec<DamagedBlob>>,
}

impl Shared {
    /// Records a blob lost to damage; its targets are done (they read as zeros).
    fn record_damage(&self, pack: PackId, blob: &PlannedBlob, error: &Error) -> Result<()> {
        tracing::warn!("cannot restore blob {} of pack {pack}: {error}", blob.id);
        self.damaged
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(DamagedBlob {
                blob: blob.clone(),
                pack,
                reason: error.to_string(),
            });
        for target in &blob.targets {
            self.files.target_damaged(target.entry)?;
        }
        Ok(())
    }

    fn fail(&self, error: Error) {
        self.failed.store(true, Ordering::SeqCst);
        self.error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(error);
    }

    /// A free buffer; a new one is made at the full size of a fetch, so that it never grows
    /// again by reallocating (and, growing, briefly doubling).
    fn take_buffer(&self) -> Vec<u8> {
        let free = self.buffers.lock().unwrap_or_else(|p| p.into_inner()).pop();
        free.unwrap_or_else(|| Vec::with_capacity(self.keep_buffer_bytes))
    }

    fn give_back(&self, mut buffer: Vec<u8>) {
        if buffer.capacity() > self.keep_buffer_bytes {
            buffer = Vec::new();
        }
        buffer.clear();
        self.buffers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(buffer);
    }
}

/// Fetches every range the plan needs and writes its blobs. A range or blob that is damaged is
/// recorded and skipped; any other error stops the restore.
pub async fn fetch_content(
    repo: &IndexedRepository,
    plan: &RestorePlan,
    files: Arc<BatchFiles>,
    progress: Arc<Progress>,
    settings: FetchSettings,
) -> Result<FetchOutcome> {
    let fetch_bytes = settings.fetch_bytes();
    let slots = settings.slots();
    let fetches = group_fetches(plan, fetch_bytes);
    let shared = Arc::new(Shared {
        keys: repo.keys().clone(),
        files,
        progress,
        buffers: Mutex::new(Vec::with_capacity(slots)),
        keep_buffer_bytes: fetch_bytes as usize,
        failed: AtomicBool::new(false),
        error: Mutex::new(None),
        written: AtomicU64::new(0),
        damaged: Mutex::new(Vec::new()),
    });

    // Jobs queue up only while they hold a slot, so this channel is bounded by the slots.
    let (job_tx, job_rx) = crossbeam_channel::unbounded::<Job>();
    let mut threads = Vec::new();
    for number in 0..settings.decoders() {
        let (shared, jobs) = (shared.clone(), job_rx.clone());
        let thread = std::thread::Builder::new()
            .name(format!("restore-{number}"))
            .spawn(move || decode_jobs(&shared, jobs))
            .map_err(|e| Error::io("starting a restore thread", e))?;
        threads.push(thread);
    }
    drop(job_rx);

    let slot_permits = Arc::new(Semaphore::new(slots));
    let fetched = AtomicU64::new(0);
    let mut fetch_error = None;
    {
        let fetching = futures::stream::iter(fetches)
            .map(|fetch| fetch_range(repo, &shared, &slot_permits, &job_tx, &fetched, fetch))
            .buffer_unordered(settings.concurrency.clamp(1, slots));
        futures::pin_mut!(fetching);
        while let Some(result) = fetching.next().await {
            if let Err(error) = result {
                shared.failed.store(true, Ordering::SeqCst);
                fetch_error = Some(error);
                break;
            }
        }
    }
    // The stream is gone: closing the channel lets the decode threads finish.
    drop(job_tx);
    tokio::task::spawn_blocking(move || {
        for thread in threads {
            let _ = thread.join();
        }
    })
    .await
    .map_err(|e| Error::Interrupted(e.to_string()))?;

    let decode_error = shared
        .error
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    if let Some(error) = decode_error.or(fetch_error) {
        return Err(error);
    }
    let damaged = std::mem::take(&mut *shared.damaged.lock().unwrap_or_else(|p| p.into_inner()));
    Ok(FetchOutcome {
        bytes_written: shared.written.load(Ordering::Relaxed),
        bytes_fetched: fetched.load(Ordering::Relaxed),
        damaged,
    })
}

/// Fetches one range into a free buffer and queues it for the decode threads; a missing pack
/// is recorded as damage to each of the range's blobs.
async fn fetch_range(
    repo: &IndexedRepository,
    shared: &Shared,
    slot_permits: &Arc<Semaphore>,
    job_tx: &crossbeam_channel::Sender<Job>,
    fetched: &AtomicU64,
    fetch: Fetch,
) -> Result<()> {
    let slot = slot_permits
        .clone()
        .acquire_owned()
        .await
        .expect("the semaphore is never closed");
    if shared.failed.load(Ordering::SeqCst) {
        return Ok(());
    }
    let buffer = shared.take_buffer();
    let read = repo
        .backend()
        .read_range_into(
            ObjectKind::Data,
            &fetch.pack.to_hex(),
            fetch.start,
            fetch.end - fetch.start,
            buffer,
        )
        .await
        .map_err(Error::from);
    let bytes = match read {
        Ok(bytes) => bytes,
        Err(error) if is_damage(&error) => {
            for blob in &fetch.blobs {
                shared.record_damage(fetch.pack, blob, &error)?;
            }
            return Ok(());
        }
        Err(error) => return Err(error),
    };
    shared.progress.add_transferred(bytes.len() as u64);
    fetched.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    let job = Job {
        fetch,
        bytes,
        _slot: slot,
    };
    job_tx
        .send(job)
        .map_err(|_| Error::Interrupted("the restore threads stopped".into()))
}

/// One decode thread: opens, decodes, checks and writes the blobs of each fetched range.
fn decode_jobs(shared: &Shared, jobs: crossbeam_channel::Receiver<Job>) {
    let mut decoder = Decoder::default();
    for mut job in jobs {
        if !shared.failed.load(Ordering::SeqCst) {
            match write_fetch(shared, &mut decoder, &job.fetch, &mut job.bytes) {
                Ok(written) => {
                    shared.written.fetch_add(written, Ordering::Relaxed);
                }
                Err(error) => shared.fail(error),
            }
        }
        shared.give_back(std::mem::take(&mut job.bytes));
        // Dropping the job frees its slot for the next fetch.
    }
}

/// Opens every blob of a fetched range in place and writes it to each place it belongs.
fn write_fetch(
    shared: &Shared,
    decoder: &mut Decoder,
    fetch: &Fetch,
    bytes: &mut [u8],
) -> Result<u64> {
    let mut written = 0;
    for blob in &fetch.blobs {
        let from = (blob.location.offset as u64 - fetch.start) as usize;
        let Some(sealed) = bytes.get_mut(from..from + blob.location.length as usize) else {
            let short = Error::Corrupt {
                what: format!("pack {}", fetch.pack),
                reason: "it is shorter than the index says".into(),
            };
            shared.record_damage(fetch.pack, blob, &short)?;
            continue;
        };
        let what = || format!("blob {} in pack {}", blob.id, fetch.pack);
        let plaintext = match open_blob_in_place(shared, decoder, blob, sealed, &what) {
            Ok(plaintext) => plaintext,
            Err(error) if is_damage(&error) => {
                shared.record_damage(fetch.pack, blob, &error)?;
                continue;
            }
            Err(error) => return Err(error),
        };
        for target in &blob.targets {
            super::files::write_at(&shared.files, target.entry, target.offset, plaintext)?;
            let finished = shared.files.target_done(target.entry)?;
            written += plaintext.len() as u64;
            shared.progress.add_processed(plaintext.len() as u64);
            shared.progress.add_files(u64::from(finished));
        }
    }
    Ok(written)
}

/// Authenticates a sealed blob where it lies, decodes it and checks that its plaintext has its
/// id (as [`crate::repository::open_blob`], without copies).
fn open_blob_in_place<'a>(
    shared: &Shared,
    decoder: &'a mut Decoder,
    blob: &PlannedBlob,
    sealed: &'a mut [u8],
    what: &dyn Fn() -> String,
) -> Result<&'a [u8]> {
    let kind = blob.location.kind;
    let encoded = shared
        .keys
        .sealer
        .open_in_place(sealed, &blob_associated_data(kind, &blob.id), "")
        .map_err(|error| {
            // The message is made only when it is needed.
            let named = match error {
                CryptoError::Authentication { .. } => CryptoError::Authentication { what: what() },
                CryptoError::Truncated { len, .. } => CryptoError::Truncated { what: what(), len },
                other => other,
            };
            crate::format::FormatError::from(named)
        })?;
    let plaintext = decoder
        .decode(encoded, blob.location.raw_length as usize)
        .map_err(|e| Error::Corrupt {
            what: what(),
            reason: e.to_string(),
        })?;
    if shared.keys.blob_id(kind, plaintext) != blob.id {
        return Err(Error::Corrupt {
            what: what(),
            reason: "content does not match its id".into(),
        });
    }
    Ok(plaintext)
}
