//! The blobs a backup adds: each named by its keyed hash, and sent to the workers once, only when
//! the repository lacks it. Shared by the walker and the threads that read small files for it;
//! each of them gathers its new blobs in an [`Outbox`] of its own, sent as a batch.

use super::super::pipeline::{
    BlobJob, JobBatch, Recycler, BATCH_BLOBS, BATCH_BYTES, JOB_FRONT_BYTES,
};
use crate::crypto::{RepositoryKeys, TAG_BYTES};
use crate::error::{Error, Result};
use crate::ids::{BlobId, BlobKind};
use crate::repository::IndexedRepository;
use crossbeam_channel::Sender;
use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

/// How many blobs are sent between two prunings of the sent set: about what one index object
/// records, so the set holds little more than the blobs not yet indexed (its table keeps the
/// largest size it reached).
const SENT_PRUNE_EVERY: usize = 1 << 13;

pub struct NewBlobs {
    repo: IndexedRepository,
    keys: RepositoryKeys,
    jobs: Sender<JobBatch>,
    /// Blob buffers coming back from the packer.
    buffers: Recycler,
    sent: Mutex<Sent>,
}

/// New blobs gathered by one thread, not yet sent.
#[derive(Default)]
pub struct Outbox {
    jobs: JobBatch,
    bytes: usize,
}

/// Blobs sent to the workers in this backup that the index may not list yet (those it lists are
/// dropped now and then: the index knows them, and this set stays small).
#[derive(Default)]
struct Sent {
    ids: HashSet<BlobId>,
    since_pruned: usize,
}

/// The walk stopped because the rest of the pipeline did.
pub fn pipeline_stopped() -> Error {
    Error::Interrupted("the upload pipeline stopped".into())
}

impl NewBlobs {
    pub fn new(repo: IndexedRepository, jobs: Sender<JobBatch>, buffers: Recycler) -> NewBlobs {
        NewBlobs {
            keys: repo.keys().clone(),
            repo,
            jobs,
            buffers,
            sent: Mutex::default(),
        }
    }

    /// A buffer for a blob's plaintext: [`JOB_FRONT_BYTES`] of room, then nothing yet; with
    /// capacity for `plaintext_bytes` and the seal's tag.
    pub fn buffer(&self, plaintext_bytes: usize) -> Vec<u8> {
        let mut buffer = self.buffers.take();
        buffer.reserve_exact(JOB_FRONT_BYTES + plaintext_bytes + TAG_BYTES);
        buffer.resize(JOB_FRONT_BYTES, 0);
        buffer
    }

    /// Stores a copy of `plaintext` unless the repository has it; returns its id.
    pub fn store(&self, kind: BlobKind, plaintext: &[u8], outbox: &mut Outbox) -> Result<BlobId> {
        let id = self.keys.blob_id(kind, plaintext);
        if self.claim(&id) {
            let mut buffer = self.buffer(plaintext.len());
            buffer.extend_from_slice(plaintext);
            self.post(BlobJob::plaintext(kind, id, buffer), outbox)?;
        }
        Ok(id)
    }

    /// Stores the plaintext that follows [`JOB_FRONT_BYTES`] in `buffer` (from [`Self::buffer`])
    /// unless the repository has it, without copying it; returns its id.
    pub fn store_buffer(
        &self,
        kind: BlobKind,
        buffer: Vec<u8>,
        outbox: &mut Outbox,
    ) -> Result<BlobId> {
        let id = self.keys.blob_id(kind, &buffer[JOB_FRONT_BYTES..]);
        match self.claim(&id) {
            true => self.post(BlobJob::plaintext(kind, id, buffer), outbox)?,
            false => self.buffers.give(buffer),
        }
        Ok(id)
    }

    /// Adds a new blob to `outbox`, and sends the batch once it is full.
    fn post(&self, job: BlobJob, outbox: &mut Outbox) -> Result<()> {
        outbox.bytes += job.buffer.len() - JOB_FRONT_BYTES;
        outbox.jobs.push(job);
        if outbox.bytes >= BATCH_BYTES || outbox.jobs.len() >= BATCH_BLOBS {
            self.flush(outbox)?;
        }
        Ok(())
    }

