//! What a Job says about itself in annotations, for the queue: its node and repository host; and
//! the repository its sidecar is given.

use std::collections::BTreeMap;

use jiff::SignedDuration;

use super::tests::{from_plan, plan, restore, run, settings};
use super::*;
use crate::api::RunTrigger;
use crate::mover::Mover;

#[test]
fn a_job_says_its_node_and_repository_host_and_the_queue_reads_only_that() {
    use crate::controller::queue::watch::job_footprint;
    let job = backup_job(&plan(), &run(), &settings());
    let annotations = job.metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations[ANNOTATION_NODE], "node-7");
    assert_eq!(annotations[ANNOTATION_REPOSITORY_HOST], "gate.example.com");

    // Without arguments or affinity, the Job still tells the queue what it takes.
    let mut bare = job.clone();
    let pod = bare.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
    pod.affinity = None;
    pod.containers[0].args = None;
    let (_, _, footprint) = job_footprint(&bare).expect("an operator Job");
    assert_eq!(footprint.node.as_deref(), Some("node-7"));
    assert_eq!(footprint.host.as_deref(), Some("gate.example.com"));

    // Without the annotations, nothing is read from the arguments or the affinity.
    let mut unannotated = job;
    unannotated.metadata.annotations = None;
    let (_, _, footprint) = job_footprint(&unannotated).expect("an operator Job");
    assert_eq!(footprint.node, None);
    assert_eq!(footprint.host, None);
}

#[test]
fn maintenance_and_restore_jobs_name_their_repository_host_and_no_node() {
    let run = MaintenanceRun {
        kind: MaintenanceKind::Prune,
        trigger: RunTrigger::Schedule,
        scheduled_time: "2026-11-30T03:00:00Z".parse().unwrap(),
        deadline: SignedDuration::from_hours(6),
        remove_stale_locks: false,
    };
    let restore_run = RestoreRun {
        stream_images: Default::default(),
        deadline: SignedDuration::from_hours(12),
        database_types: BTreeMap::new(),
        mover: Mover::Privileged,
    };
    for job in [
        maintenance_job(&plan(), &run, &settings()),
        restore_job(
            &restore(),
            &from_plan(&restore(), &plan()),
            &restore_run,
            &settings(),
        ),
    ] {
        let annotations = job.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations[ANNOTATION_REPOSITORY_HOST], "gate.example.com");
        assert!(!annotations.contains_key(ANNOTATION_NODE));
    }
}

#[test]
fn a_repository_url_reaches_the_sidecar_as_written_whatever_kubernetes_expands() {
    let mut plan = plan();
    let url = "https://gate.example.com/$(NEVERWIPED_GATE_USERNAME)/shop";
    plan.spec.repository.url = url.into();
    let job = backup_job(&plan, &run(), &settings());
    let pod = job.spec.unwrap().template.spec.unwrap();
    let sidecar = pod.containers.iter().find(|c| c.name == SIDECAR_CONTAINER);
    let args = sidecar.and_then(|c| c.args.clone()).unwrap();
    let repo = args.iter().position(|arg| arg == "--repo").unwrap() + 1;
    let expanded = crate::expansion::expand(&args[repo], &|_| Some("alice".into()));
    assert_eq!(expanded, format!("rest:{url}"));
}
