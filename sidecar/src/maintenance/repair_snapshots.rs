//! `repair snapshots`: snapshots whose trees name blobs the repository no longer holds are
//! written again without them, as restic 0.19's `repair snapshots` does:
//!
//! - a file keeps the content blobs that are still stored, in their order, and its size becomes
//!   their sum (the missing parts are cut out, not left as holes); a file whose size did not
//!   match its blobs gets their sum too;
//! - a folder whose tree cannot be read becomes an empty folder with its metadata;
//! - a snapshot whose root tree cannot be read is removed (there is nothing left to keep).
//!
//! A data blob counts as stored when the index lists it in a pack that is stored: unlike restic,
//! a stale index (a pack deleted since) does not hide the damage, though `repair index` first is
//! still the better order. A changed snapshot is saved with `original` naming the id it had, and
//! tagged `repaired` unless the damaged one is removed (`forget`). The new trees are packed and
//! indexed before each new snapshot is written. The caller holds the exclusive lock.

use crate::backend::{BackendError, ObjectKind};
use crate::compress;
use crate::crypto::blob_associated_data;
use crate::error::{Error, Result};
use crate::format::index::{IndexFile, IndexedBlob, IndexedPack};
use crate::format::pack::{ClosedPack, PackBuilder};
use crate::format::snapshot::Snapshot;
use crate::format::tree::{Node, NodeKind, Tree};
use crate::ids::{BlobId, BlobKind, PackId, SnapshotId};
use crate::repository::IndexedRepository;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;

/// The tag a repaired snapshot gets when its damaged original is kept, as restic's.
pub const REPAIRED_TAG: &str = "repaired";

/// What was wrong at one place of a snapshot, and what the repair does about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// Some of a file's content blobs are gone: they are cut out of it.
    MissingContent,
    /// A file's size differs from the sum of its blobs: it is set to that sum.
    WrongSize,
    /// A folder's tree cannot be read: the folder is kept, empty.
    UnreadableFolder,
    /// The snapshot's root tree cannot be read: the snapshot is removed.
    UnreadableRoot,
}

impl Problem {
    /// The name `--json` prints.
    pub fn name(self) -> &'static str {
        match self {
            Problem::MissingContent => "missingContent",
            Problem::WrongSize => "wrongSize",
            Problem::UnreadableFolder => "unreadableFolder",
            Problem::UnreadableRoot => "unreadableRoot",
        }
    }
}

/// One damaged place: its path in the snapshot (`/a/b`, bytes as stored) and the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    pub path: Vec<u8>,
    pub problem: Problem,
}

/// What happened to one snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing damaged: left as it is.
    Unchanged,
    /// Written again as `new_id` (`None` on a dry run); `original_removed` when `forget` removed
    /// the damaged one.
    Rewritten {
        new_id: Option<SnapshotId>,
        original_removed: bool,
    },
    /// Its root cannot be read: removed (not on a dry run).
    Removed { done: bool },
}

/// One snapshot looked at: its id, what was damaged and what was done.
#[derive(Debug, Clone)]
pub struct RepairedSnapshot {
    pub id: SnapshotId,
    pub snapshot: Snapshot,
    pub damage: Vec<Damage>,
    pub outcome: Outcome,
}

impl RepairedSnapshot {
    /// Whether the repair changed (or, on a dry run, would change) this snapshot.
    pub fn changed(&self) -> bool {
        self.outcome != Outcome::Unchanged
    }
}

/// Repairs `snapshots` (see the module's documentation); with `dry_run` nothing is written.
pub async fn repair_snapshots(
    repo: &IndexedRepository,
    snapshots: Vec<(SnapshotId, Snapshot)>,
    dry_run: bool,
    forget: bool,
) -> Result<Vec<RepairedSnapshot>> {
    let stored: HashSet<PackId> = super::stored_packs(repo).await?;
    let mut rewriter = Rewriter {
        repo,
        stored,
        dry_run,
        repaired: HashMap::new(),
        pack: PackBuilder::default(),
        packed: HashSet::new(),
    };
    let mut done = Vec::new();
    for (id, snapshot) in snapshots {
        let repaired = rewriter.repair_one(id, snapshot, forget).await?;
        done.push(repaired);
    }
    Ok(done)
}

