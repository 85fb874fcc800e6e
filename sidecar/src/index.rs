//! The in-memory index: where every blob of the repository is, merged from all index objects.

use crate::format::index::{IndexFile, IndexedBlob};
use crate::ids::{BlobId, BlobKind, ObjectId, PackId};
use std::collections::{HashMap, HashSet};

/// Where one blob is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobLocation {
    pub pack: PackId,
    pub kind: BlobKind,
    pub offset: u32,
    pub length: u32,
    pub raw_length: u32,
}

/// Compact per-blob entry: packs are numbered so each blob costs a few dozen bytes.
#[derive(Debug, Clone, Copy)]
struct Entry {
    pack_number: u32,
    kind: BlobKind,
    offset: u32,
    length: u32,
    raw_length: u32,
}

#[derive(Debug, Default)]
pub struct Index {
    packs: Vec<PackId>,
    pack_numbers: HashMap<PackId, u32>,
    blobs: HashMap<BlobId, Entry>,
    /// The index objects this was loaded from.
    pub objects: Vec<ObjectId>,
    /// Index objects that could not be read (damaged) and were left out: their blobs are unknown
    /// here, so a backup stores them again instead of trusting only their word.
    pub skipped: Vec<ObjectId>,
}

impl Index {
    /// Adds every blob of an index object (the first location seen for a blob wins).
    pub fn add_file(&mut self, object: Option<ObjectId>, file: &IndexFile) {
        for pack in &file.packs {
            for blob in &pack.blobs {
                self.add_blob(pack.id, blob);
            }
        }
        if let Some(object) = object {
            self.objects.push(object);
        }
    }

    pub fn add_blob(&mut self, pack: PackId, blob: &IndexedBlob) {
        let next_number = self.packs.len() as u32;
        let pack_number = *self.pack_numbers.entry(pack).or_insert_with(|| {
            self.packs.push(pack);
            next_number
        });
        self.blobs.entry(blob.id).or_insert(Entry {
            pack_number,
            kind: blob.kind,
            offset: blob.offset,
            length: blob.length,
            raw_length: blob.raw_length,
        });
    }

    pub fn get(&self, id: &BlobId) -> Option<BlobLocation> {
        self.blobs.get(id).map(|entry| BlobLocation {
            pack: self.packs[entry.pack_number as usize],
            kind: entry.kind,
            offset: entry.offset,
            length: entry.length,
            raw_length: entry.raw_length,
        })
    }

    pub fn contains(&self, id: &BlobId) -> bool {
        self.blobs.contains_key(id)
    }

    pub fn blob_count(&self) -> usize {
        self.blobs.len()
    }

    /// Every blob id, for seeding a backup's deduplication set.
    pub fn blob_ids(&self) -> HashSet<BlobId> {
        self.blobs.keys().copied().collect()
    }

    pub fn packs(&self) -> &[PackId] {
        &self.packs
    }
}
