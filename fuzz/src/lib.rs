//! What the fuzz targets share: one fixed repository key, and the sealing that lets a target
//! reach the decoders behind authentication.
//!
//! Every object in a repository is authenticated, so random bytes stop at the AEAD check. Each
//! target therefore feeds its input twice: as the stored bytes (the path a hostile server
//! controls), and sealed with the fixed key (the bytes a decoder sees once authentication passed:
//! what a writer with the key, or a bug, could store).

use neverwiped::backend::ObjectKind;
use neverwiped::crypto::{MasterKey, RepositoryKeys};
use std::sync::OnceLock;

/// The key every target seals and opens with.
pub fn keys() -> &'static RepositoryKeys {
    static KEYS: OnceLock<RepositoryKeys> = OnceLock::new();
    KEYS.get_or_init(|| MasterKey::from_bytes([0x5a; 32]).derive())
}

/// The associated data of a metadata object, as `docs/repository-format.md` specifies it.
pub fn object_associated_data(kind: ObjectKind) -> Vec<u8> {
    format!("neverwiped/object/v1/{}", kind.dir_name()).into_bytes()
}

/// The associated data of a pack's header.
pub const PACK_HEADER_ASSOCIATED_DATA: &[u8] = b"neverwiped/pack-header/v1";

/// Opens `data` as a stored metadata object of `kind`, then as the encoding (codec byte and
/// body) inside one.
pub fn open_object_both_ways<T: serde::de::DeserializeOwned>(kind: ObjectKind, data: &[u8]) {
    let sealer = &keys().sealer;
    let _ = neverwiped::format::open_object::<T>(sealer, kind, data, "fuzzed object");
    let sealed = sealer.seal(data, &object_associated_data(kind));
    let _ = neverwiped::format::open_object::<T>(sealer, kind, &sealed, "fuzzed object");
}

/// Splits a little-endian `u32` off the front of `data`.
pub fn split_u32(data: &[u8]) -> Option<(u32, &[u8])> {
    let (front, rest) = data.split_at_checked(4)?;
    Some((u32::from_le_bytes(front.try_into().ok()?), rest))
}
