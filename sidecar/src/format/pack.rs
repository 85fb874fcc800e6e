//! Packs: many sealed blobs in one object, followed by a sealed header that lists them.
//!
//! ```text
//! blob 0 (sealed) ‖ blob 1 (sealed) ‖ … ‖ header (sealed) ‖ header length (u32 little-endian)
//! ```
//! The header's plaintext is a version byte (1) and one 41-byte entry per blob, in order:
//! kind (u8: 0 data, 1 tree) ‖ blob id (32 bytes) ‖ stored length (u32 LE) ‖ raw length (u32 LE).
//! Offsets follow from the order: each blob starts where the previous one ends.

use super::FormatError;
use crate::crypto::Sealer;
use crate::ids::{BlobId, BlobKind, PackId};
use sha2::{Digest, Sha256};

const HEADER_VERSION: u8 = 1;
const ENTRY_BYTES: usize = 1 + 32 + 4 + 4;
const HEADER_ASSOCIATED_DATA: &[u8] = b"neverwiped/pack-header/v1";

/// One blob of a pack, where it is and how long it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackEntry {
    pub kind: BlobKind,
    pub id: BlobId,
    pub offset: u32,
    /// Bytes in the pack (sealed).
    pub length: u32,
    /// Bytes of the blob's plaintext content (after decompression).
    pub raw_length: u32,
}

/// A pack being filled.
#[derive(Default)]
pub struct PackBuilder {
    data: Vec<u8>,
    entries: Vec<PackEntry>,
    /// The pack's id (SHA-256 of its bytes), hashed as blobs are added: while the pack fills,
    /// not on the way to its upload.
    hasher: Sha256,
}

/// A closed pack: its id, stored bytes and the blobs it holds.
pub struct ClosedPack {
    pub id: PackId,
    pub bytes: Vec<u8>,
    pub entries: Vec<PackEntry>,
}

impl PackBuilder {
    pub fn with_capacity(bytes: usize) -> PackBuilder {
        PackBuilder::with_buffer(Vec::with_capacity(bytes))
    }

    /// A pack filled into `buffer` (emptied first), so that a writer can reuse the buffers of
    /// packs it has sent.
    pub fn with_buffer(mut buffer: Vec<u8>) -> PackBuilder {
        buffer.clear();
        PackBuilder {
            data: buffer,
            entries: Vec::new(),
            hasher: Sha256::new(),
        }
    }

    /// Appends a sealed blob.
    pub fn add(&mut self, kind: BlobKind, id: BlobId, sealed: &[u8], raw_length: u32) {
        self.entries.push(PackEntry {
            kind,
            id,
            offset: self.data.len() as u32,
            length: sealed.len() as u32,
            raw_length,
        });
        self.data.extend_from_slice(sealed);
        self.hasher.update(sealed);
    }

