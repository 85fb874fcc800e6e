//! `status -A` and `mount` as real users: the watch Role bound cluster-wide lists every
//! namespace's plans and bound in one namespace is refused the cluster-wide list; the download
//! Role mounts a plan's snapshots through FUSE, and a user without it is refused before anything
//! is mounted.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::support::{Persona, RestServer, TestNamespace};
use super::{back_up, failed, plan_object, plugin, succeeded, PASSWORD};

/// The watch Role of `docs/examples/rbac-plugin-watch.yaml` as a ClusterRole bound cluster-wide
/// (as its comment says `status -A` needs) to a group of its own; both deleted with `namespace`.
/// Returns the group.
fn bind_watch_cluster_wide(namespace: &TestNamespace) -> String {
    let path = neverwiped_testkit::repo_root().join("docs/examples/rbac-plugin-watch.yaml");
    let text = std::fs::read_to_string(path).expect("the watch Role file exists");
    let objects: Vec<Value> = serde_saphyr::from_multiple(&text).expect("YAML");
    let role = objects
        .iter()
        .find(|object| object["kind"] == "Role")
        .expect("the file has the watch Role");
    let name = format!("neverwiped-watch-{}", namespace.name);
    let group = format!("{}-watchers", namespace.name);
    let rbac = "rbac.authorization.k8s.io";
    let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
        {
            "apiVersion": format!("{rbac}/v1"), "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": role["rules"],
        },
        {
            "apiVersion": format!("{rbac}/v1"), "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": rbac, "kind": "Group", "name": group}],
        },
    ]});
    for kind in ["clusterrole", "clusterrolebinding"] {
        neverwiped_testkit::delete_with_namespace(&namespace.name, &format!("{kind}/{name}"));
    }
    neverwiped_testkit::kubectl_stdin(&["apply", "-f", "-"], Some(&objects.to_string()));
    group
}

#[test]
fn status_of_all_namespaces_needs_the_watch_rule_cluster_wide() {
    if !super::support::api_server_or_skip() {
        return;
    }
    super::support::apply_crds();
    let first = TestNamespace::create("plugin-all");
    let second = TestNamespace::create("plugin-all");
    first.create_object(&plan_object("first-plan", "http://127.0.0.1:9/first"));
    second.create_object(&plan_object("second-plan", "http://127.0.0.1:9/second"));
    let group = bind_watch_cluster_wide(&first);
    let user = format!("plugin-watch-all-{}", std::process::id());
    let (Some(everywhere), Some(in_one)) = (
        neverwiped_testkit::user_kubeconfig(&user, &[group.as_str()]),
        Persona::Watch.kubeconfig(&first),
    ) else {
        return;
    };
    let table = String::from_utf8(succeeded(plugin(
        &everywhere,
        &first.name,
        &["status", "-A"],
    )))
    .unwrap();
    assert!(table.starts_with("NAMESPACE "), "{table}");
    for plan in ["first-plan", "second-plan"] {
        assert!(table.lines().any(|l| l.contains(plan)), "{plan}:\n{table}");
    }
    // Bound in one namespace: that namespace's status, and the cluster-wide list refused.
    succeeded(plugin(&in_one, &first.name, &["status"]));
    let error = failed(plugin(&in_one, &first.name, &["status", "-A"]));
    assert!(
        error.contains("you may not list backupplans.neverwiped.io"),
        "{error}"
    );
    assert!(error.contains("403 Forbidden"), "{error}");
}

/// Whether this machine can mount FUSE file systems; fails (or records the skip) otherwise.
fn fuse_or_skip() -> bool {
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse");
    match opened {
        Ok(_) => true,
        Err(error) => {
            neverwiped_testkit::missing(
                format_args!("/dev/fuse cannot be opened ({error})"),
                "FUSE is needed: load the fuse module (modprobe fuse) or give the container /dev/fuse",
            );
            false
        }
    }
}

/// Whether `path` is a mount point now, from the kernel's own table.
fn is_mounted(path: &Path) -> bool {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let wanted = path.to_str().unwrap();
    table
        .lines()
        .any(|line| line.split(' ').nth(4) == Some(wanted))
}

/// `kubectl neverwiped mount PLAN MOUNTPOINT` as the user of `kubeconfig`, in the background.
fn start_mount(kubeconfig: &Path, namespace: &str, mountpoint: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_kubectl-neverwiped"))
        .env("KUBECONFIG", kubeconfig)
        .env_remove("NEVERWIPED_PASSWORD")
        .args(["-n", namespace, "mount", "nightly"])
        .arg(mountpoint)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the plugin starts")
}

/// Waits (at most a minute) until `done` holds; fails with the plugin's output when it ended
/// first.
fn wait_until(child: &mut Child, what: &str, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
            panic!("the plugin ended ({status}) before {what}: {stderr}");
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn mount_serves_the_snapshots_to_a_reader_and_is_refused_before_mounting_to_others() {
    if !super::support::api_server_or_skip() || !fuse_or_skip() {
        return;
    }
    let Some(server) = RestServer::start() else {
        return;
    };
    super::support::apply_crds();
    let namespace = TestNamespace::create("plugin-mount");
    let ns = namespace.name.as_str();
    let (Some(reader), Some(watcher)) = (
        Persona::Download.kubeconfig(&namespace),
        Persona::Watch.kubeconfig(&namespace),
    ) else {
        return;
    };
    server.create_plan_secrets(&namespace, PASSWORD);
    let url = server.url("shop");
    namespace.create_object(&plan_object("nightly", &url));
    let source = tempfile::tempdir().unwrap();
    std::fs::write(source.path().join("orders.csv"), b"id,total\n1,42\n").unwrap();
    let data = source.path().to_path_buf();
    back_up(
        &format!("rest:{url}"),
        &server,
        &format!("{ns}/nightly"),
        &[data],
    )
    .await;
    let work = tempfile::tempdir().unwrap();
    let mountpoint = work.path().join("mnt");
    std::fs::create_dir(&mountpoint).unwrap();

    // Without the download Role: the API server's refusal, and no mount.
    let error = failed(plugin(
        &watcher,
        ns,
        &["mount", "nightly", mountpoint.to_str().unwrap()],
    ));
    let secret = format!("you may not get secrets \"shop-repository\" in namespace \"{ns}\"");
    assert!(error.contains(&secret), "{error}");
    assert!(error.contains("403 Forbidden"), "{error}");
    assert!(!is_mounted(&mountpoint));
    assert_eq!(std::fs::read_dir(&mountpoint).unwrap().count(), 0);

    // With it: the plan's snapshot, file for file, until stopped.
    let mut child = start_mount(&reader, ns, &mountpoint);
    let latest = mountpoint.join("snapshots/latest");
    wait_until(&mut child, "the mount shows its snapshot", || {
        latest.exists()
    });
    let file = latest
        .join(source.path().strip_prefix("/").unwrap())
        .join("orders.csv");
    assert_eq!(std::fs::read(&file).unwrap(), b"id,total\n1,42\n");
    let stopped = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the mount ends"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{output:?}");
    assert!(!is_mounted(&mountpoint), "the mount is gone");
}
