//! The copy Job: its name, its arguments, where its secrets come from, and its golden YAML.

use jiff::SignedDuration;
use k8s_openapi::api::core::v1::EnvVar;

use super::golden_tests::assert_golden;
use super::tests::{plan, settings};
use super::*;
use crate::api::{BackupPlan, CopyDestination, CredentialsSecretRef, Repository, SecretKeyRef};

pub(crate) fn destination() -> CopyDestination {
    CopyDestination {
        name: "offsite".into(),
        repository: Repository {
            url: "https://gate.other-site.example/shop/nightly".into(),
            password_secret_ref: SecretKeyRef {
                name: "offsite-repository".into(),
                key: "password".into(),
            },
            credentials_secret_ref: Some(CredentialsSecretRef {
                name: "offsite-gate".into(),
                username_key: "username".into(),
                password_key: "password".into(),
            }),
            ca_secret_ref: None,
        },
        schedule: None,
        retention: None,
    }
}

fn run() -> CopyRun {
    CopyRun {
        suffix: "1a2b3c4d".into(),
        deadline: SignedDuration::from_hours(2),
    }
}

fn copy_plan() -> BackupPlan {
    let mut plan = plan();
    plan.spec.copies = vec![destination()];
    plan
}

#[test]
fn golden_copy_job() {
    assert_golden(
        "copy",
        &copy_job(&copy_plan(), &destination(), &run(), &settings()),
    );
}

#[test]
fn copy_job_copies_the_plans_host_from_its_repository_to_the_destination() {
    let job = copy_job(&copy_plan(), &destination(), &run(), &settings());
    assert_eq!(
        job.metadata.name.as_deref(),
        Some("nightly-copy-offsite-1a2b3c4d")
    );
    let container = &job
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0];
    let args = container.args.clone().unwrap();
    let after = |flag: &str| {
        let at = args.iter().position(|a| a == flag).unwrap();
        args[at + 1].clone()
    };
    assert_eq!(args[0], "copy");
    assert_eq!(
        after("--repo"),
        "rest:https://gate.other-site.example/shop/nightly"
    );
    assert!(after("--from-repo").starts_with("rest:https://gate.example.com/"));
    assert_eq!(after("--host"), "shop/nightly");
    assert!(args.contains(&"--init".to_owned()));
    // No key hint: the plan's last key names a key of its own repository, not the destination's.
    assert!(!args.contains(&"--key-hint".to_owned()));
    let labels = job.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[LABEL_OPERATION], "copy");
    assert_eq!(labels[LABEL_COPY], "offsite");
    assert_eq!(copy_destination_of(&job), Some("offsite"));
    assert_eq!(
        job_annotation(&job, ANNOTATION_REPOSITORY_HOST),
        Some("gate.other-site.example"),
        "the destination's host is the one the per-host limit counts"
    );
}

#[test]
fn a_destination_with_retention_is_sent_only_what_follows_its_newest_copy() {
    let without = copy_job(&copy_plan(), &destination(), &run(), &settings());
    let flag = "--after-newest-copy".to_owned();
    let args = |job: &Job| {
        let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        pod.containers[0].args.clone().unwrap()
    };
    assert!(!args(&without).contains(&flag), "{:?}", args(&without));
    let kept = CopyDestination {
        retention: Some(crate::api::Retention {
            keep_daily: Some(7),
            ..Default::default()
        }),
        ..destination()
    };
    let with = copy_job(&copy_plan(), &kept, &run(), &settings());
    assert!(args(&with).contains(&flag), "{:?}", args(&with));
}

#[test]
fn copy_job_takes_every_secret_from_secrets_never_from_its_arguments() {
    let job = copy_job(&copy_plan(), &destination(), &run(), &settings());
    let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let container = &pod.containers[0];
    let env: Vec<&EnvVar> = container.env.as_ref().unwrap().iter().collect();
    let value = |name: &str| env.iter().find(|e| e.name == name).cloned().cloned();
    let from_secret = |name: &str| {
        let var = value(name).unwrap_or_else(|| panic!("{name} is set"));
        assert!(var.value.is_none(), "{name} is no literal value");
        var.value_from.unwrap().secret_key_ref.unwrap()
    };
    assert_eq!(from_secret("NEVERWIPED_GATE_USERNAME").name, "offsite-gate");
    assert_eq!(from_secret("NEVERWIPED_FROM_GATE_USERNAME").name, "gate");
    for file in [
        "NEVERWIPED_PASSWORD_FILE",
        "NEVERWIPED_GATE_PASSWORD_FILE",
        "NEVERWIPED_FROM_PASSWORD_FILE",
        "NEVERWIPED_FROM_GATE_CA_FILE",
    ] {
        let path = value(file).and_then(|v| v.value).unwrap();
        assert!(path.starts_with(SECRETS_ROOT), "{file}: {path}");
    }
    let secrets: Vec<String> = pod
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
        .collect();
    for secret in ["offsite-repository", "offsite-gate", "gate-ca"] {
        assert!(
            secrets.contains(&secret.to_owned()),
            "{secret}: {secrets:?}"
        );
    }
    let args = container.args.as_ref().unwrap().join(" ");
    assert!(!args.contains("offsite-repository") && !args.contains("password="));
    let security = container.security_context.as_ref().unwrap();
    assert_eq!(security.run_as_non_root, Some(true));
    assert_eq!(security.read_only_root_filesystem, Some(true));
}

#[test]
fn copy_job_names_stay_apart_when_long_names_are_cut() {
    let mut plan = copy_plan();
    plan.metadata.name = Some("a-plan-with-a-rather-long-name-for-a-job".into());
    let one = copy_job_name(&plan, "offsite-in-the-other-datacenter", "1a2b3c4d");
    let two = copy_job_name(&plan, "offsite-in-the-other-datacenter-2", "1a2b3c4d");
    assert!(one.len() <= 63 && two.len() <= 63, "{one} {two}");
    assert_ne!(one, two);
    assert!(one.ends_with("-1a2b3c4d"), "{one}");
    assert_eq!(
        one,
        copy_job_name(&plan, "offsite-in-the-other-datacenter", "1a2b3c4d"),
        "the same run has the same name: a restart does not copy twice"
    );
}
