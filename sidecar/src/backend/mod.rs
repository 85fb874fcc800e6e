//! Where a repository's objects live: a trait with one implementation per kind of storage.
//!
//! Every backend stores the objects of the restic REST protocol's types under the same names, so a
//! repository can be copied between a local folder and any restic REST server unchanged.

mod error;
pub mod limit;
pub mod local;
pub mod memory;
pub mod rest;
pub mod retry;

use async_trait::async_trait;
use bytes::Bytes;
use std::fmt;
use std::sync::Arc;

pub use error::{BackendError, BackendResult};

/// The object types of the restic REST protocol; each is a folder of the repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKind {
    /// The single `config` object.
    Config,
    Keys,
    Locks,
    Snapshots,
    Index,
    Data,
}

impl ObjectKind {
    /// The folder (and REST path segment) of this type.
    pub fn dir_name(self) -> &'static str {
        match self {
            ObjectKind::Config => "config",
            ObjectKind::Keys => "keys",
            ObjectKind::Locks => "locks",
            ObjectKind::Snapshots => "snapshots",
            ObjectKind::Index => "index",
            ObjectKind::Data => "data",
        }
    }

    /// The kinds that are folders of named objects (all but `config`).
    pub const LISTABLE: [ObjectKind; 5] = [
        ObjectKind::Keys,
        ObjectKind::Locks,
        ObjectKind::Snapshots,
        ObjectKind::Index,
        ObjectKind::Data,
    ];
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.dir_name())
    }
}

/// One object of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    pub name: String,
    pub size_bytes: u64,
}

/// Storage for a repository's objects. Names are lowercase hex; `config` has the name "config".
///
/// Implementations must make `write` atomic: a reader sees the whole object or none of it.
#[async_trait]
pub trait Backend: Send + Sync + fmt::Debug {
    /// Where the repository is, for messages (never contains credentials).
    fn location(&self) -> String;

    /// Creates an empty repository (its folders). Fails if a config object already exists.
    async fn create(&self) -> BackendResult<()>;

    /// All objects of one kind, with their sizes.
    async fn list(&self, kind: ObjectKind) -> BackendResult<Vec<ObjectInfo>>;

    /// The size of an object, or `None` when it does not exist.
    async fn stat(&self, kind: ObjectKind, name: &str) -> BackendResult<Option<u64>>;

    /// A whole object.
    async fn read(&self, kind: ObjectKind, name: &str) -> BackendResult<Bytes>;

    /// `length` bytes of an object starting at `offset`, into `buffer`, whose allocation is
    /// reused: the returned vector holds exactly the `length` bytes. Readers that fetch many
    /// ranges (a restore) keep a few buffers this way instead of allocating one per fetch.
    async fn read_range_into(
        &self,
        kind: ObjectKind,
        name: &str,
        offset: u64,
        length: u64,
        buffer: Vec<u8>,
    ) -> BackendResult<Vec<u8>>;

    /// The same range as [`Backend::read_range_into`], in a fresh allocation.
    async fn read_range(
        &self,
        kind: ObjectKind,
        name: &str,
        offset: u64,
        length: u64,
    ) -> BackendResult<Bytes> {
        self.read_range_into(kind, name, offset, length, Vec::new())
            .await
            .map(Bytes::from)
    }

    /// Stores an object. Writing an object that already exists with the same bytes succeeds.
    async fn write(&self, kind: ObjectKind, name: &str, data: Bytes) -> BackendResult<()>;

    /// Removes an object; removing one that does not exist succeeds.
    async fn delete(&self, kind: ObjectKind, name: &str) -> BackendResult<()>;
}

/// A shared handle to a backend.
pub type SharedBackend = Arc<dyn Backend>;

/// `backend` wearing the layers a remote one needs, outermost first: retries and idempotent
/// writes ([`retry`]), then at most `connections` calls in flight ([`limit`]). A retry's pause
/// holds no slot, so a failing call does not keep others waiting.
pub fn layered(
    backend: SharedBackend,
    retry: retry::RetryPolicy,
    connections: usize,
) -> SharedBackend {
    let limited: SharedBackend = Arc::new(limit::LimitedBackend::new(backend, connections));
    Arc::new(retry::RetryingBackend::new(limited, retry))
}
