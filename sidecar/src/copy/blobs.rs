//! A data blob on its way from the copy's source to its destination, in the form it is stored:
//! opened with the source's key, checked against its id, named under the destination's keys, and
//! handed to the destination's sealing threads still compressed. The plaintext is the same in both
//! repositories, so compressing it again would only cost the time (a quarter of a first copy's).

use crate::archive::pipeline::Recycler;
use crate::backend::ObjectKind;
use crate::compress::Decoder;
use crate::crypto::{blob_associated_data, RepositoryKeys, NONCE_BYTES};
use crate::error::{Error, Result};
use crate::ids::{BlobId, BlobKind};
use crate::index::BlobLocation;
use crate::repository::IndexedRepository;
use std::cell::RefCell;

/// A data blob as the source stores it, ready for the destination's seal.
pub(super) struct PassedBlob {
    /// Its name under the destination's keys.
    pub id: BlobId,
    /// [`NONCE_BYTES`] of room, then the codec byte and the body: what the seal encrypts.
    pub buffer: Vec<u8>,
    /// The plaintext's length.
    pub raw_length: u32,
}

thread_local! {
    /// One zstd context per blocking thread, kept from blob to blob.
    static DECODER: RefCell<Decoder> = RefCell::new(Decoder::default());
}

/// The plaintext buffer a thread's decoder keeps between blobs: the blocking pool has many
/// threads, and each would otherwise keep the largest blob it decoded.
const KEEP_DECODED_BYTES: usize = 512 * 1024;

/// Blobs that lie one after the other in a pack are read with one request, up to this many
/// bytes: a folder of small files is a few requests, not one per file.
const RUN_BYTES: u64 = 1024 * 1024;

/// A data blob the copy wants, where the source stores it.
pub(super) struct Wanted {
    pub id: BlobId,
    location: BlobLocation,
}

/// Finds each of `ids` in the source's index, in order.
pub(super) fn locate(
    source: &IndexedRepository,
    ids: &[BlobId],
    context: &str,
) -> Result<Vec<Wanted>> {
    let index = source.index();
    let found = ids.iter().map(|&id| match index.get(&id) {
        Some(location) => Ok(Wanted { id, location }),
        None => Err(Error::BlobMissing {
            id,
            context: source.missing_blob_context(context),
        }),
    });
    found.collect()
}

/// Splits `wanted` (in the order the copy needs them) into runs: neighbours in one pack, up to
/// [`RUN_BYTES`] together (a larger blob is a run of its own).
pub(super) fn runs(wanted: Vec<Wanted>) -> Vec<Vec<Wanted>> {
    let mut runs: Vec<Vec<Wanted>> = Vec::new();
    for blob in wanted {
        let joins = runs.last().is_some_and(|run| {
            let (first, last) = (&run[0].location, &run[run.len() - 1].location);
            let end = u64::from(last.offset) + u64::from(last.length);
            last.pack == blob.location.pack
                && end == u64::from(blob.location.offset)
                && end + u64::from(blob.location.length) - u64::from(first.offset) <= RUN_BYTES
        });
        match (joins, runs.last_mut()) {
            (true, Some(run)) => run.push(blob),
            _ => runs.push(vec![blob]),
        }
    }
    runs
}

