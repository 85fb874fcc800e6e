//! An open repository: its backend, its keys and settings; with its index loaded, the blobs.
//!
//! The two stages are two types: [`Repository`] can list and read objects, [`IndexedRepository`]
//! (after [`Repository::load_index`]) can also read and add blobs, so a backup or restore cannot
//! start without the index.

use crate::backend::{BackendError, ObjectKind, SharedBackend};
use crate::chunker::Chunker;
use crate::compress;
use crate::crypto::{blob_associated_data, KdfParams, MasterKey, RepositoryKeys};
use crate::error::{Error, Result};
use crate::format::config::RepositoryParams;
use crate::format::index::IndexFile;
use crate::format::key::KeyFile;
use crate::format::lock::LockTimings;
use crate::format::snapshot::Snapshot;
use crate::format::tree::Tree;
use crate::format::{open_object, seal_object};
use crate::ids::{BlobId, BlobKind, ObjectId, SnapshotId};
use crate::index::{Index, IndexBuilder};
use crate::key_search::verify_name;
use bytes::Bytes;
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::ops::Deref;
use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::time::Duration;

/// How many metadata objects are fetched at once.
const METADATA_READ_CONCURRENCY: usize = 8;

/// A repository whose keys are open.
#[derive(Debug, Clone)]
pub struct Repository {
    backend: SharedBackend,
    keys: RepositoryKeys,
    params: RepositoryParams,
    /// The key object that opened the repository.
    key_id: ObjectId,
    /// How long taking a lock waits for other holders to release theirs.
    lock_wait: Duration,
    /// How this process keeps its locks fresh.
    lock_timings: LockTimings,
    /// Whether reading commands take a shared lock (off with `--no-lock`).
    locks_reads: bool,
}

impl Repository {
    /// Creates a new repository: folders, a key wrapping a fresh master key, then the config.
    pub async fn init(
        backend: SharedBackend,
        password: &[u8],
        kdf: KdfParams,
    ) -> Result<Repository> {
        if backend.stat(ObjectKind::Config, "config").await?.is_some() {
            return Err(BackendError::AlreadyExists {
                location: backend.location(),
            }
            .into());
        }
        backend.create().await?;
        let master = MasterKey::generate();
        let keys = master.derive();
        let key =
            KeyFile::wrap(&master, password, kdf).map_err(crate::format::FormatError::from)?;
        let key_bytes = key.to_bytes();
        let key_id = ObjectId::of_bytes(&key_bytes);
        backend
            .write(ObjectKind::Keys, &key_id.to_hex(), Bytes::from(key_bytes))
            .await?;
        let params = RepositoryParams::new(hex::encode(crate::crypto::random_bytes::<32>()));
        // The config comes last: a repository without one is not a repository yet.
        backend
            .write(
                ObjectKind::Config,
                "config",
                Bytes::from(params.to_config_bytes(&keys.sealer)),
            )
            .await?;
        Ok(Repository {
            backend,
            keys,
            params,
            key_id,
            lock_wait: Duration::ZERO,
            lock_timings: LockTimings::default(),
            locks_reads: true,
        })
    }

    /// Opens a repository with its password, trying its key objects within the limits of
    /// [`crate::key_search`].
    pub async fn open(backend: SharedBackend, password: &[u8]) -> Result<Repository> {
        Repository::open_with_key_hint(backend, password, None).await
    }

    /// Opens a repository with its password, trying first the key object whose id starts with
    /// `key_hint` (as `key list` shows it), then the others within the limits of
    /// [`crate::key_search`].
    pub async fn open_with_key_hint(
        backend: SharedBackend,
        password: &[u8],
        key_hint: Option<&str>,
    ) -> Result<Repository> {
        let unlocked = crate::key_search::unlock(&backend, password, key_hint).await?;
        Ok(Repository {
            backend,
            keys: unlocked.keys,
            params: unlocked.params,
            key_id: unlocked.key_id,
            lock_wait: Duration::ZERO,
            lock_timings: LockTimings::default(),
            locks_reads: true,
        })
    }

    pub fn backend(&self) -> &SharedBackend {
        &self.backend
    }

    pub fn keys(&self) -> &RepositoryKeys {
        &self.keys
    }

    pub fn params(&self) -> &RepositoryParams {
        &self.params
    }

