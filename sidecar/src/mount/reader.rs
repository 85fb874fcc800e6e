//! The repository side of the mount: trees and file content read lazily through the engine's own
//! blob reading (authenticated, decompressed, checked against their ids), each kept in a cache of
//! bounded size.
//!
//! Holes: a run of zeros in a file is cut by the chunker into blobs of one length, all the same
//! blob; a file's blobs that are that blob are its holes (for `SEEK_HOLE`, `SEEK_DATA` and
//! `st_blocks`), known from the index alone and read as zeros without reading the repository.
//! Zeros in a blob that also holds data are data.

use super::cache::ByteBoundedCache;
use crate::error::{Error, Result};
use crate::format::tree::Tree;
use crate::ids::{BlobId, BlobKind};
use crate::repository::IndexedRepository;
use std::sync::{Arc, Mutex};

/// Trees take more room parsed than stored: the estimate of a parsed tree's size.
const TREE_SIZE_FACTOR: u64 = 3;

/// Reads trees and content blobs, through caches of bounded size.
pub(crate) struct SnapshotReader {
    repo: IndexedRepository,
    trees: Mutex<ByteBoundedCache<BlobId, Tree>>,
    blobs: Mutex<ByteBoundedCache<BlobId, Vec<u8>>>,
    /// The blob every run of zeros is cut into, and its length.
    zero_blob: (BlobId, u32),
}

/// Where each content blob of a file ends in it: the file's layout, from the index alone.
#[derive(Debug, Clone)]
pub(crate) struct FileLayout {
    pub content: Vec<BlobId>,
    /// `ends[i]`: the offset just after blob `i`.
    pub ends: Vec<u64>,
    /// `holes[i]`: blob `i` is the zero blob, a hole.
    pub holes: Vec<bool>,
}

/// Where a `SEEK_DATA` or `SEEK_HOLE` looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SeekTo {
    Data,
    Hole,
}

impl FileLayout {
    pub fn size(&self) -> u64 {
        self.ends.last().copied().unwrap_or(0)
    }

    fn start(&self, blob: usize) -> u64 {
        if blob == 0 {
            0
        } else {
            self.ends[blob - 1]
        }
    }

    /// Bytes outside holes.
    pub fn data_bytes(&self) -> u64 {
        (0..self.ends.len())
            .filter(|&blob| !self.holes[blob])
            .map(|blob| self.ends[blob] - self.start(blob))
            .sum()
    }

    /// The first offset from `offset` on that is data (or a hole, where the end of the file
    /// counts as one), as `lseek` answers; `None` (`ENXIO`) at or past the end, or when no data
    /// follows.
    pub fn seek(&self, offset: u64, to: SeekTo) -> Option<u64> {
        if offset >= self.size() {
            return None;
        }
        let first = self.ends.partition_point(|&end| end <= offset);
        let wanted_hole = to == SeekTo::Hole;
        match (first..self.ends.len()).find(|&blob| self.holes[blob] == wanted_hole) {
            Some(blob) => Some(self.start(blob).max(offset)),
            None if wanted_hole => Some(self.size()),
            None => None,
        }
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
        let zero_blob = zero_blob(&repo);
        SnapshotReader {
            zero_blob,
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
        let mut holes = Vec::with_capacity(content.len());
        for id in content {
            let location = index.get(id).ok_or_else(|| Error::BlobMissing {
                id: *id,
                context: "a file of the mount".into(),
            })?;
            end += u64::from(location.raw_length);
            ends.push(end);
            holes.push((*id, location.raw_length) == self.zero_blob);
        }
        Ok(FileLayout {
            content: content.to_vec(),
            ends,
            holes,
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
            let blob_start = file.start(index);
            let to = (end.min(file.ends[index]) - blob_start) as usize;
            let from = (position - blob_start) as usize;
            if file.holes[index] {
                out.resize(out.len() + (to - from), 0);
                position = blob_start + to as u64;
                index += 1;
                continue;
            }
            let plaintext = self.blob(&file.content[index]).await?;
            if plaintext.len() as u64 != file.ends[index] - blob_start {
                return Err(Error::Corrupt {
                    what: format!("blob {}", file.content[index]),
                    reason: "its plaintext is not as long as the index says".into(),
                });
            }
            out.extend_from_slice(&plaintext[from..to]);
            position = blob_start + to as u64;
            index += 1;
        }
        Ok(out)
    }
}

/// The id of the blob a long run of zeros is cut into: the chunker's first cut of zeros.
fn zero_blob(repo: &IndexedRepository) -> (BlobId, u32) {
    let chunker = repo.chunker();
    let zeros = vec![0u8; chunker.params().max_bytes as usize * 2];
    let length = chunker.cut(&zeros);
    let id = repo.keys().blob_id(BlobKind::Data, &zeros[..length]);
    (id, length as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A layout of blobs of these lengths, `true` for a hole.
    fn layout_of(blobs: &[(u64, bool)]) -> FileLayout {
        let mut end = 0;
        FileLayout {
            content: blobs.iter().map(|_| BlobId::from_bytes([0; 32])).collect(),
            ends: blobs
                .iter()
                .map(|(length, _)| {
                    end += length;
                    end
                })
                .collect(),
            holes: blobs.iter().map(|(_, hole)| *hole).collect(),
        }
    }

    #[test]
    fn seeking_data_and_holes_answers_as_lseek_does() {
        // data 0..10, hole 10..30, data 30..35, hole 35..45
        let file = layout_of(&[(10, false), (20, true), (5, false), (10, true)]);
        assert_eq!(file.size(), 45);
        assert_eq!(file.data_bytes(), 15);
        assert_eq!(file.seek(0, SeekTo::Data), Some(0));
        assert_eq!(file.seek(4, SeekTo::Data), Some(4));
        assert_eq!(file.seek(10, SeekTo::Data), Some(30));
        assert_eq!(file.seek(29, SeekTo::Data), Some(30));
        assert_eq!(file.seek(36, SeekTo::Data), None, "only a hole follows");
        assert_eq!(file.seek(0, SeekTo::Hole), Some(10));
        assert_eq!(file.seek(12, SeekTo::Hole), Some(12));
        assert_eq!(file.seek(30, SeekTo::Hole), Some(35));
        assert_eq!(file.seek(45, SeekTo::Hole), None, "at the end");
        assert_eq!(file.seek(45, SeekTo::Data), None);
        // Without holes: the end of the file is the only hole.
        let dense = layout_of(&[(8, false), (8, false)]);
        assert_eq!(dense.seek(3, SeekTo::Hole), Some(16));
        assert_eq!(dense.data_bytes(), 16);
        // An empty file has neither.
        let empty = layout_of(&[]);
        assert_eq!(empty.seek(0, SeekTo::Data), None);
        assert_eq!(empty.seek(0, SeekTo::Hole), None);
    }

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
