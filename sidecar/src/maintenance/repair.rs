//! `repair index`: the index written again from what the packs hold, as restic's `repair index`.
//! Entries of packs that are gone are dropped; packs no index lists (or, with `read_all_packs`,
//! every pack) are read and their headers indexed; a pack whose stored size differs from what
//! its entries add up to is read again. The new index objects are written first, then one object
//! that supersedes the old ones, then the old ones are removed: a crash leaves the old index or
//! the new one in force, never neither. The caller holds the exclusive lock.

use super::expected_pack_size;
use super::prune::{retire_index_objects, BLOBS_PER_INDEX_OBJECT, PACKS_PER_INDEX_OBJECT};
use crate::backend::ObjectKind;
use crate::error::Result;
use crate::format::index::{IndexFile, IndexedBlob, IndexedPack};
use crate::format::pack::read_header;
use crate::ids::{ObjectId, PackId};
use crate::repository::Repository;
use std::collections::{BTreeMap, BTreeSet};

/// What `repair index` found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexRepair {
    /// Packs whose headers were read.
    pub packs_read: u64,
    /// Packs listed by the old index that are not stored: their entries are dropped.
    pub packs_missing: Vec<PackId>,
    /// Packs stored that no index listed, now indexed.
    pub packs_added: Vec<PackId>,
    /// Packs whose header could not be read, with why: left out of the index (and stored).
    pub packs_unreadable: Vec<(PackId, String)>,
    /// Packs in the new index, and the blobs they hold.
    pub packs_indexed: u64,
    pub blobs_indexed: u64,
    /// Index objects replaced (those in force, and damaged ones).
    pub index_objects_removed: u64,
}

/// Rebuilds the index of `repo` from its packs; see the module's documentation.
pub async fn repair_index(repo: &Repository, read_all_packs: bool) -> Result<IndexRepair> {
    let mut report = IndexRepair::default();
    let stored: BTreeMap<PackId, u64> = repo
        .backend()
        .list(ObjectKind::Data)
        .await?
        .into_iter()
        .filter_map(|info| Some((info.name.parse().ok()?, info.size_bytes)))
        .collect();
    let old_objects = repo.list_ids(ObjectKind::Index).await?;
    // What the old index says of each pack, first listing kept.
    let mut listed: BTreeMap<PackId, Vec<IndexedBlob>> = BTreeMap::new();
    for (_, file) in repo.index_files().await? {
        for pack in file.packs {
            listed.entry(pack.id).or_insert(pack.blobs);
        }
    }
    // The listed packs that are stored with the size their entries add up to are trusted.
    let mut packs: Vec<IndexedPack> = Vec::new();
    for (id, blobs) in listed.iter() {
        let Some(&size) = stored.get(id) else {
            report.packs_missing.push(*id);
            continue;
        };
        let pack = IndexedPack {
            id: *id,
            blobs: blobs.clone(),
        };
        if !read_all_packs && expected_pack_size(&pack) == size {
            packs.push(pack);
        }
    }
    let trusted: BTreeSet<PackId> = packs.iter().map(|pack| pack.id).collect();
    for id in stored.keys().filter(|id| !trusted.contains(id)) {
        report.packs_read += 1;
        match read_pack(repo, id).await {
            Ok(pack) => {
                if !listed.contains_key(id) {
                    report.packs_added.push(*id);
                }
                packs.push(pack);
            }
            Err(reason) => report.packs_unreadable.push((*id, reason)),
        }
    }
    report.packs_indexed = packs.len() as u64;
    report.blobs_indexed = packs.iter().map(|p| p.blobs.len() as u64).sum();
    write_index(repo, packs).await?;
    retire_index_objects(repo, &old_objects).await?;
    report.index_objects_removed = old_objects.len() as u64;
    Ok(report)
}

/// Writes `packs` into new index objects of the sizes prune writes.
async fn write_index(repo: &Repository, packs: Vec<IndexedPack>) -> Result<()> {
    let mut file = IndexFile::default();
    let mut blobs = 0;
    for pack in packs {
        blobs += pack.blobs.len();
        file.packs.push(pack);
        if file.packs.len() >= PACKS_PER_INDEX_OBJECT || blobs >= BLOBS_PER_INDEX_OBJECT {
            repo.write_object(ObjectKind::Index, &std::mem::take(&mut file))
                .await?;
            blobs = 0;
        }
    }
    if !file.packs.is_empty() {
        repo.write_object(ObjectKind::Index, &file).await?;
    }
    Ok(())
}

/// The entries of a stored pack, from its header; the error says why they cannot be had.
async fn read_pack(repo: &Repository, id: &PackId) -> std::result::Result<IndexedPack, String> {
    let what = format!("pack {id}");
    let bytes = repo
        .backend()
        .read(ObjectKind::Data, &id.to_hex())
        .await
        .map_err(|error| error.to_string())?;
    if PackId::from(ObjectId::of_bytes(&bytes)) != *id {
        return Err(format!("{what}: its bytes do not hash to its name"));
    }
    let entries =
        read_header(&repo.keys().sealer, &bytes, &what).map_err(|error| error.to_string())?;
    Ok(IndexedPack {
        id: *id,
        blobs: entries.iter().map(IndexedBlob::from).collect(),
    })
}