    pub fn key_id(&self) -> ObjectId {
        self.key_id
    }

    /// Makes taking a lock wait up to `wait` for other holders (none by default: fail at once).
    pub fn with_lock_wait(mut self, wait: Duration) -> Repository {
        self.lock_wait = wait;
        self
    }

    /// How long taking a lock waits for other holders to release theirs.
    pub fn lock_wait(&self) -> Duration {
        self.lock_wait
    }

    /// Makes reading commands go without a lock (`--no-lock`): for a repository no prune runs on
    /// meanwhile, or one that cannot be written.
    pub fn without_read_locks(mut self) -> Repository {
        self.locks_reads = false;
        self
    }

    /// Whether reading commands take a shared lock.
    pub fn locks_reads(&self) -> bool {
        self.locks_reads
    }

    /// Keeps this process's locks fresh on other timings (tests shorten them).
    pub fn with_lock_timings(mut self, timings: LockTimings) -> Repository {
        self.lock_timings = timings;
        self
    }

    /// How this process keeps its locks fresh.
    pub fn lock_timings(&self) -> LockTimings {
        self.lock_timings
    }

    /// The chunker with this repository's parameters and secret seed.
    pub fn chunker(&self) -> Chunker {
        Chunker::new(self.params.chunker, self.keys.chunker_seed)
    }

    /// Seals and stores a metadata object; its name is the SHA-256 of the stored bytes.
    pub async fn write_object<T: Serialize>(
        &self,
        kind: ObjectKind,
        value: &T,
    ) -> Result<ObjectId> {
        let stored = seal_object(&self.keys.sealer, kind, value);
        let id = ObjectId::of_bytes(&stored);
        self.backend
            .write(kind, &id.to_hex(), Bytes::from(stored))
            .await?;
        Ok(id)
    }

