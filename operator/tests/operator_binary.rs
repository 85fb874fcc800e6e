//! The `neverwiped-operator` binary against real Kubernetes API machinery, as a user meets it:
//! the CRDs and resources applied with `kubectl apply`, the results read back with `kubectl get`.
//! The test plays the Job controller and the kubelet (no controllers run on the test server): it
//! creates each Job's pod with a terminated container whose termination message is the sidecar's
//! real result, and sets the Job's status.

mod support;

#[path = "operator_binary/copies.rs"]
mod copies;
#[path = "operator_binary/copy_retention.rs"]
mod copy_retention;
#[path = "operator_binary/ransomware_night.rs"]
mod ransomware_night;
#[path = "operator_binary/rbac_rules.rs"]
mod rbac_rules;
#[path = "operator_binary/restore_drills.rs"]
mod restore_drills;
#[path = "operator_binary/restore_from_copy.rs"]
mod restore_from_copy;
#[path = "operator_binary/restore_from_snapshot.rs"]
mod restore_from_snapshot;
#[path = "operator_binary/suspicious_change.rs"]
mod suspicious_change;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use neverwiped_contract::{ExitStatus, Operation};
use neverwiped_operator::job::lock_hostname;
use serde_json::{json, Value};
use support::*;

const REPOSITORY_PASSWORD: &str = "correct horse battery staple 7f3a";
const GATE_USERNAME: &str = "shop-backup-user";
const GATE_PASSWORD: &str = "gate-password-91b2";
const PG_USERNAME: &str = "pg-backup-user";
const PG_PASSWORD: &str = "pg-password-c44e";

/// The Secrets, claims and application pod the example BackupPlan names.
async fn create_example_world(client: &Client, namespace: &str) {
    create_secret(
        namespace,
        "shop-repository",
        &[("password", REPOSITORY_PASSWORD)],
    );
    create_basic_auth_secret(namespace, "gate-login", GATE_USERNAME, GATE_PASSWORD);
    create_basic_auth_secret(namespace, "pg-backup", PG_USERNAME, PG_PASSWORD);
    create_claim(namespace, "uploads", &[]);
    create_claim(namespace, "media", &[("backup", "nightly")]);
    // The application that uses the ReadWriteOnce volume, on node-a: a Direct read must run there.
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "shop-0", "labels": {"app": "shop"}},
        "spec": {
            "nodeName": "node-a",
            "containers": [{"name": "shop", "image": "shop:1", "volumeMounts": [{"name": "uploads", "mountPath": "/srv"}]}],
            "volumes": [{"name": "uploads", "persistentVolumeClaim": {"claimName": "uploads"}}],
        }
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    pods.create(&PostParams::default(), &pod).await.unwrap();
    pods.patch_status(
        "shop-0",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await
    .unwrap();
}

fn create_claim(namespace: &str, name: &str, labels: &[(&str, &str)]) {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    let claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    });
    kubectl_stdin(&["apply", "-f", "-"], Some(&claim.to_string()));
}

/// `docs/examples/<name>` as JSON, moved into `namespace`.
fn example(name: &str, namespace: &str) -> Value {
    let text = std::fs::read_to_string(repo_root().join("docs/examples").join(name))
        .expect("the example exists");
    let mut value: Value = serde_saphyr::from_str(&text).expect("the example is YAML");
    value["metadata"]["namespace"] = json!(namespace);
    value
}

/// The example BackupPlan in `namespace`, with a manual trigger so it runs now, placement
/// settings, and a repository URL of the test.
fn example_plan(namespace: &str) -> Value {
    let mut plan = example("backupplan.yaml", namespace);
    plan["spec"]["manualTrigger"] = json!("first");
    plan["spec"]["repository"]["url"] = json!("http://gate.example.test:8000/shop");
    plan["spec"]["pod"]["nodeSelector"] = json!({"kubernetes.io/os": "linux"});
    plan["spec"]["pod"]["tolerations"] =
        json!([{"key": "backup", "operator": "Exists", "effect": "NoSchedule"}]);
    plan
}

/// The plan `nightly` a tenant applies in `namespace`: a night at 03:00 and one run now, the
/// gate's login (Secret `gate-login`), the database entry `orders` (`pg-backup`), and `extra`'s
/// fields in its spec.
fn tenant_plan(namespace: &str, extra: Value) -> Value {
    let mut plan = json!({
        "apiVersion": "neverwiped.io/v1alpha1",
        "kind": "BackupPlan",
        "metadata": {"name": "nightly", "namespace": namespace},
        "spec": {
            "schedule": "0 3 * * *",
            "manualTrigger": "1",
            "repository": {
                "url": "http://gate.example.test:8000/shop",
                "passwordSecretRef": {"name": "shop-repository", "key": "password"},
                "credentialsSecretRef": {"name": "gate-login"},
            },
            "databases": [{
                "name": "orders",
                "type": "postgresql",
                "host": "postgres.shop.svc",
                "credentialsSecretRef": {"name": "pg-backup"},
            }],
        },
    });
    for (key, value) in extra.as_object().expect("the spec's fields") {
        plan["spec"][key] = value.clone();
    }
    plan
}

