//! Data stores a plan's streams back up, each a real server in a container of its Debian-built
//! image (`tests/images/stores/`) on the host's loopback network: Redis and etcd. (SQLite has no
//! server: its database is a file on a claim.) Each is removed when dropped.

use std::path::Path;
use std::process::Output;

use neverwiped_testkit::free_port;

use super::kubelet::{docker, docker_ok};

/// The image of a data store of `tests/images/stores/` (`redis`, `sqlite`, `etcd`).
pub fn store_image(store: &str) -> String {
    format!("neverwiped-test/{store}:dev")
}

/// Runs `script` with `sh -c` in a throwaway container of `store`'s image on the host network,
/// with `mounts` (host folder, container path) and `env`; its standard output. Panics with its
/// error when it fails.
pub fn store_shell(
    store: &str,
    script: &str,
    mounts: &[(&Path, &str)],
    env: &[(&str, &str)],
) -> String {
    let output = store_run(store, script, mounts, env);
    assert!(
        output.status.success(),
        "{store}: `{script}` failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// [`store_shell`] without mounts, `None` when it fails.
fn store_shell_status(store: &str, script: &str, env: &[(&str, &str)]) -> Option<String> {
    let output = store_run(store, script, &[], env);
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

fn store_run(store: &str, script: &str, mounts: &[(&Path, &str)], env: &[(&str, &str)]) -> Output {
    let mut args = docker_run_args(&["--rm"], mounts);
    for (name, value) in env {
        args.push("--env".into());
        args.push(format!("{name}={value}"));
    }
    args.extend([store_image(store), "sh".into(), "-c".into(), script.into()]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    docker(&refs)
}

/// `docker run` with `options`, on the host's network, with `mounts` (host folder, container
/// path) bound.
fn docker_run_args(options: &[&str], mounts: &[(&Path, &str)]) -> Vec<String> {
    let mut args = vec!["run".to_owned()];
    args.extend(options.iter().map(|o| o.to_string()));
    args.extend(["--network".into(), "host".into()]);
    for (source, target) in mounts {
        args.push("--mount".into());
        args.push(format!(
            "type=bind,source={},target={target}",
            source.display()
        ));
    }
    args
}

/// A server in a container, removed on drop.
pub struct StoreServer {
    pub container: String,
    pub port: u16,
}

impl StoreServer {
    fn start(
        container: &str,
        image: &str,
        port: u16,
        mounts: &[(&Path, &str)],
        command: &[&str],
    ) -> StoreServer {
        let _ = docker(&["rm", "--force", container]);
        let mut args = docker_run_args(&["--detach", "--name", container], mounts);
        args.push(image.into());
        args.extend(command.iter().map(|a| a.to_string()));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        docker_ok(&refs);
        StoreServer {
            container: container.to_owned(),
            port,
        }
    }

    /// `redis-server` on a free port with a password, its data in `dir` (mounted at `/data`),
    /// loading `dir/dump.rdb` when there is one; once it answers.
    pub fn redis(name: &str, dir: &Path, password: &str) -> StoreServer {
        let port = free_port();
        let server = StoreServer::start(
            name,
            &store_image("redis"),
            port,
            &[(dir, "/data")],
            &[
                "redis-server",
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--requirepass",
                password,
                "--dir",
                "/data",
                "--dbfilename",
                "dump.rdb",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
        );
        server.wait_until(|| {
            store_shell_status(
                "redis",
                &format!("redis-cli -p {port} ping"),
                &[("REDISCLI_AUTH", password)],
            )
            .is_some_and(|out| out.contains("PONG"))
        });
        server
    }

    /// A one-member etcd on free ports, its data in `dir` (mounted at `/data`, data dir
    /// `/data/etcd`, which may come from `etcdutl snapshot restore`); once it answers.
    pub fn etcd(name: &str, dir: &Path) -> StoreServer {
        let port = free_port();
        let peer = free_port();
        let client_url = format!("http://127.0.0.1:{port}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let server = StoreServer::start(
            name,
            &store_image("etcd"),
            port,
            &[(dir, "/data")],
            &[
                "etcd",
                "--name",
                "default",
                "--data-dir",
                "/data/etcd",
                "--listen-client-urls",
                &client_url,
                "--advertise-client-urls",
                &client_url,
                "--listen-peer-urls",
                &peer_url,
                "--initial-advertise-peer-urls",
                &peer_url,
                "--initial-cluster",
                &format!("default={peer_url}"),
            ],
        );
        server.wait_until(|| {
            store_shell_status(
                "etcd",
                &format!("etcdctl --endpoints {client_url} endpoint health"),
                &[],
            )
            .is_some_and(|out| out.contains("is healthy"))
        });
        server
    }

    fn wait_until(&self, answers: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !answers() {
            assert!(
                std::time::Instant::now() < deadline,
                "{} does not answer:\n{}",
                self.container,
                String::from_utf8_lossy(&docker(&["logs", &self.container]).stderr)
            );
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
    }
}

impl Drop for StoreServer {
    fn drop(&mut self) {
        let _ = docker(&["rm", "--force", &self.container]);
    }
}
