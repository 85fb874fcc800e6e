//! restic and neverwiped given the same tree and the same selection options must store the same
//! entries: restic `backup` then `restic ls --json latest`, ours `backup` then `ls --json latest`,
//! compared from the source folder down. The options: `--exclude-caches`, `--exclude-if-present`,
//! `--exclude-larger-than`, `--one-file-system` (over real tmpfs mounts) and the three
//! `--files-from` lists; the exit codes must agree too, and a refusal must give restic's reason.

use super::restic_patterns::Restic;
use super::support::fixtures::is_root;
use super::support::restic_binary;
use super::support::sidecar::run;
use super::{initialised, Sidecar};
use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use tempfile::TempDir;

/// The folder every tree is built in, below the work folder; entries are compared from it down.
const SOURCE: &str = "selsrc";

/// What one program's backup came to.
#[derive(Debug)]
struct Outcome {
    code: i32,
    stderr: String,
    /// The snapshot's entries below [`SOURCE`], folders ending in `/`; empty when it failed.
    entries: BTreeSet<String>,
}

/// restic and the sidecar, each with a repository of its own, run in one work folder.
struct Both {
    work: TempDir,
    sidecar: Sidecar,
    restic: Restic,
}

impl Both {
    fn new(test: &str) -> Option<Both> {
        let binary = restic_binary(test)?;
        let (work, _repo, sidecar) = initialised();
        let restic = Restic {
            binary,
            repo: work.path().join("restic-repo"),
        };
        restic.ok(&["init".to_owned()]);
        Some(Both {
            work,
            sidecar,
            restic,
        })
    }

    fn source(&self) -> PathBuf {
        self.work.path().join(SOURCE)
    }

    fn restic_backup(&self, args: &[&OsStr]) -> Outcome {
        let mut command = self.restic.command();
        command
            .current_dir(self.work.path())
            .arg("backup")
            .args(args);
        let output = command.output().expect("start restic");
        let code = output.status.code().unwrap_or(-1);
        let entries = match code {
            0 | 3 => entries_of(
                &self
                    .restic
                    .ok(&["ls".into(), "--json".into(), "latest".into()]),
            ),
            _ => BTreeSet::new(),
        };
        Outcome {
            code,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            entries,
        }
    }

    fn our_backup(&self, args: &[&OsStr]) -> Outcome {
        let mut command = self.sidecar.command();
        command
            .current_dir(self.work.path())
            .arg("backup")
            .args(args);
        let backup = run(command);
        let entries = match backup.code {
            0 | 3 => entries_of(
                &self
                    .sidecar
                    .run(&["ls", "--json", "latest"])
                    .expect_ok()
                    .stdout,
            ),
            _ => BTreeSet::new(),
        };
        Outcome {
            code: backup.code,
            stderr: backup.stderr,
            entries,
        }
    }

    /// Both backups with `args`: the same exit code and the same entries, which are returned.
    #[track_caller]
    fn same(&self, args: &[&OsStr]) -> Outcome {
        let theirs = self.restic_backup(args);
        let ours = self.our_backup(args);
        assert_eq!(
            ours.code, theirs.code,
            "{args:?}: restic exits {}, we exit {}\nrestic: {}\nours: {}",
            theirs.code, ours.code, theirs.stderr, ours.stderr
        );
        assert_eq!(
            ours.entries, theirs.entries,
            "{args:?}: the snapshots differ\nrestic: {}\nours: {}",
            theirs.stderr, ours.stderr
        );
        ours
    }
}

/// The entries of `ls --json` output (restic's or ours) below [`SOURCE`].
fn entries_of(listing: &str) -> BTreeSet<String> {
    listing
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|node| {
            let path = node["path"].as_str()?;
            let components: Vec<&str> = path.split('/').collect();
            let at = components.iter().position(|c| *c == SOURCE)?;
            let relative = components[at + 1..].join("/");
            let is_dir = node["type"] == "dir";
            (!relative.is_empty()).then(|| relative + if is_dir { "/" } else { "" })
        })
        .collect()
}

fn write(path: &Path, content: &[u8]) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, content).unwrap();
}

fn os<'a>(args: &[&'a str]) -> Vec<&'a OsStr> {
    args.iter().map(|arg| OsStr::new(*arg)).collect()
}

