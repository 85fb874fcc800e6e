//! The walker: reads the sources in order, cuts file content into chunks, names each chunk by its
//! keyed hash and sends only chunks the repository lacks to the workers. It builds one tree per
//! directory, bottom-up, and returns the root tree's id. Small files are read beside it by a few
//! threads (see [`small_files`]); their results come back into each directory's tree in order.
//!
//! Entries are read through their directory's descriptor (see [`by_descriptor`]): a workload
//! that swaps files while it is backed up cannot make the walk follow a symlink or block.

mod by_descriptor;
mod changes;
mod listing;
mod metadata;
mod new_blobs;
mod parents;
mod small_files;
mod streams_ahead;

use super::pipeline::{JobBatch, Recycler};
use super::skip::SkipRules;
use super::source::{SourceTree, StreamSource, VirtualEntry};
use crate::error::Result;
use crate::format::tree::{Node, NodeKind, Tree};
use crate::ids::{BlobId, BlobKind};
use crate::progress::Progress;
use crate::repository::IndexedRepository;
use by_descriptor::{EntryType, OpenDir, OpenError};
pub use changes::FileChanges;
use crossbeam_channel::Sender;
use listing::{Lister, Listing, Sublistings};
use metadata::{metadata_of, synthetic_dir_metadata, unchanged_content};
use new_blobs::{NewBlobs, Outbox};
use nix::sys::stat::FileStat;
use parents::{ParentReader, ParentTree, Subtrees};
use small_files::{
    chunk_into_blobs, ChunkReadError, DirReads, ReadContext, ReadDone, ReadError, ReadFile,
    SmallFileReaders,
};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use streams_ahead::{stream_error, StreamsAhead};

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
    /// Files new, changed, unmodified and removed against the parent snapshot.
    pub changes: FileChanges,
}

pub struct Walker {
    /// What reading a file into blobs needs, shared with the readers of small files.
    context: Arc<ReadContext>,
    /// The readers of small files; none when the walker reads every file itself.
    readers: Option<SmallFileReaders>,
    /// The chunker's read buffer, kept from file to file.
    chunk_buffer: Vec<u8>,
    /// New blobs of this thread, not yet sent.
    outbox: Outbox,
    pub skip_rules: SkipRules,
    /// Inputs that could not be read: the snapshot lacks them.
    pub warnings: Vec<String>,
    /// Warnings that lose no readable input (a socket skipped, a parent tree unreadable).
    pub notices: Vec<String>,
    pub stats: WalkStats,
    /// Content of multiply-linked files seen in this backup, by (device, inode).
    hard_links: HashMap<(u64, u64), (u64, Vec<BlobId>)>,
    /// The parent snapshot's trees, read ahead of the walk.
    parents: ParentReader,
    /// Directories listed ahead of the walk.
    lister: Lister,
    /// Streams read beside the walk.
    streams: StreamsAhead,
}

/// What is read ahead for the subdirectories of the directory being walked.
struct Ahead {
    subtrees: Subtrees,
    listings: Sublistings,
}

/// Where the walk sends new blobs, and how it reads files.
pub struct WalkerParts {
    pub jobs: Sender<JobBatch>,
    /// Blob buffers coming back from the packer.
    pub buffers: Recycler,
    pub skip_rules: SkipRules,
    pub progress: Arc<Progress>,
    /// Threads that read small files beside the walk; 0 reads every file on the walk's thread.
    pub read_threads: usize,
}

/// A directory's small files queued for the readers, and the next entry's place in its tree.
struct QueueAt<'a> {
    reads: &'a mut DirReads,
    slot: usize,
}

/// An entry as the walk leaves it.
enum Walked {
    Done(Node),
    /// A small file queued for the readers: its node is finished once they have read it.
    Queued(Node),
    Skipped,
}

impl Walker {
    pub fn new(
        repo: IndexedRepository,
        runtime: tokio::runtime::Handle,
        parts: WalkerParts,
    ) -> Result<Walker> {
        let context = Arc::new(ReadContext {
            blobs: Arc::new(NewBlobs::new(repo.clone(), parts.jobs, parts.buffers)),
            chunker: Arc::new(repo.chunker()),
            progress: parts.progress,
            no_atime: true.into(),
        });
        let readers = match parts.read_threads {
            0 => None,
            threads => Some(SmallFileReaders::start(context.clone(), threads)?),
        };
        Ok(Walker {
            parents: ParentReader::new(repo, runtime.clone()),
            lister: Lister::new(runtime),
            context,
            readers,
            chunk_buffer: Vec::new(),
            outbox: Outbox::default(),
            skip_rules: parts.skip_rules,
            warnings: Vec::new(),
            notices: Vec::new(),
            stats: WalkStats::default(),
            hard_links: HashMap::new(),
            streams: StreamsAhead::default(),
        })
    }

