//! Two replicas of the operator binary against real Kubernetes API machinery: only the holder of
//! the leader Lease runs the controllers; when it dies, the other takes over within the Lease's
//! duration; a replica that loses the Lease stops; one that shuts down gives the Lease up.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use neverwiped_contract::{ExitStatus, Operation};
use serde_json::{json, Value};
use support::*;

const LEASE_SECS: u64 = 3;

fn holder(namespace: &str) -> Option<String> {
    let output = kubectl_output(
        &[
            "get",
            "lease",
            "neverwiped-operator",
            "-n",
            namespace,
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
        None,
    );
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// The operator's leader Lease as the API server holds it now.
async fn lease_spec(client: &kube::Client, namespace: &str) -> LeaseSpec {
    let leases: kube::Api<Lease> = kube::Api::namespaced(client.clone(), namespace);
    let lease = leases.get("neverwiped-operator").await.expect("the Lease");
    lease.spec.expect("the Lease's spec")
}

fn replica(namespace: &str, identity: &str) -> Operator {
    Operator::start_with(
        namespace,
        identity,
        &[("NEVERWIPED_LEASE_DURATION", &format!("{LEASE_SECS}s"))],
    )
}

fn plan(namespace: &str, trigger: &str) -> Value {
    json!({
        "apiVersion": "neverwiped.io/v1alpha1", "kind": "BackupPlan",
        "metadata": {"name": "nightly", "namespace": namespace},
        "spec": {
            "schedule": "@daily",
            "manualTrigger": trigger,
            "repository": {
                "url": "http://gate.example.test:8000/shop",
                "passwordSecretRef": {"name": "repository", "key": "password"},
            },
            "volumes": [{"claimName": "data"}],
        },
    })
}

/// The replica that reported the Event about `job`.
fn reporter_of_started(namespace: &str, job: &str) -> Option<String> {
    let events = kubectl_json(&["get", "events", "-n", namespace]);
    events["items"].as_array()?.iter().find_map(|event| {
        let note = event["message"].as_str().or(event["note"].as_str())?;
        (event["reason"] == "BackupStarted" && note.contains(job))
            .then(|| event["reportingInstance"].as_str().map(str::to_owned))?
    })
}

#[tokio::test]
async fn only_the_leader_runs_and_another_replica_takes_over_when_it_dies() {
    let Some(TestWorld { namespace, client }) = test_world("lease").await else {
        return;
    };
    let ns = namespace.name.as_str();
    create_secret(ns, "repository", &[("password", "pw")]);
    let claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": ns},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    });
    kubectl_stdin(&["apply", "-f", "-"], Some(&claim.to_string()));

    let mut first = replica(ns, "replica-a");
    eventually("replica-a to lead", ACT_TIMEOUT, || async {
        (holder(ns).as_deref() == Some("replica-a")).then_some(())
    })
    .await;
    let mut second = replica(ns, "replica-b");
    eventually("replica-b to serve metrics", ACT_TIMEOUT, || async {
        second.metric("neverwiped_leader").map(|_| ())
    })
    .await;

    kubectl_stdin(&["apply", "-f", "-"], Some(&plan(ns, "1").to_string()));
    job_created(&client, ns, "nightly-manual-1").await;
    let reporter = eventually("the BackupStarted Event", ACT_TIMEOUT, || async {
        reporter_of_started(ns, "nightly-manual-1")
    })
    .await;
    assert_eq!(reporter, "replica-a");
    // The follower runs no controller at all.
    assert_eq!(first.metric("neverwiped_leader"), Some(1.0));
    assert_eq!(second.metric("neverwiped_leader"), Some(0.0));
    assert_eq!(
        second.metric("neverwiped_reconciliations_total{kind=\"BackupPlan\"}"),
        None
    );
    assert_eq!(holder(ns).as_deref(), Some("replica-a"));

    // The leader dies without a word: the follower takes over once the Lease has not been renewed
    // for its duration. The times are the replicas' own, written in the Lease (the test runs on
    // the same clock), so how often and how fast the test looks does not count.
    first.kill();
    let before = lease_spec(&client, ns).await;
    assert_eq!(before.holder_identity.as_deref(), Some("replica-a"));
    let last_renewal = before.renew_time.expect("a renewed Lease").0;
    eventually("replica-b to lead", ACT_TIMEOUT, || async {
        (holder(ns).as_deref() == Some("replica-b")).then_some(())
    })
    .await;
    let after = lease_spec(&client, ns).await;
    let acquired = after.acquire_time.expect("the time replica-b took it").0;
    let takeover = acquired.duration_since(last_renewal);
    // Not before the Lease expired; soon after (the follower looks every 0.6 s; the rest is
    // room for a loaded machine).
    let lease = jiff::SignedDuration::from_secs(LEASE_SECS as i64);
    assert!(
        takeover >= lease && takeover <= lease + jiff::SignedDuration::from_secs(5),
        "taken over {takeover:#} after the last renewal of a {LEASE_SECS} s Lease"
    );
    assert_eq!(
        after.lease_transitions,
        before.lease_transitions.map(|n| n + 1)
    );
    eventually("replica-b's leader metric", ACT_TIMEOUT, || async {
        (second.metric("neverwiped_leader") == Some(1.0)).then_some(())
    })
    .await;
    // The new leader records the first run and starts the next one.
    finish_job(
        &client,
        ns,
        "nightly-manual-1",
        Ending::Result {
            exit_code: 0,
            result: Box::new(run_result(Operation::Backup, ExitStatus::Success)),
        },
    )
    .await;
    trigger_backup(ns, "nightly", "2");
    job_created(&client, ns, "nightly-manual-2").await;
    let reporter = eventually("the second BackupStarted Event", ACT_TIMEOUT, || async {
        reporter_of_started(ns, "nightly-manual-2")
    })
    .await;
    assert_eq!(reporter, "replica-b");

    // Someone else writes the Lease: the leader stops at once (and is restarted by Kubernetes).
    let now = jiff::Timestamp::now();
    kubectl(&[
        "patch",
        "lease",
        "neverwiped-operator",
        "-n",
        ns,
        "--type=merge",
        "-p",
        &json!({"spec": {"holderIdentity": "intruder", "renewTime": now.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()}})
            .to_string(),
    ]);
    let deadline = Instant::now() + ACT_TIMEOUT;
    while second.is_running() {
        assert!(
            Instant::now() < deadline,
            "replica-b still runs without the Lease"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        second.logs().contains("lost the leader Lease"),
        "{}",
        second.logs()
    );

    // A replica shutting down gives the Lease up, so the next one need not wait for it to expire.
    let mut third = replica(ns, "replica-c");
    eventually("replica-c to lead", ACT_TIMEOUT, || async {
        (holder(ns).as_deref() == Some("replica-c")).then_some(())
    })
    .await;
    let status = third
        .terminate()
        .unwrap_or_else(|| panic!("replica-c did not stop on SIGTERM:\n{}", third.logs()));
    assert!(status.success(), "{status:?}\n{}", third.logs());
    assert_eq!(holder(ns).as_deref(), Some(""));
}
