//! `copy` between two repositories of different passwords behind a real rest-server with a
//! login: every copied snapshot restores identically from the destination, a second run sends
//! nothing, filters choose exactly their snapshots, a copy killed at several points leaves a
//! destination that checks clean and the next run completes, memory does not grow with the
//! repository, blobs keep their compression, and a damaged blob at the source fails the copy.

use super::exact_names::matches_schema;
use super::support::fixtures::Noise;
use super::support::RestServer;
use super::{text, Sidecar};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The two ends of a copy on one server: `source` and `destination` repositories, each with its
/// own password; the destination's runs read the source's password and gate login from the
/// `NEVERWIPED_FROM_*` variables.
struct Ends {
    server: RestServer,
    source: Sidecar,
    destination: Sidecar,
    _work: tempfile::TempDir,
}

impl Ends {
    fn start(test: &str) -> Option<Ends> {
        let server = RestServer::start_with_login(test)?;
        let work = tempfile::tempdir().unwrap();
        let gate_password = work.path().join("gate-password");
        fs::write(&gate_password, format!("{}\n", server.password().unwrap())).unwrap();
        let login = |sidecar: &mut Sidecar, prefix: &str| {
            let user = server.username().unwrap();
            let name = format!("NEVERWIPED_{prefix}GATE_USERNAME");
            sidecar.env.push((name, user.into()));
            let name = format!("NEVERWIPED_{prefix}GATE_PASSWORD_FILE");
            sidecar.env.push((name, text(&gate_password).into()));
        };
        let mut source = Sidecar::new(format!("rest:{}", server.repo_url("source")));
        login(&mut source, "");
        let mut destination = Sidecar::new(format!("rest:{}", server.repo_url("destination")));
        fs::write(&destination.password_file, "another password\n").unwrap();
        login(&mut destination, "");
        login(&mut destination, "FROM_");
        let from = source.password_file.to_str().unwrap().to_owned();
        destination
            .env
            .push(("NEVERWIPED_FROM_PASSWORD_FILE".into(), from));
        source.run(&["init"]).expect_ok();
        destination.run(&["init"]).expect_ok();
        Some(Ends {
            server,
            source,
            destination,
            _work: work,
        })
    }

    /// Runs `copy ARGS` at the destination, from the source.
    fn copy(&self, args: &[&str]) -> super::support::sidecar::Run {
        let from = format!("rest:{}", self.server.repo_url("source"));
        let mut all = vec!["copy", "--from-repo", &from];
        all.extend_from_slice(args);
        self.destination.run(&all)
    }

    /// The pack files the server stores for the destination.
    fn destination_packs(&self) -> usize {
        files_below(&self.server.data_dir().join("destination/data"))
    }
}

fn files_below(dir: &Path) -> usize {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .map(|entry| entry.unwrap().path())
        .map(|path| match path.is_dir() {
            true => files_below(&path),
            false => 1,
        })
        .sum()
}

/// The `original` of each snapshot of a listing.
fn originals(snapshots: &[serde_json::Value]) -> BTreeSet<String> {
    snapshots
        .iter()
        .map(|s| {
            s["original"]
                .as_str()
                .expect("a copy names its original")
                .into()
        })
        .collect()
}

/// The snapshot ids of a listing that match `keep`.
fn ids_where(
    snapshots: &[serde_json::Value],
    keep: impl Fn(&serde_json::Value) -> bool,
) -> BTreeSet<String> {
    snapshots
        .iter()
        .filter(|s| keep(s))
        .map(|s| s["id"].as_str().unwrap().into())
        .collect()
}

