//! What changed between two snapshots, classified as restic's `diff` does: `+` added, `-`
//! removed, `T` another type, `M` other content (a file's blobs differ), `U` metadata only (when
//! asked); a folder's path ends in `/`, and everything below an added or removed folder is listed.

use crate::error::Result;
use crate::format::tree::{Node, NodeKind, Tree};
use crate::ids::BlobId;
use crate::inspect::walk::{self, Descend};
use crate::repository::IndexedRepository;
use std::collections::HashSet;

/// One changed path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The path from the snapshot's root; a folder's ends in `/`.
    pub path: Vec<u8>,
    /// `+`, `-`, or any of `T`, `M` and `U` in that order.
    pub modifier: String,
}

/// What a diff counts, restic's way: entries added and removed by kind, files changed, and the
/// data blobs (and their bytes) only one snapshot holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiffStats {
    pub changed_files: u64,
    pub added: SideStats,
    pub removed: SideStats,
}

/// The entries and data only one side of a diff holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SideStats {
    pub files: u64,
    pub dirs: u64,
    pub others: u64,
    pub data_blobs: u64,
    /// Bytes of those blobs' content (before compression).
    pub bytes: u64,
}

impl SideStats {
    fn count(&mut self, node: &Node) {
        match node.kind {
            NodeKind::File { .. } => self.files += 1,
            NodeKind::Dir { .. } => self.dirs += 1,
            _ => self.others += 1,
        }
    }
}

/// Whether `a` and `b` differ in more than their content: metadata, link target, device or the
/// folder below them.
fn metadata_differs(a: &Node, b: &Node) -> bool {
    let size = |node: &Node| match node.kind {
        NodeKind::File { size, .. } => size,
        _ => 0,
    };
    let payload_differs = match (&a.kind, &b.kind) {
        (NodeKind::File { .. }, NodeKind::File { .. }) => false,
        (kind_a, kind_b) => kind_a != kind_b,
    };
    a.meta != b.meta || size(a) != size(b) || payload_differs
}

/// The modifier of an entry both snapshots hold; empty when nothing shown changed.
fn modifier(a: &Node, b: &Node, metadata: bool) -> String {
    let mut modifier = String::new();
    if std::mem::discriminant(&a.kind) != std::mem::discriminant(&b.kind) {
        modifier.push('T');
    }
    match (&a.kind, &b.kind) {
        (NodeKind::File { content: ca, .. }, NodeKind::File { content: cb, .. }) if ca != cb => {
            modifier.push('M')
        }
        _ if metadata && metadata_differs(a, b) => modifier.push('U'),
        _ => {}
    }
    modifier
}

/// A folder's path with its `/`.
fn shown(path: &[u8], node: &Node) -> Vec<u8> {
    let mut path = path.to_vec();
    if matches!(node.kind, NodeKind::Dir { .. }) {
        path.push(b'/');
    }
    path
}

/// The changes from the tree `old` to the tree `new`, in restic's order, and their counts.
pub async fn diff(
    repo: &IndexedRepository,
    old: &BlobId,
    new: &BlobId,
    metadata: bool,
) -> Result<(Vec<Change>, DiffStats)> {
    let mut changes = Vec::new();
    let mut stats = DiffStats::default();
    // Pairs of folders still to compare, last first.
    let mut pending: Vec<(Vec<u8>, BlobId, BlobId)> = vec![(Vec::new(), *old, *new)];
    while let Some((prefix, old_tree, new_tree)) = pending.pop() {
        if old_tree == new_tree {
            continue;
        }
        let (a, b) = (
            repo.read_tree(&old_tree, "the first snapshot").await?,
            repo.read_tree(&new_tree, "the second snapshot").await?,
        );
        let mut below = Vec::new();
        for (name, old_node, new_node) in pair_up(&a, &b) {
            let path = [prefix.as_slice(), b"/", name].concat();
            match (old_node, new_node) {
                (Some(node), None) => {
                    one_side(repo, &path, node, "-", &mut stats.removed, &mut changes).await?
                }
                (None, Some(node)) => {
                    one_side(repo, &path, node, "+", &mut stats.added, &mut changes).await?
                }
                (Some(a), Some(b)) => {
                    let modifier = modifier(a, b, metadata);
                    if modifier.contains('M') {
                        stats.changed_files += 1;
                    }
                    if !modifier.is_empty() {
                        changes.push(Change {
                            path: shown(&path, b),
                            modifier,
                        });
                    }
                    match (&a.kind, &b.kind) {
                        (NodeKind::Dir { subtree: sa }, NodeKind::Dir { subtree: sb }) => {
                            below.push((path, *sa, *sb))
                        }
                        (NodeKind::Dir { .. }, _) => {
                            below_one_side(repo, &path, a, "-", &mut stats.removed, &mut changes)
                                .await?
                        }
                        (_, NodeKind::Dir { .. }) => {
                            below_one_side(repo, &path, b, "+", &mut stats.added, &mut changes)
                                .await?
                        }
                        _ => {}
                    }
                }
                (None, None) => {}
            }
        }
        // Depth first, in name order: the first folder is compared next.
        pending.extend(below.into_iter().rev());
    }
    // restic lists what is under a folder right after it: sort by path, `/` before any byte.
    changes.sort_by(|x, y| path_order(&x.path).cmp(&path_order(&y.path)));
    count_blobs(repo, old, new, &mut stats).await?;
    Ok((changes, stats))
}

