//! Counters a long operation updates as it goes, for a progress bar or a log line; `rate` turns
//! samples of them into a speed and the time left.

pub mod rate;

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct Progress {
    /// Files finished (backed up or restored).
    pub files: AtomicU64,
    /// Bytes of file content read (backup) or written (restore).
    pub bytes_processed: AtomicU64,
    /// Bytes sent to or fetched from the repository.
    pub bytes_transferred: AtomicU64,
    /// Bytes of file content the batches of a restore planned so far.
    pub bytes_total: AtomicU64,
    /// Files the batches of a restore planned so far.
    pub files_total: AtomicU64,
    /// What the whole restore will write, as the snapshot records it (0: unknown), before its
    /// later batches are planned; see [`Progress::restore_totals`].
    pub bytes_expected: AtomicU64,
    pub files_expected: AtomicU64,
    /// Bytes of the snapshot's files a restore does not write: files the target already holds,
    /// files left as they stand, later names of hard-linked files.
    pub bytes_skipped: AtomicU64,
}

impl Progress {
    pub fn add_files(&self, count: u64) {
        self.files.fetch_add(count, Ordering::Relaxed);
    }
    pub fn add_processed(&self, bytes: u64) {
        self.bytes_processed.fetch_add(bytes, Ordering::Relaxed);
    }
    pub fn add_transferred(&self, bytes: u64) {
        self.bytes_transferred.fetch_add(bytes, Ordering::Relaxed);
    }
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Says what a whole restore writes, from the snapshot's record, before it is planned.
    pub fn expect(&self, bytes: u64, files: u64) {
        self.bytes_expected.store(bytes, Ordering::Relaxed);
        self.files_expected.store(files, Ordering::Relaxed);
    }

    /// Records a planned restore batch: `bytes` to write and `files`, and `skipped` bytes of its
    /// files that are not written.
    pub fn add_planned(&self, bytes: u64, files: u64, skipped: u64) {
        self.bytes_total.fetch_add(bytes, Ordering::Relaxed);
        self.files_total.fetch_add(files, Ordering::Relaxed);
        self.bytes_skipped.fetch_add(skipped, Ordering::Relaxed);
    }

    /// The bytes a restore writes and the files it restores, as far as known: what its batches
    /// planned, or what the snapshot records (less what is not written) when that is more. The
    /// bytes are `None` while neither is known.
    pub fn restore_totals(&self) -> (Option<u64>, u64) {
        let expected =
            Self::get(&self.bytes_expected).saturating_sub(Self::get(&self.bytes_skipped));
        let bytes = Self::get(&self.bytes_total).max(expected);
        let files = Self::get(&self.files_total).max(Self::get(&self.files_expected));
        (Some(bytes).filter(|&bytes| bytes > 0), files)
    }
}
