//! The CPU stages of a backup: worker threads compress and seal blobs; the packer gathers them
//! into packs. Bounded channels between the stages keep memory flat and give back-pressure.

use crate::compress;
use crate::crypto::{blob_associated_data, RepositoryKeys};
use crate::format::pack::{PackBuilder, PackEntry};
use crate::ids::{BlobId, BlobKind};
use crossbeam_channel::{Receiver, Sender};

/// A new blob's plaintext, on its way to a worker.
pub struct BlobJob {
    pub kind: BlobKind,
    pub id: BlobId,
    pub plaintext: Vec<u8>,
}

/// A compressed and sealed blob, on its way to the packer.
pub struct SealedBlob {
    pub kind: BlobKind,
    pub id: BlobId,
    pub sealed: Vec<u8>,
    pub raw_length: u32,
}

/// A closed pack, on its way to the uploader.
pub struct FinishedPack {
    pub bytes: Vec<u8>,
    pub entries: Vec<PackEntry>,
}

/// Compresses and seals jobs until the job channel closes.
pub fn run_worker(keys: RepositoryKeys, jobs: Receiver<BlobJob>, sealed: Sender<SealedBlob>) {
    let mut compressor = compress::new_compressor();
    for job in jobs {
        let encoded = compress::encode(&job.plaintext, &mut compressor);
        let blob = SealedBlob {
            kind: job.kind,
            id: job.id,
            sealed: keys
                .sealer
                .seal(&encoded, &blob_associated_data(job.kind, &job.id)),
            raw_length: job.plaintext.len() as u32,
        };
        if sealed.send(blob).is_err() {
            return; // the packer stopped: the backup is failing, its error is reported elsewhere
        }
    }
}

/// Gathers sealed blobs into packs (data and trees apart, so that reading trees stays cheap) and
/// hands each full pack to `send_pack`. Returns false when the receiver went away.
pub fn run_packer(
    keys: RepositoryKeys,
    pack_target_bytes: usize,
    sealed: Receiver<SealedBlob>,
    mut send_pack: impl FnMut(FinishedPack) -> bool,
) -> bool {
    let new_builder = || PackBuilder::with_capacity(pack_target_bytes + pack_target_bytes / 4);
    let mut data_pack = new_builder();
    let mut tree_pack = PackBuilder::default();
    for blob in sealed {
        let builder = match blob.kind {
            BlobKind::Data => &mut data_pack,
            BlobKind::Tree => &mut tree_pack,
        };
        builder.add(blob.kind, blob.id, &blob.sealed, blob.raw_length);
        if builder.len_bytes() >= pack_target_bytes {
            let full = std::mem::replace(
                builder,
                if blob.kind == BlobKind::Data {
                    new_builder()
                } else {
                    PackBuilder::default()
                },
            );
            let (bytes, entries) = full.finish(&keys.sealer);
            if !send_pack(FinishedPack { bytes, entries }) {
                return false;
            }
        }
    }
    for builder in [data_pack, tree_pack] {
        if !builder.is_empty() {
            let (bytes, entries) = builder.finish(&keys.sealer);
            if !send_pack(FinishedPack { bytes, entries }) {
                return false;
            }
        }
    }
    true
}
