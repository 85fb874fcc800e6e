//! The CLI as a user meets it: `neverwiped-sidecar` run as a separate process, with secrets from
//! files and the environment only, its exit codes, its JSON result file, its messages.

#[path = "cli/backup_changes.rs"]
mod backup_changes;
#[path = "cli/copy.rs"]
mod copy;
#[path = "cli/copy_bad_day.rs"]
mod copy_bad_day;
#[path = "cli/describe.rs"]
mod describe;
#[path = "cli/dry_run.rs"]
mod dry_run;
#[path = "cli/exact_names.rs"]
mod exact_names;
#[path = "cli/hostile_keys.rs"]
mod hostile_keys;
#[path = "cli/hostile_names.rs"]
mod hostile_names;
#[path = "cli/inspect_archive.rs"]
mod inspect_archive;
#[path = "cli/inspect_cat.rs"]
mod inspect_cat;
#[path = "cli/inspect_common.rs"]
mod inspect_common;
#[path = "cli/inspect_diff.rs"]
mod inspect_diff;
#[path = "cli/inspect_dump.rs"]
mod inspect_dump;
#[path = "cli/inspect_find.rs"]
mod inspect_find;
#[path = "cli/inspect_ls.rs"]
mod inspect_ls;
#[path = "cli/inspect_snapshots.rs"]
mod inspect_snapshots;
#[path = "cli/inspect_stats.rs"]
mod inspect_stats;
#[path = "cli/key_id.rs"]
mod key_id;
#[path = "cli/modify_check.rs"]
mod modify_check;
#[path = "cli/modify_forget.rs"]
mod modify_forget;
#[path = "cli/modify_tag.rs"]
mod modify_tag;
#[path = "cli/recorded_sources.rs"]
mod recorded_sources;
#[path = "cli/stopping.rs"]
mod stopping;
#[path = "cli/streams.rs"]
mod streams;
mod support;

#[path = "cli/protect_window.rs"]
mod protect_window;
#[path = "cli/repair.rs"]
mod repair;
#[path = "cli/repair_snapshots.rs"]
mod repair_snapshots;
#[path = "cli/restic_patterns.rs"]
mod restic_patterns;
#[path = "cli/restic_selection.rs"]
mod restic_selection;
#[path = "cli/restore_overwrite.rs"]
mod restore_overwrite;
#[path = "cli/restore_partial.rs"]
mod restore_partial;
#[path = "cli/restore_progress.rs"]
mod restore_progress;
#[path = "cli/restore_verify.rs"]
mod restore_verify;

use support::fixtures;

use fixtures::{assert_same_tree, build_fidelity_tree, build_mixed_data, is_root, Noise};
use neverwiped::backend::local::LocalBackend;
use neverwiped::backend::SharedBackend;
use neverwiped::repository::Repository;
use neverwiped_contract::{ExitStatus, Operation};
use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::sidecar::{bare_command, read_result, run, Run, SIDECAR_BIN};
use support::{RestServer, RestServerOptions};
use tempfile::TempDir;

/// The repository password of these tests; its file ends in a newline, as `echo pw > file` makes.
const PASSWORD: &str = "cli test password";

/// The sidecar pointed at one repository, with the password in a file named by
/// `NEVERWIPED_PASSWORD_FILE` (never on the command line).
struct Sidecar {
    repo: String,
    password_file: PathBuf,
    /// Extra environment of every run (the gate's credentials).
    env: Vec<(String, String)>,
    _secrets: TempDir,
}

impl Sidecar {
    fn new(repo: impl Into<String>) -> Sidecar {
        let secrets = tempfile::tempdir().unwrap();
        let password_file = secrets.path().join("password");
        fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
        Sidecar {
            repo: repo.into(),
            password_file,
            env: Vec::new(),
            _secrets: secrets,
        }
    }

    fn local(repo: &Path) -> Sidecar {
        Sidecar::new(repo.to_str().unwrap())
    }

    /// The repository of a rest-server with a login, its user name and password in the
    /// environment as the backup pod has them.
    fn through_gate(server: &RestServer) -> Sidecar {
        let mut sidecar = Sidecar::new(format!("rest:{}", server.url()));
        sidecar.env.push((
            "NEVERWIPED_GATE_USERNAME".into(),
            server.username().unwrap().into(),
        ));
        sidecar.env.push((
            "NEVERWIPED_GATE_PASSWORD".into(),
            server.password().unwrap().into(),
        ));
        sidecar
    }

    /// A command with the repository and the password file set; nothing else of the caller's
    /// `NEVERWIPED_*` environment.
    fn command(&self) -> Command {
        let mut command = bare_command();
        command
            .arg("--repo")
            .arg(&self.repo)
            .env("NEVERWIPED_PASSWORD_FILE", &self.password_file);
        for (name, value) in &self.env {
            command.env(name, value);
        }
        command
    }

    fn run<S: AsRef<OsStr>>(&self, args: &[S]) -> Run {
        let mut command = self.command();
        command.args(args);
        run(command)
    }

    /// The snapshots as `snapshots --json` lists them.
    fn snapshots(&self) -> Vec<serde_json::Value> {
        let run = self.run(&["snapshots", "--json"]).expect_ok();
        serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("snapshots --json is not JSON ({e}):\n{}", run.stdout))
    }

    /// Restores `snapshot` into `target` and checks that it holds `source` at its absolute path.
    fn restore_and_compare(&self, snapshot: &str, source: &Path) {
        let target = tempfile::tempdir().unwrap();
        self.run(&[
            OsStr::new("restore"),
            OsStr::new(snapshot),
            OsStr::new("--target"),
            target.path().as_os_str(),
        ])
        .expect_ok();
        assert_same_tree(source, &restored(target.path(), source), is_root());
    }
}

/// Where `source` lands below a restore target (`/a/b` in `TARGET/a/b`, as restic does).
fn restored(target: &Path, source: &Path) -> PathBuf {
    target.join(source.strip_prefix("/").unwrap())
}

/// A path argument as text.
fn text(path: &Path) -> &str {
    path.to_str().expect("test paths are UTF-8")
}

/// A work folder with a repository initialised through the CLI.
fn initialised() -> (TempDir, PathBuf, Sidecar) {
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("repo");
    let sidecar = Sidecar::local(&repo);
    let init = sidecar.run(&["init"]).expect_ok();
    assert!(
        init.stdout.contains("created neverwiped repository"),
        "{}",
        init.stdout
    );
    (work, repo, sidecar)
}

/// As [`initialised`], with the repository's key under the tests' light Argon2 parameters
/// ([`fixtures::TEST_KDF`]) instead of `init`'s: for tests that run the sidecar a hundred times
/// on one repository, each run deriving the key again.
fn initialised_cheaply() -> (TempDir, PathBuf, Sidecar) {
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("repo");
    let backend: SharedBackend = Arc::new(LocalBackend::new(&repo));
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(Repository::init(
            backend,
            PASSWORD.as_bytes(),
            fixtures::TEST_KDF,
        ))
        .unwrap();
    let sidecar = Sidecar::local(&repo);
    (work, repo, sidecar)
}

/// A few small files in a new folder `name` below `work`.
fn small_tree(work: &Path, name: &str) -> PathBuf {
    let source = work.join(name);
    fs::create_dir_all(source.join("sub")).unwrap();
    fs::write(source.join("a.txt"), b"first file\n").unwrap();
    fs::write(source.join("sub/b.txt"), b"second file\n").unwrap();
    fs::write(source.join("c.bin"), Noise::new(5).bytes(300_000)).unwrap();
    source
}

/// Writes a fresh exclusive lock of a prune on `hostname` into the local repository at `repo_dir`,
/// as another process holding it would; returns the lock object's id.
async fn write_exclusive_lock(repo_dir: &Path, hostname: &str) -> neverwiped::ids::ObjectId {
    write_lock(repo_dir, hostname, true, "prune").await
}

/// Writes a fresh lock (exclusive or shared) of `purpose` on `hostname`, as another process
/// holding it would; returns the lock object's id.
async fn write_lock(
    repo_dir: &Path,
    hostname: &str,
    exclusive: bool,
    purpose: &str,
) -> neverwiped::ids::ObjectId {
    let backend: SharedBackend = Arc::new(LocalBackend::new(repo_dir));
    let repo = Repository::open(backend, PASSWORD.as_bytes())
        .await
        .unwrap();
    let mut lock = neverwiped::format::lock::Lock::new(exclusive, purpose);
    lock.hostname = hostname.into();
    repo.write_object(neverwiped::backend::ObjectKind::Locks, &lock)
        .await
        .unwrap()
}

/// Total size of the files below a folder.
fn folder_bytes(dir: &Path) -> u64 {
    fixtures::walk(dir)
        .iter()
        .filter(|p| p.is_file())
        .map(|p| fs::metadata(p).unwrap().len())
        .sum()
}

// ---------------------------------------------------------------------------------------------
// The everyday commands
// ---------------------------------------------------------------------------------------------