    /// Reads, verifies and opens a metadata object. The checking and decoding run on a blocking
    /// thread: an index object takes milliseconds to decode, and those read at once (see
    /// [`Repository::for_each_object`]) are then decoded at once, one a core.
    pub async fn read_object<T: DeserializeOwned + Send + 'static>(
        &self,
        kind: ObjectKind,
        id: &ObjectId,
    ) -> Result<T> {
        let name = id.to_hex();
        let stored = self.backend.read(kind, &name).await?;
        let sealer = self.keys.sealer.clone();
        tokio::task::spawn_blocking(move || {
            let what = format!("{kind}/{name}");
            verify_name(&name, &stored, &what)?;
            Ok(open_object(&sealer, kind, &stored, &what)?)
        })
        .await
        .map_err(|error| Error::Interrupted(error.to_string()))?
    }

    /// The ids of all objects of a kind.
    /// Stores a snapshot: the object that makes a backup visible, written last.
    pub async fn write_snapshot(&self, snapshot: &Snapshot) -> Result<SnapshotId> {
        let id = self.write_object(ObjectKind::Snapshots, snapshot).await?;
        Ok(SnapshotId::from(id))
    }

    /// Reads and opens one snapshot.
    pub async fn read_snapshot(&self, id: SnapshotId) -> Result<Snapshot> {
        self.read_object(ObjectKind::Snapshots, &ObjectId::from(id))
            .await
    }

    pub async fn list_ids(&self, kind: ObjectKind) -> Result<Vec<ObjectId>> {
        let infos = self.backend.list(kind).await?;
        Ok(infos
            .into_iter()
            .filter_map(|info| info.name.parse().ok())
            .collect())
    }

    /// Every readable snapshot, oldest first. A damaged snapshot object is skipped with a warning
    /// naming it (see [`Repository::snapshots_and_damage`]).
    pub async fn snapshots(&self) -> Result<Vec<(SnapshotId, Snapshot)>> {
        let (mut snapshots, damaged) = self.snapshots_and_damage().await?;
        warn_skipped(&damaged);
        snapshots.sort_by(|a, b| a.1.time.cmp(&b.1.time).then(a.0.cmp(&b.0)));
        Ok(snapshots)
    }

    /// Every readable snapshot (in no particular order), and the snapshot objects that failed
    /// authentication or decoding.
    pub async fn snapshots_and_damage(
        &self,
    ) -> Result<(Vec<(SnapshotId, Snapshot)>, Vec<DamagedObject>)> {
        let (readable, damaged) = self.read_every(ObjectKind::Snapshots).await?;
        let readable = readable
            .into_iter()
            .map(|(id, snapshot)| (SnapshotId::from(id), snapshot))
            .collect();
        Ok((readable, damaged))
    }

    /// Reads every object of `kind`. One that fails authentication or decoding (junk posted with
    /// append-only credentials, a torn object) is set aside as damaged; a storage error ends the
    /// read, except an object deleted between the listing and its read, which is left out.
    async fn read_every<T: DeserializeOwned + Send + 'static>(
        &self,
        kind: ObjectKind,
    ) -> Result<(Vec<(ObjectId, T)>, Vec<DamagedObject>)> {
        let mut readable = Vec::new();
        let damaged = self
            .for_each_object(kind, |id, value| readable.push((id, value)))
            .await?;
        Ok((readable, damaged))
    }

    /// Like [`Repository::read_every`], but hands each object to `each` as soon as it is read,
    /// so that no more than a few are held at once (index objects of a large repository).
    /// Returns the damaged objects.
    pub async fn for_each_object<T: DeserializeOwned + Send + 'static>(
        &self,
        kind: ObjectKind,
        mut each: impl FnMut(ObjectId, T),
    ) -> Result<Vec<DamagedObject>> {
        let ids = self.list_ids(kind).await?;
        let mut outcomes = futures::stream::iter(ids)
            .map(|id| async move { (id, self.read_object::<T>(kind, &id).await) })
            .buffer_unordered(METADATA_READ_CONCURRENCY);
        let mut damaged = Vec::new();
        while let Some((id, outcome)) = outcomes.next().await {
            match outcome {
                Ok(value) => each(id, value),
                Err(Error::Backend(BackendError::NotFound { .. })) => {}
                Err(error @ (Error::Corrupt { .. } | Error::Format(_))) => {
                    damaged.push(DamagedObject {
                        kind,
                        id,
                        reason: error.to_string(),
                    })
                }
                Err(error) => return Err(error),
            }
        }
        damaged.sort_by_key(|object| object.id);
        Ok(damaged)
    }

    /// The damaged index and snapshot objects: what `check` reports and `prune` refuses to run
    /// over (a skipped snapshot's data would look unused).
    pub async fn damaged_objects(&self) -> Result<Vec<DamagedObject>> {
        let (_, mut damaged) = self.snapshots_and_damage().await?;
        let damaged_indexes = self
            .for_each_object::<IndexFile>(ObjectKind::Index, |_, _| {})
            .await?;
        damaged.extend(damaged_indexes);
        Ok(damaged)
    }

    /// The snapshot named by `spec`: `latest`, or a unique prefix of its id.
    pub async fn find_snapshot(&self, spec: &str) -> Result<(SnapshotId, Snapshot)> {
        self.find_snapshot_where(spec, &SnapshotFilter::default())
            .await
    }

    /// Like [`Repository::find_snapshot`]; `latest` means the newest that passes `filter`.
    pub async fn find_snapshot_where(
        &self,
        spec: &str,
        filter: &SnapshotFilter,
    ) -> Result<(SnapshotId, Snapshot)> {
        if spec == "latest" {
            let (mut snapshots, damaged) = self.snapshots_and_damage().await?;
            warn_skipped(&damaged);
            snapshots.sort_by(|a, b| a.1.time.cmp(&b.1.time).then(a.0.cmp(&b.0)));
            let held = hosts_held(&snapshots);
            let newest = snapshots.into_iter().rev().find(|(_, s)| filter.matches(s));
            return match (newest, damaged.as_slice()) {
                (Some(newest), _) => Ok(newest),
                (None, []) if filter.host.is_some() => Err(Error::NoSnapshotOfHost {
                    wanted: filter.describe(spec),
                    held,
                }),
                (None, []) => Err(Error::SnapshotNotFound(filter.describe(spec))),
                // The one sought may be among those that cannot be read: say so, naming them.
                (None, damaged) => Err(Error::Corrupt {
                    what: damaged
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                    reason: format!(
                        "no readable snapshot matches {}, and these snapshot objects cannot be \
                         read ({})",
                        filter.describe(spec),
                        damaged[0].reason
                    ),
                }),
            };
        }
        let ids = self.list_ids(ObjectKind::Snapshots).await?;
        let matches: Vec<ObjectId> = ids
            .into_iter()
            .filter(|id| id.to_hex().starts_with(spec))
            .collect();
        match matches.as_slice() {
            [] => Err(Error::SnapshotNotFound(spec.into())),
            [id] => {
                let id = SnapshotId::from(*id);
                Ok((id, self.read_snapshot(id).await?))
            }
            _ => Err(Error::AmbiguousSnapshot {
                prefix: spec.into(),
                count: matches.len(),
            }),
        }
    }

    /// Loads every index object: the repository can then read and add blobs.
    pub async fn load_index(self) -> Result<IndexedRepository> {
        let index = self.read_index().await?;
        Ok(IndexedRepository {
            repo: self,
            index: Arc::new(RwLock::new(index)),
        })
    }

    /// Every index object in force (not superseded by another), with its id. A damaged index
    /// object is skipped with a warning naming it: its blobs are then unknown, so a backup stores
    /// them again rather than trust what only that object vouches for.
    pub async fn index_files(&self) -> Result<Vec<(ObjectId, IndexFile)>> {
        let (files, damaged) = self.index_files_and_damage().await?;
        warn_skipped(&damaged);
        Ok(files)
    }

    /// [`Repository::index_files`], and the index objects skipped as damaged.
    async fn index_files_and_damage(
        &self,
    ) -> Result<(Vec<(ObjectId, IndexFile)>, Vec<DamagedObject>)> {
        let (files, damaged) = self.read_every::<IndexFile>(ObjectKind::Index).await?;
        let superseded: std::collections::HashSet<ObjectId> = files
            .iter()
            .flat_map(|(_, file)| file.supersedes.iter().copied())
            .collect();
        let in_force = files
            .into_iter()
            .filter(|(id, _)| !superseded.contains(id))
            .collect();
        Ok((in_force, damaged))
    }

    /// The index, built as each index object is read: only a few are held decoded at once.
    async fn read_index(&self) -> Result<Index> {
        let mut builder = IndexBuilder::default();
        let damaged = self
            .for_each_object::<IndexFile>(ObjectKind::Index, |id, file| builder.add_file(id, &file))
            .await?;
        warn_skipped(&damaged);
        Ok(builder.finish(damaged.into_iter().map(|object| object.id).collect()))
    }
}

