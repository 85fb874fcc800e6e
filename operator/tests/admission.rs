//! A hostile tenant against the real API server: the committed CRDs' schema (patterns and CEL
//! rules, which the API server enforces) refuses spec strings that would become paths outside
//! their place, and the operator refuses them again, with a condition, when they are stored.
//!
//! The CRDs are applied under a group and kinds of this test's own (the committed files with only
//! the names changed), so that tests of other branches applying their CRDs to the same server
//! cannot swap the schema under it, and this test's kinds never answer for theirs.

mod support;

#[path = "admission/restore_requester.rs"]
mod restore_requester;
#[path = "admission/streams.rs"]
mod streams;

use serde_json::{json, Value};
use support::{api_server_or_skip, kubectl_output, kubectl_stdin, repo_root, TestNamespace};

const TEST_GROUP: &str = "admission-test.neverwiped.io";
/// The test's kinds are `AdmissionTestBackupPlan` and `AdmissionTestRestore`, with no short
/// names or categories, so that `kubectl get backupplan` of other tests never finds them.
const TEST_PREFIX: &str = "AdmissionTest";

fn apply_test_crds() {
    static APPLIED: std::sync::Once = std::sync::Once::new();
    APPLIED.call_once(|| {
        for file in [
            "backupplans.neverwiped.io.yaml",
            "restores.neverwiped.io.yaml",
        ] {
            let committed = std::fs::read_to_string(repo_root().join("crds").join(file)).unwrap();
            let mut crd: Value = serde_saphyr::from_str(&committed).expect("a CRD");
            let names = &mut crd["spec"]["names"];
            let kind = format!("{TEST_PREFIX}{}", names["kind"].as_str().unwrap());
            let plural = kind.to_lowercase() + "s";
            *names = json!({"kind": kind, "listKind": format!("{kind}List"),
                            "plural": plural, "singular": kind.to_lowercase()});
            crd["spec"]["group"] = json!(TEST_GROUP);
            crd["metadata"]["name"] = json!(format!("{plural}.{TEST_GROUP}"));
            kubectl_stdin(
                &[
                    "apply",
                    "--server-side",
                    "--force-conflicts",
                    "--field-manager=neverwiped-admission-test",
                    "-f",
                    "-",
                ],
                Some(&crd.to_string()),
            );
            kubectl_stdin(
                &[
                    "wait",
                    "--for=condition=Established",
                    "--timeout=30s",
                    &format!("crd/{plural}.{TEST_GROUP}"),
                ],
                None,
            );
        }
    });
}

