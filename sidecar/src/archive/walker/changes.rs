//! What a backup changed against its parent snapshot, counted folder by folder as the walk
//! compares each folder with the parent's tree of the same folder (restic's rules for files: new
//! when the parent's folder holds no file of that name, unmodified when it holds the very same
//! node, changed otherwise).

use crate::format::tree::{Node, NodeKind, Tree};

/// Files of this backup against the parent's.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FileChanges {
    pub new: u64,
    pub changed: u64,
    pub unmodified: u64,
    /// Entries of the parent's folders that this backup's same folders do not hold: a file, link
    /// or device each, and a folder gone with all it held counts once (its trees are not read).
    pub removed: u64,
}

impl FileChanges {
    /// Counts one folder's `nodes` (sorted by name, as a tree's) against the parent's tree of
    /// the same folder, if the parent has one.
    pub fn count_folder(&mut self, parent: Option<&Tree>, nodes: &[Node]) {
        for node in nodes {
            if !matches!(node.kind, NodeKind::File { .. }) {
                continue;
            }
            match parent.and_then(|tree| tree.find(&node.name)) {
                Some(old) if old == node => self.unmodified += 1,
                Some(old) if matches!(old.kind, NodeKind::File { .. }) => self.changed += 1,
                _ => self.new += 1,
            }
        }
        let Some(parent) = parent else {
            return;
        };
        let gone = parent.nodes.iter().filter(|old| {
            nodes
                .binary_search_by(|node| node.name.as_slice().cmp(&old.name))
                .is_err()
        });
        self.removed += gone.count() as u64;
    }
}
