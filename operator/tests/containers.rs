//! End to end through real containers: the operator runs from its image (a container on the host
//! network, its kubeconfig mounted) against the real API server, and every Job it creates runs as
//! a container of the sidecar image under the pod's own security context (`support::kubelet`),
//! against rest-server and real PostgreSQL servers on loopback.
//!
//! Needs a container engine with `neverwiped/operator:dev` and `neverwiped/sidecar:dev`
//! (`scripts/build-images.sh`), an API server (`KUBECONFIG`), rest-server and PostgreSQL. Without
//! them the tests skip loudly; under CI they fail (`neverwiped_testkit::require_that`).

mod support;

#[path = "containers/never_wiped.rs"]
mod never_wiped;

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use neverwiped_testkit::program;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::kubelet::{docker, docker_ok, engine_or_skip, Ending, Kubelet, PodRun};
use support::*;

/// The images, `neverwiped/<name>:dev` as `scripts/build-images.sh` tags them, or of the tag in
/// `NEVERWIPED_TEST_IMAGE_TAG` (`scripts/build-images.sh --tag TAG`).
fn image(name: &str) -> String {
    let tag = std::env::var("NEVERWIPED_TEST_IMAGE_TAG").unwrap_or_else(|_| "dev".into());
    format!("neverwiped/{name}:{tag}")
}
static OPERATOR_IMAGE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| image("operator"));
static SIDECAR_IMAGE_DEV: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| image("sidecar"));
const REPOSITORY_PASSWORD: &str = "correct horse battery staple 7f3a";
const PG_ADMIN: &str = "admin";
const PG_PASSWORD: &str = "pg p@ss:wörd 9c";
/// A run of the sidecar in a container takes longer than the operator's other reactions.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------------------------
// The parts: a scratch folder, rest-server, PostgreSQL, the operator's container.

/// A folder removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
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
fn programs_or_skip(names: &[&str]) -> bool {
    names.iter().all(|name| {
        neverwiped_testkit::require_that(
            program(name).is_some() || postgres_bin(name).is_some(),
            format_args!("{name} is missing"),
            "install Debian's postgresql and coreutils and the peers (../shared/tools/install-peers.sh), or run scripts/test.sh",
        )
    })
}

/// rest-server without a login over a scratch folder of its own (removed after the server).
struct RestServer {
    server: neverwiped_testkit::RestServer,
    _data: Scratch,
}

impl RestServer {
    fn start(name: &str) -> RestServer {
        let data = Scratch::new(&format!("{name}-rest"));
        RestServer {
            server: neverwiped_testkit::RestServer::start(&data.0, None, false),
            _data: data,
        }
    }

    fn url(&self, repository: &str) -> String {
        self.server.url(repository)
    }
}

/// PostgreSQL's newest server binaries of this machine (`/usr/lib/postgresql/<major>/bin`).
fn postgres_bin(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| entry.ok().map(|e| e.path().join("bin")))
        .collect();
    dirs.sort_by_key(|dir| {
        dir.parent()
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str()?.parse::<u32>().ok())
    });
    dirs.into_iter()
        .rev()
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}

/// A PostgreSQL server of its own on a loopback port, with a password-authenticated superuser.
struct Postgres {
    child: Child,
    port: u16,
    dir: Scratch,
}

