//! A cluster of its own: a private instance of the test API server (`real-apiserver.sh`, found
//! through `REAL_APISERVER_SH`) with its own folder, ports and etcd data, made the API server of
//! this test process (`KUBECONFIG`), and destroyed with its etcd data when the test says so.

use std::path::{Path, PathBuf};
use std::process::Command;

use neverwiped_testkit::{repo_root, require};

/// The environment variable naming the API server's script (as `neverwiped_testkit::users`).
const SCRIPT_VARIABLE: &str = "REAL_APISERVER_SH";

/// The ports of one instance: the API server's, etcd's client and peer ports.
pub struct Ports {
    pub api: u16,
    pub etcd: u16,
    pub etcd_peer: u16,
}

/// A running private API server; stopped and its folder (etcd's data) removed when dropped.
pub struct Cluster {
    pub name: String,
    script: PathBuf,
    folder: PathBuf,
    ports: Ports,
    /// The admin's kubeconfig (group `system:masters`).
    pub admin: PathBuf,
}

/// The script, or `None` (after a recorded skip, a failure under CI) when it is not there.
pub fn script_or_skip() -> Option<PathBuf> {
    let path = std::env::var_os(SCRIPT_VARIABLE)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("../shared/tools/real-apiserver.sh"));
    require(
        path.is_file().then_some(path),
        "the API server's script is not there: this test starts API servers of its own",
        "set REAL_APISERVER_SH to real-apiserver.sh, or keep ../shared/tools beside the repository",
    )
}

impl Cluster {
    /// Starts a fresh API server (empty etcd) named `name` on `ports`, and makes it the API
    /// server of this process: `KUBECONFIG` names its admin's kubeconfig from now on.
    pub fn up(script: &Path, name: &str, ports: Ports) -> Cluster {
        let folder = std::env::temp_dir().join(format!("neverwiped-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&folder);
        for port in [ports.api, ports.etcd, ports.etcd_peer] {
            assert!(
                std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(),
                "port {port} of {name} is taken: an earlier run killed before it stopped its API \
                 server? (`real-apiserver.sh stop` with REAL_APISERVER_DIR set to its \
                 neverwiped-{name}-PID folder in the temporary directory)"
            );
        }
        let cluster = Cluster {
            name: name.to_owned(),
            script: script.to_owned(),
            admin: folder.join("kubeconfig"),
            folder,
            ports,
        };
        let output = cluster.script_command(&["up"]).output().expect("bash runs");
        assert!(
            output.status.success() && cluster.admin.is_file(),
            "the API server of {name} does not start: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        cluster.make_current();
        cluster
    }

    /// Makes this the API server of the process's clients and of the kubectl it runs. The test
    /// binary runs one test, so no other thread reads the environment meanwhile.
    pub fn make_current(&self) {
        std::env::set_var("KUBECONFIG", &self.admin);
        // kubectl's discovery cache of this server only: another run's server may have had this
        // address and other kinds.
        std::env::set_var("KUBECACHEDIR", self.folder.join("kubectl-cache"));
    }

    /// The kubeconfig of the user `name` in `groups`: a client certificate of this cluster's CA.
    pub fn user(&self, name: &str, groups: &[&str]) -> PathBuf {
        let mut args = vec!["user", name];
        args.extend(groups);
        let output = self.script_command(&args).output().expect("bash runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let path = PathBuf::from(stdout.trim().lines().last().unwrap_or_default());
        assert!(
            output.status.success() && path.is_file(),
            "cannot make the user {name} of {}: {}",
            self.name,
            String::from_utf8_lossy(&output.stderr)
        );
        path
    }

    /// The kubeconfig of the ServiceAccount `name` of `namespace`, with the groups the API server
    /// gives every ServiceAccount (this server takes no tokens: a certificate stands in).
    pub fn service_account(&self, namespace: &str, name: &str) -> PathBuf {
        let user = format!("system:serviceaccount:{namespace}:{name}");
        let group = format!("system:serviceaccounts:{namespace}");
        self.user(&user, &["system:serviceaccounts", &group])
    }

    fn script_command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("bash");
        command
            .arg(&self.script)
            .args(args)
            .env("REAL_APISERVER_DIR", &self.folder)
            .env("API_PORT", self.ports.api.to_string())
            .env("ETCD_PORT", self.ports.etcd.to_string())
            .env("ETCD_PEER_PORT", self.ports.etcd_peer.to_string());
        command
    }

    /// Stops the API server and etcd and removes the folder with etcd's data: nothing of this
    /// cluster is left.
    pub fn destroy(self) {
        drop(self);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let stopped = self.script_command(&["stop"]).output();
        if !matches!(&stopped, Ok(output) if output.status.success()) {
            eprintln!("the API server of {} did not stop: {stopped:?}", self.name);
        }
        let _ = std::fs::remove_dir_all(&self.folder);
    }
}
