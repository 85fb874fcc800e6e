//! The describe step as `decide` takes it: the describe Job first, then the claims from the
//! record and the restore Job pinned to the described snapshot, or the Restore's failure.

use super::restore::{decide, ObservedRestore};
use super::restore_describe::DescribeStep;
use super::Settings;
use crate::api::{ClaimCreation, Restore, RestorePhase, StorageClassMapping};
use crate::conditions::{find_condition, types, Reason};
use crate::restore_record::Described;
use k8s_openapi::api::core::v1::{ResourceQuota, ResourceQuotaSpec, ResourceQuotaStatus};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::ObjectMeta;
use kube::ResourceExt;
use neverwiped_contract::record::{RecordedClaim, RecordedSources};

const ID: &str = "5f0c3e9a1b2d4c6e8f0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f506";

fn restore(mapping: &[(&str, &str)]) -> Restore {
    let mut restore = super::restore::tests::restore(false);
    restore.spec.create_claims = Some(ClaimCreation::FromSnapshot);
    restore.spec.storage_class_mapping = (mapping.iter())
        .map(|(from, to)| StorageClassMapping {
            from: from.to_string(),
            to: to.to_string(),
        })
        .collect();
    restore
}

fn observed(describe: DescribeStep) -> ObservedRestore {
    ObservedRestore {
        describe,
        storage_classes: vec![StorageClass {
            metadata: ObjectMeta {
                name: Some("standard".into()),
                ..ObjectMeta::default()
            },
            ..StorageClass::default()
        }],
        ..super::restore::tests::observed()
    }
}

fn described() -> DescribeStep {
    DescribeStep::Described(Box::new(Described {
        snapshot_id: ID.into(),
        snapshot_time: Some("2026-11-28T01:00:00Z".into()),
        sources: RecordedSources {
            claims: vec![RecordedClaim {
                path: "/data/data".into(),
                name: "data".into(),
                requested_size: Some("3Gi".into()),
                storage_class_name: Some("fast".into()),
                access_modes: vec!["ReadWriteOnce".into()],
                ..RecordedClaim::default()
            }],
            ..RecordedSources::default()
        },
    }))
}

fn now() -> jiff::Timestamp {
    "2026-11-30T10:00:00Z".parse().unwrap()
}

#[test]
fn a_restore_that_needs_the_record_starts_with_its_describe_job() {
    let settings = Settings::with_image("s");
    let decision = decide(
        &restore(&[]),
        &observed(DescribeStep::Start),
        now(),
        &settings,
    );
    assert_eq!(decision.status.phase, Some(RestorePhase::Describing));
    let job = decision.create_job.expect("the describe Job");
    assert_eq!(job.name_any(), "back-describe");
    assert!(
        decision.create_claims.is_empty(),
        "no claim before the record"
    );
    assert_eq!(
        decision.status.describe_job_name.as_deref(),
        Some("back-describe")
    );
    assert_eq!(decision.status.job_name, None);
    assert_eq!(decision.events[0].reason, Reason::DescribeStarted);
    // Without the Secrets the repository needs, it waits as a restore would.
    let mut lacking = observed(DescribeStep::Start);
    lacking.secrets.clear();
    let decision = decide(&restore(&[]), &lacking, now(), &settings);
    assert_eq!(decision.status.phase, Some(RestorePhase::Pending));
    assert!(decision.create_job.is_none());
    let running = DescribeStep::Running {
        job_name: "back-describe".into(),
    };
    let decision = decide(&restore(&[]), &observed(running), now(), &settings);
    assert_eq!(decision.status.phase, Some(RestorePhase::Describing));
    assert!(decision.create_job.is_none() && decision.requeue_after.is_some());
}

#[test]
fn once_described_the_claims_are_made_and_the_restore_job_is_pinned_to_the_snapshot() {
    let restore = restore(&[("fast", "standard")]);
    let decision = decide(
        &restore,
        &observed(described()),
        now(),
        &Settings::with_image("s"),
    );
    assert_eq!(decision.status.phase, Some(RestorePhase::Running));
    let claim = &decision.create_claims[0];
    assert_eq!(claim.name_any(), "data-restored");
    let spec = claim.spec.as_ref().unwrap();
    assert_eq!(spec.storage_class_name.as_deref(), Some("standard"));
    let job = decision.create_job.expect("the restore Job");
    assert_eq!(job.name_any(), "back-restore");
    let container = &job.spec.unwrap().template.spec.unwrap().containers[0];
    let args = container.args.as_ref().unwrap();
    assert_eq!(args[..2], ["restore".to_owned(), ID.to_owned()]);
    assert_eq!(decision.status.snapshot_id.as_deref(), Some(ID));
    assert_eq!(decision.status.created_claims, ["data-restored"]);
    assert!(decision.status.existing_claims.is_empty());
    let reasons: Vec<Reason> = decision.events.iter().map(|e| e.reason).collect();
    assert_eq!(
        reasons,
        [
            Reason::SnapshotDescribed,
            Reason::RestoreStarted,
            Reason::ClaimCreated
        ]
    );
}

