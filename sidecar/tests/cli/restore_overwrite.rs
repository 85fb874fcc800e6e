//! Restoring into a folder that is not empty: each `--overwrite` policy, with and without
//! `--delete`, against a target that holds identical, differing, newer, older and extra files and
//! every type conflict, held to what restic 0.19 leaves in the same target; a symlink in the
//! target is never followed; `--delete` stays inside the restored paths.

use super::support::fixtures::{facts, set_mtime, EntryFacts};
use super::support::restic_binary;
use super::{initialised, restored, text};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

const POLICIES: [&str; 4] = ["always", "if-changed", "if-newer", "never"];

/// Seconds since the epoch of a few fixed times.
const Y2020: i64 = 1_577_836_800;
const Y2021: i64 = 1_609_459_200;
const Y2025: i64 = 1_735_689_600;
const Y2030: i64 = 1_893_456_000;

/// The snapshot's side of every case; each name says what the target holds at its place.
fn build_source(source: &Path) {
    fs::create_dir_all(source.join("d")).unwrap();
    let file = |name: &str, content: &str, mtime: i64| {
        fs::write(source.join(name), content).unwrap();
        set_mtime(&source.join(name), mtime, 0);
    };
    file("identical", "same content\n", Y2020);
    file("identical_other_time", "same content\n", Y2020);
    file("same_size_and_time", "snapshot!\n", Y2020);
    file("differs_same_size", "snapshot!\n", Y2021);
    file("differs_in_size", "the snapshot's longer content\n", Y2021);
    file("newer_in_snapshot", "newer\n", Y2030);
    file("older_in_snapshot", "older\n", Y2020);
    file("missing", "only in the snapshot\n", Y2021);
    file("file_where_empty_dir", "file\n", Y2021);
    file("file_where_full_dir", "file\n", Y2021);
    file("file_where_symlink", "file\n", Y2021);
    file("d/kept", "in d\n", Y2021);
    for name in ["dir_where_file", "dir_where_symlink"] {
        fs::create_dir(source.join(name)).unwrap();
        fs::write(source.join(name).join("inside"), "inside\n").unwrap();
        set_mtime(&source.join(name).join("inside"), Y2021, 0);
    }
    symlink("identical", source.join("symlink_where_file")).unwrap();
    set_mtime(&source.join("symlink_where_file"), Y2020, 0);
    fs::set_permissions(source.join("dir_where_file"), mode(0o750)).unwrap();
}

fn mode(bits: u32) -> fs::Permissions {
    use std::os::unix::fs::PermissionsExt;
    fs::Permissions::from_mode(bits)
}

/// The target's side: what stands at each place before the restore, and extra entries. A
/// symlink points at `outside`, a folder that no restore may change.
fn prefill(place: &Path, outside: &Path) {
    fs::create_dir_all(place.join("d")).unwrap();
    let file = |name: &str, content: &str, mtime: i64| {
        fs::write(place.join(name), content).unwrap();
        set_mtime(&place.join(name), mtime, 0);
    };
    file("identical", "same content\n", Y2020);
    file("identical_other_time", "same content\n", Y2025);
    file("same_size_and_time", "in target\n", Y2020);
    file("differs_same_size", "in target\n", Y2025);
    file("differs_in_size", "short\n", Y2025);
    file("newer_in_snapshot", "was here\n", Y2025);
    file("older_in_snapshot", "was here\n", Y2025);
    file(
        "dir_where_file",
        "a file where the snapshot has a folder\n",
        Y2025,
    );
    file(
        "symlink_where_file",
        "a file where the snapshot has a symlink\n",
        Y2025,
    );
    file("extra", "not in the snapshot\n", Y2025);
    file("d/extra", "not in the snapshot\n", Y2025);
    fs::create_dir(place.join("file_where_empty_dir")).unwrap();
    fs::create_dir(place.join("file_where_full_dir")).unwrap();
    file("file_where_full_dir/held", "inside a folder\n", Y2025);
    fs::create_dir(place.join("extra_dir")).unwrap();
    file("extra_dir/held", "inside an extra folder\n", Y2025);
    for (name, to) in [
        ("file_where_symlink", Path::new("identical")),
        ("dir_where_symlink", outside),
        ("extra_symlink", outside),
    ] {
        symlink(to, place.join(name)).unwrap();
        set_mtime(&place.join(name), Y2025, 0);
    }
}

