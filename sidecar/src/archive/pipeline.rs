//! The CPU stages of a backup: worker threads compress and seal blobs; the packer gathers them
//! into packs. Bounded channels between the stages keep memory flat and give back-pressure.
//!
//! Blobs travel in batches: a tree of small files makes hundreds of thousands of blobs of a few
//! KiB, and handing each over alone (a wake-up of the next thread, often a context switch) cost
//! more than compressing it.

use crate::compress;
use crate::crypto::{blob_associated_data, RepositoryKeys, NONCE_BYTES, TAG_BYTES};
use crate::format::pack::{ClosedPack, PackBuilder, PackEntry};
use crate::ids::{BlobId, BlobKind, PackId};
use crossbeam_channel::{Receiver, Sender};

/// Bytes in front of a job's plaintext: room for the nonce and the codec byte, so that the blob
/// is encoded and sealed in the same buffer.
pub const JOB_FRONT_BYTES: usize = NONCE_BYTES + 1;

/// A new blob's plaintext, on its way to a worker.
pub struct BlobJob {
    pub kind: BlobKind,
    pub id: BlobId,
    /// [`JOB_FRONT_BYTES`] of room, then the plaintext (or, as [`Payload`] says, the nonce's room
    /// and the blob already encoded); the same buffer travels on as the sealed blob and comes
    /// back to the walker through the [`Recycler`].
    pub buffer: Vec<u8>,
    pub payload: Payload,
}

impl BlobJob {
    /// A job of `buffer`: [`JOB_FRONT_BYTES`] of room, then the plaintext.
    pub fn plaintext(kind: BlobKind, id: BlobId, buffer: Vec<u8>) -> BlobJob {
        BlobJob {
            kind,
            id,
            buffer,
            payload: Payload::Plaintext,
        }
    }
}

/// What a job's buffer holds after its room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// The plaintext, compressed by the sealing thread when that saves space.
    Plaintext,
    /// The codec byte and body another repository stored, of a plaintext `raw_length` bytes long:
    /// a copy passes it through, so it is not compressed a second time.
    Encoded { raw_length: u32 },
}

/// New blobs handed over together: closed at [`BATCH_BYTES`] of plaintext or [`BATCH_BLOBS`]
/// blobs, so a large chunk travels alone and small ones in dozens.
pub type JobBatch = Vec<BlobJob>;

/// The plaintext bytes at which a batch is handed over (a minimum chunk).
pub const BATCH_BYTES: usize = 256 * 1024;

/// The blobs at which a batch is handed over.
pub const BATCH_BLOBS: usize = 64;

/// Buffers handed back for reuse: a backup moves every new blob through one buffer from the
/// walker to the packer, and back. A fixed number of them exists, so memory does not follow the
/// data, and none is allocated (nor its pages faulted in) per blob.
#[derive(Clone)]
pub struct Recycler {
    returned: Sender<Vec<u8>>,
    free: Receiver<Vec<u8>>,
}

impl Recycler {
    /// Keeps at most `buffers` buffers for reuse.
    pub fn new(buffers: usize) -> Recycler {
        let (returned, free) = crossbeam_channel::bounded(buffers.max(1));
        Recycler { returned, free }
    }

    /// A buffer, empty, reused when one is free.
    pub fn take(&self) -> Vec<u8> {
        self.free.try_recv().unwrap_or_default()
    }

    /// Gives a buffer back (it is dropped when enough are kept already). A buffer that grew for
    /// a rare large blob and last held a small one is shrunk first: on a tree of small files a
    /// few large ones would otherwise leave every kept buffer at the largest chunk's size.
    pub fn give(&self, mut buffer: Vec<u8>) {
        let used = buffer.len();
        buffer.clear();
        if buffer.capacity() > KEEP_SMALL_BYTES && used < buffer.capacity() / 8 {
            buffer.shrink_to(used.max(KEEP_SMALL_BYTES));
        }
        let _ = self.returned.try_send(buffer);
    }
}

/// What a kept buffer may stay at after holding a small blob (at least a minimum chunk, so that
/// buffers of large files are not shrunk for each file's last, short chunk).
const KEEP_SMALL_BYTES: usize = 256 * 1024;

/// Tree packs close at this share of the pack target (trees are a small part of a backup, and
/// the pack of trees being filled is held beside the data pack for the whole walk).
const TREE_PACK_SHARE: usize = 4;

