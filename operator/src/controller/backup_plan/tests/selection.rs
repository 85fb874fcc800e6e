//! A selector that matches nothing, among other volumes; the schedule as it really runs.

use super::*;
use crate::api::BackupVolume;
use crate::conditions::Reason;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

fn selecting(labels: &[(&str, &str)]) -> BackupVolume {
    BackupVolume {
        claim_name: None,
        selector: Some(LabelSelector {
            match_labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..LabelSelector::default()
        }),
        ..BackupVolume::default()
    }
}

#[test]
fn a_selector_matching_nothing_does_not_stop_the_other_volumes() {
    let mut plan = plan();
    plan.spec.volumes.push(selecting(&[("backup", "yes")]));
    plan.spec.manual_trigger = Some("now".into());
    let decision = decide(&plan, &observed(), at("2026-11-30T10:00:00Z"), &settings());
    let ready = find_condition(&decision.status.conditions, types::READY).unwrap();
    assert_eq!(ready.status, "True", "{}", ready.message);
    let job = decision.create.expect("the named claim is backed up");
    let args = job.spec.unwrap().template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap();
    assert!(args.iter().any(|a| a.ends_with("/data")), "{args:?}");
    let selected = find_condition(&decision.status.conditions, types::VOLUMES_SELECTED).unwrap();
    assert_eq!(
        (selected.status.as_str(), selected.reason.as_str()),
        ("False", Reason::SelectorMatchedNothing.as_str())
    );
    assert!(
        selected.message.contains("backup=yes"),
        "{}",
        selected.message
    );

    // Once the selector matches, the condition goes.
    let mut observed = observed();
    let mut labelled = observed.claims[0].clone();
    labelled.metadata.name = Some("logs".into());
    labelled.metadata.labels = Some([("backup".to_string(), "yes".to_string())].into());
    observed.claims.push(labelled);
    plan.status = Some(decision.status);
    let matched = decide(&plan, &observed, at("2026-11-30T10:01:00Z"), &settings());
    assert!(find_condition(&matched.status.conditions, types::VOLUMES_SELECTED).is_none());
}

#[test]
fn a_plan_with_only_an_empty_selector_is_not_ready() {
    let mut plan = plan();
    plan.spec.volumes = vec![selecting(&[("backup", "yes")])];
    let decision = decide(&plan, &observed(), at("2026-11-30T10:00:00Z"), &settings());
    let ready = find_condition(&decision.status.conditions, types::READY).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", Reason::NoVolumesSelected.as_str())
    );
}

#[test]
fn a_hashed_schedule_runs_at_the_time_its_status_shows() {
    let mut plan = plan();
    plan.spec.schedule = "H H(1-5) * * *".into();
    plan.status = Some(BackupPlanStatus {
        last_schedule_time: Some(Time(at("2026-11-29T06:00:00Z"))),
        ..BackupPlanStatus::default()
    });
    let now = at("2026-11-30T00:00:00Z");
    let decision = decide(&plan, &observed(), now, &settings());
    let resolved = decision.status.resolved_schedule.clone().expect("shown");
    let fields: Vec<u32> = resolved
        .split_whitespace()
        .take(2)
        .map(|f| f.parse().unwrap())
        .collect();
    let (minute, hour) = (fields[0], fields[1]);
    assert!((1..=5).contains(&hour), "{resolved}");
    let runs_at = at(&format!("2026-11-30T{hour:02}:{minute:02}:00Z"));
    assert_eq!(decision.status.next_schedule_time, Some(Time(runs_at)));
    // The same plan in another namespace runs at its own time; the same one always at its own.
    let mut elsewhere = plan.clone();
    elsewhere.metadata.namespace = Some("blog".into());
    let again = decide(&plan, &observed(), now, &settings());
    assert_eq!(again.status.resolved_schedule.as_deref(), Some(&*resolved));
    let other = decide(&elsewhere, &observed(), now, &settings());
    assert!(other.status.resolved_schedule.is_some());

    // At that time, the run starts, for that scheduled time.
    plan.status = Some(decision.status);
    let due = decide(
        &plan,
        &observed(),
        runs_at + jiff::SignedDuration::from_secs(1),
        &settings(),
    );
    let active = due.status.active_run.expect("started");
    assert_eq!(active.scheduled_time, Some(Time(runs_at)));
    assert_eq!(active.trigger, RunTrigger::Schedule);
}
