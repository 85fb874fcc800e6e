//! What the plugin's tests share: the real API server from `KUBECONFIG` (with the committed CRDs),
//! a namespace per test, a real rest-server with HTTP authentication, and the plugin's users.
//!
//! The plugin always runs as a real user of the API server (a client certificate made by
//! `real-apiserver.sh user`), in the group that one of the Roles `docs/security.md` recommends
//! binds: the test applies that file of `docs/examples/` unchanged but for its namespace, so
//! every right the plugin needs is in the docs and every refusal is the API server's own 403.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

#[allow(unused_imports)]
pub use neverwiped_testkit::{api_server_or_skip, apply_crds, free_port, program, TestNamespace};

/// The Secret of the repository password, as `docs/examples/backupplan.yaml` names it (the
/// download and restore Roles name it too).
pub const PASSWORD_SECRET: &str = "shop-repository";
/// The Secret of the gate login, likewise.
pub const GATE_SECRET: &str = "gate-login";

/// A rest-server with HTTP authentication on loopback, serving a fresh folder; killed on drop.
pub struct RestServer {
    child: Child,
    pub port: u16,
    pub username: String,
    pub password: String,
    _dir: tempfile::TempDir,
}

impl RestServer {
    /// Creates a plan's Secrets in `namespace`, named as the example plan's: `shop-repository`
    /// with the repository password `password`, and `gate-login` with this server's login.
    pub fn create_plan_secrets(&self, namespace: &TestNamespace, password: &str) {
        namespace.create_secret(PASSWORD_SECRET, "Opaque", &[("password", password)]);
        namespace.create_secret(
            GATE_SECRET,
            "kubernetes.io/basic-auth",
            &[("username", &self.username), ("password", &self.password)],
        );
    }

    /// Starts rest-server, or `None` (after a recorded skip) when it is not installed and not every
    /// test must run.
    pub fn start() -> Option<RestServer> {
        let binary = neverwiped_testkit::require(
            program("rest-server"),
            "rest-server is not on PATH",
            "run ../shared/tools/install-peers.sh and put its folder on PATH, or run scripts/test.sh",
        )?;
        let dir = tempfile::tempdir().expect("a folder for the server");
        let username = "gate-user".to_owned();
        let password = format!("gate-pw-{}", std::process::id());
        let htpasswd = dir.path().join("htpasswd");
        let hash = bcrypt::hash(&password, 4).expect("bcrypt");
        std::fs::write(&htpasswd, format!("{username}:{hash}\n")).expect("htpasswd");
        let port = free_port();
        let child = Command::new(binary)
            .arg("--path")
            .arg(dir.path().join("data"))
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--htpasswd-file")
            .arg(&htpasswd)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("rest-server starts");
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "rest-server listens"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(RestServer {
            child,
            port,
            username,
            password,
            _dir: dir,
        })
    }

    /// The URL of the repository `name` on this server, as a plan names it.
    pub fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for RestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The people `docs/security.md` gives a Role for the plugin, each a file of `docs/examples/`.
#[derive(Clone, Copy, Debug)]
pub enum Persona {
    /// Watches the backups: `status`. `rbac-plugin-watch.yaml`.
    Watch,
    /// Reads files out of the backups: `snapshots`, `ls`, `cat`, `download`.
    /// `rbac-plugin-download.yaml`.
    Download,
    /// Runs backups and restores: `backup --wait`, `restore`. `rbac-plugin-restore.yaml`.
    Restore,
}

impl Persona {
    fn file(self) -> &'static str {
        match self {
            Persona::Watch => "rbac-plugin-watch.yaml",
            Persona::Download => "rbac-plugin-download.yaml",
            Persona::Restore => "rbac-plugin-restore.yaml",
        }
    }

    /// The kubeconfig of a user in the group the persona's file binds, after that file is applied
    /// (as the admin) in `namespace`, its namespace the only change; `None` (after a recorded
    /// skip) when no user can be made here.
    pub fn kubeconfig(self, namespace: &TestNamespace) -> Option<PathBuf> {
        let path = neverwiped_testkit::repo_root()
            .join("docs/examples")
            .join(self.file());
        let text = std::fs::read_to_string(&path).expect("the persona's Role file exists");
        let mut objects: Vec<Value> =
            serde_saphyr::from_multiple(&text).expect("the persona's Role file is YAML");
        objects.retain(|object| !object.is_null());
        let mut groups = Vec::new();
        for object in &mut objects {
            assert_eq!(
                object["metadata"]["namespace"],
                "shop",
                "{}: each object is for the namespace of the examples",
                self.file()
            );
            object["metadata"]["namespace"] = Value::from(namespace.name.as_str());
            for subject in object["subjects"].as_array().into_iter().flatten() {
                assert_eq!(subject["kind"], "Group", "{}: binds groups", self.file());
                groups.push(subject["name"].as_str().expect("a group").to_owned());
            }
        }
        assert_eq!(groups.len(), 1, "{}: binds one group", self.file());
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
        neverwiped_testkit::kubectl_stdin(&["apply", "-f", "-"], Some(&list.to_string()));
        let user = format!("plugin-{self:?}").to_lowercase();
        neverwiped_testkit::user_kubeconfig(&user, &[groups[0].as_str()])
    }
}

/// The kubeconfig of a user whom no Role binds.
pub fn nobody_kubeconfig() -> Option<PathBuf> {
    neverwiped_testkit::user_kubeconfig("plugin-nobody", &[])
}
