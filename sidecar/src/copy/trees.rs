//! The copy of one snapshot: its trees walked depth first, their blobs renamed under the
//! destination's keys and sent through the backup's sealing threads and uploader.

use super::{CopyOptions, READS_IN_FLIGHT};
use crate::archive::pipeline::{
    BlobJob, FinishedPack, JobBatch, Recycler, BATCH_BLOBS, BATCH_BYTES, JOB_FRONT_BYTES,
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
    /// their index, then the snapshot.
    pub(super) async fn copy_one(
        &mut self,
        source_id: SnapshotId,
        snapshot: &Snapshot,
    ) -> Result<(SnapshotId, UploadStats)> {
        let (root, added) = self.copy_root(snapshot.tree).await?;
        let mut copy = snapshot.clone();
        copy.tree = root;
        // As restic's: the parent means nothing in the destination, and a copy of a copy keeps
        // the first original.
        copy.parent = None;
        copy.original = Some(super::original_of(source_id, snapshot));
        let copy_id = self.destination.write_snapshot(&copy).await?;
        Ok((copy_id, added))
    }

    /// Copies the tree `root` through a pipeline of its own, which has stored and indexed
    /// everything when this returns.
    async fn copy_root(&mut self, root: BlobId) -> Result<(BlobId, UploadStats)> {
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
        let walked = self.copy_tree(&mut sending, root).await;
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

    /// Copies the source tree `id` and everything below it; returns the copy's id.
    fn copy_tree<'s>(
        &'s mut self,
        sending: &'s mut Sending,
        id: BlobId,
    ) -> Pin<Box<dyn Future<Output = Result<BlobId>> + Send + 's>> {
        Box::pin(async move {
            if let Some(known) = self.trees.get(&id) {
                return Ok(*known);
            }
            let tree = self.source.read_tree(&id, "a folder being copied").await?;
            let mut nodes = tree.nodes;
            self.copy_contents(sending, &mut nodes).await?;
            for node in &mut nodes {
                if let NodeKind::Dir { subtree } = &mut node.kind {
                    *subtree = self.copy_tree(sending, *subtree).await?;
                }
            }
            let copy =
                sending.store(self.destination, BlobKind::Tree, Tree { nodes }.to_bytes())?;
            self.trees.insert(id, copy);
            Ok(copy)
        })
    }

    /// Renames the content of every file among `nodes`, reading a few blobs at once.
    async fn copy_contents(&self, sending: &mut Sending, nodes: &mut [Node]) -> Result<()> {
        let wanted: Vec<(usize, usize, BlobId)> = nodes
            .iter()
            .enumerate()
            .flat_map(|(at, node)| match &node.kind {
                NodeKind::File { content, .. } => content
                    .iter()
                    .enumerate()
                    .map(|(part, blob)| (at, part, *blob))
                    .collect(),
                _ => Vec::new(),
            })
            .collect();
        let source = self.source;
        let mut read = futures::stream::iter(wanted)
            .map(|(at, part, blob)| async move {
                let plaintext = source.read_blob(&blob, "a file being copied").await?;
                Ok::<_, Error>((at, part, plaintext))
            })
            .buffered(READS_IN_FLIGHT);
        while let Some((at, part, plaintext)) = read.try_next().await? {
            let copy = sending.store(self.destination, BlobKind::Data, plaintext)?;
            if let NodeKind::File { content, .. } = &mut nodes[at].kind {
                content[part] = copy;
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
        if self.queued.contains(&id) || destination.index().contains(&id) {
            return Ok(id);
        }
        let mut buffer = self.buffers.take();
        buffer.resize(JOB_FRONT_BYTES, 0);
        buffer.extend_from_slice(&plaintext);
        self.batch_bytes += plaintext.len();
        self.batch.push(BlobJob { kind, id, buffer });
        self.queued.insert(id);
        if self.batch_bytes >= BATCH_BYTES || self.batch.len() >= BATCH_BLOBS {
            self.send_batch()?;
        }
        Ok(id)
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
