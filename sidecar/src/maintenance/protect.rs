//! The protection window (`--protect-within 14d`): no snapshot younger than it is forgotten, and
//! prune keeps every pack that any index object lists for a blob such a snapshot needs.
//!
//! Those whose login may only append (backups through an append-only gate) can still add index
//! objects. One that claims a protected blob lives in a junk pack must not make prune drop the
//! real pack: so prune reads every index object (superseded or not), keeps every stored pack any of
//! them lists for a protected blob, and where a protected blob is listed in more than one place,
//! reads each copy and lists only those that open in the new index.

use super::retention::CalendarSpan;
use crate::backend::ObjectKind;
use crate::error::{Error, Result};
use crate::format::index::{IndexFile, IndexedBlob, IndexedPack};
use crate::format::snapshot::Snapshot;
use crate::format::tree::{NodeKind, Tree};
use crate::ids::{BlobId, BlobKind, PackId};
use crate::repository::{open_blob, IndexedRepository};
use chrono::{DateTime, Utc};
use std::collections::{HashMap, HashSet};

/// The window: snapshots whose time is later than `span` before `now` (or in the future).
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub span: CalendarSpan,
    pub now: DateTime<Utc>,
}

impl Window {
    /// The window `span` back from this moment.
    pub fn from_now(span: CalendarSpan) -> Window {
        Window {
            span,
            now: Utc::now(),
        }
    }

    /// Whether a snapshot of `time` is protected: its age (now minus its time) is less than the
    /// span, or it claims a time in the future.
    pub fn protects_time(&self, time: DateTime<Utc>) -> bool {
        time > self.span.before(self.now.fixed_offset())
    }

    /// Whether `snapshot` is protected; one whose time cannot be read is.
    pub fn protects(&self, snapshot: &Snapshot) -> bool {
        DateTime::parse_from_rfc3339(&snapshot.time)
            .map(|time| self.protects_time(time.with_timezone(&Utc)))
            .unwrap_or(true)
    }

    /// Why a verdict keeps a protected snapshot, and what an explicit forget of one is told.
    pub fn reason(&self) -> String {
        format!("protected: younger than --protect-within {}", self.span)
    }
}

/// One place an index object says a blob is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Place {
    pack: PackId,
    blob: IndexedBlob,
}

/// What prune must keep for the protected snapshots.
#[derive(Debug, Default)]
pub struct Protected {
    /// Every stored pack some index object lists for a protected blob, with the entries the new
    /// index lists for it (copies of protected blobs that did not open are left out).
    pub packs: HashMap<PackId, IndexedPack>,
    /// Protected snapshots.
    pub snapshots: usize,
}

/// Every index object stored, superseded or not (an appended one may claim to supersede the
/// real ones).
async fn all_index_objects(
    repo: &IndexedRepository,
) -> Result<Vec<(crate::ids::ObjectId, IndexFile)>> {
    let mut files = Vec::new();
    for id in repo.list_ids(ObjectKind::Index).await? {
        let file: IndexFile = repo.read_object(ObjectKind::Index, &id).await?;
        files.push((id, file));
    }
    Ok(files)
}

/// Reads trees, falling back to every place any index object lists when the loaded index points
/// to a copy that does not open.
pub struct TreeReader {
    places: HashMap<BlobId, Vec<Place>>,
}

impl TreeReader {
    /// A reader that only asks the loaded index.
    pub fn loaded_index_only() -> TreeReader {
        TreeReader {
            places: HashMap::new(),
        }
    }

    pub async fn read(&self, repo: &IndexedRepository, id: &BlobId) -> Result<Tree> {
        let first_error = match repo.read_tree(id, "a tree while pruning").await {
            Ok(tree) => return Ok(tree),
            Err(error) => error,
        };
        for place in self.places.get(id).into_iter().flatten() {
            if let Ok(plaintext) = read_copy(repo, place).await {
                if let Ok(tree) = Tree::from_bytes(&plaintext) {
                    return Ok(tree);
                }
            }
        }
        Err(first_error)
    }
}

/// Reads and opens one copy of a blob.
async fn read_copy(repo: &IndexedRepository, place: &Place) -> Result<Vec<u8>> {
    let sealed = repo
        .backend()
        .read_range(
            ObjectKind::Data,
            &place.pack.to_hex(),
            u64::from(place.blob.offset),
            u64::from(place.blob.length),
        )
        .await?;
    let what = format!("blob {} in pack {}", place.blob.id, place.pack);
    open_blob(
        repo.keys(),
        place.blob.kind,
        &place.blob.id,
        &sealed,
        place.blob.raw_length,
        &what,
    )
}

