//! `copy`: snapshots of one repository stored again in another, which has its own master key.
//!
//! Blob ids are keyed hashes under each repository's own id keys (format §5.1), so a blob keeps
//! its plaintext but not its id: every blob a copied tree names is read from the source, opened
//! with the source's keys, named under the destination's and sent only when the destination's
//! index lacks that name. Trees name their children, so each is rewritten with the new names,
//! depth first, after everything below it. Folders already copied in this run are not read again,
//! and a snapshot of the same host and paths already in the destination names what has not
//! changed since (see `trees`): a nightly copy reads from the source what the night added.
//!
//! Crash safety is the backup's: each snapshot is copied through the backup's sealing threads
//! and uploader, whose packs are indexed as they are stored; the snapshot is written only after
//! the uploader has indexed all of them. A run cut short leaves indexed blobs that the next run
//! does not send again, and no snapshot whose blobs are not all stored.

mod blobs;
mod trees;

use trees::Reference;

use crate::archive::UploadStats;
use crate::error::Result;
use crate::format::snapshot::{Snapshot, SnapshotPath};
use crate::ids::{BlobId, SnapshotId};
use crate::progress::Progress;
use crate::repository::IndexedRepository;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Source reads at once while a folder's files are copied: bounds the memory of reads in flight
/// to this many runs of neighbouring blobs (at most 1 MiB, or one maximum chunk, each).
pub const READS_IN_FLIGHT: usize = 8;

/// How a copy uses memory and the destination: as the backup's options of the same names.
#[derive(Debug, Clone)]
pub struct CopyOptions {
    pub workers: usize,
    pub upload_concurrency: usize,
    pub upload_memory_bytes: u64,
    pub progress: Arc<Progress>,
}

impl Default for CopyOptions {
    fn default() -> CopyOptions {
        CopyOptions {
            workers: 2,
            upload_concurrency: 4,
            upload_memory_bytes: crate::archive::DEFAULT_UPLOAD_MEMORY_BYTES,
            progress: Arc::new(Progress::default()),
        }
    }
}

/// What became of one chosen snapshot of the source.
#[derive(Debug, Clone)]
pub enum CopyOutcome {
    /// Stored in the destination as `copy_id`; `added` is what its copy stored there.
    Copied {
        copy_id: SnapshotId,
        added: UploadStats,
    },
    /// The destination holds it already, as `copy_id`.
    AlreadyThere { copy_id: SnapshotId },
}

/// One chosen snapshot: its id in the source, the snapshot, and what became of it.
#[derive(Debug, Clone)]
pub struct CopiedSnapshot {
    pub source_id: SnapshotId,
    pub snapshot: Snapshot,
    pub outcome: CopyOutcome,
}

/// The id a snapshot stands for across copies: the one it was first stored under.
pub fn original_of(id: SnapshotId, snapshot: &Snapshot) -> SnapshotId {
    snapshot.original.unwrap_or(id)
}

/// Copies `chosen` (oldest first) from `source` to `destination`, calling `each` as each one is
/// done. The caller holds a lock on each repository.
pub async fn copy_snapshots(
    source: &IndexedRepository,
    destination: &IndexedRepository,
    chosen: Vec<(SnapshotId, Snapshot)>,
    options: &CopyOptions,
    mut each: impl FnMut(&CopiedSnapshot),
) -> Result<Vec<CopiedSnapshot>> {
    // Each original in the destination: its copy's id and root tree.
    let mut present: HashMap<SnapshotId, (SnapshotId, BlobId)> = destination
        .snapshots()
        .await?
        .into_iter()
        .map(|(id, snapshot)| (original_of(id, &snapshot), (id, snapshot.tree)))
        .collect();
    let mut copier = trees::Copier::new(source, destination, options);
    let mut done = Vec::new();
    let mut seen = HashSet::new();
    // The latest chosen snapshot of each host and paths that the destination holds.
    let mut latest: HashMap<(String, Vec<SnapshotPath>), Reference> = HashMap::new();
    for (source_id, snapshot) in chosen {
        let original = original_of(source_id, &snapshot);
        if !seen.insert(original) {
            continue;
        }
        let key = (snapshot.hostname.clone(), snapshot.paths.clone());
        let outcome = match present.get(&original) {
            Some(&(copy_id, copy)) => {
                latest.insert(
                    key,
                    Reference {
                        source: snapshot.tree,
                        copy,
                    },
                );
                CopyOutcome::AlreadyThere { copy_id }
            }
            None => {
                let reference = match latest.get(&key) {
                    Some(reference) => Some(*reference),
                    None => parent_reference(source, &snapshot, &present).await,
                };
                let (copy_id, copy, added) =
                    copier.copy_one(source_id, &snapshot, reference).await?;
                present.insert(original, (copy_id, copy));
                latest.insert(
                    key,
                    Reference {
                        source: snapshot.tree,
                        copy,
                    },
                );
                CopyOutcome::Copied { copy_id, added }
            }
        };
        let copied = CopiedSnapshot {
            source_id,
            snapshot,
            outcome,
        };
        each(&copied);
        done.push(copied);
    }
    Ok(done)
}

/// The snapshot's parent as a reference, when the destination holds a copy of it (copies chosen
/// alone, such as `latest`, have no earlier one among the chosen).
async fn parent_reference(
    source: &IndexedRepository,
    snapshot: &Snapshot,
    present: &HashMap<SnapshotId, (SnapshotId, BlobId)>,
) -> Option<Reference> {
    let parent = snapshot.parent?;
    let &(_, copy) = present.get(&parent)?;
    let tree = source.read_snapshot(parent).await.ok()?.tree;
    Some(Reference { source: tree, copy })
}
