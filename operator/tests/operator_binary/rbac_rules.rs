//! Each rule of the chart's operator ClusterRole and leader Role is needed: with one verb of one
//! rule taken away, the operator running the example plan and the example Restore is refused that
//! verb on that resource by the API server (its log carries the 403), or the verb is in
//! [`NOT_SHOWN_HERE`] with the operation that needs it, which this scenario does not reach. No
//! rule grants `*`.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::{apply, create_example_world, example, example_plan};
use crate::support::identity::{default_rbac, for_namespace, grant};
use crate::support::{
    api_server_or_skip, apply_crds, client, create_basic_auth_secret, kubectl, kubectl_output,
    Operator, TestNamespace,
};

/// One verb on one resource, as a rule grants it.
#[derive(Clone, Debug, PartialEq)]
struct Permission {
    kind: String,
    group: String,
    resource: String,
    verb: String,
}

/// Verbs the scenario (the example plan's run, the example Restore, deleting the plan) does not
/// use, with the operation that does.
const NOT_SHOWN_HERE: &[(&str, &str)] = &[
    (
        "backupplans/finalizers/update",
        "owner references that block deletion, checked only by OwnerReferencesPermissionEnforcement, which the test API server does not run",
    ),
    ("restores/finalizers/update", "as backupplans/finalizers"),
    ("persistentvolumeclaims/delete", "removing snapshot clones"),
    ("events/patch", "a repeated Event's series"),
    ("volumesnapshots/create", "copyMethod Snapshot"),
    ("volumesnapshots/delete", "removing a run's snapshot"),
    (
        "secrets/create",
        "a protected plan's password copy, in the operator's namespace only (the Role `-maintenance`): maintenance::protected",
    ),
    (
        "secrets/delete",
        "removing a finished protected prune's password copy: maintenance::protected",
    ),
];

/// The verb shown by deleting the plan once its Job exists.
const DELETING_THE_PLAN: &str = "jobs/delete";

/// How long one operator is given to be refused.
const REFUSAL_DEADLINE: Duration = Duration::from_secs(25);

/// How many operators run at once.
const AT_ONCE: usize = 6;

fn permissions(rbac: &[Value]) -> Vec<Permission> {
    let mut all = Vec::new();
    for object in rbac
        .iter()
        .filter(|object| object["kind"] == "ClusterRole" || object["kind"] == "Role")
    {
        for rule in object["rules"].as_array().expect("rules") {
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    for verb in strings(&rule["verbs"]) {
                        all.push(Permission {
                            kind: object["kind"].as_str().unwrap().to_owned(),
                            group: group.clone(),
                            resource: resource.clone(),
                            verb,
                        });
                    }
                }
            }
        }
    }
    all
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .expect("a list")
        .iter()
        .map(|item| item.as_str().expect("a string").to_owned())
        .collect()
}

/// `rbac` without `taken`: the verb goes from its rule (and the rule, when it was the last).
fn without(rbac: &[Value], taken: &Permission) -> Vec<Value> {
    let mut rbac = rbac.to_vec();
    for object in rbac.iter_mut().filter(|o| o["kind"] == taken.kind.as_str()) {
        let rules = object["rules"].as_array().cloned().expect("rules");
        let mut kept = Vec::new();
        for rule in rules {
            let matches = strings(&rule["apiGroups"]).contains(&taken.group)
                && strings(&rule["resources"]).contains(&taken.resource)
                && strings(&rule["verbs"]).contains(&taken.verb);
            if !matches {
                kept.push(rule);
                continue;
            }
            // The other resources of the rule keep the verb; this one keeps the other verbs.
            let others: Vec<String> = strings(&rule["resources"])
                .into_iter()
                .filter(|r| *r != taken.resource)
                .collect();
            if !others.is_empty() {
                let mut rest = rule.clone();
                rest["resources"] = others.into();
                kept.push(rest);
            }
            let verbs: Vec<String> = strings(&rule["verbs"])
                .into_iter()
                .filter(|v| *v != taken.verb)
                .collect();
            if !verbs.is_empty() {
                let mut narrowed = rule.clone();
                narrowed["resources"] = vec![taken.resource.clone()].into();
                narrowed["verbs"] = verbs.into();
                kept.push(narrowed);
            }
        }
        object["rules"] = kept.into();
    }
    rbac
}