/// Tag files with and without their header and files at each size boundary, then every option
/// alone and together: each must leave out what restic leaves out, and something.
#[test]
fn tag_files_and_sizes_leave_out_what_restic_leaves_out() {
    let Some(both) =
        Both::new("restic_selection::tag_files_and_sizes_leave_out_what_restic_leaves_out")
    else {
        return;
    };
    let source = both.source();
    let signature = b"Signature: 8a477f597d28d172789f06886806bc55\n# a cache\n";
    write(&source.join("keep/a.txt"), b"abcd");
    write(&source.join("keep/deep/b.txt"), b"b");
    write(&source.join("cache/CACHEDIR.TAG"), signature);
    write(&source.join("cache/data.bin"), b"cached");
    write(&source.join("cache/sub/x"), b"x");
    write(
        &source.join("badcache/CACHEDIR.TAG"),
        b"Signature: something else",
    );
    write(&source.join("badcache/y"), b"y");
    write(&source.join("shortcache/CACHEDIR.TAG"), b"Signature: 8a47");
    write(&source.join("shortcache/y"), b"y");
    write(&source.join("keep/deep/cache/CACHEDIR.TAG"), signature);
    write(&source.join("keep/deep/cache/z"), b"z");
    write(&source.join("nobackup/.nobackup"), b"");
    write(&source.join("nobackup/z"), b"z");
    write(&source.join("nobackup/sub/z"), b"z");
    fs::create_dir_all(source.join("dirtag/.nobackup")).unwrap();
    write(&source.join("dirtag/w"), b"w");
    write(&source.join("marked/TAGME"), b"KEEPOUT and more");
    write(&source.join("marked/m1"), b"m1");
    write(&source.join("mismatch/TAGME"), b"OTHER TEXT");
    write(&source.join("mismatch/m2"), b"m2");
    write(&source.join("emptytag/TAGME"), b"");
    write(&source.join("emptytag/m3"), b"m3");
    for (name, size) in [
        ("empty", 0),
        ("four", 4),
        ("five", 5),
        ("six", 6),
        ("k1023", 1023),
        ("k1024", 1024),
        ("k1025", 1025),
    ] {
        write(&source.join("sizes").join(name), &vec![b's'; size]);
    }

    let baseline = both.same(&os(&[SOURCE]));
    assert_eq!(baseline.code, 0);
    assert!(baseline.entries.contains("cache/sub/x"));
    for options in [
        vec!["--exclude-caches"],
        vec!["--exclude-if-present", ".nobackup"],
        vec!["--exclude-if-present", "TAGME"],
        vec!["--exclude-if-present", "TAGME:KEEPOUT"],
        vec![
            "--exclude-if-present",
            "CACHEDIR.TAG:Signature: 8a477f597d28d172789f06886806bc55",
        ],
        vec![
            "--exclude-if-present",
            ".nobackup",
            "--exclude-if-present",
            "TAGME:KEEPOUT",
            "--exclude-caches",
        ],
        vec!["--exclude-larger-than", "5"],
        vec!["--exclude-larger-than", "5b"],
        vec!["--exclude-larger-than", "1k"],
        vec!["--exclude-larger-than", "1K", "--exclude-caches"],
    ] {
        let mut args = vec![SOURCE];
        args.extend(&options);
        let outcome = both.same(&os(&args));
        assert_eq!(outcome.code, 0, "{options:?}: {}", outcome.stderr);
        assert_ne!(
            outcome.entries, baseline.entries,
            "{options:?} left nothing out"
        );
    }
}

/// A tmpfs mounted on a folder for as long as it lives.
struct Mounted(PathBuf);

