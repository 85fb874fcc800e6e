//! `repair index`: a repository whose index objects are deleted, or one of whose packs is
//! deleted, gets an index that lists exactly what the packs hold: `check` passes again (or names
//! only what the lost pack held), and every snapshot that lost nothing restores. restic 0.19 on
//! its own repository of the same files, with its index deleted, is repaired the same way.

use super::exact_names::matches_schema;
use super::inspect_common::Restic;
use super::support::{fixtures, restic_binary};
use super::{initialised, text, Sidecar};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The object files of one kind (`index`, `data`), by name.
fn objects(repo: &Path, kind: &str) -> BTreeSet<PathBuf> {
    fixtures::walk(&repo.join(kind))
        .into_iter()
        .filter(|path| path.is_file())
        .collect()
}

fn name(path: &Path) -> String {
    path.file_name().unwrap().to_str().unwrap().to_owned()
}

fn check(sidecar: &Sidecar, code: i32) -> serde_json::Value {
    let run = sidecar.run(&["check", "--json"]).expect_code(code);
    assert!(matches_schema("check.json", &run.stdout, false));
    serde_json::from_str(&run.stdout).unwrap()
}

fn repair(sidecar: &Sidecar, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["repair", "index", "--json"];
    args.extend(extra);
    let run = sidecar.run(&args).expect_ok();
    assert!(
        matches_schema("repair-index.json", &run.stdout, false),
        "{}",
        run.stdout
    );
    serde_json::from_str(&run.stdout).unwrap()
}

/// A folder holding one file of `bytes` bytes that no other folder shares.
fn source(work: &Path, n: u32, bytes: u32) -> PathBuf {
    let folder = work.join(format!("source-{n}"));
    fs::create_dir_all(&folder).unwrap();
    let content: Vec<u8> = (0..bytes)
        .map(|i| (i.wrapping_mul(7) + n * 13) as u8 ^ (i >> 9) as u8)
        .collect();
    fs::write(folder.join("file"), content).unwrap();
    folder
}

#[test]
fn repair_index_rebuilds_a_lost_index_and_drops_a_lost_pack() {
    let test = "repair_index_rebuilds_a_lost_index_and_drops_a_lost_pack";
    let Some(restic_path) = restic_binary(test) else {
        return;
    };
    let (work, repo, sidecar) = initialised();
    let first = source(work.path(), 1, 200_000);
    sidecar.run(&["backup", text(&first), "-q"]).expect_ok();
    let packs_of_first = objects(&repo, "data");
    let second = source(work.path(), 2, 300_000);
    sidecar.run(&["backup", text(&second), "-q"]).expect_ok();
    let packs = objects(&repo, "data");

    // Every index object deleted: check fails, repair indexes every pack again.
    for index in objects(&repo, "index") {
        fs::remove_file(index).unwrap();
    }
    check(&sidecar, 1);
    let repaired = repair(&sidecar, &[]);
    assert_eq!(repaired["packsRead"], packs.len());
    assert_eq!(
        repaired["packsAdded"].as_array().unwrap().len(),
        packs.len()
    );
    assert_eq!(repaired["packsMissing"], serde_json::json!([]));
    assert_eq!(repaired["packsIndexed"], packs.len());
    assert_eq!(check(&sidecar, 0)["problems"], serde_json::json!([]));
    let snapshots = sidecar.snapshots();
    for (snapshot, folder) in snapshots.iter().zip([&first, &second]) {
        sidecar.restore_and_compare(snapshot["id"].as_str().unwrap(), folder);
    }
    // With the index sound, nothing is read; --read-all-packs reads every pack.
    assert_eq!(repair(&sidecar, &[])["packsRead"], 0);
    assert_eq!(
        repair(&sidecar, &["--read-all-packs"])["packsRead"],
        packs.len()
    );

    // The data pack only the second backup wrote, deleted: its entries go, check names only
    // the second snapshot's file, and the first snapshot restores.
    let lost = packs
        .difference(&packs_of_first)
        .max_by_key(|path| fs::metadata(path).unwrap().len())
        .unwrap()
        .clone();
    fs::remove_file(&lost).unwrap();
    let repaired = repair(&sidecar, &[]);
    assert_eq!(repaired["packsMissing"], serde_json::json!([name(&lost)]));
    assert_eq!(repaired["packsIndexed"], packs.len() - 1);
    let problems = check(&sidecar, 1)["problems"].clone();
    let problems = problems.as_array().unwrap();
    assert!(!problems.is_empty());
    let second_id = snapshots[1]["id"].as_str().unwrap();
    for problem in problems {
        let problem = problem.as_str().unwrap();
        assert!(problem.contains(&second_id[..8]), "{problem}");
    }
    sidecar.restore_and_compare(snapshots[0]["id"].as_str().unwrap(), &first);

    // restic, on its own repository of the same folders with its index deleted: check fails,
    // repair index adds every pack again, check passes.
    let restic = Restic::init(restic_path.clone(), work.path());
    restic.backup(&first, &[]);
    restic.backup(&second, &[]);
    let restic_repo = work.path().join("restic-repo");
    for index in objects(&restic_repo, "index") {
        fs::remove_file(index).unwrap();
    }
    let restic_run = |args: &[&str]| {
        std::process::Command::new(&restic_path)
            .env_clear()
            .env("RESTIC_REPOSITORY", &restic_repo)
            .env("RESTIC_PASSWORD_FILE", work.path().join("restic-password"))
            .env("RESTIC_CACHE_DIR", work.path().join("restic-cache"))
            .args(args)
            .output()
            .unwrap()
    };
    assert!(!restic_run(&["check"]).status.success());
    let said = restic_run(&["repair", "index"]);
    assert!(said.status.success());
    let added = String::from_utf8_lossy(&said.stderr)
        .matches("adding pack file to index")
        .count();
    assert_eq!(added, objects(&restic_repo, "data").len());
    assert!(restic_run(&["check"]).status.success());
}
