//! The walker: reads the sources in order, cuts file content into chunks, names each chunk by its
//! keyed hash and sends only chunks the repository lacks to the workers. It builds one tree per
//! directory, bottom-up, and returns the root tree's id.

use super::pipeline::{BlobJob, Recycler, JOB_FRONT_BYTES};
use super::source::{SourceTree, StreamSource, VirtualEntry};
use super::Excludes;
use crate::chunker::Chunker;
use crate::crypto::RepositoryKeys;
use crate::error::{Error, Result};
use crate::format::tree::{Metadata, Node, NodeKind, Timestamp, Tree};
use crate::ids::{BlobId, BlobKind};
use crate::progress::Progress;
use crate::repository::IndexedRepository;
use crossbeam_channel::Sender;
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fs::{File, Metadata as FsMetadata};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
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
    pub runtime: tokio::runtime::Handle,
    pub keys: RepositoryKeys,
    pub chunker: Arc<Chunker>,
    /// The chunker's read buffer, kept from file to file.
    chunk_buffer: Vec<u8>,
    /// Blobs already in the repository or already sent to the workers in this backup.
    pub known: HashSet<BlobId>,
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
}

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
        let known = repo.index().blob_ids();
        Walker {
            keys: repo.keys().clone(),
            chunker: Arc::new(repo.chunker()),
            chunk_buffer: Vec::new(),
            known,
            repo,
            runtime,
            jobs,
            buffers,
            excludes,
            progress,
            warnings: Vec::new(),
            notices: Vec::new(),
            stats: WalkStats::default(),
            hard_links: HashMap::new(),
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
        if self.known.insert(id) {
            let mut buffer = self.buffers.take();
            buffer.reserve_exact(JOB_FRONT_BYTES + plaintext.len() + crate::crypto::TAG_BYTES);
            buffer.resize(JOB_FRONT_BYTES, 0);
            buffer.extend_from_slice(plaintext);
            let job = BlobJob { kind, id, buffer };
            self.jobs.send(job).map_err(|_| pipeline_stopped())?;
        }
        Ok(id)
    }

    fn store_tree(&mut self, mut nodes: Vec<Node>) -> Result<BlobId> {
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        self.store_blob(BlobKind::Tree, &Tree { nodes }.to_bytes())
    }

    /// A parent tree for comparison; an unreadable one only costs speed, so it is a warning.
    fn parent_tree(&mut self, id: &BlobId) -> Option<Tree> {
        let repo = self.repo.clone();
        match self.runtime.block_on(repo.read_tree(id, "parent snapshot")) {
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
        parent: Option<Tree>,
    ) -> Result<BlobId> {
        let mut nodes = Vec::new();
        for (name, entry) in children {
            let parent_node = parent.as_ref().and_then(|tree| tree.find(&name)).cloned();
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
                        .and_then(|path| std::fs::symlink_metadata(path).ok())
                        .map(|m| metadata_of(&m))
                        .unwrap_or_else(synthetic_dir_metadata);
                    Some(Node {
                        name,
                        kind: NodeKind::Dir { subtree },
                        meta,
                    })
                }
                VirtualEntry::Path(path) => match std::fs::symlink_metadata(&path) {
                    Ok(meta) => {
                        let node = self.archive_entry(&path, name, &meta, parent_node.as_ref())?;
                        self.stats.sources_read += u64::from(node.is_some());
                        node
                    }
                    Err(error) => {
                        self.warn(format!("cannot read {}: {error}", path.display()));
                        None
                    }
                },
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

    /// One entry of a real directory; `None` when it is skipped (excluded, unreadable, a socket).
    fn archive_entry(
        &mut self,
        path: &Path,
        name: Vec<u8>,
        fs_meta: &FsMetadata,
        parent: Option<&Node>,
    ) -> Result<Option<Node>> {
        if self.excludes.is_excluded(path) {
            return Ok(None);
        }
        let meta = metadata_of(fs_meta);
        let file_type = fs_meta.file_type();
        let kind = if file_type.is_file() {
            match self.archive_file(path, fs_meta, parent)? {
                Some(kind) => kind,
                None => return Ok(None),
            }
        } else if file_type.is_dir() {
            let parent_tree = match parent.map(|n| &n.kind) {
                Some(NodeKind::Dir { subtree }) => self.parent_tree(&subtree.clone()),
                _ => None,
            };
            match self.archive_dir(path, parent_tree)? {
                Some(subtree) => NodeKind::Dir { subtree },
                None => return Ok(None),
            }
        } else if file_type.is_symlink() {
            match std::fs::read_link(path) {
                Ok(target) => NodeKind::Symlink {
                    target: target.into_os_string().into_vec(),
                },
                Err(error) => {
                    self.warn(format!(
                        "cannot read the symlink {}: {error}",
                        path.display()
                    ));
                    return Ok(None);
                }
            }
        } else if file_type.is_fifo() {
            NodeKind::Fifo
        } else if file_type.is_char_device() {
            NodeKind::CharDevice {
                rdev: fs_meta.rdev(),
            }
        } else if file_type.is_block_device() {
            NodeKind::BlockDevice {
                rdev: fs_meta.rdev(),
            }
        } else {
            self.notice(format!(
                "skipped {}: sockets cannot be backed up",
                path.display()
            ));
            return Ok(None);
        };
        Ok(Some(Node { name, kind, meta }))
    }

    fn archive_dir(&mut self, path: &Path, parent: Option<Tree>) -> Result<Option<BlobId>> {
        let listing = match std::fs::read_dir(path) {
            Ok(listing) => listing,
            Err(error) => {
                self.warn(format!("cannot list {}: {error}", path.display()));
                return Ok(None);
            }
        };
        let mut names: Vec<Vec<u8>> = Vec::new();
        for entry in listing {
            match entry {
                Ok(entry) => names.push(entry.file_name().into_vec()),
                Err(error) => self.warn(format!("cannot list {}: {error}", path.display())),
            }
        }
        names.sort();
        let mut nodes = Vec::with_capacity(names.len());
        for name in names {
            let child = path.join(OsStr::from_bytes(&name));
            let parent_node = parent.as_ref().and_then(|tree| tree.find(&name));
            match std::fs::symlink_metadata(&child) {
                Ok(meta) => nodes.extend(self.archive_entry(&child, name, &meta, parent_node)?),
                Err(error) => self.warn(format!("cannot read {}: {error}", child.display())),
            }
        }
        self.stats.dirs += 1;
        Ok(Some(self.store_tree(nodes)?))
    }

    /// A regular file's content: reused from the parent snapshot or an earlier hard link when
    /// unchanged, else read and chunked. `None` when it cannot be read (a warning).
    fn archive_file(
        &mut self,
        path: &Path,
        fs_meta: &FsMetadata,
        parent: Option<&Node>,
    ) -> Result<Option<NodeKind>> {
        let inode_key = (fs_meta.dev(), fs_meta.ino());
        if fs_meta.nlink() > 1 {
            if let Some((size, content)) = self.hard_links.get(&inode_key) {
                self.stats.files += 1;
                self.stats.hard_links += 1;
                self.stats.total_bytes += size;
                self.progress.add_files(1);
                return Ok(Some(NodeKind::File {
                    size: *size,
                    content: content.clone(),
                }));
            }
        }
        let reusable = unchanged_content(parent, fs_meta)
            .filter(|content| content.iter().all(|id| self.known.contains(id)));
        if let Some(content) = reusable {
            self.stats.files += 1;
            self.stats.total_bytes += fs_meta.len();
            self.progress.add_files(1);
            self.remember_hard_link(fs_meta, inode_key, fs_meta.len(), &content);
            return Ok(Some(NodeKind::File {
                size: fs_meta.len(),
                content,
            }));
        }
        let file = match File::open(path) {
            Ok(file) => file,
            Err(error) => {
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
        self.remember_hard_link(fs_meta, inode_key, size, &content);
        Ok(Some(NodeKind::File { size, content }))
    }

    fn remember_hard_link(
        &mut self,
        fs_meta: &FsMetadata,
        key: (u64, u64),
        size: u64,
        content: &[BlobId],
    ) {
        if fs_meta.nlink() > 1 {
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
        let now = now_timestamp();
        let meta = Metadata {
            mode: 0o600,
            uid: nix::unistd::getuid().as_raw(),
            gid: nix::unistd::getgid().as_raw(),
            mtime: now,
            ctime: now,
            inode: 0,
            device: 0,
            links: 1,
        };
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

/// The parent's content when the file looks untouched: same size, modification and change time,
/// and inode. The change time catches edits that restore the modification time.
fn unchanged_content(parent: Option<&Node>, fs_meta: &FsMetadata) -> Option<Vec<BlobId>> {
    let parent = parent?;
    let NodeKind::File { size, content } = &parent.kind else {
        return None;
    };
    let meta = metadata_of(fs_meta);
    let same = *size == fs_meta.len()
        && parent.meta.mtime == meta.mtime
        && parent.meta.ctime == meta.ctime
        && parent.meta.inode == meta.inode;
    same.then(|| content.clone())
}

pub fn metadata_of(meta: &FsMetadata) -> Metadata {
    Metadata {
        mode: meta.mode() & 0o7777,
        uid: meta.uid(),
        gid: meta.gid(),
        mtime: Timestamp {
            secs: meta.mtime(),
            nanos: meta.mtime_nsec() as u32,
        },
        ctime: Timestamp {
            secs: meta.ctime(),
            nanos: meta.ctime_nsec() as u32,
        },
        inode: meta.ino(),
        device: meta.dev(),
        links: meta.nlink().max(1),
    }
}

fn now_timestamp() -> Timestamp {
    let now = chrono::Utc::now();
    Timestamp {
        secs: now.timestamp(),
        nanos: now.timestamp_subsec_nanos(),
    }
}

/// Metadata of a directory that exists only in the snapshot (the parent of a stream).
fn synthetic_dir_metadata() -> Metadata {
    let now = now_timestamp();
    Metadata {
        mode: 0o755,
        uid: nix::unistd::getuid().as_raw(),
        gid: nix::unistd::getgid().as_raw(),
        mtime: now,
        ctime: now,
        inode: 0,
        device: 0,
        links: 1,
    }
}
