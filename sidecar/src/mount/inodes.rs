//! The mount's inodes: the layout's folders and links, made at mount time and kept, and the
//! entries of snapshots the kernel has looked up, kept only while it holds them.
//!
//! The kernel counts its lookups of an entry and forgets them (FUSE `forget`) when it drops the
//! inode from its cache; an entry whose count falls to zero leaves the table, so the table holds
//! what the kernel holds, not everything ever listed. An entry's number comes from what it is
//! (its folder's number and its name; for a hard link, its snapshot, device and inode), so it is
//! the same number when it is looked up again after being forgotten, and the number a listing
//! shows. Files of one snapshot that were hard links of each other share one number, so `cp -a`
//! links them again.

use super::attributes::{layout_attributes, Attributes, EntryKind};
use super::layout::{Layout, LayoutDir, LayoutEntry};
use crate::format::tree::{Node, NodeKind, Timestamp};
use crate::ids::BlobId;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// The root folder's inode number (FUSE's).
pub const ROOT_INODE: u64 = 1;

/// What an inode is.
#[derive(Debug, Clone)]
pub(crate) enum InodeKind {
    /// A folder above the snapshots, its entries numbered.
    LayoutDir {
        entries: Vec<(Vec<u8>, u64)>,
        time: Timestamp,
    },
    /// A `latest` link.
    LayoutLink { target: Vec<u8>, time: Timestamp },
    /// The folder of one snapshot: the entries of its root tree.
    SnapshotRoot { tree: BlobId, time: Timestamp },
    /// An entry of a snapshot.
    Entry(EntryInode),
}

/// An entry of a snapshot as the kernel knows it: what `stat` shows and where its node is, not
/// the node itself (a file's content list is read again, from the tree cache, when it is opened).
#[derive(Debug, Clone)]
pub(crate) struct EntryInode {
    /// The tree of the folder it is in: its node is `name` there.
    pub folder_tree: BlobId,
    pub name: Vec<u8>,
    /// Its own tree, for a directory.
    pub subtree: Option<BlobId>,
    pub attributes: Attributes,
    /// Lookups the kernel has not forgotten yet.
    lookups: u64,
    identity: Identity,
}

#[derive(Debug, Clone)]
pub(crate) struct Inode {
    pub parent: u64,
    /// The snapshot folder this entry is below (itself for a snapshot folder; 0 above them).
    pub snapshot_root: u64,
    pub kind: InodeKind,
}

impl Inode {
    /// The tree whose entries this folder holds, for snapshot folders and their directories.
    pub fn subtree(&self) -> Option<BlobId> {
        match &self.kind {
            InodeKind::SnapshotRoot { tree, .. } => Some(*tree),
            InodeKind::Entry(entry) => entry.subtree,
            _ => None,
        }
    }

    pub fn attributes(&self) -> Attributes {
        match &self.kind {
            InodeKind::LayoutDir { time, .. } => layout_attributes(EntryKind::Directory, 0, *time),
            InodeKind::LayoutLink { target, time } => {
                layout_attributes(EntryKind::Symlink, target.len() as u64, *time)
            }
            InodeKind::SnapshotRoot { time, .. } => Attributes {
                permissions: 0o755,
                ..layout_attributes(EntryKind::Directory, 0, *time)
            },
            InodeKind::Entry(entry) => entry.attributes.clone(),
        }
    }
}

/// What an entry's number is derived from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Identity {
    Named {
        parent: u64,
        name: Vec<u8>,
    },
    /// A file with more than one link: one number for all its names in the snapshot.
    HardLink {
        snapshot_root: u64,
        device: u64,
        inode: u64,
    },
}

/// The layout's inodes and the snapshot entries the kernel holds.
pub(crate) struct InodeTable {
    /// Inode `n` of the layout is `layout[n - 1]`.
    layout: Vec<Inode>,
    /// Entries of snapshots, by number.
    entries: HashMap<u64, Inode>,
    /// The numbers of those entries, by what they are.
    numbers: HashMap<Identity, u64>,
}

impl InodeTable {
    /// The table of a layout: its folders and links, numbered from the root.
    pub fn new(layout: &Layout) -> InodeTable {
        let mut table = InodeTable {
            layout: Vec::new(),
            entries: HashMap::new(),
            numbers: HashMap::new(),
        };
        table.push(Inode {
            parent: ROOT_INODE,
            snapshot_root: 0,
            kind: InodeKind::LayoutDir {
                entries: Vec::new(),
                time: layout.root.time,
            },
        });
        table.add_layout_dir(ROOT_INODE, &layout.root, layout);
        table
    }

    fn push(&mut self, inode: Inode) -> u64 {
        self.layout.push(inode);
        self.layout.len() as u64
    }