/// Reads a run of neighbouring data blobs of `source` with one request; each is opened, checked
/// and named under `destination`, in a buffer of `buffers` (it goes on in it to the
/// destination's pack, and comes back).
pub(super) async fn read_run(
    source: &IndexedRepository,
    destination: &RepositoryKeys,
    run: Vec<Wanted>,
    buffers: &Recycler,
) -> Result<Vec<PassedBlob>> {
    let (first, last) = (&run[0].location, &run[run.len() - 1].location);
    let start = u64::from(first.offset);
    let length = u64::from(last.offset) + u64::from(last.length) - start;
    let pack = first.pack;
    let bytes = (source.backend())
        .read_range_into(ObjectKind::Data, &pack.to_hex(), start, length, Vec::new())
        .await?;
    let sealed: Vec<(Wanted, Vec<u8>)> = (run.into_iter())
        .map(|blob| {
            let at = (u64::from(blob.location.offset) - start) as usize;
            let mut buffer = buffers.take();
            buffer.extend_from_slice(&bytes[at..at + blob.location.length as usize]);
            (blob, buffer)
        })
        .collect();
    drop(bytes);
    let keys = (source.keys().clone(), destination.clone());
    tokio::task::spawn_blocking(move || {
        let passed = sealed.into_iter().map(|(blob, sealed)| {
            let what = format!("blob {} in pack {pack}", blob.id);
            pass(
                &keys.0,
                &keys.1,
                blob.id,
                sealed,
                blob.location.raw_length,
                &what,
            )
        });
        passed.collect()
    })
    .await
    .map_err(|e| Error::Interrupted(e.to_string()))?
}

/// Opens `sealed` in place: its front keeps the nonce's room, and the encoded blob follows.
fn pass(
    source: &RepositoryKeys,
    destination: &RepositoryKeys,
    id: BlobId,
    mut sealed: Vec<u8>,
    raw_length: u32,
    what: &str,
) -> Result<PassedBlob> {
    let associated = blob_associated_data(BlobKind::Data, &id);
    let opened = (source.sealer.open_in_place(&mut sealed, &associated, what))
        .map_err(crate::format::FormatError::from)?
        .len();
    sealed.truncate(NONCE_BYTES + opened);
    let copy_id = DECODER.with_borrow_mut(|decoder| -> Result<BlobId> {
        let plaintext = (decoder.decode(&sealed[NONCE_BYTES..], raw_length as usize))
            .map_err(|e| corrupt(what, e.to_string()))?;
        if source.blob_id(BlobKind::Data, plaintext) != id {
            return Err(corrupt(what, "content does not match its id".into()));
        }
        let copy_id = destination.blob_id(BlobKind::Data, plaintext);
        decoder.shed(KEEP_DECODED_BYTES);
        Ok(copy_id)
    })?;
    Ok(PassedBlob {
        id: copy_id,
        buffer: sealed,
        raw_length,
    })
}

fn corrupt(what: &str, reason: String) -> Error {
    Error::Corrupt {
        what: what.to_owned(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::PackId;

    fn at(pack: u8, offset: u32, length: u32) -> Wanted {
        Wanted {
            id: BlobId::from_bytes([offset as u8; 32]),
            location: BlobLocation {
                pack: PackId::from_bytes([pack; 32]),
                kind: BlobKind::Data,
                offset,
                length,
                raw_length: length,
            },
        }
    }

    fn shape(runs: Vec<Vec<Wanted>>) -> Vec<Vec<u32>> {
        let offsets = |run: Vec<Wanted>| run.iter().map(|w| w.location.offset).collect();
        runs.into_iter().map(offsets).collect()
    }

    #[test]
    fn neighbours_in_a_pack_are_one_run_up_to_its_bytes() {
        let kib = 1024;
        let wanted = vec![
            at(1, 0, 100),
            at(1, 100, 50),
            // A gap: a blob another file named, or one the destination has.
            at(1, 200, 10),
            at(1, 210, 10),
            // Another pack.
            at(2, 220, 10),
            // Back in the first pack, but not next to the last read there.
            at(1, 220, 10),
            // Runs stop at 1 MiB; a larger blob is a run of its own.
            at(3, 0, 600 * kib),
            at(3, 600 * kib, 500 * kib),
            at(3, 1100 * kib, 2048 * kib),
        ];
        assert_eq!(
            shape(runs(wanted)),
            [
                vec![0, 100],
                vec![200, 210],
                vec![220],
                vec![220],
                vec![0],
                vec![600 * kib],
                vec![1100 * kib],
            ]
        );
    }
}