#[test]
fn init_backup_snapshots_ls_and_restore_give_back_every_kind_of_entry() {
    let (work, _repo, sidecar) = initialised();
    let source = work.path().join("source");
    build_fidelity_tree(&source);

    let backup = sidecar
        .run(&[OsStr::new("backup"), source.as_os_str()])
        .expect_ok();
    assert!(
        backup.stdout.contains("snapshot ") && backup.stdout.contains(" saved: "),
        "{}",
        backup.stdout
    );

    // The table: a header, one row with the short id and the path, a count.
    let snapshots = sidecar.snapshots();
    assert_eq!(snapshots.len(), 1, "{snapshots:?}");
    let id = snapshots[0]["id"].as_str().expect("an id").to_owned();
    assert_eq!(id.len(), 64, "{id}");
    assert_eq!(snapshots[0]["paths"], serde_json::json!([text(&source)]));
    assert!(
        snapshots[0]["summary"]["files"].as_u64().unwrap() >= 14,
        "{}",
        snapshots[0]
    );
    let table = sidecar.run(&["snapshots"]).expect_ok().stdout;
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("id") && lines[0].contains("paths"),
        "{table}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&id[..8]) && l.ends_with(text(&source))),
        "{table}"
    );
    assert_eq!(lines.last(), Some(&"1 snapshot(s)"), "{table}");

    // `ls` by id prefix and by `latest`, and below a path.
    let listing = sidecar.run(&["ls", &id[..10]]).expect_ok().stdout;
    for entry in [
        "small.txt",
        "dir/large.bin",
        "dir/nested/deeper/leaf.txt",
        "link-relative -> small.txt",
        "fifo",
        "empty-dir",
    ] {
        let wanted = format!("  {}/{entry}", text(&source));
        assert!(
            listing.lines().any(|l| l.ends_with(&wanted)),
            "ls lacks {wanted}:\n{listing}"
        );
    }
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with('d') && l.ends_with(&format!("  {}/dir", text(&source)))),
        "{listing}"
    );
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with('l') && l.ends_with("/link-relative -> small.txt")),
        "{listing}"
    );
    assert_eq!(sidecar.run(&["ls", "latest"]).expect_ok().stdout, listing);
    let below = sidecar
        .run(&[
            "ls",
            "latest",
            &format!("{}/dir/nested", text(&source)),
            "--recursive",
        ])
        .expect_ok()
        .stdout;
    assert!(
        below
            .lines()
            .any(|l| l.ends_with("/dir/nested/deeper/leaf.txt")),
        "{below}"
    );
    assert!(
        !below.contains("small.txt"),
        "ls of a path lists only what is below it:\n{below}"
    );
    let nested = format!("{}/dir/nested", text(&source));
    assert!(
        below
            .lines()
            .all(|l| l.ends_with(&format!("  {nested}")) || l.contains(&format!("  {nested}/"))),
        "ls of a path lists it and what is below it, not its parents:\n{below}"
    );

    // A full restore into an empty folder.
    sidecar.restore_and_compare("latest", &source);

    // Only one subfolder.
    let target = tempfile::tempdir().unwrap();
    let nested = source.join("dir/nested");
    sidecar
        .run(&[
            "restore",
            &id[..8],
            "--target",
            text(target.path()),
            "--include",
            text(&nested),
        ])
        .expect_ok();
    assert_same_tree(&nested, &restored(target.path(), &nested), is_root());
    let restored_source = restored(target.path(), &source);
    assert!(
        !restored_source.join("small.txt").exists(),
        "an include restores only what it names"
    );
    assert!(
        !restored_source.join("dir/large.bin").exists(),
        "an include restores only what it names"
    );
}

#[test]
fn backup_json_prints_the_snapshot_id_and_summary() {
    let (work, _repo, sidecar) = initialised();
    let source = small_tree(work.path(), "source");
    let run = sidecar
        .run(&["backup", "--json", text(&source)])
        .expect_ok();
    let line = run
        .stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON:\n{}", run.stdout));
    let value: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(value["snapshotId"], sidecar.snapshots()[0]["id"]);
    assert_eq!(value["summary"]["files"], 3);
}

// ---------------------------------------------------------------------------------------------
// The result file
// ---------------------------------------------------------------------------------------------

#[test]
fn result_file_describes_a_successful_backup_and_restore() {
    let (work, _repo, sidecar) = initialised();
    let source = small_tree(work.path(), "source");
    let result_file = work.path().join("result.json");
    sidecar
        .run(&["backup", text(&source), "--result-file", text(&result_file)])
        .expect_ok();
    let result = read_result(&result_file);
    assert_eq!(result.status, ExitStatus::Success);
    assert_eq!(result.operation, Operation::Backup);
    let snapshot_id = result.snapshot_id.clone().expect("a snapshot id");
    assert_eq!(serde_json::json!(snapshot_id), sidecar.snapshots()[0]["id"]);
    assert_eq!(result.files, 3);
    assert_eq!(result.bytes_read, folder_bytes(&source));
    assert!(
        result.bytes_added > 0 && result.bytes_transferred >= result.bytes_added,
        "{result:?}"
    );
    assert!(
        result.error.is_none() && result.warnings.is_empty() && result.warnings_total == 0,
        "{result:?}"
    );

    let target = tempfile::tempdir().unwrap();
    let restore_result = work.path().join("restore-result.json");
    sidecar
        .run(&[
            "restore",
            "latest",
            "--target",
            text(target.path()),
            "--result-file",
            text(&restore_result),
        ])
        .expect_ok();
    let result = read_result(&restore_result);
    assert_eq!(result.status, ExitStatus::Success);
    assert_eq!(result.snapshot_id.as_deref(), Some(snapshot_id.as_str()));
    assert_eq!(
        (result.files, result.bytes_read),
        (3, folder_bytes(&source))
    );
}

#[test]
fn result_file_of_a_failed_run_holds_the_error_and_the_failing_status() {
    let (work, repo, _sidecar) = initialised();
    let source = small_tree(work.path(), "source");
    let wrong = Sidecar::local(&repo);
    fs::write(&wrong.password_file, "not the password").unwrap();
    let result_file = work.path().join("result.json");
    wrong
        .run(&["backup", text(&source), "--result-file", text(&result_file)])
        .expect_code(12);
    let result = read_result(&result_file);
    assert_eq!(result.status, ExitStatus::WrongPassword);
    assert_eq!(result.operation, Operation::Backup);
    assert!(result.snapshot_id.is_none(), "{result:?}");
    let error = result.error.expect("an error");
    assert!(error.contains("wrong password"), "{error}");
}

// ---------------------------------------------------------------------------------------------
// Exit codes
// ---------------------------------------------------------------------------------------------

#[test]
fn exit_code_0_for_each_command_that_succeeds() {
    let (work, _repo, sidecar) = initialised();
    let source = small_tree(work.path(), "source");
    sidecar.run(&["backup", text(&source)]).expect_code(0);
    sidecar.run(&["snapshots"]).expect_code(0);
    sidecar.run(&["ls", "latest"]).expect_code(0);
    let target = tempfile::tempdir().unwrap();
    sidecar
        .run(&["restore", "latest", "--target", text(target.path())])
        .expect_code(0);
}

#[test]
fn init_refuses_a_folder_that_already_holds_a_repository() {
    let (_work, repo, sidecar) = initialised();
    let config = fs::read(repo.join("config")).unwrap();
    let run = sidecar.run(&["init"]).expect_code(1);
    assert!(
        run.error_line().contains("already exists"),
        "{}",
        run.stderr
    );
    assert_eq!(
        fs::read(repo.join("config")).unwrap(),
        config,
        "the repository is untouched"
    );
    assert_eq!(
        fs::read_dir(repo.join("keys")).unwrap().count(),
        1,
        "no key was added"
    );
}

#[test]
fn exit_code_10_for_an_empty_folder_or_a_missing_repository() {
    let work = tempfile::tempdir().unwrap();
    let empty = work.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let source = small_tree(work.path(), "source");
    for repo in [empty.clone(), work.path().join("does/not/exist")] {
        let sidecar = Sidecar::local(&repo);
        for args in [
            vec!["snapshots"],
            vec!["backup", text(&source)],
            vec!["ls", "latest"],
        ] {
            let run = sidecar.run(&args).expect_code(10);
            let error = run.error_line();
            assert!(
                error.contains("does not exist") && error.contains(text(&repo)),
                "{args:?}: {error}"
            );
        }
    }
    assert_eq!(
        fs::read_dir(&empty).unwrap().count(),
        0,
        "nothing was written into the empty folder"
    );
    assert!(
        !work.path().join("does").exists(),
        "no folder was created for a missing repository"
    );
}

#[test]
fn exit_code_10_for_a_folder_holding_another_tools_repository() {
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("restic-repo");
    fs::create_dir_all(repo.join("keys")).unwrap();
    fs::write(
        repo.join("config"),
        br#"{"version":2,"id":"x","chunker_polynomial":"3da3358b4dc173"}"#,
    )
    .unwrap();
    let run = Sidecar::local(&repo).run(&["snapshots"]);
    let error = run.error_line();
    assert!(error.contains("not a neverwiped repository"), "{error}");
    // The contract: NoRepository is "the repository does not exist (or is not a neverwiped repository)".
    run.expect_code(ExitStatus::NoRepository.code());
}

#[test]
fn exit_code_12_and_a_clear_message_for_a_wrong_password() {
    let (work, repo, _sidecar) = initialised();
    let source = small_tree(work.path(), "source");
    let wrong = Sidecar::local(&repo);
    fs::write(&wrong.password_file, "wrong\n").unwrap();
    for args in [
        vec!["snapshots"],
        vec!["backup", text(&source)],
        vec!["restore", "latest", "--target", text(work.path())],
    ] {
        let run = wrong.run(&args).expect_code(12);
        assert!(
            run.error_line().contains("wrong password"),
            "{args:?}: {}",
            run.stderr
        );
    }
}

#[test]
fn exit_code_3_when_some_sources_cannot_be_read_and_the_snapshot_is_still_written() {
    let (work, _repo, sidecar) = initialised();
    let source = small_tree(work.path(), "source");
    let missing = work.path().join("no-such-folder");
    let result_file = work.path().join("result.json");
    // `/proc/self/mem` opens, but reading it at offset 0 fails, even for root.
    let run = sidecar
        .run(&[
            "backup",
            text(&source),
            text(&missing),
            "/proc/self/mem",
            "--result-file",
            text(&result_file),
        ])
        .expect_code(3);
    assert!(run.stderr.contains("could not be read"), "{}", run.stderr);

    let result = read_result(&result_file);
    assert_eq!(result.status, ExitStatus::Partial);
    assert!(result.error.is_none(), "{result:?}");
    assert_eq!(result.warnings_total, 2, "{:?}", result.warnings);
    assert!(
        result.warnings.iter().any(|w| w.contains(text(&missing))),
        "{:?}",
        result.warnings
    );
    assert!(
        result.warnings.iter().any(|w| w.contains("/proc/self/mem")),
        "{:?}",
        result.warnings
    );

    // The snapshot was written, with what could be read.
    let snapshots = sidecar.snapshots();
    assert_eq!(snapshots.len(), 1);
    assert_eq!(snapshots[0]["id"].as_str(), result.snapshot_id.as_deref());
    sidecar.restore_and_compare("latest", &source);
}