    pub fn len_bytes(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Closes the pack: appends the sealed header and its length.
    pub fn finish(mut self, sealer: &Sealer) -> ClosedPack {
        let mut header = Vec::with_capacity(1 + self.entries.len() * ENTRY_BYTES);
        header.push(HEADER_VERSION);
        for entry in &self.entries {
            header.push(entry.kind.code());
            header.extend_from_slice(entry.id.as_bytes());
            header.extend_from_slice(&entry.length.to_le_bytes());
            header.extend_from_slice(&entry.raw_length.to_le_bytes());
        }
        let sealed_header = sealer.seal(&header, HEADER_ASSOCIATED_DATA);
        let header_length = (sealed_header.len() as u32).to_le_bytes();
        for tail in [&sealed_header[..], &header_length] {
            self.data.extend_from_slice(tail);
            self.hasher.update(tail);
        }
        ClosedPack {
            id: PackId::from_bytes(self.hasher.finalize().into()),
            bytes: self.data,
            entries: self.entries,
        }
    }
}

/// Reads the entries of a stored pack from its trailing header (`tail` holds at least the header
/// and the length; `pack_len` is the whole pack's size).
pub fn read_header(
    sealer: &Sealer,
    pack: &[u8],
    what: &str,
) -> Result<Vec<PackEntry>, FormatError> {
    if pack.len() < 4 {
        return Err(FormatError::invalid(what, "too short to be a pack"));
    }
    let (rest, length_bytes) = pack.split_at(pack.len() - 4);
    let header_len = u32::from_le_bytes(length_bytes.try_into().expect("4 bytes")) as usize;
    if header_len > rest.len() {
        return Err(FormatError::invalid(
            what,
            format!("header length {header_len} exceeds the pack"),
        ));
    }
    let (blobs, sealed_header) = rest.split_at(rest.len() - header_len);
    let header = sealer.open(
        sealed_header,
        HEADER_ASSOCIATED_DATA,
        &format!("the header of {what}"),
    )?;
    let (&version, body) = header
        .split_first()
        .ok_or_else(|| FormatError::invalid(what, "empty header"))?;
    if version != HEADER_VERSION || body.len() % ENTRY_BYTES != 0 {
        return Err(FormatError::invalid(
            what,
            "unknown header version or length",
        ));
    }
    let mut entries = Vec::with_capacity(body.len() / ENTRY_BYTES);
    let mut offset = 0u32;
    for raw in body.chunks_exact(ENTRY_BYTES) {
        let kind = BlobKind::from_code(raw[0])
            .ok_or_else(|| FormatError::invalid(what, "unknown blob kind"))?;
        let id = BlobId::from_bytes(raw[1..33].try_into().expect("32 bytes"));
        let length = u32::from_le_bytes(raw[33..37].try_into().expect("4 bytes"));
        let raw_length = u32::from_le_bytes(raw[37..41].try_into().expect("4 bytes"));
        entries.push(PackEntry {
            kind,
            id,
            offset,
            length,
            raw_length,
        });
        offset = offset
            .checked_add(length)
            .filter(|end| *end as usize <= blobs.len())
            .ok_or_else(|| {
                FormatError::invalid(what, "header lists blobs past the end of the pack")
            })?;
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::MasterKey;

    #[test]
    fn a_pack_lists_its_blobs_and_they_open() {
        let keys = MasterKey::generate().derive();
        let mut builder = PackBuilder::default();
        let mut expected = Vec::new();
        for (i, text) in [&b"first"[..], b"second blob", b""].iter().enumerate() {
            let kind = if i == 1 {
                BlobKind::Tree
            } else {
                BlobKind::Data
            };
            let id = keys.blob_id(kind, text);
            let sealed = keys
                .sealer
                .seal(text, &crate::crypto::blob_associated_data(kind, &id));
            builder.add(kind, id, &sealed, text.len() as u32);
            expected.push((kind, id, text.to_vec()));
        }
        let ClosedPack { id, bytes, entries } = builder.finish(&keys.sealer);
        // The id hashed along the way is the SHA-256 of the whole pack.
        assert_eq!(id, PackId::of_bytes(&bytes));
        let parsed = read_header(&keys.sealer, &bytes, "pack p").unwrap();
        assert_eq!(parsed, entries);
        for (entry, (kind, id, text)) in parsed.iter().zip(expected) {
            assert_eq!((entry.kind, entry.id), (kind, id));
            let sealed = &bytes[entry.offset as usize..(entry.offset + entry.length) as usize];
            let aad = crate::crypto::blob_associated_data(kind, &id);
            assert_eq!(keys.sealer.open(sealed, &aad, "blob").unwrap(), text);
        }
    }

    #[test]
    fn golden_pack_layout() {
        let keys = MasterKey::generate().derive();
        let mut builder = PackBuilder::default();
        let id = BlobId::from_bytes([0xaa; 32]);
        builder.add(BlobKind::Data, id, &[1, 2, 3], 2);
        let bytes = builder.finish(&keys.sealer).bytes;
        // 3 blob bytes, a sealed 42-byte header (28 bytes of overhead), then the length.
        assert_eq!(bytes.len(), 3 + 42 + 28 + 4);
        assert_eq!(&bytes[..3], &[1, 2, 3]);
        assert_eq!(
            u32::from_le_bytes(bytes[bytes.len() - 4..].try_into().unwrap()),
            70
        );
        let header = keys
            .sealer
            .open(&bytes[3..73], b"neverwiped/pack-header/v1", "h")
            .unwrap();
        let mut golden = vec![1u8, 0];
        golden.extend_from_slice(&[0xaa; 32]);
        golden.extend_from_slice(&[3, 0, 0, 0, 2, 0, 0, 0]);
        assert_eq!(header, golden);
    }

    #[test]
    fn a_corrupt_header_is_named() {
        let keys = MasterKey::generate().derive();
        let mut builder = PackBuilder::default();
        builder.add(BlobKind::Data, BlobId::from_bytes([1; 32]), &[9; 40], 10);
        let mut bytes = builder.finish(&keys.sealer).bytes;
        let at = bytes.len() - 10;
        bytes[at] ^= 1;
        let error = read_header(&keys.sealer, &bytes, "pack 1234")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("the header of pack 1234 failed authentication"),
            "{error}"
        );
        assert!(read_header(&keys.sealer, &[1, 2], "pack 1234").is_err());
    }
}
