use super::*;
use crate::conditions::Reason;
use serde_json::json;

fn pod(name: &str, value: serde_json::Value) -> Pod {
    let mut pod: Pod = serde_json::from_value(value).unwrap();
    pod.metadata.name = Some(name.into());
    pod
}

/// An application pod mounting claim `data` in container `app`, with these security contexts.
fn app(name: &str, pod_context: serde_json::Value, container_context: serde_json::Value) -> Pod {
    pod(
        name,
        json!({"spec": {
            "securityContext": pod_context,
            "containers": [
                {"name": "proxy", "securityContext": {"runAsUser": 101}},
                {"name": "app", "securityContext": container_context,
                 "volumeMounts": [{"name": "store", "mountPath": "/var/lib/app"}]},
            ],
            "volumes": [{"name": "store", "persistentVolumeClaim": {"claimName": "data"}}],
        }}),
    )
}

fn choose(settings: Option<MoverSettings>, policy: &TenantPolicy, pods: &[Pod]) -> MoverChoice {
    choose_mover(
        settings.as_ref(),
        "spec.mover",
        "shop",
        policy,
        IdentitySource::Applications {
            pods,
            claims: &["data"],
        },
    )
    .unwrap()
}

fn identity(choice: &MoverChoice) -> &MoverIdentity {
    match &choice.mover {
        Mover::Unprivileged(identity) => identity,
        Mover::Privileged => panic!("privileged: {choice:?}"),
    }
}