/// The Secrets [`tenant_plan`] names: its repository's password, the gate's and the database's
/// logins.
fn create_tenant_plan_secrets(namespace: &str) {
    create_secret(
        namespace,
        "shop-repository",
        &[("password", REPOSITORY_PASSWORD)],
    );
    create_basic_auth_secret(namespace, "gate-login", GATE_USERNAME, GATE_PASSWORD);
    create_basic_auth_secret(namespace, "pg-backup", PG_USERNAME, PG_PASSWORD);
}

/// The Jobs of `jobs` whose labels match `selector`, by name.
async fn labelled_jobs(jobs: &Api<Job>, selector: &str) -> Vec<Job> {
    let params = kube::api::ListParams::default().labels(selector);
    let mut found = (jobs.list(&params).await).map_or_else(|_| Vec::new(), |list| list.items);
    found.sort_by_key(kube::ResourceExt::name_any);
    found
}

/// How many times the operator has begun to reconcile a BackupPlan.
fn reconciles(operator: &Operator) -> f64 {
    operator
        .metric("neverwiped_reconciliations_total{kind=\"BackupPlan\"}")
        .unwrap_or(0.0)
}

fn apply(object: &Value) -> String {
    kubectl_stdin(&["apply", "-f", "-"], Some(&object.to_string()))
}

