//! The FUSE side: the kernel's requests passed to [`SnapshotFs`] and its answers passed back in
//! FUSE's types. A request to change anything is refused by the kernel (the mount is `ro`) or by
//! the file system with `EROFS`.
//!
//! The file system is shared with the session's thread ([`SharedFs`]), which drops it when the
//! session ends: a session that ended by an outside unmount is then let go without fuser's own
//! unmount of the path, which would fail (or hit a new mount there).

use super::attributes::{Attributes, EntryKind};
use super::fs::{Errno, SnapshotFs};
use crate::format::tree::Timestamp;
use fuser::{
    FileAttr, FileType, Filesystem, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyLseek, ReplyOpen, ReplyStatfs, ReplyXattr, Request,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long the kernel may keep what it was told: nothing of a mount ever changes.
const TTL: Duration = Duration::from_secs(3600);

/// The block size `stat` reports.
const BLOCK_SIZE: u32 = 4096;

/// The file system, until the session's thread takes it away at the session's end.
pub(crate) type SharedFs = Arc<Mutex<Option<SnapshotFs>>>;

/// What the session serves: the shared file system.
pub(crate) struct FuseAdapter {
    fs: SharedFs,
}

impl FuseAdapter {
    pub fn new(fs: SharedFs) -> Self {
        FuseAdapter { fs }
    }

    /// Runs `answer` on the file system; `EIO` once it is gone.
    fn with<T>(
        &self,
        answer: impl FnOnce(&mut SnapshotFs) -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        let mut fs = self.fs.lock().unwrap_or_else(|p| p.into_inner());
        fs.as_mut().map_or(Err(libc::EIO), answer)
    }
}

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
        blocks: attributes.blocks,
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

impl Filesystem for FuseAdapter {
    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        match self.with(|fs| fs.look_up(parent, name.as_bytes())) {
            Ok((number, attributes)) => reply.entry(&TTL, &file_attr(number, &attributes), 0),
            Err(errno) => reply.error(errno),
        }
    }

    fn forget(&mut self, _req: &Request<'_>, ino: u64, nlookup: u64) {
        let _ = self.with(|fs| {
            fs.forget(ino, nlookup);
            Ok(())
        });
    }

    fn batch_forget(&mut self, _req: &Request<'_>, nodes: &[fuser::fuse_forget_one]) {
        let _ = self.with(|fs| {
            for node in nodes {
                fs.forget(node.nodeid, node.nlookup);
            }
            Ok(())
        });
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        match self.with(|fs| fs.attributes(ino)) {
            Ok(attributes) => reply.attr(&TTL, &file_attr(ino, &attributes)),
            Err(errno) => reply.error(errno),
        }
    }

    fn readlink(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyData) {
        match self.with(|fs| fs.read_link(ino)) {
            Ok(target) => reply.data(&target),
            Err(errno) => reply.error(errno),
        }
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        match self.with(|fs| fs.open(ino, flags)) {
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
        match self.with(|fs| fs.read(fh, offset, size)) {
            Ok(bytes) => reply.data(&bytes),
            Err(errno) => reply.error(errno),
        }
    }

    fn lseek(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        match self.with(|fs| fs.seek(fh, offset, whence)) {
            Ok(found) => reply.offset(found),
            Err(errno) => reply.error(errno),
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
        let _ = self.with(|fs| {
            fs.release(fh);
            Ok(())
        });
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
        let listing = match self.with(|fs| fs.listing(ino, offset)) {
            Ok(listing) => listing,
            Err(errno) => return reply.error(errno),
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
