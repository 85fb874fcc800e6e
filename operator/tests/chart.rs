//! The Helm chart `charts/neverwiped`:
//!
//! - its `crds/` are the generated CRDs, byte for byte;
//! - Helm's own engine renders and lints it, and every manifest passes the Kubernetes schemas
//!   (`tests/chart/check_chart.py`, which needs python3 and the modules of
//!   `tests/chart/requirements.txt`, and npm's `tests/chart/grafana-schema`; without them the
//!   tests skip loudly, and fail under CI, through `neverwiped_testkit::missing`);
//! - the rendered CRDs apply to a real API server, and the operator started with the rendered
//!   Deployment's arguments and environment, as the rendered ServiceAccount with the rendered
//!   RBAC of the namespaced mode (`watchNamespace`), reconciles the example BackupPlan there.

mod support;

#[path = "chart/copy_lag_alert.rs"]
mod copy_lag_alert;
#[path = "chart/restore_drill_alerts.rs"]
mod restore_drill_alerts;
#[path = "chart/suspicious_change_alert.rs"]
mod suspicious_change_alert;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ListParams};
use kube::ResourceExt;
use neverwiped_contract::{ExitStatus, Operation};
use serde_json::{json, Value};
use support::chart_render::{run_check_script, CHECK_SCRIPT};
use support::identity::{grant, rbac_objects};
use support::*;

fn yaml_files(directory: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(directory)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", directory.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| {
            path.extension()
                .is_some_and(|extension| extension == "yaml")
        })
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).expect("a readable CRD file");
            (name, text)
        })
        .collect()
}

#[test]
fn chart_crds_are_byte_identical_to_the_generated_crds() {
    let generated = yaml_files(&repo_root().join("crds"));
    let chart = yaml_files(&repo_root().join("charts/neverwiped/crds"));
    let regenerate = "regenerate both with\n\n    cargo run -p neverwiped-operator --bin crdgen -- crds charts/neverwiped/crds\n";
    assert!(!generated.is_empty(), "crds/ holds no CRD");
    assert_eq!(
        generated.keys().collect::<Vec<_>>(),
        chart.keys().collect::<Vec<_>>(),
        "charts/neverwiped/crds/ and crds/ hold different files; {regenerate}"
    );
    for (name, text) in &generated {
        assert!(
            chart[name] == *text,
            "charts/neverwiped/crds/{name} differs from crds/{name}; {regenerate}"
        );
    }
}

#[test]
fn chart_renders_lints_and_validates_with_the_real_helm_engine() {
    let Some(output) = run_check_script(&[]) else {
        return;
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Shown with --nocapture, and on failure.
    println!("{stdout}{stderr}");
    assert!(
        output.status.success(),
        "{CHECK_SCRIPT} failed:\n{stdout}{stderr}"
    );
    assert!(
        stdout.contains("chart checks:"),
        "{CHECK_SCRIPT} ran no check:\n{stdout}"
    );
}

/// The chart rendered by Helm for a release `neverwiped` in `namespace` with `values`.
fn render_chart(namespace: &str, values: &Value) -> Option<Value> {
    support::chart_render::render_chart("neverwiped", namespace, values)
}

fn manifest<'a>(rendered: &'a Value, kind: &str, name: &str) -> &'a Value {
    rendered["manifests"]
        .as_array()
        .expect("manifests")
        .iter()
        .find(|object| object["kind"] == kind && object["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("the chart renders no {kind} {name}"))
}

/// The container's environment as a pod would see it: `fieldRef`s resolved for a pod named
/// `pod_name` in `namespace`. Any other source would need a cluster, and fails the test.
fn resolved_env(container: &Value, pod_name: &str, namespace: &str) -> Vec<(String, String)> {
    container["env"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|variable| {
            let name = variable["name"].as_str().expect("a name").to_owned();
            if let Some(value) = variable.get("value") {
                return (name, value.as_str().unwrap_or_default().to_owned());
            }
            let field = &variable["valueFrom"]["fieldRef"]["fieldPath"];
            let value = match field.as_str() {
                Some("metadata.name") => pod_name,
                Some("metadata.namespace") => namespace,
                _ => panic!("{name}: cannot resolve {variable} outside a pod"),
            };
            (name, value.to_owned())
        })
        .collect()
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|item| item.as_str().expect("a string").to_owned())
        .collect()
}

/// Applies the CRDs as Helm would install them, and waits until they are established.
fn apply_rendered_crds(rendered: &Value) {
    let crds = rendered["crds_yaml"].as_str().expect("the chart's CRDs");
    // Server-side, with the field manager of support::apply_crds: test processes applying the
    // same CRDs at once never conflict.
    kubectl_stdin(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=neverwiped-test",
            "-f",
            "-",
        ],
        Some(crds),
    );
    wait_for_crds();
}

