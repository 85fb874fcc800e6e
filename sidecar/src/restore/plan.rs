//! What a restore will do: every entry of the snapshot below the includes, in creation order, and
//! for every pack the blobs to fetch and where each one goes.
//!
//! The plan is made in batches of a bounded number of entries ([`PlanWalker`]), each restored
//! before the next is planned: a restore's memory does not grow with the number of files. (Only
//! what must outlive a batch is kept: each directory, whose metadata is set last, and the first
//! path of each hard-linked inode.)

use crate::error::{Error, Result};
use crate::filter::{Decision, PathFilter};
use crate::format::tree::{Node, NodeKind};
use crate::ids::{BlobId, PackId};
use crate::index::BlobLocation;
use crate::repository::IndexedRepository;
use crate::restore::privileges::{self, Admitted, Privileges};
use std::collections::HashMap;

/// One entry to recreate, at `path` (relative to the target, components joined by `/`), in the
/// directory `parent` (an index into [`RestorePlan::dirs`]) under its name `node.name`.
#[derive(Debug, Clone)]
pub struct PlannedEntry {
    pub path: Vec<u8>,
    pub node: Node,
    pub parent: usize,
}

/// Where a blob's plaintext is written: a file (by its entry number) at an offset.
#[derive(Debug, Clone, Copy)]
pub struct BlobTarget {
    pub entry: usize,
    pub offset: u64,
}

#[derive(Debug, Clone)]
pub struct PlannedBlob {
    pub id: BlobId,
    pub location: BlobLocation,
    pub targets: Vec<BlobTarget>,
}

/// A restore, or one batch of it.
#[derive(Debug, Default)]
pub struct RestorePlan {
    /// Parents before children.
    pub entries: Vec<PlannedEntry>,
    /// The directories the entries are in (paths relative to the target; empty for the target).
    pub dirs: Vec<Vec<u8>>,
    /// Per pack, its blobs sorted by offset.
    pub packs: Vec<(PackId, Vec<PlannedBlob>)>,
    /// Entries that are hard links to an earlier entry of the plan (by number).
    pub hard_links: HashMap<usize, usize>,
    /// Entries that are hard links to a file of an earlier batch (at that path).
    pub earlier_links: Vec<(usize, Vec<u8>)>,
    pub total_bytes: u64,
    pub files: u64,
    /// What [`Privileges::Drop`] skipped or cleared, one warning per entry.
    pub privileges_dropped: Vec<String>,
    /// Directories restored whole whose trees were opened in this batch, each with the names its
    /// tree holds (sorted): what `--delete` keeps in them. Filled only when asked for
    /// ([`PlanWalker::record_complete_dirs`]).
    pub complete_dirs: Vec<(Vec<u8>, Vec<Vec<u8>>)>,
}

impl RestorePlan {
    /// The content bytes of the entries that are later names of a hard-linked file: counted
    /// in the snapshot's total, never written.
    pub fn linked_bytes(&self) -> u64 {
        let linked = self.hard_links.keys().copied();
        let earlier = self.earlier_links.iter().map(|(number, _)| *number);
        linked
            .chain(earlier)
            .map(|number| match self.entries[number].node.kind {
                NodeKind::File { size, .. } => size,
                _ => 0,
            })
            .sum()
    }
}

/// How many entries a batch holds at most, and how many of its entries' directories.
#[derive(Debug, Clone, Copy)]
pub struct BatchLimits {
    pub entries: usize,
    pub dirs: usize,
}

impl BatchLimits {
    /// No limit: the whole restore in one plan.
    pub const WHOLE: BatchLimits = BatchLimits {
        entries: usize::MAX,
        dirs: usize::MAX,
    };
}

/// Names from a tree must be plain names: nothing that would escape the target.
fn check_name(name: &[u8], tree: &BlobId) -> Result<()> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(Error::Corrupt {
            what: format!("tree {tree}"),
            reason: format!("invalid entry name {:?}", String::from_utf8_lossy(name)),
        });
    }
    Ok(())
}

