//! Each rule of the chart's operator ClusterRole and leader Role is needed: with one verb of one
//! rule taken away, the operator running the example plan and the example Restore is refused that
//! verb on that resource by the API server (its log carries the 403), or the verb is in
//! [`NOT_SHOWN_HERE`] with the operation that needs it, which this scenario does not reach: a
//! `copyMethod: Snapshot` run and a repeated Event show four of those in tests of their own. No
//! rule grants `*`.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::{apply, create_example_world, example, example_plan};
use crate::support::identity::{default_rbac, for_namespace, grant};
use crate::support::{
    api_server_or_skip, apply_crds, client, create_basic_auth_secret, create_secret, csi,
    finish_job, kubectl, kubectl_output, run_result, Ending, Operator, TestNamespace,
};
use kube::Api;
use neverwiped_contract::{ExitStatus, Operation};
use neverwiped_operator::csi::VolumeSnapshot;

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
        "persistentvolumeclaims/delete",
        "removing a run's snapshot clones: shown by each_verb_only_a_snapshot_run_uses_is_needed",
    ),
    (
        "events/patch",
        "a repeated Event's series: shown by without_patching_events_a_repeated_event_is_refused",
    ),
    ("volumesnapshots/create", "copyMethod Snapshot: as above"),
    ("volumesnapshots/delete", "removing a run's snapshot: as above"),
    (
        "secrets/create",
        "a protected plan's password copy, in the operator's namespace only (the Role `-maintenance`): maintenance::protected",
    ),
    (
        "secrets/delete",
        "removing a finished protected prune's password copy: maintenance::protected",
    ),
    (
        "resourcequotas/list",
        "createClaims: FromSnapshot's quota check: the Restores of restore_from_snapshot, whose \
         operator runs under the chart's rules",
    ),
];

/// The verbs only a `copyMethod: Snapshot` run uses.
const SNAPSHOT_RUN: &[&str] = &[
    "volumesnapshots/create",
    "volumesnapshots/delete",
    "persistentvolumeclaims/delete",
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

/// The chart's rendered RBAC objects, once the API server and the CRDs are there; `None` (after
/// a recorded skip) otherwise.
fn chart_rules() -> Option<&'static [Value]> {
    if !api_server_or_skip() {
        return None;
    }
    apply_crds();
    default_rbac()
}

fn job_exists(namespace: &str, name: &str) -> bool {
    let output = kubectl_output(&["get", "job", name, "-n", namespace, "-o", "name"], None);
    output.status.success()
}

#[test]
fn each_verb_of_the_operators_rules_is_needed_by_a_named_operation() {
    let Some(rbac) = chart_rules() else {
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

/// The plan's `Ready` condition status (`True`, `False`), or nothing yet.
fn plan_ready(namespace: &str) -> String {
    let jsonpath = r#"-o=jsonpath={.status.conditions[?(@.type=="Ready")].status}"#;
    let output = kubectl_output(
        &["get", "backupplan", "nightly", "-n", namespace, jsonpath],
        None,
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// Waits until `done` holds, or fails naming `what`.
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + REFUSAL_DEADLINE;
    while !done() {
        assert!(Instant::now() < deadline, "{what} did not happen in time");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// `events patch`: an identical Event within minutes is counted in the first one's series, by a
/// patch. The example plan whose repository Secret goes, comes back and goes again is told "not
/// ready" twice with the same note; without the verb the second telling is refused.
#[test]
fn without_patching_events_a_repeated_event_is_refused() {
    let Some(rbac) = chart_rules() else {
        return;
    };
    let patch_events = permissions(rbac)
        .into_iter()
        .find(|p| p.resource == "events" && p.verb == "patch")
        .expect("the chart grants events patch");
    let namespace = TestNamespace::create("series");
    let ns = namespace.name.as_str();
    let kubeconfig = grant(&without(&for_namespace(rbac, ns), &patch_events)).expect("a user");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async { create_example_world(&client().await, ns).await });
    let remove_password = || kubectl(&["delete", "secret", "shop-repository", "-n", ns]);
    remove_password();
    let operator = Operator::start_as(&kubeconfig, ns, "operator", &[]);
    apply(&example_plan(ns));
    wait_for("Ready=False without the password", || {
        plan_ready(ns) == "False"
    });
    create_secret(ns, "shop-repository", &[("password", "a password")]);
    wait_for("Ready=True with the password", || plan_ready(ns) == "True");
    assert!(
        !operator.logs().lines().any(|l| refused(l, &patch_events)),
        "no Event repeated yet, nothing patched"
    );
    remove_password();
    wait_for("the repeated Event's patch refused", || {
        operator.logs().lines().any(|l| refused(l, &patch_events))
    });
}

/// Runs a `copyMethod: Snapshot` plan's backup with `permission` taken away, playing the CSI
/// snapshot controller and the Job controller: the snapshot is cut, the clone's Job ends, and
/// the snapshot and clone are removed. Whether the operator was refused `permission`.
fn refused_in_a_snapshot_run(rbac: &[Value], permission: &Permission) -> bool {
    let namespace = TestNamespace::create("snaprule");
    let ns = namespace.name.as_str();
    let kubeconfig = grant(&without(&for_namespace(rbac, ns), permission)).expect("a user");
    let driver = csi::Driver::install(ns);
    csi::create_claim(ns, "uploads", Some(&driver.storage_class));
    create_secret(ns, "repository", &[("password", "pw")]);
    let operator = Operator::start_as(&kubeconfig, ns, "operator", &[]);
    apply(&csi::plan(ns, "nightly", "Snapshot", &["uploads"]));
    let (run, job) = ("nightly-manual-1-0", "nightly-manual-1");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let client = client().await;
        let snapshots: Api<VolumeSnapshot> = Api::namespaced(client.clone(), ns);
        let (mut cut, mut ended) = (false, false);
        let deadline = Instant::now() + REFUSAL_DEADLINE;
        loop {
            if operator.logs().lines().any(|l| refused(l, permission)) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            if !cut && matches!(snapshots.get_opt(run).await, Ok(Some(_))) {
                csi::snapshotter_makes_ready(&client, ns, run, "1Gi").await;
                cut = true;
            }
            if cut && !ended && job_exists(ns, job) {
                let result = Box::new(run_result(Operation::Backup, ExitStatus::Success));
                let ending = Ending::Result {
                    exit_code: 0,
                    result,
                };
                finish_job(&client, ns, job, ending).await;
                ended = true;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
}

#[test]
fn each_verb_only_a_snapshot_run_uses_is_needed() {
    let Some(rbac) = chart_rules() else {
        return;
    };
    csi::apply_snapshot_crds();
    let named = |p: &Permission| format!("{}/{}", p.resource, p.verb);
    let verbs: Vec<Permission> = permissions(rbac)
        .into_iter()
        .filter(|p| SNAPSHOT_RUN.contains(&named(p).as_str()))
        .collect();
    assert_eq!(verbs.len(), SNAPSHOT_RUN.len(), "the chart grants each");
    let not_refused: Vec<String> = std::thread::scope(|scope| {
        let runs: Vec<_> = verbs
            .iter()
            .map(|p| scope.spawn(move || (named(p), refused_in_a_snapshot_run(rbac, p))))
            .collect();
        runs.into_iter()
            .map(|run| run.join().expect("a run"))
            .filter(|(_, refused)| !refused)
            .map(|(name, _)| name)
            .collect()
    });
    assert!(
        not_refused.is_empty(),
        "without these the operator ran a snapshot backup unrefused: {not_refused:?}"
    );
}
