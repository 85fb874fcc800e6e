//! Retention at a copy destination, as the operator binary (the chart's ServiceAccount, in a
//! namespace of its own with the admin's maintenance login for the destination's gate) sees it
//! from the sidecar's results; the tenant is a real user with an edit-like Role in its namespace.
//! Emulated: the Jobs' pods (the test plays the Job controller and the kubelet). Real: the API
//! server, the CRD's validation, RBAC, the operator's Jobs, Secrets, status, Events and metrics.
//!
//! The plan copies to `offsite` (with retention, its URL under the admin's prefix) and `archive`
//! (without). Four usual nights and one that rewrites every file flag `SuspiciousChange`; then
//! the tenant turns prunes on. The offsite prune runs in the operator's namespace with the
//! admin's login and a copy of the offsite password, without keep rules while the flag waits;
//! its result lands on `status.copies`; the admin acknowledges the night while it runs, and the
//! next prune forgets by the destination's rules. `archive` never gets a prune Job.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::ResourceExt;
use neverwiped_contract::{ExitStatus, Operation, PruneStats, RunResult};
use serde_json::json;

use super::suspicious_change::night_result;
use super::*;
use crate::support::tenant::{apply_as, kubectl_as, patch_plan_as, tenant};

const OFFSITE_PASSWORD: &str = "offsite password 6b1e";
const ADMIN_LOGIN: (&str, &str) = ("offsite-admin", "offsite-admin-password-93c4");
const PREFIX: &str = "http://offsite.example.test:8000/protected/";
/// Prunes every minute: the test waits for at most one.
const PRUNE_WAIT: Duration = Duration::from_secs(90);

fn plan(namespace: &str) -> Value {
    tenant_plan(
        namespace,
        json!({
            "copies": [
                {
                    "name": "offsite",
                    "repository": {
                        "url": format!("{PREFIX}shop"),
                        "passwordSecretRef": {"name": "offsite-repository", "key": "password"},
                        "credentialsSecretRef": {"name": "offsite-login"},
                    },
                    "retention": {"keepDaily": 14, "keepMonthly": 12},
                },
                {
                    "name": "archive",
                    "repository": {
                        "url": "http://archive.example.test:8000/shop",
                        "passwordSecretRef": {"name": "offsite-repository", "key": "password"},
                    },
                },
            ],
            "maintenance": {
                "prune": {"schedule": "* * * * *", "suspend": true},
                "check": {"suspend": true},
            },
        }),
    )
}

/// Runs night `night` (the tenant sets the manual trigger after the first) to its result.
async fn night(client: &Client, tenant: &std::path::Path, ns: &str, night: u32, result: RunResult) {
    if night > 1 {
        let patch = json!({"spec": {"manualTrigger": night.to_string()}});
        patch_plan_as(tenant, ns, "nightly", &patch);
    }
    let job = format!("nightly-manual-{night}");
    job_created(client, ns, &job).await;
    let ending = Ending::Result {
        exit_code: 0,
        result: Box::new(result),
    };
    finish_job(client, ns, &job, ending).await;
    run_recorded(ns, "nightly", &job).await;
}

fn has_pair(args: &[String], pair: [&str; 2]) -> bool {
    args.windows(2).any(|w| w == pair)
}

fn keep_flags(job: &Job) -> Vec<String> {
    args_of(job)
        .into_iter()
        .filter(|arg| arg.starts_with("--keep-"))
        .collect()
}

/// The offsite prune Jobs in the operator's namespace, by name.
async fn offsite_prunes(jobs: &Api<Job>, ns: &str) -> Vec<Job> {
    let labels = format!(
        "neverwiped.io/plan=nightly,neverwiped.io/plan-namespace={ns},neverwiped.io/copy=offsite"
    );
    labelled_jobs(jobs, &labels).await
}

