//! The walker: reads the sources in order, cuts file content into chunks, names each chunk by its
//! keyed hash and sends only chunks the repository lacks to the workers. It builds one tree per
//! directory, bottom-up, and returns the root tree's id.
//!
//! Entries are read through their directory's descriptor (see [`by_descriptor`]): a workload
//! that swaps files while it is backed up cannot make the walk follow a symlink or block.

mod by_descriptor;
mod listing;
mod metadata;
mod parents;

use super::pipeline::{BlobJob, Recycler, JOB_FRONT_BYTES};
use super::source::{SourceTree, StreamSource, VirtualEntry};
use super::Excludes;
use crate::chunker::Chunker;
use crate::crypto::RepositoryKeys;
use crate::error::{Error, Result};
use crate::format::tree::{Node, NodeKind, Tree};
use crate::ids::{BlobId, BlobKind};
use crate::progress::Progress;
use crate::repository::IndexedRepository;
use by_descriptor::{EntryType, OpenDir, OpenError};
use crossbeam_channel::Sender;
use listing::{Lister, Listing, Sublistings};
use metadata::{metadata_of, synthetic_dir_metadata, unchanged_content};
use nix::sys::stat::FileStat;
use parents::{ParentReader, ParentTree, Subtrees};
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

/// What the walk counted.
#[derive(Debug, Default, Clone)]
pub struct WalkStats {
    pub files: u64,
    pub dirs: u64,
    pub files_read: u64,
    pub bytes_read: u64,
    pub total_bytes: u64,
    /// Files stored as another name of a file read earlier in this backup (a hard link): neither
    /// read nor unchanged.
    pub hard_links: u64,
    /// Sources that existed and were read (a backup of none of them is a failure).
    pub sources_read: u64,
}

pub struct Walker {
    pub repo: IndexedRepository,
    pub keys: RepositoryKeys,
    pub chunker: Arc<Chunker>,
    /// The chunker's read buffer, kept from file to file.
    chunk_buffer: Vec<u8>,
    /// Blobs sent to the workers in this backup that the index may not list yet (those it lists
    /// are dropped now and then: the index knows them, and this set stays small).
    sent: HashSet<BlobId>,
    /// Blobs sent since `sent` was last pruned.
    sent_since_pruned: usize,
    pub jobs: Sender<BlobJob>,
    /// Blob buffers coming back from the packer.
    buffers: Recycler,
    pub excludes: Excludes,
    pub progress: Arc<Progress>,
    /// Inputs that could not be read: the snapshot lacks them.
    pub warnings: Vec<String>,
    /// Warnings that lose no readable input (a socket skipped, a parent tree unreadable).
    pub notices: Vec<String>,
    pub stats: WalkStats,
    /// Content of multiply-linked files seen in this backup, by (device, inode).
    hard_links: HashMap<(u64, u64), (u64, Vec<BlobId>)>,
    /// Whether files are still opened with `O_NOATIME` (dropped once the kernel refuses it).
    no_atime: bool,
    /// The parent snapshot's trees, read ahead of the walk.
    parents: ParentReader,
    /// Directories listed ahead of the walk.
    lister: Lister,
}

/// What is read ahead for the subdirectories of the directory being walked.
struct Ahead {
    subtrees: Subtrees,
    listings: Sublistings,
}

/// How many blobs are sent between two prunings of [`Walker::sent`]: about what one index object
/// records, so the set holds little more than the blobs not yet indexed (its table keeps the
/// largest size it reached).
const SENT_PRUNE_EVERY: usize = 1 << 13;

/// The walk stopped because the rest of the pipeline did.
fn pipeline_stopped() -> Error {
    Error::Interrupted("the upload pipeline stopped".into())
}

