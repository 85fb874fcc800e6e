//! `backup` and `restore`: what the operator does, asked for through the API — a changed
//! `spec.manualTrigger`, a new Restore — and followed through their status to the end.

use std::time::Duration;

use anyhow::{bail, Result};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use neverwiped_api::{
    BackupPlan, NonEmptyTargetPolicy, Repository, Restore, RestoreDatabase, RestorePhase,
    RestoreSource, RestoreSpec, RestoreVolume, RunRecord,
};

use crate::cluster::Cluster;
use crate::table::bytes;

/// Text of a status (a message, a reason, a Job's name) for a terminal, through the one function
/// every status message the plugin prints goes through: the operator stores its messages escaped,
/// so their escapes show once, and control characters written by hand are escaped.
pub fn status_text(text: &str) -> std::borrow::Cow<'_, str> {
    neverwiped::text::escaped_status(text)
}

/// A followed run that failed, in the words of its status, already made fit for a terminal by
/// [`status_text`]: printed as it is, never escaped a second time.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RunFailed(pub String);

/// The first eight characters of a snapshot id from a status (whatever it holds).
fn short_id(id: Option<&str>) -> String {
    id.map_or_else(
        || "-".to_owned(),
        |id| status_text(&id.chars().take(8).collect::<String>()).into_owned(),
    )
}

/// How often a followed run's status is read.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);

/// The `spec.manualTrigger` value of a backup asked for at `now`: unique per second.
pub fn trigger_value(now: jiff::Timestamp) -> String {
    format!("kubectl-neverwiped-{}", now.as_second())
}

/// Where a triggered backup is, from the plan's status.
#[derive(Debug, Clone, PartialEq)]
pub enum BackupProgress {
    /// The operator has not acted on the trigger yet (it is busy, or not running).
    Queued,
    /// Its Job runs.
    Running { job_name: String },
    /// It ended.
    Finished(Box<RunRecord>),
}

/// Where the backup of `trigger` is. `job` is the Job seen running for it, once seen.
pub fn backup_progress(plan: &BackupPlan, trigger: &str, job: Option<&str>) -> BackupProgress {
    let Some(status) = plan.status.as_ref() else {
        return BackupProgress::Queued;
    };
    if status.last_manual_trigger.as_deref() != Some(trigger) {
        return BackupProgress::Queued;
    }
    if let Some(active) = status.active_run.as_ref() {
        if job.is_none_or(|job| job == active.job_name) {
            return BackupProgress::Running {
                job_name: active.job_name.clone(),
            };
        }
    }
    // Acted on and no longer running: the newest finished run is it (or, when its Job was never
    // seen running, the run that consumed the trigger).
    let finished = status
        .history
        .iter()
        .find(|run| job.is_none_or(|job| run.job_name == job));
    match finished {
        Some(run) => BackupProgress::Finished(Box::new(run.clone())),
        None => BackupProgress::Queued,
    }
}

