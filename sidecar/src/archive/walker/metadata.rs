//! An entry's metadata as a snapshot records it, and the test that lets a file's content be
//! taken from the parent snapshot without reading it.

use crate::format::tree::{Metadata, Node, NodeKind, Timestamp};
use crate::ids::BlobId;
use nix::sys::stat::FileStat;

/// The parent's content when the file looks untouched: same size, modification and change time,
/// and inode. The change time catches edits that restore the modification time.
pub fn unchanged_content(parent: Option<&Node>, stat: &FileStat) -> Option<Vec<BlobId>> {
    let parent = parent?;
    let NodeKind::File { size, content } = &parent.kind else {
        return None;
    };
    let meta = metadata_of(stat);
    let same = *size == stat.st_size as u64
        && parent.meta.mtime == meta.mtime
        && parent.meta.ctime == meta.ctime
        && parent.meta.inode == meta.inode;
    same.then(|| content.clone())
}

/// An entry's metadata as the snapshot records it, from its status.
pub fn metadata_of(stat: &FileStat) -> Metadata {
    Metadata {
        mode: stat.st_mode & 0o7777,
        uid: stat.st_uid,
        gid: stat.st_gid,
        mtime: Timestamp {
            secs: stat.st_mtime,
            nanos: stat.st_mtime_nsec as u32,
        },
        ctime: Timestamp {
            secs: stat.st_ctime,
            nanos: stat.st_ctime_nsec as u32,
        },
        inode: stat.st_ino,
        device: stat.st_dev,
        links: stat.st_nlink.max(1),
    }
}

pub fn now_timestamp() -> Timestamp {
    let now = chrono::Utc::now();
    Timestamp {
        secs: now.timestamp(),
        nanos: now.timestamp_subsec_nanos(),
    }
}

/// Metadata of a directory that exists only in the snapshot (the parent of a stream).
pub fn synthetic_dir_metadata() -> Metadata {
    synthetic_metadata(0o755)
}

/// Metadata of an entry the snapshot makes up (a stream's file, its folders): this process's
/// owner, the time of the backup.
pub fn synthetic_metadata(mode: u32) -> Metadata {
    let now = now_timestamp();
    Metadata {
        mode,
        uid: nix::unistd::getuid().as_raw(),
        gid: nix::unistd::getgid().as_raw(),
        mtime: now,
        ctime: now,
        inode: 0,
        device: 0,
        links: 1,
    }
}
