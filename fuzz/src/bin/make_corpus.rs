//! Writes the committed seed corpus: valid objects of every kind, produced by the engine itself
//! (a real backup of a small tree into a local repository), in the form each target reads.
//!
//! `cargo run --bin make_corpus -- corpus` (a plain build; no fuzzing toolchain needed).

use neverwiped::archive::{backup, BackupOptions, Source};
use neverwiped::backend::local::LocalBackend;
use neverwiped::backend::{Backend, ObjectKind};
use neverwiped::crypto::{blob_associated_data, KdfParams};
use neverwiped::format::lock::Lock;
use neverwiped::format::pack::read_header;
use neverwiped::ids::BlobKind;
use neverwiped::repository::Repository;
use neverwiped_fuzz::{object_associated_data, PACK_HEADER_ASSOCIATED_DATA};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const KDF: KdfParams = KdfParams {
    memory_kib: 64,
    iterations: 1,
    parallelism: 1,
};

fn write(corpus: &Path, target: &str, name: &str, bytes: &[u8]) {
    let dir = corpus.join(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

fn with_length(length: u32, encoded: &[u8]) -> Vec<u8> {
    let mut out = length.to_le_bytes().to_vec();
    out.extend_from_slice(encoded);
    out
}

/// A small tree with every kind of entry a snapshot records.
fn build_source(root: &Path) {
    std::fs::create_dir_all(root.join("dir/sub")).unwrap();
    std::fs::write(root.join("small.txt"), b"hello, corpus\n").unwrap();
    std::fs::write(root.join("empty"), b"").unwrap();
    let compressible: Vec<u8> = b"abcdefgh".iter().cycle().take(200_000).copied().collect();
    std::fs::write(root.join("dir/compressible.bin"), compressible).unwrap();
    std::os::unix::fs::symlink("../small.txt", root.join("dir/link")).unwrap();
    let odd_name = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"not-utf8-\xff");
    std::fs::write(root.join("dir/sub").join(odd_name), b"odd").unwrap();
}

#[tokio::main]
async fn main() {
    let corpus = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "corpus".into()));
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    build_source(&source);
    let backend = Arc::new(LocalBackend::new(work.path().join("repo")));
    let repo = Repository::init(backend.clone(), b"corpus password", KDF)
        .await
        .unwrap()
        .load_index()
        .await
        .unwrap();
    backup(&repo, BackupOptions::new(vec![Source::Path(source)]))
        .await
        .unwrap();
    let sealer = &repo.keys().sealer;

    write(
        &corpus,
        "config",
        "stored",
        &backend.read(ObjectKind::Config, "config").await.unwrap(),
    );
    for kind in [
        ObjectKind::Keys,
        ObjectKind::Index,
        ObjectKind::Snapshots,
        ObjectKind::Data,
    ] {
        for info in backend.list(kind).await.unwrap() {
            let stored = backend.read(kind, &info.name).await.unwrap();
            let name = &info.name[..16];
            match kind {
                ObjectKind::Keys => write(&corpus, "key", name, &stored),
                ObjectKind::Index => {
                    let encoded = sealer
                        .open(&stored, &object_associated_data(kind), "x")
                        .unwrap();
                    write(&corpus, "index", name, &encoded);
                }
                ObjectKind::Snapshots => {
                    let encoded = sealer
                        .open(&stored, &object_associated_data(kind), "x")
                        .unwrap();
                    write(&corpus, "snapshot", name, &encoded);
                }
                _ => write_pack(&corpus, sealer, name, &stored),
            }
        }
    }
    let lock = serde_json::to_vec(&Lock::new(false, "backup")).unwrap();
    let mut raw = vec![0u8];
    raw.extend_from_slice(&lock);
    write(&corpus, "lock", "shared", &raw);
    write(&corpus, "rest_listing", "null", b"null");
    let listing: Vec<serde_json::Value> = backend
        .list(ObjectKind::Data)
        .await
        .unwrap()
        .into_iter()
        .map(|info| serde_json::json!({"name": info.name, "size": info.size_bytes}))
        .collect();
    write(
        &corpus,
        "rest_listing",
        "data",
        &serde_json::to_vec(&listing).unwrap(),
    );
}

/// A pack's header (its plaintext behind the blob region's length), and each blob's encoding
/// behind its plaintext length: trees for `tree`, data for `blob`.
fn write_pack(corpus: &Path, sealer: &neverwiped::crypto::Sealer, name: &str, stored: &[u8]) {
    let entries = read_header(sealer, stored, "pack").unwrap();
    let header_len = u32::from_le_bytes(stored[stored.len() - 4..].try_into().unwrap()) as usize;
    let region = stored.len() - 4 - header_len;
    let header = sealer
        .open(
            &stored[region..stored.len() - 4],
            PACK_HEADER_ASSOCIATED_DATA,
            "header",
        )
        .unwrap();
    if region <= u16::MAX as usize {
        let mut input = (region as u16).to_le_bytes().to_vec();
        input.extend_from_slice(&header);
        write(corpus, "pack_header", name, &input);
    }
    for entry in entries {
        let sealed = &stored[entry.offset as usize..(entry.offset + entry.length) as usize];
        let encoded = sealer
            .open(sealed, &blob_associated_data(entry.kind, &entry.id), "blob")
            .unwrap();
        let target = match entry.kind {
            BlobKind::Tree => "tree",
            _ => "blob",
        };
        let file = format!("{name}-{}", &entry.id.to_hex()[..8]);
        write(
            corpus,
            target,
            &file,
            &with_length(entry.raw_length, &encoded),
        );
    }
}
