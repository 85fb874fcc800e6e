use super::*;
use std::collections::HashMap;

fn read(vars: &[(&str, &str)]) -> Result<OperatorEnvironment, EnvironmentError> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    OperatorEnvironment::read(|name| vars.get(name).cloned(), None, 42)
}

const IMAGE: (&str, &str) = ("NEVERWIPED_SIDECAR_IMAGE", "registry.example/sidecar:1");

#[test]
fn only_the_image_is_required_and_the_rest_has_the_charts_defaults() {
    let environment = read(&[IMAGE]).unwrap();
    assert_eq!(environment.settings.job.image, "registry.example/sidecar:1");
    assert_eq!(environment.settings.job.image_pull_policy, None);
    assert_eq!(environment.settings.limits, Limits::default());
    assert_eq!(environment.http_address, "0.0.0.0:8080");
    assert!(!environment.json_logs);
    let leader = environment
        .leader
        .expect("leader election is on by default");
    assert_eq!(leader.namespace, "default");
    assert_eq!(leader.name, "neverwiped-operator");
    assert_eq!(leader.identity, "neverwiped-operator-42");
    assert_eq!(leader.lease_duration, Duration::from_secs(15));

    let error = read(&[]).unwrap_err();
    assert_eq!(error.variable, "NEVERWIPED_SIDECAR_IMAGE");
    assert!(error.to_string().contains("required"), "{error}");
}

#[test]
fn the_pod_name_is_the_identity_of_the_lease_and_of_the_events() {
    let environment = read(&[IMAGE, ("POD_NAME", "operator-7f9c"), ("HOSTNAME", "h")]).unwrap();
    assert_eq!(environment.settings.instance, "operator-7f9c");
    assert_eq!(environment.leader.unwrap().identity, "operator-7f9c");

    let environment = read(&[IMAGE, ("HOSTNAME", "node-a")]).unwrap();
    assert_eq!(environment.settings.instance, "node-a-42");
}

#[test]
fn the_drill_image_is_optional_and_the_sidecars_runs_drills_without_it() {
    let environment = read(&[IMAGE]).unwrap();
    assert_eq!(environment.settings.job.drill_image, None);
    let drill = ("NEVERWIPED_DRILL_IMAGE", "registry.example/drill:1");
    let environment = read(&[IMAGE, drill]).unwrap();
    assert_eq!(
        environment.settings.job.drill_image.as_deref(),
        Some("registry.example/drill:1")
    );
    let environment = read(&[IMAGE, ("NEVERWIPED_DRILL_IMAGE", "")]).unwrap();
    assert_eq!(environment.settings.job.drill_image, None, "empty is unset");
    let policy = ("NEVERWIPED_DRILL_IMAGE_PULL_POLICY", "Always");
    let environment = read(&[IMAGE, drill, policy]).unwrap();
    assert_eq!(
        environment.settings.job.drill_image_pull_policy.as_deref(),
        Some("Always")
    );
    let wrong = ("NEVERWIPED_DRILL_IMAGE_PULL_POLICY", "Sometimes");
    let error = read(&[IMAGE, drill, wrong]).unwrap_err();
    assert_eq!(error.variable, "NEVERWIPED_DRILL_IMAGE_PULL_POLICY");
}

