//! A bad day at the gate: the sidecar's runs through a proxy of our own that fails requests the
//! ways real gates and load balancers do (5xx before or after forwarding, connections dropped
//! before or after an upload reached the server, truncated and stalled answers), in front of a
//! real rest-server. Every run that reports success names a snapshot that is stored and restores
//! identically; `check --read-data` straight to the server stays clean; a gate that stays broken
//! past the retry budget, or fills up, fails the run clearly and loses nothing.

mod support;

use support::fixtures;

use bytes::Bytes;
use fixtures::{assert_same_tree, build_mixed_data, is_root, Noise, PASSWORD, TEST_KDF};
use neverwiped::backend::rest::RestBackend;
use neverwiped::backend::{ObjectKind, SharedBackend};
use neverwiped::repository::Repository;
use neverwiped_contract::{ExitStatus, RunResult};
use sha2::{Digest, Sha256};
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::fault_proxy::{Fault, FaultPlan, FaultProxy};
use support::{
    RcloneServer, RcloneServerOptions, RestServer, RestServerOptions, TestServer, TEST_REPO,
};
use tempfile::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_neverwiped-sidecar");

/// Every variable the sidecar reads: none may leak in from the environment running the tests.
const SIDECAR_VARIABLES: [&str; 11] = [
    "NEVERWIPED_REPOSITORY",
    "NEVERWIPED_PASSWORD",
    "NEVERWIPED_PASSWORD_FILE",
    "NEVERWIPED_GATE_USERNAME",
    "NEVERWIPED_GATE_PASSWORD",
    "NEVERWIPED_GATE_PASSWORD_FILE",
    "NEVERWIPED_GATE_CA_FILE",
    "NEVERWIPED_LOG_FORMAT",
    "NEVERWIPED_LOG",
    "NEVERWIPED_RETRY_BUDGET",
    "NEVERWIPED_RETRY_DELAY_MS",
];

/// What one run of the sidecar did.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    result: Option<RunResult>,
}

impl Run {
    #[track_caller]
    fn expect_code(self, code: i32) -> Run {
        assert_eq!(
            self.code, code,
            "exit code; stdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }

    /// A finished process and the result file it wrote, if any.
    fn of(output: std::process::Output, result_file: &Path) -> Run {
        let result = fs::read_to_string(result_file)
            .ok()
            .map(|json| RunResult::from_json(&json).expect("a RunResult"));
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            result,
        }
    }

    fn result(&self) -> &RunResult {
        self.result.as_ref().expect("a result file")
    }
}

/// A real rest-server, a fault proxy in front of it, and the sidecar pointed at either.
struct Gate {
    server: Box<dyn std::ops::Deref<Target = TestServer> + Send + Sync>,
    proxy: FaultProxy,
    password_file: PathBuf,
    work: TempDir,
}

impl Gate {
    /// rest-server with a repository initialised (straight, not through the proxy) and a proxy
    /// following `plan`; `None` when rest-server is not installed.
    async fn start(test: &str, plan: FaultPlan) -> Option<Gate> {
        Gate::start_with(test, RestServerOptions::default(), plan).await
    }

    async fn start_with(test: &str, options: RestServerOptions, plan: FaultPlan) -> Option<Gate> {
        let server = RestServer::start(test, options)?;
        Some(Gate::in_front_of(Box::new(server), plan).await)
    }

    /// The same in front of `rclone serve restic`.
    async fn start_rclone(test: &str, plan: FaultPlan) -> Option<Gate> {
        let server = RcloneServer::start(test, RcloneServerOptions::default())?;
        Some(Gate::in_front_of(Box::new(server), plan).await)
    }

    async fn in_front_of(
        server: Box<dyn std::ops::Deref<Target = TestServer> + Send + Sync>,
        plan: FaultPlan,
    ) -> Gate {
        let proxy = FaultProxy::start(server.address(), plan).await;
        let work = tempfile::tempdir().unwrap();
        let password_file = work.path().join("password");
        fs::write(&password_file, PASSWORD).unwrap();
        let gate = Gate {
            server,
            proxy,
            password_file,
            work,
        };
        Repository::init(gate.straight(), PASSWORD, TEST_KDF)
            .await
            .unwrap();
        gate
    }

