//! The copy of one snapshot: its trees walked depth first, their blobs renamed under the
//! destination's keys and sent through the backup's sealing threads and uploader.
//!
//! A snapshot copied earlier gives the names without reading: its source tree and its copy are
//! walked side by side with the new one, folder by folder. A folder whose source tree is the same
//! as the earlier one's is its copy, and a blob the earlier folder named is named as its copy
//! named it, so only what changed since is read from the source. Where the two do not pair (names
//! or shapes differ, a tree cannot be read, the destination's index lacks the copy), everything
//! below is read as without one.

use super::blobs::{locate, read_run, runs, PassedBlob};
use super::{CopyOptions, READS_IN_FLIGHT};
use crate::archive::pipeline::{
    BlobJob, FinishedPack, JobBatch, Payload, Recycler, BATCH_BLOBS, BATCH_BYTES, JOB_FRONT_BYTES,
};
use crate::archive::uploader::{run_uploader, UploadStats};
use crate::archive::SealingThreads;
use crate::error::{Error, Result};
use crate::format::snapshot::Snapshot;
use crate::format::tree::{Node, NodeKind, Tree};
use crate::ids::{BlobId, BlobKind, SnapshotId};
use crate::repository::IndexedRepository;
use futures::{StreamExt, TryStreamExt};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;

/// A folder of a snapshot already in the destination: its tree in the source and its copy's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Reference {
    pub source: BlobId,
    pub copy: BlobId,
}

/// What an earlier folder and its copy name: the copy's name of each data blob of its files,
/// and the reference of each subfolder.
#[derive(Default)]
struct Earlier {
    blobs: HashMap<BlobId, BlobId>,
    folders: HashMap<Vec<u8>, Reference>,
}

/// Copies snapshots one after the other, remembering the folders it has copied.
pub(super) struct Copier<'a> {
    source: &'a IndexedRepository,
    destination: &'a IndexedRepository,
    options: &'a CopyOptions,
    /// Source tree id → its copy's id, for trees stored (or queued in the running copy).
    trees: HashMap<BlobId, BlobId>,
}

/// The blobs of one snapshot's copy on their way to the destination.
struct Sending {
    jobs: Option<crossbeam_channel::Sender<JobBatch>>,
    batch: JobBatch,
    batch_bytes: usize,
    buffers: Recycler,
    /// Blobs handed to the pipeline in this copy (the index lists them only once stored).
    queued: HashSet<BlobId>,
}