/// A folder outside every target, with a file, that symlinks in the targets point at.
fn build_outside(outside: &Path) {
    fs::create_dir_all(outside).unwrap();
    fs::write(outside.join("precious"), "never touched\n").unwrap();
    set_mtime(&outside.join("precious"), Y2021, 0);
}

/// Where each entry of the target should come from after a restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Snapshot,
    Before,
}

/// What a restore with `policy` (and `--delete`) leaves at each path below the source's place,
/// by restic's rules: a folder of the snapshot always replaces a non-folder; otherwise
/// `always`/`if-changed` replace (if-changed keeps content it takes as identical, and gives it the
/// snapshot's metadata), `if-newer` replaces what is older than the snapshot's entry, `never`
/// nothing; a folder that is not empty is replaced only with `--delete`, which also removes what
/// the snapshot lacks.
fn expected(policy: &str, delete: bool) -> BTreeMap<&'static str, Origin> {
    use Origin::{Before, Snapshot};
    let replaces = |newer_in_snapshot: bool| match policy {
        "always" | "if-changed" => Snapshot,
        "if-newer" if newer_in_snapshot => Snapshot,
        _ => Before,
    };
    let mut want = BTreeMap::from([
        ("d", Snapshot),
        ("d/kept", Snapshot),
        ("missing", Snapshot),
        ("dir_where_file", Snapshot),
        ("dir_where_file/inside", Snapshot),
        ("dir_where_symlink", Snapshot),
        ("dir_where_symlink/inside", Snapshot),
        // Same content in both: only the metadata says which.
        ("identical", replaces(false)),
        ("identical_other_time", replaces(false)),
        ("differs_same_size", replaces(false)),
        ("differs_in_size", replaces(false)),
        ("older_in_snapshot", replaces(false)),
        ("newer_in_snapshot", replaces(true)),
        ("symlink_where_file", replaces(false)),
        ("file_where_symlink", replaces(false)),
        ("file_where_empty_dir", replaces(false)),
    ]);
    // Same size and time: `if-changed` takes it as identical and keeps its bytes.
    want.insert(
        "same_size_and_time",
        if policy == "always" { Snapshot } else { Before },
    );
    let full_dir = replaces(false) == Snapshot && delete;
    want.insert(
        "file_where_full_dir",
        if full_dir { Snapshot } else { Before },
    );
    if !full_dir {
        want.insert("file_where_full_dir/held", Before);
    }
    if !delete {
        for extra in [
            "extra",
            "d/extra",
            "extra_dir",
            "extra_dir/held",
            "extra_symlink",
        ] {
            want.insert(extra, Before);
        }
    }
    want
}

/// Whether `file_where_full_dir` stays a folder (restic fails on it; neverwiped reports it).
fn blocked(policy: &str, delete: bool) -> bool {
    matches!(policy, "always" | "if-changed") && !delete
}

/// The facts of `path` as a restore should leave them, from the source or the prefilled target.
fn facts_of_origin<'a>(
    origin: Origin,
    path: &[u8],
    source: &'a BTreeMap<Vec<u8>, EntryFacts>,
    before: &'a BTreeMap<Vec<u8>, EntryFacts>,
) -> &'a EntryFacts {
    let from = match origin {
        Origin::Snapshot => source,
        Origin::Before => before,
    };
    from.get(path)
        .unwrap_or_else(|| panic!("{} is in neither tree", String::from_utf8_lossy(path)))
}

/// What two restores are compared by: kind, content, link target, mode and, but for folders,
/// modification time (a folder's time depends on what was written into it).
fn comparable(entry: &EntryFacts) -> impl PartialEq + std::fmt::Debug {
    let mtime = (entry.kind != "dir").then_some(entry.mtime);
    (
        entry.kind,
        entry.size,
        entry.sha256.clone(),
        entry.link_target.clone(),
        entry.mode,
        mtime,
    )
}