impl Postgres {
    fn start(name: &str) -> Postgres {
        let dir = Scratch::new(&format!("{name}-pg"));
        // PostgreSQL refuses to run as root: as the `postgres` user of the Debian package.
        let (uid, gid) = postgres_user();
        std::os::unix::fs::chown(&dir.0, Some(uid), Some(gid)).expect("the folder's owner");
        let pwfile = dir.0.join("pwfile");
        std::fs::write(&pwfile, format!("{PG_PASSWORD}\n")).expect("the password file");
        std::os::unix::fs::chown(&pwfile, Some(uid), Some(gid)).expect("its owner");
        let data = dir.0.join("data");
        let initdb = Command::new(postgres_bin("initdb").expect("initdb"))
            .arg("--pgdata")
            .arg(&data)
            .args([
                &format!("--username={PG_ADMIN}"),
                "--auth=scram-sha-256",
                "--no-sync",
            ])
            .arg("--pwfile")
            .arg(&pwfile)
            .uid(uid)
            .gid(gid)
            .output()
            .expect("initdb runs");
        assert!(
            initdb.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&initdb.stderr)
        );
        let port = free_port();
        let log = std::fs::File::create(dir.0.join("server.log")).expect("a log");
        let child = Command::new(postgres_bin("postgres").expect("postgres"))
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(&dir.0)
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .uid(uid)
            .gid(gid)
            .stdout(log.try_clone().expect("a log"))
            .stderr(log)
            .spawn()
            .expect("postgres starts");
        let server = Postgres { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(60);
        while server.try_sql("postgres", "SELECT 1").is_err() {
            assert!(
                Instant::now() < deadline,
                "postgres does not start: {}",
                server.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        server
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("server.log")).unwrap_or_default()
    }

    fn try_sql(&self, database: &str, sql: &str) -> Result<String, String> {
        let output = Command::new(postgres_bin("psql").expect("psql"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                PG_ADMIN,
                "-d",
                database,
            ])
            .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .env("PGPASSWORD", PG_PASSWORD)
            .output()
            .expect("psql runs");
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    }

    fn sql(&self, database: &str, sql: &str) -> String {
        self.try_sql(database, sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGINT: PostgreSQL's fast shutdown.
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

fn postgres_user() -> (u32, u32) {
    let id = |flag: &str| -> u32 {
        let output = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .expect("id runs");
        String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse()
            .expect("the postgres user exists")
    };
    (id("-u"), id("-g"))
}

/// The operator, from its image: the host's network, a read-only root, no capabilities, its
/// image's user, the kubeconfig mounted read-only.
struct OperatorContainer {
    name: String,
    /// Where it serves `/healthz` and `/metrics`.
    port: u16,
    _config: Scratch,
}

impl OperatorContainer {
    /// The operator, its policy allowing privileged movers in `namespace`.
    fn start(namespace: &str) -> OperatorContainer {
        let policy = format!(r#"{{"privilegedMoverNamespaces":["{namespace}"]}}"#);
        OperatorContainer::start_with_policy(namespace, &policy)
    }

    /// The operator with this tenant policy (`NEVERWIPED_TENANT_POLICY`).
    fn start_with_policy(namespace: &str, policy: &str) -> OperatorContainer {
        OperatorContainer::start_in(namespace, namespace, policy, &[])
    }

    /// The operator watching `namespace` as the chart's ServiceAccount of `own_namespace`, with
    /// this tenant policy and `extra` environment.
    fn start_in(
        namespace: &str,
        own_namespace: &str,
        policy: &str,
        extra: &[(&str, &str)],
    ) -> OperatorContainer {
        let config = Scratch::new(&format!("{namespace}-operator"));
        let kubeconfig = config.0.join("kubeconfig");
        // The chart's ServiceAccount, with the chart's rights only.
        let source = support::identity::operator_kubeconfig(own_namespace);
        std::fs::copy(source, &kubeconfig).expect("the kubeconfig is copied");
        // Readable by the image's user (65532), in a folder only this test uses.
        std::fs::set_permissions(&kubeconfig, std::fs::Permissions::from_mode(0o644))
            .expect("its mode");
        let port = free_port();
        let name = format!("nw-operator-{namespace}");
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
            format!("NEVERWIPED_WATCH_NAMESPACE={namespace}"),
            format!("NEVERWIPED_LEASE_NAMESPACE={own_namespace}"),
            format!("POD_NAMESPACE={own_namespace}"),
            format!("POD_NAME={name}"),
            "RUST_LOG=info,neverwiped_operator=debug".to_owned(),
        ];
        let env: Vec<String> = env
            .into_iter()
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
        let deadline = Instant::now() + ACT_TIMEOUT;
        while !healthy(port) {
            assert!(
                Instant::now() < deadline,
                "the operator does not serve /healthz:\n{}",
                operator.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        operator
    }

    fn logs(&self) -> String {
        let output = docker(&["logs", &self.name]);
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    }
}

fn healthy(port: u16) -> bool {
    http_get(port, "/healthz").is_some()
}

/// The body of `GET path` on the operator's port, when it answers 200.
fn http_get(port: u16, path: &str) -> Option<String> {
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

// ---------------------------------------------------------------------------------------------
// Files: a volume of several owners and modes, and what a restore must give back.

/// Bytes that do not compress or deduplicate (a fixed xorshift sequence).
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

fn put(root: &Path, path: &str, bytes: &[u8], owner: (u32, u32), mode: u32) {
    let file = root.join(path);
    std::fs::create_dir_all(file.parent().expect("a parent")).expect("a folder");
    std::fs::write(&file, bytes).expect("a file");
    std::os::unix::fs::chown(&file, Some(owner.0), Some(owner.1)).expect("an owner");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).expect("a mode");
}

fn folder(root: &Path, path: &str, owner: (u32, u32), mode: u32) {
    let dir = root.join(path);
    std::fs::create_dir_all(&dir).expect("a folder");
    std::os::unix::fs::chown(&dir, Some(owner.0), Some(owner.1)).expect("an owner");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).expect("a mode");
}

/// An application's volume: files of three owners, private files (0600) and folders (0700) that
/// only their owner may read, a symlink, an empty folder, megabytes of data, and what only a
/// restore with CAP_MKNOD and CAP_FSETID gives back: a character device (`mknod c 1 3`) and a
/// set-group-ID file of a group root is not in.
fn fill_volume(root: &Path) {
    folder(root, "", (0, 0), 0o755);
    put(root, "index.html", b"<h1>shop</h1>\n", (0, 0), 0o644);
    put(
        root,
        "config/app.key",
        b"not a real key, but private\n",
        (1001, 1001),
        0o600,
    );
    folder(root, "config", (1001, 1001), 0o750);
    put(
        root,
        "uploads/private/invoice-1.pdf",
        &noise(300_000, 7),
        (1002, 1002),
        0o600,
    );
    put(
        root,
        "uploads/private/invoice-2.pdf",
        &noise(1, 9),
        (1002, 1002),
        0o600,
    );
    folder(root, "uploads/private", (1002, 1002), 0o700);
    put(
        root,
        "uploads/photo.jpg",
        &noise(3_000_000, 11),
        (1000, 1000),
        0o640,
    );
    put(root, "uploads/empty.txt", b"", (1000, 1000), 0o644);
    folder(root, "uploads", (1000, 1000), 0o755);
    folder(root, "cache-empty", (1001, 1002), 0o711);
    put(
        root,
        "bin/report",
        b"#!/bin/sh\necho report\n",
        (1000, 1002),
        0o2755,
    );
    folder(root, "bin", (1000, 1000), 0o755);
    let made = Command::new("mknod")
        .arg(root.join("bin/null"))
        .args(["c", "1", "3"])
        .status()
        .expect("mknod");
    assert!(made.success(), "mknod: {made}");
    std::os::unix::fs::lchown(root.join("bin/null"), Some(1001), Some(1002)).expect("its owner");
    std::fs::set_permissions(
        root.join("bin/null"),
        std::fs::Permissions::from_mode(0o660),
    )
    .expect("its mode");
    std::os::unix::fs::symlink("../index.html", root.join("uploads/home")).expect("a symlink");
    std::os::unix::fs::lchown(root.join("uploads/home"), Some(1000), Some(1000))
        .expect("its owner");
    for path in [
        "uploads/private/invoice-1.pdf",
        "uploads/photo.jpg",
        "index.html",
    ] {
        let file = std::fs::File::options()
            .write(true)
            .open(root.join(path))
            .expect("a file");
        file.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000))
            .expect("a time");
    }
}

/// Every entry below `root`: type, mode, owner, size, modification time, SHA-256 or link target.
fn tree(root: &Path) -> BTreeMap<String, String> {
    let mut entries = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(path) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path).expect("metadata");
        let relative = path
            .strip_prefix(root)
            .expect("below root")
            .display()
            .to_string();
        let content = if meta.file_type().is_symlink() {
            format!(
                "-> {}",
                std::fs::read_link(&path).expect("a link").display()
            )
        } else if meta.is_dir() {
            for entry in std::fs::read_dir(&path).expect("a folder") {
                pending.push(entry.expect("an entry").path());
            }
            "dir".to_owned()
        } else if meta.file_type().is_char_device() || meta.file_type().is_block_device() {
            let kind = if meta.file_type().is_char_device() {
                "char"
            } else {
                "block"
            };
            format!("{kind} device rdev={:#x}", meta.rdev())
        } else {
            sha256(&path)
        };
        // The folder itself is the claim's root: its time is the restore's, not the backup's.
        let mtime = if relative.is_empty() || meta.file_type().is_symlink() {
            0
        } else {
            meta.mtime()
        };
        entries.insert(
            format!("/{relative}"),
            format!(
                "{content} mode={:o} owner={}:{} size={} mtime={mtime}",
                meta.mode() & 0o7777,
                meta.uid(),
                meta.gid(),
                if meta.is_dir() { 0 } else { meta.size() }
            ),
        );
    }
    entries
}

/// The bytes of the regular files below `root`.
fn regular_file_sizes(root: &Path) -> u64 {
    let mut total = 0;
    let mut pending = vec![root.to_path_buf()];
    while let Some(path) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path).expect("metadata");
        if meta.is_dir() {
            pending.extend(
                std::fs::read_dir(&path)
                    .expect("a folder")
                    .map(|e| e.expect("an entry").path()),
            );
        } else if meta.is_file() {
            total += meta.size();
        }
    }
    total
}

