//! Maintenance credentials and the protection window, with the operator as the chart's
//! ServiceAccount in a namespace of its own, and the tenant as a real user with an edit-like Role in
//! its namespace only: a protected plan's prune Job runs in the operator's namespace with the
//! admin's login and a copy of the repository password, out of the tenant's reach; its backups
//! never forget; a plan outside the prefixes forgets with its own login and says so.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};
use kube::ResourceExt;
use neverwiped_contract::{ExitStatus, Operation, PruneStats};
use serde_json::{json, Value};

use super::PRUNE_WAIT;
use crate::support::tenant::{apply_as, kubectl_as, refused, tenant};
use crate::support::*;

const REPOSITORY_PASSWORD: &str = "tenant-repository-password-0c7d";
const ADMIN_LOGIN: (&str, &str) = ("gate-admin", "gate-admin-password-b81e");
const PREFIX: &str = "http://gate.example.test:8000/protected/";

fn plan(namespace: &str, name: &str, url: &str) -> Value {
    json!({
        "apiVersion": "neverwiped.io/v1alpha1",
        "kind": "BackupPlan",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedule": "0 3 * * *",
            "manualTrigger": "first",
            "repository": {
                "url": url,
                "passwordSecretRef": {"name": "repository", "key": "password"},
                "credentialsSecretRef": {"name": "gate-login"},
            },
            "databases": [{
                "name": "orders",
                "type": "postgresql",
                "host": "postgres.orders.svc",
                "credentialsSecretRef": {"name": "orders-db"},
            }],
            "retention": {"keepDaily": 7, "keepWeekly": 4},
            "maintenance": {
                "prune": {"schedule": "* * * * *"},
                "check": {"suspend": true},
            },
        },
    })
}

fn secret_names(namespace: &str) -> Vec<String> {
    let output = kubectl(&["get", "secrets", "-n", namespace, "-o", "name"]);
    let mut names: Vec<String> = output.lines().map(str::to_owned).collect();
    names.sort();
    names
}

fn volume_secrets(job: &Job) -> Vec<String> {
    let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let volumes = pod.volumes.as_ref().unwrap();
    let mut names: Vec<String> = volumes
        .iter()
        .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
        .collect();
    names.sort();
    names
}

fn has_pair(args: &[String], pair: [&str; 2]) -> bool {
    args.windows(2).any(|w| w == pair)
}