fn plan_status(namespace: &str, name: &str) -> Value {
    kubectl_json(&["get", "backupplan", name, "-n", namespace])["status"].clone()
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|conditions| conditions.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

/// Waits until the plan's `lastRun` is the run of Job `job`, and returns the status.
async fn run_recorded(namespace: &str, plan: &str, job: &str) -> Value {
    eventually(
        &format!("the run of {job} on the status"),
        ACT_TIMEOUT,
        || async {
            let status = plan_status(namespace, plan);
            (status["lastRun"]["jobName"] == job).then_some(status)
        },
    )
    .await
}

/// The row of `kubectl get backupplans -A` for the plan.
fn plan_row(namespace: &str, plan: &str) -> BTreeMap<String, String> {
    table(&kubectl(&["get", "backupplans", "-A"]))
        .into_iter()
        .find(|row| row["NAMESPACE"] == namespace && row["NAME"] == plan)
        .unwrap_or_else(|| panic!("no row for {namespace}/{plan}"))
}

/// The namespace's Events as `kubectl get events` prints them.
fn event_rows(namespace: &str) -> Vec<BTreeMap<String, String>> {
    table(&kubectl(&["get", "events", "-n", namespace]))
}

/// The Secrets `job`'s pod mounts, sorted.
fn secret_names(job: &Job) -> Vec<String> {
    let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let volumes = pod.volumes.as_deref().unwrap_or_default();
    let mut names: Vec<String> = (volumes.iter())
        .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
        .collect();
    names.sort();
    names
}

async fn event_seen(namespace: &str, reason: &str, message_part: &str) -> BTreeMap<String, String> {
    eventually(&format!("an Event {reason}"), ACT_TIMEOUT, || async {
        event_rows(namespace)
            .into_iter()
            .find(|row| row["REASON"] == reason && row["MESSAGE"].contains(message_part))
    })
    .await
}

#[tokio::test]
async fn a_backup_plan_applied_with_kubectl_runs_a_job_and_reports_its_result() {
    let Some(TestWorld { namespace, client }) = test_world("run").await else {
        return;
    };
    let ns = namespace.name.as_str();
    create_example_world(&client, ns).await;
    let operator = Operator::start(ns);

    apply(&example_plan(ns));
    let job = job_created(&client, ns, "nightly-manual-1").await;

    // The Job's spec: everything through the pod spec, nothing secret in it.
    let job_json = serde_json::to_string(&job).unwrap();
    for secret in [
        REPOSITORY_PASSWORD,
        GATE_USERNAME,
        GATE_PASSWORD,
        PG_USERNAME,
        PG_PASSWORD,
    ] {
        assert!(
            !job_json.contains(secret),
            "the Job holds a secret value: {job_json}"
        );
    }
    let spec = job.spec.as_ref().unwrap();
    assert_eq!(spec.active_deadline_seconds, Some(6 * 3600), "deadline: 6h");
    assert_eq!(spec.backoff_limit, Some(0));
    let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("BackupPlan", "nightly", Some(true))
    );
    let pod = spec.template.spec.as_ref().unwrap();
    let container = &pod.containers[0];
    assert_eq!(container.image.as_deref(), Some(SIDECAR_IMAGE));
    assert_eq!(
        container.command.as_deref(),
        Some(&["/usr/local/bin/neverwiped-sidecar".to_string()][..])
    );
    let args = args_of(&job);
    assert_eq!(
        args,
        [
            "backup",
            "/data/media",
            "/data/uploads",
            "--repo",
            "rest:http://gate.example.test:8000/shop",
            "--result-file",
            "/dev/termination-log",
            "--host",
            &format!("{ns}/nightly"),
            "--tag",
            "plan=nightly",
            "--exclude",
            "/data/uploads/**/cache",
            "--exclude",
            "/data/uploads/**/*.tmp",
            "--exclude-caches-in",
            "/data/uploads",
            "--exclude-if-present-in",
            "/data/uploads=.nobackup",
            "--exclude-larger-than-in",
            "/data/uploads=2G",
            "--limit-upload",
            "52428800",
            "--remove-locks-of-host",
            &lock_hostname(ns, "nightly"),
            "--database",
            "orders=postgresql://$(NEVERWIPED_DB_USERNAME_ORDERS)@postgres.shop.svc:5432",
            "--database-password-file",
            "orders=/var/run/neverwiped/databases/orders/password",
            // The example's retention, applied after the snapshot is written; the two newest
            // always stay (the new snapshot's parent outlives a backup of an attack).
            "--keep-last",
            "2",
            "--keep-daily",
            "7",
            "--keep-weekly",
            "4",
            "--keep-monthly",
            "12",
            "--retry-lock",
            "1800s",
            "--init",
            // Each claim as the API server holds it, recorded in the snapshot.
            "--claim",
            r#"{"path":"/data/media","name":"media","requestedSize":"1Gi","accessModes":["ReadWriteOnce"],"labels":{"backup":"nightly"}}"#,
            "--claim",
            r#"{"path":"/data/uploads","name":"uploads","requestedSize":"1Gi","accessModes":["ReadWriteOnce"]}"#,
        ]
    );
    // Secrets as files and as environment variables from the Secrets.
    let env: BTreeMap<String, Value> = container
        .env
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| (e.name.clone(), serde_json::to_value(e).unwrap()))
        .collect();
    assert_eq!(
        env["NEVERWIPED_PASSWORD_FILE"]["value"],
        "/var/run/neverwiped/repository/password"
    );
    assert_eq!(
        env["NEVERWIPED_GATE_PASSWORD_FILE"]["value"],
        "/var/run/neverwiped/gate/password"
    );
    assert_eq!(
        env["NEVERWIPED_GATE_USERNAME"]["valueFrom"]["secretKeyRef"],
        json!({"name": "gate-login", "key": "username", "optional": false})
    );
    assert_eq!(
        env["NEVERWIPED_DB_USERNAME_ORDERS"]["valueFrom"]["secretKeyRef"],
        json!({"name": "pg-backup", "key": "username", "optional": false})
    );
    let volumes: BTreeMap<String, Value> = pod
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .map(|v| (v.name.clone(), serde_json::to_value(v).unwrap()))
        .collect();
    assert_eq!(
        volumes["repository-password"]["secret"]["secretName"],
        "shop-repository"
    );
    assert_eq!(
        volumes["repository-password"]["secret"]["items"][0]["key"],
        "password"
    );
    let claims: Vec<(String, bool)> = volumes
        .values()
        .filter_map(|v| {
            let claim = v.get("persistentVolumeClaim")?;
            Some((
                claim["claimName"].as_str()?.to_owned(),
                claim["readOnly"] == true,
            ))
        })
        .collect();
    assert_eq!(
        claims,
        [("media".to_string(), true), ("uploads".to_string(), true)]
    );
    // Locked down.
    assert_eq!(pod.automount_service_account_token, Some(false));
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    assert_eq!(
        pod.security_context
            .as_ref()
            .unwrap()
            .seccomp_profile
            .as_ref()
            .unwrap()
            .type_,
        "RuntimeDefault"
    );
    let security = container.security_context.as_ref().unwrap();
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    let capabilities = security.capabilities.as_ref().unwrap();
    assert_eq!(capabilities.drop.as_deref(), Some(&["ALL".to_string()][..]));
    // The unprivileged mover (the default): a non-root user and no capability at all.
    assert_eq!(capabilities.add, None);
    assert_eq!(security.run_as_non_root, Some(true));
    // Placement: the plan's, and the node where the ReadWriteOnce volume is in use.
    assert_eq!(
        pod.node_selector.as_ref().unwrap()["kubernetes.io/os"],
        "linux"
    );
    assert_eq!(
        pod.tolerations.as_ref().unwrap()[0].key.as_deref(),
        Some("backup")
    );
    let affinity = serde_json::to_value(pod.affinity.as_ref().unwrap()).unwrap();
    assert_eq!(
        affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchFields"][0],
        json!({"key": "metadata.name", "operator": "In", "values": ["node-a"]})
    );
    let resources = serde_json::to_value(container.resources.as_ref().unwrap()).unwrap();
    assert_eq!(resources["limits"]["memory"], "1Gi");

    // While it runs: Running=True, and the plan's row says so.
    let status = plan_status(ns, "nightly");
    assert_eq!(status["activeRun"]["jobName"], "nightly-manual-1");
    assert_eq!(condition(&status, "Running")["status"], "True");
    event_seen(ns, "BackupStarted", "nightly-manual-1").await;

    // The sidecar succeeds.
    let result = run_result(Operation::Backup, ExitStatus::Success);
    finish_job(
        &client,
        ns,
        "nightly-manual-1",
        Ending::Result {
            exit_code: 0,
            result: Box::new(result.clone()),
        },
    )
    .await;
    let status = run_recorded(ns, "nightly", "nightly-manual-1").await;
    let last = &status["lastRun"];
    assert_eq!(last["result"], "Succeeded");
    assert_eq!(last["reason"], "Succeeded");
    assert_eq!(last["trigger"], "Manual");
    assert_eq!(last["snapshotId"], json!(result.snapshot_id));
    assert_eq!(last["filesRead"], 1234);
    assert_eq!(last["bytesRead"], 987_654_321);
    assert_eq!(last["bytesAdded"], 1_234_567);
    assert_eq!(last["bytesSent"], 1_300_000);
    assert_eq!(last["durationSeconds"], 61);
    assert!(status.get("activeRun").is_none());
    assert_eq!(status["lastManualTrigger"], "first");
    assert_eq!(condition(&status, "Ready")["status"], "True");
    assert_eq!(condition(&status, "Running")["reason"], "Idle");
    assert_eq!(condition(&status, "LastBackupSucceeded")["status"], "True");
    assert_eq!(status["history"].as_array().unwrap().len(), 1);

    // What `kubectl get backupplans -A` shows.
    let row = plan_row(ns, "nightly");
    assert_eq!(row["SCHEDULE"], "30 2 * * *");
    assert_eq!(row["READY"], "True");
    assert_eq!(row["LAST RESULT"], "Succeeded");
    assert!(row["LAST SUCCESS"].ends_with('s'), "an age: {row:?}");
    assert_eq!(row["BYTES SENT"], "1300000");
    let next = neverwiped_operator::schedule::Schedule::parse("30 2 * * *", "Europe/Berlin")
        .unwrap()
        .next_after(jiff::Timestamp::now())
        .unwrap();
    assert_eq!(row["NEXT RUN"], next.to_string());
    assert_eq!(status["nextScheduleTime"], next.to_string());
    let wide = table(&kubectl(&["get", "backupplans", "-n", ns, "-o", "wide"]));
    assert_eq!(wide[0]["SNAPSHOT"], result.snapshot_id.clone().unwrap());
    assert_eq!(wide[0]["SUSPENDED"], "false");
    // The category lists it too.
    assert!(kubectl(&["get", "neverwiped", "-n", ns]).contains("backupplan.neverwiped.io/nightly"));

    // The Event, as `kubectl get events` shows it.
    let event = event_seen(ns, "BackupSucceeded", "nightly-manual-1").await;
    assert_eq!(event["TYPE"], "Normal");
    assert_eq!(event["OBJECT"], "backupplan/nightly");
    assert!(event["MESSAGE"].contains(result.snapshot_id.as_deref().unwrap()));

    // The metric users alert on.
    let completion: jiff::Timestamp = last["completionTime"].as_str().unwrap().parse().unwrap();
    let series = format!(
        "neverwiped_backup_last_success_timestamp_seconds{{namespace=\"{ns}\",plan=\"nightly\"}}"
    );
    assert_eq!(
        operator.metric(&series),
        Some(completion.as_second() as f64)
    );
    assert_eq!(
        operator.metric(&format!(
            "neverwiped_backup_runs_total{{namespace=\"{ns}\",plan=\"nightly\",result=\"Succeeded\",reason=\"Succeeded\"}}"
        )),
        Some(1.0)
    );
    assert_eq!(
        operator.metric(&format!(
            "neverwiped_backup_bytes_sent_total{{namespace=\"{ns}\",plan=\"nightly\"}}"
        )),
        Some(1_300_000.0)
    );
    assert_eq!(operator.get("/readyz").as_deref(), Some("ok\n"));
}

