//! `restore --verify` reads every restored file back and holds it to the snapshot (restic's
//! flag); `restore --verify-only` does the same to a target without restoring. A file whose
//! content, size, mode or time differs is named, and the run exits `VerifyFailed` (14).

use super::support::fixtures::{assert_same_tree, facts, is_root, set_mtime, Noise};
use super::support::sidecar::read_result;
use super::{initialised, restored, text};
use neverwiped_contract::ExitStatus;
use std::fs;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::Path;

/// The regular files below `root` and the bytes they hold, as a verification counts them.
fn files_and_bytes(root: &Path) -> (u64, u64) {
    let files: Vec<_> = facts(root)
        .into_values()
        .filter(|entry| entry.kind == "file")
        .collect();
    (
        files.len() as u64,
        files.iter().map(|entry| entry.size).sum(),
    )
}

#[test]
fn restore_verify_reads_back_every_file_and_reports_counts_bytes_and_both_durations() {
    let (work, _repo, sidecar) = initialised();
    let source = work.path().join("source");
    // Several chunks (9 MiB), small, empty and sparse files, symlinks, hard links, odd names.
    super::fixtures::build_fidelity_tree(&source);
    sidecar.run(&["backup", text(&source)]).expect_ok();
    let (files, bytes) = files_and_bytes(&source);
    assert!(files >= 14 && bytes > 9 * 1024 * 1024, "{files} {bytes}");

    let target = work.path().join("target");
    let result_file = work.path().join("result.json");
    let run = sidecar
        .run(&[
            "restore",
            "latest",
            "--target",
            text(&target),
            "--verify",
            "--json",
            "--result-file",
            text(&result_file),
        ])
        .expect_ok();
    assert_same_tree(&source, &restored(&target, &source), is_root());
    // Asserts inside when python3 with jsonschema is there.
    super::exact_names::matches_schema("restore.json", &run.stdout, false);
    let printed: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    let verification = &printed["verification"];
    assert_eq!(verification["files"], files, "{printed}");
    assert_eq!(verification["bytes"], bytes, "{printed}");
    assert_eq!(verification["mismatched"], 0, "{printed}");
    let result = read_result(&result_file);
    assert_eq!(result.status, ExitStatus::Success);
    let stats = result.verification.expect("the verification in the result");
    assert_eq!(
        (stats.files, stats.bytes, stats.mismatched),
        (files, bytes, 0)
    );
    assert!(
        stats.restore_secs.is_some_and(|secs| secs > 0.0),
        "{stats:?}"
    );
    assert!(stats.verify_secs > 0.0, "{stats:?}");

    // Only what --include restored is verified; the summary line says how much.
    let partial = work.path().join("partial");
    let included = source.join("dir");
    let run = sidecar
        .run(&[
            "restore",
            "latest",
            "--target",
            text(&partial),
            "--include",
            text(&included),
            "--verify",
        ])
        .expect_ok();
    let (files, bytes) = files_and_bytes(&included);
    let summary = format!("verified {files} files, {bytes} bytes in ");
    assert!(run.stdout.contains(&summary), "{summary}: {}", run.stdout);
}

