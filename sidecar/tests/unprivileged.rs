//! The sidecar as an unprivileged mover runs it: this build's `neverwiped-sidecar` started as a
//! non-root user with no capabilities, against a real rest-server, over trees of other owners.
//!
//! A backup reads what its user may read: a file or folder it may not is a warning of a partial
//! run (exit 3) and everything else is kept; a run that could read nothing fails (exit 1) and
//! stores no snapshot. A restore makes what its user may make: a device file is skipped with a
//! warning, and so is a set-group-ID bit the kernel cleared; root with the capabilities a
//! privileged Restore pod gets restores both.
//!
//! The tests run as root (to give files other owners and to switch user) with `setpriv`; without
//! them they fail under CI and skip loudly elsewhere (`neverwiped_testkit::require_that`).

mod support;

use neverwiped_contract::{ExitStatus, RunResult};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use support::fixtures::{facts, is_root, EntryFacts, Noise};
use support::sidecar::{bare_command, Run, SIDECAR_BIN, SIDECAR_VARIABLES};
use support::{RestServer, RestServerOptions};
use tempfile::TempDir;

/// The user the unprivileged runs are, as a pod's `runAsUser` / `runAsGroup` (no passwd entry:
/// a pod's user rarely has one either).
const MOVER: u32 = 4242;
/// The owner of the files the mover may not read.
const OTHER: u32 = 4343;
/// A group the mover is not in.
const OTHER_GROUP: u32 = 4444;

const PASSWORD: &str = "unprivileged test password";

/// The capabilities a privileged Restore pod adds (`operator/src/job/restore.rs`), as `setpriv`
/// names them.
const RESTORE_CAPABILITIES: &str = "+chown,+dac_override,+fowner,+fsetid,+mknod";

/// A rest-server with a repository, a work folder every user may enter, and the password in a
/// file only the mover (and root) may read.
struct Setup {
    server: RestServer,
    work: TempDir,
    password_file: PathBuf,
}

impl Setup {
    /// `None` (after saying why) when not root or when rest-server is missing outside CI.
    fn start(test: &str) -> Option<Setup> {
        if !neverwiped_testkit::require_that(
            is_root(),
            format_args!("{test} switches to another user, which needs root"),
            "run the tests as root (scripts/test.sh does)",
        ) || !neverwiped_testkit::require_that(
            neverwiped_testkit::program("setpriv").is_some(),
            "setpriv is not on PATH",
            "install Debian's util-linux",
        ) {
            return None;
        }
        let server = RestServer::start(test, RestServerOptions::default())?;
        let work = tempfile::tempdir().unwrap();
        fs::set_permissions(work.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let password_file = work.path().join("password");
        fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
        owned(&password_file, MOVER, MOVER, 0o400);
        let setup = Setup {
            server,
            work,
            password_file,
        };
        setup.as_root(&["init"]).expect_ok();
        Some(setup)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.work.path().join(name)
    }

    /// `command` pointed at the repository, with the password file.
    fn configure(&self, mut command: Command) -> Command {
        command
            .arg("--repo")
            .arg(format!("rest:{}", self.server.url()))
            .env("NEVERWIPED_PASSWORD_FILE", &self.password_file);
        command
    }

    fn as_root<S: AsRef<OsStr>>(&self, args: &[S]) -> Run {
        let mut command = self.configure(bare_command());
        command.args(args);
        support::sidecar::run(command)
    }

    /// A run as the mover: its user and group, no supplementary groups (the standard library
    /// clears them when root sets a user without giving groups), hence no capabilities.
    fn as_mover<S: AsRef<OsStr>>(&self, args: &[S], result_file: &Path) -> Run {
        let mut command = self.configure(bare_command());
        command.uid(MOVER).gid(MOVER).args(args);
        command.arg("--result-file").arg(result_file);
        let output = command.output().expect("start neverwiped-sidecar");
        Run::from_output(output, Some(result_file))
    }

    /// A run as root with only the capabilities `plus` (`+chown,+fowner`…) in its bounding
    /// set and none inheritable: what a container that drops ALL and adds those gets.
    fn as_root_with<S: AsRef<OsStr>>(&self, plus: &str, args: &[S], result_file: &Path) -> Run {
        let mut command = Command::new("setpriv");
        command
            .arg("--inh-caps=-all")
            .arg(format!("--bounding-set=-all,{plus}"))
            .arg("--")
            .arg(SIDECAR_BIN);
        for name in SIDECAR_VARIABLES {
            command.env_remove(name);
        }
        let mut command = self.configure(command);
        command.args(args).arg("--result-file").arg(result_file);
        let output = command.output().expect("start setpriv");
        Run::from_output(output, Some(result_file))
    }

    /// A folder the mover may write its result files into.
    fn results(&self) -> PathBuf {
        let dir = self.path("results");
        if !dir.exists() {
            fs::create_dir(&dir).unwrap();
            owned(&dir, MOVER, MOVER, 0o700);
        }
        dir
    }

    /// The snapshot objects the server stores, whatever any client says.
    fn stored_snapshots(&self) -> Vec<PathBuf> {
        let dir = self.server.data_dir().join("repo/snapshots");
        match fs::read_dir(&dir) {
            Ok(entries) => entries.map(|entry| entry.unwrap().path()).collect(),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(error) => panic!("{}: {error}", dir.display()),
        }
    }

    /// Restores `snapshot` as root (every owner restored) into a fresh folder; returns where
    /// `source` landed in it.
    fn restore_as_root(&self, snapshot: &str, source: &Path, name: &str) -> PathBuf {
        let target = self.path(name);
        self.as_root(&[
            OsStr::new("restore"),
            OsStr::new(snapshot),
            OsStr::new("--target"),
            target.as_os_str(),
        ])
        .expect_ok();
        target.join(source.strip_prefix("/").unwrap())
    }
}

/// Gives `path` an owner, group and mode (the mode last: a change of owner clears set-ID bits).
fn owned(path: &Path, uid: u32, gid: u32, mode: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid)).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