#[test]
fn exit_code_1_and_no_snapshot_when_nothing_at_all_could_be_read() {
    let (work, _repo, sidecar) = initialised();
    let result_file = work.path().join("result.json");
    let (a, b) = (work.path().join("missing-a"), work.path().join("missing-b"));
    let run = sidecar
        .run(&[
            "backup",
            text(&a),
            text(&b),
            "--result-file",
            text(&result_file),
        ])
        .expect_code(1);
    let error = run.error_line();
    assert!(
        error.contains("nothing was backed up") && error.contains(text(&a)),
        "{error}"
    );
    let result = read_result(&result_file);
    assert_eq!(result.status, ExitStatus::Failed);
    assert!(result.snapshot_id.is_none(), "{result:?}");
    assert!(result.error.unwrap().contains("nothing was backed up"));
    assert_eq!(
        sidecar.snapshots(),
        Vec::<serde_json::Value>::new(),
        "no snapshot may be written"
    );
}

/// Runs a shell line with the sidecar's environment (`$SIDECAR` is its binary).
fn run_shell(sidecar: &Sidecar, line: &str) -> Run {
    let mut command = Command::new("bash");
    command
        .arg("-c")
        .arg(line)
        .env("SIDECAR", SIDECAR_BIN)
        .env("NEVERWIPED_REPOSITORY", &sidecar.repo)
        .env("NEVERWIPED_PASSWORD_FILE", &sidecar.password_file)
        .stdin(Stdio::null());
    run(command)
}

#[test]
fn an_empty_standard_input_fails_the_backup_unless_allow_empty_says_it_is_expected() {
    let (work, _repo, sidecar) = initialised();
    let result_file = work.path().join("result.json");
    // The README's pipe without `pipefail`: a producer that fails gives an empty stream.
    let run = run_shell(
        &sidecar,
        &format!(
            "false | \"$SIDECAR\" backup --stdin --stdin-name databases/main/dump.sql --result-file {}",
            text(&result_file)
        ),
    )
    .expect_code(1);
    let error = run.error_line();
    assert!(
        error.contains("standard input was empty") && error.contains("--allow-empty"),
        "{error}"
    );
    let result = read_result(&result_file);
    assert_eq!(result.status, ExitStatus::Failed);
    assert!(result.snapshot_id.is_none(), "{result:?}");
    assert!(sidecar.snapshots().is_empty(), "no snapshot may be written");

    // With `set -o pipefail`, as the README writes it, the pipe fails even where the sidecar
    // cannot tell (here the producer fails after writing something).
    run_shell(
        &sidecar,
        "set -o pipefail; (echo partial; exit 2) | \"$SIDECAR\" backup --stdin",
    )
    .expect_code(2);

    // Said to be expected, an empty stream is stored as an empty file.
    run_shell(
        &sidecar,
        "\"$SIDECAR\" backup --stdin --allow-empty < /dev/null",
    )
    .expect_ok();
    let snapshots = sidecar.snapshots();
    assert_eq!(snapshots.len(), 2, "{snapshots:?}");
    let listing = sidecar.run(&["ls", "latest"]).expect_ok().stdout;
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with('-') && l.ends_with(" 0  /stdin")),
        "{listing}"
    );
}

#[test]
fn a_backup_of_folders_without_any_file_fails_unless_allow_empty_says_it_is_expected() {
    let (work, _repo, sidecar) = initialised();
    let empty = work.path().join("empty");
    fs::create_dir_all(empty.join("only/folders")).unwrap();
    let run = sidecar.run(&["backup", text(&empty)]).expect_code(1);
    let error = run.error_line();
    assert!(
        error.contains("nothing was backed up") && error.contains("--allow-empty"),
        "{error}"
    );
    assert!(sidecar.snapshots().is_empty(), "no snapshot may be written");
    sidecar
        .run(&["backup", text(&empty), "--allow-empty"])
        .expect_ok();
    let listing = sidecar.run(&["ls", "latest"]).expect_ok().stdout;
    assert!(listing.contains("/empty/only/folders"), "{listing}");
}

/// The file entries `ls` shows for the latest snapshot.
fn files_listed(sidecar: &Sidecar) -> u64 {
    let listing = sidecar.run(&["ls", "latest"]).expect_ok().stdout;
    listing.lines().filter(|l| l.starts_with('-')).count() as u64
}

#[test]
fn counts_of_the_summary_the_result_and_snapshots_are_the_files_the_snapshot_holds() {
    let (work, _repo, sidecar) = initialised();
    let source = small_tree(work.path(), "source");
    fs::hard_link(source.join("a.txt"), source.join("a-link.txt")).unwrap();
    let result_file = work.path().join("result.json");
    // `/proc/self/mem` opens but cannot be read: it is not in the snapshot, so not counted.
    let run = sidecar
        .run(&[
            "backup",
            text(&source),
            "/proc/self/mem",
            "--result-file",
            text(&result_file),
        ])
        .expect_code(3);
    let result = read_result(&result_file);
    let held = files_listed(&sidecar);
    assert_eq!(held, 4, "three files and a hard link");
    assert_eq!(result.files, held, "{result:?}");
    assert_eq!(sidecar.snapshots()[0]["summary"]["files"], held);
    // A hard link on a first backup is not "unchanged": it names a file read above.
    assert!(
        run.stdout
            .contains("4 files (3 read, 0 unchanged, 1 hard link(s) to files above)"),
        "{}",
        run.stdout
    );

    // The next backup of the same paths reads nothing again: every file is unchanged or a link.
    let again = sidecar
        .run(&["backup", text(&source), "/proc/self/mem"])
        .expect_code(3);
    assert!(
        again
            .stdout
            .contains("4 files (0 read, 3 unchanged, 1 hard link(s) to files above)"),
        "{}",
        again.stdout
    );
}

#[test]
fn a_skipped_socket_is_a_warning_of_a_complete_backup_with_exit_0() {
    let (work, _repo, sidecar) = initialised();
    let source = small_tree(work.path(), "source");
    let _socket = std::os::unix::net::UnixListener::bind(source.join("app.sock")).unwrap();
    let result_file = work.path().join("result.json");
    let run = sidecar
        .run(&["backup", text(&source), "--result-file", text(&result_file)])
        .expect_ok();
    let result = read_result(&result_file);
    assert_eq!(result.status, ExitStatus::Success);
    assert_eq!(result.warnings_total, 1, "{result:?}");
    assert!(result.warnings[0].contains("app.sock"), "{result:?}");
    let warnings = run.warning_lines();
    assert_eq!(warnings.len(), 1, "{}", run.stderr);
    assert!(!warnings[0].contains("could not be read"), "{warnings:?}");
    sidecar.restore_and_compare("latest", &{
        // The restored tree is compared with the source without its socket.
        fs::remove_file(source.join("app.sock")).unwrap();
        source.clone()
    });
}

#[test]
fn a_url_without_rest_is_refused_and_no_folder_is_created() {
    let work = tempfile::tempdir().unwrap();
    for url in ["http://127.0.0.1:1/repo/", "https://127.0.0.1:1/repo/"] {
        let mut command = Sidecar::new(url).command();
        command.current_dir(work.path()).arg("init");
        let run = run(command).expect_code(1);
        let error = run.error_line();
        assert!(error.contains(&format!("rest:{url}")), "{error}");
        assert_eq!(
            fs::read_dir(work.path()).unwrap().count(),
            0,
            "nothing may be created for {url}"
        );
    }
}

