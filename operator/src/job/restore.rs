//! The Job of a Restore: its target claims mounted writable under `/restore/data/<source>`, its
//! databases' credentials, and the sidecar's `restore` arguments.

use crate::expansion::literal;
use crate::volume_patterns::{self, PatternField};
use std::collections::BTreeMap;

use jiff::SignedDuration;
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use neverwiped_contract::cli::{self, DatabaseArg, Overwrite, RestoreArgs};

use super::pod::{FinishedPod, PodBuilder, Privileges};
use super::{
    common_labels, database_uri, job_name, JobSettings, DATA_ROOT, LABEL_PLAN, LABEL_RESTORE,
    RESTORE_ROOT, RESULT_FILE,
};
use crate::api::{
    DatabaseType, NonEmptyTargetPolicy, Restore, RestoreDatabase, VolumeTargetPolicy,
};
use crate::mover::Mover;
use crate::restore_source::ReadFrom;

/// The capabilities of a privileged restore pod (root): what restoring owners, modes, set-ID
/// bits and device files takes.
const RESTORE_CAPABILITIES: &[&str] = &["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "MKNOD"];

/// The Job's name for a Restore.
pub fn restore_job_name(restore: &Restore) -> String {
    job_name(&restore.name_any(), "restore")
}

/// A restore Job's inputs beyond the Restore and its plan.
#[derive(Debug, Clone, PartialEq)]
pub struct RestoreRun {
    pub deadline: SignedDuration,
    /// The engine of each database entry, from the Restore or else from the plan.
    pub database_types: BTreeMap<String, DatabaseType>,
    /// Who the pod runs as when it writes volumes.
    pub mover: Mover,
    /// The image of each of the Restore's streams, by name (its own, or its plan's stream's).
    pub stream_images: BTreeMap<String, String>,
}

/// Builds the Job that runs `restore`, reading the snapshots of `from`'s origin in its repository.
pub fn restore_job(
    restore: &Restore,
    from: &ReadFrom,
    run: &RestoreRun,
    settings: &JobSettings,
) -> Job {
    let spec = &restore.spec;
    let repository = from.repository;
    let namespace = restore.namespace().unwrap_or_default();
    let mut pod = PodBuilder::default();
    pod.mount_repository(
        &repository.password_secret_ref,
        repository.credentials_secret_ref.as_ref(),
        repository.ca_secret_ref.as_ref(),
    );

    if !spec.volumes.is_empty() {
        // The restore also sets the metadata of the folders above the claims (/restore/data):
        // on the read-only root they need a writable folder of their own, which the claims sit in.
        pod.mount_empty_dir("restore-root", RESTORE_ROOT);
    }
    let mut includes = Vec::new();
    for (index, volume) in spec.volumes.iter().enumerate() {
        let snapshot_path = format!("{DATA_ROOT}/{}", volume.source_claim_name);
        // The target is mounted where the restore writes the source's files: /restore/data/<source>.
        pod.mount_claim(
            &format!("target-{index}"),
            &volume.target_claim_name,
            &format!("{RESTORE_ROOT}{snapshot_path}"),
            false,
        );
        if volume.includes.is_empty() {
            includes.push(snapshot_path);
        } else {
            includes.extend(volume.includes.iter().map(|pattern| {
                literal(&volume_patterns::scoped(
                    PatternField::Include,
                    &snapshot_path,
                    pattern,
                ))
            }));
        }
    }

    let (databases, databases_to_overwrite) = database_args(&mut pod, &spec.databases, run);

    let mut args = RestoreArgs {
        streams: super::extras::restore_streams(&mut pod, &spec.streams, &run.stream_images),
        snapshot: spec.snapshot.clone(),
        repository: super::repository_arg(&literal(&repository.url)),
        result_file: RESULT_FILE.into(),
        target: (!spec.volumes.is_empty()).then(|| RESTORE_ROOT.to_owned()),
        includes,
        host: from.host_arg(&spec.snapshot),
        before: spec.taken_before.as_ref().map(|time| time.0.to_string()),
        databases,
        databases_to_overwrite,
        overwrite: volume_overwrite(spec.on_non_empty_target),
        delete: spec.on_non_empty_target == VolumeTargetPolicy::Mirror,
        verify: false,
    }
    .to_args();
    cli::push_key_hint(&mut args, from.plan.and_then(super::key_hint));

    // A privileged mover writes files back with their owners and modes: CHOWN (set the owner),
    // FOWNER (set modes and times of files the process does not own), DAC_OVERRIDE (write into
    // directories whatever their mode), FSETID (keep a set-group-ID bit of a group root is not
    // in: the kernel clears it without an error otherwise) and MKNOD (make device files); nothing
    // else, all listed by the Pod Security Standard `baseline`. An unprivileged one writes them as
    // its user (the owners are not restored, devices are skipped with a warning), its fsGroup the
    // group of the target's root.
    let privileges = match (&run.mover, spec.volumes.is_empty()) {
        (_, true) => Privileges::Unprivileged,
        (Mover::Privileged, false) => Privileges::Root(RESTORE_CAPABILITIES),
        (Mover::Unprivileged(identity), false) => Privileges::User(identity.clone()),
    };
    let mut labels = common_labels("restore");
    labels.insert(LABEL_RESTORE.into(), restore.name_any());
    if let Some(plan) = from.plan {
        labels.insert(LABEL_PLAN.into(), plan.name_any());
    }
    pod.finish(FinishedPod {
        name: restore_job_name(restore),
        namespace,
        labels,
        annotations: BTreeMap::new(),
        owner: crate::owner::controlled_by(restore),
        args,
        privileges,
        deadline: run.deadline,
        node_name: None,
        repository_url: &repository.url,
        hostname: None,
        pod_settings: spec
            .pod
            .as_ref()
            .or(from.plan.and_then(|p| p.spec.pod.as_ref())),
        settings,
    })
}

/// The sidecar's `--overwrite` for a Restore's `onNonEmptyTarget` (`Mirror` adds `--delete`).
fn volume_overwrite(policy: VolumeTargetPolicy) -> Overwrite {
    match policy {
        VolumeTargetPolicy::Overwrite | VolumeTargetPolicy::Mirror => Overwrite::IfChanged,
        VolumeTargetPolicy::OverwriteAlways => Overwrite::Always,
        VolumeTargetPolicy::OverwriteIfNewer => Overwrite::IfNewer,
        VolumeTargetPolicy::KeepExisting => Overwrite::Never,
    }
}

/// The `--database` arguments of a Restore's databases (their credentials mounted into `pod`),
/// and the entries whose non-empty target may be overwritten.
fn database_args(
    pod: &mut PodBuilder,
    targets: &[RestoreDatabase],
    run: &RestoreRun,
) -> (Vec<DatabaseArg>, Vec<String>) {
    let mut databases = Vec::new();
    let mut databases_to_overwrite = Vec::new();
    for database in targets {
        let Some(engine) = database
            .engine
            .or_else(|| run.database_types.get(&database.name).copied())
        else {
            continue;
        };
        let port = database
            .port
            .map(|p| p as u16)
            .unwrap_or(engine.default_port());
        let (username_var, password_file) =
            pod.mount_database_credentials(&database.name, &database.credentials_secret_ref);
        databases.push(DatabaseArg {
            name: database.name.clone(),
            uri: database_uri(engine, &username_var, &database.host, port),
            password_file: Some(password_file),
        });
        if database.on_non_empty_target == NonEmptyTargetPolicy::Overwrite {
            databases_to_overwrite.push(database.name.clone());
        }
    }
    (databases, databases_to_overwrite)
}