/// The Secrets and claims that docs/examples/backupplan.yaml names.
fn create_example_world(namespace: &str) {
    for (name, literals, basic_auth) in [
        (
            "shop-repository",
            vec!["--from-literal=password=chart-test-password"],
            false,
        ),
        (
            "gate-login",
            vec![
                "--from-literal=username=shop",
                "--from-literal=password=gate",
            ],
            true,
        ),
        (
            "pg-backup",
            vec![
                "--from-literal=username=backup",
                "--from-literal=password=pg",
            ],
            true,
        ),
    ] {
        let mut args = vec!["-n", namespace, "create", "secret", "generic", name];
        if basic_auth {
            args.push("--type=kubernetes.io/basic-auth");
        }
        args.extend(literals);
        kubectl(&args);
    }
    for (name, labels) in [
        ("uploads", json!({})),
        ("media", json!({"backup": "nightly"})),
    ] {
        let claim = json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        });
        kubectl_stdin(&["apply", "-f", "-"], Some(&claim.to_string()));
    }
}

fn example_plan(namespace: &str) -> Value {
    let path: PathBuf = repo_root().join("docs/examples/backupplan.yaml");
    let text = std::fs::read_to_string(path).expect("the example exists");
    let mut plan: Value = serde_saphyr::from_str(&text).expect("the example is YAML");
    plan["metadata"]["namespace"] = json!(namespace);
    plan["spec"]["manualTrigger"] = json!("chart");
    plan
}

/// The metric families operator/src/metrics.rs registers, with their `neverwiped_` prefix.
fn registered_metric_families() -> Vec<String> {
    let source = std::fs::read_to_string(repo_root().join("operator/src/metrics.rs"))
        .expect("operator/src/metrics.rs");
    source
        .split(".register(")
        .skip(1)
        .filter_map(|call| {
            let name = call.trim_start().strip_prefix('"')?.split('"').next()?;
            Some(format!("neverwiped_{name}"))
        })
        .collect()
}

