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

/// The packs the repository stores, by the ids their names hold (an object whose name is no pack
/// id is left out).
pub async fn stored_packs(
    repo: &crate::repository::IndexedRepository,
) -> crate::error::Result<std::collections::HashSet<crate::ids::PackId>> {
    Ok(repo
        .backend()
        .list(crate::backend::ObjectKind::Data)
        .await?
        .into_iter()
        .filter_map(|info| info.name.parse().ok())
        .collect())
}

/// The stored size of a pack from its index entries: the blobs, the sealed header (a version byte
/// and 41 bytes per blob, plus 28 bytes of seal) and the 4-byte header length.
pub fn expected_pack_size(pack: &crate::format::index::IndexedPack) -> u64 {
    let blobs: u64 = pack.blobs.iter().map(|b| b.length as u64).sum();
    blobs + 1 + 41 * pack.blobs.len() as u64 + crate::crypto::SEAL_OVERHEAD_BYTES as u64 + 4
}
