//! What the tests through real containers share: the images, a scratch folder, rest-server, the
//! operator's container (on the host network, its kubeconfig mounted, as the chart's
//! ServiceAccount), and the Kubernetes objects and runs of a test (each Job run as a container by
//! `support::kubelet`).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use neverwiped_testkit::program;
use serde_json::{json, Value};

use super::kubelet::{docker, docker_ok, engine_or_skip, Ending, Kubelet, PodRun};
use super::postgres::postgres_bin;
use super::*;

/// The images, `neverwiped/<name>:dev` as `scripts/build-images.sh` tags them, or of the tag in
/// `NEVERWIPED_TEST_IMAGE_TAG` (`scripts/build-images.sh --tag TAG`).
pub fn image(name: &str) -> String {
    let tag = std::env::var("NEVERWIPED_TEST_IMAGE_TAG").unwrap_or_else(|_| "dev".into());
    format!("neverwiped/{name}:{tag}")
}
pub static OPERATOR_IMAGE: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| image("operator"));
pub static SIDECAR_IMAGE_DEV: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| image("sidecar"));
pub const REPOSITORY_PASSWORD: &str = "correct horse battery staple 7f3a";
/// A run of the sidecar in a container takes longer than the operator's other reactions.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------------------------
// The parts: a scratch folder, rest-server, PostgreSQL, the operator's container.

