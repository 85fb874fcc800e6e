//! What a BackupPlan means in its namespace: its schedule and deadline parsed, the volumes it
//! selects resolved to PersistentVolumeClaims, and every Secret it names checked. What only the
//! operator can judge becomes a [`Problem`]: `Ready=False` with a reason from
//! [`crate::conditions::Reason`] and a message a user can act on.

use std::collections::{BTreeMap, BTreeSet};

use jiff::SignedDuration;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::core::{Selector, SelectorExt};

use crate::api::{BackupPlanSpec, CredentialsSecretRef, Repository};
use crate::conditions::Reason;
use crate::schedule::{parse_duration, DurationError, Schedule, ScheduleError};
use crate::volume_patterns::volume_selection;
use neverwiped_contract::cli::ScopedSelection;

pub use crate::api::pending_manual_trigger;

/// The keys of the Secrets a spec names, as fetched: Secret name → keys present in its `data`.
pub type SecretKeys = BTreeMap<String, BTreeSet<String>>;

/// A Secret key a spec needs, and the field that names it (for messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretUse {
    pub name: String,
    pub key: String,
    /// The spec field, e.g. `spec.repository.passwordSecretRef`.
    pub field: String,
}

/// Something about a spec that keeps it from running; fixed by changing the spec or creating
/// what it names, never by retrying.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("spec.schedule: {0}")]
    Schedule(ScheduleError),
    #[error("{field}: {error}")]
    MaintenanceSchedule {
        field: &'static str,
        error: ScheduleError,
    },
    #[error("spec.deadline: {0}")]
    Deadline(DurationError),
    #[error("Secret {name:?} named by {field} does not exist in this namespace; create it or correct the name")]
    SecretNotFound { name: String, field: String },
    #[error(
        "Secret {name:?} named by {field} has no key {key:?}; add the key or correct the reference"
    )]
    SecretKeyNotFound {
        name: String,
        key: String,
        field: String,
    },
    #[error("PersistentVolumeClaim {name:?} named by {field} does not exist in this namespace")]
    VolumeNotFound { name: String, field: String },
    #[error("{field} matches no PersistentVolumeClaim in this namespace (selector {selector})")]
    NoVolumesSelected { selector: String, field: String },
    #[error("{field} is not a valid label selector: {detail}")]
    InvalidSelector { detail: String, field: String },
    #[error("copyMethod Direct: the volumes are in use on different nodes ({nodes}), and one pod cannot mount ReadWriteOnce volumes of several nodes; split them into one BackupPlan per node or use copyMethod Snapshot")]
    VolumesOnDifferentNodes { nodes: String },
    #[error("copyMethod Direct: PersistentVolumeClaim {name:?} is ReadWriteOncePod and in use by pod {pod:?}, so no other pod can mount it; use copyMethod Snapshot")]
    VolumeInUseExclusively { name: String, pod: String },
    #[error("copyMethod Snapshot: this cluster does not serve the CSI snapshot API (snapshot.storage.k8s.io/v1); install the CSI external-snapshotter (its CRDs and snapshot controller), or use copyMethod Direct or Auto")]
    SnapshotNotAvailable,
    #[error("VolumeSnapshotClass {name:?} named by spec.volumeSnapshotClassName does not exist; create it or correct the name")]
    VolumeSnapshotClassNotFound { name: String },
    #[error("copyMethod Snapshot: no VolumeSnapshotClass for {driver} of PersistentVolumeClaim {claim:?}; create one (annotated snapshot.storage.kubernetes.io/is-default-class: \"true\" when the driver has several), set spec.volumeSnapshotClassName, or use copyMethod Auto or Direct")]
    NoVolumeSnapshotClass { claim: String, driver: String },
    #[error("BackupPlan {name:?} (spec.backupPlanName) does not exist in this namespace")]
    BackupPlanNotFound { name: String },
    #[error(transparent)]
    CopyNotFound(#[from] crate::restore_source::CopyNotFound),
    #[error("{field}: the engine of database entry {name:?} is unknown: it sets no type, and no BackupPlan entry of that name says it; set type (postgresql, mariadb or mysql) or correct the name")]
    UnknownDatabase { name: String, field: String },
    #[error(
        "{field}: PersistentVolumeClaim {name:?} does not exist; create it or set createClaim"
    )]
    TargetVolumeNotFound { name: String, field: String },
    #[error("{field}: PersistentVolumeClaim {name:?} already exists, and createClaim only creates new ones; remove createClaim to restore into it")]
    TargetVolumeExists { name: String, field: String },
    #[error(transparent)]
    Refused(#[from] crate::admission::Refusal),
    #[error("the Restore does not record who created it (annotation {}), so the operator cannot check that they may read the plan's data and write its targets; create it again through an API server that runs the chart's admission policies", crate::restore_access::REQUESTER_ANNOTATION)]
    RequesterUnknown,
    #[error(transparent)]
    RequesterNotAllowed(#[from] crate::restore_access::AccessDenied),
    #[error(transparent)]
    DatabaseHostNotAllowed(#[from] crate::restore_access::HostNotAllowed),
    #[error(transparent)]
    CloneNotAllowed(#[from] crate::restore_source::CloneNotAllowed),
    #[error(transparent)]
    ImageNotAllowed(#[from] crate::images::ImageNotAllowed),
    #[error(transparent)]
    UnknownStream(#[from] crate::images::UnknownStream),
}

impl Problem {
    /// The condition and Event reason.
    pub fn reason(&self) -> Reason {
        match self {
            Problem::Schedule(error) | Problem::MaintenanceSchedule { error, .. } => match error {
                ScheduleError::InvalidSchedule { .. } => Reason::InvalidSchedule,
                ScheduleError::InvalidTimeZone { .. } => Reason::InvalidTimeZone,
            },
            Problem::Deadline(_) => Reason::InvalidDeadline,
            Problem::SecretNotFound { .. } => Reason::SecretNotFound,
            Problem::SecretKeyNotFound { .. } => Reason::SecretKeyNotFound,
            Problem::VolumeNotFound { .. } => Reason::VolumeNotFound,
            Problem::NoVolumesSelected { .. } => Reason::NoVolumesSelected,
            Problem::InvalidSelector { .. } => Reason::InvalidSelector,
            Problem::VolumesOnDifferentNodes { .. } => Reason::VolumesOnDifferentNodes,
            Problem::VolumeInUseExclusively { .. } => Reason::VolumeInUseExclusively,
            Problem::SnapshotNotAvailable => Reason::SnapshotNotAvailable,
            Problem::VolumeSnapshotClassNotFound { .. } => Reason::VolumeSnapshotClassNotFound,
            Problem::NoVolumeSnapshotClass { .. } => Reason::NoVolumeSnapshotClass,
            Problem::BackupPlanNotFound { .. } => Reason::BackupPlanNotFound,
            Problem::CopyNotFound(missing) => missing.reason(),
            Problem::UnknownDatabase { .. } => Reason::UnknownDatabase,
            Problem::TargetVolumeNotFound { .. } => Reason::TargetVolumeNotFound,
            Problem::TargetVolumeExists { .. } => Reason::TargetVolumeExists,
            Problem::Refused(refusal) => refusal.reason(),
            Problem::RequesterUnknown => Reason::RequesterUnknown,
            Problem::CloneNotAllowed(refusal) => refusal.reason(),
            Problem::RequesterNotAllowed(denied) => denied.access.rule.reason(),
            Problem::DatabaseHostNotAllowed(_) => Reason::DatabaseHostNotAllowed,
            Problem::ImageNotAllowed(_) => Reason::ImageNotAllowed,
            Problem::UnknownStream(_) => Reason::UnknownStream,
        }
    }
}

/// The reason and message of `Ready=False` for a list of problems: the first problem's reason,
/// and every message (a user fixes them all in one go).
pub fn not_ready(problems: &[Problem]) -> Option<(Reason, String)> {
    let first = problems.first()?;
    let message = problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    Some((first.reason(), message))
}

/// A PersistentVolumeClaim a plan backs up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedClaim {
    pub name: String,
    /// Exclude patterns relative to the volume's root, from every entry that selected it.
    pub excludes: Vec<String>,
    /// `excludeCaches`, `excludeIfPresent` and `excludeLargerThan` of every entry that selected
    /// it, merged ([`ScopedSelection::merge`]).
    pub selection: ScopedSelection,
}

/// A BackupPlan with everything it names found.
#[derive(Debug, Clone)]
pub struct ResolvedPlan {
    pub schedule: Schedule,
    /// When to prune (`spec.maintenance.prune.suspend` says whether to).
    pub prune_schedule: Schedule,
    /// When to check (`spec.maintenance.check.suspend` says whether to).
    pub check_schedule: Schedule,
    pub deadline: SignedDuration,
    /// The claims to back up, by name, each once.
    pub claims: Vec<ResolvedClaim>,
    /// Volume selectors that matched no claim, while the plan has other things to back up
    /// ([`Problem::NoVolumesSelected`] each): shown, not stopping the plan.
    pub unmatched_selectors: Vec<Problem>,
}

/// Every Secret key a BackupPlan needs.
pub fn secrets_used(spec: &BackupPlanSpec) -> Vec<SecretUse> {
    let mut uses = repository_secrets_used(&spec.repository);
    for (index, database) in spec.databases.iter().enumerate() {
        let field = format!("spec.databases[{index}].credentialsSecretRef");
        uses.extend(credentials_used(&database.credentials_secret_ref, &field));
    }
    for (index, copy) in spec.copies.iter().enumerate() {
        let field = format!("spec.copies[{index}].repository");
        uses.extend(repository_secrets_used_at(&copy.repository, &field));
    }
    for (index, stream) in spec.streams.iter().enumerate() {
        uses.extend(env_secrets_used(
            &stream.env,
            &format!("spec.streams[{index}]"),
        ));
    }
    for (phase, hooks) in [("pre", &spec.hooks.pre), ("post", &spec.hooks.post)] {
        for (index, hook) in hooks.iter().enumerate() {
            let field = format!("spec.hooks.{phase}[{index}]");
            uses.extend(env_secrets_used(&hook.env, &field));
        }
    }
    uses
}

/// The Secret keys the environment of a stream or hook at `field` takes values from.
pub fn env_secrets_used(env: &[crate::api::StreamEnvVar], field: &str) -> Vec<SecretUse> {
    env.iter()
        .enumerate()
        .filter_map(|(index, variable)| {
            let source = &variable.value_from.as_ref()?.secret_key_ref;
            Some(SecretUse {
                name: source.name.clone(),
                key: source.key.clone(),
                field: format!("{field}.env[{index}].valueFrom.secretKeyRef"),
            })
        })
        .collect()
}

/// The Secret keys a repository needs (fields named as in a BackupPlan).
pub fn repository_secrets_used(repository: &Repository) -> Vec<SecretUse> {
    repository_secrets_used_at(repository, "spec.repository")
}

/// The Secret keys a repository at `field` needs.
fn repository_secrets_used_at(repository: &Repository, field: &str) -> Vec<SecretUse> {
    let mut uses = vec![SecretUse {
        name: repository.password_secret_ref.name.clone(),
        key: repository.password_secret_ref.key.clone(),
        field: format!("{field}.passwordSecretRef"),
    }];
    if let Some(credentials) = &repository.credentials_secret_ref {
        uses.extend(credentials_used(
            credentials,
            &format!("{field}.credentialsSecretRef"),
        ));
    }
    if let Some(ca) = &repository.ca_secret_ref {
        uses.push(SecretUse {
            name: ca.name.clone(),
            key: ca.key.clone(),
            field: format!("{field}.caSecretRef"),
        });
    }
    uses
}

/// The two keys of a credentials Secret.
pub fn credentials_used(credentials: &CredentialsSecretRef, field: &str) -> [SecretUse; 2] {
    [
        SecretUse {
            name: credentials.name.clone(),
            key: credentials.username_key.clone(),
            field: field.to_owned(),
        },
        SecretUse {
            name: credentials.name.clone(),
            key: credentials.password_key.clone(),
            field: field.to_owned(),
        },
    ]
}

/// Checks that every Secret key in `uses` exists; one problem per missing Secret or key.
pub fn check_secrets(uses: &[SecretUse], secrets: &SecretKeys) -> Vec<Problem> {
    let mut problems: Vec<Problem> = Vec::new();
    for secret_use in uses {
        let problem = match secrets.get(&secret_use.name) {
            None => Problem::SecretNotFound {
                name: secret_use.name.clone(),
                field: secret_use.field.clone(),
            },
            Some(keys) if !keys.contains(&secret_use.key) => Problem::SecretKeyNotFound {
                name: secret_use.name.clone(),
                key: secret_use.key.clone(),
                field: secret_use.field.clone(),
            },
            Some(_) => continue,
        };
        if !problems.contains(&problem) {
            problems.push(problem);
        }
    }
    problems
}

/// Resolves the plan's volume entries to claims: by name, or by label selector. A selector that
/// matches nothing stops the plan only when it has nothing else to back up; otherwise it comes
/// back, with the claims, as a problem to show (a condition of its own, not `Ready=False`).
pub fn resolve_claims(
    spec: &BackupPlanSpec,
    claims: &[PersistentVolumeClaim],
) -> Result<(Vec<ResolvedClaim>, Vec<Problem>), Vec<Problem>> {
    let mut resolved: BTreeMap<String, (Vec<String>, ScopedSelection)> = BTreeMap::new();
    let mut problems = Vec::new();
    let live = |claim: &&PersistentVolumeClaim| claim.metadata.deletion_timestamp.is_none();
    for (index, volume) in spec.volumes.iter().enumerate() {
        let field = format!("spec.volumes[{index}]");
        let mut matched = Vec::new();
        if let Some(name) = &volume.claim_name {
            if claims
                .iter()
                .filter(live)
                .any(|c| c.metadata.name.as_deref() == Some(name))
            {
                matched.push(name.clone());
            } else {
                problems.push(Problem::VolumeNotFound {
                    name: name.clone(),
                    field: format!("{field}.claimName"),
                });
            }
        }
        if let Some(label_selector) = &volume.selector {
            let field = format!("{field}.selector");
            match Selector::try_from(label_selector.clone()) {
                Err(error) => problems.push(Problem::InvalidSelector {
                    detail: error.to_string(),
                    field,
                }),
                Ok(selector) => {
                    let before = matched.len();
                    for claim in claims.iter().filter(live) {
                        let labels = claim.metadata.labels.clone().unwrap_or_default();
                        if selector.matches(&labels) {
                            matched.extend(claim.metadata.name.clone());
                        }
                    }
                    if matched.len() == before {
                        problems.push(Problem::NoVolumesSelected {
                            selector: selector.to_string(),
                            field,
                        });
                    }
                }
            }
        }
        for name in matched {
            let (excludes, selection) = resolved.entry(name).or_default();
            for pattern in &volume.excludes {
                if !excludes.contains(pattern) {
                    excludes.push(pattern.clone());
                }
            }
            selection.merge(&volume_selection(volume));
        }
    }
    let (unmatched, mut problems): (Vec<Problem>, Vec<Problem>) = problems
        .into_iter()
        .partition(|p| matches!(p, Problem::NoVolumesSelected { .. }));
    let something_else = !resolved.is_empty() || !spec.databases.is_empty();
    if problems.is_empty() && (unmatched.is_empty() || something_else) {
        let resolved = resolved
            .into_iter()
            .map(|(name, (excludes, selection))| ResolvedClaim {
                name,
                excludes,
                selection,
            })
            .collect();
        Ok((resolved, unmatched))
    } else {
        problems.extend(unmatched);
        Err(problems)
    }
}

/// Everything the plan names, checked: the resolved plan, or every problem found.
pub fn resolve_plan(
    spec: &BackupPlanSpec,
    secrets: &SecretKeys,
    claims: &[PersistentVolumeClaim],
) -> Result<ResolvedPlan, Vec<Problem>> {
    resolve_plan_seeded(spec, "", secrets, claims)
}

/// [`resolve_plan`], where `seed` (the plan's `namespace/name`) gives each `H` of its schedules
/// the plan's own value.
pub fn resolve_plan_seeded(
    spec: &BackupPlanSpec,
    seed: &str,
    secrets: &SecretKeys,
    claims: &[PersistentVolumeClaim],
) -> Result<ResolvedPlan, Vec<Problem>> {
    let mut problems = Vec::new();
    let schedule = Schedule::parse_hashed(&spec.schedule, &spec.time_zone, seed)
        .map_err(|error| problems.push(Problem::Schedule(error)))
        .ok();
    let maintenance = &spec.maintenance;
    let mut maintenance_schedule = |field: &'static str, expression: &str| {
        Schedule::parse_hashed(expression, &spec.time_zone, &format!("{seed}/{field}"))
            .map_err(|error| problems.push(Problem::MaintenanceSchedule { field, error }))
            .ok()
    };
    let prune_schedule = maintenance_schedule(
        "spec.maintenance.prune.schedule",
        &maintenance.prune.schedule,
    );
    let check_schedule = maintenance_schedule(
        "spec.maintenance.check.schedule",
        &maintenance.check.schedule,
    );
    let deadline = parse_duration(&spec.deadline)
        .map_err(|error| problems.push(Problem::Deadline(error)))
        .ok();
    problems.extend(check_secrets(&secrets_used(spec), secrets));
    let resolved_claims = resolve_claims(spec, claims)
        .map_err(|found| problems.extend(found))
        .ok();
    match (
        schedule,
        prune_schedule,
        check_schedule,
        deadline,
        resolved_claims,
    ) {
        (
            Some(schedule),
            Some(prune_schedule),
            Some(check_schedule),
            Some(deadline),
            Some((claims, unmatched_selectors)),
        ) if problems.is_empty() => Ok(ResolvedPlan {
            schedule,
            prune_schedule,
            check_schedule,
            deadline,
            claims,
            unmatched_selectors,
        }),
        _ => Err(problems),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{BackupVolume, CredentialsSecretRef, DatabaseSource, DatabaseType};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

    pub(crate) fn spec() -> BackupPlanSpec {
        crate::fixtures::plan_spec()
    }

    fn secrets(entries: &[(&str, &[&str])]) -> SecretKeys {
        entries
            .iter()
            .map(|(name, keys)| {
                (
                    name.to_string(),
                    keys.iter().map(|k| k.to_string()).collect(),
                )
            })
            .collect()
    }

    fn claim(name: &str, labels: &[(&str, &str)]) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            ..PersistentVolumeClaim::default()
        }
    }

    fn all_secrets() -> SecretKeys {
        secrets(&[("repo", &["password"]), ("gate", &["username", "password"])])
    }

    #[test]
    fn a_complete_plan_resolves() {
        let resolved = resolve_plan(&spec(), &all_secrets(), &[claim("data", &[])]).unwrap();
        assert_eq!(resolved.deadline, SignedDuration::from_hours(12));
        assert_eq!(
            resolved.claims,
            [ResolvedClaim {
                name: "data".into(),
                excludes: vec![],
                selection: ScopedSelection::default(),
            }]
        );
    }

    #[test]
    fn a_missing_secret_names_the_secret_and_the_field() {
        let problems = resolve_plan(
            &spec(),
            &secrets(&[("gate", &["username", "password"])]),
            &[claim("data", &[])],
        )
        .unwrap_err();
        assert_eq!(
            problems,
            [Problem::SecretNotFound {
                name: "repo".into(),
                field: "spec.repository.passwordSecretRef".into()
            }]
        );
        let (reason, message) = not_ready(&problems).unwrap();
        assert_eq!(reason, Reason::SecretNotFound);
        assert!(
            message.contains("\"repo\"") && message.contains("passwordSecretRef"),
            "{message}"
        );
    }

    #[test]
    fn a_missing_key_is_its_own_reason() {
        let problems = resolve_plan(
            &spec(),
            &secrets(&[("repo", &["password"]), ("gate", &["user", "password"])]),
            &[claim("data", &[])],
        )
        .unwrap_err();
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].reason(), Reason::SecretKeyNotFound);
        assert!(problems[0].to_string().contains("\"username\""));
    }

    #[test]
    fn a_missing_claim_and_an_empty_selector_are_reported_together() {
        let mut spec = spec();
        spec.volumes.push(BackupVolume {
            claim_name: None,
            selector: Some(LabelSelector {
                match_labels: Some([("backup".to_string(), "yes".to_string())].into()),
                ..LabelSelector::default()
            }),
            ..BackupVolume::default()
        });
        let problems = resolve_plan(&spec, &all_secrets(), &[claim("other", &[])]).unwrap_err();
        let reasons: Vec<_> = problems.iter().map(Problem::reason).collect();
        assert_eq!(reasons, [Reason::VolumeNotFound, Reason::NoVolumesSelected]);
        assert!(
            problems[1].to_string().contains("backup=yes"),
            "{}",
            problems[1]
        );
    }

    #[test]
    fn claims_selected_twice_are_backed_up_once_with_all_excludes() {
        let mut spec = spec();
        spec.volumes = vec![
            BackupVolume {
                excludes: vec!["cache".into()],
                ..BackupVolume::claim("data")
            },
            BackupVolume {
                claim_name: None,
                selector: Some(LabelSelector {
                    match_labels: Some([("backup".to_string(), "yes".to_string())].into()),
                    ..LabelSelector::default()
                }),
                excludes: vec!["*.tmp".into()],
                ..BackupVolume::default()
            },
        ];
        let claims = [
            claim("data", &[("backup", "yes")]),
            claim("logs", &[("backup", "yes")]),
            claim("scratch", &[]),
        ];
        let resolved = resolve_plan(&spec, &all_secrets(), &claims).unwrap();
        assert_eq!(
            resolved.claims,
            [
                ResolvedClaim {
                    name: "data".into(),
                    excludes: vec!["cache".into(), "*.tmp".into()],
                    selection: ScopedSelection::default(),
                },
                ResolvedClaim {
                    name: "logs".into(),
                    excludes: vec!["*.tmp".into()],
                    selection: ScopedSelection::default(),
                },
            ]
        );
    }

    #[test]
    fn an_invalid_cron_and_time_zone_are_not_ready_with_their_reasons() {
        let mut spec = spec();
        spec.schedule = "0 25 * * *".into();
        let problems = resolve_plan(&spec, &all_secrets(), &[claim("data", &[])]).unwrap_err();
        assert_eq!(not_ready(&problems).unwrap().0, Reason::InvalidSchedule);

        let mut spec = self::spec();
        spec.time_zone = "Mars/Olympus".into();
        let problems = resolve_plan(&spec, &all_secrets(), &[claim("data", &[])]).unwrap_err();
        let (reason, message) = not_ready(&problems).unwrap();
        assert_eq!(reason, Reason::InvalidTimeZone);
        assert!(
            message.starts_with("spec.schedule: time zone \"Mars/Olympus\""),
            "{message}"
        );
    }

    #[test]
    fn database_credentials_are_checked() {
        let mut spec = spec();
        spec.databases.push(DatabaseSource {
            name: "orders".into(),
            engine: DatabaseType::Postgresql,
            host: "pg".into(),
            port: None,
            credentials_secret_ref: CredentialsSecretRef::new("pg-backup"),
            databases: vec![],
        });
        let problems = resolve_plan(&spec, &all_secrets(), &[claim("data", &[])]).unwrap_err();
        assert_eq!(
            problems,
            [Problem::SecretNotFound {
                name: "pg-backup".into(),
                field: "spec.databases[0].credentialsSecretRef".into()
            }]
        );
    }

    #[test]
    fn a_manual_trigger_is_pending_until_acted_on() {
        let mut spec = spec();
        assert_eq!(pending_manual_trigger(&spec, None), None);
        spec.manual_trigger = Some("2026-01-01".into());
        assert_eq!(pending_manual_trigger(&spec, None), Some("2026-01-01"));
        let status = crate::api::BackupPlanStatus {
            last_manual_trigger: Some("2026-01-01".into()),
            ..crate::api::BackupPlanStatus::default()
        };
        assert_eq!(pending_manual_trigger(&spec, Some(&status)), None);
        spec.manual_trigger = Some("again".into());
        assert_eq!(pending_manual_trigger(&spec, Some(&status)), Some("again"));
    }
}
