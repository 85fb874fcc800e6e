//! Key objects added by whoever may write to the repository cannot hold an open for long: one
//! that asks for too much Argon2id work is not derived, an open derives a bounded number of keys,
//! and `--key-hint` names the right one first.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine;
use neverwiped::crypto::KdfParams;
use neverwiped::format::key::KeyFile;
use neverwiped::ids::ObjectId;

use super::initialised;

/// Writes a key object like `model` but with `params`, a random salt and a wrapped key no password
/// opens, under a name (its SHA-256) that sorts before `before`; returns that name.
fn plant_key(keys_dir: &Path, model: &KeyFile, params: KdfParams, before: &str) -> String {
    let engine = base64::engine::general_purpose::STANDARD;
    loop {
        let mut key = model.clone();
        key.kdf.params = params;
        key.kdf.salt = engine.encode(rand::random::<[u8; 16]>());
        key.wrapped_master_key = engine.encode(rand::random::<[u8; 32]>().repeat(2));
        let bytes = key.to_bytes();
        let name = ObjectId::of_bytes(&bytes).to_hex();
        if name.as_str() < before {
            fs::write(keys_dir.join(&name), bytes).unwrap();
            return name;
        }
    }
}

#[test]
fn hundreds_of_planted_keys_cannot_hold_an_open_and_the_hinted_key_opens_at_once() {
    let (_work, repo, sidecar) = initialised();
    let keys_dir = repo.join("keys");
    let real = fs::read_dir(&keys_dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name()
        .into_string()
        .unwrap();
    let model = KeyFile::parse(&fs::read(keys_dir.join(&real)).unwrap(), "key").unwrap();
    // The real key's name may sort too early for planted names to come before it: then they
    // come before the next-to-last hex digit string instead (the order is by cost, then name).
    let before = real.clone().max("4".repeat(64));
    let flood = KdfParams {
        memory_kib: 1024 * 1024,
        iterations: 16,
        parallelism: 4,
    };
    for _ in 0..3 {
        plant_key(&keys_dir, &model, flood, &before);
    }
    let cheap = KdfParams {
        memory_kib: 8 * 1024,
        iterations: 1,
        parallelism: 1,
    };
    for _ in 0..200 {
        plant_key(&keys_dir, &model, cheap, &before);
    }

    // Without a hint: a bounded number of keys, then a clear failure naming the way out.
    let started = Instant::now();
    let unhinted = sidecar.run(&["snapshots"]);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(60), "the open took {took:?}");
    assert_eq!(unhinted.code, 1, "{}", unhinted.stderr);
    assert!(
        unhinted.stderr.contains("--key-hint"),
        "{}",
        unhinted.stderr
    );
    assert!(
        unhinted.stderr.contains("of the repository's 204 keys"),
        "{}",
        unhinted.stderr
    );

    // With the real key's first digits: it is tried first and opens.
    let started = Instant::now();
    sidecar
        .run(&["snapshots", "--key-hint", &real[..8]])
        .expect_ok();
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(30),
        "the hinted open took {took:?}"
    );
}