#[test]
fn privileged_is_refused_where_the_admin_did_not_allow_it_and_says_what_to_do() {
    let privileged = MoverSettings {
        mode: MoverMode::Privileged,
        ..MoverSettings::default()
    };
    let refusal = choose_mover(
        Some(&privileged),
        "spec.mover",
        "shop",
        &TenantPolicy::default(),
        IdentitySource::Recorded(None),
    )
    .unwrap_err();
    assert_eq!(refusal.reason(), Reason::PrivilegedMoverNotAllowed);
    let message = refusal.to_string();
    assert!(message.contains("spec.mover.mode"), "{message}");
    assert!(
        message.contains("policy.privilegedMoverNamespaces"),
        "{message}"
    );
    assert!(message.contains("\"shop\""), "{message}");

    let allowed = TenantPolicy::from_json(r#"{"privilegedMoverNamespaces": ["shop"]}"#).unwrap();
    let choice = choose(Some(privileged), &allowed, &[]);
    assert_eq!(choice.mover, Mover::Privileged);
    assert_eq!(choice.status().mode, MoverMode::Privileged);
    assert!(choice.message.contains("allows"), "{}", choice.message);
}

#[test]
fn the_default_is_unprivileged_even_where_privileged_is_allowed() {
    let all = TenantPolicy::from_json(r#"{"privilegedMoverNamespaces": ["*"]}"#).unwrap();
    let choice = choose(None, &all, &[]);
    assert_eq!(identity(&choice), &MoverIdentity::default());
    let status = choice.status();
    assert_eq!(status.mode, MoverMode::Unprivileged);
    assert_eq!(status.run_as_user, Some(DEFAULT_MOVER_ID));
    assert!(
        status.message.contains("no pod mounts"),
        "{}",
        status.message
    );
}

#[test]
fn the_user_comes_from_the_container_that_mounts_the_claim_then_its_pod() {
    let pods = [app(
        "web-0",
        json!({"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000, "supplementalGroups": [4000]}),
        json!({"runAsUser": 1001}),
    )];
    let choice = choose(None, &TenantPolicy::default(), &pods);
    assert_eq!(
        identity(&choice),
        &MoverIdentity {
            uid: 1001,
            gid: 3000,
            supplemental_groups: vec![4000],
            fs_group: Some(2000),
        }
    );
    assert!(choice.message.contains("\"web-0\""), "{}", choice.message);
    assert!(choice.message.contains("\"app\""), "{}", choice.message);
    // What status shows is what a backup pod gets: the fsGroup as a supplemental group.
    let status = choice.status();
    assert_eq!(status.run_as_user, Some(1001));
    assert_eq!(status.supplemental_groups, vec![2000, 4000]);
}

#[test]
fn an_application_running_as_root_or_the_images_user_lends_no_user() {
    for context in [json!({"runAsUser": 0}), json!({})] {
        let pods = [app("web-0", json!({}), context)];
        let choice = choose(None, &TenantPolicy::default(), &pods);
        assert_eq!(identity(&choice).uid, DEFAULT_MOVER_ID);
        assert!(
            choice.message.contains("spec.mover.runAsUser"),
            "{}",
            choice.message
        );
    }
}

#[test]
fn the_operators_own_pods_and_pods_of_other_claims_are_not_asked() {
    let mut job_pod = app("a-backup", json!({"runAsUser": 0}), json!({}));
    job_pod.metadata.labels = Some(
        [(
            "app.kubernetes.io/managed-by".to_owned(),
            MANAGED_BY.to_owned(),
        )]
        .into_iter()
        .collect(),
    );
    let other = pod(
        "b-other",
        json!({"spec": {"securityContext": {"runAsUser": 7},
            "containers": [{"name": "c"}],
            "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "elsewhere"}}]}}),
    );
    let owner = app("c-web", json!({"runAsUser": 1000}), json!({}));
    let choice = choose(None, &TenantPolicy::default(), &[job_pod, other, owner]);
    assert_eq!(identity(&choice).uid, 1000);
    assert_eq!(identity(&choice).gid, 1000);
}

#[test]
fn the_spec_wins_and_a_spec_user_takes_no_groups_of_the_application() {
    let pods = [app(
        "web-0",
        json!({"runAsUser": 1000, "fsGroup": 2000, "supplementalGroups": [4000]}),
        json!({}),
    )];
    let settings = MoverSettings {
        run_as_user: Some(5000),
        ..MoverSettings::default()
    };
    let choice = choose(Some(settings), &TenantPolicy::default(), &pods);
    assert_eq!(
        identity(&choice),
        &MoverIdentity {
            uid: 5000,
            gid: 5000,
            supplemental_groups: vec![],
            fs_group: None,
        }
    );
    assert!(choice.message.contains("spec.mover.runAsUser names"));
    // Only groups: the application's user, the spec's groups.
    let groups = MoverSettings {
        fs_group: Some(9),
        supplemental_groups: vec![8],
        ..MoverSettings::default()
    };
    let choice = choose(Some(groups), &TenantPolicy::default(), &pods);
    assert_eq!(
        identity(&choice),
        &MoverIdentity {
            uid: 1000,
            gid: 1000,
            supplemental_groups: vec![8],
            fs_group: Some(9),
        }
    );
}

#[test]
fn a_reading_identity_has_no_fs_group_and_no_duplicate_groups() {
    let restoring = MoverIdentity {
        uid: 1000,
        gid: 1000,
        supplemental_groups: vec![2000, 1000, 4000],
        fs_group: Some(2000),
    };
    assert_eq!(
        restoring.reading(),
        MoverIdentity {
            uid: 1000,
            gid: 1000,
            supplemental_groups: vec![2000, 4000],
            fs_group: None,
        }
    );
}

#[test]
fn a_restore_runs_as_the_user_the_plans_backups_ran_as() {
    let recorded = MoverStatus {
        mode: MoverMode::Unprivileged,
        run_as_user: Some(1000),
        run_as_group: Some(3000),
        supplemental_groups: vec![2000, 4000],
        fs_group: Some(2000),
        message: String::new(),
    };
    let choice = choose_mover(
        None,
        "spec.mover",
        "shop",
        &TenantPolicy::default(),
        IdentitySource::Recorded(Some(&recorded)),
    )
    .unwrap();
    assert_eq!(
        identity(&choice),
        &MoverIdentity {
            uid: 1000,
            gid: 3000,
            supplemental_groups: vec![4000],
            fs_group: Some(2000),
        }
    );
    assert!(choice.message.contains("status.mover"));
}

#[test]
fn a_recorded_root_user_is_not_an_identity_to_restore_as() {
    let recorded = MoverStatus {
        mode: MoverMode::Unprivileged,
        run_as_user: Some(0),
        run_as_group: Some(0),
        supplemental_groups: vec![],
        fs_group: None,
        message: String::new(),
    };
    let choice = choose_mover(
        None,
        "spec.mover",
        "shop",
        &TenantPolicy::default(),
        IdentitySource::Recorded(Some(&recorded)),
    )
    .unwrap();
    assert_eq!(identity(&choice), &MoverIdentity::default());
    assert!(
        choice.message.contains("records no user"),
        "{}",
        choice.message
    );
}
