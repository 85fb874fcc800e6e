//! What the tests that run the operator binary share: the API server from `KUBECONFIG`, `kubectl`,
//! a namespace per test, the operator process, and playing the Job controller and the kubelet.
//!
//! The server is found through `KUBECONFIG` (e.g. `../shared/tools/real-apiserver.sh up`). Without
//! one the tests skip loudly; under CI a missing server fails them.

#![allow(dead_code)]

pub mod alert_rules;
pub mod chart_render;
pub mod containers;
pub mod csi;
pub mod identity;
pub mod kubelet;
pub mod postgres;
pub mod stores;
pub mod tenant;
pub mod volumes;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use neverwiped_contract::{ExitStatus, Operation, RunResult, RESULT_FORMAT_VERSION};
use serde_json::json;

/// The sidecar image the test operators put in their Jobs.
pub const SIDECAR_IMAGE: &str = "ghcr.io/neverwiped/sidecar:test";

/// How long a test waits for the operator to act.
pub const ACT_TIMEOUT: Duration = Duration::from_secs(30);

// Not every test binary uses every one of these.
#[allow(unused_imports)]
pub use neverwiped_testkit::{
    api_server_or_skip, apply_crds, eventually, free_port, kubectl, kubectl_json, kubectl_output,
    kubectl_path, kubectl_stdin, repo_root, service_account_kubeconfig, user_kubeconfig,
    wait_for_crds, TestNamespace,
};

/// Sets plan `plan`'s `spec.manualTrigger` to `value`, as a person would with kubectl: one backup
/// now.
pub fn trigger_backup(namespace: &str, plan: &str, value: &str) {
    let patch = json!({"spec": {"manualTrigger": value}}).to_string();
    kubectl(&plan_patch_args(namespace, plan, &patch));
}

/// kubectl's arguments that merge `patch` (JSON) into plan `plan`.
pub fn plan_patch_args<'a>(namespace: &'a str, plan: &'a str, patch: &'a str) -> [&'a str; 8] {
    [
        "patch",
        "backupplan",
        plan,
        "-n",
        namespace,
        "--type=merge",
        "-p",
        patch,
    ]
}

/// Creates the Secret `name` holding `data` (key, value), through kubectl's standard input: no
/// value appears on a command line.
pub fn create_secret(namespace: &str, name: &str, data: &[(&str, &str)]) {
    neverwiped_testkit::create_secret(namespace, name, "Opaque", data);
}

/// Creates a `kubernetes.io/basic-auth` Secret, as the plans' credentials are.
pub fn create_basic_auth_secret(namespace: &str, name: &str, username: &str, password: &str) {
    let data = [("username", username), ("password", password)];
    neverwiped_testkit::create_secret(namespace, name, "kubernetes.io/basic-auth", &data);
}

/// What a test against the API server starts from: the CRDs applied, a namespace of its own (gone
/// with it), and a client.
pub struct TestWorld {
    pub namespace: TestNamespace,
    pub client: Client,
}

/// Sets up a test against the API server; `None` when there is none (the test skips; see
/// [`api_server_or_skip`]).
pub async fn test_world(prefix: &str) -> Option<TestWorld> {
    if !api_server_or_skip() {
        return None;
    }
    apply_crds();
    Some(TestWorld {
        namespace: TestNamespace::create(prefix),
        client: client().await,
    })
}

/// A running `neverwiped-operator` process; killed when dropped. Its logs go to a file, printed
/// when a test fails.
pub struct Operator {
    child: Child,
    pub port: u16,
    pub identity: String,
    log: PathBuf,
}

impl Operator {
    /// Starts the operator, limited to `namespace`, with its Lease in `namespace`.
    pub fn start(namespace: &str) -> Operator {
        Operator::start_with(namespace, "operator", &[])
    }

    /// Starts the operator with the identity `identity` and extra environment, as the chart's
    /// ServiceAccount of the release named after `namespace` ([`identity::operator_kubeconfig`]).
    pub fn start_with(namespace: &str, identity: &str, env: &[(&str, &str)]) -> Operator {
        let kubeconfig = identity::operator_kubeconfig(namespace);
        Operator::start_as(&kubeconfig, namespace, identity, env)
    }