    /// Sends what `outbox` holds. Every outbox is flushed before the walk ends: a blob claimed
    /// and never sent would be missing from the repository.
    pub fn flush(&self, outbox: &mut Outbox) -> Result<()> {
        if outbox.jobs.is_empty() {
            return Ok(());
        }
        outbox.bytes = 0;
        let batch = std::mem::take(&mut outbox.jobs);
        self.jobs.send(batch).map_err(|_| pipeline_stopped())
    }

    /// Whether the repository has the blob, or this backup sent it already.
    pub fn is_known(&self, id: &BlobId) -> bool {
        // One lock at a time here: `claim` takes the index's inside the sent set's.
        let indexed = self.repo.index().contains(id);
        indexed || self.sent().ids.contains(id)
    }

    /// True when the blob is new and this caller is the one to send it (two readers of equal
    /// files may ask at once: one of them gets it). The index is asked while the sent set is
    /// held: asked before, a blob another thread sent could be indexed and pruned from the set
    /// in between, and be sent twice.
    fn claim(&self, id: &BlobId) -> bool {
        let mut sent = self.sent();
        if self.repo.index().contains(id) || !sent.ids.insert(*id) {
            return false;
        }
        sent.since_pruned += 1;
        if sent.since_pruned >= SENT_PRUNE_EVERY {
            sent.since_pruned = 0;
            let index = self.repo.index();
            sent.ids.retain(|id| !index.contains(id));
        }
        true
    }

    fn sent(&self) -> std::sync::MutexGuard<'_, Sent> {
        // The set is valid whatever a panicking holder did: it only ever gains ids or drops
        // indexed ones.
        self.sent.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::index::{IndexFile, IndexedBlob, IndexedPack};
    use crate::ids::{ObjectId, PackId};
    use std::sync::Arc;

    use super::super::test_repository as repository;

    /// Plays the packer: indexes every batch as soon as it arrives (the sooner a blob is indexed,
    /// the more often the sent set is pruned of blobs a slower thread is about to claim), and
    /// counts the blobs sent.
    fn index_as_they_come(
        repo: IndexedRepository,
        batches: crossbeam_channel::Receiver<JobBatch>,
    ) -> usize {
        let mut sent = 0;
        for (number, batch) in batches.into_iter().enumerate() {
            sent += batch.len();
            let blobs = batch
                .iter()
                .map(|job| IndexedBlob {
                    id: job.id,
                    kind: job.kind,
                    offset: 0,
                    length: job.buffer.len() as u32,
                    raw_length: job.buffer.len() as u32,
                })
                .collect();
            let mut pack = [0u8; 32];
            pack[..8].copy_from_slice(&(number as u64).to_le_bytes());
            let file = IndexFile {
                packs: vec![IndexedPack {
                    id: PackId::from_bytes(pack),
                    blobs,
                }],
                supersedes: Vec::new(),
            };
            repo.add_index_file(ObjectId::from_bytes(pack), &file);
        }
        sent
    }

    /// Four threads store the same blobs in the same order, as readers of equal files do, while
    /// the blobs are indexed as they arrive and the sent set is pruned: each blob is sent once.
    /// The race it catches needs a thread to lose the processor at the wrong moment: before the
    /// fix it failed in one run of four on a loaded machine (one blob sent twice), and passed on
    /// an idle one.
    #[tokio::test(flavor = "multi_thread")]
    async fn equal_blobs_stored_at_once_are_sent_once_while_the_index_grows() {
        const BLOBS: u32 = 24 * SENT_PRUNE_EVERY as u32;
        let repo = repository().await;
        let (jobs, batches) = crossbeam_channel::unbounded();
        let blobs = Arc::new(NewBlobs::new(repo.clone(), jobs, Recycler::new(64)));
        let packer = std::thread::spawn({
            let repo = repo.clone();
            move || index_as_they_come(repo, batches)
        });
        let storers: Vec<_> = (0..4)
            .map(|_| {
                let blobs = blobs.clone();
                std::thread::spawn(move || {
                    let mut outbox = Outbox::default();
                    for number in 0..BLOBS {
                        let plaintext = number.to_le_bytes();
                        blobs
                            .store(BlobKind::Data, &plaintext, &mut outbox)
                            .unwrap();
                        blobs.flush(&mut outbox).unwrap();
                    }
                })
            })
            .collect();
        for storer in storers {
            storer.join().unwrap();
        }
        drop(blobs);
        assert_eq!(packer.join().unwrap(), BLOBS as usize);
        assert_eq!(repo.index().blob_count(), BLOBS as usize);
    }
}