/// A compressed and sealed blob, on its way to the packer.
pub struct SealedBlob {
    pub kind: BlobKind,
    pub id: BlobId,
    pub sealed: Vec<u8>,
    pub raw_length: u32,
}

/// A pack's bytes, handed back to the packer's pool when the last reference to them is dropped
/// (once stored): packs are filled into the same few buffers, whose pages are not faulted in and
/// zeroed again for every pack.
struct PooledPack {
    bytes: Vec<u8>,
    pool: Recycler,
}

impl AsRef<[u8]> for PooledPack {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for PooledPack {
    fn drop(&mut self) {
        self.pool.give(std::mem::take(&mut self.bytes));
    }
}

/// A closed pack, on its way to the uploader.
pub struct FinishedPack {
    pub id: PackId,
    pub bytes: bytes::Bytes,
    pub entries: Vec<PackEntry>,
    /// Its share of the memory budget for packs in flight, given back once it is stored.
    pub budget: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// Compresses and seals batches of jobs until the job channel closes.
pub fn run_worker(keys: RepositoryKeys, jobs: Receiver<JobBatch>, sealed: Sender<Vec<SealedBlob>>) {
    let mut encoder = compress::Encoder::default();
    for batch in jobs {
        let blobs = batch
            .into_iter()
            .map(|job| seal(&keys, &mut encoder, job))
            .collect();
        if sealed.send(blobs).is_err() {
            return; // the packer stopped: the backup is failing, its error is reported elsewhere
        }
    }
}

/// Encodes and seals a job's blob where it lies: no copy of the data, no buffer per blob.
fn seal(keys: &RepositoryKeys, encoder: &mut compress::Encoder, job: BlobJob) -> SealedBlob {
    let mut buffer = job.buffer;
    let raw_length = match job.payload {
        Payload::Plaintext => {
            let raw_length = (buffer.len() - JOB_FRONT_BYTES) as u32;
            encoder.encode_in_place(&mut buffer, NONCE_BYTES);
            raw_length
        }
        Payload::Encoded { raw_length } => raw_length,
    };
    buffer.reserve_exact(TAG_BYTES);
    keys.sealer
        .seal_in_place(&mut buffer, &blob_associated_data(job.kind, &job.id));
    SealedBlob {
        kind: job.kind,
        id: job.id,
        sealed: buffer,
        raw_length,
    }
}

/// Gathers sealed blobs into packs (data and trees apart, so that reading trees stays cheap) and
/// hands each full pack to `send_pack`. Returns false when the receiver went away.
pub fn run_packer(
    keys: RepositoryKeys,
    pack_target_bytes: usize,
    sealed: Receiver<Vec<SealedBlob>>,
    blob_buffers: &Recycler,
    mut send_pack: impl FnMut(FinishedPack) -> bool,
) -> bool {
    // Data: one being filled, one waiting for its share of the upload budget, those being
    // uploaded. Trees: smaller packs, in buffers of their own.
    let data = PackKind::new(pack_target_bytes, 3);
    let trees = PackKind::new((pack_target_bytes / TREE_PACK_SHARE).max(1), 2);
    let finished = |builder: PackBuilder, kind: &PackKind| {
        let ClosedPack { id, bytes, entries } = builder.finish(&keys.sealer);
        FinishedPack {
            id,
            bytes: bytes::Bytes::from_owner(PooledPack {
                bytes,
                pool: kind.buffers.clone(),
            }),
            entries,
            budget: None,
        }
    };
    let mut data_pack = Some(data.builder());
    let mut tree_pack = None;
    for blob in sealed.into_iter().flatten() {
        let (slot, kind) = match blob.kind {
            BlobKind::Data => (&mut data_pack, &data),
            BlobKind::Tree => (&mut tree_pack, &trees),
        };
        let builder = slot.get_or_insert_with(|| kind.builder());
        builder.add(blob.kind, blob.id, &blob.sealed, blob.raw_length);
        blob_buffers.give(blob.sealed);
        if builder.len_bytes() >= kind.target_bytes {
            // The next pack is started only once this one is handed over, which waits for an
            // earlier one to be stored: its buffer is then back in the pool for the next.
            let full = slot.take().expect("the builder was just filled");
            if !send_pack(finished(full, kind)) {
                return false;
            }
        }
    }
    for (builder, kind) in [(data_pack, &data), (tree_pack, &trees)] {
        let Some(builder) = builder.filter(|builder| !builder.is_empty()) else {
            continue;
        };
        if !send_pack(finished(builder, kind)) {
            return false;
        }
    }
    true
}

/// Packs of one kind of blob: when they close, and the buffers they are filled into.
struct PackKind {
    target_bytes: usize,
    buffers: Recycler,
}

impl PackKind {
    fn new(target_bytes: usize, buffers: usize) -> PackKind {
        PackKind {
            target_bytes,
            buffers: Recycler::new(buffers),
        }
    }

