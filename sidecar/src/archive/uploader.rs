//! The uploader: sends finished packs concurrently, then records them in index objects.
//!
//! A pack enters an index object only after its upload succeeded, and index objects are written
//! every few packs, so a backup killed at any point leaves a valid repository whose next backup
//! reuses every pack that made it into an index.

use super::pipeline::FinishedPack;
use crate::backend::ObjectKind;
use crate::crypto::{NONCE_BYTES, TAG_BYTES};
use crate::error::{Error, Result};
use crate::format::index::{IndexFile, IndexedBlob, IndexedPack};
use crate::format::pack::PackEntry;
use crate::ids::BlobKind;
use crate::progress::Progress;
use crate::repository::IndexedRepository;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Mutex, Semaphore};
use tokio::task::JoinSet;

/// Packs recorded per index object while a backup runs, at most.
const PACKS_PER_INDEX_OBJECT: usize = 8;

/// An index object is written once its packs hold this many blobs (a pack is never split across
/// objects): packs of small files hold thousands of blobs each, and a reader decodes a few
/// objects at once, so this bounds what loading the index holds besides the index itself.
const BLOBS_PER_INDEX_OBJECT: usize = 8192;

/// What the uploads added to the repository.
#[derive(Debug, Default, Clone, Copy)]
pub struct UploadStats {
    pub packs: u64,
    pub blobs: u64,
    pub bytes: u64,
    /// The new data blobs' plaintext bytes (file content, before compression).
    pub data_bytes_raw: u64,
    /// The same blobs' bytes after compression, before encryption (their codec byte, nonce and
    /// tag left out): equal to the raw bytes for data that does not compress.
    pub data_bytes_compressed: u64,
}

impl UploadStats {
    /// Counts a stored pack of `bytes` holding `entries`.
    fn add_pack(&mut self, bytes: u64, entries: &[PackEntry]) {
        self.packs += 1;
        self.blobs += entries.len() as u64;
        self.bytes += bytes;
        for entry in entries.iter().filter(|e| e.kind == BlobKind::Data) {
            self.data_bytes_raw += u64::from(entry.raw_length);
            let overhead = (NONCE_BYTES + TAG_BYTES + 1) as u64;
            self.data_bytes_compressed += u64::from(entry.length).saturating_sub(overhead);
        }
    }
}

/// Spreads uploads so that their average rate stays below a limit.
#[derive(Debug)]
pub struct Throttle {
    bytes_per_sec: u64,
    next_free: std::sync::Mutex<Instant>,
}

impl Throttle {
    pub fn new(bytes_per_sec: u64) -> Throttle {
        Throttle {
            bytes_per_sec: bytes_per_sec.max(1),
            next_free: std::sync::Mutex::new(Instant::now()),
        }
    }

    /// Waits until `bytes` more may be sent.
    pub async fn reserve(&self, bytes: u64) {
        let start = {
            let mut next_free = self.next_free.lock().unwrap_or_else(|p| p.into_inner());
            let start = (*next_free).max(Instant::now());
            *next_free = start + Duration::from_secs_f64(bytes as f64 / self.bytes_per_sec as f64);
            start
        };
        tokio::time::sleep_until(start.into()).await;
    }
}

struct Shared {
    repo: IndexedRepository,
    pending: Mutex<Vec<IndexedPack>>,
    stats: std::sync::Mutex<UploadStats>,
    throttle: Option<Throttle>,
    progress: Arc<Progress>,
    /// Count the packs and store nothing (`backup --dry-run`).
    count_only: bool,
}

impl Shared {
    async fn upload(&self, pack: FinishedPack) -> Result<()> {
        let FinishedPack {
            id,
            bytes,
            entries,
            budget,
        } = pack;
        let length = bytes.len() as u64;
        if self.count_only {
            self.count(length, &entries);
            return Ok(());
        }
        if let Some(throttle) = &self.throttle {
            throttle.reserve(length).await;
        }
        self.repo
            .backend()
            .write(ObjectKind::Data, &id.to_hex(), bytes)
            .await?;
        // The bytes are gone: the packer may close the next pack.
        drop(budget);
        self.progress.add_transferred(length);
        self.count(length, &entries);
        let full = {
            let mut pending = self.pending.lock().await;
            pending.push(IndexedPack {
                id,
                blobs: entries.iter().map(IndexedBlob::from).collect(),
            });
            let blobs: usize = pending.iter().map(|pack| pack.blobs.len()).sum();
            if pending.len() >= PACKS_PER_INDEX_OBJECT || blobs >= BLOBS_PER_INDEX_OBJECT {
                std::mem::take(&mut *pending)
            } else {
                Vec::new()
            }
        };
        self.write_index(full).await
    }

    fn count(&self, bytes: u64, entries: &[PackEntry]) {
        let mut stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        stats.add_pack(bytes, entries);
    }

    async fn write_index(&self, packs: Vec<IndexedPack>) -> Result<()> {
        if packs.is_empty() {
            return Ok(());
        }
        let file = IndexFile {
            packs,
            supersedes: vec![],
        };
        let id = self.repo.write_object(ObjectKind::Index, &file).await?;
        self.repo.add_index_file(id, &file);
        Ok(())
    }
}

/// Uploads packs as they arrive, `concurrency` at a time, until the channel closes or an upload
/// fails. Whatever was uploaded is indexed before this returns, even on failure. With
/// `count_only`, packs are counted and dropped: nothing is written.
pub async fn run_uploader(
    repo: IndexedRepository,
    mut packs: mpsc::Receiver<FinishedPack>,
    concurrency: usize,
    throttle: Option<Throttle>,
    progress: Arc<Progress>,
    count_only: bool,
) -> Result<UploadStats> {
    let shared = Arc::new(Shared {
        repo,
        pending: Mutex::new(Vec::new()),
        stats: std::sync::Mutex::new(UploadStats::default()),
        throttle,
        progress,
        count_only,
    });
    let slots = Arc::new(Semaphore::new(concurrency.max(1)));
    let mut uploads: JoinSet<Result<()>> = JoinSet::new();
    let mut first_error: Option<Error> = None;

    while first_error.is_none() {
        let Some(pack) = packs.recv().await else {
            break;
        };
        let permit = slots
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let shared = shared.clone();
        uploads.spawn(async move {
            let result = shared.upload(pack).await;
            drop(permit);
            result
        });
        while let Some(done) = uploads.try_join_next() {
            record(&mut first_error, done);
        }
    }
    // Closing the channel tells the packer to stop when an upload failed.
    drop(packs);
    while let Some(done) = uploads.join_next().await {
        record(&mut first_error, done);
    }
    let rest = std::mem::take(&mut *shared.pending.lock().await);
    if let Err(error) = shared.write_index(rest).await {
        first_error.get_or_insert(error);
    }
    match first_error {
        Some(error) => Err(error),
        None => Ok(*shared.stats.lock().unwrap_or_else(|p| p.into_inner())),
    }
}

fn record(
    first_error: &mut Option<Error>,
    done: std::result::Result<Result<()>, tokio::task::JoinError>,
) {
    let error = match done {
        Ok(Ok(())) => return,
        Ok(Err(error)) => error,
        Err(join_error) => Error::Interrupted(format!("an upload task failed: {join_error}")),
    };
    first_error.get_or_insert(error);
}