fn file(path: &Path, bytes: &[u8], uid: u32, gid: u32, mode: u32) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, bytes).unwrap();
    owned(path, uid, gid, mode);
}

fn folder(path: &Path, uid: u32, gid: u32, mode: u32) {
    fs::create_dir_all(path).unwrap();
    owned(path, uid, gid, mode);
}

/// The result of a run that must have written one.
#[track_caller]
fn result_of(run: &Run) -> &RunResult {
    run.result
        .as_ref()
        .unwrap_or_else(|| panic!("no result file; stderr:\n{}", run.stderr))
}

/// `facts` of a tree without the entries named (relative paths).
fn facts_without(root: &Path, left_out: &[&str]) -> BTreeMap<Vec<u8>, EntryFacts> {
    let mut all = facts(root);
    for path in left_out {
        let removed = all.remove(path.as_bytes());
        assert!(removed.is_some(), "{path} is not in {}", root.display());
    }
    all
}

/// A readable tree below `root`: files of the mover and of another owner that everyone may read,
/// a nested folder, times set after the content.
fn readable_tree(root: &Path) {
    folder(root, 0, 0, 0o755);
    file(
        &root.join("index.html"),
        b"<h1>shop</h1>\n",
        OTHER,
        OTHER,
        0o644,
    );
    file(&root.join("own/notes.txt"), b"mine\n", MOVER, MOVER, 0o600);
    folder(&root.join("own"), MOVER, MOVER, 0o700);
    let photo = Noise::new(3).bytes(700_000);
    file(&root.join("media/photo.jpg"), &photo, OTHER, OTHER, 0o640);
    // Readable through its group only: the run's own group.
    owned(&root.join("media/photo.jpg"), OTHER, MOVER, 0o640);
    folder(&root.join("media"), OTHER, OTHER, 0o755);
}

