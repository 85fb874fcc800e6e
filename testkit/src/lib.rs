//! What the test suites of the operator and the plugin share: the real API server from
//! `KUBECONFIG` with the committed CRDs applied, `kubectl`, a namespace per test, a free port, the
//! gate's front (one URL, a rest-server per login), and waiting for something to become true.
//!
//! The server is found through `KUBECONFIG` (e.g. `../shared/tools/real-apiserver.sh up`). Without
//! one a test skips loudly, or fails where every test must run: what any test needs from the
//! machine goes through [`require()`] and its neighbours.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod gate_front;
mod require;
mod rest_server;
mod users;
pub use gate_front::{request_as, GateFront};
pub use require::{every_test_must_run, missing, require, require_that, SKIP_LOG};
pub use rest_server::{GatePair, Login, RestServer};
pub use users::{delete_with_namespace, service_account_kubeconfig, user_kubeconfig, USER_SCRIPT};

/// Where the peers' programs (rest-server, restic, kubectl) are unpacked when they are not on
/// `PATH`.
const PEERS_BIN: &str = "/opt/neverwiped-peers/bin";

/// The field manager of every object the tests apply server-side, so that parallel test processes
/// applying the same CRDs never conflict.
const FIELD_MANAGER: &str = "--field-manager=neverwiped-test";

/// Whether an API server is configured; `false` (after a recorded skip) skips the test, except
/// where every test must run ([`require()`]), where a missing server fails it.
pub fn api_server_or_skip() -> bool {
    let configured = std::env::var_os("KUBECONFIG")
        .map(PathBuf::from)
        .is_some_and(|path| path.is_file());
    require_that(
        configured,
        "KUBECONFIG does not name a kubeconfig file",
        "start ../shared/tools/real-apiserver.sh up and export its KUBECONFIG, or run scripts/test.sh",
    )
}

/// The repository's root folder (the workspace's).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A program from `PATH`, else from the peers' folder.
pub fn program(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(name))
                .find(|candidate| candidate.is_file())
        })
        .or_else(|| {
            let peer = Path::new(PEERS_BIN).join(name);
            peer.is_file().then_some(peer)
        })
}

/// `kubectl` from `PATH`, else the peers' copy; panics when there is neither.
pub fn kubectl_path() -> PathBuf {
    program("kubectl").unwrap_or_else(|| panic!("kubectl is neither on PATH nor in {PEERS_BIN}"))
}

/// Runs kubectl (as the admin of `KUBECONFIG`), `stdin` on its standard input; returns its output
/// whatever its exit status.
pub fn kubectl_output(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(kubectl_path())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl starts");
    let mut input = child.stdin.take().expect("kubectl's standard input");
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).expect("kubectl reads");
    }
    drop(input);
    child.wait_with_output().expect("kubectl finishes")
}

/// Runs kubectl and returns its standard output; panics with its error when it fails.
pub fn kubectl(args: &[&str]) -> String {
    kubectl_stdin(args, None)
}

/// Runs kubectl with `stdin` on its standard input and returns its standard output; panics with
/// its error when it fails.
pub fn kubectl_stdin(args: &[&str], stdin: Option<&str>) -> String {
    let output = kubectl_output(args, stdin);
    assert!(
        output.status.success(),
        "kubectl {} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `kubectl get ... -o json`, parsed.
pub fn kubectl_json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&kubectl(&all)).expect("kubectl prints JSON")
}

/// Applies the committed CRDs (once per test process) and waits until they are established.
pub fn apply_crds() {
    static APPLIED: Once = Once::new();
    APPLIED.call_once(|| {
        let crds = repo_root().join("crds");
        let crds = crds.to_str().expect("a UTF-8 path");
        kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            FIELD_MANAGER,
            "-f",
            crds,
        ]);
        wait_for_crds();
    });
}

/// Waits until the API server serves both CRDs (`Established`), however they were applied.
pub fn wait_for_crds() {
    kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=30s",
        "crd/backupplans.neverwiped.io",
        "crd/restores.neverwiped.io",
    ]);
}

/// Creates the Secret `name` of `type_` holding `data` (key, value) in `namespace`, through
/// kubectl's standard input: no value appears on a command line.
pub fn create_secret(namespace: &str, name: &str, type_: &str, data: &[(&str, &str)]) {
    let string_data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(key, value)| (key.to_string(), Value::from(*value)))
        .collect();
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": type_,
        "stringData": string_data,
    });
    kubectl_stdin(&["create", "-f", "-"], Some(&secret.to_string()));
}

/// A namespace of its own for one test; deleted (with what is in it) when dropped.
pub struct TestNamespace {
    pub name: String,
}

impl TestNamespace {
    /// Creates `nw-PREFIX-PID-NANOS`: unique across the test processes sharing one API server.
    pub fn create(prefix: &str) -> TestNamespace {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!("nw-{prefix}-{}-{nanos:x}", std::process::id());
        kubectl(&["create", "namespace", &name]);
        TestNamespace { name }
    }

    /// Creates an object of this namespace from its JSON.
    pub fn create_object(&self, object: &Value) {
        kubectl_stdin(
            &["create", "-n", &self.name, "-f", "-"],
            Some(&object.to_string()),
        );
    }

    /// Creates a Secret of this namespace (see [`create_secret`]).
    pub fn create_secret(&self, name: &str, type_: &str, data: &[(&str, &str)]) {
        create_secret(&self.name, name, type_, data);
    }

    /// Takes the finalizers off this namespace's BackupPlans and Restores, which an operator that
    /// is gone would never remove, so that the namespace can go.
    fn drop_finalizers(&self) {
        for kind in ["backupplans.neverwiped.io", "restores.neverwiped.io"] {
            let listed = kubectl_output(&["get", kind, "-n", &self.name, "-o", "name"], None);
            for object in String::from_utf8_lossy(&listed.stdout).lines() {
                let no_finalizers = r#"{"metadata":{"finalizers":null}}"#;
                let patch = [
                    "patch",
                    object,
                    "-n",
                    &self.name,
                    "--type=merge",
                    "-p",
                    no_finalizers,
                ];
                let _ = kubectl_output(&patch, None);
            }
        }
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        self.drop_finalizers();
        let _ = kubectl_output(&["delete", "namespace", &self.name, "--wait=false"], None);
        users::delete_cluster_objects_of(&self.name);
    }
}

/// A port on loopback nobody listens on (yet).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port")
}

/// Polls `check` every 200 ms until it returns `Some`, or panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod summary_tests;