/// A folder removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let path = std::env::temp_dir().join(format!("neverwiped-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("a scratch folder");
        Scratch(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Skips (or where every test must run, fails) when a program is missing.
pub fn programs_or_skip(names: &[&str]) -> bool {
    names.iter().all(|name| {
        neverwiped_testkit::require_that(
            program(name).is_some() || postgres_bin(name).is_some(),
            format_args!("{name} is missing"),
            "install Debian's postgresql and coreutils and the peers (../shared/tools/install-peers.sh), or run scripts/test.sh",
        )
    })
}

/// rest-server without a login over a scratch folder of its own (removed after the server).
pub struct RestServer {
    server: neverwiped_testkit::RestServer,
    data: Scratch,
}

impl RestServer {
    pub fn start(name: &str) -> RestServer {
        let data = Scratch::new(&format!("{name}-rest"));
        RestServer {
            server: neverwiped_testkit::RestServer::start(&data.0, None, false),
            data,
        }
    }

    pub fn url(&self, repository: &str) -> String {
        self.server.url(repository)
    }

    /// The folder it serves: each repository is a folder below it.
    pub fn data(&self) -> &std::path::Path {
        &self.data.0
    }

    /// Stops the gate: its URL refuses connections until [`RestServer::start_again`].
    pub fn stop(&mut self) {
        self.server.stop();
    }

    /// Starts the stopped gate again, on its URL and folder.
    pub fn start_again(&mut self) {
        self.server.start_again();
    }
}

/// The operator, from its image: the host's network, a read-only root, no capabilities, its
/// image's user, the kubeconfig mounted read-only.
pub struct OperatorContainer {
    name: String,
    /// Where it serves `/healthz` and `/metrics`.
    pub port: u16,
    _config: Scratch,
}

impl OperatorContainer {
    /// The operator, its policy allowing privileged movers in `namespace`.
    pub fn start(namespace: &str) -> OperatorContainer {
        let policy = format!(r#"{{"privilegedMoverNamespaces":["{namespace}"]}}"#);
        OperatorContainer::start_with_policy(namespace, &policy)
    }

    /// The operator with this tenant policy (`NEVERWIPED_TENANT_POLICY`).
    pub fn start_with_policy(namespace: &str, policy: &str) -> OperatorContainer {
        OperatorContainer::start_in(Some(namespace), namespace, policy, &[])
    }

    /// The operator watching `watch` (every namespace without) as the chart's ServiceAccount of
    /// `own_namespace`, with this tenant policy and `extra` environment.
    pub fn start_in(
        watch: Option<&str>,
        own_namespace: &str,
        policy: &str,
        extra: &[(&str, &str)],
    ) -> OperatorContainer {
        let config = Scratch::new(&format!("{own_namespace}-operator"));
        let kubeconfig = config.0.join("kubeconfig");
        // The chart's ServiceAccount, with the chart's rights only.
        let source = super::identity::operator_kubeconfig(own_namespace);
        std::fs::copy(source, &kubeconfig).expect("the kubeconfig is copied");
        // Readable by the image's user (65532), in a folder only this test uses.
        std::fs::set_permissions(&kubeconfig, std::fs::Permissions::from_mode(0o644))
            .expect("its mode");
        let port = free_port();
        let name = format!("nw-operator-{}", watch.unwrap_or(own_namespace));
        let _ = docker(&["rm", "--force", &name]);
        let mount = format!(
            "type=bind,source={},target=/etc/neverwiped/kubeconfig,readonly",
            kubeconfig.display()
        );
        let env = [
            "KUBECONFIG=/etc/neverwiped/kubeconfig".to_owned(),
            format!("NEVERWIPED_SIDECAR_IMAGE={}", *SIDECAR_IMAGE_DEV),
            format!("NEVERWIPED_TENANT_POLICY={policy}"),
            format!("NEVERWIPED_HTTP_ADDR=127.0.0.1:{port}"),
            format!("NEVERWIPED_LEASE_NAMESPACE={own_namespace}"),
            format!("POD_NAMESPACE={own_namespace}"),
            format!("POD_NAME={name}"),
            "RUST_LOG=info,neverwiped_operator=debug".to_owned(),
        ];
        let watched = watch.map(|namespace| format!("NEVERWIPED_WATCH_NAMESPACE={namespace}"));
        let env: Vec<String> = env
            .into_iter()
            .chain(watched)
            .chain(extra.iter().map(|(key, value)| format!("{key}={value}")))
            .collect();
        let mut args = vec![
            "run",
            "--detach",
            "--name",
            &name,
            "--network",
            "host",
            "--read-only",
        ];
        args.extend([
            "--cap-drop=ALL",
            "--security-opt",
            "no-new-privileges",
            "--mount",
            &mount,
        ]);
        for pair in &env {
            args.extend(["--env", pair]);
        }
        args.push(OPERATOR_IMAGE.as_str());
        docker_ok(&args);
        let operator = OperatorContainer {
            name,
            port,
            _config: config,
        };
        wait_healthy(port, &operator.name);
        operator
    }

    pub fn logs(&self) -> String {
        container_logs(&self.name)
    }
}

pub fn healthy(port: u16) -> bool {
    http_get(port, "/healthz").is_some()
}

/// Waits until the operator in `container` serves `/healthz` on `port`; fails with its logs.
pub fn wait_healthy(port: u16, container: &str) {
    let deadline = Instant::now() + ACT_TIMEOUT;
    while !healthy(port) {
        assert!(
            Instant::now() < deadline,
            "the operator does not serve /healthz:\n{}",
            container_logs(container)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What `container` wrote to its standard output and error.
pub fn container_logs(container: &str) -> String {
    let output = docker(&["logs", container]);
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The body of `GET path` on the operator's port, when it answers 200.
pub fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut response = String::new();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    stream.read_to_string(&mut response).ok()?;
    let ok = response.starts_with("HTTP/1.1 200") || response.starts_with("HTTP/1.0 200");
    let (_, body) = response.split_once("\r\n\r\n")?;
    ok.then(|| body.to_owned())
}

impl Drop for OperatorContainer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let logs = self.logs();
            let tail: Vec<&str> = logs.lines().rev().take(80).collect();
            eprintln!("--- last lines of the operator container {}:", self.name);
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
        let _ = docker(&["rm", "--force", &self.name]);
    }
}

// Kubernetes objects.

pub fn apply(object: &Value) {
    kubectl_stdin(&["apply", "-f", "-"], Some(&object.to_string()));
}

pub fn secret(namespace: &str, name: &str, pairs: &[(&str, &str)]) {
    let data: BTreeMap<&str, &str> = pairs.iter().copied().collect();
    apply(
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace}, "stringData": data}),
    );
}

pub fn claim(namespace: &str, name: &str) {
    apply(&json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }));
}