/// Checks that `place` holds exactly what `expected` says, entry by entry (SHA-256 and metadata).
fn assert_settled(
    place: &Path,
    want: &BTreeMap<&'static str, Origin>,
    source: &BTreeMap<Vec<u8>, EntryFacts>,
    before: &BTreeMap<Vec<u8>, EntryFacts>,
    case: &str,
) {
    let got = facts(place);
    let got_paths: Vec<String> = got
        .keys()
        .filter(|path| !path.is_empty())
        .map(|path| String::from_utf8_lossy(path).into_owned())
        .collect();
    let want_paths: Vec<&str> = want.keys().copied().collect();
    assert_eq!(got_paths, want_paths, "{case}: the entries of the target");
    for (path, origin) in want {
        let expected = facts_of_origin(*origin, path.as_bytes(), source, before);
        let actual = &got[path.as_bytes()];
        assert_eq!(
            comparable(actual),
            comparable(expected),
            "{case}: {path} should be as in the {origin:?}"
        );
    }
}

/// A restic repository of `source`, in `work/restic-repo`, with the password in a file.
struct Restic {
    binary: PathBuf,
    repo: PathBuf,
    password_file: PathBuf,
}

impl Restic {
    fn back_up(binary: PathBuf, work: &Path, source: &Path) -> Restic {
        let password_file = work.join("restic-password");
        fs::write(&password_file, "restic test password\n").unwrap();
        let restic = Restic {
            binary,
            repo: work.join("restic-repo"),
            password_file,
        };
        restic.run(&["init"]);
        restic.run(&["backup", text(source)]);
        restic
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.binary);
        command
            .env_clear()
            .env("RESTIC_REPOSITORY", &self.repo)
            .env("RESTIC_PASSWORD_FILE", &self.password_file)
            .env("RESTIC_CACHE_DIR", self.repo.with_extension("cache"))
            .arg("--quiet");
        command
    }

    /// Runs restic; returns its exit code and standard error.
    fn run(&self, args: &[&str]) -> (i32, String) {
        let output = self.command().args(args).output().expect("run restic");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        let code = output.status.code().unwrap_or(-1);
        assert!(code == 0 || code == 1, "restic {args:?}: {code}\n{stderr}");
        (code, stderr)
    }
}

#[test]
fn each_overwrite_policy_settles_a_filled_target_as_restic_does_and_never_follows_a_symlink() {
    let test = "each_overwrite_policy_settles_a_filled_target_as_restic_does";
    let Some(restic_path) = restic_binary(test) else {
        return;
    };
    let (work, _repo, sidecar) = initialised();
    let source = work.path().join("source");
    build_source(&source);
    let outside = work.path().join("outside");
    build_outside(&outside);
    let outside_before = facts(&outside);
    sidecar.run(&["backup", text(&source)]).expect_ok();
    let restic = Restic::back_up(restic_path, work.path(), &source);
    let source_facts = facts(&source);

    for policy in POLICIES {
        for delete in [false, true] {
            let case = format!(
                "--overwrite {policy}{}",
                if delete { " --delete" } else { "" }
            );
            let ours = work.path().join(format!("ours-{policy}-{delete}"));
            let theirs = work.path().join(format!("restic-{policy}-{delete}"));
            prefill(&restored(&ours, &source), &outside);
            prefill(&restored(&theirs, &source), &outside);
            let before = facts(&restored(&ours, &source));

            let mut args = vec!["restore", "latest", "--target", text(&ours)];
            args.extend(["--overwrite", policy]);
            let mut restic_args = vec!["restore", "latest", "--target", text(&theirs)];
            restic_args.extend(["--overwrite", policy]);
            if delete {
                args.push("--delete");
                restic_args.push("--delete");
            }
            let run = sidecar.run(&args);
            let (restic_code, restic_stderr) = restic.run(&restic_args);

            let want = expected(policy, delete);
            let place = restored(&ours, &source);
            assert_settled(&place, &want, &source_facts, &before, &case);
            assert_eq!(
                facts(&outside),
                outside_before,
                "{case}: the outside changed"
            );
            if blocked(policy, delete) {
                // Reported, the rest restored: a partial restore, as restic's failure is.
                let run = run.expect_code(3);
                assert!(
                    run.stderr.contains("file_where_full_dir") && run.stderr.contains("--delete"),
                    "{case}: {}",
                    run.stderr
                );
                assert_eq!(restic_code, 1, "{case}: {restic_stderr}");
            } else {
                run.expect_ok();
            }

            // The same entries, content and metadata as restic leaves.
            let ours_facts = facts(&place);
            let theirs_facts = facts(&restored(&theirs, &source));
            let names = |tree: &BTreeMap<Vec<u8>, EntryFacts>| -> Vec<String> {
                tree.keys()
                    .map(|path| String::from_utf8_lossy(path).into_owned())
                    .collect()
            };
            assert_eq!(
                names(&ours_facts),
                names(&theirs_facts),
                "{case}: other entries than restic's ({restic_stderr})"
            );
            for (path, entry) in &ours_facts {
                if path.is_empty() {
                    continue;
                }
                if blocked(policy, delete) && path == b"file_where_full_dir" {
                    // restic gives the folder it failed to replace the file's mode; it is left
                    // untouched here.
                    assert_eq!(entry.kind, theirs_facts[path].kind, "{case}");
                    continue;
                }
                assert_eq!(
                    comparable(entry),
                    comparable(&theirs_facts[path]),
                    "{case}: {} differs from restic's",
                    String::from_utf8_lossy(path)
                );
            }
        }
    }
}