fn sha256(path: &Path) -> String {
    let output = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum runs");
    assert!(output.status.success(), "sha256sum {}", path.display());
    String::from_utf8_lossy(&output.stdout)
        .split(' ')
        .next()
        .unwrap_or_default()
        .to_owned()
}

// ---------------------------------------------------------------------------------------------
// Kubernetes objects.

fn apply(object: &Value) {
    kubectl_stdin(&["apply", "-f", "-"], Some(&object.to_string()));
}

fn secret(namespace: &str, name: &str, pairs: &[(&str, &str)]) {
    let data: BTreeMap<&str, &str> = pairs.iter().copied().collect();
    apply(
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace}, "stringData": data}),
    );
}

fn claim(namespace: &str, name: &str) {
    apply(&json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }));
}

fn plan(namespace: &str, name: &str, repository: &str, spec: Value) -> Value {
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

fn plan_status(namespace: &str, name: &str) -> Value {
    kubectl_json(&["get", "backupplans.neverwiped.io", name, "-n", namespace])["status"].clone()
}

/// The plan's status once the operator recorded the run of `job`.
async fn recorded(namespace: &str, plan: &str, job: &str) -> Value {
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
async fn run(kubelet: &mut Kubelet, client: &kube::Client, namespace: &str, job: &str) -> PodRun {
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
async fn restore(
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

/// The `sources` that snapshot `id` of the repository at `url` records, as the workspace's
/// sidecar (`cargo build` it first) lists them.
fn recorded_sources(url: &str, id: &str) -> Value {
    let scratch = Scratch::new("sources");
    let password = scratch.0.join("password");
    std::fs::write(&password, REPOSITORY_PASSWORD).unwrap();
    let sidecar = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/neverwiped-sidecar");
    let repository = format!("rest:{url}");
    let output = Command::new(&sidecar)
        .args(["--repo", &repository, "snapshots", "--json"])
        .env("NEVERWIPED_PASSWORD_FILE", &password)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{} does not run ({e}): cargo build first",
                sidecar.display()
            )
        });
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let snapshots: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    let snapshot = snapshots.into_iter().find(|s| s["id"] == id);
    snapshot.expect("the snapshot is listed")["sources"].clone()
}

fn succeeded(run: &PodRun) -> bool {
    matches!(&run.ending, Ending::Exited { exit_code: 0, .. })
}

fn container_config(run: &PodRun) -> String {
    format!("options {:?}\nlogs:\n{}", run.run_options, run.logs)
}

/// Everything but the operator and the engine: skip when a part is missing.
fn parts_or_skip() -> bool {
    api_server_or_skip()
        && engine_or_skip(&[OPERATOR_IMAGE.as_str(), SIDECAR_IMAGE_DEV.as_str()])
        && programs_or_skip(&["rest-server", "initdb", "postgres", "psql", "sha256sum"])
}

// ---------------------------------------------------------------------------------------------
// The tests.

#[tokio::test]
async fn a_volume_and_a_database_backed_up_in_containers_restore_identically() {
    if !parts_or_skip() {
        return;
    }
    apply_crds();
    let namespace = TestNamespace::create("containers");
    let ns = namespace.name.as_str();
    let client = client().await;
    let rest = RestServer::start(ns);
    let source_db = Postgres::start(&format!("{ns}-source"));
    let target_db = Postgres::start(&format!("{ns}-target"));
    source_db.sql("postgres", "CREATE DATABASE shop");
    source_db.sql(
        "shop",
        "CREATE TABLE orders (id int PRIMARY KEY, item text NOT NULL, price numeric(10,2), placed timestamptz);
         INSERT INTO orders SELECT i, 'item ' || i || ' ''quoted'' ü', i * 1.25, '2026-01-01'::timestamptz + i * interval '1 hour'
           FROM generate_series(1, 2000) AS i;
         CREATE INDEX orders_placed ON orders (placed);",
    );
    let volumes = Scratch::new(&format!("{ns}-volumes"));
    let uploads = volumes.0.join("uploads");
    let restored = volumes.0.join("uploads-restored");
    fill_volume(&uploads);
    folder(&restored, "", (0, 0), 0o755);
    let source_tree = tree(&uploads);

    secret(ns, "repository", &[("password", REPOSITORY_PASSWORD)]);
    secret(
        ns,
        "pg-backup",
        &[("username", PG_ADMIN), ("password", PG_PASSWORD)],
    );
    claim(ns, "uploads");
    let mut kubelet = Kubelet::new(client.clone(), ns);
    kubelet.claim("uploads", &uploads);
    kubelet.claim("uploads-restored", &restored);
    let operator = OperatorContainer::start(ns);

    let database = json!([{
        "name": "orders", "type": "postgresql", "host": "127.0.0.1", "port": source_db.port,
        "credentialsSecretRef": {"name": "pg-backup"}, "databases": ["shop"],
    }]);
    apply(&plan(
        ns,
        "nightly",
        &rest.url("shop"),
        // Files of several owners, 0600 and 0700: only root with DAC_READ_SEARCH reads them all.
        json!({"volumes": [{"claimName": "uploads"}], "databases": database, "mover": {"mode": "Privileged"}}),
    ));
    let backup = run(&mut kubelet, &client, ns, "nightly-manual-1").await;
    assert!(
        succeeded(&backup),
        "the backup pod failed: {:?}\n{}",
        backup.ending,
        container_config(&backup)
    );
    // The pod ran as the operator asked: root with DAC_READ_SEARCH only, on a read-only root.
    for option in [
        "--read-only",
        "--cap-drop=ALL",
        "--cap-add=DAC_READ_SEARCH",
        "no-new-privileges",
    ] {
        assert!(
            backup.run_options.iter().any(|o| o == option),
            "{option} missing: {:?}",
            backup.run_options
        );
    }
    let status = recorded(ns, "nightly", "nightly-manual-1").await;
    assert_eq!(
        status["lastRun"]["result"],
        "Succeeded",
        "{status:#}\n{}",
        container_config(&backup)
    );
    let snapshot = status["lastRun"]["snapshotId"]
        .as_str()
        .expect("a snapshot id")
        .to_owned();
    assert_eq!(snapshot.len(), 64, "{status:#}");
    let Ending::Exited { message, .. } = &backup.ending else {
        unreachable!("succeeded")
    };
    let result: Value =
        serde_json::from_str(message).expect("the termination message is the result");
    assert_eq!(result["snapshotId"], snapshot.as_str());
    // Every byte of every file was read (none skipped for its owner or mode), and the dump.
    assert_eq!(result["warningsTotal"], 0, "{result:#}");
    let file_bytes: u64 = regular_file_sizes(&uploads);
    let dump_bytes = result["databases"][0]["dumpBytes"]
        .as_u64()
        .expect("a dump");
    assert!(dump_bytes > 100_000, "{result:#}");
    assert_eq!(
        result["bytesRead"].as_u64(),
        Some(file_bytes + dump_bytes),
        "{result:#}"
    );
    // The snapshot records what the claim and the database were, to recreate them elsewhere.
    let sources = recorded_sources(&rest.url("shop"), &snapshot);
    let claim = &sources["claims"][0];
    assert_eq!(
        (&claim["path"], &claim["name"], &claim["requestedSize"]),
        (&json!("/data/uploads"), &json!("uploads"), &json!("1Gi")),
        "{sources:#}"
    );
    assert_eq!(
        claim["accessModes"],
        json!(["ReadWriteOnce"]),
        "{sources:#}"
    );
    let database = &sources["databases"][0];
    assert_eq!(database["engine"], "postgresql", "{sources:#}");
    assert_eq!(database["databases"], json!(["shop"]), "{sources:#}");
    let version = source_db.sql("postgres", "SHOW server_version");
    assert_eq!(
        database["serverVersion"].as_str(),
        Some(version.trim()),
        "{sources:#}"
    );

    secret(
        ns,
        "pg-admin",
        &[("username", PG_ADMIN), ("password", PG_PASSWORD)],
    );
    // One Restore for the volume and the database, from the same snapshot. The target server
    // may be older than the image's pg_dump 18 (here PostgreSQL 15): its dump still restores.
    let everything = json!({
        "volumes": [{"sourceClaimName": "uploads", "targetClaimName": "uploads-restored", "createClaim": {"storage": "1Gi"}}],
        "databases": [{"name": "orders", "host": "127.0.0.1", "port": target_db.port, "credentialsSecretRef": {"name": "pg-admin"}}],
    });
    let (status, restore_run) = restore(&mut kubelet, &client, ns, "all-back", everything).await;
    assert_eq!(status["snapshotId"], snapshot.as_str(), "{status:#}");
    // Root with the restore's capabilities only, on a read-only root: no metadata of a mount
    // point of that root is changed (it could not be), and the device file and the set-group-ID
    // bit come back (checked by the tree below).
    for option in [
        "--read-only",
        "--cap-drop=ALL",
        "--cap-add=CHOWN",
        "--cap-add=DAC_OVERRIDE",
        "--cap-add=FOWNER",
        "--cap-add=FSETID",
        "--cap-add=MKNOD",
        "no-new-privileges",
    ] {
        assert!(
            restore_run.run_options.iter().any(|o| o == option),
            "{option} missing: {:?}",
            restore_run.run_options
        );
    }
    let Ending::Exited { message, .. } = &restore_run.ending else {
        unreachable!("succeeded")
    };
    let result: Value = serde_json::from_str(message).expect("the restore's result");
    assert_eq!(result["warningsTotal"], 0, "{result:#}");
    assert_eq!(
        tree(&restored),
        source_tree,
        "the restored volume differs from the source"
    );
    assert!(
        source_tree["/bin/null"].starts_with("char device rdev=0x103 mode=660 owner=1001:1002")
            && source_tree["/bin/report"].contains("mode=2755 owner=1000:1002"),
        "{source_tree:#?}"
    );
    let query = "SELECT id, item, price, placed FROM orders ORDER BY id";
    assert_eq!(target_db.sql("shop", query), source_db.sql("shop", query));
    assert_eq!(
        target_db.sql(
            "shop",
            "SELECT indexname FROM pg_indexes WHERE tablename = 'orders' ORDER BY 1"
        ),
        "orders_pkey\norders_placed\n"
    );
    drop(operator);
}

#[tokio::test]
async fn an_oom_killed_backup_and_one_past_its_deadline_say_so_with_the_real_reason() {
    if !parts_or_skip() {
        return;
    }
    apply_crds();
    let namespace = TestNamespace::create("container-ends");
    let ns = namespace.name.as_str();
    let client = client().await;
    let rest = RestServer::start(ns);
    let volumes = Scratch::new(&format!("{ns}-volumes"));
    let data = volumes.0.join("data");
    put(&data, "big.bin", &noise(64 << 20, 3), (0, 0), 0o644);
    secret(ns, "repository", &[("password", REPOSITORY_PASSWORD)]);
    claim(ns, "data");
    let mut oom_kubelet = Kubelet::new(client.clone(), ns);
    oom_kubelet.claim("data", &data);
    let mut slow_kubelet = Kubelet::new(client.clone(), ns);
    slow_kubelet.claim("data", &data);
    let _operator = OperatorContainer::start(ns);

    let volume = json!([{"claimName": "data"}]);
    let tiny_memory = json!({"resources": {"limits": {"memory": "24Mi"}}});
    apply(&plan(
        ns,
        "tight",
        &rest.url("tight"),
        json!({"volumes": volume, "pod": tiny_memory}),
    ));
    apply(&plan(
        ns,
        "slow",
        &rest.url("slow"),
        json!({"volumes": volume, "deadline": "1m", "limits": {"uploadBytesPerSecond": 65536}}),
    ));
    let (oom, slow) = tokio::join!(
        run(&mut oom_kubelet, &client, ns, "tight-manual-1"),
        run(&mut slow_kubelet, &client, ns, "slow-manual-1"),
    );

    let Ending::Exited {
        exit_code, reason, ..
    } = &oom.ending
    else {
        panic!("the tight backup did not exit: {:?}", oom.ending)
    };
    assert_eq!(
        (*exit_code, reason.as_str()),
        (137, "OOMKilled"),
        "{}",
        container_config(&oom)
    );
    let status = recorded(ns, "tight", "tight-manual-1").await;
    assert_eq!(status["lastRun"]["result"], "Failed", "{status:#}");
    assert_eq!(status["lastRun"]["reason"], "OOMKilled", "{status:#}");
    let message = status["lastRun"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("memory limit 24Mi"), "{message}");

    assert!(
        matches!(slow.ending, Ending::DeadlineExceeded { .. }),
        "{:?}\n{}",
        slow.ending,
        container_config(&slow)
    );
    let status = recorded(ns, "slow", "slow-manual-1").await;
    assert_eq!(status["lastRun"]["result"], "Failed", "{status:#}");
    assert_eq!(
        status["lastRun"]["reason"], "DeadlineExceeded",
        "{status:#}"
    );
    let message = status["lastRun"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("deadline of 1m"), "{message}");
}

/// The `--version` line of a tool in the sidecar image, run as a Job runs the image.
fn tool_version(tool: &str) -> String {
    docker_ok(&[
        "run",
        "--rm",
        "--network",
        "host",
        "--read-only",
        "--cap-drop=ALL",
        "--user",
        "65532:65532",
        "--entrypoint",
        tool,
        SIDECAR_IMAGE_DEV.as_str(),
        "--version",
    ])
}

/// The first number of `text` after `prefix`.
fn major_after(text: &str, prefix: &str) -> u32 {
    let rest = &text[text
        .find(prefix)
        .unwrap_or_else(|| panic!("{prefix:?} in {text:?}"))
        + prefix.len()..];
    rest.trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a version in {text:?}"))
}

#[test]
fn the_sidecar_image_carries_pg_dump_18_and_the_mariadb_clients() {
    if !engine_or_skip(&[SIDECAR_IMAGE_DEV.as_str()]) {
        return;
    }
    // pg_dump and psql 18 dump and restore PostgreSQL 13 to 18 (docs/images.md).
    for tool in ["pg_dump", "pg_dumpall", "psql"] {
        let version = tool_version(tool);
        assert!(
            major_after(&version, "(PostgreSQL)") >= 18,
            "{tool}: {version}"
        );
    }
    for tool in ["mariadb-dump", "mariadb"] {
        let version = tool_version(tool);
        // "… 11.8.3-MariaDB …": the server release the client belongs to.
        let release = version
            .split_whitespace()
            .find_map(|word| {
                word.split_once("-MariaDB")
                    .map(|(number, _)| number.to_owned())
            })
            .unwrap_or_else(|| panic!("{tool}: no MariaDB release in {version:?}"));
        assert!(major_after(&release, "") >= 10, "{tool}: {version}");
    }
    let version = tool_version("neverwiped-sidecar");
    assert!(version.starts_with("neverwiped-sidecar "), "{version}");
}

#[test]
fn the_harness_expands_variables_and_reads_quantities_as_kubernetes_does() {
    use support::kubelet::{expand_variables, quantity_bytes};
    let env = vec![
        ("USER_NAME".to_owned(), "backup".to_owned()),
        ("EMPTY".to_owned(), String::new()),
    ];
    assert_eq!(
        expand_variables("postgresql://$(USER_NAME)@db:5432", &env),
        "postgresql://backup@db:5432"
    );
    assert_eq!(
        expand_variables("$(MISSING)/$(EMPTY)x", &env),
        "$(MISSING)/x"
    );
    assert_eq!(
        expand_variables("$$(USER_NAME) costs $5", &env),
        "$(USER_NAME) costs $5"
    );
    assert_eq!(quantity_bytes("24Mi"), 24 << 20);
    assert_eq!(quantity_bytes("1Gi"), 1 << 30);
    assert_eq!(quantity_bytes("500M"), 500_000_000);
    assert_eq!(quantity_bytes("1048576"), 1_048_576);
}

/// An application's volume as its own user (1000) writes it: private files and folders of that
/// user, one file of another owner (1001, mode 0600) that user cannot read.
fn fill_application_volume(root: &Path) -> usize {
    let app = (1000, 1000);
    folder(root, "", app, 0o750);
    put(root, "index.html", b"<h1>shop</h1>\n", app, 0o644);
    put(
        root,
        "config/app.key",
        b"the application's own key\n",
        app,
        0o600,
    );
    folder(root, "config", app, 0o700);
    put(root, "uploads/photo.jpg", &noise(2_000_000, 5), app, 0o640);
    put(root, "uploads/empty.txt", b"", app, 0o600);
    folder(root, "uploads", app, 0o750);
    std::os::unix::fs::symlink("../index.html", root.join("uploads/home")).expect("a symlink");
    std::os::unix::fs::lchown(root.join("uploads/home"), Some(1000), Some(1000))
        .expect("its owner");
    put(
        root,
        "other-owner.key",
        b"not the application's\n",
        (1001, 1001),
        0o600,
    );
    4
}

/// The application's pod: it mounts `claim` as user 1000 (the operator takes the backup's user
/// from it). No kubelet runs it; it only has to exist, bound to the harness's node.
fn application_pod(namespace: &str, claim: &str) {
    apply(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "shop-0", "namespace": namespace},
        "spec": {
            "nodeName": "kubelet-harness",
            "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000},
            "containers": [{
                "name": "shop", "image": "shop:1",
                "volumeMounts": [{"name": "data", "mountPath": "/srv"}],
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }));
}

#[tokio::test]
async fn an_unprivileged_backup_reads_the_applications_files_and_warns_of_another_owners() {
    if !parts_or_skip() {
        return;
    }
    apply_crds();
    let namespace = TestNamespace::create("unprivileged");
    let ns = namespace.name.as_str();
    // What a cluster with PodSecurity admission enforces (the test API server has no such plugin:
    // the pod spec is checked against `restricted` by operator/tests/pod_security.rs).
    kubectl(&[
        "label",
        "namespace",
        ns,
        "pod-security.kubernetes.io/enforce=restricted",
    ]);
    let client = client().await;
    let rest = RestServer::start(ns);
    let volumes = Scratch::new(&format!("{ns}-volumes"));
    let data = volumes.0.join("data");
    let readable_files = fill_application_volume(&data);
    let restored = volumes.0.join("data-restored");
    // A new volume's root as a provisioner makes it: root's; the restore pod's fsGroup (the
    // application's, 1000) lets the kubelet make it group-writable, as here.
    folder(&restored, "", (0, 1000), 0o2775);
    secret(ns, "repository", &[("password", REPOSITORY_PASSWORD)]);
    claim(ns, "data");
    claim(ns, "data-restored");
    application_pod(ns, "data");
    let mut kubelet = Kubelet::new(client.clone(), ns);
    kubelet.claim("data", &data);
    kubelet.claim("data-restored", &restored);
    let _operator = OperatorContainer::start(ns);

    apply(&plan(
        ns,
        "nightly",
        &rest.url("shop"),
        json!({"volumes": [{"claimName": "data"}]}),
    ));
    let backup = run(&mut kubelet, &client, ns, "nightly-manual-1").await;
    // A snapshot with warnings ends the sidecar with its "partial" code, 3: the Job fails, and
    // the status (below) says what the result says.
    assert!(
        matches!(&backup.ending, Ending::Exited { exit_code: 3, .. }),
        "the backup pod did not end as partial: {:?}\n{}",
        backup.ending,
        container_config(&backup)
    );
    // The application's user, no capability at all, nothing that restricted refuses.
    for option in [
        "--read-only",
        "--cap-drop=ALL",
        "no-new-privileges",
        "1000:1000",
    ] {
        assert!(
            backup.run_options.iter().any(|o| o == option),
            "{option} missing: {:?}",
            backup.run_options
        );
    }
    assert!(
        !backup
            .run_options
            .iter()
            .any(|o| o.starts_with("--cap-add")),
        "{:?}",
        backup.run_options
    );
    let status = recorded(ns, "nightly", "nightly-manual-1").await;
    assert_eq!(status["mover"]["mode"], "Unprivileged", "{status:#}");
    assert_eq!(status["mover"]["runAsUser"], 1000, "{status:#}");
    let mover_message = status["mover"]["message"].as_str().unwrap_or_default();
    assert!(mover_message.contains("\"shop-0\""), "{mover_message}");
    let last = &status["lastRun"];
    assert_eq!(last["result"], "SucceededWithWarnings", "{status:#}");
    assert_eq!(last["reason"], "SucceededWithWarnings", "{status:#}");
    assert_eq!(last["warnings"], 1, "{status:#}");
    let message = last["message"].as_str().unwrap_or_default();
    assert!(message.contains("other-owner.key"), "{message}");
    assert!(message.contains("ermission denied"), "{message}");
    assert_eq!(last["filesRead"], readable_files as i64, "{status:#}");
    let readable_bytes = regular_file_sizes(&data) - b"not the application's\n".len() as u64;
    assert_eq!(
        last["bytesRead"].as_u64(),
        Some(readable_bytes),
        "{status:#}"
    );

    // Back, as the same user: every file it could read, with its content, mode and times.
    let (status, _) = restore(
        &mut kubelet,
        &client,
        ns,
        "back",
        json!({"volumes": [{"sourceClaimName": "data", "targetClaimName": "data-restored"}]}),
    )
    .await;
    assert_eq!(status["mover"]["runAsUser"], 1000, "{status:#}");
    let mut expected = tree(&data);
    assert!(
        expected.remove("/other-owner.key").is_some(),
        "{expected:#?}"
    );
    let mut got = tree(&restored);
    // The target volume's root keeps its own mode and owner: an unprivileged restore does not
    // own it, and leaves it as its provisioner made it.
    assert!(expected.remove("/").is_some(), "{expected:#?}");
    assert!(got.remove("/").is_some(), "{got:#?}");
    assert_eq!(
        got, expected,
        "the restored volume differs from what the user could read"
    );
}

#[tokio::test]
async fn a_plan_asking_for_root_where_the_admin_did_not_allow_it_gets_no_job() {
    if !parts_or_skip() {
        return;
    }
    apply_crds();
    let namespace = TestNamespace::create("not-allowed");
    let ns = namespace.name.as_str();
    let client = client().await;
    secret(ns, "repository", &[("password", REPOSITORY_PASSWORD)]);
    claim(ns, "data");
    // The operator's policy allows privileged movers in another namespace only.
    let _operator = OperatorContainer::start_with_policy(
        ns,
        r#"{"privilegedMoverNamespaces":["backup-admin"]}"#,
    );
    apply(&plan(
        ns,
        "as-root",
        "http://127.0.0.1:1/nowhere",
        json!({"volumes": [{"claimName": "data"}], "mover": {"mode": "Privileged"}}),
    ));
    // The status of a reconcile of the plan as applied, manual trigger and all: a reconcile
    // creates its Jobs before it applies its status, so any Job it started exists by then.
    let (ready, status) = eventually("the plan's Ready=False", ACT_TIMEOUT, || async {
        let plan = kubectl_json(&["get", "backupplans.neverwiped.io", "as-root", "-n", ns]);
        let status = plan["status"].clone();
        if status["observedGeneration"] != plan["metadata"]["generation"] {
            return None;
        }
        let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
        let ready = conditions
            .into_iter()
            .find(|c| c["type"] == "Ready" && c["status"] == "False")?;
        Some((ready, status))
    })
    .await;
    assert_eq!(ready["reason"], "PrivilegedMoverNotAllowed", "{ready:#}");
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("policy.privilegedMoverNamespaces"),
        "{message}"
    );
    assert!(message.contains(ns), "{message}");
    // Nothing was started, nor left waiting for a slot to start later.
    assert!(status["activeRun"].is_null(), "{status:#}");
    assert!(status["queued"].is_null(), "{status:#}");
    let jobs: kube::Api<k8s_openapi::api::batch::v1::Job> = kube::Api::namespaced(client, ns);
    let listed = jobs.list(&Default::default()).await.expect("the Jobs");
    assert!(listed.items.is_empty(), "{:?}", listed.items);
}
