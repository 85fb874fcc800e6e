//! A tenant as a real user of the test API server: every verb on the namespaced kinds of its own
//! namespace and nothing elsewhere, and kubectl run as that user.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

use super::{kubectl_path, kubectl_stdin, user_kubeconfig};

/// The tenant: a real user with every verb on the namespaced kinds of its own namespace (an
/// `edit`-like Role: the test server has no `edit` ClusterRole) and nothing elsewhere.
pub fn tenant(namespace: &str) -> PathBuf {
    let user = format!("tenant-{namespace}");
    let kubeconfig = user_kubeconfig(&user, &[]).expect("the API server's user script");
    let role = json!({"apiVersion": "v1", "kind": "List", "items": [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "tenant-edit", "namespace": namespace},
            "rules": [
                {"apiGroups": [""], "resources": ["pods", "pods/exec", "pods/log", "secrets", "persistentvolumeclaims"], "verbs": ["*"]},
                {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["*"]},
                {"apiGroups": ["neverwiped.io"], "resources": ["backupplans", "restores"], "verbs": ["*"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "tenant-edit", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant-edit"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    ]});
    kubectl_stdin(&["apply", "-f", "-"], Some(&role.to_string()));
    kubeconfig
}

/// Runs kubectl as the user of `kubeconfig`.
pub fn kubectl_as(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new(kubectl_path())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs")
}

/// Merges `patch` (JSON) into plan `plan` as the user of `kubeconfig`, which must be allowed to.
pub fn patch_plan_as(kubeconfig: &Path, namespace: &str, plan: &str, patch: &Value) {
    let patch = patch.to_string();
    let patched = kubectl_as(kubeconfig, &super::plan_patch_args(namespace, plan, &patch));
    assert!(patched.status.success(), "{patched:?}");
}

/// Applies `object` as the user of `kubeconfig`.
pub fn apply_as(kubeconfig: &Path, object: &Value) {
    let mut child = Command::new(kubectl_path())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    let mut stdin = child.stdin.take().expect("a pipe");
    stdin
        .write_all(object.to_string().as_bytes())
        .expect("kubectl reads");
    drop(stdin);
    assert!(child.wait().expect("kubectl ends").success(), "applied");
}

/// Asserts the API server refused the tenant `args` (403 Forbidden).
pub fn refused(kubeconfig: &Path, args: &[&str]) {
    let output = kubectl_as(kubeconfig, args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("Forbidden"),
        "the tenant was not refused {args:?}: {stderr}"
    );
}