#[test]
fn a_symlink_where_a_full_folder_belongs_is_replaced_with_delete_and_its_target_untouched() {
    let (work, _repo, sidecar) = initialised();
    let source = work.path().join("source");
    fs::create_dir_all(&source).unwrap();
    fs::write(source.join("file"), "a file\n").unwrap();
    symlink("elsewhere", source.join("link")).unwrap();
    sidecar.run(&["backup", text(&source)]).expect_ok();
    let outside = work.path().join("outside");
    build_outside(&outside);
    let outside_before = facts(&outside);

    let target = work.path().join("target");
    let place = restored(&target, &source);
    fs::create_dir_all(place.join("link/sub")).unwrap();
    symlink(&outside, place.join("link/sub/to-outside")).unwrap();
    let restore = |extra: &[&str]| {
        let mut args = vec!["restore", "latest", "--target", text(&target)];
        args.extend(extra);
        sidecar.run(&args)
    };
    // Without --delete the folder stays, and the run says so.
    let run = restore(&[]).expect_code(3);
    assert!(run.stderr.contains("--delete"), "{}", run.stderr);
    assert!(place.join("link/sub/to-outside").is_symlink());
    // With it, the folder goes (its symlink removed, not followed) and the symlink is restored.
    restore(&["--delete"]).expect_ok();
    assert_eq!(
        fs::read_link(place.join("link")).unwrap(),
        Path::new("elsewhere")
    );
    assert_eq!(facts(&outside), outside_before);
    super::fixtures::assert_same_tree(&source, &place, super::is_root());
}

#[test]
fn delete_removes_only_inside_the_included_paths() {
    let (work, _repo, sidecar) = initialised();
    let source = work.path().join("source");
    build_source(&source);
    sidecar.run(&["backup", text(&source)]).expect_ok();
    let outside = work.path().join("outside");
    build_outside(&outside);
    let outside_before = facts(&outside);
    let target = work.path().join("target");
    let place = restored(&target, &source);
    prefill(&place, &outside);
    symlink(&outside, place.join("d/to-outside")).unwrap();
    let before = facts(&place);

    let include = format!("{}/d", text(&source));
    sidecar
        .run(&[
            "restore",
            "latest",
            "--target",
            text(&target),
            "--include",
            &include,
            "--delete",
        ])
        .expect_ok();
    let after = facts(&place);
    // Inside the include: exactly the snapshot's entries.
    super::fixtures::assert_same_tree(&source.join("d"), &place.join("d"), super::is_root());
    // Outside it, every entry as it was (the folder above only lost d's extras).
    for (path, entry) in &before {
        if path.is_empty() || path == b"d" || path.starts_with(b"d/") {
            continue;
        }
        assert_eq!(
            after.get(path),
            Some(entry),
            "{} changed",
            String::from_utf8_lossy(path)
        );
    }
    assert_eq!(facts(&outside), outside_before);
}