/// A path's components, for ordering changes as a depth-first walk meets them.
fn path_order(path: &[u8]) -> Vec<&[u8]> {
    path.split(|&byte| byte == b'/')
        .filter(|name| !name.is_empty())
        .collect()
}

/// The entries of two folders side by side, by name.
fn pair_up<'a>(a: &'a Tree, b: &'a Tree) -> Vec<(&'a [u8], Option<&'a Node>, Option<&'a Node>)> {
    let mut names: Vec<&[u8]> = a
        .nodes
        .iter()
        .chain(&b.nodes)
        .map(|node| node.name.as_slice())
        .collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|name| (name, a.find(name), b.find(name)))
        .collect()
}

/// An entry only one snapshot holds, and all below it.
async fn one_side(
    repo: &IndexedRepository,
    path: &[u8],
    node: &Node,
    modifier: &str,
    side: &mut SideStats,
    changes: &mut Vec<Change>,
) -> Result<()> {
    side.count(node);
    changes.push(Change {
        path: shown(path, node),
        modifier: modifier.to_owned(),
    });
    below_one_side(repo, path, node, modifier, side, changes).await
}

/// What is below a folder only one snapshot holds there.
async fn below_one_side(
    repo: &IndexedRepository,
    path: &[u8],
    node: &Node,
    modifier: &str,
    side: &mut SideStats,
    changes: &mut Vec<Change>,
) -> Result<()> {
    let NodeKind::Dir { subtree } = &node.kind else {
        return Ok(());
    };
    walk::walk(repo, subtree, |below, node| -> Result<Descend> {
        side.count(node);
        changes.push(Change {
            path: shown(&[path, below].concat(), node),
            modifier: modifier.to_owned(),
        });
        Ok(Descend::Into)
    })
    .await
}

/// Every data blob of the tree `root`.
async fn data_blobs(repo: &IndexedRepository, root: &BlobId) -> Result<HashSet<BlobId>> {
    let mut blobs = HashSet::new();
    walk::walk(repo, root, |_, node| -> Result<Descend> {
        if let NodeKind::File { content, .. } = &node.kind {
            blobs.extend(content.iter().copied());
        }
        Ok(Descend::Into)
    })
    .await?;
    Ok(blobs)
}

/// Counts the data blobs only one side holds, and their bytes.
async fn count_blobs(
    repo: &IndexedRepository,
    old: &BlobId,
    new: &BlobId,
    stats: &mut DiffStats,
) -> Result<()> {
    let (old_blobs, new_blobs) = (data_blobs(repo, old).await?, data_blobs(repo, new).await?);
    let index = repo.index();
    for (only, side) in [
        (old_blobs.difference(&new_blobs), &mut stats.removed),
        (new_blobs.difference(&old_blobs), &mut stats.added),
    ] {
        for blob in only {
            side.data_blobs += 1;
            side.bytes += index.get(blob).map_or(0, |at| u64::from(at.raw_length));
        }
    }
    Ok(())
}