/// Creates `object` in `namespace`: `Ok(())`, or the API server's refusal.
fn create(namespace: &str, object: &Value) -> Result<(), String> {
    let output = kubectl_output(
        &["create", "-n", namespace, "-f", "-"],
        Some(&object.to_string()),
    );
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

fn restore(name: &str, volume: Value) -> Value {
    json!({
        "apiVersion": format!("{TEST_GROUP}/v1alpha1"),
        "kind": format!("{TEST_PREFIX}Restore"),
        "metadata": {"name": name},
        "spec": {"backupPlanName": "nightly", "volumes": [volume]}
    })
}

fn plan(name: &str, patch: impl FnOnce(&mut Value)) -> Value {
    let mut plan = json!({
        "apiVersion": format!("{TEST_GROUP}/v1alpha1"),
        "kind": format!("{TEST_PREFIX}BackupPlan"),
        "metadata": {"name": name},
        "spec": {
            "schedule": "30 2 * * *",
            "repository": {
                "url": "https://gate.example.com/team-a/shop",
                "passwordSecretRef": {"name": "repo", "key": "password"}
            },
            "volumes": [{"claimName": "data", "excludes": ["cache", "/tmp", "*.log", "a..b"]}],
            "databases": [{"name": "orders", "type": "postgresql", "host": "postgres.shop.svc",
                           "credentialsSecretRef": {"name": "orders-db"},
                           "databases": ["shop$eu"]}]
        }
    });
    patch(&mut plan);
    plan
}

fn assert_refused(result: Result<(), String>, field: &str, what: &str) {
    let error = result.expect_err(what);
    assert!(
        error.contains(field),
        "{what}: the refusal names {field}: {error}"
    );
}

#[test]
fn the_api_server_takes_a_restore_from_a_plan_or_from_a_repository_and_origin_never_both() {
    if !api_server_or_skip() {
        return;
    }
    apply_test_crds();
    let namespace = TestNamespace::create("admission-source");
    let ns = namespace.name.as_str();
    let volume = json!({"sourceClaimName": "data", "targetClaimName": "data"});
    let repository = json!({"url": "https://gate.example.com/team-a/shop",
                            "passwordSecretRef": {"name": "repo", "key": "password"}});
    let mut alone = restore("alone", volume);
    let spec = alone["spec"].as_object_mut().unwrap();
    spec.remove("backupPlanName");
    spec.insert("repository".into(), repository.clone());
    spec.insert("origin".into(), json!("shop/nightly"));
    create(ns, &alone).expect("a Restore from a repository and an origin is accepted");

    let one_of = "set exactly one of backupPlanName";
    let mut both = alone.clone();
    both["metadata"]["name"] = json!("both");
    both["spec"]["backupPlanName"] = json!("nightly");
    assert_refused(create(ns, &both), one_of, "a plan and a repository");
    let mut neither = alone.clone();
    neither["metadata"]["name"] = json!("neither");
    let spec = neither["spec"].as_object_mut().unwrap();
    spec.remove("repository");
    spec.remove("origin");
    // The schema's anyOf refuses it before the rule runs.
    assert_refused(
        create(ns, &neither),
        "spec.backupPlanName: Required value",
        "neither a plan nor a repository",
    );
    let mut no_origin = alone.clone();
    no_origin["metadata"]["name"] = json!("no-origin");
    no_origin["spec"].as_object_mut().unwrap().remove("origin");
    assert_refused(
        create(ns, &no_origin),
        "origin",
        "a repository without an origin",
    );
    for (name, origin) in [("bad-origin", "shop"), ("walks", "shop/../blog")] {
        let mut bad = alone.clone();
        bad["metadata"]["name"] = json!(name);
        bad["spec"]["origin"] = json!(origin);
        assert_refused(create(ns, &bad), "spec.origin", origin);
    }
    let mut bad_url = alone.clone();
    bad_url["metadata"]["name"] = json!("bad-url");
    bad_url["spec"]["repository"]["url"] = json!("https://gate.example.com/team-a/../team-b");
    assert_refused(create(ns, &bad_url), "spec.repository.url", "a dot segment");
}

#[test]
fn the_api_server_refuses_a_restore_whose_source_claim_name_walks_out_of_its_directory() {
    if !api_server_or_skip() {
        return;
    }
    apply_test_crds();
    let namespace = TestNamespace::create("admission");
    let ns = namespace.name.as_str();

    let valid = json!({"sourceClaimName": "data", "targetClaimName": "data-restored",
                       "includes": ["/uploads/2026", "a..b"]});
    create(ns, &restore("valid", valid)).expect("a valid Restore is accepted");

    let traversal = json!({"sourceClaimName": "../../usr/lib/postgresql/18/bin",
                           "targetClaimName": "data-restored"});
    assert_refused(
        create(ns, &restore("traversal", traversal)),
        "spec.volumes[0].sourceClaimName",
        "sourceClaimName ../../usr/lib/postgresql/18/bin",
    );
    let slash = json!({"sourceClaimName": "data", "targetClaimName": "a/b"});
    assert_refused(
        create(ns, &restore("slash", slash)),
        "spec.volumes[0].targetClaimName",
        "targetClaimName a/b",
    );
    let include = json!({"sourceClaimName": "data", "targetClaimName": "data",
                         "includes": ["/uploads/../../../etc"]});
    assert_refused(
        create(ns, &restore("include", include)),
        "spec.volumes[0].includes[0]",
        "include with ..",
    );
    let newline = json!({"sourceClaimName": "data", "targetClaimName": "data",
                         "includes": ["a\nb"]});
    assert_refused(
        create(ns, &restore("newline", newline)),
        "spec.volumes[0].includes[0]",
        "include with a newline",
    );
}

/// A plan's name, the field its refusal names, and the change that makes it invalid.
type Case = (&'static str, &'static str, fn(&mut Value));

#[test]
fn the_api_server_refuses_plan_strings_that_would_become_paths_urls_or_options() {
    if !api_server_or_skip() {
        return;
    }
    apply_test_crds();
    let namespace = TestNamespace::create("admission-plan");
    let ns = namespace.name.as_str();
    create(ns, &plan("valid", |_| {})).expect("a valid BackupPlan is accepted");

    let cases: [Case; 7] = [
        ("exclude", "spec.volumes[0].excludes[0]", |p| {
            p["spec"]["volumes"][0]["excludes"] = json!(["../../etc"])
        }),
        ("claim", "spec.volumes[0].claimName", |p| {
            p["spec"]["volumes"][0]["claimName"] = json!("../data")
        }),
        ("url", "no '.' or '..' segment", |p| {
            p["spec"]["repository"]["url"] = json!("https://gate.example.com/team-a/../team-b")
        }),
        ("encoded", "no '.' or '..' segment", |p| {
            p["spec"]["repository"]["url"] = json!("https://gate.example.com/team-a/%2e%2E/team-b")
        }),
        ("user", "no '.' or '..' segment", |p| {
            p["spec"]["repository"]["url"] = json!("https://team-a@gate.example.com/x")
        }),
        ("host", "spec.databases[0].host", |p| {
            p["spec"]["databases"][0]["host"] = json!("postgres?sslmode=disable")
        }),
        ("secret", "spec.repository.passwordSecretRef.name", |p| {
            p["spec"]["repository"]["passwordSecretRef"]["name"] = json!("../token")
        }),
    ];
    for (name, field, patch) in cases {
        assert_refused(create(ns, &plan(name, patch)), field, name);
    }
}

#[test]
fn the_api_server_refuses_a_malformed_size_or_tag_file_with_the_field_and_the_rule() {
    if !api_server_or_skip() {
        return;
    }
    apply_test_crds();
    let namespace = TestNamespace::create("admission-selection");
    let ns = namespace.name.as_str();
    create(
        ns,
        &plan("selection", |p| {
            let volume = &mut p["spec"]["volumes"][0];
            volume["excludeCaches"] = json!(true);
            volume["excludeIfPresent"] =
                json!([".nobackup", "CACHEDIR.TAG:Signature: 8a47", "..."]);
            volume["excludeLargerThan"] = json!("500M");
        }),
    )
    .expect("a plan with valid selection options is accepted");
    let tag_rule = "each entry is FILE or FILE:HEADER";
    let size_rule = "digits, then optionally b, k, m, g or t";
    let cases: [(&str, Value, &str); 6] = [
        (
            "empty",
            json!({"excludeIfPresent": [""]}),
            "spec.volumes[0].excludeIfPresent",
        ),
        (
            "no-name",
            json!({"excludeIfPresent": [":header"]}),
            tag_rule,
        ),
        (
            "path",
            json!({"excludeIfPresent": ["a/.nobackup"]}),
            tag_rule,
        ),
        ("dotdot", json!({"excludeIfPresent": [".."]}), tag_rule),
        ("fraction", json!({"excludeLargerThan": "1.5G"}), size_rule),
        (
            "binary",
            json!({"excludeLargerThan": "1Gi"}),
            "spec.volumes[0].excludeLargerThan",
        ),
    ];
    for (name, fields, expected) in cases {
        let result = create(
            ns,
            &plan(name, |p| {
                for (key, value) in fields.as_object().unwrap() {
                    p["spec"]["volumes"][0][key] = value.clone();
                }
            }),
        );
        assert_refused(result, expected, name);
    }
}

// --- The operator's own checks, on objects the API server already stores --------------------

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{EnvVar, PersistentVolumeClaim};
use neverwiped_operator::admission::SERVICE_ACCOUNT_TOKEN_TYPE;
use neverwiped_operator::api::{BackupPlan, Restore};
use neverwiped_operator::conditions::{find_condition, types, Reason};
use neverwiped_operator::controller::backup_plan::{self, ObservedPlan};
use neverwiped_operator::controller::restore::{self as restore_controller, ObservedRestore};
use neverwiped_operator::controller::Settings;
use neverwiped_operator::expansion::expand;
use neverwiped_operator::job::{backup_job, BackupRun, BackupVolumeMount};

fn stored<K: serde::de::DeserializeOwned>(mut object: Value) -> K {
    object["apiVersion"] = json!("neverwiped.io/v1alpha1");
    let kind = object["kind"]
        .as_str()
        .unwrap()
        .trim_start_matches(TEST_PREFIX)
        .to_owned();
    object["kind"] = json!(kind);
    object["metadata"]["namespace"] = json!("shop");
    object["metadata"]["uid"] = json!("0b6d1c1e-0000-4000-8000-000000000009");
    object["metadata"]["generation"] = json!(1);
    serde_json::from_value(object).expect("a stored object")
}

fn stored_plan() -> BackupPlan {
    stored(plan("nightly", |_| {}))
}

fn secret_keys(names: &[&str]) -> neverwiped_operator::plan::SecretKeys {
    names
        .iter()
        .map(|name| {
            let keys = ["password", "username"].map(String::from).into();
            (name.to_string(), keys)
        })
        .collect()
}

fn claim(name: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "shop"}})).unwrap()
}