    /// The repository without the proxy, as the bare protocol client.
    fn straight(&self) -> SharedBackend {
        Arc::new(RestBackend::new(self.server.rest_config()).unwrap())
    }

    /// Runs the sidecar through the proxy (or `straight` to the server) with a short retry
    /// budget and short pauses, and reads its result file.
    async fn run(&self, straight: bool, budget: &str, args: &[OsString]) -> Run {
        let (mut command, result_file) = self.command(straight, budget, args);
        // The proxy runs on this runtime: wait for the child on another thread.
        let output = tokio::task::spawn_blocking(move || command.output().unwrap())
            .await
            .unwrap();
        Run::of(output, &result_file)
    }

    /// The sidecar's command for [`Gate::run`], and where it writes its result.
    fn command(&self, straight: bool, budget: &str, args: &[OsString]) -> (Command, PathBuf) {
        let url = if straight {
            self.server.repo_url(TEST_REPO)
        } else {
            self.proxy.repo_url(TEST_REPO)
        };
        let result_file = self.work.path().join("result.json");
        let _ = fs::remove_file(&result_file);
        let mut command = Command::new(BIN);
        for name in SIDECAR_VARIABLES {
            command.env_remove(name);
        }
        command
            .stdin(Stdio::null())
            .env("NEVERWIPED_PASSWORD_FILE", &self.password_file)
            .env("NEVERWIPED_LOG_FORMAT", "json")
            .arg("--repo")
            .arg(format!("rest:{url}"))
            .arg("--retry-budget")
            .arg(budget)
            .arg("--retry-delay-ms")
            .arg("20")
            .arg("--result-file")
            .arg(&result_file)
            .args(args);
        (command, result_file)
    }

    async fn backup(&self, source: &Path, budget: &str) -> Run {
        let args = [OsString::from("backup"), source.as_os_str().to_owned()];
        self.run(false, budget, &args).await
    }

    /// The snapshot ids `snapshots --json` lists, straight from the server.
    async fn listed_snapshots(&self) -> Vec<String> {
        listed_ids(&self.snapshots_run().await)
    }

    async fn snapshots_run(&self) -> Run {
        let args = [OsString::from("snapshots"), OsString::from("--json")];
        self.run(true, "60s", &args).await.expect_code(0)
    }

    /// Restores `snapshot` through the proxy and compares it with `source`.
    async fn restore_and_compare(&self, snapshot: &str, source: &Path) -> Run {
        let target = tempfile::tempdir().unwrap();
        let args = [
            OsString::from("restore"),
            OsString::from(snapshot),
            OsString::from("--target"),
            target.path().as_os_str().to_owned(),
        ];
        let run = self.run(false, "60s", &args).await.expect_code(0);
        let restored = target.path().join(source.strip_prefix("/").unwrap());
        assert_same_tree(source, &restored, is_root());
        run
    }

