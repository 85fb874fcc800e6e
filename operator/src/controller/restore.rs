//! The Restore reconciler: a Restore runs once. Fetch its plan, Secrets, target claims and Job;
//! [`decide`] (pure); apply: create claims and the Job, apply the status, publish Events.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::recorder::EventType;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use kube::ResourceExt;

use super::effects::{execute, Create, Delete, Effects, PlannedEvent};
use super::restore_describe::{
    before_describe, described_event, describing, record_failure, DescribeStep,
};
use super::restore_fetch::fetch;
pub use super::restore_fetch::ObservedRestore;
use super::{pod_of, Context, Error, Settings};
use crate::admission::check_restore;
use crate::api::{
    BackupPlan, DatabaseType, Restore, RestorePhase, RestoreStatus, DEFAULT_DEADLINE,
};
use crate::conditions::{condition_state, find_condition, types, ConditionStatus, Reason};
use crate::images::{images_not_allowed, restore_stream_images};
use crate::job::{describe_job, describe_job_name, restore_job, restore_job_name, RestoreRun};
use crate::mover::{restore_mover, MoverChoice};
use crate::plan::{
    check_secrets, credentials_used, env_secrets_used, not_ready, repository_secrets_used, Problem,
};
use crate::restore_access::{hosts_not_allowed, AccessReview};
use crate::restore_record::{check_quotas, claims_to_create, resolve, Described};
use crate::restore_source::{clone_refusal, copy_not_found, ReadFrom};
use crate::schedule::parse_duration;
use crate::status::{
    finish_restore, job_state, set_restore_conditions, JobEnd, JobState, Readiness,
    RestoreConditions,
};
use crate::volumes::{created_by_restore, restore_target_claim};

/// While the Job runs, its changes wake the reconciler; this only covers a missed watch event.
const ACTIVE_REQUEUE: Duration = Duration::from_secs(300);

/// What to do for a Restore.
#[derive(Debug, Clone)]
pub struct RestoreDecision {
    pub status: RestoreStatus,
    pub create_claims: Vec<PersistentVolumeClaim>,
    pub create_job: Option<Job>,
    pub delete_job: Option<String>,
    pub events: Vec<PlannedEvent>,
    /// `None`: nothing more to do until the Restore changes.
    pub requeue_after: Option<Duration>,
}

impl RestoreDecision {
    /// What the reconciler writes: the target claims and the Job, the status, the Events, and the
    /// Job of a run that cannot start.
    pub fn effects(&self) -> Effects<RestoreStatus> {
        let create = (self
            .create_claims
            .iter()
            .cloned()
            .map(|c| Create::Claim(Box::new(c))))
        .chain(
            self.create_job
                .iter()
                .cloned()
                .map(|job| Create::Job(Box::new(job))),
        )
        .collect();
        Effects {
            create,
            status: self.status.clone(),
            events: self.events.clone(),
            delete: self.delete_job.iter().cloned().map(Delete::Job).collect(),
        }
    }
}

/// Decides everything about `restore` at `now`, from what was fetched. No I/O.
pub fn decide(
    restore: &Restore,
    observed: &ObservedRestore,
    now: Timestamp,
    settings: &Settings,
) -> RestoreDecision {
    let mut decision = RestoreDecision {
        status: restore.status.clone().unwrap_or_default(),
        create_claims: Vec::new(),
        create_job: None,
        delete_job: None,
        events: Vec::new(),
        requeue_after: None,
    };
    if decision.status.phase.is_some_and(RestorePhase::is_finished) {
        return decision;
    }
    let generation = restore.metadata.generation;
    decision.status.observed_generation = generation;
    let ready_before = ready_state(&decision.status);
    // With a Job: its end, once it ended. Without: what the Restore lacks (nothing: it starts).
    let (ended, missing) = match &observed.job {
        // The Job exists: follow it to its end.
        Some(job) => (follow(job, observed, now, &mut decision), None),
        None => before_job(restore, observed, now, settings, &mut decision),
    };
    let readiness = missing.as_ref().map(|lacks| match lacks {
        None => Readiness::Ready,
        Some((reason, message)) => Readiness::NotReady {
            reason: *reason,
            message,
        },
    });
    let conditions = RestoreConditions {
        readiness,
        ended: ended.as_ref(),
    };
    set_restore_conditions(&mut decision.status, conditions, generation, now);
    if let Some(Some((reason, message))) = missing {
        if ready_state(&decision.status) != ready_before {
            decision.events.push(PlannedEvent {
                type_: EventType::Warning,
                reason,
                note: message,
            });
        }
    }
    decision
}