/// Three folders backed up: two of host alpha (the first tagged x and taken in 2020), one of
/// host beta.
fn three_snapshots(ends: &Ends, work: &Path) -> Vec<PathBuf> {
    let mut noise = Noise::new(40);
    let mut folders = Vec::new();
    for (name, args) in [
        (
            "one",
            &[
                "--host",
                "alpha",
                "--tag",
                "x",
                "--time",
                "2020-01-01T00:00:00Z",
            ][..],
        ),
        ("two", &["--host", "alpha"][..]),
        ("three", &["--host", "beta"][..]),
    ] {
        let folder = work.join(name);
        fs::create_dir_all(folder.join("sub")).unwrap();
        fs::write(folder.join("random"), noise.bytes(700_000)).unwrap();
        fs::write(folder.join("sub/text"), format!("{name}\n").repeat(5000)).unwrap();
        std::os::unix::fs::symlink("sub/text", folder.join("link")).unwrap();
        let mut all = vec!["backup", text(&folder)];
        all.extend_from_slice(args);
        ends.source.run(&all).expect_ok();
        folders.push(folder);
    }
    folders
}

#[test]
fn copied_snapshots_restore_identically_and_a_second_run_sends_nothing() {
    let Some(ends) = Ends::start("copy::copied_snapshots_restore_identically") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let folders = three_snapshots(&ends, work.path());
    let made = ends.source.snapshots();
    let alpha = ids_where(&made, |s| s["hostname"] == "alpha");

    let first = ends.copy(&["--host", "alpha"]).expect_ok();
    assert_eq!(
        first.stdout.matches("copied snapshot").count(),
        2,
        "{}",
        first.stdout
    );
    assert_eq!(originals(&ends.destination.snapshots()), alpha);

    let all = ends.copy(&["--json"]).expect_ok();
    assert!(matches_schema("copy.json", &all.stdout, false) || std::env::var("CI").is_err());
    let printed: serde_json::Value = serde_json::from_str(&all.stdout).unwrap();
    assert_eq!(printed["copiedSnapshots"], 1, "{printed}");
    assert_eq!(printed["alreadyThereSnapshots"], 2, "{printed}");
    let copies = ends.destination.snapshots();
    assert_eq!(originals(&copies), ids_where(&made, |_| true));
    for copy in &copies {
        let original = made.iter().find(|s| s["id"] == copy["original"]).unwrap();
        for field in ["hostname", "paths", "tags", "time"] {
            assert_eq!(copy[field], original[field], "{field} of {copy}");
        }
    }

    let packs = ends.destination_packs();
    let again = ends.copy(&[]).expect_ok();
    assert!(
        again.stdout.contains("copied 0 snapshots, 3 already there"),
        "{}",
        again.stdout
    );
    assert_eq!(ends.destination_packs(), packs, "a second run sent packs");

    ends.destination.run(&["check", "--read-data"]).expect_ok();
    for copy in &copies {
        let path = copy["paths"][0].as_str().unwrap();
        let folder = folders.iter().find(|f| text(f) == path).unwrap();
        ends.destination
            .restore_and_compare(copy["id"].as_str().unwrap(), folder);
    }
}

#[test]
fn filters_ids_and_latest_choose_exactly_their_snapshots() {
    let Some(ends) = Ends::start("copy::filters_ids_and_latest") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    three_snapshots(&ends, work.path());
    let made = ends.source.snapshots();
    let tagged = |s: &serde_json::Value| s["tags"].as_array().is_some_and(|t| !t.is_empty());
    let id_of = |host: &str, tagged_too: bool| {
        ids_where(&made, |s| s["hostname"] == host && tagged(s) == tagged_too)
    };
    let beta = id_of("beta", false);
    let beta_prefix = &beta.first().unwrap()[..8];
    let steps: [(&[&str], BTreeSet<String>); 5] = [
        (&["latest", "--host", "alpha"], id_of("alpha", false)),
        (&[beta_prefix], beta.clone()),
        // The snapshot of 2020 is the one left, and too old.
        (&["--newer-than", "30d"], BTreeSet::new()),
        (&["--tag", "x"], id_of("alpha", true)),
        (&["--path", "/nowhere"], BTreeSet::new()),
    ];
    let mut expected = BTreeSet::new();
    for (args, chosen) in steps {
        ends.copy(args).expect_ok();
        expected.extend(chosen);
        assert_eq!(
            originals(&ends.destination.snapshots()),
            expected,
            "after copy {args:?}"
        );
    }
    // A wrong password for the source fails as one for the destination does: exit 12, naming
    // the end.
    let wrong = ends.server.data_dir().join("wrong-password");
    fs::write(&wrong, "wrong\n").unwrap();
    let from = format!("rest:{}", ends.server.repo_url("source"));
    let mut command = ends.destination.command();
    command.env("NEVERWIPED_FROM_PASSWORD_FILE", &wrong);
    command.args(["copy", "--from-repo", &from]);
    let refused = super::support::sidecar::run(command).expect_code(12);
    assert!(refused.stderr.contains("--from-repo"), "{}", refused.stderr);
}

