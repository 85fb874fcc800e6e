//! `prune`: remove what no snapshot references, planned first, executed in a crash-safe order.
//!
//! Prune holds an exclusive lock, so no backup runs meanwhile (backups hold shared locks; the
//! operator never schedules the two at once). Order of the steps:
//! 1. repack: copy the still-used blobs of mostly-unused packs into new packs (sealed blobs are
//!    copied as they are; each is opened first so damage is not copied);
//! 2. write the new index objects, then one small index object that supersedes all the old ones;
//! 3. delete the old index objects;
//! 4. delete packs nothing indexes any more.
//!
//! A crash before step 2 ends leaves the old indexes in force (new packs are unindexed garbage);
//! after it, the new ones are. Data is only deleted once no index in force names it.
//!
//! Memory: the loaded index, the used blobs (a sorted array, 32 bytes each) and the trees seen;
//! index objects are read one at a time, in planning and again when the kept packs are written
//! into the new index, so no copy of the whole index is held. Each used blob counts in one pack
//! only, the one the loaded index places it in: a copy elsewhere is unused.

use super::expected_pack_size;
use super::protect::{self, Protected, TreeReader, Window};
use crate::backend::ObjectKind;
use crate::error::{Error, Result};
use crate::format::index::{IndexFile, IndexedBlob, IndexedPack};
use crate::format::pack::{ClosedPack, PackBuilder};
use crate::format::tree::NodeKind;
use crate::ids::{BlobId, ObjectId, PackId, SnapshotId};
use crate::repository::{open_blob, IndexedRepository, Repository};
use bytes::Bytes;
use std::collections::{HashMap, HashSet};

/// A pack with at least this share of unused bytes is repacked.
const REPACK_UNUSED_SHARE: f64 = 0.2;
/// Packs listed per new index object, at most.
pub(super) const PACKS_PER_INDEX_OBJECT: usize = 256;
/// A new index object is written once its packs hold this many blobs (see the uploader's).
pub(super) const BLOBS_PER_INDEX_OBJECT: usize = 8192;

/// The blobs the snapshots need: sorted, no id twice.
#[derive(Debug, Default)]
pub struct UsedBlobs(Vec<BlobId>);

