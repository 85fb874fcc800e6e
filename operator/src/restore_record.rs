//! A Restore that reads its snapshot's record (`createClaims: FromSnapshot`, `allVolumes`,
//! `allDatabases`): what the describe Job found ([`Described`]), the Restore as it then runs
//! ([`resolve`]: every entry the record adds, the snapshot pinned by id, so claims and data come
//! from one snapshot), and the claims made from the record ([`claims_to_create`]). Pure
//! functions.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, ResourceQuota};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::ResourceExt;
use neverwiped_contract::record::{RecordedClaim, RecordedSources};
use neverwiped_contract::{Operation, RunResult};

use crate::api::quota::{self, QuotaError, QuotaShortfall};
use crate::api::recorded_claims::{claim_from_record, ClaimRules};
use crate::api::{DatabaseType, Restore, RestoreSpec, RestoreVolume};
use crate::conditions::Reason;
use crate::job::LABEL_RESTORE;

/// Whether `spec` needs its snapshot's record before its restore Job.
pub fn needs_record(spec: &RestoreSpec) -> bool {
    spec.all_volumes || spec.all_databases.is_some() || spec.create_claims.is_some()
}

/// What the describe Job found: the snapshot (by its whole id) and its record.
#[derive(Debug, Clone, PartialEq)]
pub struct Described {
    pub snapshot_id: String,
    /// RFC 3339, as the snapshot records it.
    pub snapshot_time: Option<String>,
    pub sources: RecordedSources,
}

impl Described {
    /// The description a successful describe's result carries; `None` for another result.
    pub fn of(result: &RunResult) -> Option<Described> {
        if result.operation != Operation::Describe {
            return None;
        }
        Some(Described {
            snapshot_id: result.snapshot_id.clone()?,
            snapshot_time: result.snapshot_time.clone(),
            sources: result.sources.clone()?,
        })
    }
}

/// What the record lacks, or a claim it cannot be made of: the Restore fails with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordProblem {
    #[error("{field}: snapshot {snapshot} records no {what} (it was taken before neverwiped recorded them, or not by a BackupPlan): list them in spec.{what}s instead")]
    NothingRecorded {
        field: &'static str,
        what: &'static str,
        snapshot: String,
    },
    #[error("{field}: snapshot {snapshot} records no claim {name:?}, so it cannot be created from the record; it records {recorded}. Create the claim, or give the entry a createClaim")]
    ClaimNotRecorded {
        field: String,
        name: String,
        snapshot: String,
        recorded: String,
    },
    #[error("{field}: snapshot {snapshot} records database {name:?} as {engine:?}, an engine neverwiped does not restore; give the entry a type")]
    UnknownEngine {
        field: String,
        name: String,
        engine: String,
        snapshot: String,
    },
    #[error("{0}")]
    Claim(String),
    #[error("the claim {claim:?} is to be created of StorageClass {class:?}, which this cluster does not have (kubectl get storageclasses lists those it has): create a new Restore whose storageClassMapping maps the recorded class to one of them ({{from: {recorded}, to: CLASS}}), or create the claim yourself")]
    StorageClassNotFound {
        claim: String,
        class: String,
        recorded: String,
    },
    #[error("{0}: ask the cluster admin for a larger quota, or create the claims yourself (of any size that holds the data) and create a new Restore; a claim that exists is restored into")]
    QuotaExceeded(Box<QuotaShortfall>),
}

impl RecordProblem {
    /// The reason of the Restore's `Complete=False`.
    pub fn reason(&self) -> Reason {
        match self {
            RecordProblem::StorageClassNotFound { .. } => Reason::StorageClassNotFound,
            RecordProblem::QuotaExceeded(_) => Reason::QuotaExceeded,
            _ => Reason::NotInSnapshotRecord,
        }
    }
}

/// The Restore as it runs once `described`: the volumes and databases the record adds for
/// `allVolumes` and `allDatabases` (after the listed ones, which win), database engines the
/// record knows, and the snapshot pinned to the described id.
pub fn resolve(restore: &Restore, described: &Described) -> Result<Restore, RecordProblem> {
    let mut resolved = restore.clone();
    let spec = &mut resolved.spec;
    let sources = &described.sources;
    let snapshot = described.snapshot_id.clone();
    let nothing = |field, what| RecordProblem::NothingRecorded {
        field,
        what,
        snapshot: snapshot.clone(),
    };
    if spec.all_volumes {
        if sources.claims.is_empty() {
            return Err(nothing("spec.allVolumes", "volume"));
        }
        for claim in &sources.claims {
            if !spec
                .volumes
                .iter()
                .any(|v| v.source_claim_name == claim.name)
            {
                spec.volumes.push(RestoreVolume {
                    source_claim_name: claim.name.clone(),
                    target_claim_name: claim.name.clone(),
                    create_claim: None,
                    includes: Vec::new(),
                });
            }
        }
    }
    if let Some(target) = &spec.all_databases {
        if sources.databases.is_empty() {
            return Err(nothing("spec.allDatabases", "database"));
        }
        let listed: Vec<String> = spec.databases.iter().map(|d| d.name.clone()).collect();
        let added: Vec<_> = (sources.databases.iter())
            .filter(|recorded| !listed.contains(&recorded.name))
            .map(|recorded| target.entry(&recorded.name, None))
            .collect();
        spec.databases.extend(added);
    }
    for (index, database) in spec.databases.iter_mut().enumerate() {
        let recorded = sources.databases.iter().find(|d| d.name == database.name);
        if let (None, Some(recorded)) = (database.engine, recorded) {
            let engine = DatabaseType::from_uri_scheme(&recorded.engine);
            database.engine = Some(engine.ok_or_else(|| RecordProblem::UnknownEngine {
                field: format!("spec.databases[{index}]"),
                name: recorded.name.clone(),
                engine: recorded.engine.clone(),
                snapshot: snapshot.clone(),
            })?);
        }
    }
    spec.snapshot = described.snapshot_id.clone();
    spec.taken_before = None;
    Ok(resolved)
}

