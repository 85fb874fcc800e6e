//! The FUSE side: the kernel's requests (look up, stat, list, read a link, open, read) answered
//! from the inode table and the reader. Everything is read-only; a request to change anything is
//! refused by the kernel (the mount is `ro`) or here with `EROFS`.
//!
//! Requests arrive on the session's own thread; repository reads run on the caller's tokio
//! runtime, which that thread blocks on.

use super::inodes::{Attributes, EntryKind, Inode, InodeKind, InodeTable};
use super::reader::{FileLayout, SnapshotReader};
use crate::error::Error;
use crate::format::tree::{NodeKind, Timestamp};
use fuser::{
    FileAttr, FileType, Filesystem, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyXattr, Request,
};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long the kernel may keep what it was told: nothing of a mount ever changes.
const TTL: Duration = Duration::from_secs(3600);

/// The block size `stat` reports.
const BLOCK_SIZE: u32 = 4096;

pub(crate) struct SnapshotFs {
    runtime: tokio::runtime::Handle,
    reader: Arc<SnapshotReader>,
    inodes: InodeTable,
    /// The layouts of open files, by handle.
    open_files: HashMap<u64, Arc<FileLayout>>,
    next_handle: u64,
    /// The folder listed last and its entries (with `.` and `..`): a large folder is listed in
    /// many requests, each continuing where the one before stopped.
    listing: Option<(u64, Arc<Listing>)>,
}

type Listing = Vec<(Vec<u8>, u64, EntryKind)>;

fn system_time(time: Timestamp) -> SystemTime {
    let nanos = Duration::from_nanos(u64::from(time.nanos));
    let seconds = Duration::from_secs(time.secs.unsigned_abs());
    if time.secs >= 0 {
        UNIX_EPOCH + seconds + nanos
    } else {
        UNIX_EPOCH - seconds + nanos
    }
}

fn file_type(kind: EntryKind) -> FileType {
    match kind {
        EntryKind::Directory => FileType::Directory,
        EntryKind::File => FileType::RegularFile,
        EntryKind::Symlink => FileType::Symlink,
        EntryKind::Fifo => FileType::NamedPipe,
        EntryKind::CharDevice => FileType::CharDevice,
        EntryKind::BlockDevice => FileType::BlockDevice,
    }
}

fn file_attr(number: u64, attributes: &Attributes) -> FileAttr {
    let mtime = system_time(attributes.mtime);
    FileAttr {
        ino: number,
        size: attributes.size,
        blocks: attributes.size.div_ceil(512),
        atime: mtime,
        mtime,
        ctime: system_time(attributes.ctime),
        crtime: mtime,
        kind: file_type(attributes.kind),
        perm: attributes.permissions,
        nlink: attributes.links,
        uid: attributes.uid,
        gid: attributes.gid,
        rdev: attributes.rdev,
        blksize: BLOCK_SIZE,
        flags: 0,
    }
}

