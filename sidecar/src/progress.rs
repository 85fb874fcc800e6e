//! Counters a long operation updates as it goes, for a progress bar or a log line.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct Progress {
    /// Files finished (backed up or restored).
    pub files: AtomicU64,
    /// Bytes of file content read (backup) or written (restore).
    pub bytes_processed: AtomicU64,
    /// Bytes sent to or fetched from the repository.
    pub bytes_transferred: AtomicU64,
    /// Total bytes expected, when known (restore).
    pub bytes_total: AtomicU64,
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
}