/// The `neverwiped_*` metrics the rendered alerts read.
fn alert_metric_names(rendered: &Value) -> Vec<String> {
    let rule = manifest(rendered, "PrometheusRule", "neverwiped-operator");
    let mut names: Vec<String> = Vec::new();
    for group in rule["spec"]["groups"].as_array().expect("rule groups") {
        for alert in group["rules"].as_array().expect("rules") {
            let expr = alert["expr"].as_str().expect("an expression");
            for (start, _) in expr.match_indices("neverwiped_") {
                let name: String = expr[start..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
    }
    names
}

#[tokio::test]
async fn operator_started_from_the_rendered_deployment_reconciles_the_example_plan() {
    if !api_server_or_skip() {
        return;
    }
    let namespace = TestNamespace::create("chart");
    let ns = namespace.name.as_str();
    // The release in the test's namespace, watching only it (the API server is shared with
    // other tests), with a pinned sidecar image, the alerts, and (multi-tenant, the default) the
    // example plan's gate as the one allowed repository prefix.
    let sidecar_digest = format!("sha256:{}", "5e".repeat(32));
    let values = json!({
        "watchNamespace": ns,
        // A short name: the test's client certificate names it in at most 64 characters.
        "serviceAccount": {"name": "op"},
        "policy": {"allowedRepositoryPrefixes": ["https://gate.example.com/"]},
        "sidecar": {"image": {"tag": "9.9.9", "digest": sidecar_digest}},
        "logLevel": "info,neverwiped_operator=debug",
        "metrics": {"prometheusRule": {"enabled": true}},
    });
    let Some(rendered) = render_chart(ns, &values) else {
        return;
    };
    apply_rendered_crds(&rendered);

    // The operator's container as the rendered Deployment runs it.
    let deployment = manifest(&rendered, "Deployment", "neverwiped-operator");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let pod_name = "neverwiped-operator-7d9f8c6b5-x2x7q";
    let env = resolved_env(container, pod_name, ns);
    let setting = |name: &str| {
        env.iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.clone())
            .unwrap_or_else(|| panic!("the rendered Deployment sets no {name}"))
    };
    let http_port = container["ports"][0]["containerPort"].as_u64().unwrap();
    assert_eq!(
        setting("NEVERWIPED_HTTP_ADDR"),
        format!("0.0.0.0:{http_port}"),
        "the operator listens on the container port the probes use"
    );
    let args = strings(&container["args"]);
    // As the rendered ServiceAccount, with the rendered Role, ClusterRole and bindings only.
    let Some(kubeconfig) = grant(&rbac_objects(&rendered)) else {
        return;
    };
    let log_name = format!("{ns}-chart");
    let mut operator =
        Operator::start_with_exact_env(&kubeconfig, &log_name, pod_name, &args, &env);
    // As a kubelet does, each probe is asked again until it answers (readiness waits for the
    // first answer of the API server, which a loaded machine may take seconds to give).
    for probe in ["livenessProbe", "readinessProbe"] {
        let path = container[probe]["httpGet"]["path"].as_str().unwrap();
        let deadline = std::time::Instant::now() + ACT_TIMEOUT;
        while operator.get(path).is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        assert!(
            operator.get(path).is_some(),
            "{probe} {path} fails:\n{}",
            operator.logs()
        );
    }

    let client = client().await;
    create_example_world(ns);
    kubectl_stdin(&["apply", "-f", "-"], Some(&example_plan(ns).to_string()));

    // The backup Job runs the sidecar image the chart names, with its pull policy.
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let job = eventually("the example plan's backup Job", ACT_TIMEOUT, || {
        let jobs = jobs.clone();
        async move {
            let listed = jobs.list(&ListParams::default()).await.ok()?;
            listed.items.into_iter().find(|job| {
                let args = job
                    .spec
                    .as_ref()
                    .and_then(|spec| spec.template.spec.as_ref())
                    .and_then(|pod| pod.containers[0].args.clone())
                    .unwrap_or_default();
                args.first().map(String::as_str) == Some("backup")
            })
        }
    })
    .await;
    let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let sidecar_image = setting("NEVERWIPED_SIDECAR_IMAGE");
    assert!(sidecar_image.ends_with(&format!(":9.9.9@{sidecar_digest}")));
    assert_eq!(
        pod.containers[0].image.as_deref(),
        Some(sidecar_image.as_str())
    );
    assert_eq!(
        pod.containers[0].image_pull_policy.as_deref(),
        Some(setting("NEVERWIPED_SIDECAR_IMAGE_PULL_POLICY").as_str())
    );

    let job_name = job.name_any();
    finish_job(
        &client,
        ns,
        &job_name,
        Ending::Result {
            exit_code: 0,
            result: Box::new(run_result(Operation::Backup, ExitStatus::Success)),
        },
    )
    .await;
    let status = eventually("the run's result on the plan", ACT_TIMEOUT, || async {
        let status = kubectl_json(&["get", "backupplan", "nightly", "-n", ns])["status"].clone();
        (status["lastRun"]["jobName"] == job_name.as_str()).then_some(status)
    })
    .await;
    assert_eq!(status["lastRun"]["result"], "Succeeded", "{status}");

    // Leader election as configured: the Lease of the rendered name, held by the pod's name.
    let lease = kubectl_json(&["get", "lease", &setting("NEVERWIPED_LEASE_NAME"), "-n", ns]);
    assert_eq!(lease["spec"]["holderIdentity"], pod_name, "{lease}");

    // The metrics the chart's alerts read are the operator's.
    let metrics = eventually("the run's metrics", ACT_TIMEOUT, || async {
        let metrics = operator.metrics();
        let series =
            format!("neverwiped_backup_runs_total{{namespace=\"{ns}\",plan=\"nightly\",result=\"Succeeded\"");
        metrics.contains(&series).then_some(metrics)
    })
    .await;
    assert!(metrics.contains("\nneverwiped_leader 1"), "{metrics}");
    // Every metric the alerts read is one the operator registers (a counter's samples end in
    // _total); those a successful run sets are there for the plan.
    let families = registered_metric_families();
    let plan_labels = format!("{{namespace=\"{ns}\",plan=\"nightly\"");
    for name in alert_metric_names(&rendered) {
        let family = name.strip_suffix("_total").unwrap_or(&name);
        assert!(
            families.iter().any(|registered| registered == family),
            "the chart's alerts read {name}, which operator/src/metrics.rs does not register: {families:?}"
        );
        // A check's gauge needs a check; a copy's lag, a plan with copies; a drill's, a drill.
        if !(name.starts_with("neverwiped_restore_drill_")
            || [
                "neverwiped_repository_check_ok",
                "neverwiped_copy_lag_seconds",
            ]
            .contains(&name.as_str()))
        {
            assert!(
                metrics.contains(&format!("\n{name}{plan_labels}")),
                "after a successful run the operator exports no {name} of the plan:\n{metrics}"
            );
        }
    }

    // A plan sending its backups anywhere else is refused, by the rendered policy.
    let mut elsewhere = example_plan(ns);
    elsewhere["metadata"]["name"] = json!("elsewhere");
    elsewhere["spec"]["repository"]["url"] = json!("https://gate.example.com.evil.test/shop");
    kubectl_stdin(&["apply", "-f", "-"], Some(&elsewhere.to_string()));
    let reason = eventually("the plan elsewhere refused", ACT_TIMEOUT, || async {
        let status = kubectl_json(&["get", "backupplan", "elsewhere", "-n", ns])["status"].clone();
        let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
        let ready = conditions.into_iter().find(|c| c["type"] == "Ready")?;
        ready["reason"].as_str().map(str::to_owned)
    })
    .await;
    assert_eq!(reason, "RepositoryNotAllowed");
    assert!(operator.is_running(), "{}", operator.logs());
}
