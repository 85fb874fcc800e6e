//! `status [-A]`: every plan at a glance, from the plans' status alone (nothing is read from the
//! repositories), in a table that fits 100 columns.

use jiff::Timestamp;
use neverwiped_api::conditions::{types, ConditionStatus};
use neverwiped_api::pending_manual_trigger;
use neverwiped_api::{BackupPlan, RunKind, RunOutcome};

use crate::table::{age, fit};

/// The widest line [`render`] writes.
pub const TABLE_WIDTH: usize = 100;

/// One plan's line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub namespace: String,
    pub plan: String,
    /// Age of the last successful run.
    pub last_success: String,
    /// Age of the plan's newest snapshot in the repository.
    pub newest_snapshot: String,
    /// The plan's snapshots in the repository.
    pub snapshots: String,
    /// `Running`, `Pruning`, `Checking`, `Queued`, `Suspended`, `NotReady` or `Idle`.
    pub state: &'static str,
    pub repository_size: String,
    /// Failed runs since the last success (of the runs the status remembers).
    pub failures: usize,
    /// How the last run ended: `Succeeded`, `Warnings`, or the reason it failed.
    pub last_result: String,
}

/// The line of `plan` at `now`.
pub fn row(plan: &BackupPlan, now: Timestamp) -> Row {
    let status = plan.status.clone().unwrap_or_default();
    let dash = || "-".to_owned();
    let not_ready = status
        .conditions
        .iter()
        .any(|c| c.type_ == types::READY && ConditionStatus::of(c) == ConditionStatus::False);
    let state = match status.active_run.as_ref().map(|run| run.kind) {
        Some(RunKind::Backup) => "Running",
        Some(RunKind::Prune) => "Pruning",
        Some(RunKind::Check) => "Checking",
        None if pending_manual_trigger(&plan.spec, Some(&status)).is_some() => "Queued",
        None if not_ready => "NotReady",
        None if plan.spec.suspend => "Suspended",
        None => "Idle",
    };
    let listed = status.snapshots.as_ref();
    Row {
        namespace: plan.metadata.namespace.clone().unwrap_or_default(),
        plan: plan.metadata.name.clone().unwrap_or_default(),
        last_success: status
            .last_successful_time
            .as_ref()
            .map_or_else(dash, |t| age(t.0, now)),
        newest_snapshot: listed
            .and_then(|l| l.newest.first())
            .map_or_else(dash, |s| age(s.time.0, now)),
        snapshots: listed.map_or_else(dash, |l| l.total.to_string()),
        state,
        repository_size: status
            .repository
            .as_ref()
            .map_or_else(dash, |r| crate::runs::status_text(&r.size).into_owned()),
        failures: status
            .history
            .iter()
            .take_while(|run| !run.result.is_success())
            .count(),
        last_result: status
            .last_run
            .as_ref()
            .map_or_else(dash, |run| match run.result {
                RunOutcome::Succeeded => "Succeeded".to_owned(),
                RunOutcome::SucceededWithWarnings => "Warnings".to_owned(),
                RunOutcome::Failed => run.reason.clone(),
            }),
    }
}