impl<'a> Copier<'a> {
    pub(super) fn new(
        source: &'a IndexedRepository,
        destination: &'a IndexedRepository,
        options: &'a CopyOptions,
    ) -> Copier<'a> {
        Copier {
            source,
            destination,
            options,
            trees: HashMap::new(),
        }
    }

    /// Stores a copy of `snapshot` and returns its id and what it added: every blob first, then
    /// their index, then the snapshot. `reference` is an earlier snapshot of the same folders
    /// already in the destination.
    pub(super) async fn copy_one(
        &mut self,
        source_id: SnapshotId,
        snapshot: &Snapshot,
        reference: Option<Reference>,
    ) -> Result<(SnapshotId, BlobId, UploadStats)> {
        let (root, added) = self.copy_root(snapshot.tree, reference).await?;
        let mut copy = snapshot.clone();
        copy.tree = root;
        // As restic's: the parent means nothing in the destination, and a copy of a copy keeps
        // the first original.
        copy.parent = None;
        copy.original = Some(super::original_of(source_id, snapshot));
        let copy_id = self.destination.write_snapshot(&copy).await?;
        Ok((copy_id, root, added))
    }

    /// Copies the tree `root` through a pipeline of its own, which has stored and indexed
    /// everything when this returns.
    async fn copy_root(
        &mut self,
        root: BlobId,
        reference: Option<Reference>,
    ) -> Result<(BlobId, UploadStats)> {
        let options = self.options;
        let (job_tx, job_rx) = crossbeam_channel::bounded::<JobBatch>(1);
        let buffers = Recycler::new(options.workers + 3);
        let (pack_tx, pack_rx) = tokio::sync::mpsc::channel::<FinishedPack>(1);
        let sealing = SealingThreads::start(
            self.destination,
            options.workers.max(1),
            options.upload_memory_bytes,
            job_rx,
            buffers.clone(),
            pack_tx,
        )?;
        let uploads = tokio::spawn(run_uploader(
            self.destination.clone(),
            pack_rx,
            options.upload_concurrency,
            None,
            options.progress.clone(),
            false,
        ));
        let mut sending = Sending {
            jobs: Some(job_tx),
            batch: Vec::new(),
            batch_bytes: 0,
            buffers,
            queued: HashSet::new(),
        };
        let walked = self.copy_tree(&mut sending, root, reference).await;
        let flushed = sending.finish();
        let uploaded = uploads
            .await
            .map_err(|e| Error::Interrupted(format!("the uploader failed: {e}")))?;
        sealing.join().await;
        // An upload error explains a walk that stopped because the pipeline closed.
        let added = uploaded?;
        flushed?;
        Ok((walked?, added))
    }

    /// Copies the source tree `id` and everything below it; returns the copy's id. `reference`
    /// is the same folder in a snapshot already copied.
    fn copy_tree<'s>(
        &'s mut self,
        sending: &'s mut Sending,
        id: BlobId,
        reference: Option<Reference>,
    ) -> Pin<Box<dyn Future<Output = Result<BlobId>> + Send + 's>> {
        Box::pin(async move {
            if let Some(known) = self.trees.get(&id) {
                return Ok(*known);
            }
            if let Some(earlier) = reference {
                // Unchanged since: the copy holds it all, as the snapshot naming it is complete.
                if earlier.source == id && self.destination.index().contains(&earlier.copy) {
                    self.trees.insert(id, earlier.copy);
                    return Ok(earlier.copy);
                }
            }
            let tree = (self.source.read_tree(&id, "a folder being copied").await)
                .map_err(|error| from_source(self.source, error))?;
            let earlier = match reference {
                Some(reference) => self.earlier(reference).await,
                None => Earlier::default(),
            };
            let mut nodes = tree.nodes;
            self.copy_contents(sending, &mut nodes, &earlier.blobs)
                .await?;
            for node in &mut nodes {
                if let NodeKind::Dir { subtree } = &mut node.kind {
                    let below = earlier.folders.get(&node.name).copied();
                    *subtree = self.copy_tree(sending, *subtree, below).await?;
                }
            }
            let copy =
                sending.store(self.destination, BlobKind::Tree, Tree { nodes }.to_bytes())?;
            self.trees.insert(id, copy);
            Ok(copy)
        })
    }

    /// What the earlier folder `reference` and its copy name, or nothing when they do not pair
    /// entry by entry (then the folder is read as if there were no earlier copy).
    async fn earlier(&self, reference: Reference) -> Earlier {
        let context = "a folder copied earlier";
        let (Ok(source), Ok(copy)) = (
            self.source.read_tree(&reference.source, context).await,
            self.destination.read_tree(&reference.copy, context).await,
        ) else {
            return Earlier::default();
        };
        if source.nodes.len() != copy.nodes.len() {
            return Earlier::default();
        }
        let mut earlier = Earlier::default();
        for (entry, its_copy) in source.nodes.iter().zip(&copy.nodes) {
            if entry.name != its_copy.name {
                return Earlier::default();
            }
            match (&entry.kind, &its_copy.kind) {
                (
                    NodeKind::File { content: was, .. },
                    NodeKind::File {
                        content: copied, ..
                    },
                ) if was.len() == copied.len() => {
                    earlier
                        .blobs
                        .extend(was.iter().copied().zip(copied.iter().copied()));
                }
                (NodeKind::Dir { subtree: was }, NodeKind::Dir { subtree: copied }) => {
                    let folder = Reference {
                        source: *was,
                        copy: *copied,
                    };
                    earlier.folders.insert(entry.name.clone(), folder);
                }
                (NodeKind::File { .. }, _) | (NodeKind::Dir { .. }, _) => {
                    return Earlier::default()
                }
                _ => {}
            }
        }
        earlier
    }

    /// Renames the content of every file among `nodes`: a blob `earlier` names keeps its copy's
    /// name when the destination holds it; the others are read, a few at once.
    async fn copy_contents(
        &self,
        sending: &mut Sending,
        nodes: &mut [Node],
        earlier: &HashMap<BlobId, BlobId>,
    ) -> Result<()> {
        let mut wanted: Vec<(usize, usize, BlobId)> = Vec::new();
        {
            let index = self.destination.index();
            for (at, node) in nodes.iter_mut().enumerate() {
                if let NodeKind::File { content, .. } = &mut node.kind {
                    for (part, blob) in content.iter_mut().enumerate() {
                        match earlier.get(blob).filter(|copy| index.contains(copy)) {
                            Some(copy) => *blob = *copy,
                            None => wanted.push((at, part, *blob)),
                        }
                    }
                }
            }
        }
        let source = self.source;
        let keys = self.destination.keys();
        let progress = &self.options.progress;
        let buffers = &sending.buffers.clone();
        let ids: Vec<BlobId> = wanted.iter().map(|&(_, _, id)| id).collect();
        let located =
            locate(source, &ids, "a file being copied").map_err(|e| from_source(source, e))?;
        let mut read = futures::stream::iter(runs(located))
            .map(|run| async move {
                let passed = (read_run(source, keys, run, buffers).await)
                    .map_err(|error| from_source(source, error))?;
                let bytes = passed.iter().map(|blob| u64::from(blob.raw_length)).sum();
                progress.add_processed(bytes);
                Ok::<_, Error>(passed)
            })
            .buffered(READS_IN_FLIGHT);
        let mut places = wanted.into_iter().map(|(at, part, _)| (at, part));
        while let Some(passed) = read.try_next().await? {
            for (blob, (at, part)) in passed.into_iter().zip(places.by_ref()) {
                let copy = sending.pass(self.destination, blob)?;
                if let NodeKind::File { content, .. } = &mut nodes[at].kind {
                    content[part] = copy;
                }
            }
        }
        Ok(())
    }
}