#[test]
fn a_backup_that_could_read_no_file_fails_and_stores_no_snapshot() {
    let Some(setup) = Setup::start("unprivileged_nothing_readable") else {
        return;
    };
    let source = setup.path("volume");
    folder(&source, 0, 0, 0o755);
    file(&source.join("a.key"), b"private a\n", OTHER, OTHER, 0o600);
    file(
        &source.join("sub/b.db"),
        b"private b\n",
        OTHER,
        OTHER,
        0o600,
    );
    // The folder itself may be listed: only its files are out of reach.
    folder(&source.join("sub"), OTHER, OTHER, 0o755);
    let result_file = setup.results().join("nothing.json");

    let run = setup
        .as_mover(&[OsStr::new("backup"), source.as_os_str()], &result_file)
        .expect_code(ExitStatus::Failed.code());
    let result = result_of(&run);
    assert_eq!(result.status, ExitStatus::Failed);
    assert!(result.snapshot_id.is_none(), "{result:?}");
    let error = result.error.clone().expect("a failed run has an error");
    assert!(
        error.contains("nothing could be read") && error.contains("a.key"),
        "the error must say that nothing could be read, and what: {error}"
    );
    assert!(
        run.error_line().contains("nothing could be read"),
        "{}",
        run.stderr
    );
    // `--allow-empty` says an empty input is expected: these files are there, only unreadable.
    let allowing = setup
        .as_mover(
            &[
                OsStr::new("backup"),
                source.as_os_str(),
                OsStr::new("--allow-empty"),
            ],
            &result_file,
        )
        .expect_code(ExitStatus::Failed.code());
    assert!(
        allowing.error_line().contains("nothing could be read"),
        "{}",
        allowing.stderr
    );
    // Nothing that claims a backup is stored: not in a listing, not on the server.
    assert_eq!(setup.stored_snapshots(), Vec::<PathBuf>::new());
    let listed = setup.as_root(&["snapshots", "--json"]).expect_ok();
    assert_eq!(listed.stdout.trim(), "[]", "{}", listed.stdout);
}

#[test]
fn one_unreadable_file_is_a_warning_of_a_partial_backup_that_keeps_every_readable_file() {
    let Some(setup) = Setup::start("unprivileged_one_unreadable_file") else {
        return;
    };
    let source = setup.path("volume");
    readable_tree(&source);
    let secret = source.join("config/app.key");
    file(&secret, b"not for the mover\n", OTHER, OTHER, 0o600);
    folder(&source.join("config"), OTHER, OTHER, 0o755);
    let result_file = setup.results().join("partial.json");

    let run = setup
        .as_mover(&[OsStr::new("backup"), source.as_os_str()], &result_file)
        .expect_code(ExitStatus::Partial.code());
    let result = result_of(&run);
    assert_eq!(result.status, ExitStatus::Partial);
    assert!(result.error.is_none(), "{result:?}");
    assert_eq!(result.warnings_total, 1, "{:?}", result.warnings);
    let warning = &result.warnings[0];
    assert!(
        warning.contains(&secret.display().to_string()) && warning.contains("ermission denied"),
        "{warning}"
    );
    assert_eq!(result.files, 3, "{result:?}");
    assert_eq!(setup.stored_snapshots().len(), 1);

    let snapshot = result
        .snapshot_id
        .clone()
        .expect("a partial run stores a snapshot");
    let restored = setup.restore_as_root(&snapshot, &source, "restored");
    assert_eq!(
        facts(&restored),
        facts_without(&source, &["config/app.key"]),
        "every readable entry is restored with its content and metadata"
    );
}

#[test]
fn an_unreadable_folder_is_a_warning_and_the_folders_beside_it_are_kept() {
    let Some(setup) = Setup::start("unprivileged_unreadable_folder") else {
        return;
    };
    let source = setup.path("volume");
    readable_tree(&source);
    let private = source.join("private");
    file(&private.join("invoice.pdf"), b"%PDF\n", OTHER, OTHER, 0o644);
    folder(&private, OTHER, OTHER, 0o700);
    let result_file = setup.results().join("folder.json");

    let run = setup
        .as_mover(&[OsStr::new("backup"), source.as_os_str()], &result_file)
        .expect_code(ExitStatus::Partial.code());
    let result = result_of(&run);
    assert_eq!(result.status, ExitStatus::Partial);
    assert_eq!(result.warnings_total, 1, "{:?}", result.warnings);
    assert!(
        result.warnings[0].contains(&private.display().to_string()),
        "{:?}",
        result.warnings
    );

    let snapshot = result.snapshot_id.clone().expect("a snapshot");
    let restored = setup.restore_as_root(&snapshot, &source, "restored");
    assert_eq!(
        facts(&restored),
        facts_without(&source, &["private", "private/invoice.pdf"]),
        "the folders beside the unreadable one are restored whole"
    );
}