#[tokio::test]
async fn a_protected_plans_prune_runs_in_the_operators_namespace_out_of_the_tenants_reach() {
    let Some(TestWorld { namespace, client }) = test_world("protect").await else {
        return;
    };
    let ns = namespace.name.as_str();
    let own = TestNamespace::create("protect-op");
    let own_ns = own.name.as_str();
    create_secret(ns, "repository", &[("password", REPOSITORY_PASSWORD)]);
    create_basic_auth_secret(ns, "gate-login", "tenant", "tenant-gate-password-4d2a");
    create_basic_auth_secret(ns, "orders-db", "backup", "db-password-77c0");
    create_basic_auth_secret(own_ns, "gate-maintenance", ADMIN_LOGIN.0, ADMIN_LOGIN.1);
    let tenant_secrets = secret_names(ns);
    let values = json!({
        "credentials": [{"urlPrefix": PREFIX, "secretName": "gate-maintenance"}],
        "protectionWindow": {"default": "7d", "namespaces": {ns: "14d"}},
    });
    let maintenance = values.to_string();
    let _operator =
        Operator::start_as_chart(ns, own_ns, &[("NEVERWIPED_MAINTENANCE", &maintenance)]);
    let tenant = tenant(ns);
    // The tenant shortens its retention before the first prune; another plan points outside the
    // prefix (a look-alike path segment).
    let mut protected = plan(ns, "orders", &format!("{PREFIX}orders"));
    protected["spec"]["retention"] = json!({"keepLast": 1});
    let outside = plan(
        ns,
        "elsewhere",
        "http://gate.example.test:8000/protectedx/orders",
    );
    for object in [&protected, &outside] {
        apply_as(&tenant, object);
    }

    // Backups: the protected plan's never forgets; the other's forgets with its own login. Both
    // carry the admin's window for the namespace (the longest that applies).
    let backup = args_of(&job_created(&client, ns, "orders-manual-1").await);
    assert!(
        !backup.iter().any(|a| a.starts_with("--keep-")),
        "{backup:?}"
    );
    assert!(has_pair(&backup, ["--protect-within", "14d"]), "{backup:?}");
    let other = args_of(&job_created(&client, ns, "elsewhere-manual-1").await);
    assert!(has_pair(&other, ["--keep-daily", "7"]), "{other:?}");
    assert!(has_pair(&other, ["--protect-within", "14d"]), "{other:?}");
    for name in ["orders-manual-1", "elsewhere-manual-1"] {
        let result = Box::new(run_result(Operation::Backup, ExitStatus::Success));
        let ending = Ending::Result {
            exit_code: 0,
            result,
        };
        finish_job(&client, ns, name, ending).await;
    }

    // The protected prune: in the operator's namespace, the admin's login and a copy of the
    // password mounted, the tenant's keep rules and the admin's window.
    let own_jobs: Api<Job> = Api::namespaced(client.clone(), own_ns);
    let by_plan = format!("neverwiped.io/plan=orders,neverwiped.io/plan-namespace={ns}");
    let prune = eventually("the protected prune Job", PRUNE_WAIT, || async {
        let list = own_jobs.list(&ListParams::default().labels(&by_plan)).await;
        list.ok()?.items.into_iter().next()
    })
    .await;
    let prune_name = prune.name_any();
    let args = args_of(&prune);
    assert_eq!(args[0], "prune");
    for pair in [
        ["--keep-last", "1"],
        ["--protect-within", "14d"],
        ["--host", &format!("{ns}/orders")],
    ] {
        assert!(has_pair(&args, pair), "{pair:?} in {args:?}");
    }
    let copy_name = format!("{prune_name}-repository");
    assert_eq!(
        volume_secrets(&prune),
        {
            let mut names = vec![copy_name.clone(), "gate-maintenance".to_owned()];
            names.sort();
            names
        },
        "the prune mounts the admin's login and the copy, nothing of the tenant's"
    );
    assert!(prune.metadata.owner_references.is_none());
    let copies: Api<Secret> = Api::namespaced(client.clone(), own_ns);
    let copy = eventually("the password copy", ACT_TIMEOUT, || async {
        copies.get_opt(&copy_name).await.ok().flatten()
    })
    .await;
    let data = copy.data.clone().unwrap();
    assert_eq!(data["password"].0, REPOSITORY_PASSWORD.as_bytes());
    let owner = &copy.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Job", prune.uid().unwrap().as_str())
    );
    assert_eq!(
        secret_names(ns),
        tenant_secrets,
        "no copy in the tenant's namespace"
    );
    // The chart lets the operator write Secrets in its own namespace only.
    let account = format!("system:serviceaccount:{own_ns}:op");
    let may = |verb: &str, namespace: &str| {
        let args = [
            "auth", "can-i", verb, "secrets", "-n", namespace, "--as", &account,
        ];
        String::from_utf8_lossy(&kubectl_output(&args, None).stdout).trim() == "yes"
    };
    assert!(may("create", own_ns) && may("delete", own_ns));
    assert!(!may("create", ns) && !may("delete", ns) && !may("update", ns));
    assert!(job_names(
        &client,
        ns,
        "neverwiped.io/plan=orders,neverwiped.io/operation=prune"
    )
    .await
    .is_empty());

    // The plan outside the prefix prunes in its namespace with its own login, and says so.
    let outside_prune = eventually("the unprotected prune", PRUNE_WAIT, || async {
        let names = job_names(
            &client,
            ns,
            "neverwiped.io/plan=elsewhere,neverwiped.io/operation=prune",
        )
        .await;
        names.into_iter().next()
    })
    .await;
    let outside_args = args_of(&job_created(&client, ns, &outside_prune).await);
    assert!(
        has_pair(&outside_args, ["--protect-within", "14d"]),
        "{outside_args:?}"
    );
    assert!(
        !outside_args.iter().any(|a| a.starts_with("--keep-")),
        "{outside_args:?}"
    );
    let ready = |name: &str| {
        let status = kubectl_json(&["get", "backupplan", name, "-n", ns])["status"].clone();
        let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
        conditions.into_iter().find(|c| c["type"] == "Ready")
    };
    let unprotected = ready("elsewhere").expect("a Ready condition");
    assert_eq!(
        (&unprotected["status"], &unprotected["reason"]),
        (&json!("True"), &json!("BackupLoginCanDeleteHistory")),
        "{unprotected}"
    );
    assert_eq!(
        ready("orders").expect("a Ready condition")["reason"],
        "Ready"
    );
    let events: Vec<String> = kubectl_json(&["get", "events", "-n", ns])["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|event| event["reason"] == "BackupLoginCanDeleteHistory")
        .map(|event| {
            event["involvedObject"]["name"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    assert_eq!(events, ["elsewhere"], "one Event, for the unprotected plan");

    // The tenant, with every right in its namespace, reaches nothing of the prune.
    let pod = format!("{prune_name}-x7k2p");
    for args in [
        vec!["get", "jobs", "-n", own_ns],
        vec!["get", "job", &prune_name, "-n", own_ns],
        vec!["delete", "job", &prune_name, "-n", own_ns],
        vec![
            "patch",
            "job",
            &prune_name,
            "-n",
            own_ns,
            "--type=merge",
            "-p",
            r#"{"metadata":{"labels":{"x":"y"}}}"#,
        ],
        vec!["get", "secret", &copy_name, "-n", own_ns],
        vec!["get", "secrets", "-n", own_ns],
        vec!["delete", "secret", &copy_name, "-n", own_ns],
        vec!["get", "secret", "gate-maintenance", "-n", own_ns],
        vec!["get", "pods", "-n", own_ns],
        vec![
            "exec",
            &pod,
            "-n",
            own_ns,
            "--",
            "cat",
            "/var/run/neverwiped/gate/password",
        ],
    ] {
        refused(&tenant, &args);
    }
    // ... while its own namespace is open to it (the refusals are not a broken login).
    assert!(
        kubectl_as(&tenant, &["get", "secret", "repository", "-n", ns])
            .status
            .success()
    );

    // The prune's result shows on the plan.
    let mut pruned = run_result(Operation::Prune, ExitStatus::Success);
    pruned.snapshot_id = None;
    pruned.prune = Some(PruneStats {
        bytes_freed: 1_000,
        bytes_kept: 9_000,
        packs_deleted: 1,
    });
    let ending = Ending::Result {
        exit_code: 0,
        result: Box::new(pruned),
    };
    finish_job(&client, own_ns, &prune_name, ending).await;
    eventually("the prune recorded on the plan", ACT_TIMEOUT, || async {
        let status = kubectl_json(&["get", "backupplan", "orders", "-n", ns])["status"].clone();
        (status["prune"]["lastRun"]["jobName"] == json!(prune_name)
            && status["prune"]["lastRun"]["result"] == "Succeeded")
            .then_some(())
    })
    .await;

    // The tenant deletes its plan: the Job and the copy go with it.
    assert!(kubectl_as(
        &tenant,
        &["delete", "backupplan", "orders", "-n", ns, "--wait=false"]
    )
    .status
    .success());
    eventually(
        "the prune Job and its copy deleted",
        ACT_TIMEOUT,
        || async {
            let job = own_jobs.get_opt(&prune_name).await.ok()?;
            let copy = copies.get_opt(&copy_name).await.ok()?;
            (job.is_none() && copy.is_none()).then_some(())
        },
    )
    .await;
}