    fn add_layout_dir(&mut self, number: u64, dir: &LayoutDir, layout: &Layout) {
        let mut entries = Vec::with_capacity(dir.entries.len());
        for (name, entry) in &dir.entries {
            let child = match entry {
                LayoutEntry::Dir(sub) => {
                    let child = self.push(Inode {
                        parent: number,
                        snapshot_root: 0,
                        kind: InodeKind::LayoutDir {
                            entries: Vec::new(),
                            time: sub.time,
                        },
                    });
                    self.add_layout_dir(child, sub, layout);
                    child
                }
                LayoutEntry::Link(target) => self.push(Inode {
                    parent: number,
                    snapshot_root: 0,
                    kind: InodeKind::LayoutLink {
                        target: target.clone(),
                        time: dir.time,
                    },
                }),
                LayoutEntry::Snapshot(index) => {
                    let snapshot = &layout.snapshots[*index];
                    let child = self.layout.len() as u64 + 1;
                    self.push(Inode {
                        parent: number,
                        snapshot_root: child,
                        kind: InodeKind::SnapshotRoot {
                            tree: snapshot.tree,
                            time: snapshot.time,
                        },
                    })
                }
            };
            entries.push((name.clone(), child));
        }
        if let InodeKind::LayoutDir { entries: slot, .. } =
            &mut self.layout[number as usize - 1].kind
        {
            *slot = entries;
        }
    }

    pub fn get(&self, number: u64) -> Option<&Inode> {
        match number
            .checked_sub(1)
            .and_then(|i| self.layout.get(i as usize))
        {
            Some(inode) => Some(inode),
            None => self.entries.get(&number),
        }
    }

    fn identity(&self, parent: u64, node: &Node) -> Identity {
        let snapshot_root = self.get(parent).map_or(0, |inode| inode.snapshot_root);
        if matches!(node.kind, NodeKind::File { .. }) && node.meta.links > 1 {
            Identity::HardLink {
                snapshot_root,
                device: node.meta.device,
                inode: node.meta.inode,
            }
        } else {
            Identity::Named {
                parent,
                name: node.name.clone(),
            }
        }
    }

    /// The number `identity` has, or gets when looked up now: a hash of it, past the layout's
    /// numbers and those taken by other entries (then hashed again with a counter).
    fn number_for(&self, identity: &Identity) -> u64 {
        if let Some(&number) = self.numbers.get(identity) {
            return number;
        }
        (0u64..)
            .map(|attempt| {
                let mut hasher = std::hash::DefaultHasher::new();
                (identity, attempt).hash(&mut hasher);
                hasher.finish()
            })
            .find(|&number| {
                number > self.layout.len() as u64 && !self.entries.contains_key(&number)
            })
            .unwrap_or(u64::MAX)
    }

    /// The number a listing shows for `node`, an entry of the snapshot directory `parent`,
    /// without keeping anything: the number a lookup gives it.
    pub fn listed_number(&self, parent: u64, node: &Node) -> u64 {
        self.number_for(&self.identity(parent, node))
    }

    /// Looks up `node`, an entry of the snapshot directory `parent` whose tree is `folder_tree`:
    /// its number, kept (with its `attributes`, made only for a new entry) until the kernel
    /// forgets this lookup.
    pub fn look_up(
        &mut self,
        parent: u64,
        folder_tree: BlobId,
        node: &Node,
        attributes: impl FnOnce() -> Attributes,
    ) -> u64 {
        let identity = self.identity(parent, node);
        if let Some(&number) = self.numbers.get(&identity) {
            if let Some(Inode {
                kind: InodeKind::Entry(entry),
                ..
            }) = self.entries.get_mut(&number)
            {
                entry.lookups += 1;
            }
            return number;
        }
        let number = self.number_for(&identity);
        let snapshot_root = self.get(parent).map_or(0, |inode| inode.snapshot_root);
        let subtree = match &node.kind {
            NodeKind::Dir { subtree } => Some(*subtree),
            _ => None,
        };
        self.numbers.insert(identity.clone(), number);
        self.entries.insert(
            number,
            Inode {
                parent,
                snapshot_root,
                kind: InodeKind::Entry(EntryInode {
                    folder_tree,
                    name: node.name.clone(),
                    subtree,
                    attributes: attributes(),
                    lookups: 1,
                    identity,
                }),
            },
        );
        number
    }

    /// The kernel forgets `lookups` lookups of `number`: an entry with none left is dropped.
    /// The layout's inodes stay (they are few and made once).
    pub fn forget(&mut self, number: u64, lookups: u64) {
        let Some(Inode {
            kind: InodeKind::Entry(entry),
            ..
        }) = self.entries.get_mut(&number)
        else {
            return;
        };
        entry.lookups = entry.lookups.saturating_sub(lookups);
        if entry.lookups == 0 {
            let identity = entry.identity.clone();
            self.entries.remove(&number);
            self.numbers.remove(&identity);
        }
    }

