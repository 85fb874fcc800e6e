//! The operator's own identity in the tests: the ServiceAccount of the chart's release, bound by
//! the chart's rendered ClusterRole, Roles and bindings, and nothing else. Every test that starts
//! the operator runs it with that ServiceAccount's kubeconfig, so the API server decides each of
//! its requests by exactly the chart's rules.
//!
//! Helm renders the chart once per test process, with its default values (cluster-wide rules) but
//! a short ServiceAccount name, for a stand-in release; each test namespace then gets those objects with the stand-in replaced by
//! its name (the release of that name in that namespace, without six seconds of Helm per test).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use serde_json::{json, Value};

use super::chart_render::render_chart;
use super::{kubectl_stdin, service_account_kubeconfig};

/// The release name and namespace the chart is rendered for, replaced by each test's namespace.
const STAND_IN: &str = "nw-rbac-release";

/// The kinds of the chart's objects that give the operator its rights.
const RBAC_KINDS: [&str; 5] = [
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
];

/// The chart's RBAC objects among its rendered `manifests`.
pub fn rbac_objects(rendered: &Value) -> Vec<Value> {
    rendered["manifests"]
        .as_array()
        .expect("manifests")
        .iter()
        .filter(|object| RBAC_KINDS.iter().any(|kind| object["kind"] == *kind))
        .cloned()
        .collect()
}

/// The RBAC objects of the chart with its default values, for the stand-in release; `None` (after a
/// recorded skip) when Helm cannot run here.
pub fn default_rbac() -> Option<&'static [Value]> {
    static RENDERED: OnceLock<Option<Vec<Value>>> = OnceLock::new();
    RENDERED
        .get_or_init(|| {
            // The ServiceAccount's name only is not the default: a client certificate's common
            // name (system:serviceaccount:NAMESPACE:NAME) holds at most 64 characters.
            let values = json!({"serviceAccount": {"name": "op"}});
            let rendered = render_chart(STAND_IN, STAND_IN, &values)?;
            Some(rbac_objects(&rendered))
        })
        .as_deref()
}

/// `objects` (rendered for the stand-in release) as the release named after `namespace`, in it.
pub fn for_namespace(objects: &[Value], namespace: &str) -> Vec<Value> {
    let text = serde_json::to_string(objects).expect("JSON");
    serde_json::from_str(&text.replace(STAND_IN, namespace)).expect("JSON")
}

/// The operator's kubeconfig for a test watching `namespace`: the chart's default RBAC applied for
/// the release named after `namespace` (once per namespace), as its ServiceAccount.
pub fn operator_kubeconfig(namespace: &str) -> PathBuf {
    static GRANTED: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);
    let mut granted = GRANTED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let granted = granted.get_or_insert_with(HashMap::new);
    if let Some(kubeconfig) = granted.get(namespace) {
        return kubeconfig.clone();
    }
    let rbac = default_rbac().unwrap_or_else(|| {
        panic!("the operator runs with the chart's rights only, and Helm cannot render them here")
    });
    let kubeconfig = grant(&for_namespace(rbac, namespace)).unwrap_or_else(|| {
        panic!("the operator runs as the chart's ServiceAccount, and no user can be made here")
    });
    granted.insert(namespace.to_owned(), kubeconfig.clone());
    kubeconfig
}

/// Applies the RBAC `objects` of one release as the admin (its cluster-scoped ones go with the
/// namespace of its ServiceAccount) and returns the kubeconfig of that ServiceAccount; `None`
/// (after a recorded skip) when no user can be made here.
pub fn grant(objects: &[Value]) -> Option<PathBuf> {
    let account = objects
        .iter()
        .find(|object| object["kind"] == "ServiceAccount")
        .expect("the chart renders the operator's ServiceAccount");
    let name = account["metadata"]["name"].as_str().expect("a name");
    let namespace = account["metadata"]["namespace"]
        .as_str()
        .expect("a namespace");
    for object in objects {
        let kind = object["kind"].as_str().expect("a kind");
        if kind.starts_with("Cluster") {
            let object_name = object["metadata"]["name"].as_str().expect("a name");
            let kind_and_name = format!("{}/{object_name}", kind.to_lowercase());
            neverwiped_testkit::delete_with_namespace(namespace, &kind_and_name);
        }
    }
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    kubectl_stdin(&["apply", "-f", "-"], Some(&list.to_string()));
    service_account_kubeconfig(namespace, name)
}