#[tokio::test]
async fn failed_runs_are_reported_with_their_real_reason() {
    let Some(TestWorld { namespace, client }) = test_world("fail").await else {
        return;
    };
    let ns = namespace.name.as_str();
    create_example_world(&client, ns).await;
    let operator = Operator::start(ns);
    let mut plan = example_plan(ns);
    plan["spec"]["manualTrigger"] = json!("1");
    apply(&plan);

    // 1. The sidecar fails, and says why.
    job_created(&client, ns, "nightly-manual-1").await;
    let mut result = run_result(Operation::Backup, ExitStatus::Failed);
    result.error = Some(
        "cannot reach the gate at http://gate.example.test:8000/shop: connection refused".into(),
    );
    finish_job(
        &client,
        ns,
        "nightly-manual-1",
        Ending::Result {
            exit_code: 1,
            result: Box::new(result),
        },
    )
    .await;
    let status = run_recorded(ns, "nightly", "nightly-manual-1").await;
    assert_eq!(status["lastRun"]["result"], "Failed");
    assert_eq!(status["lastRun"]["reason"], "BackupFailed");
    assert_eq!(
        status["lastRun"]["message"],
        "cannot reach the gate at http://gate.example.test:8000/shop: connection refused"
    );
    assert!(status.get("lastSuccessfulTime").is_none());
    let succeeded = condition(&status, "LastBackupSucceeded");
    assert_eq!(
        (&succeeded["status"], &succeeded["reason"]),
        (&json!("False"), &json!("BackupFailed"))
    );
    let event = event_seen(ns, "BackupFailed", "connection refused").await;
    assert_eq!(event["TYPE"], "Warning");
    let row = plan_row(ns, "nightly");
    assert_eq!(row["LAST RESULT"], "Failed");
    assert!(
        matches!(row["LAST SUCCESS"].as_str(), "" | "<none>"),
        "{row:?}"
    );

    // 2. Out of memory: no result, the kernel's reason.
    trigger_backup(ns, "nightly", "2");
    job_created(&client, ns, "nightly-manual-2").await;
    finish_job(&client, ns, "nightly-manual-2", Ending::OomKilled).await;
    let status = run_recorded(ns, "nightly", "nightly-manual-2").await;
    assert_eq!(status["lastRun"]["result"], "Failed");
    assert_eq!(status["lastRun"]["reason"], "OOMKilled");
    let message = status["lastRun"]["message"].as_str().unwrap();
    assert!(
        message.contains("out of memory (memory limit 1Gi)"),
        "{message}"
    );
    event_seen(ns, "BackupFailed", "OOMKilled").await;

    // 3. Still going at its deadline: stopped by the Job controller, pod gone.
    trigger_backup(ns, "nightly", "3");
    job_created(&client, ns, "nightly-manual-3").await;
    finish_job(&client, ns, "nightly-manual-3", Ending::DeadlineExceeded).await;
    let status = run_recorded(ns, "nightly", "nightly-manual-3").await;
    assert_eq!(status["lastRun"]["reason"], "DeadlineExceeded");
    let message = status["lastRun"]["message"].as_str().unwrap();
    assert!(message.contains("deadline of 6h"), "{message}");
    assert_eq!(
        condition(&status, "LastBackupSucceeded")["reason"],
        "DeadlineExceeded"
    );
    event_seen(ns, "BackupFailed", "DeadlineExceeded").await;
    let reasons: Vec<&str> = status["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons, ["DeadlineExceeded", "OOMKilled", "BackupFailed"]);
    assert_eq!(
        operator.metric(&format!(
            "neverwiped_backup_runs_total{{namespace=\"{ns}\",plan=\"nightly\",result=\"Failed\",reason=\"OOMKilled\"}}"
        )),
        Some(1.0)
    );
    // No success yet: nothing to alert from but the absence of the series.
    assert_eq!(
        operator.metric(&format!(
            "neverwiped_backup_last_success_timestamp_seconds{{namespace=\"{ns}\",plan=\"nightly\"}}"
        )),
        None
    );
}

#[tokio::test]
async fn a_restore_applied_with_kubectl_runs_a_job_and_reports_what_it_restored() {
    let Some(TestWorld { namespace, client }) = test_world("restore").await else {
        return;
    };
    let ns = namespace.name.as_str();
    create_example_world(&client, ns).await;
    create_basic_auth_secret(ns, "pg-admin", "postgres", "admin-pw-55");
    let _operator = Operator::start(ns);
    let mut plan = example_plan(ns);
    plan["spec"]
        .as_object_mut()
        .unwrap()
        .remove("manualTrigger");
    apply(&plan);
    let mut restore = example("restore.yaml", ns);
    // The admin's identity, which the chart's admission policy would have the admin write.
    restore["metadata"]["annotations"] = json!({
        "neverwiped.io/requested-by": "admin",
        "neverwiped.io/requested-by-groups": "system:masters",
    });
    apply(&restore);

    let job = job_created(&client, ns, "uploads-before-incident-restore").await;
    assert_eq!(
        args_of(&job),
        [
            "restore",
            "latest",
            "--repo",
            "rest:http://gate.example.test:8000/shop",
            "--result-file",
            "/dev/termination-log",
            "--target",
            "/restore",
            "--include",
            "/data/uploads",
            "--host",
            &format!("{ns}/nightly"),
            "--before",
            "2026-11-29T00:00:00Z",
            "--database",
            "orders=postgresql://$(NEVERWIPED_DB_USERNAME_ORDERS)@postgres-new.shop.svc:5432",
            "--database-password-file",
            "orders=/var/run/neverwiped/databases/orders/password",
        ]
    );
    let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let target = pod
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find_map(|v| v.persistent_volume_claim.as_ref())
        .unwrap();
    assert_eq!(
        (
            target.claim_name.as_str(),
            target.read_only.unwrap_or(false)
        ),
        ("uploads-restored", false)
    );
    let mount = pod.containers[0]
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| m.mount_path == "/restore/data/uploads")
        .expect("the target is mounted where the snapshot's files land");
    assert!(!mount.read_only.unwrap_or(false));
    assert_eq!(pod.automount_service_account_token, Some(false));
    // The new claim, as asked.
    let claim = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .get("uploads-restored")
        .await
        .expect("the Restore created its claim");
    let claim_spec = claim.spec.unwrap();
    assert_eq!(claim_spec.storage_class_name.as_deref(), Some("standard"));
    assert_eq!(
        claim_spec.resources.unwrap().requests.unwrap()["storage"].0,
        "20Gi"
    );
    assert_eq!(
        claim.metadata.owner_references, None,
        "deleting the Restore keeps the data"
    );
    event_seen(ns, "ClaimCreated", "uploads-restored").await;
    event_seen(ns, "RestoreStarted", "uploads-before-incident-restore").await;
    let running = kubectl_json(&[
        "get",
        "restores.neverwiped.io",
        "uploads-before-incident",
        "-n",
        ns,
    ]);
    assert_eq!(running["status"]["phase"], "Running");

    let mut result = run_result(Operation::Restore, ExitStatus::Success);
    result.files = 42;
    result.bytes_read = 4242;
    finish_job(
        &client,
        ns,
        "uploads-before-incident-restore",
        Ending::Result {
            exit_code: 0,
            result: Box::new(result.clone()),
        },
    )
    .await;
    let status = eventually("the Restore to finish", ACT_TIMEOUT, || async {
        let status = kubectl_json(&[
            "get",
            "restores.neverwiped.io",
            "uploads-before-incident",
            "-n",
            ns,
        ])["status"]
            .clone();
        (status["phase"] == "Succeeded").then_some(status)
    })
    .await;
    assert_eq!(status["filesRestored"], 42);
    assert_eq!(status["bytesRestored"], 4242);
    assert_eq!(status["snapshotId"], json!(result.snapshot_id));
    assert_eq!(condition(&status, "Complete")["status"], "True");
    assert_eq!(condition(&status, "Ready")["status"], "True");
    let rows = table(&kubectl(&["get", "restores.neverwiped.io", "-n", ns]));
    assert_eq!(rows[0]["NAME"], "uploads-before-incident");
    assert_eq!(rows[0]["PHASE"], "Succeeded");
    assert_eq!(rows[0]["PLAN"], "nightly");
    assert_eq!(rows[0]["SNAPSHOT"], result.snapshot_id.clone().unwrap());
    assert_eq!(rows[0]["BYTES RESTORED"], "4242");
    event_seen(ns, "RestoreSucceeded", "").await;
}