#[tokio::test]
async fn a_destination_with_retention_is_pruned_under_the_never_wiped_rules() {
    let Some(TestWorld { namespace, client }) = test_world("copyprune").await else {
        return;
    };
    let ns = namespace.name.as_str();
    let own = TestNamespace::create("copyprune-op");
    let own_ns = own.name.as_str();
    create_tenant_plan_secrets(ns);
    create_secret(ns, "offsite-repository", &[("password", OFFSITE_PASSWORD)]);
    create_basic_auth_secret(
        ns,
        "offsite-login",
        "offsite-tenant",
        "offsite-tenant-pw-1d0c",
    );
    create_basic_auth_secret(own_ns, "offsite-maintenance", ADMIN_LOGIN.0, ADMIN_LOGIN.1);
    let values = json!({
        "credentials": [{"urlPrefix": PREFIX, "secretName": "offsite-maintenance"}],
        "protectionWindow": {"default": "14d"},
    });
    let maintenance = values.to_string();
    let operator =
        Operator::start_as_chart(ns, own_ns, &[("NEVERWIPED_MAINTENANCE", &maintenance)]);
    let tenant = tenant(ns);
    apply_as(&tenant, &plan(ns));

    // Four usual nights, then one that rewrites every file with data that does not compress.
    night(
        &client,
        &tenant,
        ns,
        1,
        night_result(1, 0, 50 << 20, 20 << 20),
    )
    .await;
    for usual in 2..=4 {
        night(
            &client,
            &tenant,
            ns,
            usual,
            night_result(usual, 12, 4 << 20, 1 << 20),
        )
        .await;
    }
    let attack = night_result(5, 1000, 100 << 20, 100 << 20);
    let snapshot = attack.snapshot_id.clone().unwrap();
    night(&client, &tenant, ns, 5, attack).await;
    let status = plan_status(ns, "nightly");
    assert_eq!(condition(&status, "SuspiciousChange")["status"], "True");
    // The plan's repository and `archive` have no maintenance login: the plan says so.
    let ready = condition(&status, "Ready");
    assert_eq!(ready["reason"], "BackupLoginCanDeleteHistory", "{ready}");
    let message = ready["message"].as_str().unwrap();
    assert!(message.contains("copy destination archive"), "{message}");
    assert!(!message.contains("offsite"), "{message}");

    // The tenant turns prunes on: the offsite prune runs in the operator's namespace, with the
    // admin's login and a copy of the offsite password, and forgets nothing while the night waits.
    let patch = json!({"spec": {"maintenance": {"prune": {"suspend": false}}}});
    patch_plan_as(&tenant, ns, "nightly", &patch);
    let own_jobs: Api<Job> = Api::namespaced(client.clone(), own_ns);
    let paused = eventually("the offsite prune Job", PRUNE_WAIT, || async {
        offsite_prunes(&own_jobs, ns).await.into_iter().next()
    })
    .await;
    let paused_name = paused.name_any();
    let args = args_of(&paused);
    assert_eq!(args[0], "prune");
    for pair in [
        ["--repo", &format!("rest:{PREFIX}shop")],
        ["--host", &format!("{ns}/nightly")],
        ["--protect-within", "14d"],
    ] {
        assert!(has_pair(&args, pair), "{pair:?} in {args:?}");
    }
    assert_eq!(keep_flags(&paused), Vec::<String>::new(), "{args:?}");
    let copy_name = format!("{paused_name}-repository");
    let mut expected = vec![copy_name.clone(), "offsite-maintenance".to_owned()];
    expected.sort();
    assert_eq!(secret_names(&paused), expected, "nothing of the tenant's");
    let copies: Api<Secret> = Api::namespaced(client.clone(), own_ns);
    let copy = eventually("the offsite password copy", ACT_TIMEOUT, || async {
        copies.get_opt(&copy_name).await.ok().flatten()
    })
    .await;
    assert_eq!(
        copy.data.unwrap()["password"].0,
        OFFSITE_PASSWORD.as_bytes()
    );
    let tenant_sees = kubectl_as(&tenant, &["get", "job", &paused_name, "-n", own_ns]);
    assert!(!tenant_sees.status.success(), "the tenant cannot reach it");

    // The admin acknowledges the night while it runs (a prune due meanwhile waits for it).
    kubectl(&[
        "annotate",
        "backupplan",
        "nightly",
        "-n",
        ns,
        &format!(
            "neverwiped.io/acknowledge-suspicious-change={}",
            &snapshot[..8]
        ),
    ]);

    // Its result lands on the destination's status entry, in an Event and the metrics.
    let mut pruned = run_result(Operation::Prune, ExitStatus::Success);
    pruned.snapshot_id = None;
    pruned.prune = Some(PruneStats {
        bytes_freed: 2_048,
        bytes_kept: 9_000,
        packs_deleted: 1,
    });
    let ending = Ending::Result {
        exit_code: 0,
        result: Box::new(pruned),
    };
    finish_job(&client, own_ns, &paused_name, ending).await;
    let offsite = eventually("the prune on status.copies", ACT_TIMEOUT, || async {
        let copies = plan_status(ns, "nightly")["copies"].clone();
        let offsite = copies
            .as_array()?
            .iter()
            .find(|c| c["name"] == "offsite")?
            .clone();
        (offsite["prune"]["lastRun"]["jobName"] == json!(paused_name)).then_some(offsite)
    })
    .await;
    assert_eq!(
        offsite["prune"]["lastRun"]["result"], "Succeeded",
        "{offsite}"
    );
    assert_eq!(
        offsite["prune"]["lastRun"]["bytesFreed"], 2_048,
        "{offsite}"
    );
    event_seen(ns, "PruneSucceeded", "copy destination offsite").await;
    let runs = format!(
        "neverwiped_copy_prune_runs_total{{namespace=\"{ns}\",plan=\"nightly\",copy=\"offsite\",result=\"Succeeded\"}}"
    );
    eventually("the prune counted", ACT_TIMEOUT, || async {
        (operator.metric(&runs) == Some(1.0)).then_some(())
    })
    .await;

    // The next prune, after this one, forgets by the destination's rules.
    let resumed = eventually("the next offsite prune", PRUNE_WAIT, || async {
        let prunes = offsite_prunes(&own_jobs, ns).await;
        prunes.into_iter().find(|job| !keep_flags(job).is_empty())
    })
    .await;
    let args = args_of(&resumed);
    for pair in [["--keep-daily", "14"], ["--keep-monthly", "12"]] {
        assert!(has_pair(&args, pair), "{pair:?} in {args:?}");
    }

    // `archive` has no retention: no prune Job anywhere, nothing due on its status.
    for namespace in [ns, own_ns] {
        let archive = job_names(
            &client,
            namespace,
            "neverwiped.io/copy=archive,neverwiped.io/operation=prune",
        )
        .await;
        assert!(archive.is_empty(), "{archive:?} in {namespace}");
    }
    let copies = plan_status(ns, "nightly")["copies"].clone();
    let archive = copies
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "archive");
    assert!(archive.unwrap().get("prune").is_none(), "{copies}");
}