fn ready_reason(
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
) -> String {
    let ready = find_condition(conditions, types::READY).expect("a Ready condition");
    assert_eq!(ready.status, "False", "{ready:?}");
    ready.reason.clone()
}

#[test]
fn the_operator_refuses_a_stored_restore_whose_source_claim_name_walks_out_of_its_directory() {
    let traversal = json!({"sourceClaimName": "../../usr/lib/postgresql/18/bin",
                           "targetClaimName": "data-restored"});
    let restore: Restore = stored(restore("traversal", traversal));
    let observed = ObservedRestore {
        plan: Some(stored_plan()),
        secrets: secret_keys(&["repo", "orders-db"]),
        claims: [("data-restored".to_owned(), claim("data-restored"))].into(),
        ..ObservedRestore::default()
    };
    let settings = Settings::with_image("sidecar:test");
    let decision = restore_controller::decide(&restore, &observed, Timestamp::now(), &settings);
    assert!(decision.create_job.is_none(), "no Job for a traversal");
    assert_eq!(
        ready_reason(&decision.status.conditions),
        Reason::InvalidName.as_str()
    );
    let event = &decision.events[0];
    assert_eq!(event.reason, Reason::InvalidName);
    assert!(
        event.note.contains("spec.volumes[0].sourceClaimName"),
        "{}",
        event.note
    );
    // Not a crash loop: it waits for a change (or the periodic recheck), like every bad spec.
    assert_eq!(decision.requeue_after, Some(settings.not_ready_recheck));
}