#[tokio::test]
async fn a_missing_secret_sets_ready_false_and_the_plan_recovers_when_it_appears() {
    let Some(TestWorld { namespace, client }) = test_world("secret").await else {
        return;
    };
    let ns = namespace.name.as_str();
    create_example_world(&client, ns).await;
    kubectl(&["-n", ns, "delete", "secret", "gate-login"]);
    let mut operator = Operator::start(ns);
    apply(&example_plan(ns));

    let status = eventually("Ready=False", ACT_TIMEOUT, || async {
        let status = plan_status(ns, "nightly");
        (condition(&status, "Ready")["status"] == "False").then_some(status)
    })
    .await;
    let ready = condition(&status, "Ready");
    assert_eq!(ready["reason"], "SecretNotFound");
    assert_eq!(
        ready["message"],
        "Secret \"gate-login\" named by spec.repository.credentialsSecretRef does not exist in this namespace; create it or correct the name"
    );
    let event = event_seen(ns, "SecretNotFound", "gate-login").await;
    assert_eq!(event["TYPE"], "Warning");
    assert_eq!(plan_row(ns, "nightly")["READY"], "False");
    assert!(job_names(&client, ns, "neverwiped.io/plan=nightly")
        .await
        .is_empty());

    // No crash loop, no hot requeue: the process runs, and looks at the plan a few times only.
    // A change of a Secret the plan names makes it look again: once it has, its own requeues,
    // had there been any, would have come before.
    let looked = reconciles(&operator);
    kubectl(&[
        "-n",
        ns,
        "annotate",
        "secret",
        "shop-repository",
        "touched=1",
    ]);
    eventually(
        "a look at the plan after its Secret changed",
        ACT_TIMEOUT,
        || async { (reconciles(&operator) > looked).then_some(()) },
    )
    .await;
    assert!(
        operator.is_running(),
        "the operator exited:\n{}",
        operator.logs()
    );
    let reconciles = reconciles(&operator);
    assert!(
        reconciles <= 6.0,
        "{reconciles} reconciles of one waiting plan"
    );
    let events = event_rows(ns)
        .into_iter()
        .filter(|row| row["REASON"] == "SecretNotFound")
        .count();
    assert_eq!(events, 1, "one Event per transition");

    // The Secret appears: the plan is Ready and runs, without waiting for a periodic recheck.
    create_basic_auth_secret(ns, "gate-login", GATE_USERNAME, GATE_PASSWORD);
    job_created(&client, ns, "nightly-manual-1").await;
    let status = plan_status(ns, "nightly");
    assert_eq!(condition(&status, "Ready")["status"], "True");

    // A key missing from an existing Secret is named too.
    kubectl(&[
        "patch",
        "backupplan",
        "nightly",
        "-n",
        ns,
        "--type=merge",
        "-p",
        r#"{"spec":{"repository":{"passwordSecretRef":{"name":"shop-repository","key":"passphrase"}}}}"#,
    ]);
    let status = eventually("SecretKeyNotFound", ACT_TIMEOUT, || async {
        let status = plan_status(ns, "nightly");
        (condition(&status, "Ready")["reason"] == "SecretKeyNotFound").then_some(status)
    })
    .await;
    assert!(condition(&status, "Ready")["message"]
        .as_str()
        .unwrap()
        .contains("has no key \"passphrase\""));
    assert!(operator.is_running());
}

