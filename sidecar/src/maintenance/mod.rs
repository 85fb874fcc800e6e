//! Keeping a repository small, sound and usable for years: retention (`forget`), garbage
//! collection (`prune`), verification (`check`) and password rotation (`keys`).

pub mod check;
pub mod forget;
pub mod keys;
pub mod prune;

use crate::backend::ObjectKind;
use crate::error::Result;
use crate::format::index::IndexFile;
use crate::ids::ObjectId;
use crate::repository::Repository;
use futures::{StreamExt, TryStreamExt};

/// Every index object that is in force (not superseded), with its id.
pub async fn load_index_files(repo: &Repository) -> Result<Vec<(ObjectId, IndexFile)>> {
    let ids = repo.list_ids(ObjectKind::Index).await?;
    let files: Vec<(ObjectId, IndexFile)> = futures::stream::iter(ids)
        .map(|id| async move { repo.read_object::<IndexFile>(ObjectKind::Index, &id).await.map(|f| (id, f)) })
        .buffer_unordered(8)
        .try_collect()
        .await?;
    let superseded: std::collections::HashSet<ObjectId> =
        files.iter().flat_map(|(_, file)| file.supersedes.iter().copied()).collect();
    Ok(files.into_iter().filter(|(id, _)| !superseded.contains(id)).collect())
}

/// The stored size of a pack from its index entries: the blobs, the sealed header (a version byte
/// and 41 bytes per blob, plus 28 bytes of seal) and the 4-byte header length.
pub fn expected_pack_size(pack: &crate::format::index::IndexedPack) -> u64 {
    let blobs: u64 = pack.blobs.iter().map(|b| b.length as u64).sum();
    blobs + 1 + 41 * pack.blobs.len() as u64 + crate::crypto::SEAL_OVERHEAD_BYTES as u64 + 4
}