    /// An empty pack in a reused buffer, with room for the target and a large last blob.
    fn builder(&self) -> PackBuilder {
        let mut buffer = self.buffers.take();
        buffer.reserve_exact(self.target_bytes + self.target_bytes / 4);
        PackBuilder::with_buffer(buffer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::MasterKey;

    #[test]
    fn a_buffer_grown_for_a_large_blob_is_shrunk_once_it_held_a_small_one() {
        let buffers = Recycler::new(2);
        let mut buffer = buffers.take();
        buffer.resize(4 << 20, 1);
        buffers.give(buffer);
        let mut buffer = buffers.take();
        assert!(
            buffer.capacity() >= 4 << 20,
            "kept at its size after a large blob"
        );
        buffer.resize(10_000, 1);
        buffers.give(buffer);
        let buffer = buffers.take();
        assert_eq!(buffer.capacity(), KEEP_SMALL_BYTES);
        assert!(buffer.is_empty());
    }

    #[test]
    fn a_buffer_that_held_a_blob_near_its_size_keeps_it() {
        let buffers = Recycler::new(1);
        let mut buffer = buffers.take();
        buffer.resize(1 << 20, 1);
        buffer.truncate(300 << 10);
        buffers.give(buffer);
        assert!(buffers.take().capacity() >= 1 << 20);
    }

    /// Sealed blobs of `kind`, `count` of `length` bytes each.
    fn blobs(kind: BlobKind, count: usize, length: usize) -> Vec<SealedBlob> {
        (0..count)
            .map(|n| {
                let mut id = [0u8; 32];
                id[..8].copy_from_slice(&(n as u64).to_le_bytes());
                id[8] = kind.code();
                SealedBlob {
                    kind,
                    id: BlobId::from_bytes(id),
                    sealed: vec![n as u8; length],
                    raw_length: length as u32,
                }
            })
            .collect()
    }

    #[test]
    fn tree_packs_close_at_a_quarter_of_the_target_and_data_packs_at_the_target() {
        let target = 1 << 20;
        let (sealed_tx, sealed_rx) = crossbeam_channel::unbounded();
        let mut sent = Vec::new();
        for blob in blobs(BlobKind::Data, 100, 32 << 10)
            .into_iter()
            .zip(blobs(BlobKind::Tree, 100, 8 << 10))
            .flat_map(|(data, tree)| [data, tree])
        {
            sealed_tx.send(vec![blob]).unwrap();
        }
        drop(sealed_tx);
        let keys = MasterKey::generate().derive();
        let done = run_packer(keys, target, sealed_rx, &Recycler::new(1), |pack| {
            let kind = pack.entries[0].kind;
            assert!(pack.entries.iter().all(|entry| entry.kind == kind));
            sent.push((kind, pack.bytes.len(), pack.entries.len()));
            true
        });
        assert!(done);
        let of = |kind| -> Vec<(usize, usize)> {
            sent.iter()
                .filter(|(k, _, _)| *k == kind)
                .map(|&(_, bytes, blobs)| (bytes, blobs))
                .collect()
        };
        let (data, trees) = (of(BlobKind::Data), of(BlobKind::Tree));
        // 100 blobs of 32 KiB: three full packs of 32, one of the 4 left.
        assert_eq!(
            data.iter().map(|p| p.1).collect::<Vec<_>>(),
            [32, 32, 32, 4]
        );
        // 100 of 8 KiB: full packs of 32 (a quarter of the target), one of the 4 left.
        assert_eq!(
            trees.iter().map(|p| p.1).collect::<Vec<_>>(),
            [32, 32, 32, 4]
        );
        assert!(trees[..3].iter().all(|&(bytes, _)| bytes >= target / 4));
        assert!(trees[..3].iter().all(|&(bytes, _)| bytes < target / 2));
    }
}
