//! The backup Job of a plan's run: its volumes mounted read-only under `/data/<claim>`, its
//! databases' credentials, and the sidecar's `backup` arguments with the plan's keep rules.

use crate::claim_record::recorded_claim;
use crate::expansion::literal;
use crate::volume_patterns::{self, PatternField};
use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;
use neverwiped_contract::cli::{self, BackupArgs, DatabaseArg, KeepRules, ScopedSelection};
use neverwiped_contract::record::RecordedClaim;
use neverwiped_contract::streams::HookPhase;

use super::extras;
use super::pod::{FinishedPod, PodBuilder, Privileges};
use super::{
    common_labels, database_uri, job_name, lock_hostname, lock_wait, trigger_name, JobSettings,
    ANNOTATION_DEADLINE, ANNOTATION_MANUAL_TRIGGER, ANNOTATION_SCHEDULED_TIME, ANNOTATION_TRIGGER,
    DATA_ROOT, LABEL_PLAN, RESULT_FILE,
};
use crate::api::{BackupPlan, DatabaseSource, Retention, RunTrigger};
use crate::mover::Mover;
use jiff::{SignedDuration, Timestamp};

/// A volume a backup Job reads.
#[derive(Debug, Clone, PartialEq)]
pub struct BackupVolumeMount {
    /// The plan's claim: the volume's name in the snapshot (`/data/<source_claim>`).
    pub source_claim: String,
    /// The claim mounted: the same in `Direct` mode, the clone in `Snapshot` mode.
    pub mounted_claim: String,
    /// Exclude patterns relative to the volume's root.
    pub excludes: Vec<String>,
    /// The size and tag-file options that act only inside this volume.
    pub selection: ScopedSelection,
    /// The plan's claim as it is now, recorded in the snapshot (none when it was not seen).
    pub claim: Option<PersistentVolumeClaim>,
}

/// One backup run of a plan: what the reconciler decided.
#[derive(Debug, Clone, PartialEq)]
pub struct BackupRun {
    pub trigger: RunTrigger,
    /// The scheduled time for schedule and catch-up runs.
    pub scheduled_time: Option<Timestamp>,
    /// The `spec.manualTrigger` value of a manual run.
    pub manual_trigger: Option<String>,
    pub volumes: Vec<BackupVolumeMount>,
    /// `Direct` mode: the node where the volumes are in use.
    pub node_name: Option<String>,
    pub deadline: SignedDuration,
    /// No other pod of the plan is alive: the sidecar may remove every lock of the plan's host
    /// name (`--remove-locks-of-host`), left by runs that were killed.
    pub remove_stale_locks: bool,
    /// Who the pod runs as when it reads volumes.
    pub mover: Mover,
    /// The plan's hooks run in this pod, around the read; `false` when the hook Jobs ran them
    /// around the run's VolumeSnapshots instead.
    pub hooks_in_pod: bool,
}

/// The Job's name for a backup run: one name per scheduled time (or per manual trigger, which
/// changes the plan's generation), so a second create of the same run fails instead of running
/// twice.
pub fn backup_job_name(plan: &BackupPlan, run: &BackupRun) -> String {
    let suffix = match (run.trigger, run.scheduled_time) {
        (RunTrigger::Manual, _) | (_, None) => {
            format!("manual-{}", plan.metadata.generation.unwrap_or(0))
        }
        (_, Some(time)) => (time.as_second() / 60).to_string(),
    };
    job_name(&plan.name_any(), &suffix)
}

/// The sidecar's `--keep-*` rules for a plan's retention.
pub fn keep_rules(retention: Option<&Retention>) -> KeepRules {
    let Some(retention) = retention else {
        return KeepRules::default();
    };
    let count = |value: Option<i32>| value.and_then(|v| u32::try_from(v).ok());
    KeepRules {
        last: count(retention.keep_last),
        hourly: count(retention.keep_hourly),
        daily: count(retention.keep_daily),
        weekly: count(retention.keep_weekly),
        monthly: count(retention.keep_monthly),
        yearly: count(retention.keep_yearly),
    }
}

