//! Issue 34: a clean stop on SIGHUP, SIGINT and SIGTERM (restic's exit codes, no lock left, no
//! snapshot after the signal), stale locks that never block (PID reuse included), `unlock`, and
//! the reading commands on a repository that cannot be written.

use super::*;
use neverwiped::backend::ObjectKind;
use neverwiped::format::lock::{Lock, ProcessStart};
use nix::sys::signal::Signal;
use std::os::unix::fs::PermissionsExt;

/// Whether `needed` holds; if not, the test kit's rule: a failure where every test must run, else
/// a recorded skip.
fn required(test: &str, needed: bool, why: &str) -> bool {
    neverwiped_testkit::require_that(
        needed,
        format_args!("{why} (for {test})"),
        "run the tests as root on a machine that has it",
    )
}

fn send(child: &Child, signal: Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
}

/// Waits, while `child` runs, until `ready` holds; panics with the child's output when it ends
/// first or after 120 s.
fn wait_while_running(child: &mut Child, logs: &Path, what: &str, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ready() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the run ended ({status}) before {what}:\n{}",
                child_output(logs)
            );
        }
        assert!(
            Instant::now() < deadline,
            "no {what} within 120 s:\n{}",
            child_output(logs)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn lock_objects(repo_dir: &Path) -> Vec<PathBuf> {
    objects_in(&repo_dir.join("locks"))
}

async fn open(repo_dir: &Path) -> Repository {
    let backend: SharedBackend = Arc::new(LocalBackend::new(repo_dir));
    Repository::open(backend, PASSWORD.as_bytes())
        .await
        .unwrap()
}

/// Stores `lock` as another process would; returns the lock object's path.
async fn store_lock(repo_dir: &Path, lock: &Lock) -> PathBuf {
    let id = open(repo_dir)
        .await
        .write_object(ObjectKind::Locks, lock)
        .await
        .unwrap();
    repo_dir.join("locks").join(id.to_hex())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_during_a_backup_exits_130_leaves_no_lock_and_the_next_run_reuses_the_upload() {
    let (work, repo_dir, sidecar) = initialised();
    let source = work.path().join("data");
    // 192 MiB that do not compress: the first index object (8 packs) comes about halfway.
    add_incompressible(&source, 192, 34);
    let result_file = work.path().join("stopped.json");
    let limit = ["--limit-upload", "40M", "--result-file", text(&result_file)];
    let mut child = spawn_backup(&sidecar, &source, work.path(), &limit);
    wait_while_running(&mut child, work.path(), "an index object", || {
        !objects_in(&repo_dir.join("index")).is_empty()
    });
    assert_eq!(lock_objects(&repo_dir).len(), 1, "the backup holds a lock");
    let sent = Instant::now();
    send(&child, Signal::SIGINT);
    let status = child.wait().unwrap();
    let stopped_after = sent.elapsed();
    println!("SIGINT to exit: {stopped_after:?}");
    assert_eq!(status.code(), Some(130), "{}", child_output(work.path()));
    assert!(stopped_after < Duration::from_secs(20), "{stopped_after:?}");
    assert!(lock_objects(&repo_dir).is_empty(), "the lock is removed");
    let result = read_result(&result_file);
    assert_eq!(result.status, ExitStatus::Interrupted);
    assert_eq!(result.snapshot_id, None);
    let error = result.error.unwrap_or_default();
    assert!(error.contains("interrupted: stopped by SIGINT"), "{error}");
    assert!(
        sidecar.snapshots().is_empty(),
        "no snapshot after the signal"
    );
    sidecar.run(&["check"]).expect_ok();

    let indexed_before = indexed_pack_bytes(&repo_dir).await;
    let again = work.path().join("again.json");
    sidecar
        .run(&["backup", text(&source), "--result-file", text(&again)])
        .expect_ok();
    let second = read_result(&again);
    let final_indexed = indexed_pack_bytes(&repo_dir).await;
    println!(
        "stopped run left {indexed_before} B indexed; second run added {} B of {final_indexed} B",
        second.bytes_added
    );
    assert!(
        (second.bytes_added as f64) < 0.85 * final_indexed as f64,
        "the second run re-uploaded what the stopped one had stored"
    );
    sidecar.restore_and_compare(&second.snapshot_id.unwrap(), &source);
}

#[test]
fn sigterm_and_sighup_during_a_backup_exit_143_and_129_and_leave_no_lock() {
    for (signal, code, status) in [
        (Signal::SIGTERM, 143, ExitStatus::Terminated),
        (Signal::SIGHUP, 129, ExitStatus::Hangup),
    ] {
        let (work, repo_dir, sidecar) = initialised();
        let result_file = work.path().join("result.json");
        // A backup of standard input that never ends (the pipe stays open).
        let mut command = sidecar.command();
        command
            .args(["backup", "--stdin", "--result-file", text(&result_file)])
            .stdin(Stdio::piped())
            .stdout(fs::File::create(work.path().join("killed.stdout")).unwrap())
            .stderr(fs::File::create(work.path().join("killed.stderr")).unwrap());
        let mut child = command.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&Noise::new(9).bytes(2_000_000)).unwrap();
        wait_while_running(&mut child, work.path(), "a lock object", || {
            !lock_objects(&repo_dir).is_empty()
        });
        let sent = Instant::now();
        send(&child, signal);
        let exit = child.wait().unwrap();
        drop(stdin);
        assert_eq!(exit.code(), Some(code), "{}", child_output(work.path()));
        assert!(
            sent.elapsed() < Duration::from_secs(20),
            "{:?}",
            sent.elapsed()
        );
        assert!(lock_objects(&repo_dir).is_empty(), "{signal}: no lock left");
        let result = read_result(&result_file);
        assert_eq!(result.status, status);
        assert!(result.snapshot_id.is_none());
        assert!(sidecar.snapshots().is_empty());
        sidecar.run(&["check"]).expect_ok();
    }
}

#[test]
fn sigterm_to_a_prune_waiting_for_a_lock_exits_143_and_leaves_no_lock_of_its_own() {
    let (work, repo_dir, sidecar) = initialised();
    let source = small_tree(work.path(), "source");
    sidecar.run(&["backup", text(&source)]).expect_ok();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut holder = Lock::new(false, "backup");
    holder.hostname = "another-host".into();
    let held = rt.block_on(store_lock(&repo_dir, &holder));
    let mut command = sidecar.command();
    command
        .args(["--log-format", "text", "prune", "--retry-lock", "10m"])
        .env("NEVERWIPED_LOG", "info")
        .stdout(fs::File::create(work.path().join("killed.stdout")).unwrap())
        .stderr(fs::File::create(work.path().join("killed.stderr")).unwrap());
    let mut child = command.spawn().unwrap();
    wait_while_running(
        &mut child,
        work.path(),
        "the prune waiting for the lock",
        || child_output(work.path()).contains("waiting for it"),
    );
    send(&child, Signal::SIGTERM);
    let exit = child.wait().unwrap();
    assert_eq!(exit.code(), Some(143), "{}", child_output(work.path()));
    assert_eq!(
        lock_objects(&repo_dir),
        vec![held],
        "only the other holder's lock"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_whose_pid_now_belongs_to_another_process_is_stale_and_removed_by_the_next_run() {
    let (work, repo_dir, sidecar) = initialised();
    let source = small_tree(work.path(), "source");
    // A live process of this host; the lock says its PID once belonged to one that started
    // later (as after the PID counter wrapped round).
    let mut live = Command::new("sleep").arg("600").spawn().unwrap();
    let pid = live.id();
    let started = neverwiped::host::start_ticks(pid).expect("/proc/PID/stat of a child");
    let lock_of = |start_ticks: u64| Lock {
        pid,
        process_start: Some(ProcessStart {
            boot_id: neverwiped::host::boot_id().expect("the boot id"),
            start_ticks,
        }),
        ..Lock::new(true, "prune")
    };
    let reused = store_lock(&repo_dir, &lock_of(started + 1)).await;
    sidecar.run(&["backup", text(&source)]).expect_ok();
    assert!(!reused.exists(), "the stale lock of this host is removed");
    assert!(lock_objects(&repo_dir).is_empty());

    // The same PID with its true start time: the holder lives, the repository is locked.
    let holding = store_lock(&repo_dir, &lock_of(started)).await;
    let blocked = sidecar.run(&["backup", text(&source)]).expect_code(11);
    assert!(
        blocked.stderr.contains(&format!("pid {pid}")),
        "{}",
        blocked.stderr
    );
    let kept = sidecar.run(&["unlock"]).expect_ok();
    assert_eq!(kept.stdout, "", "nothing stale: restic prints nothing");
    assert!(holding.exists());
    live.kill().unwrap();
    live.wait().unwrap();
    let removed = sidecar.run(&["unlock"]).expect_ok();
    assert_eq!(removed.stdout.trim(), "successfully removed 1 locks");
    assert!(lock_objects(&repo_dir).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_removes_stale_locks_of_every_host_and_remove_all_removes_every_lock() {
    let (_work, repo_dir, sidecar) = initialised();
    let elsewhere = |age_minutes: i64| Lock {
        hostname: "another-host".into(),
        time: (chrono::Utc::now() - chrono::Duration::minutes(age_minutes)).to_rfc3339(),
        ..Lock::new(true, "prune")
    };
    let fresh = store_lock(&repo_dir, &elsewhere(1)).await;
    let unrefreshed = store_lock(&repo_dir, &elsewhere(31)).await;
    let dead_here = store_lock(
        &repo_dir,
        &Lock {
            pid: 0x7fff_fff0,
            ..Lock::new(false, "backup")
        },
    )
    .await;
    let damaged = repo_dir.join("locks").join("ab".repeat(32));
    fs::write(&damaged, b"not a lock").unwrap();

    let run = sidecar.run(&["unlock"]).expect_ok();
    assert_eq!(run.stdout.trim(), "successfully removed 3 locks");
    assert_eq!(lock_objects(&repo_dir), vec![fresh.clone()]);
    assert!(!unrefreshed.exists() && !dead_here.exists() && !damaged.exists());
    assert_eq!(sidecar.run(&["unlock"]).expect_ok().stdout, "");
    let json = sidecar.run(&["unlock", "--json"]).expect_ok();
    assert_eq!(json.stdout.trim(), r#"{"locksRemoved":0}"#);

    let all = sidecar.run(&["unlock", "--remove-all"]).expect_ok();
    assert_eq!(all.stdout.trim(), "successfully removed 1 locks");
    assert!(lock_objects(&repo_dir).is_empty());
}

/// Makes every file and folder below `root` read-only (`chmod -R a-w`).
fn make_read_only(root: &Path) {
    for entry in fixtures::walk(root) {
        let mode = fs::symlink_metadata(&entry).unwrap().permissions().mode();
        fs::set_permissions(&entry, fs::Permissions::from_mode(mode & !0o222)).unwrap();
    }
    let mode = fs::metadata(root).unwrap().permissions().mode();
    fs::set_permissions(root, fs::Permissions::from_mode(mode & !0o222)).unwrap();
}

/// The sidecar as root without the capabilities that let root write where the modes forbid it,
/// so a `chmod -R a-w` repository cannot be written (as on a read-only mount). It keeps
/// CAP_CHOWN and CAP_FOWNER, which a restore needs to give files their owners and times.
fn without_dac_override(sidecar: &Sidecar, args: &[&str]) -> Run {
    let mut command = Command::new("/usr/bin/setpriv");
    command
        .args(["--bounding-set=-dac_override,-dac_read_search", "--"])
        .arg(SIDECAR_BIN)
        .arg("--repo")
        .arg(&sidecar.repo)
        .env("NEVERWIPED_PASSWORD_FILE", &sidecar.password_file)
        .args(args)
        .stdin(Stdio::null());
    for name in support::sidecar::SIDECAR_VARIABLES {
        if name != "NEVERWIPED_PASSWORD_FILE" {
            command.env_remove(name);
        }
    }
    run(command)
}

#[test]
fn restore_ls_snapshots_and_check_work_on_a_read_only_repository_without_a_lock() {
    let test = "restore_ls_snapshots_and_check_work_on_a_read_only_repository_without_a_lock";
    let tools = is_root() && Path::new("/usr/bin/setpriv").exists();
    if !required(test, tools, "needs root and setpriv") {
        return;
    }
    let (work, repo_dir, sidecar) = initialised();
    let source = work.path().join("source");
    build_fidelity_tree(&source);
    sidecar.run(&["backup", text(&source)]).expect_ok();
    let copy = work.path().join("read-only-copy");
    fixtures::copy_dir(&repo_dir, &copy);
    make_read_only(&copy);
    let read_only = Sidecar::local(&copy);
    // The copy really cannot be written by the sidecar.
    let refused = without_dac_override(&read_only, &["backup", text(&source)]);
    assert_ne!(
        refused.code, 0,
        "a backup cannot write there:\n{}",
        refused.stderr
    );

    let small = format!("{}/small.txt", text(&source));
    for args in [
        vec!["snapshots"],
        vec!["ls", "latest"],
        vec!["check", "--read-data"],
        vec!["find", "*.txt"],
        vec!["diff", "latest", "latest"],
        vec!["stats", "--mode", "raw-data"],
        vec!["dump", "latest", &small],
    ] {
        let run = without_dac_override(&read_only, &args).expect_ok();
        assert!(
            run.stderr.contains("cannot be written") && run.stderr.contains("without a lock"),
            "{args:?} warns that it reads without a lock:\n{}",
            run.stderr
        );
    }
    let target = work.path().join("target");
    let run = without_dac_override(
        &read_only,
        &["restore", "latest", "--target", text(&target)],
    )
    .expect_ok();
    assert!(run.stderr.contains("without a lock"), "{}", run.stderr);
    // Every file's SHA-256 and metadata, owners included (root keeps CAP_CHOWN).
    assert_same_tree(&source, &restored(&target, &source), true);
    // --no-lock asks for no lock: nothing is tried, nothing to warn about.
    let quiet = without_dac_override(&read_only, &["--no-lock", "snapshots"]).expect_ok();
    assert!(
        !quiet.stderr.contains("cannot be written"),
        "{}",
        quiet.stderr
    );
    assert!(lock_objects(&copy).is_empty());
}

#[test]
fn a_restore_through_an_append_only_gate_takes_a_shared_lock_and_removes_it() {
    let options = support::RestServerOptions {
        append_only: true,
        ..Default::default()
    };
    let Some(server) = support::RestServer::start("cli_append_only_restore", options) else {
        return;
    };
    let sidecar = Sidecar::new(format!("rest:{}", server.repo_url("repo")));
    sidecar.run(&["init"]).expect_ok();
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    build_fidelity_tree(&source);
    sidecar.run(&["backup", text(&source)]).expect_ok();
    let target = work.path().join("target");
    let run = sidecar
        .run(&["restore", "latest", "--target", text(&target)])
        .expect_ok();
    assert!(!run.stderr.contains("without a lock"), "{}", run.stderr);
    assert_same_tree(&source, &restored(&target, &source), is_root());
    let stored = server.data_dir().join("repo");
    assert_eq!(
        objects_in(&stored.join("snapshots")).len(),
        1,
        "the server's folder"
    );
    assert!(lock_objects(&stored).is_empty());
}
