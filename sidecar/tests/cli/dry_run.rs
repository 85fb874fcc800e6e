//! `backup --dry-run` on a repository behind a real rest-server: it stores nothing (every object
//! on the server is the same, byte for byte, before and after) and its estimate is what the
//! backup run next adds.

use super::exact_names::matches_schema;
use super::support::fixtures::Noise;
use super::support::{RestServer, RestServerOptions};
use super::{text, Sidecar};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

/// Every file below `root` (the server's storage): its path and the SHA-256 of its content.
fn stored_objects(root: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, found: &mut BTreeMap<String, String>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, found);
            } else {
                let relative = path.strip_prefix(root).unwrap().display().to_string();
                found.insert(
                    relative,
                    hex::encode(Sha256::digest(fs::read(&path).unwrap())),
                );
            }
        }
    }
    let mut found = BTreeMap::new();
    walk(root, root, &mut found);
    found
}

#[test]
fn a_dry_run_stores_nothing_and_estimates_what_the_backup_adds() {
    let Some(server) = RestServer::start(
        "dry_run::a_dry_run_stores_nothing_and_estimates_what_the_backup_adds",
        RestServerOptions::default(),
    ) else {
        return;
    };
    let sidecar = Sidecar::new(format!("rest:{}", server.url()));
    sidecar.run(&["init"]).expect_ok();
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    let mut noise = Noise::new(34);
    let random = noise.bytes(3 << 20);
    fs::create_dir_all(source.join("sub")).unwrap();
    fs::write(source.join("random"), &random).unwrap();
    fs::write(source.join("text"), "a line of text\n".repeat(20_000)).unwrap();
    sidecar.run(&["backup", text(&source)]).expect_ok();

    // New content, a changed file, and a copy of stored content (deduplicated: it adds nothing
    // but its tree entry).
    fs::write(source.join("sub/new"), noise.bytes(1 << 20)).unwrap();
    fs::write(source.join("text"), "another line\n".repeat(30_000)).unwrap();
    fs::write(source.join("sub/copy"), &random).unwrap();

    let before = stored_objects(&server.data_dir());
    let dry = sidecar
        .run(&["backup", "--dry-run", "--json", text(&source)])
        .expect_ok();
    matches_schema("backup-dry-run.json", &dry.stdout, false);
    let text_run = sidecar.run(&["backup", "-n", text(&source)]).expect_ok();
    assert!(
        text_run.stdout.contains("dry run: nothing was stored"),
        "{}",
        text_run.stdout
    );
    assert_eq!(
        stored_objects(&server.data_dir()),
        before,
        "a dry run changed the repository"
    );
    let dry: serde_json::Value = serde_json::from_str(&dry.stdout).unwrap();
    assert_eq!(dry["filesRead"], 3, "{dry}");
    assert_eq!(dry["filesUnmodified"], 1, "{dry}");

    let real = sidecar
        .run(&["backup", "--json", text(&source)])
        .expect_ok();
    let real: serde_json::Value = serde_json::from_str(&real.stdout).unwrap();
    let summary = &real["summary"];
    // Data blobs are the same bytes; tree blobs hold access times, which the dry run's own reading
    // moved on, so their compressed sizes may differ by a few bytes.
    let estimate = dry["wouldAdd"]["bytes"].as_i64().unwrap();
    let added = summary["bytesAdded"].as_i64().unwrap();
    let tree_slack = 64 * dry["dirs"].as_i64().unwrap();
    assert!(
        (estimate - added).abs() <= tree_slack,
        "estimated {estimate} bytes, added {added}\n{dry}\n{real}"
    );
    assert_eq!(
        dry["wouldAdd"]["blobs"], summary["blobsAdded"],
        "{dry}\n{real}"
    );
    assert_eq!(dry["filesRead"], summary["filesRead"], "{dry}\n{real}");
    assert_eq!(dry["bytesRead"], summary["bytesRead"], "{dry}\n{real}");
    // The random file's copy was not stored again: less than what was read was added.
    assert!(dry["wouldAdd"]["bytes"].as_u64().unwrap() < (2 << 20) + (1 << 20));
    assert_ne!(stored_objects(&server.data_dir()), before);
}
