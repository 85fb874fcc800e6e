//! A night that looks like an attack, as the operator binary (with the chart's RBAC) sees it from
//! the sidecar's results: three usual nights, then one that rewrote every file. The plan shows
//! `SuspiciousChange`, publishes a Warning Event and the metric, and its next backup Job forgets
//! nothing; an admin's acknowledgement brings its keep rules back.

use neverwiped_contract::{ChangeStats, ExitStatus, Operation, RunResult};
use serde_json::json;

use super::*;

/// A successful backup's result for night `night` of a 1000-file tree: `changed` files rewritten,
/// with `new_bytes` of new content compressed to `compressed`; no parent on the first night.
pub(super) fn night_result(night: u32, changed: u64, new_bytes: u64, compressed: u64) -> RunResult {
    let mut result = run_result(Operation::Backup, ExitStatus::Success);
    result.snapshot_id = Some(format!("{night:08x}{}", "ab".repeat(28)));
    result.changes = Some(ChangeStats {
        has_parent: night > 1,
        files_new: if night > 1 { 0 } else { 1000 },
        files_changed: changed,
        files_unmodified: if night > 1 { 1000 - changed } else { 0 },
        files_removed: 0,
        new_bytes_raw: new_bytes,
        new_bytes_compressed: compressed,
    });
    result
}

/// Sets `spec.manualTrigger` to `night`, waits for its Job and returns it.
async fn trigger(client: &Client, namespace: &str, night: u32) -> Job {
    trigger_backup(namespace, "nightly", &night.to_string());
    job_created(client, namespace, &format!("nightly-manual-{night}")).await
}

async fn finish(client: &Client, namespace: &str, night: u32, result: RunResult) -> Value {
    let job = format!("nightly-manual-{night}");
    let ending = Ending::Result {
        exit_code: 0,
        result: Box::new(result),
    };
    finish_job(client, namespace, &job, ending).await;
    run_recorded(namespace, "nightly", &job).await
}

/// The example plan's retention, as flags, with the two newest snapshots kept.
const KEEP_FLAGS: [&str; 4] = [
    "--keep-last",
    "--keep-daily",
    "--keep-weekly",
    "--keep-monthly",
];

fn keep_flags(job: &Job) -> Vec<String> {
    args_of(job)
        .into_iter()
        .filter(|arg| arg.starts_with("--keep-"))
        .collect()
}

#[tokio::test]
async fn a_night_that_rewrites_every_file_is_flagged_and_pauses_retention_until_acknowledged() {
    let Some(TestWorld { namespace, client }) = test_world("suspect").await else {
        return;
    };
    let ns = namespace.name.as_str();
    create_example_world(&client, ns).await;
    let operator = Operator::start(ns);
    let gauge = format!("neverwiped_suspicious_change{{namespace=\"{ns}\",plan=\"nightly\"}}");
    let mut plan = example_plan(ns);
    plan["spec"]["manualTrigger"] = json!("1");
    apply(&plan);

    // The first backup (no parent) and three usual nights: a dozen files, data that compresses.
    job_created(&client, ns, "nightly-manual-1").await;
    finish(&client, ns, 1, night_result(1, 0, 50 << 20, 20 << 20)).await;
    for night in 2..=4 {
        let job = trigger(&client, ns, night).await;
        assert_eq!(keep_flags(&job), KEEP_FLAGS, "{:?}", args_of(&job));
        let status = finish(
            &client,
            ns,
            night,
            night_result(night, 12, 4 << 20, 1 << 20),
        )
        .await;
        assert_eq!(
            condition(&status, "SuspiciousChange")["reason"],
            "ChangeUsual"
        );
    }
    assert_eq!(
        plan_status(ns, "nightly")["changeHistory"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert_eq!(operator.metric(&gauge), Some(0.0));

    // The attack: every file rewritten with data that does not compress.
    trigger(&client, ns, 5).await;
    let attack = night_result(5, 1000, 100 << 20, 100 << 20);
    let snapshot = attack.snapshot_id.clone().unwrap();
    let status = finish(&client, ns, 5, attack).await;
    let flagged = condition(&status, "SuspiciousChange");
    assert_eq!(
        (&flagged["status"], &flagged["reason"]),
        (&json!("True"), &json!("MassRewrite"))
    );
    let message = flagged["message"].as_str().unwrap();
    assert!(
        message.contains("100% of the parent's 1000 files were changed or removed (usually 1%)")
            && message.contains(&format!(
                "neverwiped.io/acknowledge-suspicious-change={snapshot}"
            )),
        "{message}"
    );
    assert_eq!(status["suspiciousChange"]["snapshotId"], snapshot.as_str());
    let event = event_seen(ns, "MassRewrite", "1000 files").await;
    assert_eq!(event["TYPE"], "Warning");
    eventually("the gauge at 1", ACT_TIMEOUT, || async {
        (operator.metric(&gauge) == Some(1.0)).then_some(())
    })
    .await;
    assert_eq!(plan_row(ns, "nightly")["SUSPICIOUS"], "MassRewrite");

    // The next backup forgets nothing, and a quiet night after the attack keeps the flag.
    let paused = trigger(&client, ns, 6).await;
    assert_eq!(
        keep_flags(&paused),
        Vec::<String>::new(),
        "{:?}",
        args_of(&paused)
    );
    let status = finish(&client, ns, 6, night_result(6, 0, 0, 0)).await;
    assert_eq!(condition(&status, "SuspiciousChange")["status"], "True");

    // An admin acknowledges it (the first 8 hex digits name the snapshot): retention resumes.
    kubectl(&[
        "annotate",
        "backupplan",
        "nightly",
        "-n",
        ns,
        &format!(
            "neverwiped.io/acknowledge-suspicious-change={}",
            &snapshot[..8]
        ),
    ]);
    let status = eventually("the acknowledgement on the status", ACT_TIMEOUT, || async {
        let status = plan_status(ns, "nightly");
        (condition(&status, "SuspiciousChange")["status"] == "False").then_some(status)
    })
    .await;
    assert_eq!(
        condition(&status, "SuspiciousChange")["reason"],
        "SuspiciousChangeAcknowledged"
    );
    assert!(status.get("suspiciousChange").is_none(), "{status}");
    event_seen(ns, "SuspiciousChangeAcknowledged", &snapshot).await;
    eventually("the gauge at 0", ACT_TIMEOUT, || async {
        (operator.metric(&gauge) == Some(0.0)).then_some(())
    })
    .await;
    let resumed = trigger(&client, ns, 7).await;
    assert_eq!(keep_flags(&resumed), KEEP_FLAGS);
}