/// The snapshot path (`/data/db`) of `path` (its components joined by `/`, no leading `/`).
fn absolute(path: &[u8]) -> Vec<u8> {
    let mut absolute = Vec::with_capacity(path.len() + 1);
    absolute.push(b'/');
    absolute.extend_from_slice(path);
    absolute
}

/// `name` in the directory at `dir` (no leading `/`).
fn child_path(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut path = dir.to_vec();
    if !path.is_empty() {
        path.push(b'/');
    }
    path.extend_from_slice(name);
    path
}

/// Whether the filter selects anything below the directory `path` whose tree is `tree`: a
/// directory that is not selected itself is restored only on the way to something that is.
async fn selected_below(
    repo: &IndexedRepository,
    filter: &PathFilter,
    path: Vec<u8>,
    tree: BlobId,
) -> Result<bool> {
    let mut pending = vec![(path, tree)];
    while let Some((path, tree)) = pending.pop() {
        let what = format!("directory /{}", String::from_utf8_lossy(&path));
        let tree = repo.read_tree(&tree, &what).await?;
        for node in &tree.nodes {
            let child = child_path(&path, &node.name);
            let subtree = match &node.kind {
                NodeKind::Dir { subtree } => Some(*subtree),
                _ => None,
            };
            let decision = filter.decide(&absolute(&child), subtree.is_some());
            if decision.selected {
                return Ok(true);
            }
            if let (true, Some(subtree)) = (decision.descend, subtree) {
                pending.push((child, subtree));
            }
        }
    }
    Ok(false)
}

/// Plans where each content blob of the file entry `number` goes; checks that they add up to
/// the file's size.
fn plan_content(
    repo: &IndexedRepository,
    blobs: &mut HashMap<BlobId, PlannedBlob>,
    number: usize,
    path: &[u8],
    size: u64,
    content: &[BlobId],
    tree_id: &BlobId,
) -> Result<()> {
    let mut offset = 0u64;
    for id in content {
        let location = repo.index().get(id).ok_or_else(|| Error::BlobMissing {
            id: *id,
            context: format!("content of /{}", String::from_utf8_lossy(path)),
        })?;
        blobs
            .entry(*id)
            .or_insert_with(|| PlannedBlob {
                id: *id,
                location,
                targets: Vec::new(),
            })
            .targets
            .push(BlobTarget {
                entry: number,
                offset,
            });
        offset += location.raw_length as u64;
    }
    if offset != size {
        return Err(Error::Corrupt {
            what: format!("tree {tree_id}"),
            reason: format!(
                "/{} has {size} bytes but its content adds up to {offset}",
                String::from_utf8_lossy(path)
            ),
        });
    }
    Ok(())
}

/// A tree being planned: its remaining nodes, and its subdirectories seen so far.
struct OpenTree {
    path: Vec<u8>,
    id: BlobId,
    nodes: std::vec::IntoIter<Node>,
    subdirs: Vec<(Vec<u8>, BlobId)>,
}

/// Walks the snapshot's trees depth first (parents before children, names in order) and plans
/// what the includes select, a batch at a time.
pub struct PlanWalker {
    filter: PathFilter,
    pending: Vec<(Vec<u8>, BlobId)>,
    current: Option<OpenTree>,
    /// The path of the first file of each hard-linked inode seen.
    first_link: HashMap<(u64, u64), Vec<u8>>,
    privileges: Privileges,
    /// Whether batches list the names of the directories they restore whole.
    record_complete_dirs: bool,
}

impl PlanWalker {
    /// Starts the walk at the tree `root`; fails when an include that is a plain path is not in
    /// the snapshot (before anything is restored: only the trees on the way to it are read).
    pub async fn new(
        repo: &IndexedRepository,
        root: BlobId,
        filter: &PathFilter,
    ) -> Result<PlanWalker> {
        for include in filter.plain_includes() {
            check_include(repo, root, &include).await?;
        }
        Ok(PlanWalker {
            filter: filter.clone(),
            pending: vec![(Vec::new(), root)],
            current: None,
            first_link: HashMap::new(),
            privileges: Privileges::Keep,
            record_complete_dirs: false,
        })
    }