#[test]
fn the_sidecar_turns_off_core_dumps_before_it_reads_any_secret() {
    let (_work, _repo, sidecar) = initialised();
    let mut command = sidecar.command();
    command
        .args(["backup", "--stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // Start it with core files allowed, so the limit seen below is the sidecar's own doing.
    // SAFETY: setrlimit is async-signal-safe and touches no memory of the forked child.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, || {
            let allowed = libc::rlimit {
                rlim_cur: 1 << 20,
                rlim_max: 1 << 20,
            };
            if libc::setrlimit(libc::RLIMIT_CORE, &allowed) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().unwrap();
    let limits = format!("/proc/{}/limits", child.id());
    let deadline = Instant::now() + Duration::from_secs(20);
    let core_line = loop {
        let text = fs::read_to_string(&limits).unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("Max core file size"))
            .unwrap()
            .to_owned();
        // The sidecar waits on its standard input by now or soon: the limit is set first thing.
        if line.split_whitespace().nth(4) == Some("0") || Instant::now() > deadline {
            break line;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(child.stdin.take());
    let _ = child.wait();
    let fields: Vec<&str> = core_line.split_whitespace().collect();
    assert_eq!(&fields[4..6], ["0", "0"], "{core_line}");
}

/// Panics unless `text` is JSON: one value, or one value per line.
#[track_caller]
fn assert_json(what: &str, text: &str) {
    assert!(!text.trim().is_empty(), "{what} --json printed nothing");
    if serde_json::from_str::<serde_json::Value>(text).is_ok() {
        return;
    }
    for line in text.lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap_or_else(|e| {
            panic!("{what} --json printed a line that is not JSON ({e}): {line:?}\n{text}")
        });
    }
}

#[test]
fn json_is_what_every_command_prints_with_json() {
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("repo");
    let sidecar = Sidecar::local(&repo);
    let source = small_tree(work.path(), "source");
    let target = work.path().join("target");
    let new_password = work.path().join("new-password");
    fs::write(&new_password, "second password\n").unwrap();
    let json_of = |args: &[&str]| {
        let mut all = args.to_vec();
        all.push("--json");
        let run = sidecar.run(&all).expect_ok();
        assert_json(&args.join(" "), &run.stdout);
        run.stdout
    };
    json_of(&["init"]);
    json_of(&["backup", text(&source)]);
    json_of(&["backup", text(&source), "--keep-last", "1"]);
    json_of(&["snapshots"]);
    json_of(&["ls", "latest"]);
    json_of(&["restore", "latest", "--target", text(&target)]);
    json_of(&["check", "--read-data"]);
    json_of(&["forget", "--keep-last", "1", "--dry-run"]);
    json_of(&["prune", "--dry-run"]);
    json_of(&["prune"]);
    json_of(&["unlock"]);
    let added = json_of(&["key", "add", "--new-password-file", text(&new_password)]);
    let added: serde_json::Value = serde_json::from_str(&added).unwrap();
    let keys = json_of(&["key", "list"]);
    let keys: Vec<serde_json::Value> = serde_json::from_str(&keys).unwrap();
    assert_eq!(keys.len(), 2, "{keys:?}");
    json_of(&["key", "remove", &added["added"].as_str().unwrap()[..8]]);
    json_of(&["key", "passwd", "--new-password-file", text(&new_password)]);
}

#[test]
fn under_json_logs_every_line_of_standard_error_is_json_and_text_logs_have_no_colours() {
    let (work, _repo, sidecar) = initialised();
    let source = small_tree(work.path(), "source");
    let every_line_is_json = |run: &Run| {
        assert!(!run.stderr.trim().is_empty(), "nothing on standard error");
        for line in run.stderr.lines() {
            serde_json::from_str::<serde_json::Value>(line)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}\n{}", run.stderr));
        }
    };
    // A partial backup (warnings, closing warning), a failure, and a command-line mistake.
    let partial = sidecar
        .run(&[
            "backup",
            text(&source),
            "/proc/self/mem",
            "--log-format",
            "json",
        ])
        .expect_code(3);
    every_line_is_json(&partial);
    assert_eq!(partial.warning_lines().len(), 1, "{}", partial.stderr);
    let failed = sidecar
        .run(&[
            "restore",
            "ffffffff",
            "--target",
            "/nonexistent",
            "--log-format",
            "json",
        ])
        .expect_code(1);
    every_line_is_json(&failed);
    assert!(
        failed.error_line().contains("no snapshot matches"),
        "{}",
        failed.stderr
    );
    let mistake = sidecar
        .run(&["backup", "--no-such-option", "--log-format", "json"])
        .expect_code(1);
    every_line_is_json(&mistake);
    assert!(
        mistake.error_line().contains("--no-such-option"),
        "{}",
        mistake.stderr
    );

    // Text logs off a terminal: plain text, no ANSI escape sequences.
    let text_logs = sidecar
        .run(&[
            "backup",
            text(&source),
            "/proc/self/mem",
            "--log-format",
            "text",
        ])
        .expect_code(3);
    assert!(
        text_logs.stderr.contains("/proc/self/mem"),
        "{}",
        text_logs.stderr
    );
    assert!(
        !text_logs.stderr.contains('\u{1b}'),
        "{:?}",
        text_logs.stderr
    );
}

#[test]
fn ls_of_a_path_prints_that_path_and_below_and_snapshots_shows_tags_and_utc() {
    let (work, _repo, sidecar) = initialised();
    let source = small_tree(work.path(), "source");
    sidecar
        .run(&[
            "backup",
            text(&source),
            "--tag",
            "nightly",
            "--tag",
            "plan=db",
        ])
        .expect_ok();
    let sub = source.join("sub");
    let listing = sidecar
        .run(&["ls", "latest", text(&sub)])
        .expect_ok()
        .stdout;
    let paths: Vec<&str> = listing
        .lines()
        .map(|l| l.rsplit("  ").next().unwrap())
        .collect();
    assert_eq!(
        paths,
        [text(&sub).to_owned(), format!("{}/b.txt", text(&sub))],
        "{listing}"
    );
    let table = sidecar.run(&["snapshots"]).expect_ok().stdout;
    let header = table.lines().next().unwrap();
    assert!(
        header.contains("time (UTC)") && header.contains("tags"),
        "{table}"
    );
    assert!(
        table.lines().nth(1).unwrap().contains("nightly,plan=db"),
        "{table}"
    );
}

#[test]
fn restore_refuses_a_host_the_snapshot_is_not_of_and_finds_upper_case_ids() {
    let (work, _repo, sidecar) = initialised();
    let source = small_tree(work.path(), "source");
    sidecar
        .run(&["backup", text(&source), "--host", "shop/nightly"])
        .expect_ok();
    let id = sidecar.snapshots()[0]["id"].as_str().unwrap().to_owned();
    let target = work.path().join("target");
    let error = sidecar
        .run(&[
            "restore",
            &id[..8],
            "--host",
            "other/plan",
            "--target",
            text(&target),
        ])
        .expect_code(1)
        .error_line();
    assert!(
        error.contains("is of host shop/nightly, not of --host other/plan"),
        "{error}"
    );
    assert!(!target.exists(), "nothing may be restored");
    let upper = id[..8].to_ascii_uppercase();
    sidecar.run(&["ls", &upper]).expect_ok();
    sidecar.restore_and_compare(&upper, &source);
    let zero = sidecar
        .run(&["check", "--read-data-subset", "0%"])
        .expect_code(1);
    assert!(
        zero.stderr.contains("would read no pack") && zero.stderr.contains("above 0%"),
        "{}",
        zero.stderr
    );
}

#[test]
fn help_describes_every_command_and_argument_with_its_own_options_first() {
    let help_of = |args: &[&str]| {
        let mut command = bare_command();
        command.args(args).arg("--help");
        run(command).expect_ok().stdout
    };
    let top = help_of(&[]);
    for wanted in [
        "NEVERWIPED_GATE_USERNAME",
        "NEVERWIPED_GATE_PASSWORD_FILE",
        "NEVERWIPED_DB_PASSWORD_<NAME>",
        "Exit codes:",
        "  3   partial",
        "  12  wrong password",
    ] {
        assert!(top.contains(wanted), "--help lacks {wanted:?}:\n{top}");
    }
    let commands = [
        "init",
        "backup",
        "snapshots",
        "ls",
        "find",
        "diff",
        "stats",
        "dump",
        "cat",
        "restore",
        "unlock",
        "check",
        "forget",
        "tag",
        "prune",
        "repair index",
        "key list",
        "key add",
        "key remove",
        "key passwd",
    ];
    for name in commands {
        let args: Vec<&str> = name.split(' ').collect();
        let help = help_of(&args);
        let own = help
            .find("\nOptions:")
            .unwrap_or_else(|| panic!("{name}:\n{help}"));
        let global = help
            .find("\nGlobal options:")
            .unwrap_or_else(|| panic!("{name} --help has no global options:\n{help}"));
        assert!(own < global, "{name}: its own options come first:\n{help}");
        // An argument or option line without a description: clap puts the description beside
        // the name, or on the next line, indented deeper.
        let lines: Vec<&str> = help.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            let indent = line.len() - trimmed.len();
            let is_item = (2..=6).contains(&indent) && trimmed.starts_with(['<', '[', '-']);
            if !is_item {
                continue;
            }
            let beside = trimmed.trim_end().contains("  ");
            let below = lines
                .get(i + 1)
                .is_some_and(|next| next.starts_with("          ") && !next.trim().is_empty());
            assert!(
                beside || below,
                "{name} --help: {line:?} has no description:\n{help}"
            );
        }
    }
    // A usage error does not list --repo as if it were missing when the environment sets it.
    let mut command = bare_command();
    command
        .env("NEVERWIPED_REPOSITORY", "/nonexistent/repo")
        .args(["--log-format", "text", "restore"]);
    let mistake = run(command).expect_code(1);
    assert!(mistake.stderr.contains("<SNAPSHOT>"), "{}", mistake.stderr);
    assert!(!mistake.stderr.contains("--repo"), "{}", mistake.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_code_11_while_another_process_holds_an_exclusive_lock_naming_the_holder() {
    let (work, repo_dir, sidecar) = initialised();
    let source = small_tree(work.path(), "source");
    let backend: SharedBackend = Arc::new(LocalBackend::new(&repo_dir));
    let repo = Repository::open(backend, PASSWORD.as_bytes())
        .await
        .unwrap();
    let guard = neverwiped::locking::acquire(&repo, true, "prune")
        .await
        .unwrap();

    let result_file = work.path().join("result.json");
    let run = sidecar
        .run(&["backup", text(&source), "--result-file", text(&result_file)])
        .expect_code(11);
    let error = run.error_line();
    assert!(
        error.contains("locked by an exclusive lock of prune"),
        "{error}"
    );
    assert!(
        error.contains(&format!("pid {}", std::process::id())),
        "the holder's pid: {error}"
    );
    assert!(
        error.contains(&neverwiped::host::hostname()),
        "the holder's host: {error}"
    );
    assert_eq!(read_result(&result_file).status, ExitStatus::LockFailed);

    // Listing takes a shared lock, which the prune's exclusive lock blocks too.
    guard.release().await.unwrap();
    assert!(sidecar.snapshots().is_empty());
    sidecar.run(&["backup", text(&source)]).expect_ok();
}

// ---------------------------------------------------------------------------------------------
// Standard input
// ---------------------------------------------------------------------------------------------

#[test]
fn backup_of_standard_input_lands_under_its_name_and_restores_byte_for_byte() {
    let (_work, _repo, sidecar) = initialised();
    let mut dump = Vec::new();
    let mut noise = Noise::new(99);
    for row in 0..60_000 {
        dump.extend_from_slice(
            format!("INSERT INTO items VALUES ({row}, '{:x}');\n", noise.next()).as_bytes(),
        );
    }
    dump.extend(noise.bytes(3 * 1024 * 1024 + 7));

    let mut command = sidecar.command();
    command.args([
        "backup",
        "--stdin",
        "--stdin-name",
        "databases/main/dump.sql",
    ]);
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = dump.clone();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let run = Run::from_output(child.wait_with_output().unwrap(), None).expect_ok();
    writer.join().unwrap().unwrap();
    assert!(run.stdout.contains(" saved: 1 files"), "{}", run.stdout);

    let listing = sidecar.run(&["ls", "latest"]).expect_ok().stdout;
    let line = listing
        .lines()
        .find(|l| l.ends_with("  /databases/main/dump.sql"))
        .unwrap_or_else(|| panic!("ls lacks /databases/main/dump.sql:\n{listing}"));
    assert!(
        line.starts_with('-') && line.contains(&format!(" {}  ", dump.len())),
        "{line}"
    );
    assert_eq!(
        sidecar.snapshots()[0]["paths"],
        serde_json::json!(["/databases/main/dump.sql"])
    );

    let target = tempfile::tempdir().unwrap();
    sidecar
        .run(&["restore", "latest", "--target", text(target.path())])
        .expect_ok();
    let restored = fs::read(target.path().join("databases/main/dump.sql")).unwrap();
    assert!(
        restored == dump,
        "the restored dump differs ({} bytes, {} expected)",
        restored.len(),
        dump.len()
    );
}

// ---------------------------------------------------------------------------------------------
// Secrets
// ---------------------------------------------------------------------------------------------

#[test]
fn the_password_may_come_from_neverwiped_password() {
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("repo");
    let source = small_tree(work.path(), "source");
    let with_env = |args: &[&str]| {
        let mut command = bare_command();
        command
            .arg("--repo")
            .arg(&repo)
            .args(args)
            .env("NEVERWIPED_PASSWORD", PASSWORD);
        run(command)
    };
    with_env(&["init"]).expect_ok();
    with_env(&["backup", text(&source)]).expect_ok();
    // The repository may come from NEVERWIPED_REPOSITORY as well.
    let mut command = bare_command();
    command
        .env("NEVERWIPED_REPOSITORY", &repo)
        .env("NEVERWIPED_PASSWORD", PASSWORD)
        .arg("snapshots");
    assert!(run(command).expect_ok().stdout.contains("1 snapshot(s)"));
    // The same password from a file (ending in a newline) opens it too.
    let sidecar = Sidecar::local(&repo);
    sidecar.restore_and_compare("latest", &source);
    // NEVERWIPED_PASSWORD_FILE wins over NEVERWIPED_PASSWORD.
    let mut command = sidecar.command();
    command
        .arg("snapshots")
        .env("NEVERWIPED_PASSWORD", "something else");
    run(command).expect_ok();
}

#[test]
fn a_password_file_ending_in_a_newline_means_the_password_without_it() {
    let (work, repo, _sidecar) = initialised(); // the password file holds "PASSWORD\n"
    let source = small_tree(work.path(), "source");
    let mut command = bare_command();
    command
        .arg("--repo")
        .arg(&repo)
        .args(["backup", text(&source)])
        .env("NEVERWIPED_PASSWORD", PASSWORD);
    run(command).expect_ok();
    // `--password-file` works as the variable does, with a CRLF ending too.
    let crlf = work.path().join("crlf");
    fs::write(&crlf, format!("{PASSWORD}\r\n")).unwrap();
    let mut command = bare_command();
    command
        .arg("--repo")
        .arg(&repo)
        .arg("--password-file")
        .arg(&crlf)
        .arg("snapshots");
    run(command).expect_ok();
}

#[test]
fn an_empty_password_is_refused() {
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("repo");
    for content in ["", "\n"] {
        let sidecar = Sidecar::local(&repo);
        fs::write(&sidecar.password_file, content).unwrap();
        let run = sidecar.run(&["init"]).expect_code(1);
        assert!(
            run.error_line().contains("password is empty"),
            "{content:?}: {}",
            run.stderr
        );
    }
    let mut command = bare_command();
    command
        .arg("--repo")
        .arg(&repo)
        .arg("init")
        .env("NEVERWIPED_PASSWORD", "");
    let refused = run(command).expect_code(1);
    assert!(
        refused.error_line().contains("password is empty"),
        "{}",
        refused.stderr
    );
    assert!(
        !repo.join("config").exists(),
        "no repository may be created with an empty password"
    );

    let mut command = bare_command();
    command.arg("--repo").arg(&repo).arg("init");
    let refused = run(command).expect_code(1);
    assert!(
        refused.error_line().contains("no repository password"),
        "{}",
        refused.stderr
    );
}

#[test]
fn credentials_in_the_gate_address_are_refused_naming_the_variables_to_use() {
    let sidecar = Sidecar::new("rest:http://someone:hunter2@127.0.0.1:1/repo/");
    for args in [vec!["init"], vec!["snapshots"]] {
        let run = sidecar.run(&args).expect_code(1);
        let error = run.error_line();
        assert!(error.contains("NEVERWIPED_GATE_USERNAME"), "{error}");
        assert!(
            !run.stderr.contains("hunter2"),
            "the password is repeated: {}",
            run.stderr
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The gate
// ---------------------------------------------------------------------------------------------

#[test]
fn backup_and_restore_through_the_gate_with_credentials_from_the_environment() {
    let Some(server) = RestServer::start_with_login("cli_gate") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    build_fidelity_tree(&source);
    let gate_password = work.path().join("gate-password");
    fs::write(&gate_password, format!("{}\n", server.password().unwrap())).unwrap();
    let mut sidecar = Sidecar::new(format!("rest:{}", server.url()));
    sidecar.env.push((
        "NEVERWIPED_GATE_USERNAME".into(),
        server.username().unwrap().into(),
    ));
    sidecar.env.push((
        "NEVERWIPED_GATE_PASSWORD_FILE".into(),
        text(&gate_password).into(),
    ));

    sidecar.run(&["init"]).expect_ok();
    sidecar.run(&["backup", text(&source)]).expect_ok();
    assert!(
        server.data_dir().join("repo/config").is_file(),
        "the repository is on the server"
    );
    assert_eq!(sidecar.snapshots().len(), 1);
    sidecar.restore_and_compare("latest", &source);

    // The password straight from NEVERWIPED_GATE_PASSWORD works as well.
    let mut command = sidecar.command();
    command
        .env_remove("NEVERWIPED_GATE_PASSWORD_FILE")
        .env("NEVERWIPED_GATE_PASSWORD", server.password().unwrap())
        .arg("snapshots");
    run(command).expect_ok();
}

#[test]
fn restoring_latest_of_an_origin_with_no_snapshots_lists_the_origins_the_gate_holds() {
    let Some(server) = RestServer::start_with_login("cli_gate_origins") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let source = small_tree(work.path(), "source");
    let sidecar = Sidecar::through_gate(&server);
    sidecar.run(&["init"]).expect_ok();
    for host in ["shop/nightly", "shop/nightly", "blog/hourly"] {
        sidecar
            .run(&["backup", text(&source), "--host", host])
            .expect_ok();
    }
    let target = work.path().join("target");
    let result_file = work.path().join("result.json");
    let run = sidecar
        .run(&[
            "restore",
            "latest",
            "--host",
            "shop-old/nightly",
            "--target",
            text(&target),
            "--result-file",
            text(&result_file),
        ])
        .expect_code(13);
    let error = run.error_line();
    assert!(
        error.contains("latest of host shop-old/nightly")
            && error
                .contains("the repository holds snapshots of blog/hourly (1), shop/nightly (2)"),
        "{error}"
    );
    let result = read_result(&result_file);
    assert_eq!(result.status, ExitStatus::NoSnapshotOfHost);
    assert!(
        result
            .error
            .as_deref()
            .is_some_and(|e| e.contains("shop/nightly (2)")),
        "{result:?}"
    );
    assert!(!target.exists(), "nothing may be restored");
    sidecar.restore_and_compare("latest", &source);
}

#[test]
fn wrong_gate_credentials_give_a_clear_401_message_and_exit_1() {
    let Some(server) = RestServer::start_with_login("cli_gate_401") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let source = small_tree(work.path(), "source");
    let address = format!("rest:{}", server.url());
    let good = Sidecar::through_gate(&server);
    good.run(&["init"]).expect_ok();

    let mut wrong = Sidecar::new(&address);
    wrong.env.push((
        "NEVERWIPED_GATE_USERNAME".into(),
        server.username().unwrap().into(),
    ));
    wrong.env.push((
        "NEVERWIPED_GATE_PASSWORD".into(),
        "not-the-gate-password".into(),
    ));
    let anonymous = Sidecar::new(&address);
    for sidecar in [&wrong, &anonymous] {
        for args in [vec!["snapshots"], vec!["backup", text(&source)]] {
            let run = sidecar.run(&args).expect_code(1);
            let error = run.error_line();
            assert!(error.contains("401"), "{args:?}: {error}");
            assert!(
                error.contains("NEVERWIPED_GATE_USERNAME"),
                "{args:?}: {error}"
            );
            assert!(
                !run.stderr.contains("not-the-gate-password"),
                "the password is repeated: {}",
                run.stderr
            );
        }
    }
    assert!(good.snapshots().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Interrupted backups
// ---------------------------------------------------------------------------------------------

/// Starts a backup of `source` as a child process, its output into files in `logs`.
fn spawn_backup(sidecar: &Sidecar, source: &Path, logs: &Path, extra: &[&str]) -> Child {
    let mut command = sidecar.command();
    command.arg("backup").arg(source).args(extra);
    command
        .stdout(fs::File::create(logs.join("killed.stdout")).unwrap())
        .stderr(fs::File::create(logs.join("killed.stderr")).unwrap());
    command.spawn().unwrap()
}

fn child_output(logs: &Path) -> String {
    let read = |name: &str| fs::read_to_string(logs.join(name)).unwrap_or_default();
    format!(
        "stdout:\n{}\nstderr:\n{}",
        read("killed.stdout"),
        read("killed.stderr")
    )
}

/// The objects in a folder of the repository (temporary files of writes in progress left out).
fn objects_in(dir: &Path) -> Vec<PathBuf> {
    match fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.unwrap().path())
            .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Bytes of the packs that the repository's index lists (what a restore can use).
async fn indexed_pack_bytes(repo_dir: &Path) -> u64 {
    let backend: SharedBackend = Arc::new(LocalBackend::new(repo_dir));
    let repo = Repository::open(backend, PASSWORD.as_bytes())
        .await
        .unwrap()
        .load_index()
        .await
        .unwrap();
    let packs: Vec<String> = repo.index().packs().iter().map(|p| p.to_hex()).collect();
    packs
        .iter()
        .map(|name| {
            fs::metadata(repo_dir.join("data").join(&name[..2]).join(name))
                .unwrap()
                .len()
        })
        .sum()
}

/// Adds `megabytes` MiB that do not compress below `source`, in 24 MiB files.
fn add_incompressible(source: &Path, megabytes: usize, seed: u64) {
    fs::create_dir_all(source.join("video")).unwrap();
    let mut noise = Noise::new(seed);
    for part in 0..megabytes / 24 {
        fs::write(
            source.join(format!("video/part-{part}.bin")),
            noise.bytes(24 * 1024 * 1024),
        )
        .unwrap();
    }
}

/// Starts a backup of `source` at 40 MiB/s, SIGKILLs it once the first index object (8 packs)
/// is stored, runs it again and checks that the second run reused what the first indexed and that
/// the snapshot restores. `storage` is the repository's folder (or the server's copy of it).
async fn killed_halfway_then_run_again(
    sidecar: &Sidecar,
    storage: &Path,
    source: &Path,
    logs: &Path,
) {
    let mut child = spawn_backup(sidecar, source, logs, &["--limit-upload", "40M"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while objects_in(&storage.join("index")).is_empty() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the backup ended ({status}) before it wrote an index object:\n{}",
                child_output(logs)
            );
        }
        assert!(
            Instant::now() < deadline,
            "no index object within 60 s:\n{}",
            child_output(logs)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "the backup must still run when it is killed"
    );
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(
        sidecar.snapshots().is_empty(),
        "a killed backup leaves no snapshot"
    );
    let indexed_by_killed_run = indexed_pack_bytes(storage).await;
    assert!(indexed_by_killed_run > 0);

    let result_file = logs.join("result.json");
    sidecar
        .run(&["backup", text(source), "--result-file", text(&result_file)])
        .expect_ok();
    let second = read_result(&result_file);
    assert_eq!(second.status, ExitStatus::Success);
    assert_eq!(
        second.bytes_read,
        folder_bytes(source),
        "no parent snapshot: every file is read"
    );
    let final_indexed = indexed_pack_bytes(storage).await;
    println!(
        "killed run indexed {indexed_by_killed_run} B; second run added {} B; repository data {final_indexed} B",
        second.bytes_added
    );
    assert!(
        (second.bytes_added as f64) < 0.85 * final_indexed as f64,
        "the second run re-uploaded what the first had indexed: added {} of {final_indexed} B",
        second.bytes_added
    );
    assert!(
        second.bytes_added + indexed_by_killed_run >= final_indexed,
        "the repository's data is what the two runs indexed"
    );
    let id = second.snapshot_id.expect("a snapshot id");
    sidecar.restore_and_compare(&id, source);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_killed_halfway_runs_again_reusing_what_was_uploaded() {
    let (work, repo_dir, sidecar) = initialised();
    let source = work.path().join("data");
    build_mixed_data(&source, 300, 3);
    // The mixed data compresses to about 150 MB: more that does not compress, so that about half
    // of the packs are still to come when the first index object (of 8 packs) appears.
    add_incompressible(&source, 96, 33);
    killed_halfway_then_run_again(&sidecar, &repo_dir, &source, work.path()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_to_the_gate_killed_halfway_runs_again_reusing_what_was_uploaded() {
    let Some(server) = RestServer::start_with_login("cli_gate_killed") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("data");
    build_mixed_data(&source, 60, 5);
    add_incompressible(&source, 144, 55);
    let sidecar = Sidecar::through_gate(&server);
    sidecar.run(&["init"]).expect_ok();
    // rest-server keeps the repository in the same layout as a local one.
    let storage = server.data_dir().join("repo");
    killed_halfway_then_run_again(&sidecar, &storage, &source, work.path()).await;
}

#[test]
fn a_backup_killed_at_once_and_again_later_runs_again() {
    let (work, _repo_dir, sidecar) = initialised();
    let source = work.path().join("data");
    build_mixed_data(&source, 40, 4);
    add_incompressible(&source, 24, 44);
    // Very early (opening the repository, taking the lock), then while packs are sealed, sent
    // and indexed.
    for (delay_millis, limit) in [(300, "1G"), (900, "8M"), (2500, "8M")] {
        let mut child = spawn_backup(&sidecar, &source, work.path(), &["--limit-upload", limit]);
        std::thread::sleep(Duration::from_millis(delay_millis));
        if child.try_wait().unwrap().is_some() {
            panic!(
                "the backup ended before it was killed:\n{}",
                child_output(work.path())
            );
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }
    sidecar.run(&["backup", text(&source)]).expect_ok();
    assert_eq!(sidecar.snapshots().len(), 1);
    sidecar.restore_and_compare("latest", &source);
}

// ---------------------------------------------------------------------------------------------
// A full disk
// ---------------------------------------------------------------------------------------------

/// A small tmpfs mounted on a temporary folder, unmounted when dropped.
struct Tmpfs {
    dir: TempDir,
}

impl Tmpfs {
    fn mount(test: &str, size: &str) -> Option<Tmpfs> {
        if !neverwiped_testkit::require_that(
            is_root(),
            format_args!("mounting a small tmpfs for {test} needs root"),
            "run the tests as root (scripts/test.sh does)",
        ) {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("run mount");
        if !output.status.success() {
            let why = String::from_utf8_lossy(&output.stderr);
            neverwiped_testkit::missing(
                format_args!("cannot mount a tmpfs for {test}: {}", why.trim()),
                "run the tests as root where mounts are allowed (CAP_SYS_ADMIN)",
            );
            return None;
        }
        Some(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(self.dir.path())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !unmounted {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
    }
}

#[test]
fn a_backup_onto_a_full_repository_disk_fails_with_one_clear_line_and_the_repository_stays_valid() {
    let Some(small_disk) = Tmpfs::mount("a_backup_onto_a_full_repository_disk", "24m") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let repo = small_disk.path().join("repo");
    let sidecar = Sidecar::local(&repo);
    sidecar.run(&["init"]).expect_ok();
    let small = small_tree(work.path(), "small");
    sidecar.run(&["backup", text(&small)]).expect_ok();

    let big = work.path().join("big");
    add_incompressible(&big, 48, 9);
    let result_file = work.path().join("result.json");
    let run = sidecar
        .run(&["backup", text(&big), "--result-file", text(&result_file)])
        .expect_code(1);
    let error = run.error_line();
    assert!(error.to_lowercase().contains("no space left"), "{error}");
    let result = read_result(&result_file);
    assert_eq!(result.status, ExitStatus::Failed);
    assert!(!result.error.unwrap().contains('\n'), "one line");

    // The failed backup left no snapshot and no lock; the first snapshot still restores.
    assert_eq!(sidecar.snapshots().len(), 1);
    assert!(
        objects_in(&repo.join("locks")).is_empty(),
        "the lock was released"
    );
    sidecar.restore_and_compare("latest", &small);
}

/// The smallest memory budgets still move everything: a backup with one pack in flight and a
/// restore that holds 1 MiB of fetched data at a time give back the same tree.
#[test]
fn the_smallest_memory_budgets_back_up_and_restore_everything() {
    let (work, _repo_dir, sidecar) = initialised();
    let source = work.path().join("data");
    build_mixed_data(&source, 12, 9);
    add_incompressible(&source, 24, 45);
    sidecar
        .run(&["backup", "--upload-memory", "1M", text(&source)])
        .expect_ok();
    let target = work.path().join("restored");
    sidecar
        .run(&[
            "restore",
            "latest",
            "--fetch-memory",
            "1M",
            "--target",
            text(&target),
        ])
        .expect_ok();
    assert_same_tree(&source, &restored(&target, &source), is_root());

    let too_small = sidecar.run(&["backup", "--upload-memory", "64K", text(&source)]);
    assert!(
        too_small.stderr.contains("1M to 4G"),
        "{}",
        too_small.stderr
    );
    too_small.expect_code(ExitStatus::Failed.code());
}

// ---------------------------------------------------------------------------------------------
// Command-line mistakes
// ---------------------------------------------------------------------------------------------

#[test]
fn a_command_line_mistake_exits_1_and_still_writes_the_result_file() {
    let work = tempfile::tempdir().unwrap();
    let sidecar = Sidecar::local(&work.path().join("repo"));
    let result_file = work.path().join("result.json");
    let run = sidecar.run(&[
        "--result-file",
        text(&result_file),
        "backup",
        "--limit-upload",
        "0",
        "/tmp",
    ]);
    assert!(
        run.stderr.contains("upload limit must be above zero"),
        "{}",
        run.stderr
    );
    // restic's codes: 1 for a command that failed; the contract knows no other failure code.
    run.expect_code(ExitStatus::Failed.code());
    // The operator reads the result file (the termination log) whatever went wrong.
    let result = read_result(&result_file);
    assert_eq!(result.status, ExitStatus::Failed);
    assert!(result
        .error
        .unwrap()
        .contains("upload limit must be above zero"));
}

// ---------------------------------------------------------------------------------------------
// A damaged repository, through the CLI
// ---------------------------------------------------------------------------------------------

#[test]
fn a_damaged_pack_fails_the_restore_with_exit_1_naming_the_pack() {
    let (work, repo, sidecar) = initialised();
    let source = work.path().join("source");
    fs::create_dir(&source).unwrap();
    fs::write(
        source.join("data.bin"),
        Noise::new(21).bytes(2 * 1024 * 1024),
    )
    .unwrap();
    sidecar.run(&["backup", text(&source)]).expect_ok();
    // The largest pack holds the file's data; damage the middle of it (inside a blob).
    let packs: Vec<PathBuf> = objects_in(&repo.join("data"))
        .iter()
        .flat_map(|dir| objects_in(dir))
        .collect();
    let pack = packs
        .iter()
        .max_by_key(|p| fs::metadata(p).unwrap().len())
        .unwrap();
    let mut bytes = fs::read(pack).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    fs::write(pack, bytes).unwrap();

    let target = tempfile::tempdir().unwrap();
    let run = sidecar
        .run(&["restore", "latest", "--target", text(target.path())])
        .expect_code(1);
    let name = pack.file_name().unwrap().to_str().unwrap();
    assert!(
        run.error_line().contains(name),
        "the error names pack {name}: {}",
        run.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_left_by_a_killed_run_of_the_same_host_is_removed_by_the_next_backup() {
    let (work, repo_dir, sidecar) = initialised();
    let source = small_tree(work.path(), "source");
    // A run on the host "plan-pod" was killed while it held an exclusive lock (the worst case).
    let lock_id = write_exclusive_lock(&repo_dir, "plan-pod").await;
    let source_arg = source.to_str().unwrap();
    let blocked = sidecar.run(&["backup", source_arg]).expect_code(11);
    assert!(blocked.stderr.contains("plan-pod"), "{}", blocked.stderr);

    sidecar
        .run(&["backup", "--remove-locks-of-host", "plan-pod", source_arg])
        .expect_ok();
    assert!(!repo_dir.join("locks").join(lock_id.to_hex()).exists());
}

// ---------------------------------------------------------------------------------------------
// Retention after a backup, and what prune and check report
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_forget_and_prune_list_the_snapshots_of_their_host_newest_first() {
    let (work, _repo, sidecar) = initialised();
    let source = small_tree(work.path(), "source");
    let result_file = work.path().join("result.json");
    sidecar
        .run(&["backup", text(&source), "--host", "shop/other"])
        .expect_ok();
    let mut ids: Vec<String> = Vec::new();
    for night in 0..3u64 {
        fs::write(source.join("a.txt"), format!("night {night}\n")).unwrap();
        sidecar
            .run(&[
                "backup",
                text(&source),
                "--host",
                "shop/nightly",
                "--tag",
                "plan=nightly",
                "--result-file",
                text(&result_file),
            ])
            .expect_ok();
        let result = read_result(&result_file);
        ids.push(result.snapshot_id.clone().unwrap());
        let listed = result.host_snapshots.expect("the host's snapshots");
        assert_eq!(
            (listed.host.as_str(), listed.total),
            ("shop/nightly", night + 1)
        );
        let listed_ids: Vec<&str> = listed.newest.iter().map(|s| s.id.as_str()).collect();
        let newest_first: Vec<&str> = ids.iter().rev().map(|id| &id[..8]).collect();
        assert_eq!(listed_ids, newest_first);
        assert_eq!(listed.newest[0].tags, ["plan=nightly"]);
    }
    let after = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--result-file", text(&result_file)]);
        sidecar.run(&all).expect_ok();
        read_result(&result_file).host_snapshots
    };
    let forgot = after(&["forget", "--keep-last", "1", "--host", "shop/nightly"]).unwrap();
    assert_eq!(
        (forgot.total, forgot.newest[0].id.as_str()),
        (1, &ids[2][..8])
    );
    let pruned = after(&["prune", "--host", "shop/nightly"]).unwrap();
    assert_eq!((pruned.total, pruned.newest.len()), (1, 1));
    // Without a host, nothing is listed: the result does not guess whose snapshots matter.
    assert_eq!(after(&["prune"]), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_with_keep_rules_forgets_older_snapshots_of_its_host_only() {
    let (work, repo, sidecar) = initialised();
    let source = small_tree(work.path(), "source");
    let result_file = work.path().join("result.json");
    // Another plan's snapshot in the same repository: never touched by this host's retention.
    sidecar
        .run(&["backup", text(&source), "--host", "shop/other"])
        .expect_ok();
    let mut ids = Vec::new();
    for night in 0..3 {
        fs::write(source.join("a.txt"), format!("night {night}\n")).unwrap();
        sidecar
            .run(&[
                "backup",
                text(&source),
                "--host",
                "shop/nightly",
                "--keep-last",
                "2",
                "--result-file",
                text(&result_file),
            ])
            .expect_ok();
        let result = read_result(&result_file);
        ids.push(result.snapshot_id.clone().unwrap());
        assert_eq!(
            result.snapshots_forgotten,
            Some(u64::from(night == 2)),
            "{result:?}"
        );
        let repository = result.repository.expect("the repository is measured");
        assert_eq!(repository.snapshots, 1 + (night + 1).min(2));
        assert_eq!(repository.size_bytes, folder_bytes(&repo), "{result:?}");
    }
    let left: Vec<(String, String)> = sidecar
        .snapshots()
        .iter()
        .map(|s| {
            (
                s["hostname"].as_str().unwrap().to_owned(),
                s["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(left.len(), 3, "{left:?}");
    assert!(left.iter().any(|(host, _)| host == "shop/other"));
    assert!(!left.iter().any(|(_, id)| id == &ids[0]), "the oldest went");
    sidecar.restore_and_compare(&ids[2], &source);
}

#[test]
fn retention_that_the_gate_refuses_is_a_warning_and_the_snapshot_stays() {
    // Append-only credentials: backups work, deleting snapshots does not.
    let Some(server) = RestServer::start(
        "cli_append_only_retention",
        RestServerOptions {
            append_only: true,
            ..Default::default()
        },
    ) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let source = small_tree(work.path(), "source");
    let sidecar = Sidecar::new(format!("rest:{}", server.url()));
    sidecar.run(&["init"]).expect_ok();
    sidecar.run(&["backup", text(&source)]).expect_ok();
    let result_file = work.path().join("result.json");
    let run = sidecar
        .run(&[
            "backup",
            text(&source),
            "--keep-last",
            "1",
            "--result-file",
            text(&result_file),
        ])
        .expect_ok();
    let result = read_result(&result_file);
    // The backup is complete: a refused retention is a warning of it, not a partial run.
    assert_eq!(result.status, ExitStatus::Success);
    assert!(!run.stderr.contains("could not be read"), "{}", run.stderr);
    assert!(result.snapshot_id.is_some(), "{result:?}");
    assert!(
        result.warnings[0].starts_with("retention not applied:"),
        "{result:?}\n{}",
        run.stderr
    );
    assert_eq!(sidecar.snapshots().len(), 2, "nothing was lost");
}

#[test]
fn prune_and_check_report_what_they_did_in_the_result_file() {
    let (work, repo, sidecar) = initialised();
    let source = small_tree(work.path(), "source");
    sidecar.run(&["backup", text(&source)]).expect_ok();
    fs::write(source.join("c.bin"), Noise::new(6).bytes(400_000)).unwrap();
    sidecar.run(&["backup", text(&source)]).expect_ok();
    let forget_result = work.path().join("forget.json");
    sidecar
        .run(&[
            "forget",
            "--keep-last",
            "1",
            "--result-file",
            text(&forget_result),
        ])
        .expect_ok();
    // Forget counts snapshots, not files.
    let forgotten = read_result(&forget_result);
    assert_eq!(forgotten.operation, Operation::Forget);
    assert_eq!(forgotten.snapshots_forgotten, Some(1), "{forgotten:?}");
    assert_eq!(forgotten.files, 0, "{forgotten:?}");

    let result_file = work.path().join("prune.json");
    sidecar
        .run(&["prune", "--result-file", text(&result_file)])
        .expect_ok();
    let result = read_result(&result_file);
    assert_eq!(result.operation, Operation::Prune);
    let prune = result.prune.expect("prune stats");
    assert!(
        prune.bytes_freed >= 300_000 && prune.packs_deleted >= 1,
        "{prune:?}"
    );
    let repository = result.repository.expect("the repository is measured");
    assert_eq!(
        (repository.snapshots, repository.size_bytes),
        (1, folder_bytes(&repo))
    );

    let check_file = work.path().join("check.json");
    sidecar
        .run(&[
            "check",
            "--read-data-subset",
            "100%",
            "--result-file",
            text(&check_file),
        ])
        .expect_ok();
    let check = read_result(&check_file).check.expect("check stats");
    assert_eq!((check.snapshots, check.problems), (1, 0));
    assert_eq!(check.packs_read, check.packs);

    // A pack goes missing: the check fails, and its result counts and names the problem.
    let pack = fixtures::walk(&repo.join("data"))
        .into_iter()
        .find(|p| p.is_file())
        .unwrap();
    fs::remove_file(&pack).unwrap();
    let run = sidecar
        .run(&["check", "--result-file", text(&check_file)])
        .expect_code(1);
    let result = read_result(&check_file);
    assert_eq!(result.status, ExitStatus::Failed);
    assert!(result.check.expect("check stats").problems >= 1);
    let name = pack.file_name().unwrap().to_str().unwrap();
    let error = result.error.expect("an error");
    assert!(error.contains(name), "the error names pack {name}: {error}");
    assert_eq!(run.error_line(), format!("error: {error}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_lock_waits_for_another_holder_and_gives_up_after_its_duration() {
    let (work, repo_dir, sidecar) = initialised();
    let source = small_tree(work.path(), "source");
    // Another plan's prune holds the exclusive lock (fresh: not stale).
    let lock_id = write_exclusive_lock(&repo_dir, "other-plan").await;

    let started = Instant::now();
    let gave_up = sidecar
        .run(&["backup", text(&source), "--retry-lock", "2s"])
        .expect_code(11);
    assert!(started.elapsed() >= Duration::from_secs(2), "it waited");
    assert!(
        gave_up.error_line().contains("other-plan"),
        "{}",
        gave_up.stderr
    );

    // The holder finishes while a backup waits: the backup goes on.
    // Once it says it waits, the lock is removed.
    let logs = work.path().join("waiting");
    fs::create_dir(&logs).unwrap();
    let mut child = spawn_backup(&sidecar, &source, &logs, &["--retry-lock", "2m"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !child_output(&logs).contains("the repository is locked; waiting for it") {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the backup ended ({status}) without waiting:\n{}",
                child_output(&logs)
            );
        }
        assert!(
            Instant::now() < deadline,
            "no word of waiting within 60 s:\n{}",
            child_output(&logs)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    fs::remove_file(repo_dir.join("locks").join(lock_id.to_hex())).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}:\n{}", child_output(&logs));
    assert_eq!(sidecar.snapshots().len(), 1);
}

#[test]
fn the_arguments_the_operator_builds_are_the_ones_the_sidecar_takes() {
    use neverwiped_contract::cli::{
        BackupArgs, CheckArgs, DatabaseArg, DescribeArgs, KeepRules, PruneArgs, RestoreArgs,
        ScopedSelection,
    };
    use neverwiped_contract::drill::{DrillArgs, DrillSample};
    use neverwiped_contract::location::RepositoryLocation;
    let work = tempfile::tempdir().unwrap();
    let missing = work.path().join("no-repository");
    let password_file = work.path().join("db-password");
    fs::write(&password_file, "db secret\n").unwrap();
    let result_file = work.path().join("result.json");
    let repository = RepositoryLocation::parse(text(&missing)).unwrap();
    let result = text(&result_file).to_owned();
    // One plan entry dumping two chosen databases of one server, as the operator passes it.
    let databases = vec![
        DatabaseArg {
            name: "shop-db".into(),
            uri: "mariadb://backup@127.0.0.1:1/shop".into(),
            password_file: Some(text(&password_file).into()),
        },
        DatabaseArg {
            name: "shop-db".into(),
            uri: "mariadb://backup@127.0.0.1:1/audit".into(),
            password_file: None,
        },
    ];
    let commands = [
        BackupArgs {
            hooks: Vec::new(),
            streams: Vec::new(),
            paths: vec![text(work.path()).into()],
            repository: repository.clone(),
            result_file: result.clone(),
            host: Some("shop/nightly".into()),
            tags: vec![("plan".into(), "nightly".into())],
            excludes: vec!["/x/**/cache".into()],
            scoped: vec![(
                text(work.path()).into(),
                ScopedSelection {
                    exclude_caches: true,
                    exclude_if_present: vec![".nobackup:sig".into()],
                    exclude_larger_than: Some("1G".into()),
                },
            )],
            upload_limit_bytes_per_sec: Some(1_000_000),
            remove_locks_of_host: Some("nightly-0123".into()),
            databases: databases.clone(),
            keep: KeepRules {
                daily: Some(7),
                ..KeepRules::default()
            },
            retry_lock: Some("60s".into()),
            init: false,
            protect_within: Some("14d".into()),
            claims: vec![neverwiped_contract::record::RecordedClaim {
                path: text(work.path()).into(),
                name: "app".into(),
                ..Default::default()
            }],
        }
        .to_args(),
        RestoreArgs {
            streams: Vec::new(),
            snapshot: "latest".into(),
            repository: repository.clone(),
            result_file: result.clone(),
            host: Some("shop/nightly".into()),
            before: Some("2026-11-29T00:00:00Z".into()),
            databases: vec![DatabaseArg {
                name: "shop-db".into(),
                uri: "mariadb://backup@127.0.0.1:1".into(),
                password_file: Some(text(&password_file).into()),
            }],
            databases_to_overwrite: vec!["shop-db".into()],
            target: None,
            includes: Vec::new(),
            overwrite: Default::default(),
            delete: false,
            verify: false,
        }
        .to_args(),
        PruneArgs {
            repository: repository.clone(),
            result_file: result.clone(),
            remove_locks_of_host: Some("nightly-0123".into()),
            retry_lock: Some("60s".into()),
            host: Some("shop/nightly".into()),
            keep: KeepRules {
                last: Some(3),
                daily: Some(7),
                ..KeepRules::default()
            },
            protect_within: Some("36h".into()),
        }
        .to_args(),
        DescribeArgs {
            snapshot: "latest".into(),
            repository: repository.clone(),
            result_file: result.clone(),
            host: Some("shop/nightly".into()),
            before: Some("2026-11-29T00:00:00Z".into()),
        }
        .to_args(),
        CheckArgs {
            repository: repository.clone(),
            result_file: result.clone(),
            read_data_percent: Some(5),
            remove_locks_of_host: Some("nightly-0123".into()),
            retry_lock: Some("60s".into()),
        }
        .to_args(),
        DrillArgs {
            snapshot: "latest".into(),
            repository: repository.clone(),
            result_file: result.clone(),
            scratch: text(&work.path().join("scratch")).into(),
            host: Some("shop/nightly".into()),
            sample: DrillSample::Percent {
                percent: 10,
                round: 3,
            },
            databases: true,
        }
        .to_args(),
    ];
    for args in commands {
        // Every argument is accepted: the run gets as far as finding no repository (exit 10).
        let mut command = bare_command();
        command.env("NEVERWIPED_PASSWORD", PASSWORD).args(&args);
        let run = run(command).expect_code(10);
        assert!(
            read_result(&result_file)
                .error
                .unwrap()
                .contains("no-repository"),
            "{args:?}: {}",
            run.stderr
        );
    }
}

#[test]
fn backup_with_init_creates_a_missing_repository_once_and_refuses_a_foreign_one() {
    let Some(server) = RestServer::start("cli_backup_init", RestServerOptions::default()) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let source = small_tree(work.path(), "source");
    let sidecar = Sidecar::new(format!("rest:{}", server.url()));
    // Without --init, a missing repository is exit 10, and nothing is created.
    sidecar.run(&["backup", text(&source)]).expect_code(10);
    assert!(!server.data_dir().join("repo/config").exists());
    // A plan's first backup creates it; the next one uses it.
    let first = sidecar
        .run(&["backup", "--init", text(&source)])
        .expect_ok();
    assert!(
        first.stdout.contains("created neverwiped repository"),
        "{}",
        first.stdout
    );
    let second = sidecar
        .run(&["backup", "--init", text(&source)])
        .expect_ok();
    assert!(!second.stdout.contains("created"), "{}", second.stdout);
    assert_eq!(sidecar.snapshots().len(), 2);
    sidecar.restore_and_compare("latest", &source);

    // A folder that holds something else is not a missing repository: never written into.
    let foreign = work.path().join("foreign");
    fs::create_dir_all(&foreign).unwrap();
    fs::write(foreign.join("config"), "not ours").unwrap();
    Sidecar::local(&foreign)
        .run(&["backup", "--init", text(&source)])
        .expect_code(10);
    assert_eq!(fs::read_dir(&foreign).unwrap().count(), 1);
}

#[test]
fn sigterm_stops_a_run_at_once_with_a_result_and_no_snapshot() {
    let (work, _repo, sidecar) = initialised();
    let result_file = work.path().join("result.json");
    // A backup of standard input that never ends (the pipe stays open).
    let mut command = sidecar.command();
    command
        .args(["backup", "--stdin", "--result-file", text(&result_file)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // The run has started once this returns: a pipe holds 64 KiB, so the backup has read the
    // rest of the 2 MB.
    stdin.write_all(&Noise::new(9).bytes(2_000_000)).unwrap();
    let sent = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let run = Run::from_output(child.wait_with_output().unwrap(), None).expect_code(143);
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "{:?}",
        sent.elapsed()
    );
    drop(stdin);
    assert!(
        run.error_line().contains("stopped by SIGTERM"),
        "{}",
        run.stderr
    );
    let result = read_result(&result_file);
    assert!(result.snapshot_id.is_none() && result.status == ExitStatus::Terminated);
    assert!(sidecar.snapshots().is_empty());
}

/// Issue 13 item 6: a restore of `latest` states which snapshot it took, and when it was taken,
/// on standard output and in the result file, so that a gate withholding the newest snapshots
/// is seen.
#[test]
fn a_restore_of_latest_states_the_snapshot_id_and_time_it_used() {
    let (work, _repo, sidecar) = initialised();
    let source = work.path().join("source");
    fs::create_dir(&source).unwrap();
    fs::write(source.join("a.txt"), b"first").unwrap();
    sidecar.run(&["backup", text(&source)]).expect_ok();
    fs::write(source.join("a.txt"), b"second").unwrap();
    sidecar.run(&["backup", text(&source)]).expect_ok();
    let snapshots = sidecar.snapshots();
    let newest = snapshots
        .iter()
        .max_by_key(|s| s["time"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_else(|| panic!("no snapshots: {snapshots:?}"));
    let (id, time) = (
        newest["id"].as_str().unwrap().to_owned(),
        newest["time"].as_str().unwrap().to_owned(),
    );

    let target = tempfile::tempdir().unwrap();
    let result_file = work.path().join("restore-result.json");
    let run = sidecar
        .run(&[
            "restore",
            "latest",
            "--target",
            text(target.path()),
            "--result-file",
            text(&result_file),
        ])
        .expect_ok();
    assert!(
        run.stdout.contains(&id[..8]) && run.stdout.contains(&time),
        "the output does not name snapshot {id} of {time}:\n{}",
        run.stdout
    );
    let result = read_result(&result_file);
    assert_eq!(result.snapshot_id.as_deref(), Some(id.as_str()));
    assert_eq!(result.snapshot_time.as_deref(), Some(time.as_str()));
}