/// A backup's keep rules and the admin's window: a plan with maintenance credentials never
/// forgets with its own login (its prune does), so its backups get no keep rules.
fn retention(plan: &BackupPlan, settings: &JobSettings) -> (KeepRules, Option<String>) {
    let namespace = plan.namespace().unwrap_or_default();
    let protection = settings
        .protection
        .for_plan(&namespace, &plan.spec.repository.url);
    let keep = match protection.credentials {
        Some(_) => KeepRules::default(),
        None => keep_rules(plan.spec.retention.as_ref()),
    };
    (keep, protection.protect_within())
}

/// Builds the backup Job for one run of `plan`.
pub fn backup_job(plan: &BackupPlan, run: &BackupRun, settings: &JobSettings) -> Job {
    let spec = &plan.spec;
    let plan_name = plan.name_any();
    let namespace = plan.namespace().unwrap_or_default();
    let mut pod = PodBuilder::default();
    pod.mount_repository(
        &spec.repository.password_secret_ref,
        spec.repository.credentials_secret_ref.as_ref(),
        spec.repository.ca_secret_ref.as_ref(),
    );

    let volumes = mount_volumes(&mut pod, &run.volumes);
    let no_volumes = volumes.paths.is_empty();
    let databases = database_args(&mut pod, &spec.databases);
    let streams = extras::backup_streams(&mut pod, &spec.streams);
    let hooks = match run.hooks_in_pod {
        true => [
            (HookPhase::Pre, &spec.hooks.pre),
            (HookPhase::Post, &spec.hooks.post),
        ]
        .into_iter()
        .flat_map(|(phase, hooks)| extras::hooks(&mut pod, phase, hooks, &settings.image))
        .collect(),
        false => Vec::new(),
    };

    let hostname = lock_hostname(&namespace, &plan_name);
    let (keep, protect_within) = retention(plan, settings);
    let mut args = BackupArgs {
        hooks,
        streams,
        paths: volumes.paths,
        repository: super::repository_arg(&literal(&spec.repository.url)),
        result_file: RESULT_FILE.into(),
        host: Some(format!("{namespace}/{plan_name}")),
        tags: vec![("plan".into(), plan_name.clone())],
        excludes: volumes.excludes,
        scoped: volumes.scoped,
        upload_limit_bytes_per_sec: spec
            .limits
            .as_ref()
            .and_then(|l| l.upload_bytes_per_second)
            .map(|b| b as u64),
        remove_locks_of_host: run.remove_stale_locks.then(|| hostname.clone()),
        databases,
        keep: crate::suspicion::backup_retention(plan, keep),
        retry_lock: Some(lock_wait(run.deadline)),
        // A plan's first backup creates its repository.
        init: true,
        protect_within,
        claims: volumes.claims,
    }
    .to_args();
    cli::push_key_hint(&mut args, super::key_hint(plan));

    // A privileged mover reads every file of a volume, whoever owns it, with root's
    // DAC_READ_SEARCH (read files and search directories regardless of their mode) and nothing
    // else: the volumes are mounted read-only, so no write privilege is granted. (The Pod Security
    // Standard `baseline` does not list DAC_READ_SEARCH; DAC_OVERRIDE, which it lists, would also
    // grant writing: the narrower capability is the safer one.) An unprivileged one reads what its
    // user may. A plan with only databases needs no privilege.
    let privileges = match (&run.mover, no_volumes) {
        (_, true) => Privileges::Unprivileged,
        (Mover::Privileged, false) => Privileges::Root(&["DAC_READ_SEARCH"]),
        (Mover::Unprivileged(identity), false) => Privileges::User(identity.reading()),
    };

    let mut labels = common_labels("backup");
    labels.insert(LABEL_PLAN.into(), plan_name.clone());
    let mut annotations = BTreeMap::new();
    annotations.insert(ANNOTATION_TRIGGER.into(), trigger_name(run.trigger).into());
    annotations.insert(ANNOTATION_DEADLINE.into(), spec.deadline.clone());
    if let Some(time) = run.scheduled_time {
        annotations.insert(ANNOTATION_SCHEDULED_TIME.into(), time.to_string());
    }
    if let Some(trigger) = &run.manual_trigger {
        annotations.insert(ANNOTATION_MANUAL_TRIGGER.into(), trigger.clone());
    }
    pod.finish(FinishedPod {
        name: backup_job_name(plan, run),
        namespace,
        labels,
        annotations,
        owner: crate::owner::controlled_by(plan),
        args,
        privileges,
        deadline: run.deadline,
        node_name: run.node_name.clone(),
        repository_url: &plan.spec.repository.url,
        hostname: Some(hostname),
        pod_settings: spec.pod.as_ref(),
        settings,
    })
}