    /// Plans device files, FIFOs and special mode bits as `privileges` says.
    pub fn with_privileges(mut self, privileges: Privileges) -> PlanWalker {
        self.privileges = privileges;
        self
    }

    /// Makes each batch list the directories it restores whole with the names their trees hold
    /// ([`RestorePlan::complete_dirs`]), for `--delete`.
    pub fn record_complete_dirs(&mut self) {
        self.record_complete_dirs = true;
    }

    /// The next batch of the restore, `None` when the walk is over.
    pub async fn next_batch(
        &mut self,
        repo: &IndexedRepository,
        limits: BatchLimits,
    ) -> Result<Option<RestorePlan>> {
        let mut batch = Batch {
            privileges: self.privileges,
            ..Batch::default()
        };
        while batch.plan.entries.len() < limits.entries && batch.plan.dirs.len() < limits.dirs {
            let Some(tree) = self.current.as_mut() else {
                let Some((path, id)) = self.pending.pop() else {
                    break;
                };
                let tree = open_tree(repo, path, id).await?;
                if self.record_complete_dirs
                    && self.filter.decide(&absolute(&tree.path), true).selected
                {
                    let names = tree.nodes.as_slice().iter().map(|n| n.name.clone());
                    let names = names.collect();
                    batch.plan.complete_dirs.push((tree.path.clone(), names));
                }
                self.current = Some(tree);
                continue;
            };
            let Some(node) = tree.nodes.next() else {
                // Reversed so that popping visits directories in name order.
                let tree = self.current.take().expect("present");
                self.pending.extend(tree.subdirs.into_iter().rev());
                continue;
            };
            check_name(&node.name, &tree.id)?;
            let path = child_path(&tree.path, &node.name);
            let subtree = match &node.kind {
                NodeKind::Dir { subtree } => Some(*subtree),
                _ => None,
            };
            let mut decision = self.filter.decide(&absolute(&path), subtree.is_some());
            if let (false, true, Some(subtree)) = (decision.selected, decision.descend, subtree) {
                decision.descend =
                    selected_below(repo, &self.filter, path.clone(), subtree).await?;
            }
            batch.add(repo, tree, node, path, decision, &mut self.first_link)?;
        }
        let nothing_planned = batch.plan.entries.is_empty() && batch.plan.complete_dirs.is_empty();
        if nothing_planned && self.current.is_none() && self.pending.is_empty() {
            return Ok(None);
        }
        Ok(Some(batch.finish()))
    }
}

/// Reads a tree and checks that its names are sorted and unique.
async fn open_tree(repo: &IndexedRepository, path: Vec<u8>, id: BlobId) -> Result<OpenTree> {
    let tree = repo
        .read_tree(
            &id,
            &format!("directory /{}", String::from_utf8_lossy(&path)),
        )
        .await?;
    if tree
        .nodes
        .windows(2)
        .any(|pair| pair[0].name >= pair[1].name)
    {
        return Err(Error::Corrupt {
            what: format!("tree {id}"),
            reason: "entries are not sorted by unique names".into(),
        });
    }
    Ok(OpenTree {
        path,
        id,
        nodes: tree.nodes.into_iter(),
        subdirs: Vec::new(),
    })
}

/// Fails unless the snapshot holds the path of `components` (the names after the root).
async fn check_include(
    repo: &IndexedRepository,
    root: BlobId,
    components: &[Vec<u8>],
) -> Result<()> {
    let missing = || {
        let names: Vec<String> = components
            .iter()
            .map(|name| String::from_utf8_lossy(name).into_owned())
            .collect();
        Error::Usage(format!("/{} is not in the snapshot", names.join("/")))
    };
    let mut tree_id = root;
    let mut components = components.iter().peekable();
    while let Some(name) = components.next() {
        let tree = open_tree(repo, Vec::new(), tree_id).await?;
        let node = tree
            .nodes
            .as_slice()
            .iter()
            .find(|node| node.name == *name)
            .ok_or_else(missing)?;
        match (&node.kind, components.peek()) {
            (_, None) => return Ok(()),
            (NodeKind::Dir { subtree }, Some(_)) => tree_id = *subtree,
            _ => return Err(missing()),
        }
    }
    Err(missing())
}