/// A Restore without its restore Job: the describe step first when it needs the snapshot's
/// record, then the checks and the restore Job. Returns how a failed describe step ended the
/// Restore, or what it lacks (`Some(None)`: nothing, it starts).
fn before_job(
    restore: &Restore,
    observed: &ObservedRestore,
    now: Timestamp,
    settings: &Settings,
    decision: &mut RestoreDecision,
) -> (Option<JobEnd>, Option<Option<(Reason, String)>>) {
    let (restore, start) = match &observed.describe {
        DescribeStep::NotNeeded => (restore.clone(), Start::Restore),
        DescribeStep::Start => (before_describe(restore), Start::Describe),
        DescribeStep::Running { job_name } => {
            describing(job_name, &mut decision.status);
            decision.requeue_after = Some(ACTIVE_REQUEUE);
            return (None, None);
        }
        DescribeStep::Failed { end, delete } => {
            let end = JobEnd {
                result: None,
                ..end.as_ref().clone()
            };
            if *delete {
                decision.delete_job = Some(describe_job_name(restore));
            }
            return (Some(fail(&end, now, decision)), None);
        }
        DescribeStep::Described(described) => {
            let resolved = resolve(restore, described).and_then(|resolved| {
                let claims = &observed.claims;
                let classes = &observed.storage_classes;
                let made = claims_to_create(&resolved, &described.sources, claims, classes)?;
                let namespace = restore.namespace().unwrap_or_default();
                check_quotas(&made, &observed.resource_quotas, &namespace)?;
                decision.create_claims.extend(made);
                Ok(resolved)
            });
            match resolved {
                Ok(resolved) => (resolved, Start::Pinned(described)),
                Err(problem) => {
                    decision.create_claims.clear();
                    let end = record_failure(&problem, now);
                    return (Some(fail(&end, now, decision)), None);
                }
            }
        }
    };
    let checked = check(&restore, observed, decision);
    let lacks = start_or_wait(&restore, observed, checked, start, now, settings, decision);
    (None, Some(lacks))
}

/// Ends the Restore as `end` says, before any restore Job: its status and a Warning Event.
fn fail(end: &JobEnd, now: Timestamp, decision: &mut RestoreDecision) -> JobEnd {
    finish_restore(&mut decision.status, end, now);
    decision.events.push(PlannedEvent {
        type_: EventType::Warning,
        reason: end.reason,
        note: decision.status.message.clone().unwrap_or_default(),
    });
    end.clone()
}

/// The state of a Restore's `Ready` condition, to tell when it changes.
fn ready_state(status: &RestoreStatus) -> Option<(ConditionStatus, Option<Reason>)> {
    find_condition(&status.conditions, types::READY).map(condition_state)
}

/// Follows the Restore's Job: records its end (and returns it), or shows it running.
fn follow(
    job: &Job,
    observed: &ObservedRestore,
    now: Timestamp,
    decision: &mut RestoreDecision,
) -> Option<JobEnd> {
    let end = match job_state(job, pod_of(job, &observed.pods), now) {
        JobState::Running => None,
        JobState::Ended(end) => Some(end),
        JobState::Blocked(end) => {
            decision.delete_job = job.metadata.name.clone();
            Some(end)
        }
    };
    let status = &mut decision.status;
    let Some(end) = end else {
        status.phase = Some(RestorePhase::Running);
        status.job_name = job.metadata.name.clone();
        decision.requeue_after = Some(ACTIVE_REQUEUE);
        return None;
    };
    finish_restore(status, &end, now);
    let (type_, reason) = match end.outcome.is_success() {
        true => (EventType::Normal, Reason::RestoreSucceeded),
        false => (EventType::Warning, Reason::RestoreFailed),
    };
    let note = status.message.clone().unwrap_or_default();
    decision.events.push(PlannedEvent {
        type_,
        reason,
        note,
    });
    Some(end)
}