    // Logged escaped: a message quotes names the workload chose. Kept as it is for the result.
    fn warn(&mut self, message: String) {
        tracing::warn!("{}", crate::text::escaped(&message));
        self.warnings.push(message);
    }

    /// A warning that loses no input that could have been read.
    fn notice(&mut self, message: String) {
        tracing::warn!("{}", crate::text::escaped(&message));
        self.notices.push(message);
    }

    fn store_tree(&mut self, mut nodes: Vec<Node>) -> Result<BlobId> {
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let bytes = Tree { nodes }.to_bytes();
        self.context
            .blobs
            .store(BlobKind::Tree, &bytes, &mut self.outbox)
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
        mut root: SourceTree,
        parent_root: Option<BlobId>,
    ) -> Result<BlobId> {
        self.streams = StreamsAhead::start(&mut root.children, self.context.clone())?;
        let parent = parent_root.and_then(|id| self.parent_tree(&id));
        let root = self.archive_virtual_dir(root.children, parent)?;
        self.context.blobs.flush(&mut self.outbox)?;
        Ok(root)
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
        for (name, entry) in streams_last(children) {
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
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        self.stats.dirs += 1;
        let parent = parent.as_ref().map(|parent| &parent.tree);
        self.stats.changes.count_folder(parent, &nodes);
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
            Ok((dir, stat)) => {
                match self.archive_entry(&dir, path, name, &stat, parent, ahead, None)? {
                    Walked::Done(node) | Walked::Queued(node) => Ok(Some(node)),
                    Walked::Skipped => Ok(None),
                }
            }
            Err(error) => {
                self.warn(format!("cannot read {}: {error}", path.display()));
                Ok(None)
            }
        }
    }

    /// One entry `name` of the open directory `dir`, seen by the listing as `seen`: skipped when
    /// excluded (never a source, `queue` then `None`, as restic), unreadable, changed or a socket.
    /// `ahead` holds the parent trees and listings of `dir`'s subdirectories; small files queue.
    #[allow(clippy::too_many_arguments)]
    fn archive_entry(
        &mut self,
        dir: &OpenDir,
        path: &Path,
        name: Vec<u8>,
        seen: &FileStat,
        parent: Option<&Node>,
        ahead: &mut Ahead,
        queue: Option<QueueAt>,
    ) -> Result<Walked> {
        if queue.is_some() && self.skip_rules.skips(path, seen, &mut self.notices) {
            return Ok(Walked::Skipped);
        }
        let mut meta = metadata_of(seen);
        let kind = match EntryType::of(seen) {
            EntryType::File => match self.archive_file(dir, path, &name, seen, parent, queue)? {
                FileOutcome::Stored(kind, opened) => {
                    meta = metadata_of(&opened);
                    kind
                }
                FileOutcome::Queued => {
                    let kind = NodeKind::File {
                        size: 0,
                        content: Vec::new(),
                    };
                    return Ok(Walked::Queued(Node { name, kind, meta }));
                }
                FileOutcome::Skipped => return Ok(Walked::Skipped),
            },
            EntryType::Dir => {
                let parent_tree = match parent.map(|n| &n.kind) {
                    Some(NodeKind::Dir { subtree }) => {
                        self.subtree_of(&mut ahead.subtrees, subtree)
                    }
                    _ => None,
                };
                let listing = match self.lister.take(&mut ahead.listings, dir, &name, seen) {
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
            EntryType::CharDevice => NodeKind::CharDevice { rdev: seen.st_rdev },
            EntryType::BlockDevice => NodeKind::BlockDevice { rdev: seen.st_rdev },
            EntryType::Socket => {
                self.notice(format!(
                    "skipped {}: sockets cannot be backed up",
                    path.display()
                ));
                return Ok(Walked::Skipped);
            }
        };
        Ok(Walked::Done(Node { name, kind, meta }))
    }

    /// Warns and skips an entry.
    fn skip(&mut self, message: String) -> Result<Walked> {
        self.warn(message);
        Ok(Walked::Skipped)
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
        if let Some(failure) = self.streams.failure() {
            return Err(failure);
        }
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
                    .skip_rules
                    .is_excluded(&path.join(OsStr::from_bytes(name)))
            })
            .map(|(name, stat)| (name.clone(), *stat))
            .collect();
        let mut ahead = Ahead {
            subtrees: self.parents.subtrees_of(parent.as_ref()),
            listings: self.lister.sublistings(&dir, subdirs),
        };
        let mut reads = DirReads::new();
        let mut nodes = Vec::with_capacity(entries.len());
        for (name, stat) in entries {
            let child = path.join(OsStr::from_bytes(&name));
            let parent_node = parent.as_ref().and_then(|p| p.tree.find(&name));
            let stat = match stat {
                Ok(stat) => stat,
                Err(error) => {
                    self.warn(format!("cannot read {}: {error}", child.display()));
                    continue;
                }
            };
            let queue = QueueAt {
                reads: &mut reads,
                slot: nodes.len(),
            };
            let walked = self.archive_entry(
                &dir,
                &child,
                name,
                &stat,
                parent_node,
                &mut ahead,
                Some(queue),
            )?;
            match walked {
                Walked::Done(node) | Walked::Queued(node) => nodes.push(node),
                Walked::Skipped => {}
            }
        }
        let nodes = self.finish_reads(reads, nodes, path)?;
        self.stats.dirs += 1;
        let parent_tree = parent.as_ref().map(|parent| &parent.tree);
        self.stats.changes.count_folder(parent_tree, &nodes);
        match parent {
            // The listing is sorted, as a stored tree's nodes are.
            Some(parent) if parent.canonical && parent.tree.nodes == nodes => Ok(parent.id),
            _ => self.store_tree(nodes),
        }
    }