    /// How many snapshot entries the table holds now.
    pub fn entry_count(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::tree::Metadata;
    use crate::mount::attributes::entry_attributes;
    use crate::mount::layout::{build_layout, SnapshotSelection};

    fn file(name: &str, inode: u64, links: u64) -> Node {
        Node {
            name: name.as_bytes().to_vec(),
            kind: NodeKind::File {
                size: 3,
                content: Vec::new(),
            },
            meta: Metadata {
                mode: 0o4750,
                uid: 1234,
                gid: 5678,
                mtime: Timestamp { secs: 5, nanos: 6 },
                ctime: Timestamp { secs: 7, nanos: 8 },
                inode,
                device: 9,
                links,
            },
        }
    }

    /// A table without snapshots, and the number of its `snapshots` folder (a layout folder,
    /// standing in for a snapshot directory).
    fn table() -> (InodeTable, u64) {
        let table = InodeTable::new(&build_layout(&[], &SnapshotSelection::default()));
        let root = table.get(ROOT_INODE).unwrap();
        let InodeKind::LayoutDir { entries, .. } = &root.kind else {
            panic!("the root is a folder");
        };
        assert_eq!(entries.len(), 4);
        let parent = entries[0].1;
        (table, parent)
    }

    fn look_up(table: &mut InodeTable, parent: u64, node: &Node) -> u64 {
        table.look_up(parent, BlobId::from_bytes([1; 32]), node, || {
            entry_attributes(node, 3)
        })
    }

    #[test]
    fn entries_keep_their_numbers_and_hard_links_share_one() {
        let (mut table, parent) = table();
        let first = look_up(&mut table, parent, &file("a", 100, 2));
        assert_eq!(look_up(&mut table, parent, &file("a", 100, 2)), first);
        assert_eq!(
            look_up(&mut table, parent, &file("b", 100, 2)),
            first,
            "a hard link"
        );
        assert_ne!(
            look_up(&mut table, parent, &file("c", 100, 1)),
            first,
            "not a hard link"
        );
        let attributes = table.get(first).unwrap().attributes();
        assert_eq!(attributes.permissions, 0o4750);
        assert_eq!(
            (attributes.uid, attributes.gid, attributes.links),
            (1234, 5678, 2)
        );
        assert_eq!(attributes.mtime, Timestamp { secs: 5, nanos: 6 });
        assert_eq!(table.entry_count(), 2);
    }

    #[test]
    fn an_entry_stays_until_every_lookup_is_forgotten_and_comes_back_with_its_number() {
        let (mut table, parent) = table();
        let node = file("kept", 7, 1);
        let listed = table.listed_number(parent, &node);
        let number = look_up(&mut table, parent, &node);
        assert_eq!(number, listed, "a listing shows the number a lookup gives");
        assert_eq!(look_up(&mut table, parent, &node), number);
        table.forget(number, 1);
        assert!(table.get(number).is_some(), "one lookup is left");
        table.forget(number, 1);
        assert!(table.get(number).is_none(), "forgotten: dropped");
        assert_eq!(table.entry_count(), 0);
        assert_eq!(
            look_up(&mut table, parent, &node),
            number,
            "same number again"
        );
        // Forgetting more than was looked up, or an unknown or layout inode, is harmless.
        table.forget(number, 5);
        table.forget(number, 1);
        table.forget(u64::MAX - 1, 1);
        table.forget(ROOT_INODE, 1);
        assert!(table.get(ROOT_INODE).is_some(), "the layout stays");
        assert_eq!(table.entry_count(), 0);
    }

    #[test]
    fn the_table_holds_what_the_kernel_holds_however_much_is_listed() {
        let (mut table, parent) = table();
        for round in 0..3 {
            let numbers: Vec<u64> = (0..1000)
                .map(|index| {
                    let node = file(&format!("file-{index}"), index, 1);
                    table.listed_number(parent, &node);
                    look_up(&mut table, parent, &node)
                })
                .collect();
            assert_eq!(table.entry_count(), 1000, "round {round}");
            let mut distinct = numbers.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct.len(), 1000, "every entry has its own number");
            assert!(numbers.iter().all(|&n| table.get(n).is_some()));
            for number in numbers {
                table.forget(number, 1);
            }
            assert_eq!(table.entry_count(), 0, "round {round}");
        }
    }

    #[test]
    fn the_same_name_in_another_folder_is_another_entry() {
        let (mut table, parent) = table();
        let other = parent + 1;
        let node = file("same", 1, 1);
        assert_ne!(
            look_up(&mut table, parent, &node),
            look_up(&mut table, other, &node)
        );
        assert_eq!(table.entry_count(), 2);
    }
}