#[test]
fn every_variable_is_read_into_its_setting() {
    let environment = read(&[
        IMAGE,
        ("NEVERWIPED_SIDECAR_IMAGE_PULL_POLICY", "IfNotPresent"),
        ("NEVERWIPED_HTTP_ADDR", "127.0.0.1:9000"),
        ("NEVERWIPED_CATCH_UP_WINDOW", "2h"),
        ("NEVERWIPED_WATCH_NAMESPACE", "team-a"),
        ("NEVERWIPED_MAX_RUNNING_BACKUPS", "0"),
        ("NEVERWIPED_MAX_RUNNING_MAINTENANCE", "2"),
        ("NEVERWIPED_MAX_RUNNING_PER_NODE", "4"),
        ("NEVERWIPED_MAX_RUNNING_PER_REPOSITORY_HOST", "6"),
        ("NEVERWIPED_PLAN_SELECTOR", "shard=1"),
        ("NEVERWIPED_RECONCILE_CONCURRENCY", "8"),
        ("NEVERWIPED_LEASE_NAME", "lease"),
        ("NEVERWIPED_LEASE_DURATION", "30s"),
        ("POD_NAMESPACE", "backup-system"),
        ("NEVERWIPED_LOG_FORMAT", "json"),
    ])
    .unwrap();
    let settings = &environment.settings;
    assert_eq!(
        settings.job.image_pull_policy.as_deref(),
        Some("IfNotPresent")
    );
    assert_eq!(settings.catch_up_window, SignedDuration::from_hours(2));
    assert_eq!(settings.watch_namespace.as_deref(), Some("team-a"));
    let expected_limits = Limits {
        backups: None,
        maintenance: NonZeroUsize::new(2),
        per_node: NonZeroUsize::new(4),
        per_repository_host: NonZeroUsize::new(6),
    };
    assert_eq!(settings.limits, expected_limits);
    assert_eq!(settings.plan_selector.as_deref(), Some("shard=1"));
    assert_eq!(settings.reconcile_concurrency, 8);
    assert_eq!(environment.http_address, "127.0.0.1:9000");
    assert!(environment.json_logs);
    let leader = environment.leader.unwrap();
    assert_eq!(
        (leader.namespace.as_str(), leader.name.as_str()),
        ("backup-system", "lease")
    );
    assert_eq!(leader.lease_duration, Duration::from_secs(30));
}

#[test]
fn the_lease_namespace_falls_back_to_the_service_accounts() {
    let lookup = |name: &str| (name == IMAGE.0).then(|| IMAGE.1.to_string());
    let environment = OperatorEnvironment::read(lookup, Some("ops\n"), 1).unwrap();
    assert_eq!(environment.leader.unwrap().namespace, "ops");
    let environment = read(&[IMAGE, ("NEVERWIPED_LEADER_ELECTION", "false")]).unwrap();
    assert!(environment.leader.is_none());
}

#[test]
fn a_value_that_does_not_parse_names_its_variable_and_what_it_expects() {
    let cases = [
        (
            "NEVERWIPED_SIDECAR_IMAGE_PULL_POLICY",
            "always",
            "Always, IfNotPresent, Never",
        ),
        ("NEVERWIPED_CATCH_UP_WINDOW", "a day", "a duration"),
        ("NEVERWIPED_LEASE_DURATION", "-5s", "a duration"),
        (
            "NEVERWIPED_MAX_RUNNING_BACKUPS",
            "-1",
            "whole number of Jobs",
        ),
        (
            "NEVERWIPED_MAX_RUNNING_PER_NODE",
            "three",
            "whole number of Jobs",
        ),
        ("NEVERWIPED_RECONCILE_CONCURRENCY", "100000", "up to 65535"),
        ("NEVERWIPED_LEADER_ELECTION", "no", "true, false"),
        ("NEVERWIPED_LOG_FORMAT", "JSON", "text, json"),
        (
            "NEVERWIPED_TENANT_POLICY",
            "{not json",
            "policy values as JSON",
        ),
        (
            "NEVERWIPED_MAINTENANCE",
            r#"{"credentials": [{"urlPrefix": "https://gate.example.evil", "secretName": "Bad"}]}"#,
            "credentials[0].secretName",
        ),
    ];
    for (variable, value, expected) in cases {
        let error = read(&[IMAGE, (variable, value)]).unwrap_err();
        assert_eq!(error.variable, variable);
        let message = error.to_string();
        assert!(
            message.starts_with(&format!("{variable}={value:?}: ")) && message.contains(expected),
            "{variable}={value}: {message}"
        );
    }
}

