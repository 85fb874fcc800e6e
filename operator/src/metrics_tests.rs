//! The metrics' names and labels as Prometheus reads them, and what a deleted plan leaves.
use super::*;

#[test]
fn the_drill_series_are_named_for_the_alert_rules_and_go_with_their_plan() {
    let metrics = Metrics::default();
    let plan = PlanLabels {
        namespace: "shop".into(),
        plan: "nightly".into(),
    };
    let drills = &metrics.drills;
    drills.duration_seconds.get_or_create(&plan).set(1812.5);
    drills
        .last_success_timestamp_seconds
        .get_or_create(&plan)
        .set(1_800_000_000);
    drills.last_result.get_or_create(&plan).set(1);
    drills.objective_seconds.get_or_create(&plan).set(3600);
    let run = DrillRunLabels {
        namespace: plan.namespace.clone(),
        plan: plan.plan.clone(),
        result: drill_outcome_label(DrillOutcome::SucceededOverObjective),
    };
    drills.runs.get_or_create(&run).inc();
    let text = metrics.encode();
    for series in [
        "neverwiped_restore_drill_duration_seconds{namespace=\"shop\",plan=\"nightly\"} 1812.5",
        "neverwiped_restore_drill_last_success_timestamp_seconds{namespace=\"shop\",plan=\"nightly\"} 1800000000",
        "neverwiped_restore_drill_last_result{namespace=\"shop\",plan=\"nightly\"} 1",
        "neverwiped_restore_drill_objective_seconds{namespace=\"shop\",plan=\"nightly\"} 3600",
        "neverwiped_restore_drill_runs_total{namespace=\"shop\",plan=\"nightly\",result=\"SucceededOverObjective\"} 1",
    ] {
        assert!(text.contains(series), "{series} in\n{text}");
    }
    metrics.remove_plan(&plan);
    assert!(!metrics.encode().contains("restore_drill_duration_seconds{"));
    assert!(!metrics.encode().contains("restore_drill_runs_total{"));
}

#[test]
fn removing_a_plan_removes_its_counters_and_histogram_too() {
    let metrics = Metrics::default();
    let labels = |plan: &str| PlanLabels {
        namespace: "shop".into(),
        plan: plan.into(),
    };
    for plan in ["nightly", "hourly"] {
        let plan = labels(plan);
        metrics
            .backup_runs
            .get_or_create(&RunLabels {
                namespace: plan.namespace.clone(),
                plan: plan.plan.clone(),
                result: outcome_label(RunOutcome::Failed),
                reason: ReasonLabel(Reason::ALL[Reason::ALL.len() - 1]),
            })
            .inc();
        metrics
            .backup_duration_seconds
            .get_or_create(&plan)
            .observe(61.0);
        metrics.backup_bytes_sent.get_or_create(&plan).inc_by(10);
        metrics.backup_missed_runs.get_or_create(&plan).inc();
        metrics.prune_freed_bytes.get_or_create(&plan).inc();
        metrics
            .maintenance_runs
            .get_or_create(&MaintenanceLabels {
                namespace: plan.namespace.clone(),
                plan: plan.plan.clone(),
                kind: MaintenanceKind::Check.label(),
                result: outcome_label(RunOutcome::SucceededWithWarnings),
            })
            .inc();
        metrics.repository_check_ok.get_or_create(&plan).set(1);
    }
    metrics.remove_plan(&labels("nightly"));
    let text = metrics.encode();
    assert!(!text.contains("plan=\"nightly\""), "{text}");
    for family in [
        "backup_runs_total",
        "backup_duration_seconds_count",
        "maintenance_runs_total",
    ] {
        let kept = format!("neverwiped_{family}{{");
        assert!(
            text.lines()
                .any(|l| l.starts_with(&kept) && l.contains("plan=\"hourly\"")),
            "{family} of the other plan stays: {text}"
        );
    }
}

#[test]
fn metrics_are_exported_with_their_labels() {
    let metrics = Metrics::default();
    let plan = PlanLabels {
        namespace: "shop".into(),
        plan: "nightly".into(),
    };
    metrics
        .backup_last_success_timestamp_seconds
        .get_or_create(&plan)
        .set(1_764_466_200);
    metrics
        .backup_duration_seconds
        .get_or_create(&plan)
        .observe(42.0);
    metrics
        .backup_runs
        .get_or_create(&RunLabels {
            namespace: "shop".into(),
            plan: "nightly".into(),
            result: outcome_label(RunOutcome::Succeeded),
            reason: ReasonLabel(Reason::Succeeded),
        })
        .inc();
    let text = metrics.encode();
    assert!(
        text.contains(r#"neverwiped_backup_last_success_timestamp_seconds{namespace="shop",plan="nightly"} 1764466200"#),
        "{text}"
    );
    assert!(text.contains(r#"neverwiped_backup_runs_total{namespace="shop",plan="nightly",result="Succeeded",reason="Succeeded"} 1"#));
    metrics
        .backup_runs
        .get_or_create(&RunLabels {
            namespace: "shop".into(),
            plan: "nightly".into(),
            result: outcome_label(RunOutcome::Failed),
            reason: ReasonLabel(Reason::OomKilled),
        })
        .inc();
    let text = metrics.encode();
    assert!(
        text.contains(r#"neverwiped_backup_runs_total{namespace="shop",plan="nightly",result="Failed",reason="OOMKilled"} 1"#),
        "the label is the API's string, not the variant's name: {text}"
    );
    assert!(text.contains("neverwiped_backup_duration_seconds_count"));
}