    /// Starts the operator as the user of `kubeconfig`, limited to `namespace`, with its Lease in
    /// `namespace`, the identity `identity` and extra environment.
    /// The operator watching `namespace` as the chart's ServiceAccount of `own_namespace`, its
    /// lease there too, with `env` besides.
    pub fn start_as_chart(namespace: &str, own_namespace: &str, env: &[(&str, &str)]) -> Operator {
        let kubeconfig = identity::operator_kubeconfig(own_namespace);
        let own = [
            ("POD_NAMESPACE", own_namespace),
            ("NEVERWIPED_LEASE_NAMESPACE", own_namespace),
        ];
        let env: Vec<(&str, &str)> = own.into_iter().chain(env.iter().copied()).collect();
        Operator::start_as(&kubeconfig, namespace, "operator", &env)
    }

    pub fn start_as(
        kubeconfig: &std::path::Path,
        namespace: &str,
        identity: &str,
        env: &[(&str, &str)],
    ) -> Operator {
        let port = free_port();
        let log = std::env::temp_dir().join(format!("{namespace}-{identity}.log"));
        let log_file = std::fs::File::create(&log).expect("a log file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_neverwiped-operator"));
        command
            .env("KUBECONFIG", kubeconfig)
            .env("NEVERWIPED_SIDECAR_IMAGE", SIDECAR_IMAGE)
            .env("NEVERWIPED_HTTP_ADDR", format!("127.0.0.1:{port}"))
            .env("NEVERWIPED_WATCH_NAMESPACE", namespace)
            .env("NEVERWIPED_LEASE_NAMESPACE", namespace)
            .env("POD_NAME", identity)
            .env("RUST_LOG", "info,neverwiped_operator=debug")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("a log file"))
            .stderr(log_file);
        for (key, value) in env {
            command.env(key, value);
        }
        Operator::spawn(command, port, identity, log)
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The process id (to read its memory from `/proc`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills the process at once (SIGKILL), as a crashed node would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Asks the process to stop (SIGTERM) and waits for it.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }

    /// The body of a GET on the operator's HTTP port, when it answers 200.
    pub fn get(&self, path: &str) -> Option<String> {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let (head, body) = response.split_once("\r\n\r\n")?;
        head.starts_with("HTTP/1.0 200")
            .then(|| body.to_owned())
            .or_else(|| head.starts_with("HTTP/1.1 200").then(|| body.to_owned()))
    }

    pub fn metrics(&self) -> String {
        self.get("/metrics").unwrap_or_default()
    }

    /// The value of the metric line starting with `series` (name and labels), if exported.
    pub fn metric(&self, series: &str) -> Option<f64> {
        self.metrics().lines().find_map(|line| {
            let rest = line.strip_prefix(series)?;
            rest.trim().split(' ').next()?.parse().ok()
        })
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let logs = self.logs();
            let tail: Vec<&str> = logs.lines().rev().take(60).collect();
            eprintln!(
                "--- last lines of operator {} ({}):",
                self.identity,
                self.log.display()
            );
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

pub async fn client() -> Client {
    Client::try_default()
        .await
        .expect("a client from KUBECONFIG")
}

/// Waits until the Job `name` exists, and returns it.
pub async fn job_created(client: &Client, namespace: &str, name: &str) -> Job {
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    eventually(&format!("Job {name}"), ACT_TIMEOUT, || {
        let jobs = jobs.clone();
        async move { jobs.get_opt(name).await.ok().flatten() }
    })
    .await
}

/// The names of the namespace's Jobs with `label`.
pub async fn job_names(client: &Client, namespace: &str, label: &str) -> Vec<String> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let mut names: Vec<String> = jobs
        .list(&kube::api::ListParams::default().labels(label))
        .await
        .expect("Jobs list")
        .items
        .iter()
        .map(|job| job.name_any())
        .collect();
    names.sort();
    names
}

