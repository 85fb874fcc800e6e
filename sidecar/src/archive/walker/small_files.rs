//! Small files read beside the walk.
//!
//! On a tree of many small files a first backup's cost is per file: open, `fstat`, read, hash,
//! hand over. One walking thread doing all of it keeps one core busy while the compression
//! workers wait. So the walker queues each small file of a directory (shorter than the minimum
//! chunk: one blob, whatever the chunker) to a few reader threads, walks on, and at the
//! directory's end collects their results into its tree in name order, reading queued files
//! itself while it waits. Trees and ids come out exactly as a walk on one thread makes them.
//!
//! Each file is opened relative to its directory's descriptor and checked to be what the
//! listing saw, exactly as the walker would have ([`super::by_descriptor`]).

use super::by_descriptor::{DirHandle, OpenDir, OpenError};
use super::new_blobs::{NewBlobs, Outbox};
use crate::archive::pipeline::JOB_FRONT_BYTES;
use crate::chunker::Chunker;
use crate::error::{Error, Result};
use crate::ids::{BlobId, BlobKind};
use crate::progress::Progress;
use crossbeam_channel::{Receiver, Sender, TrySendError};
use nix::sys::stat::FileStat;
use std::io::Read;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;

/// Files queued for the readers at most, over the whole walk; past it the walker reads them.
const QUEUED_FILES: usize = 256;

/// What every reader, and the walker, needs to read a file into blobs.
pub struct ReadContext {
    pub blobs: Arc<NewBlobs>,
    pub chunker: Arc<Chunker>,
    pub progress: Arc<Progress>,
    /// Whether files are still opened with `O_NOATIME` (dropped once the kernel refuses it).
    pub no_atime: AtomicBool,
}

impl ReadContext {
    /// Whether a file of `size` bytes (as listed) is read by the readers: shorter than a chunk's
    /// minimum, so it is one blob.
    pub fn is_small(&self, size: i64) -> bool {
        (size as u64) < u64::from(self.chunker.params().min_bytes)
    }
}

/// A file as read: its length, its content's blobs and its status as opened.
pub struct ReadFile {
    pub size: u64,
    pub content: Vec<BlobId>,
    pub opened: FileStat,
}

/// Why a file was not read.
pub enum ReadError {
    /// The file cannot be read, or is no longer what was listed: the snapshot goes without it.
    Source(String),
    /// The rest of the pipeline stopped: the backup fails.
    Pipeline(Error),
}

/// One file to read, and where its result goes.
struct ReadJob {
    dir: Arc<DirHandle>,
    name: Vec<u8>,
    seen: FileStat,
    slot: usize,
    done: Sender<ReadDone>,
}

/// A file `name` read for the directory's entry `slot`.
pub struct ReadDone {
    pub slot: usize,
    pub name: Vec<u8>,
    pub result: std::result::Result<ReadFile, ReadError>,
}

/// The reader threads, and the queue they share with the walker.
pub struct SmallFileReaders {
    context: Arc<ReadContext>,
    queue: Option<Sender<ReadJob>>,
    queued: Receiver<ReadJob>,
    threads: Vec<JoinHandle<()>>,
}

impl SmallFileReaders {
    /// Starts `threads` readers.
    pub fn start(context: Arc<ReadContext>, threads: usize) -> Result<SmallFileReaders> {
        let (queue, queued) = crossbeam_channel::bounded::<ReadJob>(QUEUED_FILES);
        let mut readers = SmallFileReaders {
            context,
            queue: Some(queue),
            queued,
            threads: Vec::new(),
        };
        for number in 0..threads {
            let (context, queued) = (readers.context.clone(), readers.queued.clone());
            let thread = std::thread::Builder::new()
                .name(format!("read-{number}"))
                .spawn(move || {
                    let mut outbox = Outbox::default();
                    queued
                        .iter()
                        .for_each(|job| run(&context, job, &mut outbox));
                    // What it claimed must reach the workers; if they stopped, the backup fails
                    // with their error.
                    let _ = context.blobs.flush(&mut outbox);
                })
                .map_err(|e| Error::io("starting a reader thread", e))?;
            readers.threads.push(thread);
        }
        Ok(readers)
    }

    /// Queues a read; when the queue is full, this thread reads a queued file first (its new
    /// blobs into `outbox`).
    fn submit(&self, mut job: ReadJob, outbox: &mut Outbox) {
        let Some(queue) = &self.queue else { return };
        loop {
            match queue.try_send(job) {
                Ok(()) => return,
                Err(TrySendError::Full(back)) => {
                    job = back;
                    self.help(outbox);
                }
                // Nothing closes the queue while the walker runs.
                Err(TrySendError::Disconnected(_)) => return,
            }
        }
    }

    /// Reads one queued file on this thread; false when none was queued.
    fn help(&self, outbox: &mut Outbox) -> bool {
        match self.queued.try_recv() {
            Ok(job) => {
                run(&self.context, job, outbox);
                true
            }
            Err(_) => false,
        }
    }
}