impl Mounted {
    /// Mounts a fresh tmpfs on `dir`; `None` (a recorded skip, or a failure where every test must
    /// run) when this process may not mount.
    fn tmpfs(dir: &Path) -> Option<Mounted> {
        fs::create_dir_all(dir).unwrap();
        let mounted = is_root()
            && Command::new("mount")
                .args(["-t", "tmpfs", "neverwiped-test"])
                .arg(dir)
                .status()
                .is_ok_and(|status| status.success());
        neverwiped_testkit::require_that(
            mounted,
            "mounting a tmpfs (root, allowed to mount)",
            "run the test as root where mount(2) is allowed",
        )
        .then(|| Mounted(dir.to_path_buf()))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Mounts inside the tree (one inside another, one given as a source of its own): with `-x`,
/// restic and the sidecar keep the mount point as an empty folder and nothing below it, but back
/// up a mounted source whole; without it, everything.
#[test]
fn one_file_system_stops_at_mount_points_as_restic_does() {
    let Some(both) =
        Both::new("restic_selection::one_file_system_stops_at_mount_points_as_restic_does")
    else {
        return;
    };
    let source = both.source();
    write(&source.join("here/a"), b"a");
    let Some(mnt) = Mounted::tmpfs(&source.join("here/mnt")) else {
        return;
    };
    write(&mnt.0.join("f"), b"f");
    write(&mnt.0.join("d/g"), b"g");
    let Some(inner) = Mounted::tmpfs(&mnt.0.join("d/inner")) else {
        return;
    };
    write(&inner.0.join("h"), b"h");
    let Some(other) = Mounted::tmpfs(&source.join("other")) else {
        return;
    };
    write(&other.0.join("o/p"), b"p");

    let everything = both.same(&os(&[SOURCE]));
    assert!(everything.entries.contains("here/mnt/d/inner/h"));
    let short = both.same(&os(&["-x", SOURCE]));
    assert!(short.entries.contains("here/mnt/") && short.entries.contains("other/"));
    assert!(!short.entries.iter().any(|e| e.starts_with("here/mnt/f")));
    assert!(!short.entries.iter().any(|e| e.starts_with("other/o")));
    let long = both.same(&os(&["--one-file-system", SOURCE]));
    assert_eq!(long.entries, short.entries);
    let mounted_source = format!("{SOURCE}/here/mnt");
    let with_mount = both.same(&os(&["-x", SOURCE, &mounted_source]));
    assert!(with_mount.entries.contains("here/mnt/d/g"));
    assert!(with_mount.entries.contains("here/mnt/d/inner/"));
    assert!(!with_mount.entries.contains("here/mnt/d/inner/h"));
    drop((inner, mnt, other));
}

/// Globs with comments and blank lines, verbatim lines, NUL-separated names of any bytes,
/// repeated and combined with arguments; a listed path that is missing; lists that name nothing;
/// malformed lists: the same snapshot, exit code and reason as restic's.
#[test]
fn files_from_lists_back_up_what_restic_backs_up() {
    let Some(both) = Both::new("restic_selection::files_from_lists_back_up_what_restic_backs_up")
    else {
        return;
    };
    let source = both.source();
    for file in [
        "a/x.txt",
        "a/y.log",
        "b/x.txt",
        "c d/e.txt",
        "#hash",
        "new\nline",
    ] {
        write(&source.join(file), file.as_bytes());
    }
    write(&source.join(OsStr::from_bytes(b"caf\xe9")), b"latin-1");
    let list = |name: &str, content: &[u8]| {
        let path = both.work.path().join(name);
        fs::write(&path, content).unwrap();
        path.into_os_string()
    };
    let globs = list(
        "globs",
        b"# a comment\n\n  selsrc/a/*.txt  \r\nselsrc/*/x.txt\nselsrc/none/*\nselsrc/c d\n",
    );
    let more_globs = list("more-globs", b"selsrc/[#]hash\n");
    let verbatim = list("verbatim", b"selsrc/#hash\n\nselsrc/b\n");
    let raw = list("raw", b"selsrc/new\nline\0selsrc/caf\xe9\0");
    let missing = list("missing", b"selsrc/b\nselsrc/not-there\n");
    let nothing = list("nothing", b"# only\nselsrc/none/*\n");
    let unended = list("unended", b"selsrc/b\0selsrc/a");
    let empty_name = list("empty-name", b"selsrc/b\0\0");
    let bad_glob = list("bad-glob", b"selsrc/[\n");
    let option = |name: &'static str| OsStr::new(name);

    let from_globs = both.same(&[option("--files-from"), &globs]);
    assert_eq!(from_globs.code, 0);
    assert!(from_globs.entries.contains("a/x.txt") && from_globs.entries.contains("c d/e.txt"));
    assert!(!from_globs.entries.contains("a/y.log"));
    assert!(from_globs.stderr.contains("selsrc/none/*"));
    let from_verbatim = both.same(&[option("--files-from-verbatim"), &verbatim]);
    assert!(from_verbatim.entries.contains("#hash") && from_verbatim.entries.contains("b/x.txt"));
    let from_raw = both.same(&[option("--files-from-raw"), &raw]);
    assert_eq!(from_raw.entries.len(), 2, "{:?}", from_raw.entries);
    let combined = both.same(&[
        option("--files-from"),
        &globs,
        option("--files-from"),
        &more_globs,
        option("--files-from-verbatim"),
        &verbatim,
        option("--files-from-raw"),
        &raw,
        option("selsrc/a/y.log"),
    ]);
    assert!(combined.entries.contains("a/y.log") && combined.entries.contains("#hash"));

    let partly_missing = both.same(&[option("--files-from-verbatim"), &missing]);
    assert_eq!(partly_missing.code, 3, "{}", partly_missing.stderr);
    assert!(partly_missing.entries.contains("b/x.txt"));

    let refused = both.same(&[option("--files-from"), &nothing]);
    assert_eq!(refused.code, 1);
    assert!(
        refused.stderr.contains("nothing to back up"),
        "{}",
        refused.stderr
    );
    for (file, reason) in [
        (&unended, "--files-from-raw: trailing zero byte missing"),
        (&empty_name, "--files-from-raw: empty filename in listing"),
    ] {
        let outcome = both.same(&[option("--files-from-raw"), file]);
        assert_eq!(outcome.code, 1);
        assert!(outcome.stderr.contains(reason), "{}", outcome.stderr);
    }
    let bad = both.same(&[option("--files-from"), &bad_glob]);
    assert_eq!(bad.code, 1);
    assert!(
        bad.stderr
            .contains("pattern: selsrc/[: syntax error in pattern"),
        "{}",
        bad.stderr
    );
}

/// Two sources, each with its own scoped options (`--exclude-caches-in`,
/// `--exclude-if-present-in`, `--exclude-larger-than-in`): our one backup holds, for each source,
/// exactly what restic's backup of that source alone with the unscoped options holds; one
/// source's options leave out nothing of the other.
#[test]
fn scoped_options_select_per_source_what_restic_selects_for_that_source_alone() {
    let Some(both) = Both::new(
        "restic_selection::scoped_options_select_per_source_what_restic_selects_for_that_source_alone",
    ) else {
        return;
    };
    let source = both.source();
    let signature = b"Signature: 8a477f597d28d172789f06886806bc55\n";
    for side in ["a", "b"] {
        let root = source.join(side);
        write(&root.join("keep/small"), b"1234");
        write(&root.join("keep/large"), &[b'l'; 2000]);
        write(&root.join("cache/CACHEDIR.TAG"), signature);
        write(&root.join("cache/data"), b"cached");
        write(&root.join("deep/nobackup/.nobackup"), b"");
        write(&root.join("deep/nobackup/z"), b"z");
        write(&root.join("marked/TAGME"), b"KEEPOUT");
        write(&root.join("marked/m"), b"m");
        write(&root.join("six"), b"sixsix");
    }
    // A tag file in a source's own folder leaves out that source's contents, as restic's does.
    write(&source.join("b/.nobackup-root"), b"");

    let restic_a = both.restic_backup(&os(&[
        "selsrc/a",
        "--exclude-caches",
        "--exclude-if-present",
        "TAGME:KEEPOUT",
        "--exclude-larger-than",
        "5",
    ]));
    let restic_b = both.restic_backup(&os(&[
        "selsrc/b/",
        "--exclude-if-present",
        ".nobackup",
        "--exclude-larger-than",
        "1k",
    ]));
    assert_eq!(
        (restic_a.code, restic_b.code),
        (0, 0),
        "{}{}",
        restic_a.stderr,
        restic_b.stderr
    );
    let ours = both.our_backup(&os(&[
        "selsrc/a",
        "selsrc/b/",
        "--exclude-caches-in",
        "selsrc/a",
        "--exclude-if-present-in",
        "selsrc/a=TAGME:KEEPOUT",
        "--exclude-larger-than-in",
        "selsrc/a=5",
        "--exclude-if-present-in",
        "selsrc/b=.nobackup",
        "--exclude-larger-than-in",
        "./selsrc/b/=1k",
    ]));
    assert_eq!(ours.code, 0, "{}", ours.stderr);
    let restic: BTreeSet<String> = restic_a.entries.union(&restic_b.entries).cloned().collect();
    assert_eq!(ours.entries, restic, "ours: {}", ours.stderr);
    // Each side's options acted on it alone.
    for (left_out, kept) in [
        ("a/cache/data", "b/cache/data"),
        ("a/marked/m", "b/marked/m"),
        ("a/six", "b/six"),
        ("b/deep/nobackup/z", "a/deep/nobackup/z"),
        ("b/keep/large", "a/keep/small"),
    ] {
        assert!(!ours.entries.contains(left_out), "{left_out} is left out");
        assert!(ours.entries.contains(kept), "{kept} is kept");
    }

    // The same with the root of `b` tagged: its contents go, `a` keeps its own.
    let tagged_root = both.our_backup(&os(&[
        "selsrc/a",
        "selsrc/b",
        "--exclude-if-present-in",
        "selsrc/b=.nobackup-root",
    ]));
    assert!(tagged_root.entries.contains("a/cache/data"));
    assert!(tagged_root.entries.contains("b/.nobackup-root"));
    assert!(
        !tagged_root.entries.contains("b/six"),
        "{:?}",
        tagged_root.entries
    );

    let outside = both.our_backup(&os(&["selsrc/a", "--exclude-caches-in", "selsrc/b"]));
    assert_eq!(outside.code, 1);
    assert!(
        outside
            .stderr
            .contains("--exclude-caches-in selsrc/b: not one of the backup's paths nor inside one"),
        "{}",
        outside.stderr
    );
}