/// A sidecar result as the real sidecar writes it.
pub fn run_result(operation: Operation, status: ExitStatus) -> RunResult {
    let now = jiff::Timestamp::now();
    RunResult {
        hooks: Vec::new(),
        paused_secs: None,
        streams: Vec::new(),
        verification: None,
        version: RESULT_FORMAT_VERSION,
        operation,
        status,
        snapshot_id: matches!(status, ExitStatus::Success | ExitStatus::Partial)
            .then(|| "5f0c3e9a1b2d4c6e8f0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f506".into()),
        snapshot_time: None,
        started_at: (now - jiff::SignedDuration::from_secs(61)).to_string(),
        finished_at: now.to_string(),
        duration_secs: 61.0,
        files: 1234,
        bytes_read: 987_654_321,
        bytes_added: 1_234_567,
        bytes_transferred: 1_300_000,
        bytes_per_second: None,
        databases: vec![],
        warnings_total: 0,
        warnings: vec![],
        error: None,
        repository: None,
        snapshots_forgotten: None,
        prune: None,
        check: None,
        host_snapshots: None,
        key_id: None,
        changes: None,
        drill: None,
        sources: None,
    }
}

/// How the test, playing the kubelet, ends the sidecar container.
pub enum Ending {
    /// The container exits with `exit_code` and the result as its termination message.
    Result {
        exit_code: i32,
        result: Box<RunResult>,
    },
    /// The kernel kills the container for memory: no result.
    OomKilled,
    /// The Job controller stops the run at its deadline and deletes the pod.
    DeadlineExceeded,
    /// The pod is killed (SIGKILL, node lost) without a result.
    Killed,
}

/// Plays the Job controller and the kubelet: creates the Job's pod from its template, ends its
/// container as `ending` says, and sets the Job's status to Complete or Failed.
pub async fn finish_job(client: &Client, namespace: &str, name: &str, ending: Ending) {
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let job = jobs.get(name).await.expect("the Job exists");
    let now = jiff::Timestamp::now();
    let started = (now - jiff::SignedDuration::from_secs(61)).to_string();
    let now = now.to_string();

    let terminated = match &ending {
        Ending::Result { exit_code, result } => Some(json!({
            "exitCode": exit_code,
            "reason": if *exit_code == 0 { "Completed" } else { "Error" },
            "message": result.to_termination_message(),
            "startedAt": started, "finishedAt": now,
        })),
        Ending::OomKilled => Some(json!({
            "exitCode": 137, "reason": "OOMKilled", "startedAt": started, "finishedAt": now,
        })),
        Ending::Killed => Some(json!({
            "exitCode": 137, "reason": "Error", "startedAt": started, "finishedAt": now,
        })),
        Ending::DeadlineExceeded => None,
    };
    if let Some(terminated) = terminated {
        let template = job
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.clone())
            .expect("a pod template");
        let mut labels = job
            .spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        labels.insert("batch.kubernetes.io/job-name".into(), name.into());
        labels.insert("job-name".into(), name.into());
        let mut pod_spec = serde_json::to_value(&template).expect("a pod spec");
        pod_spec["nodeName"] = json!("node-a");
        let pod_name = format!("{name}-x7k2p");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": pod_name,
                "labels": labels,
                "ownerReferences": [{
                    "apiVersion": "batch/v1", "kind": "Job", "name": name,
                    "uid": job.uid().expect("a uid"), "controller": true, "blockOwnerDeletion": true,
                }],
            },
            "spec": pod_spec,
        }))
        .expect("a pod");
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("the pod is created");
        let failed = terminated["exitCode"] != json!(0);
        let status = json!({"status": {
            "phase": if failed { "Failed" } else { "Succeeded" },
            "startTime": started,
            "containerStatuses": [{
                "name": "sidecar", "image": SIDECAR_IMAGE, "imageID": "", "ready": false,
                "restartCount": 0, "started": false, "state": {"terminated": terminated},
            }],
        }});
        pods.patch_status(&pod_name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .expect("the pod's status is set");
    }

    let job_status = match &ending {
        Ending::Result { exit_code: 0, .. } => json!({
            "startTime": started, "completionTime": now, "succeeded": 1, "active": 0,
            "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": now},
                {"type": "Complete", "status": "True", "lastTransitionTime": now},
            ],
        }),
        Ending::DeadlineExceeded => json!({
            "startTime": started, "failed": 1, "active": 0,
            "conditions": [
                {"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded",
                 "message": "Job was active longer than specified deadline", "lastTransitionTime": now},
                {"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
                 "message": "Job was active longer than specified deadline", "lastTransitionTime": now},
            ],
        }),
        _ => json!({
            "startTime": started, "failed": 1, "active": 0,
            "conditions": [
                {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded",
                 "message": "Job has reached the specified backoff limit", "lastTransitionTime": now},
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                 "message": "Job has reached the specified backoff limit", "lastTransitionTime": now},
            ],
        }),
    };
    jobs.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({ "status": job_status })),
    )
    .await
    .expect("the Job's status is set");
}