#[test]
fn verify_only_names_each_altered_file_and_fails_with_its_own_exit_status() {
    let (work, _repo, sidecar) = initialised();
    let source = work.path().join("source");
    fs::create_dir_all(&source).unwrap();
    let mut noise = Noise::new(41);
    for (name, size) in [
        ("altered.bin", 6 * 1024 * 1024),
        ("truncated.bin", 5 * 1024 * 1024),
        ("chmodded.txt", 100),
        ("untouched.bin", 3 * 1024 * 1024),
    ] {
        fs::write(source.join(name), noise.bytes(size)).unwrap();
        set_mtime(&source.join(name), 1_700_000_000, 41);
    }
    sidecar.run(&["backup", text(&source)]).expect_ok();
    let target = work.path().join("target");
    sidecar
        .run(&["restore", "latest", "--target", text(&target)])
        .expect_ok();
    let verify_only = |result_file: &Path| {
        sidecar.run(&[
            "restore",
            "latest",
            "--target",
            text(&target),
            "--verify-only",
            "--result-file",
            text(result_file),
        ])
    };
    let untouched = work.path().join("untouched.json");
    let run = verify_only(&untouched).expect_ok();
    assert!(
        run.stdout.contains("verified 4 files, 14680164 bytes in "),
        "{}",
        run.stdout
    );

    // One byte changed in the middle, its time put back: only its content tells.
    let place = restored(&target, &source);
    let altered = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(place.join("altered.bin"))
        .unwrap();
    let mut byte = [0u8];
    altered.read_exact_at(&mut byte, 3_000_000).unwrap();
    altered.write_all_at(&[byte[0] ^ 1], 3_000_000).unwrap();
    drop(altered);
    set_mtime(&place.join("altered.bin"), 1_700_000_000, 41);
    let truncated = fs::OpenOptions::new()
        .write(true)
        .open(place.join("truncated.bin"))
        .unwrap();
    truncated.set_len(1024 * 1024).unwrap();
    drop(truncated);
    set_mtime(&place.join("truncated.bin"), 1_700_000_000, 41);
    fs::set_permissions(
        place.join("chmodded.txt"),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();

    let result_file = work.path().join("result.json");
    let run = verify_only(&result_file).expect_code(14);
    let result = read_result(&result_file);
    assert_eq!(result.status, ExitStatus::VerifyFailed);
    let error = result.error.expect("an error");
    for named in [
        "altered.bin (content differs",
        "truncated.bin (size 1048576",
        "chmodded.txt (mode 0600",
    ] {
        assert!(error.contains(named), "{named}: {error}");
    }
    assert!(!error.contains("untouched"), "{error}");
    assert!(error.contains("3 of 4 files differ"), "{error}");
    assert!(run.error_line().contains("altered.bin"), "{}", run.stderr);
    let stats = result.verification.expect("the verification in the result");
    assert_eq!(
        (stats.files, stats.mismatched, stats.restore_secs),
        (4, 3, None)
    );
}

#[test]
fn restore_verify_holds_files_the_restore_left_in_place_to_the_snapshot() {
    let (work, _repo, sidecar) = initialised();
    let source = work.path().join("source");
    fs::create_dir_all(&source).unwrap();
    fs::write(source.join("kept.txt"), "the snapshot's content\n").unwrap();
    fs::write(source.join("new.txt"), "restored\n").unwrap();
    sidecar.run(&["backup", text(&source)]).expect_ok();
    let target = work.path().join("target");
    let place = restored(&target, &source);
    fs::create_dir_all(&place).unwrap();
    fs::write(place.join("kept.txt"), "what the target held\n").unwrap();

    let run = sidecar
        .run(&[
            "restore",
            "latest",
            "--target",
            text(&target),
            "--overwrite",
            "never",
            "--verify",
        ])
        .expect_code(14);
    let error = run.error_line();
    assert!(
        error.contains("kept.txt (size 21, the snapshot's 23"),
        "{error}"
    );
    assert!(!error.contains("new.txt"), "{error}");
}

#[test]
fn verify_only_names_a_few_dozen_files_counts_the_rest_and_lists_them_in_json() {
    let (work, _repo, sidecar) = initialised();
    let source = work.path().join("source");
    fs::create_dir_all(&source).unwrap();
    for n in 0..35 {
        fs::write(source.join(format!("file-{n:02}")), format!("{n}\n")).unwrap();
    }
    sidecar.run(&["backup", text(&source)]).expect_ok();
    let target = work.path().join("target");
    sidecar
        .run(&["restore", "latest", "--target", text(&target)])
        .expect_ok();
    let place = restored(&target, &source);
    for n in 0..35 {
        let file = place.join(format!("file-{n:02}"));
        fs::set_permissions(&file, fs::Permissions::from_mode(0o604)).unwrap();
    }

    let run = sidecar
        .run(&[
            "restore",
            "latest",
            "--target",
            text(&target),
            "--verify-only",
            "--json",
        ])
        .expect_code(14);
    let error = run.error_line();
    assert!(error.contains("35 of 35 files differ"), "{error}");
    assert!(error.contains("file-29 (mode 0604"), "{error}");
    assert!(!error.contains("file-30"), "{error}");
    assert!(error.ends_with(" and 5 more"), "{error}");
    let printed: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    let verification = &printed["verification"];
    assert_eq!(verification["mismatched"], 35, "{printed}");
    assert_eq!(
        verification["mismatches"].as_array().map(Vec::len),
        Some(30)
    );
    assert!(verification.get("restoreSecs").is_none(), "{printed}");
}
