//! A repository of ten million blobs opens in bounded memory: a generated repository whose index
//! objects (written through the engine's own `write_object`, sealed like any backup's) list packs
//! of tiny blobs, loaded with `load_index` while the process's peak memory is watched.
//!
//! Slow (about a minute per ten million blobs) and large (about 0.6 GB of index objects), so
//! ignored by default:
//!
//! ```sh
//! cargo test --release -p neverwiped-sidecar --test big_index -- --ignored --nocapture
//! NEVERWIPED_BIG_INDEX_BLOBS=1000000 NEVERWIPED_BIG_INDEX_KEEP=/tmp/big-repo cargo test ...
//! ```
//!
//! `NEVERWIPED_BIG_INDEX_KEEP=DIR` leaves the repository in DIR (password: the test fixtures'),
//! so that the command line can be measured on it too. The packs themselves are not written:
//! only the index is what opening costs.

mod support;

use neverwiped::backend::local::LocalBackend;
use neverwiped::backend::ObjectKind;
use neverwiped::format::index::{IndexFile, IndexedBlob, IndexedPack};
use neverwiped::ids::{BlobId, BlobKind, PackId};
use neverwiped::index::BYTES_PER_BLOB;
use neverwiped::repository::Repository;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use support::fixtures::{PASSWORD, TEST_KDF};

/// Blobs per pack and per index object, as a backup of small files writes them.
const BLOBS_PER_PACK: u64 = 2048;
const PACKS_PER_OBJECT: u64 = 4;

fn id_of(kind: &str, n: u64) -> [u8; 32] {
    Sha256::digest(format!("{kind} {n}")).into()
}

/// A field of /proc/self/status in KiB (VmRSS, VmHWM).
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches(" kB").parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

fn index_object(first_pack: u64, blobs: u64) -> IndexFile {
    let packs = blobs.div_ceil(BLOBS_PER_PACK);
    IndexFile {
        packs: (0..packs)
            .map(|p| {
                let pack = first_pack + p;
                let start = pack * BLOBS_PER_PACK;
                IndexedPack {
                    id: PackId::from_bytes(id_of("pack", pack)),
                    blobs: (0..BLOBS_PER_PACK.min(blobs - p * BLOBS_PER_PACK))
                        .map(|i| IndexedBlob {
                            id: BlobId::from_bytes(id_of("blob", start + i)),
                            kind: if i == 0 {
                                BlobKind::Tree
                            } else {
                                BlobKind::Data
                            },
                            offset: (i * 48) as u32,
                            length: 48,
                            raw_length: 20,
                        })
                        .collect(),
                }
            })
            .collect(),
        supersedes: vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: generates and opens a repository of ten million blobs"]
async fn ten_million_blobs_open_in_bounded_memory() {
    let blobs: u64 = std::env::var("NEVERWIPED_BIG_INDEX_BLOBS")
        .map(|n| n.parse().expect("NEVERWIPED_BIG_INDEX_BLOBS is a number"))
        .unwrap_or(10_000_000);
    let work = tempfile::tempdir().unwrap();
    let dir = std::env::var_os("NEVERWIPED_BIG_INDEX_KEEP")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| work.path().join("repo"));
    let backend = Arc::new(LocalBackend::new(&dir));
    let repo = Repository::init(backend, PASSWORD, TEST_KDF).await.unwrap();

    let started = std::time::Instant::now();
    let per_object = BLOBS_PER_PACK * PACKS_PER_OBJECT;
    let mut written = 0;
    while written < blobs {
        let n = per_object.min(blobs - written);
        let file = index_object(written / BLOBS_PER_PACK, n);
        repo.write_object(ObjectKind::Index, &file).await.unwrap();
        written += n;
    }
    let generated_in = started.elapsed();
    let rss_before = status_kib("VmRSS");
    let hwm_before = status_kib("VmHWM");

    let started = std::time::Instant::now();
    let indexed = Repository::open(Arc::new(LocalBackend::new(&dir)), PASSWORD)
        .await
        .unwrap()
        .load_index()
        .await
        .unwrap();
    let loaded_in = started.elapsed();
    let index = indexed.index();
    assert_eq!(index.blob_count() as u64, blobs);
    for n in (0..blobs).step_by(99_991) {
        let id = BlobId::from_bytes(id_of("blob", n));
        let found = index.get(&id).expect("every generated blob is indexed");
        assert_eq!(
            found.pack,
            PackId::from_bytes(id_of("pack", n / BLOBS_PER_PACK))
        );
    }
    let heap = index.heap_bytes() as u64;
    let rss_after = status_kib("VmRSS");
    let hwm_after = status_kib("VmHWM");
    println!(
        "{blobs} blobs in {} index objects: generated in {:.1} s, loaded in {:.1} s; index heap \
         {:.1} MiB ({:.2} bytes a blob, entries {BYTES_PER_BLOB}); RSS {} -> {} MiB, peak {} -> {} MiB",
        blobs.div_ceil(per_object),
        generated_in.as_secs_f64(),
        loaded_in.as_secs_f64(),
        heap as f64 / 1048576.0,
        heap as f64 / blobs as f64,
        rss_before / 1024,
        rss_after / 1024,
        hwm_before / 1024,
        hwm_after / 1024,
    );
    // Bounded: the index's own bytes, plus a fixed allowance for the objects being decoded.
    assert!(heap <= blobs * BYTES_PER_BLOB as u64 + (1 << 20) + blobs / 64);
    let allowance_kib = 96 * 1024;
    assert!(
        hwm_after <= rss_before + heap / 1024 + allowance_kib,
        "peak {hwm_after} KiB while loading an index of {} KiB over a start of {rss_before} KiB",
        heap / 1024
    );
}