/// A stored object that failed authentication or decoding, which readers skip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedObject {
    pub kind: ObjectKind,
    pub id: ObjectId,
    /// Why it cannot be read.
    pub reason: String,
}

impl std::fmt::Display for DamagedObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.kind, self.id.to_hex())
    }
}

fn warn_skipped(damaged: &[DamagedObject]) {
    for object in damaged {
        tracing::warn!(object = %object, reason = %object.reason, "skipping a damaged {} object {object}: {}", object.kind, object.reason);
    }
}

/// Which snapshots `latest` may pick.
#[derive(Debug, Clone, Default)]
pub struct SnapshotFilter {
    /// Only snapshots of this host (the operator's `NAMESPACE/PLAN`).
    pub host: Option<String>,
    /// Only snapshots taken before this time.
    pub before: Option<chrono::DateTime<chrono::Utc>>,
}

impl SnapshotFilter {
    fn matches(&self, snapshot: &Snapshot) -> bool {
        let host_ok = self
            .host
            .as_ref()
            .is_none_or(|host| *host == snapshot.hostname);
        let time_ok = self.before.is_none_or(|before| {
            chrono::DateTime::parse_from_rfc3339(&snapshot.time).is_ok_and(|time| time < before)
        });
        host_ok && time_ok
    }

    fn describe(&self, spec: &str) -> String {
        let mut text = spec.to_owned();
        if let Some(host) = &self.host {
            text.push_str(&format!(" of host {host}"));
        }
        if let Some(before) = &self.before {
            text.push_str(&format!(" taken before {}", before.to_rfc3339()));
        }
        text
    }
}

/// Each host of `snapshots` and how many snapshots it has, by host name.
pub fn hosts_held(snapshots: &[(SnapshotId, Snapshot)]) -> Vec<(String, usize)> {
    let mut held = std::collections::BTreeMap::<&str, usize>::new();
    for (_, snapshot) in snapshots {
        *held.entry(snapshot.hostname.as_str()).or_default() += 1;
    }
    held.into_iter()
        .map(|(host, n)| (host.to_owned(), n))
        .collect()
}