#[test]
fn after_the_newest_copy_what_the_destination_forgot_is_not_copied_again() {
    let Some(ends) = Ends::start("copy::after_the_newest_copy") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    three_snapshots(&ends, work.path());
    let made = ends.source.snapshots();
    let alpha = ids_where(&made, |s| s["hostname"] == "alpha");
    ends.copy(&["--host", "alpha"]).expect_ok();
    // The destination's retention forgets the older alpha copy (of 2020).
    let copies = ends.destination.snapshots();
    let old = ids_where(&copies, |s| s["time"].as_str().unwrap().starts_with("2020"));
    let old = old.first().expect("the copy of 2020").clone();
    ends.destination.run(&["forget", &old]).expect_ok();
    let kept = originals(&ends.destination.snapshots());
    assert_eq!(kept.len(), 1);

    let skipped = ends
        .copy(&["--host", "alpha", "--after-newest-copy"])
        .expect_ok();
    assert!(
        skipped
            .stdout
            .contains("copied 0 snapshots, 1 already there"),
        "{}",
        skipped.stdout
    );
    assert_eq!(originals(&ends.destination.snapshots()), kept);

    // A new snapshot of the host is copied; the forgotten one still is not.
    let four = work.path().join("four");
    fs::create_dir_all(&four).unwrap();
    fs::write(four.join("file"), "four\n").unwrap();
    let backed_up = ends.source.run(&["backup", text(&four), "--host", "alpha"]);
    backed_up.expect_ok();
    let newest = ids_where(&ends.source.snapshots(), |s| {
        s["hostname"] == "alpha" && !alpha.contains(s["id"].as_str().unwrap())
    });
    ends.copy(&["--host", "alpha", "--after-newest-copy"])
        .expect_ok();
    let expected: BTreeSet<String> = kept.union(&newest).cloned().collect();
    assert_eq!(originals(&ends.destination.snapshots()), expected);

    // Without the flag, every snapshot the destination lacks is copied, the forgotten one too.
    ends.copy(&["--host", "alpha"]).expect_ok();
    let all: BTreeSet<String> = alpha.union(&newest).cloned().collect();
    assert_eq!(originals(&ends.destination.snapshots()), all);
}

/// Waits until the destination holds more packs than `before` while `child` still runs; false
/// when the child ended first.
fn packs_landed(ends: &Ends, child: &mut std::process::Child, before: usize) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        if ends.destination_packs() > before {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("no pack landed within 20 s");
}

