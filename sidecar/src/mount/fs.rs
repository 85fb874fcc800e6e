//! The file system's answers, apart from FUSE's wire types (`fuse.rs` passes them on): look up,
//! stat, list, read a link, open, read, seek data or holes, and forget. Everything is read-only;
//! an errno says what went wrong, and a repository read that fails is also said in the log (the
//! kernel only passes on a number).
//!
//! Called on the session's own thread; repository reads run on the caller's tokio runtime, which
//! that thread blocks on.

use super::attributes::{entry_attributes, entry_kind, Attributes, EntryKind};
use super::inodes::{Inode, InodeKind, InodeTable};
use super::reader::{FileLayout, SeekTo, SnapshotReader};
use crate::error::Error;
use crate::format::tree::{Node, NodeKind, Tree};
use std::collections::HashMap;
use std::sync::Arc;

/// An errno, as the kernel gets it.
pub(crate) type Errno = i32;

/// A folder's entries with their numbers and kinds, `.` and `..` first.
pub(crate) type Listing = Vec<(Vec<u8>, u64, EntryKind)>;

pub(crate) struct SnapshotFs {
    runtime: tokio::runtime::Handle,
    reader: Arc<SnapshotReader>,
    inodes: InodeTable,
    /// The layouts of open files, by handle.
    open_files: HashMap<u64, Arc<FileLayout>>,
    next_handle: u64,
    /// The folder listed last and its listing: a large folder is listed in many requests, each
    /// continuing where the one before stopped.
    listing: Option<(u64, Arc<Listing>)>,
}

/// The errno of a failed repository read, said in the log.
fn errno_of(error: &Error, what: &str) -> Errno {
    tracing::warn!(%error, "cannot read {what}");
    libc::EIO
}

impl SnapshotFs {
    pub fn new(
        runtime: tokio::runtime::Handle,
        reader: Arc<SnapshotReader>,
        inodes: InodeTable,
    ) -> Self {
        SnapshotFs {
            runtime,
            reader,
            inodes,
            open_files: HashMap::new(),
            next_handle: 1,
            listing: None,
        }
    }

    fn inode(&self, number: u64) -> Result<&Inode, Errno> {
        self.inodes.get(number).ok_or(libc::ENOENT)
    }

    fn tree(&self, id: &crate::ids::BlobId) -> Result<Arc<Tree>, Errno> {
        self.runtime
            .block_on(self.reader.tree(id))
            .map_err(|error| errno_of(&error, &format!("the folder of tree {id}")))
    }

    /// The node of a snapshot entry, read again from its folder's tree (usually cached).
    fn node_of(&self, number: u64) -> Result<Node, Errno> {
        let InodeKind::Entry(entry) = &self.inode(number)?.kind else {
            return Err(libc::EINVAL);
        };
        let tree = self.tree(&entry.folder_tree)?;
        tree.find(&entry.name).cloned().ok_or(libc::ENOENT)
    }

    /// The entry `name` of folder `parent`: its number and attributes. The kernel now holds it
    /// until it forgets it ([`SnapshotFs::forget`]).
    pub fn look_up(&mut self, parent: u64, name: &[u8]) -> Result<(u64, Attributes), Errno> {
        let inode = self.inode(parent)?;
        if let InodeKind::LayoutDir { entries, .. } = &inode.kind {
            let child = entries
                .iter()
                .find(|(entry, _)| entry == name)
                .map(|(_, child)| *child)
                .ok_or(libc::ENOENT)?;
            return Ok((child, self.attributes(child)?));
        }
        let folder_tree = inode.subtree().ok_or(libc::ENOTDIR)?;
        let tree = self.tree(&folder_tree)?;
        let node = tree.find(name).ok_or(libc::ENOENT)?;
        let reader = &self.reader;
        let number = self.inodes.look_up(parent, folder_tree, node, || {
            let data_bytes = match &node.kind {
                // A content list the index lacks fails when the file is opened; its stat shows
                // its size.
                NodeKind::File { content, size } => reader
                    .file_layout(content)
                    .map_or(*size, |layout| layout.data_bytes()),
                _ => 0,
            };
            entry_attributes(node, data_bytes)
        });
        Ok((number, self.attributes(number)?))
    }

    /// The kernel no longer holds `lookups` of its lookups of `number`.
    pub fn forget(&mut self, number: u64, lookups: u64) {
        self.inodes.forget(number, lookups);
    }

    /// How many snapshot entries the inode table holds.
    pub fn entries_held(&self) -> usize {
        self.inodes.entry_count()
    }

    pub fn attributes(&self, number: u64) -> Result<Attributes, Errno> {
        Ok(self.inode(number)?.attributes())
    }