impl UsedBlobs {
    pub fn contains(&self, id: &BlobId) -> bool {
        self.0.binary_search(id).is_ok()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What a prune will do.
#[derive(Debug, Default)]
pub struct PrunePlan {
    /// Packs kept as they are.
    pub keep: Vec<PackId>,
    /// Packs whose used blobs are copied, then deleted.
    pub repack: Vec<IndexedPack>,
    /// Packs with nothing in use, or in no index.
    pub delete: Vec<PackId>,
    pub old_indexes: Vec<ObjectId>,
    /// The index objects in force when planned: the kept packs' entries are read from them.
    pub in_force: Vec<ObjectId>,
    pub used_blobs: UsedBlobs,
    pub bytes_kept: u64,
    pub bytes_freed: u64,
    pub bytes_repacked: u64,
    /// Packs kept as they are because a snapshot inside the protection window needs them, with
    /// the entries the new index lists for each (also in `keep`).
    pub protected: HashMap<PackId, IndexedPack>,
    /// Snapshots inside the protection window.
    pub protected_snapshots: usize,
}

impl PrunePlan {
    /// Whether executing the plan would change nothing: no pack to repack or delete.
    pub fn is_nothing_to_do(&self) -> bool {
        self.repack.is_empty() && self.delete.is_empty()
    }
}

/// The blobs every snapshot but those `gone` needs: trees and file contents.
async fn used_blobs(
    repo: &IndexedRepository,
    trees: &TreeReader,
    gone: &HashSet<SnapshotId>,
) -> Result<UsedBlobs> {
    let mut used = Vec::new();
    let mut distinct = 0;
    let mut trees_seen = HashSet::new();
    let snapshots = repo.snapshots().await?;
    for (_, snapshot) in snapshots.into_iter().filter(|(id, _)| !gone.contains(id)) {
        let mut pending = vec![snapshot.tree];
        while let Some(tree_id) = pending.pop() {
            if !trees_seen.insert(tree_id) {
                continue;
            }
            used.push(tree_id);
            // A tree that cannot be read makes the plan unknowable: stop rather than delete data.
            let tree = trees.read(repo, &tree_id).await?;
            for node in tree.nodes {
                match node.kind {
                    NodeKind::Dir { subtree } => pending.push(subtree),
                    NodeKind::File { content, .. } => used.extend(content),
                    _ => {}
                }
            }
        }
        // Snapshots share most of their files: do not let the repeats pile up.
        if used.len() > 2 * distinct.max(1 << 16) {
            used.sort_unstable();
            used.dedup();
            distinct = used.len();
        }
    }
    used.sort_unstable();
    used.dedup();
    used.shrink_to_fit();
    Ok(UsedBlobs(used))
}

/// Refuses to plan over damaged snapshot or index objects: a snapshot that cannot be read would
/// make its data look unused, and an index that cannot be read hides packs still referenced.
async fn refuse_damage(repo: &IndexedRepository) -> Result<()> {
    let damaged = repo.damaged_objects().await?;
    if damaged.is_empty() {
        return Ok(());
    }
    let names: Vec<String> = damaged.iter().map(ToString::to_string).collect();
    Err(Error::Corrupt {
        what: format!("the repository ({})", names.join(", ")),
        reason: "prune refuses to run while snapshot or index objects cannot be read, since data \
                 they may reference would look unused. Run `check` to see why each fails; once \
                 sure an object is junk, delete it from the repository's storage (credentials \
                 that may delete are needed) and run prune again"
            .into(),
    })
}

pub async fn plan_prune(repo: &IndexedRepository) -> Result<PrunePlan> {
    plan_prune_protecting(repo, None, &HashSet::new()).await
}

/// Plans a prune that, with a `window`, keeps as they are the packs any index object lists for a
/// blob of a snapshot inside it (see [`protect`]). The snapshots `gone` count as forgotten: a dry
/// run's forget leaves them stored, and its plan must be the one the prune would carry out.
pub async fn plan_prune_protecting(
    repo: &IndexedRepository,
    window: Option<&Window>,
    gone: &HashSet<SnapshotId>,
) -> Result<PrunePlan> {
    refuse_damage(repo).await?;
    // The plan reads the index objects the loaded index was built from: make them today's.
    repo.refresh_index().await?;
    let (trees, protected) = match window {
        Some(window) => protect::plan_protection(repo, window).await?,
        None => (TreeReader::loaded_index_only(), Protected::default()),
    };
    let used = used_blobs(repo, &trees, gone).await?;
    // Every index object goes, superseded ones included: were one left behind, deleting the
    // object that supersedes it would bring it back into force.
    let old_indexes = repo.list_ids(ObjectKind::Index).await?;
    let mut plan = PrunePlan {
        old_indexes,
        in_force: repo.index().objects.clone(),
        protected_snapshots: protected.snapshots,
        ..Default::default()
    };
    let mut seen_packs: HashSet<PackId> = protected.packs.keys().copied().collect();
    for pack in protected.packs.values() {
        plan.bytes_kept += expected_pack_size(pack);
        plan.keep.push(pack.id);
    }
    for object in plan.in_force.clone() {
        let file: IndexFile = repo.read_object(ObjectKind::Index, &object).await?;
        for pack in file.packs {
            if seen_packs.insert(pack.id) {
                plan_pack(repo, &used, &mut plan, pack);
            }
        }
    }
    refuse_homeless(repo, &used, &seen_packs, &protected)?;
    plan.protected = protected.packs;
    // Packs no index names (interrupted backups or prunes). Safe to remove under the exclusive lock.
    for info in repo.backend().list(ObjectKind::Data).await? {
        if let Ok(id) = info.name.parse::<PackId>() {
            if !seen_packs.contains(&id) {
                plan.bytes_freed += info.size_bytes;
                plan.delete.push(id);
            }
        }
    }
    plan.used_blobs = used;
    Ok(plan)
}

/// Stops the prune when a used blob has no home among the packs it keeps. A protected blob the
/// loaded index misses (an appended index may claim to supersede the real ones) is at home in a
/// protected pack.
fn refuse_homeless(
    repo: &IndexedRepository,
    used: &UsedBlobs,
    seen_packs: &HashSet<PackId>,
    protected: &Protected,
) -> Result<()> {
    let protected_blobs: HashSet<BlobId> = protected
        .packs
        .values()
        .flat_map(|pack| pack.blobs.iter().map(|blob| blob.id))
        .collect();
    let index = repo.index();
    let homeless = used.0.iter().find(|id| {
        !protected_blobs.contains(id)
            && index
                .get(id)
                .is_none_or(|location| !seen_packs.contains(&location.pack))
    });
    match homeless {
        Some(missing) => Err(Error::BlobMissing {
            id: *missing,
            context: "needed by a snapshot; run `check`, prune stops".into(),
        }),
        None => Ok(()),
    }
}

/// Whether this copy of a blob is the one that serves: used, and where the index places it (a
/// blob stored twice is needed once).
fn serves(repo: &IndexedRepository, used: &UsedBlobs, pack: PackId, blob: &IndexedBlob) -> bool {
    used.contains(&blob.id)
        && repo
            .index()
            .get(&blob.id)
            .is_some_and(|home| home.pack == pack && home.offset == blob.offset)
}

/// Sorts one pack into the plan: kept, repacked or deleted.
fn plan_pack(repo: &IndexedRepository, used: &UsedBlobs, plan: &mut PrunePlan, pack: IndexedPack) {
    let size = expected_pack_size(&pack);
    let used_bytes: u64 = pack
        .blobs
        .iter()
        .filter(|b| serves(repo, used, pack.id, b))
        .map(|b| b.length as u64)
        .sum();
    // Only blobs count as unused: a small pack's header is a large share of it, and a
    // pack repacked for its header would come out of the repack just as small again.
    let blob_bytes: u64 = pack.blobs.iter().map(|b| b.length as u64).sum();
    let unused_bytes = blob_bytes - used_bytes;
    if used_bytes == 0 {
        plan.bytes_freed += size;
        plan.delete.push(pack.id);
    } else if unused_bytes > 0 && unused_bytes as f64 / size as f64 >= REPACK_UNUSED_SHARE {
        plan.bytes_freed += size - used_bytes;
        plan.bytes_repacked += used_bytes;
        plan.repack.push(pack);
    } else {
        plan.bytes_kept += size;
        plan.keep.push(pack.id);
    }
}

/// Bytes freed and kept by an executed prune.
#[derive(Debug, Default, Clone, Copy)]
pub struct PruneReport {
    pub bytes_freed: u64,
    pub bytes_kept: u64,
    pub packs_deleted: u64,
    pub packs_written: u64,
}

pub async fn execute_prune(repo: &IndexedRepository, plan: PrunePlan) -> Result<PruneReport> {
    let mut report = PruneReport::default();
    if plan.is_nothing_to_do() {
        // Rewriting the index would free nothing: a prune with nothing to do writes nothing.
        report.bytes_kept = plan.bytes_kept;
        return Ok(report);
    }
    let mut new_packs: Vec<IndexedPack> = Vec::new();

    // 1. Repack the used blobs of mostly-unused packs: each blob from where the index places it,
    //    so that none is copied twice, nor one a kept pack holds.
    let target = repo.params().pack_target_bytes as usize;
    let mut builder = PackBuilder::with_capacity(target);
    for pack in &plan.repack {
        for blob in pack
            .blobs
            .iter()
            .filter(|b| serves(repo, &plan.used_blobs, pack.id, b))
        {
            let sealed = repo
                .backend()
                .read_range(
                    ObjectKind::Data,
                    &pack.id.to_hex(),
                    blob.offset as u64,
                    blob.length as u64,
                )
                .await?;
            let what = format!("blob {} in pack {}", blob.id, pack.id);
            open_blob(
                repo.keys(),
                blob.kind,
                &blob.id,
                &sealed,
                blob.raw_length,
                &what,
            )?;
            builder.add(blob.kind, blob.id, &sealed, blob.raw_length);
            if builder.len_bytes() >= target {
                let full = std::mem::replace(&mut builder, PackBuilder::with_capacity(target));
                new_packs.push(upload_pack(repo, full).await?);
                report.packs_written += 1;
            }
        }
    }
    if !builder.is_empty() {
        new_packs.push(upload_pack(repo, builder).await?);
        report.packs_written += 1;
    }

    // 2. The new index.
    let mut writer = IndexWriter::default();
    for pack in new_packs {
        writer.add(repo, pack).await?;
    }
    write_kept_packs(repo, &plan, &mut writer).await?;
    writer.flush(repo).await?;
    // 3. The old index objects go (see `retire_index_objects`).
    retire_index_objects(repo, &plan.old_indexes).await?;

    // 4. Packs no index in force names.
    for id in plan.delete.iter().chain(plan.repack.iter().map(|p| &p.id)) {
        repo.backend()
            .delete(ObjectKind::Data, &id.to_hex())
            .await?;
        report.packs_deleted += 1;
    }
    report.bytes_freed = plan.bytes_freed;
    report.bytes_kept = plan.bytes_kept + plan.bytes_repacked;
    Ok(report)
}

/// Gathers packs into new index objects of bounded size.
#[derive(Default)]
struct IndexWriter {
    packs: Vec<IndexedPack>,
    blobs: usize,
}

impl IndexWriter {
    async fn add(&mut self, repo: &IndexedRepository, pack: IndexedPack) -> Result<()> {
        self.blobs += pack.blobs.len();
        self.packs.push(pack);
        if self.packs.len() >= PACKS_PER_INDEX_OBJECT || self.blobs >= BLOBS_PER_INDEX_OBJECT {
            self.flush(repo).await?;
        }
        Ok(())
    }

    async fn flush(&mut self, repo: &IndexedRepository) -> Result<()> {
        if self.packs.is_empty() {
            return Ok(());
        }
        let file = IndexFile {
            packs: std::mem::take(&mut self.packs),
            supersedes: vec![],
        };
        self.blobs = 0;
        repo.write_object(ObjectKind::Index, &file).await?;
        Ok(())
    }
}

/// The kept packs' entries, read again from the index objects the plan was made from, one object
/// at a time.
async fn write_kept_packs(
    repo: &IndexedRepository,
    plan: &PrunePlan,
    writer: &mut IndexWriter,
) -> Result<()> {
    for pack in plan.protected.values().filter(|p| !p.blobs.is_empty()) {
        writer.add(repo, pack.clone()).await?;
    }
    let mut kept: HashSet<PackId> = plan
        .keep
        .iter()
        .filter(|id| !plan.protected.contains_key(id))
        .copied()
        .collect();
    for object in &plan.in_force {
        let file: IndexFile = repo.read_object(ObjectKind::Index, object).await?;
        for pack in file.packs {
            // `remove`: a pack listed twice is written once, as planned from its first listing.
            if kept.remove(&pack.id) {
                writer.add(repo, pack).await?;
            }
        }
    }
    match kept.iter().next() {
        None => Ok(()),
        Some(pack) => Err(Error::Corrupt {
            what: format!("pack {pack}"),
            reason: "a kept pack's index object changed while pruning; prune stops before \
                     deleting anything"
                .into(),
        }),
    }
}

async fn upload_pack(repo: &IndexedRepository, builder: PackBuilder) -> Result<IndexedPack> {
    let ClosedPack { id, bytes, entries } = builder.finish(&repo.keys().sealer);
    repo.backend()
        .write(ObjectKind::Data, &id.to_hex(), Bytes::from(bytes))
        .await?;
    Ok(IndexedPack {
        id,
        blobs: entries.iter().map(IndexedBlob::from).collect(),
    })
}

/// Retires the index objects `old`, once a new index holds what they held: first an index object
/// that supersedes them (so a reader that lists the old ones mid-way knows to ignore them), then
/// the old objects, then that retiring object itself, since nothing it names is left.
pub(super) async fn retire_index_objects(repo: &Repository, old: &[ObjectId]) -> Result<()> {
    if old.is_empty() {
        return Ok(());
    }
    let retire = IndexFile {
        packs: vec![],
        supersedes: old.to_vec(),
    };
    let retiring_object = repo.write_object(ObjectKind::Index, &retire).await?;
    for id in old {
        repo.backend()
            .delete(ObjectKind::Index, &id.to_hex())
            .await?;
    }
    repo.backend()
        .delete(ObjectKind::Index, &retiring_object.to_hex())
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::{backup, BackupOptions, Source};
    use crate::backend::memory::MemoryBackend;
    use crate::backend::Backend;
    use crate::crypto::KdfParams;
    use crate::repository::Repository;
    use std::sync::Arc;

    /// The names of every index and data object.
    async fn stored_names(backend: &MemoryBackend) -> Vec<String> {
        let mut names = Vec::new();
        for kind in [ObjectKind::Index, ObjectKind::Data] {
            for info in backend.list(kind).await.unwrap() {
                names.push(format!("{kind}/{}", info.name));
            }
        }
        names.sort();
        names
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_second_prune_with_nothing_new_to_do_plans_nothing_and_writes_nothing() {
        let work = tempfile::tempdir().unwrap();
        let source = work.path().join("source");
        std::fs::create_dir_all(&source).unwrap();
        std::fs::write(source.join("kept.txt"), b"kept across both backups").unwrap();
        std::fs::write(source.join("gone.txt"), vec![7u8; 300_000]).unwrap();
        let backend = Arc::new(MemoryBackend::new());
        let kdf = KdfParams {
            memory_kib: 64,
            iterations: 1,
            parallelism: 1,
        };
        let repo = Repository::init(backend.clone(), b"pw", kdf)
            .await
            .unwrap()
            .load_index()
            .await
            .unwrap();
        let options = || BackupOptions::new(vec![Source::Path(source.clone())]);
        let first = backup(&repo, options()).await.unwrap();
        std::fs::remove_file(source.join("gone.txt")).unwrap();
        backup(&repo, options()).await.unwrap();
        backend
            .delete(ObjectKind::Snapshots, &first.snapshot_id.to_hex())
            .await
            .unwrap();

        let plan = plan_prune(&repo).await.unwrap();
        assert!(
            !plan.is_nothing_to_do(),
            "the first snapshot's data is garbage"
        );
        execute_prune(&repo, plan).await.unwrap();

        // Everything left is in use, down to the small tree packs.
        repo.refresh_index().await.unwrap();
        let before = stored_names(&backend).await;
        let plan = plan_prune(&repo).await.unwrap();
        assert!(
            plan.is_nothing_to_do(),
            "to repack: {:?}, to delete: {:?}",
            plan.repack.iter().map(|p| p.id).collect::<Vec<_>>(),
            plan.delete
        );
        assert_eq!(plan.bytes_freed, 0);
        let report = execute_prune(&repo, plan).await.unwrap();
        assert_eq!((report.packs_written, report.packs_deleted), (0, 0));
        assert_eq!(report.bytes_freed, 0);
        assert_eq!(
            stored_names(&backend).await,
            before,
            "nothing written or deleted"
        );
    }
}