/// The sidecar's arguments in a Job.
pub fn args_of(job: &Job) -> Vec<String> {
    job.spec
        .as_ref()
        .and_then(|spec| spec.template.spec.as_ref())
        .and_then(|pod| pod.containers[0].args.clone())
        .unwrap_or_default()
}

/// The rows of a `kubectl get` table as column name → value maps. Columns are separated by at
/// least three spaces (kubectl's padding); values such as a cron schedule hold single spaces.
pub fn table(output: &str) -> Vec<std::collections::BTreeMap<String, String>> {
    let mut lines = output.lines();
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let starts: Vec<(usize, String)> = column_starts(header);
    lines
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let mut row = std::collections::BTreeMap::new();
            for (index, (start, name)) in starts.iter().enumerate() {
                let end = starts
                    .get(index + 1)
                    .map(|(next, _)| *next)
                    .unwrap_or(line.len());
                let value = line.get(*start..end.min(line.len())).unwrap_or("").trim();
                row.insert(name.clone(), value.to_owned());
            }
            row
        })
        .collect()
}

fn column_starts(header: &str) -> Vec<(usize, String)> {
    // A column name may hold one space ("LAST RESULT"); columns are apart by at least three.
    let mut starts = Vec::new();
    let bytes = header.as_bytes();
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b' ' {
            index += 1;
            continue;
        }
        let start = index;
        while index < bytes.len() && !header[index..].starts_with("   ") {
            index += 1;
        }
        starts.push((start, header[start..index].trim().to_owned()));
    }
    starts
}

impl Operator {
    /// Spawns `command` (the operator, serving HTTP on `port`) and waits until it is healthy.
    fn spawn(mut command: Command, port: u16, identity: &str, log: PathBuf) -> Operator {
        let child = command.spawn().expect("the operator starts");
        let operator = Operator {
            child,
            port,
            identity: identity.to_owned(),
            log,
        };
        let deadline = Instant::now() + ACT_TIMEOUT;
        while operator.get("/healthz").is_none() {
            assert!(
                Instant::now() < deadline,
                "the operator does not serve /healthz:\n{}",
                operator.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        operator
    }

    /// Starts the operator with exactly `env` and `args`, as a container runs it, as the user of
    /// `kubeconfig`: nothing of the test's environment is inherited, and `NEVERWIPED_HTTP_ADDR` is
    /// replaced by a free loopback port (the only setting that cannot be kept outside a pod). Its
    /// logs go to `<log_name>.log` in the temporary directory.
    pub fn start_with_exact_env(
        kubeconfig: &std::path::Path,
        log_name: &str,
        identity: &str,
        args: &[String],
        env: &[(String, String)],
    ) -> Operator {
        let port = free_port();
        let log = std::env::temp_dir().join(format!("{log_name}.log"));
        let log_file = std::fs::File::create(&log).expect("a log file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_neverwiped-operator"));
        command.env_clear().args(args).env("KUBECONFIG", kubeconfig);
        for (key, value) in env {
            command.env(key, value);
        }
        command
            .env("NEVERWIPED_HTTP_ADDR", format!("127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("a log file"))
            .stderr(log_file);
        Operator::spawn(command, port, identity, log)
    }
}
