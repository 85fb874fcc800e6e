//! Sizes of snapshots, as restic's `stats` counts them: what a restore would write
//! (`restore-size`), or the stored blobs they reference (`raw-data`).

use crate::error::Result;
use crate::format::tree::NodeKind;
use crate::ids::BlobId;
use crate::inspect::walk::{self, Descend};
use crate::repository::IndexedRepository;
use std::collections::HashSet;

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
    let index = repo.index();
    let mut raw = RawData::default();
    for blob in &blobs {
        let location = index.get(blob).ok_or_else(|| crate::Error::BlobMissing {
            id: *blob,
            context: "referenced by a snapshot counted".into(),
        })?;
        raw.blobs += 1;
        raw.stored_bytes += u64::from(location.length);
        raw.uncompressed_bytes += u64::from(location.raw_length);
    }
    Ok(raw)
}
