//! Real users of the test API server: a client certificate and a kubeconfig per user, made by
//! `real-apiserver.sh user NAME [GROUP...]`, so that the server decides every request of a test's
//! operator or plugin by the Roles bound to that user, as a cluster would. Cluster-scoped objects a
//! test makes for one namespace (a ClusterRoleBinding naming its ServiceAccount) go with that
//! namespace.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use crate::{kubectl_output, repo_root, require};

/// The environment variable naming the API server's script, when it is not
/// `../shared/tools/real-apiserver.sh` beside the repository.
pub const USER_SCRIPT: &str = "REAL_APISERVER_SH";

/// The kubeconfig of the user `name` in `groups`: a client certificate signed by the server's CA.
/// Made once per test process and user. `None` (after a recorded skip, or a failure where every
/// test must run) when the script that makes users is not there.
pub fn user_kubeconfig(name: &str, groups: &[&str]) -> Option<PathBuf> {
    static MADE: Mutex<Vec<(String, Vec<String>, PathBuf)>> = Mutex::new(Vec::new());
    let mut made = MADE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((_, made_groups, path)) = made.iter().find(|(user, ..)| user == name) {
        assert_eq!(made_groups, groups, "{name} was made with other groups");
        return Some(path.clone());
    }
    let script = require(
        user_script(),
        "the API server's script (it makes the users' certificates) is not there",
        "set REAL_APISERVER_SH to real-apiserver.sh, or keep ../shared/tools beside the repository",
    )?;
    let path = make_user(&script, name, groups);
    made.push((
        name.to_owned(),
        groups.iter().map(|g| g.to_string()).collect(),
        path.clone(),
    ));
    Some(path)
}

/// The kubeconfig of the ServiceAccount `name` of `namespace`, with the groups the API server
/// gives every ServiceAccount.
pub fn service_account_kubeconfig(namespace: &str, name: &str) -> Option<PathBuf> {
    let user = format!("system:serviceaccount:{namespace}:{name}");
    let namespace_group = format!("system:serviceaccounts:{namespace}");
    user_kubeconfig(&user, &["system:serviceaccounts", &namespace_group])
}

fn user_script() -> Option<PathBuf> {
    let path = std::env::var_os(USER_SCRIPT)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("../shared/tools/real-apiserver.sh"));
    path.is_file().then_some(path)
}

/// Runs the script's `user` command; its last line is the kubeconfig's path. Its folder is the one
/// of the admin's `KUBECONFIG` unless `REAL_APISERVER_DIR` says otherwise.
fn make_user(script: &Path, name: &str, groups: &[&str]) -> PathBuf {
    let mut command = Command::new("bash");
    command.arg(script).arg("user").arg(name).args(groups);
    if std::env::var_os("REAL_APISERVER_DIR").is_none() {
        let admin = std::env::var_os("KUBECONFIG").map(PathBuf::from);
        if let Some(folder) = admin.as_deref().and_then(Path::parent) {
            command.env("REAL_APISERVER_DIR", folder);
        }
    }
    // Test processes sign certificates at the same time; the CA's serial file may be busy.
    let mut last_error = String::new();
    for _ in 0..5 {
        let output = command.output().expect("bash runs");
        if output.status.success() {
            let stdout = String::from_utf8_lossy(&output.stdout);
            let path = PathBuf::from(stdout.trim().lines().last().unwrap_or_default());
            assert!(path.is_file(), "no kubeconfig for {name}: {stdout}");
            return path;
        }
        last_error = String::from_utf8_lossy(&output.stderr).into_owned();
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    panic!("cannot make the user {name}: {last_error}");
}

/// The cluster-scoped objects (`kind/name`) to delete with each test namespace.
static WITH_NAMESPACE: Mutex<Option<HashMap<String, Vec<String>>>> = Mutex::new(None);

/// Deletes the cluster-scoped object `kind/name` when the test namespace `namespace` goes.
pub fn delete_with_namespace(namespace: &str, kind_and_name: &str) {
    let mut objects = WITH_NAMESPACE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let list = objects.get_or_insert_with(HashMap::new);
    let names = list.entry(namespace.to_owned()).or_default();
    if !names.iter().any(|known| known == kind_and_name) {
        names.push(kind_and_name.to_owned());
    }
}

/// Deletes what [`delete_with_namespace`] recorded for `namespace`.
pub(crate) fn delete_cluster_objects_of(namespace: &str) {
    let names = WITH_NAMESPACE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .as_mut()
        .and_then(|list| list.remove(namespace))
        .unwrap_or_default();
    if names.is_empty() {
        return;
    }
    let mut args = vec!["delete", "--ignore-not-found", "--wait=false"];
    args.extend(names.iter().map(String::as_str));
    let _ = kubectl_output(&args, None);
}
