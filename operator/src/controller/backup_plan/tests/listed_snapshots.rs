//! The plan's own snapshots in its status, from what the sidecar listed after a backup or prune.

use super::*;
use neverwiped_contract::{HostSnapshots, SnapshotEntry};

fn entry(id: &str, time: &str, files: u64, size_bytes: u64) -> SnapshotEntry {
    SnapshotEntry {
        id: id.into(),
        time: time.into(),
        files,
        size_bytes,
        tags: vec!["plan=nightly".into()],
    }
}

/// A finished backup Job whose pod reports `listed`.
fn backup_listing(observed: &mut ObservedPlan, name: &str, listed: Option<HostSnapshots>) {
    let result = RunResult {
        host_snapshots: listed,
        ..run_result(Operation::Backup, ExitStatus::Success)
    };
    observed
        .jobs
        .push(finished_job(name, "2026-11-30T02:31:00Z"));
    let mut pod = pod_for(name);
    let statuses = pod.status.as_mut().unwrap().container_statuses.as_mut();
    let terminated = statuses.unwrap()[0].state.as_mut().unwrap();
    terminated.terminated.as_mut().unwrap().message = Some(result.to_termination_message());
    observed.pods.push(pod);
}

#[test]
fn a_backup_that_listed_the_plans_snapshots_puts_them_in_the_status_newest_first() {
    let mut observed = observed();
    let listed = HostSnapshots {
        host: "shop/nightly".into(),
        total: 42,
        newest: vec![
            entry(
                "0f1e2d3c",
                "2026-11-30T02:30:05Z",
                1200,
                5 * 1024 * 1024 * 1024,
            ),
            entry("9a8b7c6d", "2026-11-29T02:30:04Z", 1199, 1000),
        ],
    };
    backup_listing(&mut observed, "nightly-manual-1", Some(listed));
    let now = at("2026-11-30T03:00:00Z");
    let decision = decide(&plan(), &observed, now, &settings());
    let snapshots = decision.status.snapshots.expect("the plan's snapshots");
    assert_eq!(snapshots.total, 42);
    assert_eq!(snapshots.listed_time, Time(at("2026-11-30T02:31:00Z")));
    let ids: Vec<&str> = snapshots.newest.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["0f1e2d3c", "9a8b7c6d"]);
    let newest = &snapshots.newest[0];
    assert_eq!(newest.time, Time(at("2026-11-30T02:30:05Z")));
    assert_eq!(newest.files, 1200);
    assert_eq!(newest.size_bytes, 5 * 1024 * 1024 * 1024);
    assert_eq!(newest.size, "5Gi");
    assert_eq!(newest.tags, ["plan=nightly"]);
    // The status field's wire names, as `kubectl get -o yaml` shows them.
    let json = serde_json::to_value(&snapshots).unwrap();
    assert_eq!(json["newest"][0]["sizeBytes"], 5_368_709_120_i64);
    assert_eq!(json["listedTime"], "2026-11-30T02:31:00Z");
}

#[test]
fn a_run_that_listed_nothing_keeps_the_last_list() {
    let mut observed = observed();
    let listed = HostSnapshots {
        host: "shop/nightly".into(),
        total: 1,
        newest: vec![entry("0f1e2d3c", "2026-11-30T02:30:05Z", 3, 300)],
    };
    backup_listing(&mut observed, "nightly-manual-1", Some(listed));
    let now = at("2026-11-30T03:00:00Z");
    let mut plan = plan();
    plan.status = Some(decide(&plan, &observed, now, &settings()).status);
    // A later run from an older sidecar (or one that could not list) reports no list.
    backup_listing(&mut observed, "nightly-manual-2", None);
    let decision = decide(&plan, &observed, now, &settings());
    assert_eq!(decision.finished.len(), 1);
    let snapshots = decision.status.snapshots.expect("the last list");
    assert_eq!(snapshots.total, 1);
    assert_eq!(snapshots.newest[0].id, "0f1e2d3c");
}

#[test]
fn a_prune_lists_the_plans_host_and_its_list_replaces_the_backups() {
    let mut plan = plan();
    plan.spec.maintenance = crate::api::Maintenance::default();
    plan.status = Some(BackupPlanStatus {
        last_schedule_time: Some(Time(at("2026-11-28T02:30:00Z"))),
        ..BackupPlanStatus::default()
    });
    let mut observed = observed();
    let decision = decide(&plan, &observed, at("2026-11-29T00:00:05Z"), &settings());
    let job = decision.create.clone().expect("a prune Job");
    // The sidecar lists the snapshots of the host the plan's backups are written under.
    assert!(args(&job)
        .windows(2)
        .any(|w| w == ["--host", "shop/nightly"]));
    plan.status = Some(decision.status);

    let pruned = RunResult {
        host_snapshots: Some(HostSnapshots {
            host: "shop/nightly".into(),
            total: 7,
            newest: vec![entry("aa11bb22", "2026-11-28T02:30:01Z", 10, 10)],
        }),
        ..run_result(Operation::Prune, ExitStatus::Success)
    };
    let name = job.name_any();
    let mut finished = job.clone();
    finished.status = finished_job(&name, "2026-11-29T00:10:00Z").status;
    observed.jobs.push(finished);
    let mut pod = pod_for(&name);
    let statuses = pod.status.as_mut().unwrap().container_statuses.as_mut();
    let terminated = statuses.unwrap()[0].state.as_mut().unwrap();
    terminated.terminated.as_mut().unwrap().message = Some(pruned.to_termination_message());
    observed.pods.push(pod);
    let decision = decide(&plan, &observed, at("2026-11-29T00:11:00Z"), &settings());
    assert!(decision.status.prune.last_run.is_some());
    let snapshots = decision.status.snapshots.expect("the prune's list");
    assert_eq!(snapshots.total, 7);
    assert_eq!(snapshots.newest[0].id, "aa11bb22");
    assert_eq!(snapshots.listed_time, Time(at("2026-11-29T00:10:00Z")));
}