    /// The target of the symlink `number`.
    pub fn read_link(&self, number: u64) -> Result<Vec<u8>, Errno> {
        match &self.inode(number)?.kind {
            InodeKind::LayoutLink { target, .. } => Ok(target.clone()),
            InodeKind::Entry(entry) if entry.attributes.kind == EntryKind::Symlink => {
                match self.node_of(number)?.kind {
                    NodeKind::Symlink { target } => Ok(target),
                    _ => Err(libc::EINVAL),
                }
            }
            _ => Err(libc::EINVAL),
        }
    }

    /// `.`, `..` and the entries of folder `number`, numbered as a lookup numbers them (but not
    /// kept: a listing is not a lookup). A listing from `offset` 0 reads the folder afresh; a
    /// later offset continues the folder listed last.
    pub fn listing(&mut self, number: u64, offset: i64) -> Result<Arc<Listing>, Errno> {
        if let Some((listed, listing)) = &self.listing {
            if *listed == number && offset > 0 {
                return Ok(listing.clone());
            }
        }
        let inode = self.inode(number)?;
        let mut listing = vec![
            (b".".to_vec(), number, EntryKind::Directory),
            (b"..".to_vec(), inode.parent, EntryKind::Directory),
        ];
        if let InodeKind::LayoutDir { entries, .. } = &inode.kind {
            for (name, child) in entries {
                let kind = self.attributes(*child)?.kind;
                listing.push((name.clone(), *child, kind));
            }
        } else {
            let tree = self.tree(&inode.subtree().ok_or(libc::ENOTDIR)?)?;
            listing.extend(tree.nodes.iter().map(|node| {
                let child = self.inodes.listed_number(number, node);
                (node.name.clone(), child, entry_kind(node))
            }));
        }
        let listing = Arc::new(listing);
        self.listing = Some((number, listing.clone()));
        Ok(listing)
    }

    /// Opens file `number` for reading (`flags` as `open` gives them): its handle.
    pub fn open(&mut self, number: u64, flags: i32) -> Result<u64, Errno> {
        if flags & libc::O_ACCMODE != libc::O_RDONLY {
            return Err(libc::EROFS);
        }
        let inode = self.inode(number)?;
        let InodeKind::Entry(entry) = &inode.kind else {
            return Err(libc::EISDIR);
        };
        if entry.attributes.kind != EntryKind::File {
            return Err(if entry.attributes.kind == EntryKind::Directory {
                libc::EISDIR
            } else {
                libc::EINVAL
            });
        }
        let node = self.node_of(number)?;
        let NodeKind::File { size, content } = &node.kind else {
            return Err(libc::EINVAL);
        };
        let layout = self
            .reader
            .file_layout(content)
            .map_err(|error| errno_of(&error, "a file's content"))?;
        if layout.size() != *size {
            let error = Error::Corrupt {
                what: format!("file {}", String::from_utf8_lossy(&node.name)),
                reason: format!("its blobs hold {} bytes, not {size}", layout.size()),
            };
            return Err(errno_of(&error, "a file's content"));
        }
        let handle = self.next_handle;
        self.next_handle += 1;
        self.open_files.insert(handle, Arc::new(layout));
        Ok(handle)
    }

    fn open_file(&self, handle: u64) -> Result<Arc<FileLayout>, Errno> {
        self.open_files.get(&handle).cloned().ok_or(libc::EBADF)
    }

    /// Up to `size` bytes of the open file `handle` from `offset`.
    pub fn read(&self, handle: u64, offset: i64, size: u32) -> Result<Vec<u8>, Errno> {
        let layout = self.open_file(handle)?;
        let offset = u64::try_from(offset).map_err(|_| libc::EINVAL)?;
        self.runtime
            .block_on(self.reader.read(&layout, offset, size as usize))
            .map_err(|error| errno_of(&error, "a file's content"))
    }

    /// `lseek` with `SEEK_DATA` or `SEEK_HOLE` in the open file `handle`; the kernel answers the
    /// other kinds itself.
    pub fn seek(&self, handle: u64, offset: i64, whence: i32) -> Result<i64, Errno> {
        let layout = self.open_file(handle)?;
        let to = match whence {
            libc::SEEK_DATA => SeekTo::Data,
            libc::SEEK_HOLE => SeekTo::Hole,
            _ => return Err(libc::EINVAL),
        };
        let offset = u64::try_from(offset).map_err(|_| libc::ENXIO)?;
        let found = layout.seek(offset, to).ok_or(libc::ENXIO)?;
        i64::try_from(found).map_err(|_| libc::EOVERFLOW)
    }

    pub fn release(&mut self, handle: u64) {
        self.open_files.remove(&handle);
    }
}

#[cfg(test)]
mod tests;
