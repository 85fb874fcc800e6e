//! Sizes of snapshots, as restic's `stats` counts them: what a restore would write
//! (`restore-size`), the stored blobs they reference (`raw-data`), the files of distinct content
//! (`files-by-contents`) or the blobs of each file (`blobs-per-file`).

use crate::crypto::SEAL_OVERHEAD_BYTES;
use crate::error::Result;
use crate::format::tree::NodeKind;
use crate::ids::BlobId;
use crate::inspect::walk::{self, Descend};
use crate::repository::IndexedRepository;
use std::collections::{HashMap, HashSet};

/// What a restore of the snapshots would write, counted as restic counts it: every entry (folders
/// and links too) is one in `entries`, and a file's size counts once per inode of a snapshot
/// (hard links add nothing; each snapshot counts its own).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreSize {
    pub entries: u64,
    pub bytes: u64,
}

/// The blobs the snapshots reference, each once, as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawData {
    /// Data and tree blobs.
    pub blobs: u64,
    /// Their bytes as stored: compressed and sealed.
    pub stored_bytes: u64,
    /// Their bytes before compression.
    pub uncompressed_bytes: u64,
    /// The blobs stored compressed: their bytes as stored, and before compression.
    pub compressed_stored_bytes: u64,
    pub compressed_uncompressed_bytes: u64,
}

/// Files counted by content (`files-by-contents`) or by their blobs (`blobs-per-file`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ByContents {
    pub files: u64,
    pub bytes: u64,
    /// `blobs-per-file` only: each blob once per path.
    pub blobs: u64,
}

/// How [`by_contents`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentsMode {
    /// Each distinct content (list of blobs) once: its size, one file.
    FilesByContents,
    /// The blobs of each distinct content, each once per path: their plaintext sizes and count,
    /// and the paths that have any.
    BlobsPerFile,
}

/// Counts the snapshots whose root trees are `roots` as restic 0.19's `files-by-contents` and
/// `blobs-per-file` modes do: every entry is keyed by its list of content blobs, and only the
/// first entry of each list counts. As in restic, entries without content (folders, links,
/// empty files) share one key, so the first of them counts as one file of its size in
/// `files-by-contents`, and a file of the same content at a second path adds nothing.
pub async fn by_contents(
    repo: &IndexedRepository,
    roots: &[BlobId],
    mode: ContentsMode,
) -> Result<ByContents> {
    let mut counted = ByContents::default();
    let mut contents_seen: HashSet<Vec<BlobId>> = HashSet::new();
    let mut blobs_of_path: HashMap<Vec<u8>, HashSet<BlobId>> = HashMap::new();
    for root in roots {
        walk::walk(repo, root, |path, node| -> Result<Descend> {
            let (size, content) = match &node.kind {
                NodeKind::File { size, content } => (*size, content.as_slice()),
                _ => (0, [].as_slice()),
            };
            if !contents_seen.insert(content.to_vec()) {
                return Ok(Descend::Into);
            }
            match mode {
                ContentsMode::FilesByContents => {
                    counted.files += 1;
                    counted.bytes += size;
                }
                ContentsMode::BlobsPerFile if !content.is_empty() => {
                    let blobs = blobs_of_path.entry(path.to_vec()).or_insert_with(|| {
                        counted.files += 1;
                        HashSet::new()
                    });
                    for blob in content {
                        if blobs.insert(*blob) {
                            counted.blobs += 1;
                            counted.bytes += u64::from(located(repo, blob)?.raw_length);
                        }
                    }
                }
                ContentsMode::BlobsPerFile => {}
            }
            Ok(Descend::Into)
        })
        .await?;
    }
    Ok(counted)
}

/// Where the index has `blob`; an error naming it when it has not.
fn located(repo: &IndexedRepository, blob: &BlobId) -> Result<crate::index::BlobLocation> {
    repo.index()
        .get(blob)
        .ok_or_else(|| crate::Error::BlobMissing {
            id: *blob,
            context: "referenced by a snapshot counted".into(),
        })
}

/// The restore size of the snapshots whose root trees are `roots`.
pub async fn restore_size(repo: &IndexedRepository, roots: &[BlobId]) -> Result<RestoreSize> {
    let mut size = RestoreSize::default();
    for root in roots {
        let mut inodes_seen: HashSet<(u64, u64)> = HashSet::new();
        walk::walk(repo, root, |_, node| -> Result<Descend> {
            size.entries += 1;
            if let NodeKind::File { size: bytes, .. } = node.kind {
                let inode = (node.meta.inode, node.meta.device);
                if node.meta.inode == 0 || inodes_seen.insert(inode) {
                    size.bytes += bytes;
                }
            }
            Ok(Descend::Into)
        })
        .await?;
    }
    Ok(size)
}

/// The blobs referenced by the snapshots whose root trees are `roots`, each counted once.
pub async fn raw_data(repo: &IndexedRepository, roots: &[BlobId]) -> Result<RawData> {
    let mut blobs: HashSet<BlobId> = roots.iter().copied().collect();
    for root in roots {
        walk::walk(repo, root, |_, node| -> Result<Descend> {
            match &node.kind {
                NodeKind::File { content, .. } => blobs.extend(content.iter().copied()),
                NodeKind::Dir { subtree } => {
                    blobs.insert(*subtree);
                }
                _ => {}
            }
            Ok(Descend::Into)
        })
        .await?;
    }
    let mut raw = RawData::default();
    for blob in &blobs {
        let location = located(repo, blob)?;
        raw.blobs += 1;
        raw.stored_bytes += u64::from(location.length);
        raw.uncompressed_bytes += u64::from(location.raw_length);
        // A blob stored as it is takes its plaintext, the codec byte and the seal: one that
        // takes less was compressed.
        let stored_plain = u64::from(location.raw_length) + 1 + SEAL_OVERHEAD_BYTES as u64;
        if u64::from(location.length) < stored_plain {
            raw.compressed_stored_bytes += u64::from(location.length);
            raw.compressed_uncompressed_bytes += u64::from(location.raw_length);
        }
    }
    Ok(raw)
}