/// Asks for a backup of the plan now; with `wait`, follows it to its end and fails when it
/// failed.
pub async fn backup(cluster: &Cluster, namespace: &str, name: &str, wait: bool) -> Result<()> {
    let trigger = trigger_value(jiff::Timestamp::now());
    cluster.trigger(namespace, name, &trigger).await?;
    println!("backup of {namespace}/{name} asked for (spec.manualTrigger={trigger})");
    if !wait {
        return Ok(());
    }
    let mut job: Option<String> = None;
    let mut shown: Option<BackupProgress> = None;
    loop {
        let plan = cluster.plan(namespace, name).await?;
        let progress = backup_progress(&plan, &trigger, job.as_deref());
        if shown.as_ref() != Some(&progress) {
            match &progress {
                BackupProgress::Queued => println!("queued: waiting for the operator"),
                BackupProgress::Running { job_name } => {
                    println!("running: Job {}", status_text(job_name));
                    job = Some(job_name.clone());
                }
                BackupProgress::Finished(run) => return finished(run),
            }
            shown = Some(progress);
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

fn finished(run: &RunRecord) -> Result<()> {
    let sent = run.bytes_sent.map_or(0, |b| u64::try_from(b).unwrap_or(0));
    if !run.result.is_success() {
        return Err(RunFailed(format!(
            "the backup failed ({}): {}",
            status_text(&run.reason),
            status_text(run.message.as_deref().unwrap_or("no message"))
        ))
        .into());
    }
    println!(
        "{:?}: snapshot {}, {} file(s) read, {} sent",
        run.result,
        short_id(run.snapshot_id.as_deref()),
        run.files_read.unwrap_or(0),
        bytes(sent)
    );
    Ok(())
}

/// What `restore` is asked to bring back.
#[derive(Debug, Clone, Default)]
pub struct RestoreRequest {
    pub name: Option<String>,
    pub snapshot: String,
    pub taken_before: Option<jiff::Timestamp>,
    /// `(source claim, target claim)`; empty: each claim the plan names, in place.
    pub volumes: Vec<(String, String)>,
    pub includes: Vec<String>,
    /// The plan's database entries to restore into the server they were dumped from.
    pub databases: Vec<String>,
    pub overwrite_databases: bool,
    /// The plan's copy to restore from, in place of its repository.
    pub copy: Option<String>,
}

/// The Restore that `request` means for `plan`.
pub fn restore_object(
    plan: &BackupPlan,
    request: &RestoreRequest,
    now: jiff::Timestamp,
) -> Result<Restore> {
    let plan_name = plan.metadata.name.clone().unwrap_or_default();
    let mut pairs = request.volumes.clone();
    if pairs.is_empty() && request.databases.is_empty() {
        pairs = plan
            .spec
            .volumes
            .iter()
            .filter_map(|v| v.claim_name.clone())
            .map(|claim| (claim.clone(), claim))
            .collect();
        if pairs.is_empty() {
            bail!(
                "the plan names its volumes by selector: say which with --volume SOURCE[=TARGET]"
            );
        }
    }
    let mut databases = Vec::new();
    for entry in &request.databases {
        let Some(source) = plan.spec.databases.iter().find(|d| d.name == *entry) else {
            bail!("the plan has no database entry {entry:?}");
        };
        databases.push(RestoreDatabase {
            name: source.name.clone(),
            engine: Some(source.engine),
            host: source.host.clone(),
            port: source.port,
            credentials_secret_ref: source.credentials_secret_ref.clone(),
            on_non_empty_target: if request.overwrite_databases {
                NonEmptyTargetPolicy::Overwrite
            } else {
                NonEmptyTargetPolicy::Refuse
            },
        });
    }
    let source = RestoreSource::Plan {
        backup_plan_name: plan_name.clone(),
        copy: request.copy.clone(),
    };
    let namespace = plan.metadata.namespace.clone().unwrap_or_default();
    let mut restore = new_restore(source, &namespace, &plan_name, request, &pairs, now);
    restore.spec.databases = databases;
    Ok(restore)
}

/// The Restore that `request` means for the snapshots of `origin` (`NAMESPACE/PLAN`) in
/// `repository`, created in `namespace`, whose Secrets it names: for the day the plan is gone, or
/// a clone into another namespace. Only volumes: a database's target server is the plan's.
pub fn restore_from_repository(
    repository: Repository,
    origin: &str,
    namespace: &str,
    request: &RestoreRequest,
    now: jiff::Timestamp,
) -> Result<Restore> {
    if !request.databases.is_empty() {
        bail!(
            "--database restores into the server the plan names, and --repository names no plan: \
             write the Restore's spec.databases with the target server (docs/reference.md, Restore)"
        );
    }
    if request.volumes.is_empty() {
        bail!(
            "--repository names no plan to take the volumes from: say which with --volume \
             SOURCE[=TARGET] (the volumes of a snapshot are the folders of /data: kubectl \
             neverwiped ls {origin} latest /data --repository …)"
        );
    }
    let plan = origin.split_once('/').map_or(origin, |(_, plan)| plan);
    let source = RestoreSource::Repository {
        repository,
        origin: origin.to_owned(),
    };
    Ok(new_restore(
        source,
        namespace,
        plan,
        request,
        &request.volumes,
        now,
    ))
}

/// A Restore in `namespace` of `source`'s snapshot `request` names, into the claims of `pairs`.
fn new_restore(
    source: RestoreSource,
    namespace: &str,
    plan: &str,
    request: &RestoreRequest,
    pairs: &[(String, String)],
    now: jiff::Timestamp,
) -> Restore {
    let volumes = pairs
        .iter()
        .map(|(source, target)| RestoreVolume {
            source_claim_name: source.clone(),
            target_claim_name: target.clone(),
            create_claim: None,
            includes: request.includes.clone(),
        })
        .collect();
    let name = request
        .name
        .clone()
        .unwrap_or_else(|| format!("{}-restore-{}", fit_name(plan), now.as_second()));
    Restore {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        spec: RestoreSpec {
            on_non_empty_target: Default::default(),
            source,
            snapshot: request.snapshot.clone(),
            taken_before: request.taken_before.map(Time),
            volumes,
            databases: Vec::new(),
            pod: None,
            mover: None,
            all_volumes: false,
            create_claims: None,
            storage_class_mapping: Vec::new(),
            minimum_claim_size: None,
            all_databases: None,
            streams: Vec::new(),
        },
        status: None,
    }
}

/// A plan name short enough to leave room for `-restore-` and a time in a 253-character name.
fn fit_name(plan: &str) -> &str {
    &plan[..plan.len().min(200)]
}

/// Creates the Restore and, with `wait`, follows it to its end; fails when it failed.
pub async fn restore(cluster: &Cluster, restore: Restore, wait: bool) -> Result<()> {
    let namespace = restore.metadata.namespace.clone().unwrap_or_default();
    let created = cluster.create_restore(&namespace, &restore).await?;
    let name = created.metadata.name.clone().unwrap_or_default();
    println!("created Restore {namespace}/{name}");
    if !wait {
        return Ok(());
    }
    let mut shown = None;
    loop {
        let restore = cluster.restore(&namespace, &name).await?;
        let status = restore.status.unwrap_or_default();
        let phase = status.phase.unwrap_or_default();
        // A failure's message is the error's, said once.
        if shown != Some(phase) && phase != RestorePhase::Failed {
            let detail = status.message.as_deref().unwrap_or("");
            println!("{phase:?} {}", status_text(detail));
            shown = Some(phase);
        }
        match phase {
            RestorePhase::Succeeded => {
                let restored = status
                    .bytes_restored
                    .map_or(0, |b| u64::try_from(b).unwrap_or(0));
                let speed = status
                    .bytes_per_second
                    .map(|rate| format!(" ({}/s)", bytes(u64::try_from(rate).unwrap_or(0))));
                println!(
                    "restored snapshot {}: {} file(s), {}{}",
                    short_id(status.snapshot_id.as_deref()),
                    status.files_restored.unwrap_or(0),
                    bytes(restored),
                    speed.unwrap_or_default()
                );
                return Ok(());
            }
            RestorePhase::Failed => {
                return Err(RunFailed(format!(
                    "the Restore failed: {}",
                    status_text(status.message.as_deref().unwrap_or("no message"))
                ))
                .into())
            }
            RestorePhase::Pending | RestorePhase::Describing | RestorePhase::Running => {}
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}
