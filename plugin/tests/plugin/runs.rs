//! `backup --wait` and `restore` as the user whom the restore Role of `docs/security.md` binds,
//! with the test in the operator's place writing status: a failed run's message, which the
//! operator stored escaped and which may hold control characters written by hand, reaches the
//! terminal once, escaped once.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use neverwiped_testkit::{kubectl, kubectl_stdin};
use serde_json::{json, Value};

use super::plan_object;
use super::support::{Persona, TestNamespace};

/// A run's message as the operator stores it (`text::escaped` of "bad ESC]52;c;aGk=BEL in C:\x",
/// which would write the reader's clipboard), followed by an erase written into status by hand.
const STORED: &str = "bad \\x1b]52;c;aGk=\\x07 in C:\\\\x, then \u{1b}[2J by hand";

/// The same message as the terminal must show it: the operator's escapes as they are, the raw
/// escape escaped.
const SHOWN: &str = "bad \\x1b]52;c;aGk=\\x07 in C:\\\\x, then \\x1b[2J by hand";

/// How long the plugin is given to see a status and end (it reads status every 2 s).
const FOLLOW_DEADLINE: Duration = Duration::from_secs(20);

/// Starts the plugin as the user of `kubeconfig` in `namespace`, its output captured.
fn start_plugin(kubeconfig: &Path, namespace: &str, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_kubectl-neverwiped"))
        .env("KUBECONFIG", kubeconfig)
        .args(["-n", namespace])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the plugin starts")
}