#[test]
fn a_copy_killed_at_five_points_leaves_a_valid_destination_and_the_next_run_completes() {
    let Some(ends) = Ends::start("copy::a_copy_killed_at_five_points") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let mut noise = Noise::new(41);
    let mut folders = Vec::new();
    for n in 0..6 {
        let folder = work.path().join(format!("night-{n}"));
        fs::create_dir_all(&folder).unwrap();
        fs::write(folder.join("random"), noise.bytes(10 << 20)).unwrap();
        fs::write(folder.join("small"), format!("{n}")).unwrap();
        ends.source.run(&["backup", text(&folder)]).expect_ok();
        folders.push(folder);
    }
    let from = format!("rest:{}", ends.server.repo_url("source"));
    let mut landed_mid_run = 0;
    for kill in 0..5u64 {
        let before = ends.destination_packs();
        let mut command = ends.destination.command();
        command.args(["copy", "--from-repo", &from]);
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        if packs_landed(&ends, &mut child, before) {
            std::thread::sleep(Duration::from_millis(kill * 60));
            if child.try_wait().unwrap().is_none() {
                landed_mid_run += 1;
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let check = ends.destination.run(&["check"]).expect_ok();
        println!(
            "kill {kill}: {} packs, {} snapshots; {}",
            ends.destination_packs(),
            ends.destination.snapshots().len(),
            check.stdout.lines().next().unwrap_or("")
        );
    }
    assert!(
        landed_mid_run >= 3,
        "only {landed_mid_run} kills came after packs landed"
    );
    let last = ends.copy(&[]).expect_ok();
    println!("{}", last.stdout);
    ends.destination.run(&["check", "--read-data"]).expect_ok();
    let copies = ends.destination.snapshots();
    assert_eq!(
        originals(&copies),
        ids_where(&ends.source.snapshots(), |_| true)
    );
    for copy in &copies {
        let path = copy["paths"][0].as_str().unwrap();
        let folder = folders.iter().find(|f| text(f) == path).unwrap();
        ends.destination
            .restore_and_compare(copy["id"].as_str().unwrap(), folder);
    }
}

/// Peak resident memory (KiB) of a copy of every snapshot, read from the child's VmHWM.
fn copy_peak_kib(ends: &Ends) -> u64 {
    let from = format!("rest:{}", ends.server.repo_url("source"));
    let mut command = ends.destination.command();
    command.args(["copy", "--from-repo", &from, "-q"]);
    let mut child = command.spawn().unwrap();
    let status = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    while child.try_wait().unwrap().is_none() {
        if let Ok(text) = fs::read_to_string(&status) {
            if let Some(line) = text.lines().find(|l| l.starts_with("VmHWM:")) {
                let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
                peak = peak.max(kib);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(child.wait().unwrap().success());
    peak
}

/// `files` small files of distinct content in folders of 500.
fn small_files(root: &Path, files: usize) {
    let mut noise = Noise::new(files as u64);
    for n in 0..files {
        let folder = root.join(format!("d{}", n / 500));
        fs::create_dir_all(&folder).unwrap();
        fs::write(folder.join(format!("f{n}")), noise.bytes(2000)).unwrap();
    }
}

#[test]
fn copy_memory_does_not_grow_with_the_repository() {
    let mut peaks = Vec::new();
    for files in [2_000, 8_000] {
        let test = format!("copy::copy_memory_{files}");
        let Some(ends) = Ends::start(&test) else {
            return;
        };
        let work = tempfile::tempdir().unwrap();
        small_files(work.path(), files);
        ends.source.run(&["backup", text(work.path())]).expect_ok();
        let peak = copy_peak_kib(&ends);
        println!("copy of {files} small files: peak RSS {} KiB", peak);
        peaks.push(peak);
    }
    // The index of 6000 more blobs on both ends is well under 4 MiB; a copy holding what it
    // copies would grow by the 12 MB of the added files. The pack buffers and the upload budget
    // make most of the rest; the budget is 100 MiB.
    assert!(peaks[1] < peaks[0] + 4096, "peaks {peaks:?}");
    assert!(peaks[1] < 100 * 1024, "peaks {peaks:?}");
}

/// What the operator's copy Jobs read: `--init` creates a destination that does not exist yet,
/// and the result names the newest chosen snapshot by its id in the source, its time, and how
/// many snapshots this run stored.
#[test]
fn a_copy_with_init_creates_the_destination_and_its_result_names_the_newest_snapshot() {
    let Some(ends) = Ends::start("copy::a_copy_with_init_creates_the_destination") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    three_snapshots(&ends, work.path());
    let made = ends.source.snapshots();
    let newest_alpha = made
        .iter()
        .filter(|s| s["hostname"] == "alpha")
        .max_by_key(|s| s["time"].as_str().unwrap().to_owned())
        .unwrap();
    let mut fresh = Sidecar::new(format!("rest:{}", ends.server.repo_url("fresh")));
    fresh.env = ends.destination.env.clone();
    fs::write(&fresh.password_file, "a third password\n").unwrap();
    let from = format!("rest:{}", ends.server.repo_url("source"));
    let result_file = work.path().join("result.json");
    let copy = [
        "copy",
        "--from-repo",
        &from,
        "--host",
        "alpha",
        "--result-file",
    ];
    let mut args: Vec<&str> = copy.to_vec();
    args.push(text(&result_file));
    fresh.run(&args).expect_code(10);
    args.push("--init");
    fresh.run(&args).expect_ok();
    let result = super::support::sidecar::read_result(&result_file);
    let id = newest_alpha["id"].as_str().unwrap();
    assert_eq!(result.snapshot_id.as_deref(), Some(id));
    let time = |text: &str| chrono::DateTime::parse_from_rfc3339(text).unwrap();
    assert_eq!(
        time(result.snapshot_time.as_deref().unwrap()),
        time(newest_alpha["time"].as_str().unwrap())
    );
    assert_eq!(result.files, 2, "two snapshots of alpha stored");
    fresh.run(&args).expect_ok();
    let again = super::support::sidecar::read_result(&result_file);
    assert_eq!((again.files, again.snapshot_id.as_deref()), (0, Some(id)));
}

/// The bytes a copy says it read from the source (its result's `bytesRead`).
fn copy_reading(ends: &Ends, args: &[&str], work: &Path) -> u64 {
    let result = work.join("copy-result.json");
    let mut all = vec!["--result-file", text(&result)];
    all.extend_from_slice(args);
    ends.copy(&all).expect_ok();
    super::read_result(&result).bytes_read
}

#[test]
fn a_nightly_copy_reads_from_the_source_only_what_the_night_changed() {
    let Some(ends) = Ends::start("copy::a_nightly_copy_reads_only_what_changed") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let folder = work.path().join("data");
    let mut noise = Noise::new(7);
    fs::create_dir_all(folder.join("big")).unwrap();
    fs::write(folder.join("big/random"), noise.bytes(24_000_000)).unwrap();
    small_files(&folder.join("small"), 600);
    let total = 24_000_000 + 600 * 2000;
    let backup = || ends.source.run(&["backup", text(&folder)]).expect_ok();
    backup();
    let first = copy_reading(&ends, &[], work.path());
    assert!(
        first >= total,
        "the first copy read {first} of {total} bytes"
    );

    // The night: 64 KiB overwritten in the middle of the big file, a small file changed, one added.
    let mut big = fs::read(folder.join("big/random")).unwrap();
    big[12_000_000..12_065_536].copy_from_slice(&noise.bytes(65_536));
    fs::write(folder.join("big/random"), &big).unwrap();
    fs::write(folder.join("small/d0/f3"), noise.bytes(3000)).unwrap();
    fs::write(folder.join("small/d1/new"), noise.bytes(5000)).unwrap();
    backup();
    // At most the chunks the change touched (a chunk is 4 MiB at most) and the two small files.
    let night = copy_reading(&ends, &[], work.path());
    assert!(night < 10_000_000, "the nightly copy read {night} bytes");

    // `latest` alone finds the earlier copy through the snapshot's parent.
    fs::write(folder.join("small/d0/f4"), noise.bytes(4000)).unwrap();
    backup();
    let latest = copy_reading(&ends, &["latest"], work.path());
    assert!(latest < 100_000, "copying latest read {latest} bytes");

    ends.destination.run(&["check", "--read-data"]).expect_ok();
    let copies = ends.destination.snapshots();
    assert_eq!(copies.len(), 3);
    let newest = copies
        .iter()
        .max_by_key(|s| s["time"].as_str().unwrap().to_owned())
        .unwrap();
    ends.destination
        .restore_and_compare(newest["id"].as_str().unwrap(), &folder);
}

/// The disaster-recovery restore from a copy alone (a Restore with `repository` and `origin`, the
/// cluster gone): the copy keeps the plan's host, so `latest` of `--host NAMESPACE/PLAN` at the
/// destination is the plan's newest snapshot, not a newer one of another plan.
#[test]
fn latest_of_a_plans_host_restores_identically_from_the_copy_alone() {
    let Some(ends) = Ends::start("copy::latest_of_a_plans_host_restores_from_the_copy") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let mut noise = Noise::new(41);
    let mut folders = Vec::new();
    for (name, host, time) in [
        ("older", "shop/nightly", "2020-01-01T00:00:00Z"),
        ("newest", "shop/nightly", "2021-01-01T00:00:00Z"),
        ("other", "shop/weekly", "2022-01-01T00:00:00Z"),
    ] {
        let folder = work.path().join(name);
        fs::create_dir_all(folder.join("sub")).unwrap();
        fs::write(folder.join("random"), noise.bytes(300_000)).unwrap();
        fs::write(folder.join("sub/text"), format!("{name}\n").repeat(3000)).unwrap();
        std::os::unix::fs::symlink("sub/text", folder.join("link")).unwrap();
        let all = ["backup", text(&folder), "--host", host, "--time", time];
        ends.source.run(&all).expect_ok();
        folders.push(folder);
    }
    ends.copy(&[]).expect_ok();

    let target = tempfile::tempdir().unwrap();
    let restore = [
        "restore",
        "latest",
        "--host",
        "shop/nightly",
        "--target",
        text(target.path()),
    ];
    ends.destination.run(&restore).expect_ok();
    let newest = &folders[1];
    let restored = target.path().join(newest.strip_prefix("/").unwrap());
    super::assert_same_tree(newest, &restored, super::is_root());
    let other = target.path().join(folders[2].strip_prefix("/").unwrap());
    assert!(
        !other.exists(),
        "another plan's newer snapshot was restored"
    );
}

/// The bytes of every file below `dir`, and the largest file.
fn stored(dir: &Path) -> (u64, Option<PathBuf>) {
    let (mut bytes, mut largest) = (0, None::<(u64, PathBuf)>);
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in fs::read_dir(&folder).into_iter().flatten() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
                continue;
            }
            let size = fs::metadata(&path).unwrap().len();
            bytes += size;
            if largest.as_ref().is_none_or(|(most, _)| size > *most) {
                largest = Some((size, path));
            }
        }
    }
    (bytes, largest.map(|(_, path)| path))
}

#[test]
fn blobs_pass_through_compressed_and_a_damaged_one_fails_the_copy_naming_the_source() {
    let Some(ends) = Ends::start(
        "blobs_pass_through_compressed_and_a_damaged_one_fails_the_copy_naming_the_source",
    ) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let folder = work.path().join("logs");
    fs::create_dir_all(&folder).unwrap();
    for file in 0..4 {
        let line = format!("2026-12-06 file {file}: the same words again and again\n");
        fs::write(folder.join(format!("{file}.log")), line.repeat(60_000)).unwrap();
    }
    ends.source.run(&["backup", text(&folder)]).expect_ok();
    ends.copy(&[]).expect_ok();
    // The copy stores the blobs as compressed as the source does.
    let data = |repository: &str| stored(&ends.server.data_dir().join(repository).join("data"));
    let ((source_bytes, largest), (copy_bytes, _)) = (data("source"), data("destination"));
    assert!(
        source_bytes < 4 * 3_300_000 / 20 && copy_bytes < source_bytes + source_bytes / 20,
        "the source stores {source_bytes} bytes of data, its copy {copy_bytes}"
    );
    ends.destination.run(&["check", "--read-data"]).expect_ok();

    // A damaged pack at the source: the next copy (to an empty destination) fails naming the
    // source, and writes no snapshot.
    let destination = ends.server.data_dir().join("destination");
    fs::remove_dir_all(&destination).unwrap();
    ends.destination.run(&["init"]).expect_ok();
    let largest = largest.expect("a data pack");
    let mut bytes = fs::read(&largest).unwrap();
    let middle = bytes.len() / 3;
    bytes[middle] ^= 0x40;
    fs::write(&largest, bytes).unwrap();
    let failed = ends.copy(&[]);
    assert_ne!(failed.code, 0, "{}", failed.stderr);
    assert!(
        failed.stderr.contains("(--from-repo)") && failed.stderr.contains("in pack"),
        "{}",
        failed.stderr
    );
    let listed = ends.destination.run(&["snapshots", "--json"]).expect_ok();
    assert_eq!(listed.stdout.trim(), "[]", "no snapshot is written");
}