/// What a Restore that has not started names, checked.
struct Checked {
    problems: Vec<Problem>,
    /// The engine of each database entry.
    database_types: BTreeMap<String, DatabaseType>,
    /// The plan's deadline, when it parses.
    deadline: Option<SignedDuration>,
}

/// Checks that everything the Restore names exists; the claims it is to create go on `decision`.
fn check(restore: &Restore, observed: &ObservedRestore, decision: &mut RestoreDecision) -> Checked {
    let spec = &restore.spec;
    let mut checked = Checked {
        problems: Vec::new(),
        database_types: BTreeMap::new(),
        deadline: None,
    };
    match ReadFrom::of(restore, observed.plan.as_ref()) {
        Some(from) => check_source(restore, &from, observed, &mut checked),
        // A plan or copy that is not there; an origin that does not parse is admission's refusal.
        None => checked
            .problems
            .extend(missing_source(restore, observed.plan.as_ref())),
    }
    for (index, volume) in spec.volumes.iter().enumerate() {
        let field = format!("spec.volumes[{index}].targetClaimName");
        let existing = observed.claims.get(&volume.target_claim_name);
        match (&volume.create_claim, existing) {
            // Made from the snapshot's record (`claims_to_create`), not a missing target.
            (None, None) if spec.create_claims.is_some() => {}
            (None, None) => checked.problems.push(Problem::TargetVolumeNotFound {
                name: volume.target_claim_name.clone(),
                field,
            }),
            (Some(_), Some(claim)) if !created_by_restore(claim, &restore.name_any()) => {
                checked.problems.push(Problem::TargetVolumeExists {
                    name: volume.target_claim_name.clone(),
                    field,
                })
            }
            (Some(new), None) => decision.create_claims.push(restore_target_claim(
                restore,
                &volume.target_claim_name,
                new,
            )),
            _ => {}
        }
    }
    checked
}

/// Why `restore` has no [`ReadFrom`]: the plan it names is not there, or has no copy of the name
/// it names. `None` for a repository named alone (an origin that does not parse is admission's).
fn missing_source(restore: &Restore, plan: Option<&BackupPlan>) -> Option<Problem> {
    let name = restore.spec.source.plan_name()?;
    match plan {
        None => Some(Problem::BackupPlanNotFound {
            name: name.to_owned(),
        }),
        Some(plan) => copy_not_found(restore, plan).map(Problem::CopyNotFound),
    }
}

/// Checks what the Restore reads from: its creator's access, the Secrets, each database's engine
/// and the deadline (the plan's, or the default without one).
fn check_source(
    restore: &Restore,
    from: &ReadFrom,
    observed: &ObservedRestore,
    checked: &mut Checked,
) {
    let spec = &restore.spec;
    let problems = &mut checked.problems;
    match &observed.access {
        AccessReview::NoRequester => problems.push(Problem::RequesterUnknown),
        AccessReview::Reviewed { denied } => {
            problems.extend(denied.iter().cloned().map(Problem::RequesterNotAllowed))
        }
    }
    let mut uses: Vec<_> = repository_secrets_used(from.repository)
        .into_iter()
        .map(|mut u| {
            if let Some(plan) = spec.source.plan_name() {
                u.field = format!("BackupPlan {plan:?}'s {}", u.field);
            }
            u
        })
        .collect();
    let plan_databases = from
        .plan
        .map(|p| p.spec.databases.as_slice())
        .unwrap_or(&[]);
    for (index, database) in spec.databases.iter().enumerate() {
        let field = format!("spec.databases[{index}].credentialsSecretRef");
        uses.extend(credentials_used(&database.credentials_secret_ref, &field));
        let engine = database.engine.or_else(|| {
            let entry = plan_databases.iter().find(|d| d.name == database.name);
            entry.map(|d| d.engine)
        });
        match engine {
            Some(engine) => {
                checked.database_types.insert(database.name.clone(), engine);
            }
            None => problems.push(Problem::UnknownDatabase {
                name: database.name.clone(),
                field: format!("spec.databases[{index}]"),
            }),
        }
    }
    for (index, stream) in spec.streams.iter().enumerate() {
        uses.extend(env_secrets_used(
            &stream.env,
            &format!("spec.streams[{index}]"),
        ));
    }
    problems.extend(check_secrets(&uses, &observed.secrets));
    let deadline = from
        .plan
        .map_or(DEFAULT_DEADLINE, |p| p.spec.deadline.as_str());
    match parse_duration(deadline) {
        Ok(parsed) => checked.deadline = Some(parsed),
        Err(error) => problems.push(Problem::Deadline(error)),
    }
}

