//! What a `stat` of the mount shows: for the folders and links above the snapshots, read-only
//! entries owned by root; for the entries of a snapshot, what their node stored.

use crate::format::tree::{Metadata, Node, NodeKind, Timestamp};

/// What a `stat` of an inode shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attributes {
    pub kind: EntryKind,
    /// Permission bits with setuid, setgid and sticky.
    pub permissions: u16,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// 512-byte blocks of data held: less than the size for a file with holes.
    pub blocks: u64,
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

/// 512-byte blocks for `bytes` (what `st_blocks` counts).
fn blocks_of(bytes: u64) -> u64 {
    bytes.div_ceil(512)
}

/// The attributes of a folder or link above the snapshots: owned by root, read-only.
pub(crate) fn layout_attributes(kind: EntryKind, size: u64, time: Timestamp) -> Attributes {
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
        blocks: blocks_of(size),
        mtime: time,
        ctime: time,
        links: 1,
        rdev: 0,
    }
}

/// The attributes of a snapshot's entry; `data_bytes` is what a file holds outside its holes
/// (its size when it has none).
pub(crate) fn entry_attributes(node: &Node, data_bytes: u64) -> Attributes {
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
        blocks: blocks_of(if kind == EntryKind::File {
            data_bytes.min(size)
        } else {
            size
        }),
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

/// The kind of entry `node` is, without its other attributes (what a listing shows).
pub(crate) fn entry_kind(node: &Node) -> EntryKind {
    match &node.kind {
        NodeKind::File { .. } => EntryKind::File,
        NodeKind::Dir { .. } => EntryKind::Directory,
        NodeKind::Symlink { .. } => EntryKind::Symlink,
        NodeKind::Fifo => EntryKind::Fifo,
        NodeKind::CharDevice { .. } => EntryKind::CharDevice,
        NodeKind::BlockDevice { .. } => EntryKind::BlockDevice,
    }
}

/// A 64-bit device number (glibc's encoding) as FUSE's 32-bit one (the kernel's `new_encode_dev`).
fn encode_rdev(rdev: u64) -> u32 {
    let major = nix::sys::stat::major(rdev) as u32;
    let minor = nix::sys::stat::minor(rdev) as u32;
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_numbers_are_encoded_as_the_kernel_does() {
        assert_eq!(encode_rdev(nix::sys::stat::makedev(1, 3)), 0x103);
        assert_eq!(encode_rdev(nix::sys::stat::makedev(8, 0x1234)), 0x120_0834);
    }

    #[test]
    fn a_file_counts_the_blocks_of_its_data_and_others_their_size() {
        let mut node = Node {
            name: b"sparse".to_vec(),
            kind: NodeKind::File {
                size: 10_000,
                content: Vec::new(),
            },
            meta: Metadata {
                mode: 0o100644,
                uid: 1,
                gid: 2,
                mtime: Timestamp::default(),
                ctime: Timestamp::default(),
                inode: 3,
                device: 4,
                links: 0,
            },
        };
        let attributes = entry_attributes(&node, 1_000);
        assert_eq!((attributes.size, attributes.blocks), (10_000, 2));
        assert_eq!(attributes.permissions, 0o644);
        assert_eq!(attributes.links, 1, "a stored link count of 0 shows as 1");
        assert_eq!(
            entry_attributes(&node, 20_000).blocks,
            20,
            "never above the size"
        );
        node.kind = NodeKind::Symlink {
            target: b"target".to_vec(),
        };
        let link = entry_attributes(&node, 0);
        assert_eq!(
            (link.kind, link.size, link.blocks),
            (EntryKind::Symlink, 6, 1)
        );
        assert_eq!(entry_kind(&node), EntryKind::Symlink);
        let dir = layout_attributes(EntryKind::Directory, 0, Timestamp::default());
        assert_eq!((dir.permissions, dir.uid, dir.blocks), (0o555, 0, 0));
    }
}
