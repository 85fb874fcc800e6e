//! A repository's index costs memory per blob, at a known rate, and nothing that grows besides:
//! generated repositories whose index objects (written through the engine's own `write_object`,
//! sealed like any backup's) list packs of tiny blobs are loaded with `load_index` while the
//! process's peak memory is watched. Two sizes are loaded, so that what loading costs whatever
//! the size (the objects being decoded, the runtime) cancels out of the per-blob figure.
//!
//! By default 1 200 000 blobs and a sixth of that, in seconds; ten million (about a minute,
//! 0.6 GB of index objects) is the size the figures in `docs/speed.md` were measured at:
//!
//! ```sh
//! cargo test -p neverwiped-sidecar --test big_index -- --nocapture
//! NEVERWIPED_BIG_INDEX_BLOBS=10000000 NEVERWIPED_BIG_INDEX_KEEP=/tmp/big-repo cargo test --release ...
//! ```
//!
//! `NEVERWIPED_BIG_INDEX_KEEP=DIR` leaves the larger repository in DIR (password: the test
//! fixtures'), so that the command line can be measured on it too. The packs themselves are not
//! written: only the index is what opening costs.

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

/// Writes the index objects of a repository of `blobs` blobs into `dir`.
async fn generate(dir: &std::path::Path, blobs: u64) {
    let backend = Arc::new(LocalBackend::new(dir));
    let repo = Repository::init(backend, PASSWORD, TEST_KDF).await.unwrap();
    let per_object = BLOBS_PER_PACK * PACKS_PER_OBJECT;
    let mut written = 0;
    while written < blobs {
        let n = per_object.min(blobs - written);
        let file = index_object(written / BLOBS_PER_PACK, n);
        repo.write_object(ObjectKind::Index, &file).await.unwrap();
        written += n;
    }
}

/// What loading the index of one repository cost.
#[derive(Debug)]
struct Loaded {
    blobs: u64,
    /// The index's own heap bytes, as it counts them.
    heap_bytes: u64,
    /// The process's resident memory before loading, and its peak while loading (KiB).
    rss_before_kib: u64,
    peak_kib: u64,
    seconds: f64,
}

impl Loaded {
    /// How much the process's peak rose over where it started.
    fn growth_kib(&self) -> u64 {
        self.peak_kib.saturating_sub(self.rss_before_kib)
    }
}

/// Opens the repository in `dir` and loads its index, with the process's peak memory reset first
/// (`/proc/self/clear_refs`), and checks that every generated blob is found.
async fn load(dir: &std::path::Path, blobs: u64) -> Loaded {
    std::fs::write("/proc/self/clear_refs", "5").expect("the peak memory figure can be reset");
    let rss_before_kib = status_kib("VmRSS");
    let started = std::time::Instant::now();
    let indexed = Repository::open(Arc::new(LocalBackend::new(dir)), PASSWORD)
        .await
        .unwrap()
        .load_index()
        .await
        .unwrap();
    let seconds = started.elapsed().as_secs_f64();
    let peak_kib = status_kib("VmHWM");
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
    let heap_bytes = index.heap_bytes() as u64;
    Loaded {
        blobs,
        heap_bytes,
        rss_before_kib,
        peak_kib,
        seconds,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_costs_its_known_bytes_a_blob_and_nothing_more() {
    let large: u64 = std::env::var("NEVERWIPED_BIG_INDEX_BLOBS")
        .map(|n| n.parse().expect("NEVERWIPED_BIG_INDEX_BLOBS is a number"))
        .unwrap_or(1_200_000);
    let small = large / 6;
    // As in a process that loads one index: glibc serves large allocations by mmap and grows
    // them in place (mremap). Left to itself it raises that threshold to the size of any such
    // block freed, so the second load here would grow its array by copying, up to the first's
    // size, and count the copies.
    // SAFETY: mallopt only sets a parameter of the allocator, under its own locks.
    let fixed = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024) };
    assert_eq!(fixed, 1, "mallopt(M_MMAP_THRESHOLD)");
    let work = tempfile::tempdir().unwrap();
    let small_dir = work.path().join("small");
    let large_dir = std::env::var_os("NEVERWIPED_BIG_INDEX_KEEP")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| work.path().join("large"));
    let started = std::time::Instant::now();
    generate(&small_dir, small).await;
    generate(&large_dir, large).await;
    let generated_in = started.elapsed().as_secs_f64();
    let loads = [load(&small_dir, small).await, load(&large_dir, large).await];
    for loaded in &loads {
        println!(
            "{} blobs: loaded in {:.1} s; index heap {:.1} MiB ({:.2} bytes a blob, entries \
             {BYTES_PER_BLOB}); RSS {} MiB before, peak {} MiB",
            loaded.blobs,
            loaded.seconds,
            loaded.heap_bytes as f64 / 1048576.0,
            loaded.heap_bytes as f64 / loaded.blobs as f64,
            loaded.rss_before_kib / 1024,
            loaded.peak_kib / 1024,
        );
        // The index's own bytes: the entries, the prefix table (at most 256 KiB) and the pack
        // table (32 bytes and a map slot a pack of 2048 blobs).
        let blobs = loaded.blobs;
        assert!(loaded.heap_bytes <= blobs * BYTES_PER_BLOB as u64 + (1 << 20) + blobs / 64);
        // Loading holds, besides the index, only the few objects being decoded.
        let allowance_kib = 96 * 1024;
        assert!(
            loaded.growth_kib() <= loaded.heap_bytes / 1024 + allowance_kib,
            "{loaded:?}"
        );
    }
    // What more blobs cost, fixed costs cancelled: the entry, and a little for the prefix and
    // pack tables and the allocator's rounding. The engine before the sorted array cost 60 to
    // 120 bytes a blob in its hash map alone.
    let [small, large] = &loads;
    let more_blobs = large.blobs - small.blobs;
    let more_kib = large.growth_kib() as f64 - small.growth_kib() as f64;
    let peak_per_blob = more_kib * 1024.0 / more_blobs as f64;
    let heap_per_blob = (large.heap_bytes - small.heap_bytes) as f64 / more_blobs as f64;
    println!(
        "generated in {generated_in:.1} s; each blob more: {heap_per_blob:.2} bytes of index, \
         {peak_per_blob:.2} bytes of peak memory"
    );
    assert!(
        heap_per_blob <= BYTES_PER_BLOB as f64 + 4.0,
        "{heap_per_blob:.2} bytes a blob"
    );
    // The process's figure moves a few MiB with what its threads happened to allocate.
    assert!(
        peak_per_blob <= BYTES_PER_BLOB as f64 + 8.0,
        "the peak rose {peak_per_blob:.2} bytes a blob more: {loads:?}"
    );
}