/// The backup's arguments for its volumes, in the order of their claims' names.
struct VolumeArgs {
    paths: Vec<String>,
    excludes: Vec<String>,
    scoped: Vec<(String, ScopedSelection)>,
    claims: Vec<RecordedClaim>,
}

/// Mounts each volume read-only at `/data/<claim>` and gives the arguments that read it.
fn mount_volumes(pod: &mut PodBuilder, volumes: &[BackupVolumeMount]) -> VolumeArgs {
    let mut volumes = volumes.to_vec();
    volumes.sort_by(|a, b| a.source_claim.cmp(&b.source_claim));
    let mut args = VolumeArgs {
        paths: Vec::new(),
        excludes: Vec::new(),
        scoped: Vec::new(),
        claims: Vec::new(),
    };
    for (index, volume) in volumes.iter().enumerate() {
        let path = format!("{DATA_ROOT}/{}", volume.source_claim);
        pod.mount_claim(&format!("data-{index}"), &volume.mounted_claim, &path, true);
        args.claims
            .extend(volume.claim.as_ref().map(|c| recorded_claim(c, &path)));
        args.excludes.extend(
            volume
                .excludes
                .iter()
                .map(|pattern| scoped_exclude(&path, pattern)),
        );
        if !volume.selection.is_empty() {
            args.scoped
                .push((literal(&path), literal_selection(&volume.selection)));
        }
        args.paths.push(path);
    }
    args
}

/// A volume's exclude pattern, scoped to that volume (see [`volume_patterns::scoped`]).
fn scoped_exclude(volume_path: &str, pattern: &str) -> String {
    literal(&volume_patterns::scoped(
        PatternField::Exclude,
        volume_path,
        pattern,
    ))
}

/// A volume's scoped options with `$` escaped: Kubernetes expands `$(VAR)` in arguments.
fn literal_selection(selection: &ScopedSelection) -> ScopedSelection {
    ScopedSelection {
        exclude_caches: selection.exclude_caches,
        exclude_if_present: selection
            .exclude_if_present
            .iter()
            .map(|t| literal(t))
            .collect(),
        exclude_larger_than: selection.exclude_larger_than.as_deref().map(literal),
    }
}

/// The `--database` arguments of a plan's databases, their credentials mounted into `pod`.
fn database_args(pod: &mut PodBuilder, sources: &[DatabaseSource]) -> Vec<DatabaseArg> {
    let mut databases = Vec::new();
    for database in sources {
        let port = database
            .port
            .map(|p| p as u16)
            .unwrap_or(database.engine.default_port());
        let (username_var, password_file) =
            pod.mount_database_credentials(&database.name, &database.credentials_secret_ref);
        let base = database_uri(database.engine, &username_var, &database.host, port);
        if database.databases.is_empty() {
            databases.push(DatabaseArg {
                name: database.name.clone(),
                uri: base,
                password_file: Some(password_file),
            });
        } else {
            // One entry, several databases: `/databases/<entry>/<database>.sql` each; the
            // password file is named once for the entry.
            for (index, name) in database.databases.iter().enumerate() {
                databases.push(DatabaseArg {
                    name: database.name.clone(),
                    uri: format!("{base}/{}", literal(name)),
                    password_file: (index == 0).then(|| password_file.clone()),
                });
            }
        }
    }
    databases
}
