//! `dump SNAPSHOT FOLDER` writes the tar restic 0.19 writes for the same tree: the same entries in
//! the same order, each with the same name, type, mode bits, numeric owner, time, size, link
//! target and content (SHA-256), read back by Python's `tarfile`.

use super::inspect_common::{build_tree, set_times, Restic};
use super::support::restic_binary;
use super::{initialised, text};
use std::fs;
use std::path::Path;
use std::process::Command;

/// Lists a tar's members as JSON, one array per member; owner names are left out (snapshots
/// store numeric owners only).
const LIST_TAR: &str = r#"
import hashlib, json, sys, tarfile
members = []
with tarfile.open(sys.argv[1], format=tarfile.PAX_FORMAT, encoding="utf-8",
                  errors="surrogateescape") as archive:
    for m in archive.getmembers():
        data = archive.extractfile(m).read() if m.isfile() else b""
        members.append([m.name, m.type.decode(), oct(m.mode), m.uid, m.gid, int(m.mtime),
                        m.size, m.linkname, hashlib.sha256(data).hexdigest()])
print(json.dumps(members))
"#;

/// The members of the archive at `path`, as the Python `script` (LIST_TAR or LIST_ZIP) lists them.
fn listed(script: &str, path: &Path) -> Vec<serde_json::Value> {
    let output = Command::new("python3")
        .args(["-c", script])
        .arg(path)
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn dump_of_a_folder_writes_the_tar_restic_writes() {
    let test = "dump_of_a_folder_writes_the_tar_restic_writes";
    let Some(restic_path) = restic_binary(test) else {
        return;
    };
    let (work, _repo, mut sidecar) = initialised();
    // restic runs in UTC (its snapshot records each time with the offset it backed up in, and
    // writes the zip's times in that offset); the sidecar runs in a zone half an hour off any
    // whole hour, so that a time written in local time would show.
    sidecar.env.push(("TZ".into(), "Asia/Kolkata".into()));
    let source = work.path().join("stable/source");
    build_tree(&source);
    // Names that ustar cannot hold: longer than 100 bytes, and not ASCII.
    fs::write(source.join("docs").join("n".repeat(120)), b"long name\n").unwrap();
    fs::write(source.join("docs/ünï"), b"accents\n").unwrap();
    set_times(&source);
    let restic = Restic::init(restic_path, work.path());
    restic.backup(&source, &[]);
    sidecar.run(&["backup", text(&source)]).expect_ok();

    let docs = source.join("docs");
    for folder in [&source, &docs] {
        let theirs = work.path().join("theirs.tar");
        let ours = work.path().join("ours.tar");
        restic.run(&["dump", "latest", text(folder), "--target", text(&theirs)]);
        sidecar
            .run(&["dump", "latest", text(folder), "--target", text(&ours)])
            .expect_ok();
        let (ours, theirs) = (listed(LIST_TAR, &ours), listed(LIST_TAR, &theirs));
        assert!(theirs.len() >= 8, "{theirs:?}");
        assert_eq!(ours, theirs, "dump {}", folder.display());
    }

    // To standard output, the same bytes as to --target.
    let output = sidecar
        .command()
        .args(["dump", "latest", text(&docs)])
        .output()
        .unwrap();
    assert!(output.status.success());
    let target = work.path().join("ours.tar");
    assert_eq!(output.stdout, fs::read(&target).unwrap());
}

/// Lists a zip's members as JSON, one array per member: name, Unix mode, MS-DOS time, method,
/// flags, extra fields, size and content (SHA-256).
const LIST_ZIP: &str = r#"
import hashlib, json, sys, zipfile
members = []
with zipfile.ZipFile(sys.argv[1]) as archive:
    for m in archive.infolist():
        data = archive.read(m)
        assert len(data) == m.file_size, m.filename
        members.append([m.filename, oct(m.external_attr >> 16), hex(m.external_attr & 0xffff),
                        list(m.date_time), m.compress_type, m.flag_bits, m.extra.hex(),
                        m.create_system, m.file_size, hashlib.sha256(data).hexdigest()])
print(json.dumps(members))
"#;

/// `dump --archive zip` writes the zip restic 0.19 writes: every member with the same name,
/// mode, time, method, size and content; streamed to a pipe as well; other formats refused.
#[test]
fn dump_of_a_folder_as_zip_writes_the_zip_restic_writes() {
    let test = "dump_of_a_folder_as_zip_writes_the_zip_restic_writes";
    let Some(restic_path) = restic_binary(test) else {
        return;
    };
    let (work, _repo, mut sidecar) = initialised();
    // restic runs in UTC (its snapshot records each time with the offset it backed up in, and
    // writes the zip's times in that offset); the sidecar runs in a zone half an hour off any
    // whole hour, so that a time written in local time would show.
    sidecar.env.push(("TZ".into(), "Asia/Kolkata".into()));
    let source = work.path().join("stable/source");
    build_tree(&source);
    fs::write(source.join("docs/ünï"), b"accents\n").unwrap();
    set_times(&source);
    let restic = Restic::init(restic_path, work.path());
    restic.backup(&source, &[]);
    sidecar.run(&["backup", text(&source)]).expect_ok();

    let docs = source.join("docs");
    let ours = work.path().join("ours.zip");
    for folder in [&source, &docs] {
        let theirs = work.path().join("theirs.zip");
        let zip = ["--archive", "zip", "--target"];
        restic.run(
            &[
                &["dump", "latest", text(folder)],
                &zip[..],
                &[text(&theirs)],
            ]
            .concat(),
        );
        sidecar
            .run(&[&["dump", "latest", text(folder)], &zip[..], &[text(&ours)]].concat())
            .expect_ok();
        let (ours, theirs) = (listed(LIST_ZIP, &ours), listed(LIST_ZIP, &theirs));
        assert!(theirs.len() >= 8, "{theirs:?}");
        assert_eq!(ours, theirs, "dump --archive zip {}", folder.display());
    }

    // To standard output (a pipe, which cannot seek), the same bytes as to --target.
    let output = sidecar
        .command()
        .args(["dump", "latest", text(&docs), "--archive", "zip"])
        .output()
        .unwrap();
    assert!(output.status.success());
    assert_eq!(output.stdout, fs::read(&ours).unwrap());

    let refused = sidecar
        .command()
        .args(["dump", "latest", text(&docs), "--archive", "7z"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("'7z'") && stderr.contains("tar, zip"),
        "{stderr}"
    );
}

/// A folder of more than 65535 entries dumps as restic's zip (Go writes the zip64 end records):
/// Python's `zipfile` reads the same members from both.
#[test]
fn a_zip_of_more_than_65535_entries_is_the_zip64_restic_writes() {
    let test = "a_zip_of_more_than_65535_entries_is_the_zip64_restic_writes";
    let Some(restic_path) = restic_binary(test) else {
        return;
    };
    let (work, _repo, sidecar) = initialised();
    let source = work.path().join("stable/many");
    fs::create_dir_all(&source).unwrap();
    for n in 0..70_000 {
        fs::File::create(source.join(format!("{n:05}"))).unwrap();
    }
    set_times(&source);
    let restic = Restic::init(restic_path, work.path());
    restic.backup(&source, &[]);
    sidecar.run(&["backup", text(&source)]).expect_ok();
    let (theirs, ours) = (work.path().join("theirs.zip"), work.path().join("ours.zip"));
    let zip = |target: &Path| {
        [
            "dump",
            "latest",
            text(&source),
            "--archive",
            "zip",
            "--target",
        ]
        .into_iter()
        .chain([text(target)])
        .map(str::to_owned)
        .collect::<Vec<String>>()
    };
    let theirs_args = zip(&theirs);
    restic.run(&theirs_args.iter().map(String::as_str).collect::<Vec<_>>());
    sidecar.run(&zip(&ours)).expect_ok();
    let (ours, theirs) = (listed(LIST_ZIP, &ours), listed(LIST_ZIP, &theirs));
    assert_eq!(theirs.len(), 70_000, "the files below the folder dumped");
    assert_eq!(ours, theirs);
}