/// The errno of a failed repository read, said in the log (the kernel only passes on a number).
fn errno_of(error: &Error, what: &str) -> i32 {
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

    /// The entries of folder `number` (without `.` and `..`), numbered; `Err(errno)` when it is
    /// not a folder or its tree cannot be read.
    fn entries(&mut self, number: u64) -> Result<Vec<(Vec<u8>, u64, EntryKind)>, i32> {
        let inode = self.inodes.get(number).ok_or(libc::ENOENT)?.clone();
        if let InodeKind::LayoutDir { entries, .. } = &inode.kind {
            return Ok(entries
                .iter()
                .map(|(name, child)| (name.clone(), *child, self.kind_of(*child)))
                .collect());
        }
        let tree = self.tree_of(&inode)?;
        Ok(tree
            .nodes
            .iter()
            .map(|node| {
                let child = self.inodes.entry(number, node);
                (node.name.clone(), child, self.kind_of(child))
            })
            .collect())
    }

    /// `.`, `..` and the entries of folder `number`.
    fn listing_of(&mut self, number: u64) -> Result<Arc<Listing>, i32> {
        let entries = self.entries(number)?;
        let parent = self.inodes.get(number).map_or(number, |inode| inode.parent);
        let mut listing = Vec::with_capacity(entries.len() + 2);
        listing.push((b".".to_vec(), number, EntryKind::Directory));
        listing.push((b"..".to_vec(), parent, EntryKind::Directory));
        listing.extend(entries);
        Ok(Arc::new(listing))
    }

    fn kind_of(&self, number: u64) -> EntryKind {
        self.inodes
            .get(number)
            .map_or(EntryKind::File, |inode| inode.attributes().kind)
    }

    fn tree_of(&self, inode: &Inode) -> Result<Arc<crate::format::tree::Tree>, i32> {
        let subtree = inode.subtree().ok_or(libc::ENOTDIR)?;
        self.runtime
            .block_on(self.reader.tree(&subtree))
            .map_err(|error| errno_of(&error, &format!("the folder of tree {subtree}")))
    }

    fn lookup_number(&mut self, parent: u64, name: &[u8]) -> Result<u64, i32> {
        let inode = self.inodes.get(parent).ok_or(libc::ENOENT)?.clone();
        if let InodeKind::LayoutDir { entries, .. } = &inode.kind {
            return entries
                .iter()
                .find(|(entry, _)| entry == name)
                .map(|(_, child)| *child)
                .ok_or(libc::ENOENT);
        }
        let tree = self.tree_of(&inode)?;
        let node = tree.find(name).ok_or(libc::ENOENT)?;
        Ok(self.inodes.entry(parent, node))
    }

    fn open_file(&mut self, number: u64) -> Result<u64, i32> {
        let inode = self.inodes.get(number).ok_or(libc::ENOENT)?;
        let InodeKind::Entry(node) = &inode.kind else {
            return Err(libc::EISDIR);
        };
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
}

impl Filesystem for SnapshotFs {
    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        match self.lookup_number(parent, name.as_bytes()) {
            Ok(number) => {
                let attributes = self.inodes.get(number).map(Inode::attributes);
                match attributes {
                    Some(attributes) => reply.entry(&TTL, &file_attr(number, &attributes), 0),
                    None => reply.error(libc::ENOENT),
                }
            }
            Err(errno) => reply.error(errno),
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        match self.inodes.get(ino) {
            Some(inode) => reply.attr(&TTL, &file_attr(ino, &inode.attributes())),
            None => reply.error(libc::ENOENT),
        }
    }

    fn readlink(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyData) {
        match self.inodes.get(ino).map(|inode| &inode.kind) {
            Some(InodeKind::LayoutLink { target, .. }) => reply.data(target),
            Some(InodeKind::Entry(node)) => match &node.kind {
                NodeKind::Symlink { target } => reply.data(target),
                _ => reply.error(libc::EINVAL),
            },
            Some(_) => reply.error(libc::EINVAL),
            None => reply.error(libc::ENOENT),
        }
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        if flags & libc::O_ACCMODE != libc::O_RDONLY {
            return reply.error(libc::EROFS);
        }
        match self.open_file(ino) {
            // The content never changes: the kernel may keep its pages across opens.
            Ok(handle) => reply.opened(handle, fuser::consts::FOPEN_KEEP_CACHE),
            Err(errno) => reply.error(errno),
        }
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let Some(layout) = self.open_files.get(&fh).cloned() else {
            return reply.error(libc::EBADF);
        };
        let Ok(offset) = u64::try_from(offset) else {
            return reply.error(libc::EINVAL);
        };
        match self
            .runtime
            .block_on(self.reader.read(&layout, offset, size as usize))
        {
            Ok(bytes) => reply.data(&bytes),
            Err(error) => reply.error(errno_of(&error, "a file's content")),
        }
    }

    fn release(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        _flags: i32,
        _lock_owner: Option<u64>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.open_files.remove(&fh);
        reply.ok();
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        let listing = match &self.listing {
            // A listing's first request reads the folder afresh; the rest continue it.
            Some((listed, listing)) if *listed == ino && offset > 0 => listing.clone(),
            _ => match self.listing_of(ino) {
                Ok(listing) => {
                    self.listing = Some((ino, listing.clone()));
                    listing
                }
                Err(errno) => return reply.error(errno),
            },
        };
        let skip = usize::try_from(offset).unwrap_or(0);
        for (index, (name, number, kind)) in listing.iter().enumerate().skip(skip) {
            // The offset of an entry is where the next listing starts.
            if reply.add(
                *number,
                index as i64 + 1,
                file_type(*kind),
                OsStr::from_bytes(name),
            ) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        reply.statfs(0, 0, 0, 0, 0, BLOCK_SIZE, 255, BLOCK_SIZE);
    }

    fn getxattr(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        // Extended attributes are not stored: there are none.
        reply.error(libc::ENODATA);
    }

    fn listxattr(&mut self, _req: &Request<'_>, _ino: u64, size: u32, reply: ReplyXattr) {
        if size == 0 {
            reply.size(0);
        } else {
            reply.data(&[]);
        }
    }
}
