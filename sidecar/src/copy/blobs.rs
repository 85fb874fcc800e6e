//! A data blob on its way from the copy's source to its destination, in the form it is stored:
//! opened with the source's key, checked against its id, named under the destination's keys, and
//! handed to the destination's sealing threads still compressed. The plaintext is the same in both
//! repositories, so compressing it again would only cost the time (a quarter of a first copy's).

use crate::backend::ObjectKind;
use crate::compress::Decoder;
use crate::crypto::{blob_associated_data, RepositoryKeys, NONCE_BYTES};
use crate::error::{Error, Result};
use crate::ids::{BlobId, BlobKind};
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

/// Reads data blob `id` of `source` into `buffer` (a kept one: the blob goes on in it to the
/// destination's pack and comes back), opens and checks it, and names it under `destination`.
pub(super) async fn read_passing(
    source: &IndexedRepository,
    destination: &RepositoryKeys,
    id: BlobId,
    context: &str,
    buffer: Vec<u8>,
) -> Result<PassedBlob> {
    let location = source.index().get(&id).ok_or_else(|| Error::BlobMissing {
        id,
        context: source.missing_blob_context(context),
    })?;
    let sealed = (source.backend())
        .read_range_into(
            ObjectKind::Data,
            &location.pack.to_hex(),
            location.offset as u64,
            location.length as u64,
            buffer,
        )
        .await?;
    let keys = (source.keys().clone(), destination.clone());
    let what = format!("blob {id} in pack {}", location.pack);
    tokio::task::spawn_blocking(move || {
        pass(&keys.0, &keys.1, id, sealed, location.raw_length, &what)
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