#[tokio::test]
async fn a_malformed_spec_is_rejected_by_the_schema_with_a_readable_error() {
    let Some(TestWorld { namespace, .. }) = test_world("schema").await else {
        return;
    };
    let ns = namespace.name.as_str();
    let cases: [(&str, Value, &str); 7] = [
        (
            "an unknown copy method",
            json!({"copyMethod": "Sometimes"}),
            r#"spec.copyMethod: Unsupported value: "Sometimes": supported values: "Auto", "Snapshot", "Direct""#,
        ),
        (
            "a schedule that is not cron",
            json!({"schedule": "every night"}),
            r#"spec.schedule: Invalid value: "every night": spec.schedule in body should match"#,
        ),
        (
            "a volume with both a name and a selector",
            json!({"volumes": [{"claimName": "uploads", "selector": {"matchLabels": {"a": "b"}}}]}),
            "set exactly one of claimName or selector",
        ),
        (
            "a deadline below a minute",
            json!({"deadline": "30s"}),
            "deadline must be at least 1m",
        ),
        (
            "nothing to back up",
            json!({"volumes": [], "databases": []}),
            "a BackupPlan needs at least one entry in volumes, databases or streams",
        ),
        (
            "a misspelt field",
            json!({"schedual": "@daily"}),
            r#"unknown field "spec.schedual""#,
        ),
        (
            "a negative retention",
            json!({"retention": {"keepDaily": -1}}),
            "spec.retention.keepDaily: Invalid value: -1: spec.retention.keepDaily in body should be greater than or equal to 1",
        ),
    ];
    for (what, change, expected) in cases {
        let mut plan = example_plan(ns);
        plan["metadata"]["name"] = json!("malformed");
        for (key, value) in change.as_object().unwrap() {
            plan["spec"][key] = value.clone();
        }
        let output = kubectl_output(&["apply", "-f", "-"], Some(&plan.to_string()));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{what} was accepted");
        assert!(stderr.contains(expected), "{what}: {stderr}");
    }
    // A required field left out.
    let mut plan = example_plan(ns);
    plan["spec"].as_object_mut().unwrap().remove("repository");
    let output = kubectl_output(&["apply", "-f", "-"], Some(&plan.to_string()));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("spec.repository: Required value"),
        "{stderr}"
    );
    assert!(kubectl(&["get", "backupplans", "-n", ns]).is_empty());
}