/// A tree with what restoring needs capabilities for: a character device (`mknod c 1 3`) and a
/// set-group-ID file of a group the restoring process is not in, beside a plain file.
fn special_tree(root: &Path) {
    folder(root, 0, 0, 0o755);
    file(&root.join("plain.txt"), b"plain\n", OTHER, OTHER, 0o644);
    file(
        &root.join("bin/tool"),
        b"#!/bin/sh\n",
        OTHER,
        OTHER_GROUP,
        0o2755,
    );
    folder(&root.join("bin"), OTHER, OTHER_GROUP, 0o755);
    nix::sys::stat::mknod(
        &root.join("null"),
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o660),
        nix::sys::stat::makedev(1, 3),
    )
    .unwrap();
    owned(&root.join("null"), OTHER, OTHER_GROUP, 0o660);
}

#[test]
fn root_with_the_privileged_restore_capabilities_restores_devices_and_setgid_bits() {
    let Some(setup) = Setup::start("restore_with_mknod_and_fsetid") else {
        return;
    };
    let source = setup.path("volume");
    special_tree(&source);
    setup
        .as_root(&[OsStr::new("backup"), source.as_os_str()])
        .expect_ok();
    let target = setup.path("restored");
    let result_file = setup.path("restore.json");

    let run = setup
        .as_root_with(
            RESTORE_CAPABILITIES,
            &[
                OsStr::new("restore"),
                OsStr::new("latest"),
                OsStr::new("--target"),
                target.as_os_str(),
            ],
            &result_file,
        )
        .expect_ok();
    assert_eq!(result_of(&run).warnings, Vec::<String>::new());
    let restored = target.join(source.strip_prefix("/").unwrap());
    assert_eq!(facts(&restored), facts(&source));
    let device = fs::symlink_metadata(restored.join("null")).unwrap();
    assert_eq!(device.rdev(), nix::sys::stat::makedev(1, 3));
    assert_eq!(
        fs::symlink_metadata(restored.join("bin/tool"))
            .unwrap()
            .mode()
            & 0o7777,
        0o2755
    );
}

#[test]
fn an_unprivileged_restore_skips_devices_and_says_when_the_kernel_cleared_a_setgid_bit() {
    let Some(setup) = Setup::start("unprivileged_restore_of_special_files") else {
        return;
    };
    let source = setup.path("volume");
    special_tree(&source);
    setup
        .as_root(&[OsStr::new("backup"), source.as_os_str()])
        .expect_ok();
    // The target volume's root as a provisioner may make it: the mover's, set-group-ID with a
    // group the mover is not in, so that what it creates gets that group.
    let target = setup.path("restored");
    folder(&target, MOVER, OTHER_GROUP, 0o2775);
    let result_file = setup.results().join("restore.json");

    let run = setup
        .as_mover(
            &[
                OsStr::new("restore"),
                OsStr::new("latest"),
                OsStr::new("--target"),
                target.as_os_str(),
            ],
            &result_file,
        )
        .expect_code(ExitStatus::Partial.code());
    let result = result_of(&run);
    assert_eq!(result.status, ExitStatus::Partial, "never a failed run");
    let restored = target.join(source.strip_prefix("/").unwrap());
    let device = restored.join("null").display().to_string();
    let tool = restored.join("bin/tool").display().to_string();
    assert_eq!(result.warnings_total, 2, "{:?}", result.warnings);
    assert!(
        result
            .warnings
            .iter()
            .any(|w| w.contains("skipped the device file") && w.contains(&device)),
        "{:?}",
        result.warnings
    );
    assert!(
        result
            .warnings
            .iter()
            .any(|w| w.contains("set-group-ID") && w.contains(&tool)),
        "{:?}",
        result.warnings
    );
    assert!(fs::symlink_metadata(restored.join("null")).is_err());
    // Everything else is back with its content, mode and time (the owners are the mover's).
    let strip = |all: BTreeMap<Vec<u8>, EntryFacts>| -> BTreeMap<Vec<u8>, _> {
        all.into_iter()
            .map(|(path, f)| (path, (f.kind, f.mode & 0o5777, f.mtime, f.sha256)))
            .collect()
    };
    assert_eq!(
        strip(facts(&restored)),
        strip(facts_without(&source, &["null"]))
    );
    assert_eq!(fs::read(restored.join("bin/tool")).unwrap(), b"#!/bin/sh\n");
}