/// The claims `createClaims: FromSnapshot` creates for `resolved`: one per target that is not
/// in `existing` and has no `createClaim` of its own, as the record has its source claim, of a
/// StorageClass `classes` holds (after `storageClassMapping`). Labelled as the Restore's, owned
/// by nothing: deleting the Restore keeps them.
pub fn claims_to_create(
    resolved: &Restore,
    sources: &RecordedSources,
    existing: &BTreeMap<String, PersistentVolumeClaim>,
    classes: &[StorageClass],
) -> Result<Vec<PersistentVolumeClaim>, RecordProblem> {
    let spec = &resolved.spec;
    if spec.create_claims.is_none() {
        return Ok(Vec::new());
    }
    let rules = ClaimRules {
        classes: (spec.storage_class_mapping.iter())
            .map(|m| (m.from.clone(), m.to.clone()))
            .collect(),
        minimum_size: spec.minimum_claim_size.clone(),
    };
    let namespace = resolved.namespace().unwrap_or_default();
    let mut made = Vec::new();
    for (index, volume) in spec.volumes.iter().enumerate() {
        let target = &volume.target_claim_name;
        if volume.create_claim.is_some() || existing.contains_key(target) {
            continue;
        }
        let recorded = recorded_claim(sources, &volume.source_claim_name, index, &spec.snapshot)?;
        let mut claim = claim_from_record(recorded, target, &namespace, &rules)
            .map_err(|error| RecordProblem::Claim(format!("spec.volumes[{index}]: {error}")))?;
        check_class(&claim, recorded, classes)?;
        claim.labels_mut().extend([
            (
                "app.kubernetes.io/managed-by".to_owned(),
                "neverwiped-operator".to_owned(),
            ),
            (LABEL_RESTORE.to_owned(), resolved.name_any()),
        ]);
        made.push(claim);
    }
    Ok(made)
}

/// Refuses `claims` (to be created in `namespace`) that do not all fit its `quotas`: the API
/// server would refuse the one past a quota only after the claims before it were made.
pub fn check_quotas(
    claims: &[PersistentVolumeClaim],
    quotas: &[ResourceQuota],
    namespace: &str,
) -> Result<(), RecordProblem> {
    quota::check(quotas, claims, namespace).map_err(|error| match error {
        QuotaError::Shortfall(shortfall) => RecordProblem::QuotaExceeded(shortfall),
        QuotaError::Quantity(error) => RecordProblem::Claim(format!("{error}")),
    })
}

/// The record of the claim `name`.
fn recorded_claim<'a>(
    sources: &'a RecordedSources,
    name: &str,
    index: usize,
    snapshot: &str,
) -> Result<&'a RecordedClaim, RecordProblem> {
    sources
        .claims
        .iter()
        .find(|c| c.name == name)
        .ok_or_else(|| {
            let names: Vec<&str> = sources.claims.iter().map(|c| c.name.as_str()).collect();
            RecordProblem::ClaimNotRecorded {
                field: format!("spec.volumes[{index}].sourceClaimName"),
                name: name.to_owned(),
                snapshot: snapshot.to_owned(),
                recorded: match names.is_empty() {
                    true => "none".to_owned(),
                    false => names.join(", "),
                },
            }
        })
}

/// A claim of a StorageClass the cluster lacks would stay Pending, and the restore with it.
fn check_class(
    claim: &PersistentVolumeClaim,
    recorded: &RecordedClaim,
    classes: &[StorageClass],
) -> Result<(), RecordProblem> {
    let class = claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_ref());
    match class {
        Some(class) if !classes.iter().any(|c| c.name_any() == *class) => {
            Err(RecordProblem::StorageClassNotFound {
                claim: recorded.name.clone(),
                class: class.clone(),
                recorded: recorded.storage_class_name.clone().unwrap_or_default(),
            })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
#[path = "restore_record_tests.rs"]
mod tests;