    /// Completes the nodes of a directory's queued small files with what the readers read, and
    /// drops those they could not read (a warning each).
    fn finish_reads(
        &mut self,
        reads: DirReads,
        mut nodes: Vec<Node>,
        path: &Path,
    ) -> Result<Vec<Node>> {
        let Some(readers) = &self.readers else {
            return Ok(nodes);
        };
        let mut unread = Vec::new();
        for ReadDone { slot, name, result } in reads.wait(readers, &mut self.outbox)? {
            match result {
                Ok(ReadFile {
                    size,
                    content,
                    opened,
                }) => {
                    self.count_read(size);
                    let node = &mut nodes[slot];
                    node.meta = metadata_of(&opened);
                    node.kind = NodeKind::File { size, content };
                }
                Err(ReadError::Source(error)) => {
                    let child = path.join(OsStr::from_bytes(&name));
                    self.warn(format!("cannot read {}: {error}", child.display()));
                    unread.push(slot);
                }
                Err(ReadError::Pipeline(error)) => return Err(error),
            }
        }
        if !unread.is_empty() {
            let mut slot = 0;
            nodes.retain(|_| {
                slot += 1;
                !unread.contains(&(slot - 1))
            });
        }
        Ok(nodes)
    }

    /// A regular file's content: reused from the parent snapshot or an earlier hard link when
    /// unchanged, queued to the readers when it is small (and `queue` is given), else read and
    /// chunked here. Stored content comes with the file's status as it was read (the listing's
    /// when nothing was opened). Skipped when it cannot be read (a warning).
    fn archive_file(
        &mut self,
        dir: &OpenDir,
        path: &Path,
        name: &[u8],
        seen: &FileStat,
        parent: Option<&Node>,
        queue: Option<QueueAt>,
    ) -> Result<FileOutcome> {
        let inode_key = (seen.st_dev, seen.st_ino);
        if seen.st_nlink > 1 {
            if let Some((size, content)) = self.hard_links.get(&inode_key) {
                self.stats.files += 1;
                self.stats.hard_links += 1;
                self.stats.total_bytes += size;
                self.context.progress.add_files(1);
                let kind = NodeKind::File {
                    size: *size,
                    content: content.clone(),
                };
                return Ok(FileOutcome::Stored(kind, *seen));
            }
        }
        let reusable = unchanged_content(parent, seen)
            .filter(|content| content.iter().all(|id| self.context.blobs.is_known(id)));
        if let Some(content) = reusable {
            let size = seen.st_size as u64;
            self.stats.files += 1;
            self.stats.total_bytes += size;
            self.context.progress.add_files(1);
            self.remember_hard_link(seen, size, &content);
            return Ok(FileOutcome::Stored(NodeKind::File { size, content }, *seen));
        }
        // A file of several names is read here, in order: its later names reuse what it read.
        if let (Some(readers), Some(queue)) = (&self.readers, queue) {
            if seen.st_nlink <= 1
                && self.context.is_small(seen.st_size)
                && queue
                    .reads
                    .queue(readers, dir, name, seen, queue.slot, &mut self.outbox)
            {
                return Ok(FileOutcome::Queued);
            }
        }
        let (file, opened) = match dir.open_file(name, seen, &self.context.no_atime) {
            Ok(open) => open,
            Err(error @ OpenError::Changed(_)) | Err(error @ OpenError::Io(_)) => {
                self.warn(format!("cannot read {}: {error}", path.display()));
                return Ok(FileOutcome::Skipped);
            }
        };
        let (size, content) = match self.chunk_reader(file) {
            Ok(read) => read,
            Err(ChunkReadError::Source(error)) => {
                self.warn(format!("cannot read {}: {error}", path.display()));
                return Ok(FileOutcome::Skipped);
            }
            Err(ChunkReadError::Pipeline(error)) => return Err(error),
        };
        self.count_read(size);
        self.remember_hard_link(&opened, size, &content);
        Ok(FileOutcome::Stored(
            NodeKind::File { size, content },
            opened,
        ))
    }

