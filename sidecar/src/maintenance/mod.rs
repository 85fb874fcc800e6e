//! Keeping a repository small, sound and usable for years: retention (`forget`), garbage
//! collection (`prune`), verification (`check`), password rotation (`keys`), tags (`tag`)
//! and rebuilding the index (`repair`).

pub mod check;
pub mod forget;
pub mod keys;
pub mod protect;
pub mod prune;
pub mod repair;
pub mod repair_snapshots;
pub mod retention;
pub mod tag;
pub mod usage;

/// The stored size of a pack from its index entries: the blobs, the sealed header (a version byte
/// and 41 bytes per blob, plus 28 bytes of seal) and the 4-byte header length.
pub fn expected_pack_size(pack: &crate::format::index::IndexedPack) -> u64 {
    let blobs: u64 = pack.blobs.iter().map(|b| b.length as u64).sum();
    blobs + 1 + 41 * pack.blobs.len() as u64 + crate::crypto::SEAL_OVERHEAD_BYTES as u64 + 4
}