/// Whether a log line is the API server refusing `permission` (its Forbidden message, quoted
/// plainly or inside a debug string).
fn refused(line: &str, permission: &Permission) -> bool {
    let said = format!("cannot {} resource ", permission.verb);
    line.match_indices(&said).any(|(at, _)| {
        let rest = &line[at + said.len()..];
        let resource: String = rest
            .trim_start_matches(['\\', '"'])
            .chars()
            .take_while(|c| *c != '\\' && *c != '"')
            .collect();
        resource == permission.resource
    })
}

/// Runs the example plan with `permission` taken away; whether the operator was refused it.
fn refused_without(rbac: &[Value], permission: &Permission) -> bool {
    let namespace = TestNamespace::create("rule");
    let ns = namespace.name.as_str();
    let rbac = without(&for_namespace(rbac, ns), permission);
    let kubeconfig = grant(&rbac).expect("a user");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async { create_example_world(&client().await, ns).await });
    create_basic_auth_secret(ns, "pg-admin", "postgres", "admin-pw-55");
    let operator = Operator::start_as(&kubeconfig, ns, "operator", &[]);
    apply(&example_plan(ns));
    apply(&example_restore(ns));
    let mut plan_deleted =
        format!("{}/{}", permission.resource, permission.verb) != DELETING_THE_PLAN;
    let deadline = Instant::now() + REFUSAL_DEADLINE;
    loop {
        if operator
            .logs()
            .lines()
            .any(|line| refused(line, permission))
        {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        if !plan_deleted && job_exists(ns, "nightly-manual-1") {
            kubectl(&["delete", "backupplan", "nightly", "-n", ns, "--wait=false"]);
            plan_deleted = true;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The example Restore in `namespace`, requested by the admin (whom the operator's
/// SubjectAccessReview finds allowed everything).
fn example_restore(namespace: &str) -> Value {
    let mut restore = example("restore.yaml", namespace);
    restore["metadata"]["annotations"] = serde_json::json!({
        "neverwiped.io/requested-by": "admin",
        "neverwiped.io/requested-by-groups": "system:masters",
    });
    restore
}

fn job_exists(namespace: &str, name: &str) -> bool {
    let output = kubectl_output(&["get", "job", name, "-n", namespace, "-o", "name"], None);
    output.status.success()
}

#[test]
fn each_verb_of_the_operators_rules_is_needed_by_a_named_operation() {
    if !api_server_or_skip() {
        return;
    }
    apply_crds();
    let Some(rbac) = default_rbac() else {
        return;
    };
    let all = permissions(rbac);
    let exempt = |permission: &Permission| {
        let name = format!("{}/{}", permission.resource, permission.verb);
        NOT_SHOWN_HERE.iter().any(|(listed, _)| *listed == name)
    };
    let shown: Vec<Permission> = all.iter().filter(|p| !exempt(p)).cloned().collect();
    let started = Instant::now();
    let mut not_refused = Vec::new();
    for batch in shown.chunks(AT_ONCE) {
        let results: Vec<(Permission, bool)> = std::thread::scope(|scope| {
            let runs: Vec<_> = batch
                .iter()
                .map(|permission| {
                    scope.spawn(move || (permission.clone(), refused_without(rbac, permission)))
                })
                .collect();
            runs.into_iter()
                .map(|run| run.join().expect("a run"))
                .collect()
        });
        for (permission, was_refused) in results {
            let said = if was_refused {
                "refused"
            } else {
                "NOT refused"
            };
            eprintln!(
                "without {}/{} {}: {said}",
                permission.resource, permission.verb, permission.kind
            );
            if !was_refused {
                not_refused.push(permission);
            }
        }
    }
    eprintln!(
        "{} of {} permissions checked in {:.0?}",
        shown.len(),
        all.len(),
        started.elapsed()
    );
    for permission in &all {
        assert!(
            permission.verb != "*" && permission.resource != "*" && permission.group != "*",
            "a rule wider than needed: {permission:?}"
        );
    }
    assert!(
        not_refused.is_empty(),
        "without these the operator ran the example plan unrefused: {not_refused:#?}"
    );
}
