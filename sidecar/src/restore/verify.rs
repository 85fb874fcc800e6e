//! Reads a restored target back and holds it to the snapshot, as restic's `restore --verify`:
//! every regular file of the snapshot below the filter is cut at the sizes of its content blobs
//! (as the index records them) and each piece's keyed id compared with the snapshot's, and its
//! size, mode, modification time and (when the restore sets them) owner compared with the node's.
//!
//! Memory stays flat: the snapshot is walked in batches, and each of a few readers holds one
//! blob-sized buffer.

use crate::crypto::RepositoryKeys;
use crate::error::{Error, Result};
use crate::filter::PathFilter;
use crate::format::tree::{Metadata, NodeKind};
use crate::ids::{BlobId, BlobKind};
use crate::repository::IndexedRepository;
use crate::restore::plan::{BatchLimits, PlanWalker};
use crate::restore::Privileges;
use nix::fcntl::OFlag;
use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Files read at once: enough to keep a disk busy, few enough to keep memory at a few blobs.
const READERS: usize = 4;

/// Entries planned at once.
const BATCH: BatchLimits = BatchLimits {
    entries: 4096,
    dirs: 512,
};

/// What a verification holds the target to, beyond content: what the restore promises to set.
#[derive(Debug, Clone)]
pub struct VerifySettings {
    pub filter: PathFilter,
    /// The restore sets owners (it ran as root): compare uid, gid and the set-user-ID and
    /// set-group-ID bits, which an unprivileged restore cannot promise.
    pub owners: bool,
    pub privileges: Privileges,
}

/// One file of the target that is not what the snapshot holds.
#[derive(Debug, Clone)]
pub struct Mismatch {
    /// Relative to the target, components joined by `/`.
    pub path: Vec<u8>,
    /// What differs, e.g. `content differs at byte 4096`.
    pub problem: String,
}

#[derive(Debug, Default)]
pub struct VerifyReport {
    pub files: u64,
    /// Bytes of content the snapshot holds in the files verified.
    pub bytes: u64,
    pub mismatches: Vec<Mismatch>,
}

/// One regular file to read back: where, what size, which pieces, which metadata.
struct FileToVerify {
    path: Vec<u8>,
    size: u64,
    /// Each content blob's plaintext length and id, in order; `None` when the index lacks it.
    pieces: Vec<(Option<u32>, BlobId)>,
    meta: Metadata,
}

/// Verifies the regular files of the snapshot tree `root` below `target` (see the module).
pub async fn verify(
    repo: &IndexedRepository,
    root: BlobId,
    target: &Path,
    settings: &VerifySettings,
) -> Result<VerifyReport> {
    let mut walker = PlanWalker::new(repo, root, &settings.filter)
        .await?
        .with_privileges(settings.privileges);
    let mut report = VerifyReport::default();
    while let Some(batch) = walker.next_batch(repo, BATCH).await? {
        let files = files_of(repo, batch.entries);
        report.files += files.len() as u64;
        report.bytes += files.iter().map(|file| file.size).sum::<u64>();
        let checker = Checker {
            keys: repo.keys().clone(),
            target: target.to_path_buf(),
            owners: settings.owners,
        };
        let found = tokio::task::spawn_blocking(move || checker.check_all(&files))
            .await
            .map_err(|e| Error::Interrupted(e.to_string()))?;
        report.mismatches.extend(found);
    }
    report.mismatches.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(report)
}

fn files_of(
    repo: &IndexedRepository,
    entries: Vec<crate::restore::plan::PlannedEntry>,
) -> Vec<FileToVerify> {
    let index = repo.index();
    entries
        .into_iter()
        .filter_map(|entry| match entry.node.kind {
            NodeKind::File { size, content } => Some(FileToVerify {
                path: entry.path,
                size,
                pieces: content
                    .into_iter()
                    .map(|id| (index.get(&id).map(|at| at.raw_length), id))
                    .collect(),
                meta: entry.node.meta,
            }),
            _ => None,
        })
        .collect()
}