impl Sending {
    /// The blob's id in `destination`; the blob is handed to the pipeline unless the
    /// destination has it or this copy has queued it.
    fn store(
        &mut self,
        destination: &IndexedRepository,
        kind: BlobKind,
        plaintext: Vec<u8>,
    ) -> Result<BlobId> {
        let id = destination.keys().blob_id(kind, &plaintext);
        if self.has(destination, &id) {
            return Ok(id);
        }
        let mut buffer = self.buffers.take();
        buffer.resize(JOB_FRONT_BYTES, 0);
        buffer.extend_from_slice(&plaintext);
        self.queue(BlobJob::plaintext(kind, id, buffer))?;
        Ok(id)
    }

    /// The passed data blob's id in `destination`, as [`Sending::store`], its encoded form handed
    /// on as it is.
    fn pass(&mut self, destination: &IndexedRepository, blob: PassedBlob) -> Result<BlobId> {
        let id = blob.id;
        if self.has(destination, &id) {
            self.buffers.give(blob.buffer);
            return Ok(id);
        }
        self.queue(BlobJob {
            kind: BlobKind::Data,
            id,
            buffer: blob.buffer,
            payload: Payload::Encoded {
                raw_length: blob.raw_length,
            },
        })?;
        Ok(id)
    }

    /// Whether `destination` stores blob `id`, or this copy has queued it: then it is not sent.
    fn has(&self, destination: &IndexedRepository, id: &BlobId) -> bool {
        self.queued.contains(id) || destination.index().contains(id)
    }

    fn queue(&mut self, job: BlobJob) -> Result<()> {
        self.batch_bytes += job.buffer.len();
        self.queued.insert(job.id);
        self.batch.push(job);
        if self.batch_bytes >= BATCH_BYTES || self.batch.len() >= BATCH_BLOBS {
            self.send_batch()?;
        }
        Ok(())
    }

    fn send_batch(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        self.batch_bytes = 0;
        let jobs = self.jobs.as_ref().ok_or_else(closed)?;
        // The channel is shallow: waiting here is the back-pressure that bounds memory.
        tokio::task::block_in_place(|| jobs.send(batch)).map_err(|_| closed())
    }

    /// Sends what is left and closes the pipeline's input, so that it drains and ends.
    fn finish(&mut self) -> Result<()> {
        let sent = self.send_batch();
        self.jobs = None;
        sent
    }
}

fn closed() -> Error {
    Error::Interrupted("the copy's upload pipeline stopped".into())
}

/// `error` of a read of the copy's source, named as the source's: a copy's other errors are the
/// destination's.
fn from_source(source: &IndexedRepository, error: Error) -> Error {
    Error::CopySource {
        location: source.backend().location(),
        error: Box::new(error),
    }
}
