//! A restore that stops part way leaves an honest tree: no file that looks whole and is not,
//! every folder with its own mode and times, one line saying which file and why, exit 3.

use super::support::fixtures::{facts, set_mtime, Noise};
use super::support::sidecar::read_result;
use super::{initialised, restored, text, Tmpfs};
use neverwiped_contract::ExitStatus;
use std::fs;
use std::os::unix::fs::PermissionsExt;

#[test]
fn a_restore_onto_a_full_disk_stops_partial_leaving_only_whole_files_and_finished_folders() {
    let Some(small_disk) = Tmpfs::mount("a_restore_onto_a_full_disk_stops_partial", "16m") else {
        return;
    };
    let (work, _repo, sidecar) = initialised();
    let source = work.path().join("source");
    // Restored in name order: small files and folders first, then more than the disk holds.
    for dir in ["a_first", "a_first/nested", "b_big", "c_after"] {
        fs::create_dir_all(source.join(dir)).unwrap();
    }
    let mut noise = Noise::new(8);
    for (name, bytes) in [
        ("a_first/small.txt", 1000),
        ("a_first/nested/medium.bin", 300_000),
        ("b_big/part-0.bin", 8 * 1024 * 1024),
        ("b_big/part-1.bin", 8 * 1024 * 1024),
        ("b_big/part-2.bin", 8 * 1024 * 1024),
        ("c_after/small.txt", 1000),
    ] {
        fs::write(source.join(name), noise.bytes(bytes)).unwrap();
        set_mtime(&source.join(name), 1_600_000_000, 5);
    }
    for (dir, mode) in [
        ("a_first", 0o750),
        ("a_first/nested", 0o705),
        ("b_big", 0o755),
        ("c_after", 0o711),
    ] {
        fs::set_permissions(source.join(dir), fs::Permissions::from_mode(mode)).unwrap();
        set_mtime(&source.join(dir), 1_500_000_000, 7);
    }
    sidecar.run(&["backup", text(&source)]).expect_ok();

    let result_file = work.path().join("result.json");
    let run = sidecar
        .run(&[
            "restore",
            "latest",
            "--target",
            text(small_disk.path()),
            "--result-file",
            text(&result_file),
        ])
        .expect_code(3);
    let error = run.error_line();
    assert!(error.contains("no space left on the device"), "{error}");
    assert!(!error.contains("writing writing"), "{error}");
    assert!(error.contains("b_big/part-"), "names the file: {error}");
    let result = read_result(&result_file);
    assert_eq!(result.status, ExitStatus::Partial);
    let message = result.error.expect("an error");
    assert!(!message.contains('\n'), "one line: {message:?}");

    // Every entry left is as in the snapshot (a file whole, with its metadata; a folder with its
    // mode and times); what is missing is missing, not cut short.
    let want = facts(&source);
    let got = facts(&restored(small_disk.path(), &source));
    assert!(!got.is_empty(), "nothing restored");
    let mut missing_files = 0;
    for (path, expected) in &want {
        let name = String::from_utf8_lossy(path);
        match got.get(path) {
            Some(actual) => {
                let (mut actual_cmp, mut expected_cmp) =
                    (format!("{actual:?}"), format!("{expected:?}"));
                if !super::is_root() {
                    // Owners are only restored as root.
                    actual_cmp = format!(
                        "{:?}",
                        (
                            actual.kind,
                            actual.mode,
                            actual.mtime,
                            actual.size,
                            &actual.sha256
                        )
                    );
                    expected_cmp = format!(
                        "{:?}",
                        (
                            expected.kind,
                            expected.mode,
                            expected.mtime,
                            expected.size,
                            &expected.sha256
                        )
                    );
                }
                assert_eq!(actual_cmp, expected_cmp, "{name} is not as in the snapshot");
            }
            None => {
                assert_eq!(expected.kind, "file", "the folder {name} is missing");
                missing_files += 1;
            }
        }
    }
    assert!(missing_files > 0, "the disk was not filled");
    assert!(got.keys().all(|path| want.contains_key(path)));
    // The removed file is named as such.
    assert!(error.contains("removed"), "{error}");

    // Nothing in the repository was harmed.
    sidecar.restore_and_compare("latest", &source);
}
