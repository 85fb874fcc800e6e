//! The in-memory index: where every blob of the repository is, merged from all index objects.
//!
//! Every blob costs [`BYTES_PER_BLOB`] bytes: a fixed-size entry (its full id, pack number and
//! kind, offset, lengths) in one array sorted by id, searched by bisection; pack ids sit once in
//! a side table. Blobs added after loading (a backup's own packs) wait in a small hash map that is
//! merged into the array when it grows past a 32nd of it (sorted, then merged in place from the
//! back), so lookups stay cheap and the map stays small.

use crate::format::index::{IndexFile, IndexedBlob};
use crate::ids::{BlobId, BlobKind, ObjectId, PackId};
use std::collections::{HashMap, HashSet};
use std::ops::Range;

/// What one blob costs in memory once the index is loaded (the pack table comes on top: 32 bytes
/// per pack, about 4 per MiB stored, plus the pack map used while loading and adding).
pub const BYTES_PER_BLOB: usize = std::mem::size_of::<Entry>();

/// Blobs waiting in the hash map before it is merged into the sorted array, at least.
const MERGE_AT_LEAST: usize = 1 << 14;

/// The widest id prefix the prefix table is indexed by: 16 bits, a table of 256 KiB.
const PREFIX_BITS_MAX: u32 = 16;

/// The id prefix bits for `blobs` blobs: about four entries a prefix (ids are keyed hashes,
/// spread evenly), so that a search reads a cache line of the table and one or two of entries
/// instead of the ~18 a binary search of 200 000 entries misses; at most [`PREFIX_BITS_MAX`]
/// (then 150 entries a prefix at 10 million blobs). The table costs about a byte a blob.
fn prefix_bits_for(blobs: usize) -> u32 {
    match blobs {
        0..64 => 0,
        _ => (blobs.ilog2() - 2).min(PREFIX_BITS_MAX),
    }
}

/// Where one blob is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobLocation {
    pub pack: PackId,
    pub kind: BlobKind,
    pub offset: u32,
    pub length: u32,
    pub raw_length: u32,
}

/// The high bit of [`Slot::pack_and_kind`]: the blob is a tree.
const TREE_BIT: u32 = 1 << 31;

/// A blob's place, without its id: pack number (and kind in the high bit), offset, lengths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    pack_and_kind: u32,
    offset: u32,
    length: u32,
    raw_length: u32,
}

/// One blob in the sorted array: 48 bytes, no padding.
#[derive(Debug, Clone, Copy)]
struct Entry {
    id: [u8; 32],
    slot: Slot,
}

const _: () = assert!(std::mem::size_of::<Entry>() == 48);

#[derive(Debug, Default)]
pub struct Index {
    packs: Vec<PackId>,
    pack_numbers: HashMap<PackId, u32>,
    /// One entry per blob, sorted by id, no id twice.
    sorted: Vec<Entry>,
    /// `prefix_starts[p]` is the first entry whose id starts with the `prefix_bits`-bit prefix
    /// `p` (2^bits + 1 items, the last one `sorted.len()`); empty for a small `sorted`.
    prefix_starts: Vec<u32>,
    prefix_bits: u32,
    /// Blobs added since `sorted` was last rebuilt, none of them in `sorted`.
    recent: HashMap<BlobId, Slot>,
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
        if self.contains(&blob.id) {
            return;
        }
        let slot = Slot::new(
            pack_number(&mut self.packs, &mut self.pack_numbers, pack),
            blob,
        );
        self.recent.insert(blob.id, slot);
        if self.recent.len() >= MERGE_AT_LEAST.max(self.sorted.len() / 32) {
            self.merge_recent();
        }
    }

    fn merge_recent(&mut self) {
        let mut added: Vec<Entry> = std::mem::take(&mut self.recent)
            .into_iter()
            .map(|(id, slot)| Entry {
                id: *id.as_bytes(),
                slot,
            })
            .collect();
        added.sort_unstable_by_key(|entry| entry.id);
        // Merged from the back into the grown array: each entry moves once, nothing is copied
        // whole. No id is in both parts.
        let mut old = self.sorted.len();
        self.sorted.reserve_exact(added.len());
        self.sorted.extend_from_slice(&added);
        let mut new = added.len();
        let mut write = self.sorted.len();
        while new > 0 {
            write -= 1;
            if old > 0 && self.sorted[old - 1].id > added[new - 1].id {
                old -= 1;
                self.sorted[write] = self.sorted[old];
            } else {
                new -= 1;
                self.sorted[write] = added[new];
            }
        }
        self.rebuild_prefix_table();
    }

    fn rebuild_prefix_table(&mut self) {
        self.prefix_starts.clear();
        self.prefix_bits = prefix_bits_for(self.sorted.len());
        if self.prefix_bits == 0 {
            self.prefix_starts.shrink_to_fit();
            return;
        }
        let prefixes = 1usize << self.prefix_bits;
        self.prefix_starts.shrink_to(prefixes + 1);
        self.prefix_starts.reserve_exact(prefixes + 1);
        let mut next = 0usize;
        for prefix in 0..=prefixes {
            while next < self.sorted.len()
                && prefix_of(&self.sorted[next].id, self.prefix_bits) < prefix
            {
                next += 1;
            }
            self.prefix_starts.push(next as u32);
        }
    }

    fn slot(&self, id: &BlobId) -> Option<Slot> {
        let bytes = id.as_bytes();
        let range = match self.prefix_starts.as_slice() {
            [] => 0..self.sorted.len(),
            starts => {
                let prefix = prefix_of(bytes, self.prefix_bits);
                starts[prefix] as usize..starts[prefix + 1] as usize
            }
        };
        let part = &self.sorted[range];
        match part.binary_search_by(|entry| entry.id.cmp(bytes)) {
            Ok(found) => Some(part[found].slot),
            Err(_) => self.recent.get(id).copied(),
        }
    }

    pub fn get(&self, id: &BlobId) -> Option<BlobLocation> {
        self.slot(id).map(|slot| BlobLocation {
            pack: self.packs[(slot.pack_and_kind & !TREE_BIT) as usize],
            kind: slot.kind(),
            offset: slot.offset,
            length: slot.length,
            raw_length: slot.raw_length,
        })
    }

    pub fn contains(&self, id: &BlobId) -> bool {
        self.slot(id).is_some()
    }

    pub fn blob_count(&self) -> usize {
        self.sorted.len() + self.recent.len()
    }

    /// Every blob id (a copy: for tests and small repositories).
    pub fn blob_ids(&self) -> HashSet<BlobId> {
        self.sorted
            .iter()
            .map(|entry| BlobId::from_bytes(entry.id))
            .chain(self.recent.keys().copied())
            .collect()
    }

    pub fn packs(&self) -> &[PackId] {
        &self.packs
    }

    /// Bytes held on the heap, for measuring: the array, the pack table and map, the recent map
    /// (by capacity, hash maps counted at their slot size plus one control byte).
    pub fn heap_bytes(&self) -> usize {
        let map_slot = |key: usize, value: usize| key + value + 1;
        self.sorted.capacity() * BYTES_PER_BLOB
            + self.prefix_starts.capacity() * 4
            + self.packs.capacity() * 32
            + self.pack_numbers.capacity() * map_slot(32, 4)
            + self.recent.capacity() * map_slot(32, std::mem::size_of::<Slot>())
    }
}