#[test]
fn a_plan_naming_a_service_account_token_as_its_password_is_refused_with_a_condition() {
    let plan = stored_plan();
    let mut observed = ObservedPlan {
        secrets: secret_keys(&["repo", "orders-db"]),
        claims: vec![claim("data")],
        ..ObservedPlan::default()
    };
    observed.secret_types = [
        ("repo".to_owned(), SERVICE_ACCOUNT_TOKEN_TYPE.to_owned()),
        (
            "orders-db".to_owned(),
            "kubernetes.io/basic-auth".to_owned(),
        ),
    ]
    .into();
    let settings = Settings::with_image("sidecar:test");
    let decision = backup_plan::decide(&plan, &observed, Timestamp::now(), &settings);
    assert!(decision.create.is_none());
    assert_eq!(
        ready_reason(&decision.status.conditions),
        Reason::SecretTypeNotAllowed.as_str()
    );
    let message = &find_condition(&decision.status.conditions, types::READY)
        .unwrap()
        .message;
    assert!(
        message.contains("\"repo\" named by spec.repository.passwordSecretRef"),
        "{message}"
    );
}

#[test]
fn a_plan_outside_the_clusters_policy_is_refused_with_a_condition() {
    let mut plan = stored_plan();
    plan.spec.repository.url = "https://elsewhere.example/shop".into();
    let observed = ObservedPlan {
        secrets: secret_keys(&["repo", "orders-db"]),
        claims: vec![claim("data")],
        ..ObservedPlan::default()
    };
    let mut settings = Settings::with_image("sidecar:test");
    settings.tenant_policy = neverwiped_operator::tenant_policy::TenantPolicy::from_json(
        r#"{"allowedRepositoryPrefixes": ["https://gate.example.com/"]}"#,
    )
    .unwrap();
    let decision = backup_plan::decide(&plan, &observed, Timestamp::now(), &settings);
    assert_eq!(
        ready_reason(&decision.status.conditions),
        Reason::RepositoryNotAllowed.as_str()
    );
}