/// A tree looked at: its id once repaired (`None`: unchanged) and its damage, paths relative
/// to it.
#[derive(Debug, Clone)]
struct TreeRepair {
    new_id: Option<BlobId>,
    damage: Vec<Damage>,
}

struct Rewriter<'a> {
    repo: &'a IndexedRepository,
    /// The packs stored, listed once.
    stored: HashSet<PackId>,
    dry_run: bool,
    /// Trees already looked at, in this or an earlier snapshot (as restic's rewriter remembers).
    repaired: HashMap<BlobId, TreeRepair>,
    /// New trees not yet stored, and the ids of those packed in this run.
    pack: PackBuilder,
    packed: HashSet<BlobId>,
}

impl Rewriter<'_> {
    async fn repair_one(
        &mut self,
        id: SnapshotId,
        snapshot: Snapshot,
        forget: bool,
    ) -> Result<RepairedSnapshot> {
        let mut repaired = RepairedSnapshot {
            id,
            snapshot: snapshot.clone(),
            damage: Vec::new(),
            outcome: Outcome::Unchanged,
        };
        let tree = match self
            .read_tree(&snapshot.tree, "the snapshot's root folder")
            .await?
        {
            Some(tree) => tree,
            None => {
                repaired.damage.push(Damage {
                    path: b"/".to_vec(),
                    problem: Problem::UnreadableRoot,
                });
                if !self.dry_run {
                    self.repo
                        .backend()
                        .delete(ObjectKind::Snapshots, &id.to_hex())
                        .await?;
                }
                repaired.outcome = Outcome::Removed {
                    done: !self.dry_run,
                };
                return Ok(repaired);
            }
        };
        let root = self.repair_tree(snapshot.tree, tree).await?;
        repaired.damage = root.damage;
        let Some(new_root) = root.new_id else {
            return Ok(repaired);
        };
        if self.dry_run {
            repaired.outcome = Outcome::Rewritten {
                new_id: None,
                original_removed: false,
            };
            return Ok(repaired);
        }
        self.flush().await?;
        let mut new = snapshot;
        new.tree = new_root;
        // As restic's: the id it had, even when it had been rewritten before.
        new.original = Some(id);
        if !forget && !new.tags.iter().any(|tag| tag == REPAIRED_TAG) {
            new.tags.push(REPAIRED_TAG.to_owned());
        }
        let new_id = self.repo.write_snapshot(&new).await?;
        // Written first, removed second: an interruption leaves both, never neither.
        if forget && new_id != id {
            self.repo
                .backend()
                .delete(ObjectKind::Snapshots, &id.to_hex())
                .await?;
        }
        repaired.outcome = Outcome::Rewritten {
            new_id: Some(new_id),
            original_removed: forget,
        };
        Ok(repaired)
    }

    /// Reads a tree; `None` when it is damaged (missing, unreadable, corrupt). Other errors (the
    /// repository cannot be reached) end the repair: they say nothing of the tree.
    async fn read_tree(&self, id: &BlobId, context: &str) -> Result<Option<Tree>> {
        match self.repo.read_tree(id, context).await {
            Ok(tree) => Ok(Some(tree)),
            Err(
                Error::BlobMissing { .. }
                | Error::Corrupt { .. }
                | Error::Format(_)
                | Error::Backend(BackendError::NotFound { .. }),
            ) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Repairs the folder `tree` (stored as `id`) and what it holds, each tree once.
    fn repair_tree<'s>(
        &'s mut self,
        id: BlobId,
        tree: Tree,
    ) -> Pin<Box<dyn Future<Output = Result<TreeRepair>> + Send + 's>> {
        Box::pin(async move {
            if let Some(known) = self.repaired.get(&id) {
                return Ok(known.clone());
            }
            let mut damage = Vec::new();
            let mut changed = false;
            let mut nodes = Vec::with_capacity(tree.nodes.len());
            for mut node in tree.nodes {
                let path = [b"/".as_slice(), &node.name].concat();
                let (node_changed, found) = self.repair_node(&mut node).await?;
                changed |= node_changed;
                damage.extend(found.into_iter().map(|d| Damage {
                    path: join(&path, &d.path),
                    problem: d.problem,
                }));
                nodes.push(node);
            }
            let new_id = match changed {
                true => Some(self.store_tree(&Tree { nodes })?),
                false => None,
            };
            let repair = TreeRepair { new_id, damage };
            self.repaired.insert(id, repair.clone());
            Ok(repair)
        })
    }

    /// Repairs one entry in place; says whether it changed, and its damage (paths relative to
    /// the entry: empty for the entry itself).
    async fn repair_node(&mut self, node: &mut Node) -> Result<(bool, Vec<Damage>)> {
        let itself = |problem| Damage {
            path: Vec::new(),
            problem,
        };
        match &mut node.kind {
            NodeKind::File { size, content } => {
                let problem = self.repair_file(size, content);
                Ok((problem.is_some(), problem.into_iter().map(itself).collect()))
            }
            NodeKind::Dir { subtree } => {
                let context = "a folder being repaired";
                let found = match self.read_tree(subtree, context).await? {
                    Some(tree) => self.repair_tree(*subtree, tree).await?,
                    None => TreeRepair {
                        new_id: Some(self.store_tree(&Tree::default())?),
                        damage: vec![itself(Problem::UnreadableFolder)],
                    },
                };
                if let Some(new_id) = found.new_id {
                    *subtree = new_id;
                }
                Ok((found.new_id.is_some(), found.damage))
            }
            _ => Ok((false, Vec::new())),
        }
    }

    /// Keeps the content blobs that are stored and sets the size to theirs; says what was wrong.
    fn repair_file(&self, size: &mut u64, content: &mut Vec<BlobId>) -> Option<Problem> {
        let index = self.repo.index();
        let before = content.len();
        content.retain(|blob| {
            index
                .get(blob)
                .is_some_and(|at| at.kind == BlobKind::Data && self.stored.contains(&at.pack))
        });
        let kept: u64 = content
            .iter()
            .filter_map(|blob| index.get(blob))
            .map(|at| u64::from(at.raw_length))
            .sum();
        let problem = if content.len() != before {
            Some(Problem::MissingContent)
        } else if kept != *size {
            Some(Problem::WrongSize)
        } else {
            None
        };
        *size = kept;
        problem
    }

    /// The id of `tree`, packed to be stored unless the repository or this run has it already
    /// (on a dry run, only the id).
    fn store_tree(&mut self, tree: &Tree) -> Result<BlobId> {
        let bytes = tree.to_bytes();
        let keys = self.repo.keys();
        let id = keys.blob_id(BlobKind::Tree, &bytes);
        if self.dry_run || self.packed.contains(&id) || self.repo.index().contains(&id) {
            return Ok(id);
        }
        let encoded = compress::encode(&bytes, &mut compress::new_compressor());
        let sealed = keys
            .sealer
            .seal(&encoded, &blob_associated_data(BlobKind::Tree, &id));
        self.pack
            .add(BlobKind::Tree, id, &sealed, bytes.len() as u32);
        self.packed.insert(id);
        Ok(id)
    }

    /// Stores the packed trees and an index object naming them, before a snapshot names them.
    async fn flush(&mut self) -> Result<()> {
        if self.pack.is_empty() {
            return Ok(());
        }
        let builder = std::mem::take(&mut self.pack);
        let ClosedPack { id, bytes, entries } = builder.finish(&self.repo.keys().sealer);
        self.repo
            .backend()
            .write(ObjectKind::Data, &id.to_hex(), bytes::Bytes::from(bytes))
            .await?;
        let file = IndexFile {
            packs: vec![IndexedPack {
                id,
                blobs: entries.iter().map(IndexedBlob::from).collect(),
            }],
            supersedes: vec![],
        };
        let index_id = self.repo.write_object(ObjectKind::Index, &file).await?;
        self.repo.add_index_file(index_id, &file);
        self.stored.insert(id);
        Ok(())
    }
}

/// `base` and a path relative to it (`/x` below it, or empty for `base` itself).
fn join(base: &[u8], relative: &[u8]) -> Vec<u8> {
    [base, relative].concat()
}