/// Who the restore pod runs as; a refusal joins `problems`.
fn chosen_mover(
    restore: &Restore,
    observed: &ObservedRestore,
    settings: &Settings,
    problems: &mut Vec<Problem>,
) -> Option<MoverChoice> {
    restore_mover(restore, observed.plan.as_ref(), &settings.tenant_policy)
        .map_err(|refusal| problems.push(Problem::Refused(refusal)))
        .ok()
}

/// The image of each of the Restore's streams (its own, or its plan's stream's); a stream with
/// none, or an image the cluster's policy refuses, joins `problems`.
fn stream_images(
    restore: &Restore,
    observed: &ObservedRestore,
    settings: &Settings,
    problems: &mut Vec<Problem>,
) -> BTreeMap<String, String> {
    let plan = observed.plan.as_ref().map(|plan| &plan.spec);
    let images = restore_stream_images(&restore.spec, plan).unwrap_or_else(|unknown| {
        problems.extend(unknown.into_iter().map(Problem::UnknownStream));
        BTreeMap::new()
    });
    let named = (restore.spec.streams.iter().enumerate()).filter_map(|(index, stream)| {
        let image = images.get(&stream.name)?;
        Some((format!("spec.streams[{index}].image"), image.as_str()))
    });
    let namespace = restore.namespace().unwrap_or_default();
    let refused = images_not_allowed(named, &namespace, &settings.tenant_policy);
    problems.extend(refused.into_iter().map(Problem::ImageNotAllowed));
    images
}

/// Which Job a Restore that has everything it names starts.
#[derive(Clone, Copy)]
enum Start<'a> {
    /// The restore Job, of the Restore as written.
    Restore,
    /// The describe Job, to read the snapshot's record first.
    Describe,
    /// The restore Job of the Restore resolved against `Described`, pinned to its snapshot.
    Pinned(&'a Described),
}

/// Starts the Job when everything exists; otherwise a look again later, and what is missing
/// (the reason and message of `Ready=False`).
fn start_or_wait(
    restore: &Restore,
    observed: &ObservedRestore,
    checked: Checked,
    start: Start,
    now: Timestamp,
    settings: &Settings,
    decision: &mut RestoreDecision,
) -> Option<(Reason, String)> {
    let Checked {
        mut problems,
        database_types,
        deadline,
    } = checked;
    let plan_spec = observed.plan.as_ref().map(|plan| &plan.spec);
    let refusals = check_restore(
        &restore.spec,
        plan_spec,
        &observed.secret_types,
        &settings.tenant_policy,
    );
    problems.splice(0..0, refusals.into_iter().map(Problem::Refused));
    let namespace = restore.metadata.namespace.as_deref().unwrap_or_default();
    let hosts = hosts_not_allowed(&restore.spec, namespace, &settings.tenant_policy);
    problems.extend(hosts.into_iter().map(Problem::DatabaseHostNotAllowed));
    let from = ReadFrom::of(restore, observed.plan.as_ref());
    let clone = from.and_then(|from| clone_refusal(&from, namespace, &settings.tenant_policy));
    problems.extend(clone.map(Problem::CloneNotAllowed));
    let stream_images = stream_images(restore, observed, settings, &mut problems);
    let mover = chosen_mover(restore, observed, settings, &mut problems);
    match (not_ready(&problems), from, deadline) {
        (None, Some(from), Some(deadline)) => {
            let run = RestoreRun {
                deadline,
                database_types,
                mover: mover.as_ref().map(|m| m.mover.clone()).unwrap_or_default(),
                stream_images,
            };
            match start {
                Start::Describe => {
                    let job = describe_job(restore, &from, deadline, &settings.job);
                    start_describe(job, now, decision);
                }
                Start::Restore | Start::Pinned(_) => {
                    let job = restore_job(restore, &from, &run, &settings.job);
                    start_restore(restore, observed, job, start, now, decision);
                    decision.status.mover = mover.as_ref().map(MoverChoice::status);
                }
            }
            decision.requeue_after = Some(ACTIVE_REQUEUE);
            None
        }
        (not_ready, _, _) => {
            let (reason, message) =
                not_ready.unwrap_or((Reason::BackupPlanNotFound, String::new()));
            let status = &mut decision.status;
            status.phase = Some(RestorePhase::Pending);
            status.message = Some(message.clone());
            decision.create_claims.clear();
            decision.requeue_after = Some(settings.not_ready_recheck);
            Some((reason, message))
        }
    }
}

