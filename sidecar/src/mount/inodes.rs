//! The mount's inodes: the layout's folders and links, made at mount time, and the entries of
//! snapshots, numbered as they are first looked up or listed.
//!
//! An entry keeps its number for the life of the mount (the kernel may ask for it again at any
//! time); the trees it came from stay in the bounded tree cache, not here. Files of one snapshot
//! that were hard links of each other share one number, so `cp -a` links them again.

use super::layout::{Layout, LayoutDir, LayoutEntry};
use crate::format::tree::{Metadata, Node, NodeKind, Timestamp};
use crate::ids::BlobId;
use std::collections::HashMap;

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
    /// An entry of a snapshot, as stored in its tree.
    Entry(Node),
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
            InodeKind::Entry(Node {
                kind: NodeKind::Dir { subtree },
                ..
            }) => Some(*subtree),
            _ => None,
        }
    }
}

/// Every inode handed out so far.
pub(crate) struct InodeTable {
    /// Inode `n` is `inodes[n - 1]`.
    inodes: Vec<Inode>,
    /// The entries of snapshot directories numbered so far, by parent and name.
    children: HashMap<(u64, Vec<u8>), u64>,
    /// Files with more than one link, by snapshot folder, device and inode.
    hard_links: HashMap<(u64, u64, u64), u64>,
}

impl InodeTable {
    /// The table of a layout: its folders and links, numbered from the root.
    pub fn new(layout: &Layout) -> InodeTable {
        let mut table = InodeTable {
            inodes: Vec::new(),
            children: HashMap::new(),
            hard_links: HashMap::new(),
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
        self.inodes.push(inode);
        self.inodes.len() as u64
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
                    let child = self.inodes.len() as u64 + 1;
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
            &mut self.inodes[number as usize - 1].kind
        {
            *slot = entries;
        }
    }

    pub fn get(&self, number: u64) -> Option<&Inode> {
        number
            .checked_sub(1)
            .and_then(|index| self.inodes.get(index as usize))
    }

    /// The number of `node`, an entry of the snapshot directory `parent`: the one it already
    /// has, or a new one.
    pub fn entry(&mut self, parent: u64, node: &Node) -> u64 {
        let key = (parent, node.name.clone());
        if let Some(&number) = self.children.get(&key) {
            return number;
        }
        let snapshot_root = self.get(parent).map_or(0, |inode| inode.snapshot_root);
        let link_key = (snapshot_root, node.meta.device, node.meta.inode);
        let shared = matches!(node.kind, NodeKind::File { .. }) && node.meta.links > 1;
        let number = match self.hard_links.get(&link_key) {
            Some(&number) if shared => number,
            _ => {
                let number = self.push(Inode {
                    parent,
                    snapshot_root,
                    kind: InodeKind::Entry(node.clone()),
                });
                if shared {
                    self.hard_links.insert(link_key, number);
                }
                number
            }
        };
        self.children.insert(key, number);
        number
    }
}

/// What a `stat` of an inode shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attributes {
    pub kind: EntryKind,
    /// Permission bits with setuid, setgid and sticky.
    pub permissions: u16,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    pub links: u32,
    pub rdev: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryKind {
    Directory,
    File,
    Symlink,
    Fifo,
    CharDevice,
    BlockDevice,
}

/// The attributes of a folder or link above the snapshots: owned by root, read-only.
fn layout_attributes(kind: EntryKind, size: u64, time: Timestamp) -> Attributes {
    Attributes {
        kind,
        permissions: if kind == EntryKind::Directory {
            0o555
        } else {
            0o777
        },
        uid: 0,
        gid: 0,
        size,
        mtime: time,
        ctime: time,
        links: 1,
        rdev: 0,
    }
}

fn entry_attributes(node: &Node) -> Attributes {
    let Metadata {
        mode,
        uid,
        gid,
        mtime,
        ctime,
        links,
        ..
    } = node.meta;
    let (kind, size, rdev) = match &node.kind {
        NodeKind::File { size, .. } => (EntryKind::File, *size, 0),
        NodeKind::Dir { .. } => (EntryKind::Directory, 0, 0),
        NodeKind::Symlink { target } => (EntryKind::Symlink, target.len() as u64, 0),
        NodeKind::Fifo => (EntryKind::Fifo, 0, 0),
        NodeKind::CharDevice { rdev } => (EntryKind::CharDevice, 0, *rdev),
        NodeKind::BlockDevice { rdev } => (EntryKind::BlockDevice, 0, *rdev),
    };
    Attributes {
        kind,
        permissions: (mode & 0o7777) as u16,
        uid,
        gid,
        size,
        mtime,
        ctime,
        links: if kind == EntryKind::File {
            links.clamp(1, u64::from(u32::MAX)) as u32
        } else {
            1
        },
        // The kernel's 32-bit encoding of the stored 64-bit device number.
        rdev: encode_rdev(rdev),
    }
}

/// A 64-bit device number (glibc's encoding) as FUSE's 32-bit one (the kernel's `new_encode_dev`).
fn encode_rdev(rdev: u64) -> u32 {
    let major = nix::sys::stat::major(rdev) as u32;
    let minor = nix::sys::stat::minor(rdev) as u32;
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

impl Inode {
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
            InodeKind::Entry(node) => entry_attributes(node),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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

    #[test]
    fn entries_keep_their_numbers_and_hard_links_share_one() {
        let mut table = InodeTable::new(&build_layout(&[], &SnapshotSelection::default()));
        let root = table.get(ROOT_INODE).unwrap();
        let InodeKind::LayoutDir { entries, .. } = &root.kind else {
            panic!("the root is a folder");
        };
        assert_eq!(entries.len(), 4);
        let parent = entries[0].1;
        let first = table.entry(parent, &file("a", 100, 2));
        assert_eq!(table.entry(parent, &file("a", 100, 2)), first);
        assert_eq!(
            table.entry(parent, &file("b", 100, 2)),
            first,
            "a hard link"
        );
        assert_ne!(
            table.entry(parent, &file("c", 100, 1)),
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
    }

    #[test]
    fn device_numbers_are_encoded_as_the_kernel_does() {
        assert_eq!(encode_rdev(nix::sys::stat::makedev(1, 3)), 0x103);
        assert_eq!(encode_rdev(nix::sys::stat::makedev(8, 0x1234)), 0x120_0834);
    }
}
