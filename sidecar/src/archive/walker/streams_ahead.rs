//! Streams (database dumps, a plan's stream containers) read on a thread of their own from the
//! start of the walk. A dump is mostly its server's work on one core: read in turn, the walk
//! would wait for it with the other core idle; read beside the files, the two overlap. The walk
//! takes the entries that hold a stream after the others (`streams_last`), so that it reaches a
//! stream, and waits for it, only once the files are read.

use super::new_blobs::Outbox;
use super::small_files::{chunk_into_blobs, ChunkReadError, ReadContext};
use crate::archive::source::{StreamSource, VirtualEntry};
use crate::error::{Error, Result};
use crate::ids::BlobId;
use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, OnceLock};

/// A stream as read: its length and its content's blobs, all sent to the workers.
pub type StreamRead = std::result::Result<(u64, Vec<BlobId>), ChunkReadError>;

/// The streams being read ahead, by their path in the snapshot.
#[derive(Default)]
pub struct StreamsAhead {
    pending: HashMap<String, Pending>,
    /// The path of the first stream that failed, set before its failure is handed over.
    failed: Arc<OnceLock<String>>,
}

struct Pending {
    label: String,
    read: Receiver<StreamRead>,
}

impl Pending {
    /// What the stream read, once it is read.
    fn receive(&self) -> StreamRead {
        self.read.recv().unwrap_or_else(|_| {
            Err(ChunkReadError::Pipeline(Error::Interrupted(
                "the thread reading the streams stopped".into(),
            )))
        })
    }
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
        take_readers(children, &mut |stream| {
            let (sender, read) = sync_channel(1);
            let path = stream.snapshot_path.clone();
            let label = stream.label.clone();
            let reader = std::mem::replace(&mut stream.reader, Box::new(std::io::empty()));
            pending.insert(path.clone(), Pending { label, read });
            work.push(Work {
                path,
                reader,
                sender,
            });
        });
        let failed = Arc::new(OnceLock::new());
        if !work.is_empty() {
            let failed = failed.clone();
            std::thread::Builder::new()
                .name("streams".into())
                .spawn(move || read_all(&context, work, &failed))
                .map_err(|error| Error::Interrupted(format!("cannot start a thread: {error}")))?;
        }
        Ok(StreamsAhead { pending, failed })
    }

    /// What the stream at `path` read, once it is read; `None` for a stream not read ahead.
    pub fn wait_for(&mut self, path: &str) -> Option<StreamRead> {
        Some(self.pending.remove(path)?.receive())
    }

    /// The failure of a stream that has failed already, if one has: the walk stops on it
    /// rather than read and store every file first for a backup that cannot succeed.
    pub fn failure(&mut self) -> Option<Error> {
        let pending = self.pending.remove(self.failed.get()?)?;
        let error = pending.receive().err()?;
        Some(stream_error(&pending.label, error))
    }
}

/// The backup's error for a stream that could not be read: a stream that fails fails the backup.
pub fn stream_error(label: &str, error: ChunkReadError) -> Error {
    match error {
        ChunkReadError::Pipeline(error) => error,
        ChunkReadError::Source(error) => Error::Io {
            what: format!("reading {label}"),
            source: error,
        },
    }
}

/// A stream to read: where the walk will ask for it, and where to send what was read.
struct Work {
    path: String,
    reader: Box<dyn Read + Send>,
    sender: SyncSender<StreamRead>,
}

/// Hands each stream below `children` to `take`, which takes its reader (its place keeps an
/// empty one), depth first in name order: the order the walk reaches them.
fn take_readers(
    children: &mut BTreeMap<Vec<u8>, VirtualEntry>,
    take: &mut impl FnMut(&mut StreamSource),
) {
    for entry in children.values_mut() {
        match entry {
            VirtualEntry::Dir { children, .. } => take_readers(children, take),
            VirtualEntry::Stream(stream) => take(stream),
            VirtualEntry::Path(_) => {}
        }
    }
}

/// Reads each stream into blobs, flushed to the workers before its result is handed over; the
/// first that fails is marked in `failed` before.
fn read_all(context: &ReadContext, work: Vec<Work>, failed: &OnceLock<String>) {
    let mut buffer = Vec::new();
    let mut outbox = Outbox::default();
    for stream in work {
        let read =
            chunk_into_blobs(context, &mut buffer, stream.reader, &mut outbox).and_then(|read| {
                context
                    .blobs
                    .flush(&mut outbox)
                    .map_err(ChunkReadError::Pipeline)?;
                Ok(read)
            });
        if read.is_err() {
            let _ = failed.set(stream.path);
        }
        if stream.sender.send(read).is_err() {
            // The walk stopped: the streams after this one are dropped unread.
            return;
        }
    }
}