/// Creates the describe Job `job`: the Restore is describing its snapshot.
fn start_describe(job: Job, now: Timestamp, decision: &mut RestoreDecision) {
    let name = job.metadata.name.clone().unwrap_or_default();
    decision.events.push(PlannedEvent {
        type_: EventType::Normal,
        reason: Reason::DescribeStarted,
        note: format!("created Job {name} to read the snapshot's record"),
    });
    let status = &mut decision.status;
    status.phase = Some(RestorePhase::Describing);
    status.describe_job_name = Some(name);
    status.start_time = Some(Time(now));
    status.message = None;
    decision.create_job = Some(job);
}

/// Creates the restore Job `job` and the claims decided: the Restore runs, on the snapshot its
/// describe Job found when `start` is pinned to one.
fn start_restore(
    restore: &Restore,
    observed: &ObservedRestore,
    job: Job,
    start: Start,
    now: Timestamp,
    decision: &mut RestoreDecision,
) {
    if let Start::Pinned(described) = start {
        let created = decision.create_claims.len();
        decision.events.push(described_event(described, created));
        decision.status.snapshot_id = Some(described.snapshot_id.clone());
        let taken = described
            .snapshot_time
            .as_deref()
            .and_then(|t| t.parse().ok());
        decision.status.snapshot_time = taken.map(Time);
    }
    decision.events.push(PlannedEvent {
        type_: EventType::Normal,
        reason: Reason::RestoreStarted,
        note: format!("created Job {}", restore_job_name(restore)),
    });
    for claim in &decision.create_claims {
        decision.events.push(PlannedEvent {
            type_: EventType::Normal,
            reason: Reason::ClaimCreated,
            note: format!("created PersistentVolumeClaim {}", claim.name_any()),
        });
    }
    let status = &mut decision.status;
    // A claim this Restore made on an earlier try (its label says so) is one it created too.
    let (made_before, existed): (Vec<_>, Vec<_>) = (restore.spec.volumes.iter())
        .filter_map(|v| observed.claims.get(&v.target_claim_name))
        .partition(|claim| created_by_restore(claim, &restore.name_any()));
    let made_now = decision.create_claims.iter();
    status.created_claims = made_now.chain(made_before).map(|c| c.name_any()).collect();
    status.existing_claims = existed.iter().map(|c| c.name_any()).collect();
    status.phase = Some(RestorePhase::Running);
    status.job_name = job.metadata.name.clone();
    status.start_time = status.start_time.clone().or(Some(Time(now)));
    status.message = None;
    decision.create_job = Some(job);
}

/// Reconciles one Restore.
#[tracing::instrument(name = "reconcile", skip_all, fields(kind = "Restore", namespace = restore.namespace().unwrap_or_default(), name = %restore.name_any()))]
pub async fn reconcile(restore: Arc<Restore>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = restore.namespace().ok_or(Error::Incomplete {
        kind: "Restore",
        field: "namespace",
    })?;
    ctx.count_reconcile("Restore");
    if restore
        .status
        .as_ref()
        .and_then(|s| s.phase)
        .is_some_and(RestorePhase::is_finished)
    {
        return Ok(Action::await_change());
    }
    let now = Timestamp::now();
    let observed = fetch(&ctx.client, &namespace, &restore, now).await?;
    let decision = decide(&restore, &observed, now, &ctx.settings);

    execute(&ctx, restore.as_ref(), &decision.effects()).await?;
    Ok(decision
        .requeue_after
        .map(Action::requeue)
        .unwrap_or_else(Action::await_change))
}

#[cfg(test)]
#[path = "restore_tests.rs"]
pub(super) mod tests;
