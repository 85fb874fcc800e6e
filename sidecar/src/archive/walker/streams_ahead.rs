//! Streams (database dumps, a plan's stream containers) read on a thread of their own from the
//! start of the walk. A dump is mostly its server's work on one core: read in turn, the walk
//! would wait for it with the other core idle; read beside the files, the two overlap. The walk
//! takes the entries that hold a stream after the others (`streams_last`), so that it reaches a
//! stream, and waits for it, only once the files are read.

use super::new_blobs::Outbox;
use super::small_files::{chunk_into_blobs, ChunkReadError, ReadContext};
use crate::archive::source::VirtualEntry;
use crate::error::{Error, Result};
use crate::ids::BlobId;
use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;

/// A stream as read: its length and its content's blobs, all sent to the workers.
pub type StreamRead = std::result::Result<(u64, Vec<BlobId>), ChunkReadError>;

/// The streams being read ahead, by their path in the snapshot.
#[derive(Default)]
pub struct StreamsAhead {
    pending: HashMap<String, Receiver<StreamRead>>,
}

impl StreamsAhead {
    /// Takes the reader of every stream below `children` and reads them one after another, in
    /// the walk's order, on a new thread.
    pub fn start(
        children: &mut BTreeMap<Vec<u8>, VirtualEntry>,
        context: Arc<ReadContext>,
    ) -> Result<StreamsAhead> {
        let mut work = Vec::new();
        let mut pending = HashMap::new();
        take_readers(children, &mut |path, reader| {
            let (sender, receiver) = sync_channel(1);
            pending.insert(path, receiver);
            work.push((reader, sender));
        });
        if !work.is_empty() {
            std::thread::Builder::new()
                .name("streams".into())
                .spawn(move || read_all(&context, work))
                .map_err(|error| Error::Interrupted(format!("cannot start a thread: {error}")))?;
        }
        Ok(StreamsAhead { pending })
    }

    /// What the stream at `path` read, once it is read; `None` for a stream not read ahead.
    pub fn wait_for(&mut self, path: &str) -> Option<StreamRead> {
        let receiver = self.pending.remove(path)?;
        Some(receiver.recv().unwrap_or_else(|_| {
            Err(ChunkReadError::Pipeline(Error::Interrupted(
                "the thread reading the streams stopped".into(),
            )))
        }))
    }
}

/// Hands each stream's reader to `take` (its place keeps an empty one), depth first in name
/// order: the order the walk reaches them.
fn take_readers(
    children: &mut BTreeMap<Vec<u8>, VirtualEntry>,
    take: &mut impl FnMut(String, Box<dyn Read + Send>),
) {
    for entry in children.values_mut() {
        match entry {
            VirtualEntry::Dir { children, .. } => take_readers(children, take),
            VirtualEntry::Stream(stream) => {
                let reader = std::mem::replace(&mut stream.reader, Box::new(std::io::empty()));
                take(stream.snapshot_path.clone(), reader);
            }
            VirtualEntry::Path(_) => {}
        }
    }
}

/// Reads each stream into blobs, flushed to the workers before its result is handed over.
fn read_all(context: &ReadContext, work: Vec<(Box<dyn Read + Send>, SyncSender<StreamRead>)>) {
    let mut buffer = Vec::new();
    let mut outbox = Outbox::default();
    for (reader, sender) in work {
        let read = chunk_into_blobs(context, &mut buffer, reader, &mut outbox).and_then(|read| {
            context
                .blobs
                .flush(&mut outbox)
                .map_err(ChunkReadError::Pipeline)?;
            Ok(read)
        });
        if sender.send(read).is_err() {
            // The walk stopped: the streams after this one are dropped unread.
            return;
        }
    }
}