/// A batch being planned.
#[derive(Default)]
struct Batch {
    plan: RestorePlan,
    blobs: HashMap<BlobId, PlannedBlob>,
    /// The batch's number of the directory of the tree being planned, and that tree's path.
    dir: Option<(usize, Vec<u8>)>,
    /// The first file of each hard-linked inode in this batch.
    linked: HashMap<(u64, u64), usize>,
    privileges: Privileges,
}

impl Batch {
    /// Plans `node` of `tree` at `path`, if the filter's `decision` needs it: a directory when it
    /// is selected or on the way to something selected, anything else when selected.
    fn add(
        &mut self,
        repo: &IndexedRepository,
        tree: &mut OpenTree,
        mut node: Node,
        path: Vec<u8>,
        decision: Decision,
        first_link: &mut HashMap<(u64, u64), Vec<u8>>,
    ) -> Result<()> {
        if !decision.selected && !decision.descend {
            return Ok(());
        }
        match privileges::admit(self.privileges, &mut node, &path) {
            Admitted::AsItIs => {}
            Admitted::Cleared(warning) => self.plan.privileges_dropped.push(warning),
            Admitted::Skipped(warning) => {
                self.plan.privileges_dropped.push(warning);
                return Ok(());
            }
        }
        if self.dir.as_ref().map(|(_, dir)| dir) != Some(&tree.path) {
            self.plan.dirs.push(tree.path.clone());
            self.dir = Some((self.plan.dirs.len() - 1, tree.path.clone()));
        }
        let parent = self.dir.as_ref().expect("set above").0;
        let number = self.plan.entries.len();
        match &node.kind {
            NodeKind::Dir { subtree } if decision.descend => {
                tree.subdirs.push((path.clone(), *subtree))
            }
            NodeKind::File { size, content } => {
                self.plan.files += 1;
                let link_key = (node.meta.device, node.meta.inode);
                let first = (node.meta.links > 1)
                    .then(|| first_link.get(&link_key))
                    .flatten();
                if let Some(first) = first {
                    match self.linked.get(&link_key) {
                        Some(&entry) => self.plan.hard_links.insert(number, entry),
                        None => {
                            self.plan.earlier_links.push((number, first.clone()));
                            None
                        }
                    };
                } else {
                    if node.meta.links > 1 {
                        first_link.insert(link_key, path.clone());
                        self.linked.insert(link_key, number);
                    }
                    self.plan.total_bytes += size;
                    plan_content(
                        repo,
                        &mut self.blobs,
                        number,
                        &path,
                        *size,
                        content,
                        &tree.id,
                    )?;
                }
            }
            _ => {}
        }
        self.plan.entries.push(PlannedEntry { path, node, parent });
        Ok(())
    }

    /// The plan, with each pack's blobs sorted by offset.
    fn finish(self) -> RestorePlan {
        let mut plan = self.plan;
        let mut by_pack: HashMap<PackId, Vec<PlannedBlob>> = HashMap::new();
        for blob in self.blobs.into_values() {
            by_pack.entry(blob.location.pack).or_default().push(blob);
        }
        plan.packs = by_pack
            .into_iter()
            .map(|(pack, mut blobs)| {
                blobs.sort_by_key(|b| b.location.offset);
                (pack, blobs)
            })
            .collect();
        plan.packs.sort_by_key(|(pack, _)| *pack);
        plan
    }
}

/// Walks the snapshot's trees and plans the whole restore of what `filter` selects, in one plan.
pub async fn plan_restore(
    repo: &IndexedRepository,
    root: BlobId,
    filter: &PathFilter,
) -> Result<RestorePlan> {
    let mut walker = PlanWalker::new(repo, root, filter).await?;
    Ok(walker
        .next_batch(repo, BatchLimits::WHOLE)
        .await?
        .unwrap_or_default())
}