#[test]
fn a_class_the_cluster_lacks_fails_the_restore_with_its_reason() {
    let decision = decide(
        &restore(&[]),
        &observed(described()),
        now(),
        &Settings::with_image("s"),
    );
    assert_eq!(decision.status.phase, Some(RestorePhase::Failed));
    assert!(decision.create_job.is_none() && decision.create_claims.is_empty());
    let complete = find_condition(&decision.status.conditions, types::COMPLETE).unwrap();
    assert_eq!(complete.reason, "StorageClassNotFound");
    assert!(complete.message.contains("{from: fast, to: CLASS}"));
    assert_eq!(decision.events[0].reason, Reason::StorageClassNotFound);
    assert_eq!(
        decision.requeue_after, None,
        "a failed Restore waits for nothing"
    );
}

/// A ResourceQuota of the Restore's namespace named `storage` with these hard limits and uses.
fn quota(hard: &str, used: &str) -> ResourceQuota {
    let of = |amount: &str| Some([("requests.storage".to_owned(), Quantity(amount.into()))].into());
    ResourceQuota {
        metadata: ObjectMeta {
            name: Some("storage".into()),
            ..ObjectMeta::default()
        },
        spec: Some(ResourceQuotaSpec {
            hard: of(hard),
            ..ResourceQuotaSpec::default()
        }),
        status: Some(ResourceQuotaStatus {
            used: of(used),
            ..ResourceQuotaStatus::default()
        }),
    }
}

#[test]
fn claims_past_a_quota_fail_the_restore_before_any_is_made_and_claims_within_it_are_made() {
    let mapped = restore(&[("fast", "standard")]);
    let settings = Settings::with_image("s");
    let mut tight = observed(described());
    tight.resource_quotas = vec![quota("10Gi", "8Gi")];
    let decision = decide(&mapped, &tight, now(), &settings);
    assert_eq!(decision.status.phase, Some(RestorePhase::Failed));
    assert!(decision.create_job.is_none() && decision.create_claims.is_empty());
    let complete = find_condition(&decision.status.conditions, types::COMPLETE).unwrap();
    assert_eq!(complete.reason, "QuotaExceeded");
    let message = &complete.message;
    assert!(
        message.contains("3Gi of storage (requests.storage)"),
        "{message}"
    );
    assert!(message.contains("ResourceQuota shop/storage"), "{message}");
    assert!(message.contains("(hard 10Gi, used 8Gi)"), "{message}");
    assert_eq!(decision.events[0].reason, Reason::QuotaExceeded);
    let mut roomy = observed(described());
    roomy.resource_quotas = vec![quota("10Gi", "7Gi")];
    let decision = decide(&mapped, &roomy, now(), &settings);
    assert_eq!(
        decision.create_claims.len(),
        1,
        "exactly full is within the quota"
    );
    assert!(decision.create_job.is_some());
}

#[test]
fn a_failed_describe_fails_the_restore_with_the_sidecars_reason() {
    let end = crate::status::JobEnd {
        outcome: crate::api::RunOutcome::Failed,
        reason: Reason::DescribeFailed,
        message: Some("the snapshot's record takes 5000 bytes".into()),
        result: None,
        start_time: None,
        completion_time: Some(now()),
    };
    let failed = DescribeStep::Failed {
        end: Box::new(end),
        delete: false,
    };
    let decision = decide(
        &restore(&[]),
        &observed(failed),
        now(),
        &Settings::with_image("s"),
    );
    assert_eq!(decision.status.phase, Some(RestorePhase::Failed));
    assert_eq!(decision.status.files_restored, None);
    let complete = find_condition(&decision.status.conditions, types::COMPLETE).unwrap();
    assert_eq!(complete.reason, "DescribeFailed");
    assert!(decision.create_job.is_none() && decision.delete_job.is_none());
}

#[test]
fn claims_that_existed_are_restored_into_and_those_made_on_an_earlier_try_count_as_created() {
    let mut restore = restore(&[("fast", "standard")]);
    restore.spec.volumes.push(crate::api::RestoreVolume {
        source_claim_name: "data".into(),
        target_claim_name: "data-live".into(),
        create_claim: None,
        includes: vec![],
    });
    let claim = |name: &str, label: Option<&str>| {
        let mut claim = k8s_openapi::api::core::v1::PersistentVolumeClaim::default();
        claim.metadata.name = Some(name.into());
        claim.metadata.labels =
            label.map(|l| [(crate::job::LABEL_RESTORE.to_owned(), l.to_owned())].into());
        claim
    };
    let mut seen = observed(described());
    seen.claims
        .insert("data-restored".into(), claim("data-restored", Some("back")));
    seen.claims
        .insert("data-live".into(), claim("data-live", None));
    let decision = decide(&restore, &seen, now(), &Settings::with_image("s"));
    assert!(decision.create_claims.is_empty(), "both exist");
    assert_eq!(decision.status.created_claims, ["data-restored"]);
    assert_eq!(decision.status.existing_claims, ["data-live"]);
    assert!(decision.create_job.is_some());
}