/// A repository with its index loaded. Cloning is cheap: clones share one index, which backups
/// extend as their packs are indexed.
#[derive(Debug, Clone)]
pub struct IndexedRepository {
    repo: Repository,
    index: Arc<RwLock<Index>>,
}

impl Deref for IndexedRepository {
    type Target = Repository;
    fn deref(&self) -> &Repository {
        &self.repo
    }
}

impl IndexedRepository {
    /// The index; do not hold the guard across an `.await`.
    pub fn index(&self) -> RwLockReadGuard<'_, Index> {
        self.index
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Reloads the index when its objects changed since it was loaded (a prune ran meanwhile).
    /// A backup calls this once it holds its lock, so it never trusts blobs a prune removed.
    pub async fn refresh_index(&self) -> Result<()> {
        let mut listed = self.list_ids(ObjectKind::Index).await?;
        let mut loaded = {
            let index = self.index();
            [index.objects.as_slice(), index.skipped.as_slice()].concat()
        };
        listed.sort();
        loaded.sort();
        if listed != loaded {
            let fresh = self.read_index().await?;
            *self
                .index
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = fresh;
        }
        Ok(())
    }

    /// Records an index object this process just stored.
    pub fn add_index_file(&self, id: ObjectId, file: &IndexFile) {
        self.index
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .add_file(Some(id), file);
    }

    /// Reads one blob's plaintext, authenticated and checked against its id.
    pub async fn read_blob(&self, id: &BlobId, context: &str) -> Result<Vec<u8>> {
        let location = self.index().get(id).ok_or_else(|| Error::BlobMissing {
            id: *id,
            context: self.missing_blob_context(context),
        })?;
        let sealed = self
            .backend()
            .read_range(
                ObjectKind::Data,
                &location.pack.to_hex(),
                location.offset as u64,
                location.length as u64,
            )
            .await?;
        let keys = self.keys().clone();
        let id = *id;
        let pack = location.pack;
        tokio::task::spawn_blocking(move || {
            open_blob(
                &keys,
                location.kind,
                &id,
                &sealed,
                location.raw_length,
                &format!("blob {id} in pack {pack}"),
            )
        })
        .await
        .map_err(|e| Error::Interrupted(e.to_string()))?
    }

    /// What to say of a blob the index lacks: where it was wanted, and the index objects skipped
    /// as damaged, which may be the ones that listed it.
    pub(crate) fn missing_blob_context(&self, context: &str) -> String {
        let index = self.index();
        if index.skipped.is_empty() {
            return context.to_owned();
        }
        let skipped: Vec<String> = index
            .skipped
            .iter()
            .map(|id| format!("index/{}", id.to_hex()))
            .collect();
        format!(
            "{context}; the damaged index objects {} were skipped and may have listed it",
            skipped.join(", ")
        )
    }

    /// Reads and parses a tree blob.
    pub async fn read_tree(&self, id: &BlobId, context: &str) -> Result<Tree> {
        let bytes = self.read_blob(id, context).await?;
        Tree::from_bytes(&bytes).map_err(|e| Error::Corrupt {
            what: format!("tree {id}"),
            reason: e.to_string(),
        })
    }
}

/// Opens a sealed blob: authenticates it against its kind and id, decompresses it, and checks
/// that its plaintext really has that id.
pub fn open_blob(
    keys: &RepositoryKeys,
    kind: BlobKind,
    id: &BlobId,
    sealed: &[u8],
    raw_length: u32,
    what: &str,
) -> Result<Vec<u8>> {
    let encoded = keys
        .sealer
        .open(sealed, &blob_associated_data(kind, id), what)
        .map_err(crate::format::FormatError::from)?;
    let plaintext = compress::decode(encoded, raw_length as usize).map_err(|e| Error::Corrupt {
        what: what.to_owned(),
        reason: e.to_string(),
    })?;
    if keys.blob_id(kind, &plaintext) != *id {
        return Err(Error::Corrupt {
            what: what.to_owned(),
            reason: "content does not match its id".into(),
        });
    }
    Ok(plaintext)
}