#[tokio::test]
async fn two_runs_of_one_plan_never_overlap() {
    let Some(TestWorld { namespace, client }) = test_world("overlap").await else {
        return;
    };
    let ns = namespace.name.as_str();
    create_example_world(&client, ns).await;
    let _operator = Operator::start(ns);
    let mut plan = example_plan(ns);
    plan["spec"]["schedule"] = json!("* * * * *");
    plan["spec"]["manualTrigger"] = json!("a");
    apply(&plan);
    job_created(&client, ns, "nightly-manual-1").await;

    // Watch, all along, that at most one Job of the plan is unfinished.
    let watch_client = client.clone();
    let watch_namespace = ns.to_owned();
    let watching = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let still_watching = watching.clone();
    let watcher = tokio::spawn(async move {
        let jobs: Api<Job> = Api::namespaced(watch_client, &watch_namespace);
        let mut most = 0;
        while still_watching.load(std::sync::atomic::Ordering::Relaxed) {
            let listed = jobs
                .list(&kube::api::ListParams::default().labels("neverwiped.io/plan=nightly"))
                .await
                .expect("Jobs list");
            let unfinished = listed
                .items
                .iter()
                .filter(|job| neverwiped_operator::status::job_finished(job).is_none())
                .count();
            most = most.max(unfinished);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        most
    });

    // A scheduled minute passes while the first run goes, then another manual trigger comes: the
    // operator looks at the plan for it (after that minute) and starts nothing. Its Jobs are
    // created before its status is applied, so the status of that look is the sign.
    let now = jiff::Timestamp::now();
    let wait = 62 - now.as_second() % 60;
    tokio::time::sleep(Duration::from_secs(wait as u64)).await;
    let minute_passed = jiff::Timestamp::now();
    trigger_backup(ns, "nightly", "b");
    eventually(
        "the look at the plan for its new trigger",
        ACT_TIMEOUT,
        || async {
            let plan = kubectl_json(&["get", "backupplan", "nightly", "-n", ns]);
            (plan["status"]["observedGeneration"] == plan["metadata"]["generation"]).then_some(())
        },
    )
    .await;
    let next: jiff::Timestamp = plan_status(ns, "nightly")["nextScheduleTime"]
        .as_str()
        .expect("the next scheduled time")
        .parse()
        .unwrap();
    assert!(next > minute_passed, "the look saw the minute pass: {next}");
    assert_eq!(
        job_names(&client, ns, "neverwiped.io/plan=nightly").await,
        ["nightly-manual-1"]
    );
    let status = plan_status(ns, "nightly");
    assert_eq!(status["activeRun"]["jobName"], "nightly-manual-1");
    assert_eq!(condition(&status, "Running")["status"], "True");

    // The first run ends: the waiting manual run starts, alone.
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
    job_created(&client, ns, "nightly-manual-2").await;
    // It ends: the scheduled time that came meanwhile runs now, once.
    finish_job(
        &client,
        ns,
        "nightly-manual-2",
        Ending::Result {
            exit_code: 0,
            result: Box::new(run_result(Operation::Backup, ExitStatus::Success)),
        },
    )
    .await;
    let status = eventually("the scheduled run", ACT_TIMEOUT, || async {
        let status = plan_status(ns, "nightly");
        (status["activeRun"]["trigger"] == "Schedule"
            || status["activeRun"]["trigger"] == "CatchUp")
            .then_some(status)
    })
    .await;
    let scheduled: jiff::Timestamp = status["activeRun"]["scheduledTime"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        status["activeRun"]["jobName"],
        format!("nightly-{}", scheduled.as_second() / 60)
    );
    watching.store(false, std::sync::atomic::Ordering::Relaxed);
    let most = watcher.await.unwrap();
    assert_eq!(most, 1, "two runs of one plan were unfinished at once");
    let names = job_names(&client, ns, "neverwiped.io/plan=nightly").await;
    assert_eq!(names.len(), 3, "{names:?}");
}

#[tokio::test]
async fn deleting_a_plan_first_deletes_the_jobs_the_operator_created() {
    let Some(TestWorld { namespace, client }) = test_world("delete").await else {
        return;
    };
    let ns = namespace.name.as_str();
    create_example_world(&client, ns).await;
    let operator = Operator::start(ns);
    apply(&example_plan(ns));
    job_created(&client, ns, "nightly-manual-1").await;
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
    run_recorded(ns, "nightly", "nightly-manual-1").await;
    trigger_backup(ns, "nightly", "second");
    job_created(&client, ns, "nightly-manual-2").await;
    let plan = kubectl_json(&["get", "backupplan", "nightly", "-n", ns]);
    assert_eq!(
        plan["metadata"]["finalizers"],
        json!(["neverwiped.io/cleanup"])
    );
    let series = format!(
        "neverwiped_backup_last_success_timestamp_seconds{{namespace=\"{ns}\",plan=\"nightly\"}}"
    );
    assert!(operator.metric(&series).is_some());
    let plans_series = || {
        let labels = format!("namespace=\"{ns}\",plan=\"nightly\"");
        let metrics = operator.metrics();
        let lines = metrics.lines().filter(|line| line.contains(&labels));
        let names = lines.filter_map(|line| line.split('{').next().map(str::to_owned));
        names.collect::<std::collections::BTreeSet<String>>()
    };
    let before = plans_series();
    for counter in [
        "neverwiped_backup_runs_total",
        "neverwiped_backup_duration_seconds_count",
        "neverwiped_backup_bytes_sent_total",
    ] {
        assert!(before.contains(counter), "{counter} in {before:?}");
    }

    // `kubectl delete` waits for the finalizer: when it returns, the plan's Jobs (the finished
    // one and the running one) are gone, and so is every series of it (counters and the
    // duration histogram as well as the gauges).
    kubectl(&["delete", "backupplan", "nightly", "-n", ns, "--timeout=30s"]);
    assert!(job_names(&client, ns, "neverwiped.io/plan=nightly")
        .await
        .is_empty());
    assert!(kubectl(&["get", "backupplans", "-n", ns]).is_empty());
    assert_eq!(operator.metric(&series), None);
    assert_eq!(plans_series(), Default::default());
}

#[tokio::test]
async fn locks_left_by_a_killed_run_do_not_block_the_next_one() {
    let Some(TestWorld { namespace, client }) = test_world("locks").await else {
        return;
    };
    let ns = namespace.name.as_str();
    create_example_world(&client, ns).await;
    let _operator = Operator::start(ns);
    let hostname = lock_hostname(ns, "nightly");
    let trigger = |value: &str| {
        trigger_backup(ns, "nightly", value);
    };
    let hostname_of = |job: &Job| {
        job.spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .hostname
            .clone()
    };
    apply(&example_plan(ns));

    // The first run is killed (SIGKILL: no result, its lock left in the repository).
    let first = job_created(&client, ns, "nightly-manual-1").await;
    assert_eq!(hostname_of(&first).as_deref(), Some(hostname.as_str()));
    finish_job(&client, ns, "nightly-manual-1", Ending::Killed).await;
    let status = run_recorded(ns, "nightly", "nightly-manual-1").await;
    assert_eq!(status["lastRun"]["reason"], "SidecarCrashed");
    let pod = Api::<Pod>::namespaced(client.clone(), ns)
        .get("nightly-manual-1-x7k2p")
        .await
        .unwrap();
    // The lock it left records the pod's host name: the plan's.
    assert_eq!(
        pod.spec.unwrap().hostname.as_deref(),
        Some(hostname.as_str())
    );

    // The next run, under the same host name, removes every lock of that host name first: no
    // pod of the plan is alive.
    trigger("2");
    let second = job_created(&client, ns, "nightly-manual-2").await;
    assert_eq!(hostname_of(&second).as_deref(), Some(hostname.as_str()));
    assert!(
        args_of(&second)
            .windows(2)
            .any(|w| w == ["--remove-locks-of-host", hostname.as_str()]),
        "{:?}",
        args_of(&second)
    );

    // Stopped at its deadline, but its pod still runs (being killed): its lock is not stale yet,
    // and the next run must not remove it.
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let template = second.spec.as_ref().unwrap().template.clone();
    let lingering: Pod = serde_json::from_value(json!({
        "metadata": {"name": "nightly-manual-2-x7k2p", "labels": template.metadata.unwrap().labels},
        "spec": template.spec,
    }))
    .unwrap();
    pods.create(&PostParams::default(), &lingering)
        .await
        .unwrap();
    pods.patch_status(
        "nightly-manual-2-x7k2p",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await
    .unwrap();
    finish_job(&client, ns, "nightly-manual-2", Ending::DeadlineExceeded).await;
    run_recorded(ns, "nightly", "nightly-manual-2").await;
    trigger("3");
    let third = job_created(&client, ns, "nightly-manual-3").await;
    assert!(
        !args_of(&third).contains(&"--remove-locks-of-host".to_string()),
        "{:?}",
        args_of(&third)
    );
}