pub fn plan(namespace: &str, name: &str, repository: &str, spec: Value) -> Value {
    let mut plan = json!({
        "apiVersion": "neverwiped.io/v1alpha1", "kind": "BackupPlan",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedule": "30 2 * * *",
            // The first generation's manual run: the Job `<name>-manual-1`.
            "manualTrigger": "now",
            "repository": {"url": repository, "passwordSecretRef": {"name": "repository", "key": "password"}},
            "copyMethod": "Direct",
        },
    });
    for (key, value) in spec.as_object().expect("an object") {
        plan["spec"][key] = value.clone();
    }
    plan
}

pub fn plan_status(namespace: &str, name: &str) -> Value {
    kubectl_json(&["get", "backupplans.neverwiped.io", name, "-n", namespace])["status"].clone()
}

/// The plan's status once the operator recorded the run of `job`.
pub async fn recorded(namespace: &str, plan: &str, job: &str) -> Value {
    eventually(
        &format!("the run of {job} on {plan}'s status"),
        ACT_TIMEOUT,
        || async {
            let status = plan_status(namespace, plan);
            (status["lastRun"]["jobName"] == job && status["activeRun"].is_null()).then_some(status)
        },
    )
    .await
}

/// Waits for the Job, runs it as a container and says how it went when it did not succeed.
pub async fn run(
    kubelet: &mut Kubelet,
    client: &kube::Client,
    namespace: &str,
    job: &str,
) -> PodRun {
    job_created(client, namespace, job).await;
    let started = Instant::now();
    let run = tokio::time::timeout(RUN_TIMEOUT + Duration::from_secs(120), kubelet.run_job(job))
        .await
        .unwrap_or_else(|_| panic!("the Job {job} did not end"));
    eprintln!(
        "{job}: {:?} after {:.1}s",
        run.ending,
        started.elapsed().as_secs_f64()
    );
    run
}

/// Applies a Restore of the plan `nightly`'s latest snapshot, runs its Job as a container and
/// returns its status once Succeeded, with how its container ran.
pub async fn restore(
    kubelet: &mut Kubelet,
    client: &kube::Client,
    namespace: &str,
    name: &str,
    spec: Value,
) -> (Value, PodRun) {
    let mut restore = json!({
        "apiVersion": "neverwiped.io/v1alpha1", "kind": "Restore",
        "metadata": {"name": name, "namespace": namespace, "annotations": {
            // The admin's identity, which the chart's admission policy would have the admin write.
            "neverwiped.io/requested-by": "admin",
            "neverwiped.io/requested-by-groups": "system:masters",
        }},
        "spec": {"backupPlanName": "nightly", "snapshot": "latest"},
    });
    for (key, value) in spec.as_object().expect("an object") {
        restore["spec"][key] = value.clone();
    }
    apply(&restore);
    let job = format!("{name}-restore");
    let run = run(kubelet, client, namespace, &job).await;
    assert!(
        succeeded(&run),
        "the restore pod failed: {:?}\n{}",
        run.ending,
        container_config(&run)
    );
    let status = eventually(
        &format!("the Restore {name} to finish"),
        ACT_TIMEOUT,
        || async {
            let status = kubectl_json(&["get", "restores.neverwiped.io", name, "-n", namespace])
                ["status"]
                .clone();
            (status["phase"] == "Succeeded" || status["phase"] == "Failed").then_some(status)
        },
    )
    .await;
    assert_eq!(
        status["phase"],
        "Succeeded",
        "{status:#}\n{}",
        container_config(&run)
    );
    (status, run)
}

pub fn succeeded(run: &PodRun) -> bool {
    matches!(&run.ending, Ending::Exited { exit_code: 0, .. })
}

pub fn container_config(run: &PodRun) -> String {
    format!("options {:?}\nlogs:\n{}", run.run_options, run.logs)
}

/// Everything but the operator and the engine: skip when a part is missing.
pub fn parts_or_skip() -> bool {
    api_server_or_skip()
        && engine_or_skip(&[OPERATOR_IMAGE.as_str(), SIDECAR_IMAGE_DEV.as_str()])
        && programs_or_skip(&["rest-server", "initdb", "postgres", "psql", "sha256sum"])
}
