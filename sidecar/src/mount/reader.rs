//! The repository side of the mount: trees and file content read lazily through the engine's own
//! blob reading (authenticated, decompressed, checked against their ids), each kept in a cache of
//! bounded size.

use super::cache::ByteBoundedCache;
use crate::error::{Error, Result};
use crate::format::tree::Tree;
use crate::ids::BlobId;
use crate::repository::IndexedRepository;
use std::sync::{Arc, Mutex};

/// Trees take more room parsed than stored: the estimate of a parsed tree's size.
const TREE_SIZE_FACTOR: u64 = 3;

/// Reads trees and content blobs, through caches of bounded size.
pub(crate) struct SnapshotReader {
    repo: IndexedRepository,
    trees: Mutex<ByteBoundedCache<BlobId, Tree>>,
    blobs: Mutex<ByteBoundedCache<BlobId, Vec<u8>>>,
}

/// Where each content blob of a file ends in it: the file's layout, from the index alone.
#[derive(Debug, Clone)]
pub(crate) struct FileLayout {
    pub content: Vec<BlobId>,
    /// `ends[i]`: the offset just after blob `i`.
    pub ends: Vec<u64>,
}

impl FileLayout {
    pub fn size(&self) -> u64 {
        self.ends.last().copied().unwrap_or(0)
    }
}

/// A name that stays in its folder: not empty, `.` or `..`, without `/` or NUL.
fn is_plain_name(name: &[u8]) -> bool {
    !(name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl SnapshotReader {
    pub fn new(repo: IndexedRepository, tree_cache_bytes: u64, blob_cache_bytes: u64) -> Self {
        SnapshotReader {
            repo,
            trees: Mutex::new(ByteBoundedCache::new(tree_cache_bytes)),
            blobs: Mutex::new(ByteBoundedCache::new(blob_cache_bytes)),
        }
    }

    /// The tree `id`, from the cache or the repository.
    pub async fn tree(&self, id: &BlobId) -> Result<Arc<Tree>> {
        if let Some(tree) = lock(&self.trees).get(id) {
            return Ok(tree);
        }
        let bytes = self.repo.read_blob(id, "a folder of the mount").await?;
        let tree = Tree::from_bytes(&bytes).map_err(|e| Error::Corrupt {
            what: format!("tree {id}"),
            reason: e.to_string(),
        })?;
        // A name that is not a plain name would lead a reader of the mount (`cp -a`, `rsync`)
        // out of the folder: the tree is refused as a restore refuses it.
        if let Some(node) = tree.nodes.iter().find(|node| !is_plain_name(&node.name)) {
            return Err(Error::Corrupt {
                what: format!("tree {id}"),
                reason: format!(
                    "invalid entry name {:?}",
                    String::from_utf8_lossy(&node.name)
                ),
            });
        }
        let tree = Arc::new(tree);
        lock(&self.trees).insert(*id, tree.clone(), bytes.len() as u64 * TREE_SIZE_FACTOR);
        Ok(tree)
    }

    /// The plaintext of the content blob `id`, from the cache or the repository.
    async fn blob(&self, id: &BlobId) -> Result<Arc<Vec<u8>>> {
        if let Some(blob) = lock(&self.blobs).get(id) {
            return Ok(blob);
        }
        let plaintext = Arc::new(self.repo.read_blob(id, "a file of the mount").await?);
        lock(&self.blobs).insert(*id, plaintext.clone(), plaintext.len() as u64);
        Ok(plaintext)
    }

    /// Where each blob of `content` lies in the file, from the sizes the index records.
    pub fn file_layout(&self, content: &[BlobId]) -> Result<FileLayout> {
        let index = self.repo.index();
        let mut end = 0u64;
        let mut ends = Vec::with_capacity(content.len());
        for id in content {
            let location = index.get(id).ok_or_else(|| Error::BlobMissing {
                id: *id,
                context: "a file of the mount".into(),
            })?;
            end += u64::from(location.raw_length);
            ends.push(end);
        }
        Ok(FileLayout {
            content: content.to_vec(),
            ends,
        })
    }

    /// Up to `size` bytes of the file from `offset` (fewer at its end), blob by blob.
    pub async fn read(&self, file: &FileLayout, offset: u64, size: usize) -> Result<Vec<u8>> {
        let end = file.size().min(offset.saturating_add(size as u64));
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        // The first blob that ends after `offset`.
        let mut index = file.ends.partition_point(|&blob_end| blob_end <= offset);
        let mut position = offset;
        while position < end && index < file.content.len() {
            let blob_start = if index == 0 { 0 } else { file.ends[index - 1] };
            let plaintext = self.blob(&file.content[index]).await?;
            if plaintext.len() as u64 != file.ends[index] - blob_start {
                return Err(Error::Corrupt {
                    what: format!("blob {}", file.content[index]),
                    reason: "its plaintext is not as long as the index says".into(),
                });
            }
            let from = (position - blob_start) as usize;
            let to = (end.min(file.ends[index]) - blob_start) as usize;
            out.extend_from_slice(&plaintext[from..to]);
            position = blob_start + to as u64;
            index += 1;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::is_plain_name;

    #[test]
    fn only_plain_names_are_shown() {
        assert!(is_plain_name(b"a.txt"));
        assert!(is_plain_name(b"..hidden"));
        assert!(is_plain_name(&[0xff, b'x']));
        for bad in [&b""[..], b".", b"..", b"a/b", b"../etc", b"a\0b"] {
            assert!(!is_plain_name(bad), "{bad:?}");
        }
    }
}