/// What the sidecar's arguments are once Kubernetes expanded them with the pod's environment
/// (variables from Secrets stand for a secret value).
fn expanded_args(job: &k8s_openapi::api::batch::v1::Job) -> Vec<String> {
    let container = &job
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0];
    let env: &[EnvVar] = container.env.as_deref().unwrap_or_default();
    let lookup = |name: &str| {
        env.iter().find(|e| e.name == name).map(|e| match &e.value {
            Some(value) => value.clone(),
            None => "SECRET-VALUE".to_owned(),
        })
    };
    let args = container.args.as_deref().unwrap_or_default();
    args.iter().map(|arg| expand(arg, &lookup)).collect()
}

#[test]
fn an_exclude_naming_a_variable_reaches_the_sidecar_literally() {
    let mut plan = stored_plan();
    plan.metadata.name = Some("nightly".into());
    plan.spec.repository.credentials_secret_ref =
        Some(neverwiped_operator::api::CredentialsSecretRef::new("gate"));
    plan.spec.repository.url = "https://gate.example.com/$(NEVERWIPED_GATE_USERNAME)".into();
    let run = BackupRun {
        hooks_in_pod: true,
        trigger: neverwiped_operator::api::RunTrigger::Manual,
        scheduled_time: None,
        manual_trigger: Some("1".into()),
        volumes: vec![BackupVolumeMount {
            source_claim: "data".into(),
            mounted_claim: "data".into(),
            excludes: vec![
                "$(NEVERWIPED_PASSWORD_FILE)".into(),
                "/$(NEVERWIPED_GATE_USERNAME)".into(),
            ],
            selection: Default::default(),
            claim: Some(
                serde_json::from_value(serde_json::json!({
                    "metadata": {
                        "name": "data",
                        "annotations": {"example.com/owner": "$(NEVERWIPED_GATE_USERNAME)"},
                        "labels": {"app": "$$(x)"}
                    }
                }))
                .unwrap(),
            ),
        }],
        node_name: None,
        deadline: jiff::SignedDuration::from_hours(1),
        remove_stale_locks: false,
        mover: Default::default(),
    };
    let settings = Settings::with_image("sidecar:test");
    let job = backup_job(&plan, &run, &settings.job);
    let container = &job
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0];
    let args = container.args.as_deref().unwrap();
    assert!(
        args.contains(&"/data/data/**/$$(NEVERWIPED_PASSWORD_FILE)".to_owned()),
        "{args:?}"
    );
    let expanded = expanded_args(&job);
    let after = |flag: &str| -> Vec<&str> {
        expanded
            .windows(2)
            .filter(|w| w[0] == flag)
            .map(|w| w[1].as_str())
            .collect()
    };
    assert_eq!(
        after("--exclude"),
        [
            "/data/data/**/$(NEVERWIPED_PASSWORD_FILE)",
            "/data/data/$(NEVERWIPED_GATE_USERNAME)"
        ]
    );
    assert!(
        expanded.contains(&"rest:https://gate.example.com/$(NEVERWIPED_GATE_USERNAME)".to_owned()),
        "{expanded:?}"
    );
    // The user names of databases still come from their Secrets.
    let database = after("--database");
    assert_eq!(
        database,
        ["orders=postgresql://SECRET-VALUE@postgres.shop.svc:5432/shop$eu"]
    );
    assert!(!expanded
        .iter()
        .any(|arg| arg.contains("/var/run/neverwiped/repository")));
    // The claim's record too: the snapshot records the annotation, not the gate's user name.
    let claim: serde_json::Value = serde_json::from_str(after("--claim")[0]).unwrap();
    assert_eq!(
        claim["annotations"]["example.com/owner"],
        "$(NEVERWIPED_GATE_USERNAME)"
    );
    assert_eq!(claim["labels"]["app"], "$$(x)");
}

// --- A hostile gate: the Restore shows which point in time it brought back -------------------