/// The table: a header and one line per row, none wider than [`TABLE_WIDTH`]; the namespace
/// column only when `with_namespace`.
pub fn render(rows: &[Row], with_namespace: bool) -> Vec<String> {
    let line = |namespace: &str, cells: [&str; 8]| {
        let [plan, ok, newest, count, state, size, fails, result] = cells;
        let mut text = String::new();
        if with_namespace {
            text.push_str(&format!("{:<14} ", fit(namespace, 14)));
        }
        text.push_str(&format!(
            "{:<18} {:>8} {:>8} {:>5} {:<9} {:>7} {:>5} ",
            fit(plan, 18),
            fit(ok, 8),
            fit(newest, 8),
            fit(count, 5),
            state,
            fit(size, 7),
            fit(fails, 5),
        ));
        let room = TABLE_WIDTH - text.chars().count();
        // The operator stores messages escaped; raw control characters written by hand are
        // escaped here, and the operator's escapes are not escaped a second time.
        text.push_str(&fit(&crate::runs::status_text(result), room));
        text.trim_end().to_owned()
    };
    let mut lines = vec![line(
        "NAMESPACE",
        [
            "PLAN",
            "LAST OK",
            "NEWEST",
            "SNAPS",
            "STATE",
            "REPO",
            "FAILS",
            "LAST RESULT",
        ],
    )];
    for row in rows {
        let failures = row.failures.to_string();
        lines.push(line(
            &row.namespace,
            [
                &row.plan,
                &row.last_success,
                &row.newest_snapshot,
                &row.snapshots,
                row.state,
                &row.repository_size,
                &failures,
                &row.last_result,
            ],
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use neverwiped_api::{
        ActiveRun, BackupPlanSpec, BackupPlanStatus, PlanSnapshots, RepositoryStatus, RunRecord,
        RunTrigger, SnapshotRecord,
    };

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn plan(name: &str, status: BackupPlanStatus) -> BackupPlan {
        let spec: BackupPlanSpec = serde_json::from_value(serde_json::json!({
            "schedule": "@daily",
            "repository": {"url": "https://gate.example/r", "passwordSecretRef": {"name": "p", "key": "k"}},
            "volumes": [{"claimName": "data"}],
        }))
        .unwrap();
        let mut plan = BackupPlan::new(name, spec);
        plan.metadata.namespace = Some("a-namespace-with-a-long-name".into());
        plan.status = Some(status);
        plan
    }

    fn run(job: &str, result: RunOutcome, reason: &str) -> RunRecord {
        RunRecord::without_figures(job.into(), RunTrigger::Schedule, result, reason.into())
    }

    #[test]
    fn a_plan_reads_as_its_ages_state_size_and_failures_since_its_last_success() {
        let now = at("2026-11-30T12:00:00Z");
        let failed = run("n-3", RunOutcome::Failed, "RepositoryLocked");
        let status = BackupPlanStatus {
            last_successful_time: Some(Time(at("2026-11-29T02:30:00Z"))),
            history: vec![
                failed.clone(),
                run("n-2", RunOutcome::Failed, "WrongPassword"),
                run("n-1", RunOutcome::Succeeded, "Succeeded"),
                run("n-0", RunOutcome::Failed, "OOMKilled"),
            ],
            last_run: Some(failed),
            repository: Some(RepositoryStatus {
                size_bytes: 580_000_000,
                size: "553Mi".into(),
                snapshots: 30,
                measured_time: Time(now),
                key_id: None,
            }),
            snapshots: Some(PlanSnapshots {
                total: 14,
                newest: vec![SnapshotRecord {
                    id: "0f1e2d3c".into(),
                    time: Time(at("2026-11-29T02:30:00Z")),
                    files: 1,
                    size_bytes: 1,
                    size: "1".into(),
                    tags: vec![],
                }],
                listed_time: Time(now),
            }),
            ..BackupPlanStatus::default()
        };
        let row = row(&plan("nightly", status), now);
        assert_eq!(row.last_success, "33h");
        assert_eq!(row.newest_snapshot, "33h");
        assert_eq!(row.snapshots, "14");
        assert_eq!(row.state, "Idle");
        assert_eq!(row.repository_size, "553Mi");
        assert_eq!(row.failures, 2);
        assert_eq!(row.last_result, "RepositoryLocked");
    }

    #[test]
    fn running_and_queued_plans_say_so() {
        let now = at("2026-11-30T12:00:00Z");
        let running = BackupPlanStatus {
            active_run: Some(ActiveRun {
                job_name: "n-4".into(),
                kind: RunKind::Prune,
                trigger: RunTrigger::Schedule,
                scheduled_time: None,
                start_time: None,
            }),
            ..BackupPlanStatus::default()
        };
        assert_eq!(row(&plan("p", running), now).state, "Pruning");
        let mut queued = plan("q", BackupPlanStatus::default());
        queued.spec.manual_trigger = Some("now".into());
        assert_eq!(row(&queued, now).state, "Queued");
        let idle = row(&plan("i", BackupPlanStatus::default()), now);
        assert_eq!((idle.state, idle.last_success.as_str()), ("Idle", "-"));
    }

    #[test]
    fn a_status_message_the_operator_escaped_is_shown_escaped_once() {
        let now = at("2026-11-30T12:00:00Z");
        let mut shown = row(&plan("p", BackupPlanStatus::default()), now);
        let written = "bad \u{1b}]52;c;aGk=\u{7} in C:\\x";
        shown.last_result = neverwiped::text::escaped(written).into_owned();
        let line = &render(std::slice::from_ref(&shown), false)[1];
        assert!(
            line.ends_with("bad \\x1b]52;c;aGk=\\x07 in C:\\\\x"),
            "{line}"
        );
        // A raw escape written into status by hand does not reach the terminal either.
        shown.last_result = written.to_owned();
        let line = &render(&[shown], false)[1];
        assert!(
            line.ends_with("bad \\x1b]52;c;aGk=\\x07 in C:\\x"),
            "{line}"
        );
    }

    #[test]
    fn every_line_fits_100_columns_even_with_the_longest_names() {
        let now = at("2026-11-30T12:00:00Z");
        let mut long = row(&plan(&"p".repeat(253), BackupPlanStatus::default()), now);
        long.last_result = "SomeVeryLongReasonThatGoesOnAndOn".repeat(4);
        long.repository_size = "1023.9Pi".into();
        long.failures = 10;
        for with_namespace in [true, false] {
            let lines = render(std::slice::from_ref(&long), with_namespace);
            assert_eq!(lines.len(), 2);
            for line in &lines {
                assert!(line.chars().count() <= TABLE_WIDTH, "{line}");
            }
            assert!(lines[1].ends_with('…'), "{}", lines[1]);
        }
        let lines = render(&[long], true);
        assert!(lines[0].starts_with("NAMESPACE"));
        assert!(lines[1].starts_with("a-namespace-w…"));
    }
}