#[test]
fn an_empty_value_is_unset() {
    let environment = read(&[
        IMAGE,
        ("NEVERWIPED_WATCH_NAMESPACE", ""),
        ("NEVERWIPED_MAX_RUNNING_BACKUPS", ""),
        ("NEVERWIPED_LOG_FORMAT", ""),
    ])
    .unwrap();
    assert_eq!(environment.settings.watch_namespace, None);
    assert_eq!(
        environment.settings.limits.backups,
        Limits::default().backups
    );
    assert!(!environment.json_logs);
}

#[test]
fn maintenance_values_are_read_for_the_operators_own_namespace() {
    let values = r#"{"credentials": [{"urlPrefix": "https://gate.example.com/", "secretName": "gate-admin"}],
        "protectionWindow": {"default": "14d"}}"#;
    let environment = read(&[
        IMAGE,
        ("NEVERWIPED_MAINTENANCE", values),
        ("POD_NAMESPACE", "backup-system"),
    ])
    .unwrap();
    let protection = &environment.settings.job.protection;
    assert_eq!(protection.namespace, "backup-system");
    let plan = protection.for_plan("shop", "https://gate.example.com/shop");
    assert_eq!(plan.credentials.unwrap().secret_name, "gate-admin");
    assert_eq!(plan.protect_within().as_deref(), Some("14d"));
    let lookup = |name: &str| (name == IMAGE.0).then(|| IMAGE.1.to_string());
    let environment = OperatorEnvironment::read(lookup, Some("ops\n"), 1).unwrap();
    assert_eq!(environment.settings.job.protection.namespace, "ops");
    assert!(environment.settings.job.protection.credentials.is_empty());
}

#[test]
fn the_suspicion_thresholds_are_read_and_checked() {
    let defaults = read(&[IMAGE]).unwrap().settings.suspicion;
    assert_eq!(defaults, Thresholds::default());
    let environment = read(&[
        IMAGE,
        ("NEVERWIPED_SUSPICIOUS_MIN_HISTORY", "5"),
        ("NEVERWIPED_SUSPICIOUS_FACTOR", "3"),
        ("NEVERWIPED_SUSPICIOUS_REWRITTEN_SHARE", "0.25"),
        ("NEVERWIPED_SUSPICIOUS_REMOVED_SHARE", "0.2"),
        ("NEVERWIPED_SUSPICIOUS_INCOMPRESSIBLE_SHARE", "0.95"),
        ("NEVERWIPED_SUSPICIOUS_USUAL_COMPRESSED_SHARE", "0.6"),
        ("NEVERWIPED_SUSPICIOUS_MIN_NEW_BYTES", "1048576"),
    ])
    .unwrap();
    assert_eq!(
        environment.settings.suspicion,
        Thresholds {
            min_history: 5,
            factor: 3.0,
            rewritten_share: 0.25,
            removed_share: 0.2,
            incompressible_share: 0.95,
            usual_compressed_share: 0.6,
            min_new_bytes: 1 << 20,
        }
    );
    for (variable, value, expected) in [
        (
            "NEVERWIPED_SUSPICIOUS_REWRITTEN_SHARE",
            "50%",
            "a share from 0 to 1",
        ),
        (
            "NEVERWIPED_SUSPICIOUS_REMOVED_SHARE",
            "1.5",
            "a share from 0 to 1",
        ),
        ("NEVERWIPED_SUSPICIOUS_FACTOR", "-2", "a positive number"),
        (
            "NEVERWIPED_SUSPICIOUS_MIN_HISTORY",
            "three",
            "a number of nights",
        ),
        (
            "NEVERWIPED_SUSPICIOUS_MIN_NEW_BYTES",
            "16M",
            "a number of bytes",
        ),
    ] {
        let error = read(&[IMAGE, (variable, value)]).unwrap_err();
        assert_eq!(error.variable, variable);
        assert!(error.to_string().contains(expected), "{error}");
    }
}