impl Walker {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        repo: IndexedRepository,
        runtime: tokio::runtime::Handle,
        jobs: Sender<BlobJob>,
        buffers: Recycler,
        excludes: Excludes,
        progress: Arc<Progress>,
    ) -> Walker {
        Walker {
            parents: ParentReader::new(repo.clone(), runtime.clone()),
            lister: Lister::new(runtime),
            keys: repo.keys().clone(),
            chunker: Arc::new(repo.chunker()),
            chunk_buffer: Vec::new(),
            sent: HashSet::new(),
            sent_since_pruned: 0,
            repo,
            jobs,
            buffers,
            excludes,
            progress,
            warnings: Vec::new(),
            notices: Vec::new(),
            stats: WalkStats::default(),
            hard_links: HashMap::new(),
            no_atime: true,
        }
    }

    fn warn(&mut self, message: String) {
        tracing::warn!("{message}");
        self.warnings.push(message);
    }

    /// A warning that loses no input that could have been read.
    fn notice(&mut self, message: String) {
        tracing::warn!("{message}");
        self.notices.push(message);
    }

    /// Sends a blob to the workers unless the repository has it; returns its id.
    fn store_blob(&mut self, kind: BlobKind, plaintext: &[u8]) -> Result<BlobId> {
        let id = self.keys.blob_id(kind, plaintext);
        if !self.is_known(&id) {
            self.remember_sent(id);
            let mut buffer = self.buffers.take();
            buffer.reserve_exact(JOB_FRONT_BYTES + plaintext.len() + crate::crypto::TAG_BYTES);
            buffer.resize(JOB_FRONT_BYTES, 0);
            buffer.extend_from_slice(plaintext);
            let job = BlobJob { kind, id, buffer };
            self.jobs.send(job).map_err(|_| pipeline_stopped())?;
        }
        Ok(id)
    }

    /// Whether the repository has the blob, or this backup sent it already.
    fn is_known(&self, id: &BlobId) -> bool {
        self.sent.contains(id) || self.repo.index().contains(id)
    }

    fn remember_sent(&mut self, id: BlobId) {
        self.sent.insert(id);
        self.sent_since_pruned += 1;
        if self.sent_since_pruned >= SENT_PRUNE_EVERY {
            self.sent_since_pruned = 0;
            let index = self.repo.index();
            self.sent.retain(|id| !index.contains(id));
        }
    }

    fn store_tree(&mut self, mut nodes: Vec<Node>) -> Result<BlobId> {
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        self.store_blob(BlobKind::Tree, &Tree { nodes }.to_bytes())
    }

    /// A parent tree for comparison; an unreadable one only costs speed, so it is a warning.
    fn parent_tree(&mut self, id: &BlobId) -> Option<ParentTree> {
        let read = self.parents.read_now(id);
        self.parent_or_notice(id, read)
    }

    /// The parent tree `id` of a subdirectory, from its directory's read-ahead.
    fn subtree_of(&mut self, subtrees: &mut Subtrees, id: &BlobId) -> Option<ParentTree> {
        let read = self.parents.take(subtrees, id);
        self.parent_or_notice(id, read)
    }

    fn parent_or_notice(&mut self, id: &BlobId, read: Result<ParentTree>) -> Option<ParentTree> {
        match read {
            Ok(tree) => Some(tree),
            Err(error) => {
                self.notice(format!(
                    "cannot read the parent snapshot's tree {id}, reading all files again: {error}"
                ));
                None
            }
        }
    }

    /// Walks the virtual tree of the sources: returns the root tree id.
    pub fn archive_root(
        &mut self,
        root: SourceTree,
        parent_root: Option<BlobId>,
    ) -> Result<BlobId> {
        let parent = parent_root.and_then(|id| self.parent_tree(&id));
        self.archive_virtual_dir(root.children, parent)
    }

    fn archive_virtual_dir(
        &mut self,
        children: std::collections::BTreeMap<Vec<u8>, VirtualEntry>,
        parent: Option<ParentTree>,
    ) -> Result<BlobId> {
        let mut nodes = Vec::new();
        let mut ahead = Ahead {
            subtrees: self.parents.subtrees_of(parent.as_ref()),
            listings: Sublistings::default(),
        };
        for (name, entry) in children {
            let parent_node = parent.as_ref().and_then(|p| p.tree.find(&name)).cloned();
            let node = match entry {
                VirtualEntry::Dir {
                    children,
                    meta_from,
                } => {
                    let parent_sub = match parent_node.as_ref().map(|n| &n.kind) {
                        Some(NodeKind::Dir { subtree }) => self.parent_tree(&subtree.clone()),
                        _ => None,
                    };
                    let subtree = self.archive_virtual_dir(children, parent_sub)?;
                    let meta = meta_from
                        .and_then(|path| by_descriptor::lstat(&path))
                        .map(|stat| metadata_of(&stat))
                        .unwrap_or_else(synthetic_dir_metadata);
                    Some(Node {
                        name,
                        kind: NodeKind::Dir { subtree },
                        meta,
                    })
                }
                VirtualEntry::Path(path) => {
                    let node = self.archive_source(&path, parent_node.as_ref(), &mut ahead)?;
                    self.stats.sources_read += u64::from(node.is_some());
                    node
                }
                VirtualEntry::Stream(stream) => {
                    self.stats.sources_read += 1;
                    Some(self.archive_stream(name, stream)?)
                }
            };
            nodes.extend(node);
        }
        self.stats.dirs += 1;
        self.store_tree(nodes)
    }

    /// A source path: looked up in the directory that holds it, like any entry below it.
    fn archive_source(
        &mut self,
        path: &Path,
        parent: Option<&Node>,
        ahead: &mut Ahead,
    ) -> Result<Option<Node>> {
        let Some((holder, name)) = by_descriptor::split_source(path) else {
            self.warn(format!(
                "cannot read {}: not a file or folder",
                path.display()
            ));
            return Ok(None);
        };
        let read = OpenDir::of_source(&holder).and_then(|dir| {
            let stat = dir.stat(&name)?;
            Ok((dir, stat))
        });
        match read {
            Ok((dir, stat)) => self.archive_entry(&dir, path, name, &stat, parent, ahead),
            Err(error) => {
                self.warn(format!("cannot read {}: {error}", path.display()));
                Ok(None)
            }
        }
    }

    /// One entry `name` of the open directory `dir`, seen by the listing as `stat`; `None` when
    /// it is skipped (excluded, unreadable, changed during the backup, a socket). `ahead` holds
    /// the parent trees and listings of `dir`'s subdirectories.
    fn archive_entry(
        &mut self,
        dir: &OpenDir,
        path: &Path,
        name: Vec<u8>,
        stat: &FileStat,
        parent: Option<&Node>,
        ahead: &mut Ahead,
    ) -> Result<Option<Node>> {
        if self.excludes.is_excluded(path) {
            return Ok(None);
        }
        let mut meta = metadata_of(stat);
        let kind = match EntryType::of(stat) {
            EntryType::File => match self.archive_file(dir, path, &name, stat, parent)? {
                Some((kind, opened)) => {
                    meta = metadata_of(&opened);
                    kind
                }
                None => return Ok(None),
            },
            EntryType::Dir => {
                let parent_tree = match parent.map(|n| &n.kind) {
                    Some(NodeKind::Dir { subtree }) => {
                        self.subtree_of(&mut ahead.subtrees, subtree)
                    }
                    _ => None,
                };
                let listing = match self.lister.take(&mut ahead.listings, dir, &name, stat) {
                    Ok(listing) => listing,
                    Err(error) => {
                        return self.skip(format!("cannot list {}: {error}", path.display()))
                    }
                };
                meta = metadata_of(&listing.dir.stat);
                NodeKind::Dir {
                    subtree: self.archive_dir(listing, path, parent_tree)?,
                }
            }
            EntryType::Symlink => match dir.read_link(&name) {
                Ok(target) => NodeKind::Symlink { target },
                Err(error) => {
                    return self.skip(format!(
                        "cannot read the symlink {}: {error}",
                        path.display()
                    ))
                }
            },
            // Never opened: a FIFO would block, a device could be read without end.
            EntryType::Fifo => NodeKind::Fifo,
            EntryType::CharDevice => NodeKind::CharDevice { rdev: stat.st_rdev },
            EntryType::BlockDevice => NodeKind::BlockDevice { rdev: stat.st_rdev },
            EntryType::Socket => {
                self.notice(format!(
                    "skipped {}: sockets cannot be backed up",
                    path.display()
                ));
                return Ok(None);
            }
        };
        Ok(Some(Node { name, kind, meta }))
    }

    /// Warns and skips an entry.
    fn skip(&mut self, message: String) -> Result<Option<Node>> {
        self.warn(message);
        Ok(None)
    }

    /// The tree of an open directory: its entries, listed and read through its descriptor. When
    /// every entry came out as the parent tree has it, that tree is the directory's: its id is
    /// reused without encoding the nodes again (the bytes, so the id, would be the same).
    fn archive_dir(
        &mut self,
        listing: Listing,
        path: &Path,
        parent: Option<ParentTree>,
    ) -> Result<BlobId> {
        let Listing {
            dir,
            entries,
            error,
        } = listing;
        if let Some(error) = error {
            self.warn(format!("cannot list {}: {error}", path.display()));
        }
        let subdirs = entries
            .iter()
            .filter_map(|(name, stat)| match stat {
                Ok(stat) if EntryType::of(stat) == EntryType::Dir => Some((name, stat)),
                _ => None,
            })
            .filter(|(name, _)| {
                !self
                    .excludes
                    .is_excluded(&path.join(OsStr::from_bytes(name)))
            })
            .map(|(name, stat)| (name.clone(), *stat))
            .collect();
        let mut ahead = Ahead {
            subtrees: self.parents.subtrees_of(parent.as_ref()),
            listings: self.lister.sublistings(&dir, subdirs),
        };
        let mut nodes = Vec::with_capacity(entries.len());
        for (name, stat) in entries {
            let child = path.join(OsStr::from_bytes(&name));
            let parent_node = parent.as_ref().and_then(|p| p.tree.find(&name));
            match stat {
                Ok(stat) => nodes.extend(self.archive_entry(
                    &dir,
                    &child,
                    name,
                    &stat,
                    parent_node,
                    &mut ahead,
                )?),
                Err(error) => self.warn(format!("cannot read {}: {error}", child.display())),
            }
        }
        self.stats.dirs += 1;
        match parent {
            // The listing is sorted, as a stored tree's nodes are.
            Some(parent) if parent.canonical && parent.tree.nodes == nodes => Ok(parent.id),
            _ => self.store_tree(nodes),
        }
    }

    /// A regular file's content: reused from the parent snapshot or an earlier hard link when
    /// unchanged, else read and chunked. Returns it with the file's status as it was read (the
    /// listing's when nothing was opened). `None` when it cannot be read (a warning).
    fn archive_file(
        &mut self,
        dir: &OpenDir,
        path: &Path,
        name: &[u8],
        seen: &FileStat,
        parent: Option<&Node>,
    ) -> Result<Option<(NodeKind, FileStat)>> {
        let inode_key = (seen.st_dev, seen.st_ino);
        if seen.st_nlink > 1 {
            if let Some((size, content)) = self.hard_links.get(&inode_key) {
                self.stats.files += 1;
                self.stats.hard_links += 1;
                self.stats.total_bytes += size;
                self.progress.add_files(1);
                let kind = NodeKind::File {
                    size: *size,
                    content: content.clone(),
                };
                return Ok(Some((kind, *seen)));
            }
        }
        let reusable = unchanged_content(parent, seen)
            .filter(|content| content.iter().all(|id| self.is_known(id)));
        if let Some(content) = reusable {
            let size = seen.st_size as u64;
            self.stats.files += 1;
            self.stats.total_bytes += size;
            self.progress.add_files(1);
            self.remember_hard_link(seen, size, &content);
            return Ok(Some((NodeKind::File { size, content }, *seen)));
        }
        let (file, opened) = match dir.open_file(name, seen, &mut self.no_atime) {
            Ok(open) => open,
            Err(error @ OpenError::Changed(_)) | Err(error @ OpenError::Io(_)) => {
                self.warn(format!("cannot read {}: {error}", path.display()));
                return Ok(None);
            }
        };
        let (size, content) = match self.chunk_reader(file) {
            Ok(read) => read,
            Err(ChunkReadError::Source(error)) => {
                self.warn(format!("cannot read {}: {error}", path.display()));
                return Ok(None);
            }
            Err(ChunkReadError::Pipeline(error)) => return Err(error),
        };
        self.stats.files += 1;
        self.stats.files_read += 1;
        self.stats.total_bytes += size;
        self.progress.add_files(1);
        self.remember_hard_link(&opened, size, &content);
        Ok(Some((NodeKind::File { size, content }, opened)))
    }

    fn remember_hard_link(&mut self, stat: &FileStat, size: u64, content: &[BlobId]) {
        if stat.st_nlink > 1 {
            let key = (stat.st_dev, stat.st_ino);
            self.hard_links.insert(key, (size, content.to_vec()));
        }
    }

    /// Chunks a reader into blobs: the bytes read and the content ids.
    fn chunk_reader(
        &mut self,
        reader: impl std::io::Read,
    ) -> Result<(u64, Vec<BlobId>), ChunkReadError> {
        let chunker = self.chunker.clone();
        let mut buffer = std::mem::take(&mut self.chunk_buffer);
        let mut content = Vec::new();
        let size = chunker.chunk_stream_with(&mut buffer, reader, |chunk| {
            content.push(
                self.store_blob(BlobKind::Data, chunk)
                    .map_err(ChunkReadError::Pipeline)?,
            );
            self.stats.bytes_read += chunk.len() as u64;
            self.progress.add_processed(chunk.len() as u64);
            Ok::<(), ChunkReadError>(())
        });
        self.chunk_buffer = buffer;
        let size = size?;
        Ok((size, content))
    }

    /// A stream (a database dump, standard input) stored as a file. Unlike a file, a stream that
    /// fails fails the backup: a truncated dump must never look like a good one.
    fn archive_stream(&mut self, name: Vec<u8>, stream: StreamSource) -> Result<Node> {
        self.stats.files += 1;
        let label = stream.label.clone();
        let (size, content) = match self.chunk_reader(stream.reader) {
            Ok(read) => read,
            Err(ChunkReadError::Pipeline(error)) => return Err(error),
            Err(ChunkReadError::Source(error)) => {
                return Err(Error::Io {
                    what: format!("reading {label}"),
                    source: error,
                })
            }
        };
        self.stats.files_read += 1;
        self.stats.total_bytes += size;
        self.progress.add_files(1);
        let meta = metadata::synthetic_metadata(0o600);
        Ok(Node {
            name,
            kind: NodeKind::File { size, content },
            meta,
        })
    }
}

enum ChunkReadError {
    Source(std::io::Error),
    Pipeline(Error),
}

impl From<std::io::Error> for ChunkReadError {
    fn from(error: std::io::Error) -> ChunkReadError {
        ChunkReadError::Source(error)
    }
}
