//! `check --read-data-subset`: `n/t` splits the packs by restic's rule (the first byte of the
//! pack id modulo t), so the t runs read every pack exactly once and a damaged pack is found by
//! the run of its group only; a size reads random packs up to that many bytes.

use super::exact_names::matches_schema;
use super::initialised;
use super::support::fixtures;
use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;

/// Every pack file of the repository, by name.
fn packs(repo: &std::path::Path) -> BTreeMap<String, PathBuf> {
    fixtures::walk(&repo.join("data"))
        .into_iter()
        .filter(|path| path.is_file())
        .map(|path| (path.file_name().unwrap().to_str().unwrap().to_owned(), path))
        .collect()
}

fn group_of(pack: &str, groups: u32) -> u32 {
    u32::from_str_radix(&pack[..2], 16).unwrap() % groups + 1
}

#[test]
fn the_runs_of_n_of_t_read_every_pack_once_and_only_its_group_finds_a_damaged_pack() {
    let (work, repo, sidecar) = initialised();
    // Each backup of new content stores a data pack and a tree pack.
    for n in 0..8 {
        let source = work.path().join(format!("source-{n}"));
        fs::create_dir_all(&source).unwrap();
        let content: Vec<u8> = (0..200_000u32)
            .map(|i| (i * 7 + n * 13) as u8 ^ (i >> 9) as u8)
            .collect();
        fs::write(source.join("file"), content).unwrap();
        sidecar
            .run(&["backup", source.to_str().unwrap(), "-q"])
            .expect_ok();
    }
    let packs = packs(&repo);
    const GROUPS: u32 = 3;
    let read_by = |subset: &str, code: i32| -> u64 {
        let run = sidecar
            .run(&["check", "--read-data-subset", subset, "--json"])
            .expect_code(code);
        matches_schema("check.json", &run.stdout, false);
        let printed: serde_json::Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("check --json ({e}): {}", run.stdout));
        printed["packsRead"].as_u64().unwrap()
    };
    let mut read_in_all_runs = 0;
    for n in 1..=GROUPS {
        let in_group = packs.keys().filter(|p| group_of(p, GROUPS) == n).count() as u64;
        let read = read_by(&format!("{n}/{GROUPS}"), 0);
        assert_eq!(read, in_group, "group {n}/{GROUPS}");
        read_in_all_runs += read;
    }
    assert_eq!(read_in_all_runs, packs.len() as u64, "{packs:?}");
    assert!(
        packs.len() >= 8,
        "too few packs for the test: {}",
        packs.len()
    );

    // A size reads at least one pack, and never more than fit; a large one reads them all.
    assert_eq!(read_by("1K", 0), 1);
    assert_eq!(read_by("1G", 0), packs.len() as u64);

    // One byte changed in the middle of a pack: only the run of its group sees it.
    let (name, path) = packs
        .iter()
        .max_by_key(|(_, p)| fs::metadata(p).unwrap().len())
        .unwrap();
    let mut bytes = fs::read(path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    let mut permissions = fs::metadata(path).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    permissions.set_readonly(false);
    fs::set_permissions(path, permissions).unwrap();
    fs::write(path, bytes).unwrap();
    let damaged_group = group_of(name, GROUPS);
    for n in 1..=GROUPS {
        let subset = format!("{n}/{GROUPS}");
        if n == damaged_group {
            let run = sidecar
                .run(&["check", "--read-data-subset", &subset, "--json"])
                .expect_code(1);
            matches_schema("check.json", &run.stdout, false);
            let printed: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
            let problems = printed["problems"].as_array().unwrap();
            assert!(
                !problems.is_empty()
                    && problems
                        .iter()
                        .all(|p| p.as_str().unwrap().contains(name.as_str())),
                "every problem names the damaged pack: {printed}"
            );
        } else {
            sidecar
                .run(&["check", "--read-data-subset", &subset])
                .expect_ok();
        }
    }
}