struct Checker {
    keys: RepositoryKeys,
    target: PathBuf,
    owners: bool,
}

impl Checker {
    /// Checks `files` with a few readers; returns the mismatches.
    fn check_all(&self, files: &[FileToVerify]) -> Vec<Mismatch> {
        let next = AtomicUsize::new(0);
        let found = Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for _ in 0..READERS.min(files.len()) {
                scope.spawn(|| {
                    let mut buffer = Vec::new();
                    while let Some(file) = files.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let problems = self.check(file, &mut buffer);
                        if !problems.is_empty() {
                            let mismatch = Mismatch {
                                path: file.path.clone(),
                                problem: problems.join("; "),
                            };
                            found
                                .lock()
                                .unwrap_or_else(|poisoned| poisoned.into_inner())
                                .push(mismatch);
                        }
                    }
                });
            }
        });
        found
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What differs between the file in the target and the snapshot's (empty: nothing).
    fn check(&self, file: &FileToVerify, buffer: &mut Vec<u8>) -> Vec<String> {
        let path = self.target.join(OsStr::from_bytes(&file.path));
        // Never through a symlink: what stands at the path is what is verified.
        let flags = OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags.bits())
            .open(&path);
        let opened = opened.and_then(|file| Ok((file.metadata()?, file)));
        let (stat, handle) = match opened {
            Ok(opened) => opened,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return vec!["missing".to_owned()]
            }
            Err(error) => return vec![format!("cannot be read: {error}")],
        };
        if !stat.file_type().is_file() {
            return vec!["not a regular file".to_owned()];
        }
        let mut problems = Vec::new();
        if stat.len() != file.size {
            problems.push(format!("size {}, the snapshot's {}", stat.len(), file.size));
        } else if let Some(problem) = self.content_problem(file, &handle, buffer) {
            problems.push(problem);
        }
        problems.extend(self.metadata_problems(&file.meta, &stat));
        problems
    }

    fn content_problem(
        &self,
        file: &FileToVerify,
        handle: &File,
        buffer: &mut Vec<u8>,
    ) -> Option<String> {
        let mut offset = 0u64;
        for (length, id) in &file.pieces {
            let Some(length) = length else {
                return Some(format!("content blob {} is not in the index", id.short()));
            };
            buffer.resize(*length as usize, 0);
            if let Err(error) = handle.read_exact_at(buffer, offset) {
                return Some(format!("cannot be read at byte {offset}: {error}"));
            }
            if self.keys.blob_id(BlobKind::Data, buffer) != *id {
                return Some(format!(
                    "content differs in the {length} bytes at byte {offset}"
                ));
            }
            offset += u64::from(*length);
        }
        (offset != file.size).then(|| {
            format!(
                "the snapshot's content blobs hold {offset} bytes, its size is {}",
                file.size
            )
        })
    }

    fn metadata_problems(&self, meta: &Metadata, stat: &std::fs::Metadata) -> Vec<String> {
        let mut problems = Vec::new();
        // Set-user-ID and set-group-ID hold only for a restore with CAP_FSETID (it warns).
        let bits = if self.owners { 0o7777 } else { 0o1777 };
        if stat.mode() & bits != meta.mode & bits {
            problems.push(format!(
                "mode {:04o}, the snapshot's {:04o}",
                stat.mode() & 0o7777,
                meta.mode & 0o7777
            ));
        }
        if (stat.mtime(), stat.mtime_nsec()) != (meta.mtime.secs, i64::from(meta.mtime.nanos)) {
            problems.push(format!(
                "modified at {}.{:09}, the snapshot's {}.{:09}",
                stat.mtime(),
                stat.mtime_nsec(),
                meta.mtime.secs,
                meta.mtime.nanos
            ));
        }
        if self.owners && (stat.uid(), stat.gid()) != (meta.uid, meta.gid) {
            problems.push(format!(
                "owner {}:{}, the snapshot's {}:{}",
                stat.uid(),
                stat.gid(),
                meta.uid,
                meta.gid
            ));
        }
        problems
    }
}