#[test]
fn a_restore_shows_the_id_and_time_of_the_snapshot_it_used() {
    use neverwiped_contract::{ExitStatus, Operation, RunResult};
    use neverwiped_operator::api::{RestorePhase, RestoreStatus, RunOutcome};
    use neverwiped_operator::status::{finish_restore, JobEnd};

    let written = RunResult {
        snapshot_id: Some("5f0c3e9a".repeat(8)),
        snapshot_time: Some("2026-11-28T02:30:04Z".into()),
        ..support::run_result(Operation::Restore, ExitStatus::Success)
    };
    // Through the termination message, as the operator reads it.
    let result = RunResult::from_json(&written.to_termination_message()).unwrap();
    let end = JobEnd {
        outcome: RunOutcome::Succeeded,
        reason: Reason::Succeeded,
        message: None,
        result: Some(result),
        start_time: None,
        completion_time: None,
    };
    let mut status = RestoreStatus::default();
    finish_restore(&mut status, &end, Timestamp::now());
    assert_eq!(status.phase, Some(RestorePhase::Succeeded));
    assert_eq!(status.snapshot_id, written.snapshot_id);
    let taken = status.snapshot_time.expect("the snapshot's time").0;
    assert_eq!(taken, "2026-11-28T02:30:04Z".parse::<Timestamp>().unwrap());

    // An older sidecar's result has no time: the status has none, and nothing else changes.
    let old = r#"{"version":1,"operation":"restore","status":"success","snapshotId":"ab12cd34",
        "startedAt":"2026-11-30T01:00:00Z","finishedAt":"2026-11-30T01:00:05Z","durationSecs":5.0,
        "files":1,"bytesRead":1,"bytesAdded":0,"bytesTransferred":1}"#;
    let result = RunResult::from_json(old).expect("a result without snapshotTime still parses");
    let mut status = RestoreStatus::default();
    finish_restore(
        &mut status,
        &JobEnd {
            result: Some(result),
            ..end
        },
        Timestamp::now(),
    );
    assert_eq!(status.snapshot_time, None);
    assert_eq!(status.snapshot_id.as_deref(), Some("ab12cd34"));
}

// --- The operator binary against the real API server ----------------------------------------

#[tokio::test]
async fn the_operator_refuses_a_plan_that_names_a_service_account_token_as_its_password() {
    if !api_server_or_skip() {
        return;
    }
    support::apply_crds();
    let namespace = TestNamespace::create("sa-token");
    let ns = namespace.name.as_str();
    let token_secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "reader-token",
                     "annotations": {"kubernetes.io/service-account.name": "reader"}},
        "type": SERVICE_ACCOUNT_TOKEN_TYPE,
        "data": {"token": "dG9rZW4="}
    });
    let db_login = json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "orders-db"},
        "type": "kubernetes.io/basic-auth",
        "stringData": {"username": "backup", "password": "not-a-token"}
    });
    for object in [
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader"}}),
        token_secret,
        db_login,
    ] {
        create(ns, &object).expect("the test's objects are created");
    }
    let mut plan = plan("nightly", |p| {
        p["spec"]["repository"]["passwordSecretRef"] =
            json!({"name": "reader-token", "key": "token"});
        p["spec"]["volumes"] = json!([]);
    });
    plan["apiVersion"] = json!("neverwiped.io/v1alpha1");
    plan["kind"] = json!("BackupPlan");
    let mut operator = support::Operator::start(ns);
    create(ns, &plan).expect("the plan is accepted by the API server");

    let ready = support::eventually("Ready=False", support::ACT_TIMEOUT, || async {
        let plan =
            support::kubectl_json(&["get", "backupplans.neverwiped.io", "nightly", "-n", ns]);
        let conditions = plan["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        conditions
            .into_iter()
            .find(|c| c["type"] == "Ready" && c["status"] == "False")
    })
    .await;
    assert_eq!(
        ready["reason"],
        Reason::SecretTypeNotAllowed.as_str(),
        "{ready}"
    );
    let message = ready["message"].as_str().unwrap();
    assert!(
        message.starts_with("Secret \"reader-token\" named by spec.repository.passwordSecretRef is of type kubernetes.io/service-account-token"),
        "{message}"
    );
    let jobs = support::kubectl(&["get", "jobs", "-n", ns, "-o", "name"]);
    assert_eq!(jobs.trim(), "", "no Job is made");
    assert!(operator.is_running(), "{}", operator.logs());
}