impl Drop for SmallFileReaders {
    fn drop(&mut self) {
        // The readers end once the queue is closed and empty; each holds a sender of the
        // workers' jobs, which must be gone before the workers can finish.
        self.queue = None;
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// The reads of one directory's small files.
pub struct DirReads {
    handle: Option<Arc<DirHandle>>,
    done: Sender<ReadDone>,
    results: Receiver<ReadDone>,
    pending: usize,
}

impl DirReads {
    pub fn new() -> DirReads {
        let (done, results) = crossbeam_channel::unbounded();
        DirReads {
            handle: None,
            done,
            results,
            pending: 0,
        }
    }

    /// Queues the file `name` of `dir` (seen as `seen`) for the directory's entry `slot`; false
    /// when it must be read by the caller (no second descriptor of the directory could be made).
    pub fn queue(
        &mut self,
        readers: &SmallFileReaders,
        dir: &OpenDir,
        name: &[u8],
        seen: &FileStat,
        slot: usize,
        outbox: &mut Outbox,
    ) -> bool {
        if self.handle.is_none() {
            match dir.handle() {
                Ok(handle) => self.handle = Some(Arc::new(handle)),
                Err(_) => return false,
            }
        }
        let Some(handle) = &self.handle else {
            return false;
        };
        readers.submit(
            ReadJob {
                dir: handle.clone(),
                name: name.to_vec(),
                seen: *seen,
                slot,
                done: self.done.clone(),
            },
            outbox,
        );
        self.pending += 1;
        true
    }

    /// Every queued file's result, in no particular order; reads queued files on this thread
    /// while it waits. Fails when a reader ended without reporting (it panicked).
    pub fn wait(self, readers: &SmallFileReaders, outbox: &mut Outbox) -> Result<Vec<ReadDone>> {
        let DirReads {
            done,
            results,
            pending,
            ..
        } = self;
        // From here each job holds the only senders: a job dropped unreported ends the wait.
        drop(done);
        let mut received = Vec::with_capacity(pending);
        while received.len() < pending {
            if let Ok(done) = results.try_recv() {
                received.push(done);
            } else if !readers.help(outbox) {
                match results.recv() {
                    Ok(done) => received.push(done),
                    Err(_) => {
                        return Err(Error::Interrupted(
                            "a thread reading small files stopped".into(),
                        ))
                    }
                }
            }
        }
        Ok(received)
    }
}

fn run(context: &ReadContext, job: ReadJob, outbox: &mut Outbox) {
    let result = read_small_file(context, &job.dir, &job.name, &job.seen, outbox);
    // A directory that stopped waiting (its walk failed) needs no result.
    let _ = job.done.send(ReadDone {
        slot: job.slot,
        name: job.name,
        result,
    });
}

/// Reads a file listed as shorter than the minimum chunk straight into a blob buffer: one blob
/// (none when empty). A file that grew to the minimum since it was listed is cut into chunks as
/// a large file is.
pub fn read_small_file(
    context: &ReadContext,
    dir: &DirHandle,
    name: &[u8],
    seen: &FileStat,
    outbox: &mut Outbox,
) -> std::result::Result<ReadFile, ReadError> {
    let source = |error: &dyn std::fmt::Display| ReadError::Source(error.to_string());
    let (file, opened) = dir
        .open_file(name, seen, &context.no_atime)
        .map_err(|error: OpenError| source(&error))?;
    let limit = u64::from(context.chunker.params().min_bytes);
    let mut buffer = context
        .blobs
        .buffer(opened.st_size.clamp(0, limit as i64) as usize);
    (&file)
        .take(limit)
        .read_to_end(&mut buffer)
        .map_err(|error| source(&error))?;
    let length = buffer.len() - JOB_FRONT_BYTES;
    if (length as u64) < limit {
        context.progress.add_processed(length as u64);
        let content = match length {
            0 => Vec::new(),
            _ => vec![context
                .blobs
                .store_buffer(BlobKind::Data, buffer, outbox)
                .map_err(ReadError::Pipeline)?],
        };
        let size = length as u64;
        return Ok(ReadFile {
            size,
            content,
            opened,
        });
    }
    let head = std::io::Cursor::new(&buffer[JOB_FRONT_BYTES..]);
    let (size, content) = chunk_into_blobs(context, &mut Vec::new(), head.chain(&file), outbox)?;
    Ok(ReadFile {
        size,
        content,
        opened,
    })
}

/// Cuts a reader into chunks and stores each: the bytes read and the content's blobs. `buffer`
/// is the chunker's, kept by the caller from one file to the next.
pub fn chunk_into_blobs(
    context: &ReadContext,
    buffer: &mut Vec<u8>,
    reader: impl Read,
    outbox: &mut Outbox,
) -> std::result::Result<(u64, Vec<BlobId>), ChunkReadError> {
    let mut content = Vec::new();
    let size = context.chunker.chunk_stream_with(buffer, reader, |chunk| {
        let id = context
            .blobs
            .store(BlobKind::Data, chunk, outbox)
            .map_err(ChunkReadError::Pipeline)?;
        content.push(id);
        context.progress.add_processed(chunk.len() as u64);
        Ok::<(), ChunkReadError>(())
    })?;
    Ok((size, content))
}

/// Why a reader's content was not stored.
pub enum ChunkReadError {
    /// Reading failed.
    Source(std::io::Error),
    /// The rest of the pipeline stopped.
    Pipeline(Error),
}

impl From<std::io::Error> for ChunkReadError {
    fn from(error: std::io::Error) -> ChunkReadError {
        ChunkReadError::Source(error)
    }
}

impl From<ChunkReadError> for ReadError {
    fn from(error: ChunkReadError) -> ReadError {
        match error {
            ChunkReadError::Source(error) => ReadError::Source(error.to_string()),
            ChunkReadError::Pipeline(error) => ReadError::Pipeline(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::pipeline::{JobBatch, Recycler};
    use crate::repository::IndexedRepository;
    use std::io::Write;
    use std::path::Path;

    use super::super::test_repository as repository;

    /// A context whose new blobs land in the returned channel.
    fn context(repo: &IndexedRepository) -> (ReadContext, Receiver<JobBatch>) {
        let (jobs, sent) = crossbeam_channel::unbounded();
        let context = ReadContext {
            blobs: Arc::new(NewBlobs::new(repo.clone(), jobs, Recycler::new(2))),
            chunker: Arc::new(repo.chunker()),
            progress: Arc::default(),
            no_atime: true.into(),
        };
        (context, sent)
    }

    /// The ids one thread's chunker gives `bytes`.
    fn chunk_ids(repo: &IndexedRepository, bytes: &[u8]) -> Vec<BlobId> {
        let mut ids = Vec::new();
        repo.chunker()
            .chunk_stream(bytes, |chunk| {
                ids.push(repo.keys().blob_id(BlobKind::Data, chunk));
                Ok::<(), std::io::Error>(())
            })
            .unwrap();
        ids
    }

    fn read(context: &ReadContext, dir: &Path, name: &str, seen: &FileStat) -> ReadFile {
        let open = OpenDir::of_source(dir).unwrap();
        let mut outbox = Outbox::default();
        let read = read_small_file(
            context,
            &open.handle().unwrap(),
            name.as_bytes(),
            seen,
            &mut outbox,
        );
        context.blobs.flush(&mut outbox).unwrap();
        match read {
            Ok(read) => read,
            Err(ReadError::Source(error)) => panic!("{error}"),
            Err(ReadError::Pipeline(error)) => panic!("{error}"),
        }
    }

    #[tokio::test]
    async fn a_small_file_is_one_blob_and_an_empty_one_none() {
        let repo = repository().await;
        let (context, sent) = context(&repo);
        let dir = tempfile::tempdir().unwrap();
        let min = repo.chunker().params().min_bytes as usize;
        for (name, size) in [("empty", 0), ("one", 1), ("below", min - 1)] {
            let bytes: Vec<u8> = (0..size).map(|n| (n * 7 % 251) as u8).collect();
            std::fs::write(dir.path().join(name), &bytes).unwrap();
            let seen = nix::sys::stat::stat(&dir.path().join(name)).unwrap();
            let read = read(&context, dir.path(), name, &seen);
            assert_eq!(read.size, size as u64);
            assert_eq!(read.content, chunk_ids(&repo, &bytes));
            assert_eq!(read.content.len(), usize::from(size > 0));
        }
        let stored: Vec<_> = sent.try_iter().flatten().collect();
        assert_eq!(stored.len(), 2);
        assert_eq!(stored[1].buffer.len(), JOB_FRONT_BYTES + min - 1);
    }

    #[tokio::test]
    async fn a_file_that_grew_past_a_chunk_since_it_was_listed_is_cut_as_a_large_one() {
        let repo = repository().await;
        let (context, _sent) = context(&repo);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("growing");
        std::fs::write(&path, b"small at first").unwrap();
        let seen = nix::sys::stat::stat(&path).unwrap();
        let more: Vec<u8> = (0..9 << 20)
            .map(|n: u32| (n.wrapping_mul(2654435761) >> 24) as u8)
            .collect();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(&more)
            .unwrap();
        let whole = std::fs::read(&path).unwrap();
        let read = read(&context, dir.path(), "growing", &seen);
        assert_eq!(read.size, whole.len() as u64);
        assert_eq!(read.content, chunk_ids(&repo, &whole));
        assert!(
            read.content.len() > 2,
            "9 MiB are more than two chunks of at most 4 MiB"
        );
    }
}