    /// `check --read-data` straight to the server must find nothing wrong.
    async fn check_read_data_is_clean(&self) {
        let args = [OsString::from("check"), OsString::from("--read-data")];
        let run = self.run(true, "60s", &args).await;
        assert_eq!(
            run.code, 0,
            "check --read-data:\n{}\n{}",
            run.stdout, run.stderr
        );
    }
}

/// The snapshot ids a `snapshots --json` run listed.
fn listed_ids(run: &Run) -> Vec<String> {
    let listed: Vec<serde_json::Value> = serde_json::from_str(&run.stdout).unwrap();
    listed
        .iter()
        .map(|snapshot| snapshot["id"].as_str().unwrap().to_owned())
        .collect()
}

/// A night's changes: one file rewritten, one added, one removed.
fn change_tree(root: &Path, night: u64) {
    let mut noise = Noise::new(1000 + night);
    fs::write(
        root.join("logs/app-0.log"),
        noise.bytes(200_000 + night as usize),
    )
    .unwrap();
    fs::write(
        root.join(format!("media/night-{night}.bin")),
        noise.bytes(300_000),
    )
    .unwrap();
    let _ = fs::remove_file(root.join(format!("records/{:05}.json", night)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_nights_through_a_gate_failing_a_fifth_of_requests_all_succeed_and_restore_identically()
{
    let test = "six_nights_through_a_gate_failing_a_fifth_of_requests";
    let Some(gate) = Gate::start(test, FaultPlan::every_fault(20261201, 20)).await else {
        return;
    };
    let source = gate.work.path().join("app");
    build_mixed_data(&source, 3, 7);
    let mut reported = Vec::new();
    for night in 1..=6 {
        change_tree(&source, night);
        let run = gate.backup(&source, "60s").await;
        let run = run.expect_code(0);
        let result = run.result();
        assert_eq!(
            result.status,
            ExitStatus::Success,
            "night {night}: {result:?}"
        );
        let snapshot = result.snapshot_id.clone().expect("a snapshot id");
        // Status and repository agree: the reported snapshot is stored and listed.
        assert!(
            gate.listed_snapshots().await.contains(&snapshot),
            "night {night}: {snapshot} is not listed"
        );
        gate.restore_and_compare(&snapshot, &source).await;
        reported.push(snapshot);
    }
    assert_eq!(
        gate.listed_snapshots().await.len(),
        6,
        "one snapshot a night"
    );
    gate.check_read_data_is_clean().await;

    // The proxy did fail a fifth of the requests, in every way it knows.
    let injected = gate.proxy.injected();
    let requests = gate.proxy.requests();
    for fault in Fault::ALL {
        assert!(
            injected.get(&fault).copied().unwrap_or(0) > 0,
            "{fault:?}: {injected:?}"
        );
    }
    let total = gate.proxy.injected_total();
    eprintln!("{total} faults in {requests} requests: {injected:?}");
    assert!(
        total * 100 >= requests * 12 && total * 100 <= requests * 30,
        "{total} faults in {requests} requests"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nights_through_a_failing_gate_in_front_of_rclone_succeed_and_restore_identically() {
    let test = "nights_through_a_failing_gate_in_front_of_rclone";
    let Some(gate) = Gate::start_rclone(test, FaultPlan::every_fault(7, 20)).await else {
        return;
    };
    let source = gate.work.path().join("app");
    build_mixed_data(&source, 2, 11);
    for night in 1..=3 {
        change_tree(&source, night);
        let run = gate.backup(&source, "60s").await.expect_code(0);
        let snapshot = run.result().snapshot_id.clone().expect("a snapshot id");
        assert!(gate.listed_snapshots().await.contains(&snapshot));
        gate.restore_and_compare(&snapshot, &source).await;
    }
    gate.check_read_data_is_clean().await;
    assert!(
        gate.proxy.injected_total() > 10,
        "{:?}",
        gate.proxy.injected()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_retry_budget_a_run_fails_clearly_and_the_next_one_succeeds() {
    let test = "past_the_retry_budget_a_run_fails_clearly";
    let always_503 = FaultPlan {
        faults: vec![Fault::ErrorBeforeForwarding],
        ..FaultPlan::every_fault(1, 100)
    };
    let Some(gate) = Gate::start(test, always_503).await else {
        return;
    };
    let source = gate.work.path().join("app");
    build_mixed_data(&source, 1, 3);
    let started = Instant::now();
    let run = gate.backup(&source, "2s").await.expect_code(1);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    let error = run.result().error.clone().expect("an error in the result");
    assert!(error.contains("retry budget"), "{error}");
    assert!(error.contains("503"), "{error}");
    assert_eq!(run.result().snapshot_id, None);
    assert!(gate.listed_snapshots().await.is_empty());

    gate.proxy.set_plan(FaultPlan::none());
    let run = gate.backup(&source, "60s").await.expect_code(0);
    let snapshot = run.result().snapshot_id.clone().unwrap();
    gate.restore_and_compare(&snapshot, &source).await;
    gate.check_read_data_is_clean().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_that_fills_up_fails_the_backup_with_its_message_and_the_next_reuses_the_uploads() {
    let test = "a_gate_that_fills_up";
    let Some(gate) = Gate::start(test, FaultPlan::none()).await else {
        return;
    };
    let source = gate.work.path().join("app");
    // Random content that does not compress: about four packs of 8 MiB.
    fs::create_dir_all(&source).unwrap();
    let mut noise = Noise::new(99);
    for file in 0..8 {
        fs::write(
            source.join(format!("part-{file}.bin")),
            noise.bytes(4 << 20),
        )
        .unwrap();
    }
    gate.proxy.fill_up_after(2);
    let run = gate.backup(&source, "60s").await.expect_code(1);
    let error = run.result().error.clone().expect("an error in the result");
    assert!(error.contains("507"), "{error}");
    assert!(
        error.contains("quota of this repository exceeded"),
        "the gate's words: {error}"
    );
    assert!(gate.proxy.full_answers() >= 1);
    assert!(gate.listed_snapshots().await.is_empty());
    gate.check_read_data_is_clean().await;

    gate.proxy.free_space();
    let run = gate.backup(&source, "60s").await.expect_code(0);
    let result = run.result();
    let total = 32u64 << 20;
    assert!(
        result.bytes_added < total * 3 / 4,
        "the packs stored before the gate filled up are reused: {} of {total} bytes added",
        result.bytes_added
    );
    let snapshot = result.snapshot_id.clone().unwrap();
    gate.restore_and_compare(&snapshot, &source).await;
    gate.check_read_data_is_clean().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junk_posted_with_append_only_access_leaves_backups_and_restores_working_with_warnings() {
    let test = "junk_posted_with_append_only_access";
    let append_only = RestServerOptions {
        append_only: true,
        ..Default::default()
    };
    let Some(gate) = Gate::start_with(test, append_only, FaultPlan::every_fault(5, 20)).await
    else {
        return;
    };
    let source = gate.work.path().join("app");
    build_mixed_data(&source, 1, 5);
    let run = gate.backup(&source, "60s").await.expect_code(0);
    let first = run.result().snapshot_id.clone().unwrap();
    // Kept as the reference of the first night's tree (restored and compared with it now).
    let first_restore = tempfile::tempdir().unwrap();
    let args = [
        OsString::from("restore"),
        OsString::from(&first),
        OsString::from("--target"),
        first_restore.path().as_os_str().to_owned(),
    ];
    gate.run(false, "60s", &args).await.expect_code(0);
    let first_tree = first_restore.path().join(source.strip_prefix("/").unwrap());
    assert_same_tree(&source, &first_tree, is_root());

    // What anyone holding append-only access can post: objects named by their SHA-256.
    let mut junk = Vec::new();
    for (kind, bytes) in [
        (ObjectKind::Index, &b"an index that is not one"[..]),
        (ObjectKind::Snapshots, &b"{\"tree\":\"0000\"}"[..]),
        (ObjectKind::Locks, &b"\xff\xfe torn"[..]),
    ] {
        let name = hex::encode(Sha256::digest(bytes));
        gate.straight()
            .write(kind, &name, Bytes::copy_from_slice(bytes))
            .await
            .unwrap();
        junk.push(name);
    }
    let [junk_index, junk_snapshot, junk_lock] = [&junk[0], &junk[1], &junk[2]];

    change_tree(&source, 1);
    let run = gate.backup(&source, "60s").await.expect_code(0);
    let second = run.result().snapshot_id.clone().unwrap();
    for name in [junk_index, junk_snapshot, junk_lock] {
        assert!(
            run.stderr.contains(name.as_str()),
            "the backup warns of {name}:\n{}",
            run.stderr
        );
    }
    gate.restore_and_compare(&second, &source).await;

    // An earlier snapshot restores too, warning of the junk index it skipped.
    let target = tempfile::tempdir().unwrap();
    let args = [
        OsString::from("restore"),
        OsString::from(&first),
        OsString::from("--target"),
        target.path().as_os_str().to_owned(),
    ];
    let run = gate.run(false, "60s", &args).await.expect_code(0);
    assert!(run.stderr.contains(junk_index.as_str()), "{}", run.stderr);
    let restored = target.path().join(source.strip_prefix("/").unwrap());
    assert_same_tree(&first_tree, &restored, is_root());

    let run = gate.snapshots_run().await;
    let mut listed = listed_ids(&run);
    listed.sort();
    let mut expected = vec![first, second];
    expected.sort();
    assert_eq!(listed, expected, "the junk snapshot is not listed");
    assert!(
        run.stderr.contains(junk_snapshot.as_str()),
        "{}",
        run.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_stored_but_answered_with_an_error_is_reported_succeeded() {
    let test = "a_snapshot_stored_but_answered_with_an_error";
    for fault in [
        Fault::DropAfterForwarding,
        Fault::ErrorAfterForwarding,
        Fault::TruncateAnswer,
    ] {
        let plan = FaultPlan::first_tries_of("POST", "/snapshots/", &[fault]);
        let Some(gate) = Gate::start(test, plan).await else {
            return;
        };
        let source = gate.work.path().join("app");
        build_mixed_data(&source, 1, 9);
        let run = gate.backup(&source, "60s").await.expect_code(0);
        assert_eq!(
            gate.proxy.injected_total(),
            1,
            "{fault:?}: the snapshot's first write failed"
        );
        let snapshot = run.result().snapshot_id.clone().expect("a snapshot id");
        assert_eq!(run.result().status, ExitStatus::Success);
        assert_eq!(
            gate.listed_snapshots().await,
            vec![snapshot.clone()],
            "{fault:?}"
        );
        gate.restore_and_compare(&snapshot, &source).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_that_cannot_be_released_after_the_snapshot_leaves_the_backup_succeeded() {
    let test = "a_lock_that_cannot_be_released_after_the_snapshot";
    let always_503_on_lock_deletes = FaultPlan {
        faults: vec![Fault::ErrorBeforeForwarding],
        only: Some(("DELETE", "/locks/")),
        ..FaultPlan::every_fault(3, 100)
    };
    let Some(gate) = Gate::start(test, always_503_on_lock_deletes).await else {
        return;
    };
    let source = gate.work.path().join("app");
    build_mixed_data(&source, 1, 4);
    let run = gate.backup(&source, "2s").await.expect_code(0);
    assert!(
        gate.proxy.injected_total() > 1,
        "the lock's removal was refused and retried"
    );
    assert!(
        run.stderr.contains("could not remove the backup's lock"),
        "{}",
        run.stderr
    );
    gate.proxy.set_plan(FaultPlan::none());
    let snapshot = run.result().snapshot_id.clone().expect("a snapshot id");
    assert_eq!(run.result().error, None);
    assert_eq!(gate.listed_snapshots().await, vec![snapshot.clone()]);
    gate.restore_and_compare(&snapshot, &source).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_stopped_after_its_snapshot_was_stored_is_reported_succeeded_with_its_snapshot() {
    let test = "a_backup_stopped_after_its_snapshot_was_stored";
    // Retention's delete of the older snapshot reaches the server, its answer is held back: the
    // run is stopped while it waits, after its own snapshot was stored.
    let stalled_snapshot_deletes = FaultPlan {
        faults: vec![Fault::StallAnswer],
        only: Some(("DELETE", "/snapshots/")),
        stall: Duration::from_secs(60),
        ..FaultPlan::every_fault(5, 100)
    };
    let Some(gate) = Gate::start(test, stalled_snapshot_deletes).await else {
        return;
    };
    let source = gate.work.path().join("app");
    build_mixed_data(&source, 1, 4);
    let first = gate.backup(&source, "60s").await.expect_code(0);
    let first = first.result().snapshot_id.clone().expect("a snapshot id");
    change_tree(&source, 1);
    let args = [
        OsString::from("backup"),
        source.as_os_str().to_owned(),
        OsString::from("--keep-last"),
        OsString::from("1"),
    ];
    let (mut command, result_file) = gate.command(false, "60s", &args);
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let second = loop {
        let listed = gate.listed_snapshots().await;
        if let Some(second) = listed.into_iter().find(|id| *id != first) {
            break second;
        }
        assert!(
            Instant::now() < deadline,
            "the second snapshot was never stored"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let output = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let run = Run::of(output, &result_file).expect_code(143);
    let result = run.result();
    assert_eq!(result.status, ExitStatus::Terminated);
    assert_eq!(result.snapshot_id.as_deref(), Some(second.as_str()));
    let error = result.error.as_deref().unwrap_or_default();
    assert!(
        error.contains("stopped by SIGTERM after snapshot"),
        "{error}"
    );
    gate.proxy.set_plan(FaultPlan::none());
    assert!(gate.listed_snapshots().await.contains(&second));
    gate.restore_and_compare(&second, &source).await;
}