/// Builds an [`Index`] from many index objects at once: entries are appended as each object is
/// read (it can be dropped right after), and sorted once at the end. An object that another
/// names as superseded has its entries dropped then.
#[derive(Debug, Default)]
pub struct IndexBuilder {
    packs: Vec<PackId>,
    pack_numbers: HashMap<PackId, u32>,
    entries: Vec<Entry>,
    /// Each object added, with the range of `entries` that came from it.
    objects: Vec<(ObjectId, Range<usize>)>,
    superseded: HashSet<ObjectId>,
}

impl IndexBuilder {
    pub fn add_file(&mut self, object: ObjectId, file: &IndexFile) {
        let start = self.entries.len();
        for pack in &file.packs {
            let number = pack_number(&mut self.packs, &mut self.pack_numbers, pack.id);
            self.entries.extend(pack.blobs.iter().map(|blob| Entry {
                id: *blob.id.as_bytes(),
                slot: Slot::new(number, blob),
            }));
        }
        self.objects.push((object, start..self.entries.len()));
        self.superseded.extend(file.supersedes.iter().copied());
    }

    /// The index of every object in force; `skipped` names the damaged ones left out.
    pub fn finish(self, skipped: Vec<ObjectId>) -> Index {
        let IndexBuilder {
            packs,
            pack_numbers,
            mut entries,
            mut objects,
            superseded,
        } = self;
        objects.sort_by_key(|(id, _)| *id);
        let mut keep = vec![true; entries.len()];
        let mut in_force = Vec::with_capacity(objects.len());
        for (id, range) in objects {
            if superseded.contains(&id) {
                keep[range].fill(false);
            } else {
                in_force.push(id);
            }
        }
        let mut keep = keep.into_iter();
        entries.retain(|_| keep.next().unwrap_or(true));
        // A blob stored twice keeps the location in the pack seen first (the lowest number).
        entries.sort_unstable_by(|a, b| {
            (a.id, a.slot.pack_and_kind & !TREE_BIT, a.slot.offset).cmp(&(
                b.id,
                b.slot.pack_and_kind & !TREE_BIT,
                b.slot.offset,
            ))
        });
        entries.dedup_by(|later, first| later.id == first.id);
        entries.shrink_to_fit();
        let mut index = Index {
            packs,
            pack_numbers,
            sorted: entries,
            objects: in_force,
            skipped,
            ..Index::default()
        };
        index.rebuild_prefix_table();
        index
    }
}

impl Slot {
    fn new(pack_number: u32, blob: &IndexedBlob) -> Slot {
        let kind_bit = match blob.kind {
            BlobKind::Data => 0,
            BlobKind::Tree => TREE_BIT,
        };
        Slot {
            pack_and_kind: pack_number | kind_bit,
            offset: blob.offset,
            length: blob.length,
            raw_length: blob.raw_length,
        }
    }

    fn kind(&self) -> BlobKind {
        if self.pack_and_kind & TREE_BIT != 0 {
            BlobKind::Tree
        } else {
            BlobKind::Data
        }
    }
}

/// The first `bits` bits of an id (1 to 32).
fn prefix_of(id: &[u8; 32], bits: u32) -> usize {
    (u32::from_be_bytes([id[0], id[1], id[2], id[3]]) >> (32 - bits)) as usize
}

/// The pack's number in `packs`, adding it when new.
fn pack_number(packs: &mut Vec<PackId>, numbers: &mut HashMap<PackId, u32>, pack: PackId) -> u32 {
    *numbers.entry(pack).or_insert_with(|| {
        // The high bit holds the kind: 2^31 packs of 8 MiB are 16 PiB.
        assert!(
            packs.len() < TREE_BIT as usize,
            "more than 2^31 packs in one index"
        );
        packs.push(pack);
        (packs.len() - 1) as u32
    })
}

#[cfg(test)]
mod tests;