/// Waits until `found` gives a value, or panics naming `what`.
fn wait_for<T>(what: &str, mut found: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + FOLLOW_DEADLINE;
    loop {
        if let Some(value) = found() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The plugin's output once it ended, killed (and failing the test) if it follows too long.
fn ended(mut child: Child) -> Output {
    let status = wait_for("the plugin to end", || child.try_wait().expect("wait"));
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_end(&mut stderr)
        .unwrap();
    Output {
        status,
        stdout,
        stderr,
    }
}

/// Patches the status of `object` (`kind/name`) in `namespace` as the operator would write it.
fn write_status(namespace: &str, object: &str, status: Value) {
    let patch = json!({ "status": status }).to_string();
    kubectl_stdin(
        &[
            "patch",
            object,
            "-n",
            namespace,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch,
        ],
        None,
    );
}

/// The message is shown exactly once, escaped once, and no control character reaches the
/// terminal.
fn shown_once(output: &Output, failure: &str) {
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!output.status.success(), "{said}");
    assert!(
        !said.contains('\u{1b}') && !said.contains('\u{7}'),
        "{said:?}"
    );
    assert_eq!(said.matches("bad ").count(), 1, "{said}");
    assert!(
        said.contains(&format!("error: {failure}: {SHOWN}\n")),
        "{said}"
    );
}

#[test]
fn a_failed_backup_and_restore_show_their_status_message_once_escaped_once() {
    if !super::support::api_server_or_skip() {
        return;
    }
    super::support::apply_crds();
    let namespace = TestNamespace::create("plugin-runs");
    let ns = namespace.name.as_str();
    let Some(operator_of_runs) = Persona::Restore.kubeconfig(&namespace) else {
        return;
    };
    namespace.create_object(&plan_object("nightly", "http://127.0.0.1:9/shop"));

    // backup --wait: the trigger it sets, answered by a failed run of that trigger.
    let backup = start_plugin(&operator_of_runs, ns, &["backup", "nightly", "--wait"]);
    let trigger = wait_for("the plugin's spec.manualTrigger", || {
        let value = kubectl(&[
            "get",
            "backupplan",
            "nightly",
            "-n",
            ns,
            "-o",
            "jsonpath={.spec.manualTrigger}",
        ]);
        (!value.is_empty()).then_some(value)
    });
    write_status(
        ns,
        "backupplan/nightly",
        json!({
            "lastManualTrigger": trigger,
            "history": [{
                "jobName": "nightly-manual", "trigger": "Manual", "result": "Failed",
                "reason": "BackupFailed", "message": STORED,
            }],
        }),
    );
    shown_once(&ended(backup), "the backup failed (BackupFailed)");

    // restore: the Restore it creates, answered by a failure.
    let restore = start_plugin(
        &operator_of_runs,
        ns,
        &["restore", "nightly", "--name", "back-again"],
    );
    wait_for("the plugin's Restore", || {
        let listed = kubectl(&["get", "restores.neverwiped.io", "-n", ns, "-o", "name"]);
        listed.contains("back-again").then_some(())
    });
    write_status(
        ns,
        "restores.neverwiped.io/back-again",
        json!({"phase": "Failed", "message": STORED}),
    );
    shown_once(&ended(restore), "the Restore failed");
}

/// The value of the plan's `neverwiped.io/verify-now` annotation, once the plugin set it.
fn verify_request(namespace: &str) -> String {
    wait_for("the plugin's neverwiped.io/verify-now", || {
        let value = kubectl(&[
            "get",
            "backupplan",
            "nightly",
            "-n",
            namespace,
            "-o",
            "jsonpath={.metadata.annotations.neverwiped\\.io/verify-now}",
        ]);
        (!value.is_empty()).then_some(value)
    })
}

#[test]
fn verify_follows_the_drill_it_asked_for_and_prints_its_recovery_time_or_failure() {
    if !super::support::api_server_or_skip() {
        return;
    }
    super::support::apply_crds();
    let namespace = TestNamespace::create("plugin-verify");
    let ns = namespace.name.as_str();
    let Some(operator_of_runs) = Persona::Restore.kubeconfig(&namespace) else {
        return;
    };
    namespace.create_object(&plan_object("nightly", "http://127.0.0.1:9/shop"));
    let drill = |job: &str, result: &str, reason: &str, message: &str| {
        json!({
            "jobName": job, "result": result, "reason": reason, "message": message,
            "snapshotId": "0123abcd", "recoverySeconds": 42.5, "recoveryTimeObjective": "1m",
            "volumes": [{"path": "/data/orders", "files": 3, "bytes": 3145728, "seconds": 2.0,
                         "bytesPerSecond": 1572864, "mismatched": 0}],
        })
    };

    // A drill that proves the data: the plugin waits behind a backup, sees its Job, prints it.
    let verify = start_plugin(&operator_of_runs, ns, &["verify", "nightly", "--wait"]);
    let request = verify_request(ns);
    write_status(
        ns,
        "backupplan/nightly",
        json!({"verify": {"waiting": "a backup of the plan is due"}}),
    );
    std::thread::sleep(Duration::from_secs(3));
    write_status(
        ns,
        "backupplan/nightly",
        json!({"verify": {"waiting": null, "lastRequest": request, "activeJob": "nightly-verify-1"}}),
    );
    std::thread::sleep(Duration::from_secs(3));
    let done = drill(
        "nightly-verify-1",
        "Succeeded",
        "Succeeded",
        "every file matched",
    );
    write_status(
        ns,
        "backupplan/nightly",
        json!({"verify": {"activeJob": null, "lastRun": done, "history": [done]}}),
    );
    let output = ended(verify);
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{said}");
    for line in [
        "waiting: a backup of the plan is due",
        "running: Job nightly-verify-1",
        "volume /data/orders: 3 file(s), ",
        "Succeeded: snapshot 0123abcd, recovered in 42.5 s (objective 1m)",
    ] {
        assert!(said.contains(line), "{line:?} not in {said}");
    }

    // A failed drill: its stored message reaches the terminal once, escaped once.
    let verify = start_plugin(&operator_of_runs, ns, &["verify", "nightly", "--wait"]);
    let request = wait_for("a new request", || {
        let value = verify_request(ns);
        (value != request).then_some(value)
    });
    let failed = drill("nightly-verify-2", "Failed", "VerifyFailed", STORED);
    write_status(
        ns,
        "backupplan/nightly",
        json!({"verify": {"lastRequest": request, "lastRun": failed, "history": [failed, done]}}),
    );
    shown_once(&ended(verify), "the drill failed (VerifyFailed)");
}