/// The tree reader of a prune under `window`, and what the window protects.
pub async fn plan_protection(
    repo: &IndexedRepository,
    window: &Window,
) -> Result<(TreeReader, Protected)> {
    let objects = all_index_objects(repo).await?;
    let mut tree_places: HashMap<BlobId, Vec<Place>> = HashMap::new();
    for (_, file) in &objects {
        for pack in &file.packs {
            for blob in pack.blobs.iter().filter(|b| b.kind == BlobKind::Tree) {
                let place = Place {
                    pack: pack.id,
                    blob: *blob,
                };
                tree_places.entry(blob.id).or_default().push(place);
            }
        }
    }
    let reader = TreeReader {
        places: tree_places,
    };
    let mut protected = Protected::default();
    let mut blobs = HashSet::new();
    for (_, snapshot) in repo.snapshots().await? {
        if window.protects(&snapshot) {
            protected.snapshots += 1;
            walk_into(repo, &reader, snapshot.tree, &mut blobs).await?;
        }
    }
    protected.packs = protected_packs(repo, &objects, &blobs).await?;
    Ok((reader, protected))
}

/// Adds the blobs of the tree `root` and below to `blobs`.
async fn walk_into(
    repo: &IndexedRepository,
    reader: &TreeReader,
    root: BlobId,
    blobs: &mut HashSet<BlobId>,
) -> Result<()> {
    let mut pending = vec![root];
    while let Some(tree_id) = pending.pop() {
        if !blobs.insert(tree_id) {
            continue;
        }
        for node in reader.read(repo, &tree_id).await?.nodes {
            match node.kind {
                NodeKind::Dir { subtree } => pending.push(subtree),
                NodeKind::File { content, .. } => blobs.extend(content),
                _ => {}
            }
        }
    }
    Ok(())
}

/// The stored packs any index object lists for one of `blobs`, each with the entries its first
/// listing gives, where a blob of `blobs` listed in several places keeps only copies that open.
async fn protected_packs(
    repo: &IndexedRepository,
    objects: &[(crate::ids::ObjectId, IndexFile)],
    blobs: &HashSet<BlobId>,
) -> Result<HashMap<PackId, IndexedPack>> {
    let stored: HashSet<PackId> = super::stored_packs(repo).await?;
    // The loaded index's objects first: a pack's listing comes from one in force when it can.
    let in_force: HashSet<_> = repo.index().objects.iter().copied().collect();
    let mut ordered: Vec<&(crate::ids::ObjectId, IndexFile)> = objects.iter().collect();
    ordered.sort_by_key(|(id, _)| !in_force.contains(id));
    let mut packs: HashMap<PackId, IndexedPack> = HashMap::new();
    let mut places: HashMap<BlobId, Vec<Place>> = HashMap::new();
    for (_, file) in ordered {
        for pack in file.packs.iter().filter(|p| stored.contains(&p.id)) {
            let mut any = false;
            for blob in pack.blobs.iter().filter(|b| blobs.contains(&b.id)) {
                any = true;
                let listed = places.entry(blob.id).or_default();
                let place = Place {
                    pack: pack.id,
                    blob: *blob,
                };
                if !listed.contains(&place) {
                    listed.push(place);
                }
            }
            if any {
                packs.entry(pack.id).or_insert_with(|| pack.clone());
            }
        }
    }
    for (id, listed) in places.iter().filter(|(_, listed)| listed.len() > 1) {
        let mut good = Vec::new();
        for place in listed {
            if read_copy(repo, place).await.is_ok() {
                good.push(*place);
            }
        }
        if good.is_empty() {
            return Err(Error::BlobMissing {
                id: *id,
                context: "needed by a snapshot inside the protection window: no copy any index \
                          lists opens; run `check`, prune stops"
                    .into(),
            });
        }
        settle(&mut packs, *id, listed, &good);
    }
    Ok(packs)
}

/// Lists blob `id` only at its `good` places among the `listed` ones.
fn settle(packs: &mut HashMap<PackId, IndexedPack>, id: BlobId, listed: &[Place], good: &[Place]) {
    for place in listed {
        let Some(pack) = packs.get_mut(&place.pack) else {
            continue;
        };
        let is_good = good.contains(place);
        let present = pack.blobs.contains(&place.blob);
        if !is_good && present {
            pack.blobs.retain(|blob| *blob != place.blob);
        } else if is_good && !present {
            pack.blobs
                .retain(|blob| blob.id != id || good.iter().any(|g| g.blob == *blob));
            pack.blobs.push(place.blob);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(span: &str) -> Window {
        Window {
            span: span.parse().unwrap(),
            now: "2026-12-05T12:00:00Z".parse().unwrap(),
        }
    }

    fn at(time: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(time)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn a_snapshot_younger_than_the_window_or_in_the_future_is_protected() {
        let days = window("14d");
        assert!(days.protects_time(at("2026-12-05T11:00:00Z")));
        assert!(days.protects_time(at("2026-11-21T12:00:01Z")));
        assert!(!days.protects_time(at("2026-11-21T12:00:00Z")));
        assert!(!days.protects_time(at("2026-11-01T00:00:00Z")));
        assert!(days.protects_time(at("2027-06-01T00:00:00Z")));
        let hours = window("36h");
        assert!(hours.protects_time(at("2026-12-04T00:00:01Z")));
        assert!(!hours.protects_time(at("2026-12-03T23:59:59Z")));
        // Another offset, the same instant.
        assert!(hours.protects_time(at("2026-12-04T02:00:01+02:00")));
        assert_eq!(
            days.reason(),
            "protected: younger than --protect-within 14d"
        );
    }
}
