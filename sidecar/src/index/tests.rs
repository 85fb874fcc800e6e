use super::*;
use crate::format::index::IndexedPack;

fn blob(n: u64, kind: BlobKind) -> IndexedBlob {
    let mut id = [0u8; 32];
    // Spread over every prefix, as keyed hashes are.
    id[..8].copy_from_slice(&n.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes());
    id[24..].copy_from_slice(&n.to_be_bytes());
    IndexedBlob {
        id: BlobId::from_bytes(id),
        kind,
        offset: n as u32 * 3,
        length: n as u32 + 40,
        raw_length: n as u32 + 7,
    }
}

fn kind_of(n: u64) -> BlobKind {
    if n % 5 == 0 {
        BlobKind::Tree
    } else {
        BlobKind::Data
    }
}

fn pack(n: u8) -> PackId {
    PackId::from_bytes([n; 32])
}

fn file(packs: &[(u8, Range<u64>)]) -> IndexFile {
    IndexFile {
        packs: packs
            .iter()
            .map(|(p, blobs)| IndexedPack {
                id: pack(*p),
                blobs: blobs.clone().map(|n| blob(n, kind_of(n))).collect(),
            })
            .collect(),
        supersedes: vec![],
    }
}

fn object(n: u8) -> ObjectId {
    ObjectId::from_bytes([n; 32])
}

fn assert_at(index: &Index, n: u64, pack_number: u8) {
    let expected = blob(n, kind_of(n));
    let found = index
        .get(&expected.id)
        .unwrap_or_else(|| panic!("blob {n} is missing"));
    assert_eq!(
        found,
        BlobLocation {
            pack: pack(pack_number),
            kind: expected.kind,
            offset: expected.offset,
            length: expected.length,
            raw_length: expected.raw_length,
        }
    );
}

#[test]
fn an_entry_costs_48_bytes() {
    assert_eq!(BYTES_PER_BLOB, 48);
}

#[test]
fn a_built_index_finds_every_blob_and_no_other() {
    let mut builder = IndexBuilder::default();
    builder.add_file(object(1), &file(&[(1, 0..1000), (2, 1000..1500)]));
    builder.add_file(object(2), &file(&[(3, 1500..4000)]));
    let index = builder.finish(vec![object(9)]);
    assert_eq!(index.blob_count(), 4000);
    for n in 0..4000 {
        assert_at(
            &index,
            n,
            if n < 1000 {
                1
            } else if n < 1500 {
                2
            } else {
                3
            },
        );
    }
    for n in 4000..4100 {
        assert!(!index.contains(&blob(n, BlobKind::Data).id));
    }
    assert_eq!(index.objects, vec![object(1), object(2)]);
    assert_eq!(index.skipped, vec![object(9)]);
    assert_eq!(index.packs().len(), 3);
}

#[test]
fn a_blob_stored_twice_counts_once_and_keeps_the_pack_seen_first() {
    let mut builder = IndexBuilder::default();
    builder.add_file(object(1), &file(&[(7, 0..10)]));
    builder.add_file(object(2), &file(&[(8, 5..20)]));
    let index = builder.finish(vec![]);
    assert_eq!(index.blob_count(), 20);
    for n in 0..10 {
        assert_at(&index, n, 7);
    }
    for n in 10..20 {
        assert_at(&index, n, 8);
    }
}

#[test]
fn the_blobs_of_a_superseded_object_are_left_out() {
    let mut builder = IndexBuilder::default();
    let mut newer = file(&[(2, 0..5)]);
    newer.supersedes = vec![object(1)];
    builder.add_file(object(1), &file(&[(1, 0..100)]));
    builder.add_file(object(2), &newer);
    let index = builder.finish(vec![]);
    assert_eq!(index.blob_count(), 5);
    for n in 0..5 {
        assert_at(&index, n, 2);
    }
    assert!(!index.contains(&blob(50, BlobKind::Data).id));
    assert_eq!(index.objects, vec![object(2)]);
}

#[test]
fn blobs_added_after_loading_are_found_before_and_after_each_merge() {
    let mut builder = IndexBuilder::default();
    builder.add_file(object(1), &file(&[(1, 0..20_000)]));
    let mut index = builder.finish(vec![]);
    // Added one pack at a time, as a backup's uploader does, past several merges.
    for (i, start) in (20_000..60_000).step_by(1000).enumerate() {
        index.add_file(
            Some(object(10 + i as u8)),
            &file(&[(10 + i as u8, start..start + 1000)]),
        );
        assert_at(&index, start, 10 + i as u8);
        assert_at(&index, start + 999, 10 + i as u8);
        assert_at(&index, 7, 1);
    }
    // A blob known already keeps its first place.
    index.add_file(None, &file(&[(99, 0..10)]));
    assert_at(&index, 3, 1);
    assert_eq!(index.blob_count(), 60_000);
    for n in (0..60_000).step_by(7) {
        assert_at(
            &index,
            n,
            if n < 20_000 {
                1
            } else {
                10 + ((n - 20_000) / 1000) as u8
            },
        );
    }
    assert_eq!(index.blob_ids().len(), 60_000);
}

#[test]
fn a_large_index_is_searched_through_its_prefix_table() {
    let blobs = (1 << 20) + 10;
    let mut builder = IndexBuilder::default();
    builder.add_file(object(1), &file(&[(1, 0..blobs)]));
    let index = builder.finish(vec![]);
    assert_eq!(index.prefix_starts.len(), 65_537);
    assert_eq!(
        *index.prefix_starts.last().unwrap() as usize,
        index.sorted.len()
    );
    for n in (0..blobs).step_by(997) {
        assert_at(&index, n, 1);
    }
    let absent = blob(blobs + 1, BlobKind::Data).id;
    assert!(!index.contains(&absent));
    // 48 bytes a blob, the prefix table and the one pack on top.
    let per_blob = index.heap_bytes() as f64 / index.blob_count() as f64;
    assert!(per_blob < 48.5, "{per_blob} bytes a blob");
}

#[test]
fn the_prefix_table_grows_with_the_index_at_about_four_entries_a_prefix() {
    for (blobs, bits) in [(10, 0), (64, 4), (1000, 7), (200_000, 15), (5_000_000, 16)] {
        assert_eq!(prefix_bits_for(blobs), bits, "{blobs} blobs");
    }
    for blobs in [63u64, 64, 65, 1000, 4097, 30_000] {
        let mut builder = IndexBuilder::default();
        builder.add_file(object(1), &file(&[(1, 0..blobs)]));
        let index = builder.finish(vec![]);
        let bits = prefix_bits_for(blobs as usize);
        let expected = match bits {
            0 => 0,
            bits => (1 << bits) + 1,
        };
        assert_eq!(index.prefix_starts.len(), expected, "{blobs} blobs");
        for n in 0..blobs {
            assert_at(&index, n, 1);
        }
        assert!(!index.contains(&blob(blobs + 1, BlobKind::Data).id));
        let table_bytes = index.prefix_starts.capacity() * 4;
        assert!(
            table_bytes as u64 <= blobs * 5 / 4,
            "{blobs} blobs: a table of {table_bytes} bytes"
        );
    }
}