    /// Counts a file read in full.
    fn count_read(&mut self, size: u64) {
        self.stats.files += 1;
        self.stats.files_read += 1;
        self.stats.total_bytes += size;
        self.stats.bytes_read += size;
        self.context.progress.add_files(1);
    }

    fn remember_hard_link(&mut self, stat: &FileStat, size: u64, content: &[BlobId]) {
        if stat.st_nlink > 1 {
            let key = (stat.st_dev, stat.st_ino);
            self.hard_links.insert(key, (size, content.to_vec()));
        }
    }

    /// Chunks a reader into blobs on this thread: the bytes read and the content ids.
    fn chunk_reader(
        &mut self,
        reader: impl std::io::Read,
    ) -> Result<(u64, Vec<BlobId>), ChunkReadError> {
        let mut buffer = std::mem::take(&mut self.chunk_buffer);
        let read = chunk_into_blobs(&self.context, &mut buffer, reader, &mut self.outbox);
        self.chunk_buffer = buffer;
        read
    }

    /// A stream (a database dump, standard input) stored as a file. Unlike a file, a stream that
    /// fails fails the backup: a truncated dump must never look like a good one.
    fn archive_stream(&mut self, name: Vec<u8>, stream: StreamSource) -> Result<Node> {
        let label = stream.label.clone();
        let read = match self.streams.wait_for(&stream.snapshot_path) {
            Some(read) => read,
            None => self.chunk_reader(stream.reader),
        };
        let (size, content) = read.map_err(|error| stream_error(&label, error))?;
        self.count_read(size);
        let meta = metadata::synthetic_metadata(0o600);
        Ok(Node {
            name,
            kind: NodeKind::File { size, content },
            meta,
        })
    }
}

/// The entries of a virtual folder, those that hold a stream after the others: at a stream the
/// walk waits until its reader (`StreamsAhead`) has read all of it, so the files come first to
/// be read meanwhile, whatever their names (`/databases` sorts before `/tmp`).
fn streams_last(
    children: std::collections::BTreeMap<Vec<u8>, VirtualEntry>,
) -> impl Iterator<Item = (Vec<u8>, VirtualEntry)> {
    let (streams, others): (Vec<_>, Vec<_>) = children
        .into_iter()
        .partition(|(_, entry)| holds_stream(entry));
    others.into_iter().chain(streams)
}

fn holds_stream(entry: &VirtualEntry) -> bool {
    match entry {
        VirtualEntry::Stream(_) => true,
        VirtualEntry::Dir { children, .. } => children.values().any(holds_stream),
        VirtualEntry::Path(_) => false,
    }
}

/// A repository in memory with a cheap key derivation, for the walker's unit tests.
#[cfg(test)]
async fn test_repository() -> IndexedRepository {
    let kdf = crate::crypto::KdfParams {
        memory_kib: 1024,
        iterations: 1,
        parallelism: 1,
    };
    let backend = Arc::new(crate::backend::memory::MemoryBackend::new());
    crate::repository::Repository::init(backend, b"pw", kdf)
        .await
        .unwrap()
        .load_index()
        .await
        .unwrap()
}

/// A regular file as the walk leaves it.
enum FileOutcome {
    /// Its content, and its status as read.
    Stored(NodeKind, FileStat),
    /// Queued for the readers.
    Queued,
    Skipped,
}
