//! "helm install" on a test API server: the chart rendered by Helm's own engine (there is no helm
//! binary here) with the given values, and what it renders applied, as Helm would. The kinds the
//! test API server does not serve are played or left out: the operator's Deployment is played by
//! running its one pod's container from the operator's image, on the host's network, with the
//! rendered image, arguments, environment and security context, as the rendered ServiceAccount
//! (a client certificate of that identity stands in for the pod's token); the Service, the
//! ValidatingAdmissionPolicies and their bindings are left out (no admission plugin evaluates them
//! here, see `operator/tests/admission.rs` for their rules).

use std::os::unix::fs::PermissionsExt;

use serde_json::{json, Value};

use super::cluster::Cluster;
use crate::support::chart_render::render_chart;
use crate::support::containers::{container_logs, wait_healthy, Scratch};
use crate::support::kubelet::{docker, docker_ok};
use crate::support::{free_port, kubectl, kubectl_stdin, wait_for_crds};

/// The release's name and namespace.
pub const RELEASE: &str = "neverwiped";
pub const OPERATOR_NAMESPACE: &str = "neverwiped";

/// The kinds the test API server serves, applied as rendered.
const APPLIED_KINDS: [&str; 8] = [
    "ServiceAccount",
    "Secret",
    "ConfigMap",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "Namespace",
];
/// The kinds it does not serve, and that the operator does not need to work.
const LEFT_OUT_KINDS: [&str; 4] = [
    "Service",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "PodDisruptionBudget",
];

/// An installed release: its operator running from its image.
pub struct Release {
    container: String,
    _config: Scratch,
}

/// Installs the chart with `values` on `cluster` (the current API server); `None` (after a
/// recorded skip, a failure under CI) when Helm cannot render here.
pub fn helm_install(cluster: &Cluster, values: &Value) -> Option<Release> {
    let rendered = render_chart(RELEASE, OPERATOR_NAMESPACE, values)?;
    kubectl(&["create", "namespace", OPERATOR_NAMESPACE]);
    let crds = rendered["crds_yaml"].as_str().expect("the chart's CRDs");
    kubectl_stdin(&["apply", "--server-side", "-f", "-"], Some(crds));
    wait_for_crds();
    let manifests = rendered["manifests"].as_array().expect("manifests");
    let mut applied = Vec::new();
    let mut deployments = Vec::new();
    for manifest in manifests {
        let kind = manifest["kind"].as_str().expect("a kind");
        match kind {
            "Deployment" => deployments.push(manifest.clone()),
            _ if APPLIED_KINDS.contains(&kind) => applied.push(manifest.clone()),
            _ => assert!(
                LEFT_OUT_KINDS.contains(&kind),
                "the chart renders a {kind}, which this test neither applies nor plays"
            ),
        }
    }
    let list = json!({"apiVersion": "v1", "kind": "List", "items": applied});
    kubectl_stdin(&["apply", "-f", "-"], Some(&list.to_string()));
    let [deployment] = deployments.as_slice() else {
        panic!("the chart renders {} Deployments", deployments.len())
    };
    Some(Release::start(cluster, deployment))
}

impl Release {
    /// Runs the Deployment's pod as a container of its image, as its ServiceAccount.
    fn start(cluster: &Cluster, deployment: &Value) -> Release {
        let pod = &deployment["spec"]["template"]["spec"];
        let account = pod["serviceAccountName"]
            .as_str()
            .expect("a ServiceAccount");
        let config = Scratch::new(&format!("{}-operator", cluster.name));
        let kubeconfig = config.0.join("kubeconfig");
        std::fs::copy(
            cluster.service_account(OPERATOR_NAMESPACE, account),
            &kubeconfig,
        )
        .expect("the kubeconfig is copied");
        // Readable by the image's user, in a folder only this test uses.
        std::fs::set_permissions(&kubeconfig, std::fs::Permissions::from_mode(0o644))
            .expect("its mode");
        let container = format!("nw-worst-day-operator-{}", cluster.name);
        let _ = docker(&["rm", "--force", &container]);
        let port = free_port();
        let pod_name = format!("{RELEASE}-operator-5d8f7c9b6-{}", cluster.name);
        let mut args = docker_run_options(pod, &pod_name, port);
        let mount = format!(
            "type=bind,source={},target=/var/run/neverwiped/kubeconfig,readonly",
            kubeconfig.display()
        );
        args.extend(["--name".into(), container.clone(), "--mount".into(), mount]);
        args.extend([
            "--env".into(),
            "KUBECONFIG=/var/run/neverwiped/kubeconfig".into(),
        ]);
        let spec = &pod["containers"][0];
        args.push(spec["image"].as_str().expect("an image").to_owned());
        args.extend(strings(&spec["args"]));
        let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
        docker_ok(&arg_refs);
        let release = Release {
            container,
            _config: config,
        };
        wait_healthy(port, &release.container);
        release
    }

    pub fn logs(&self) -> String {
        container_logs(&self.container)
    }
}

/// `docker run` options for the pod's one container: its security context and environment
/// (`fieldRef`s resolved for `pod_name`), on the host's network, serving HTTP on `port`.
fn docker_run_options(pod: &Value, pod_name: &str, port: u16) -> Vec<String> {
    let spec = &pod["containers"][0];
    let (pod_security, security) = (&pod["securityContext"], &spec["securityContext"]);
    let user = security["runAsUser"]
        .as_i64()
        .or(pod_security["runAsUser"].as_i64())
        .expect("the chart sets the operator's user");
    let group = security["runAsGroup"]
        .as_i64()
        .or(pod_security["runAsGroup"].as_i64())
        .unwrap_or(user);
    let mut options: Vec<String> = vec!["run".into(), "--detach".into()];
    options.extend(["--network", "host", "--user"].map(String::from));
    options.push(format!("{user}:{group}"));
    if security["readOnlyRootFilesystem"] == true {
        options.push("--read-only".into());
    }
    for capability in strings(&security["capabilities"]["drop"]) {
        options.push(format!("--cap-drop={capability}"));
    }
    if security["allowPrivilegeEscalation"] == false {
        options.extend(["--security-opt".into(), "no-new-privileges".into()]);
    }
    for variable in spec["env"].as_array().expect("the operator's env") {
        let name = variable["name"].as_str().expect("a name");
        let value = match (
            &variable["value"],
            variable["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        ) {
            // The pod's own address, on the pod's network; here the host's, so a free port.
            _ if name == "NEVERWIPED_HTTP_ADDR" => format!("127.0.0.1:{port}"),
            (Value::String(value), _) => value.clone(),
            (_, Some("metadata.name")) => pod_name.to_owned(),
            (_, Some("metadata.namespace")) => OPERATOR_NAMESPACE.to_owned(),
            _ => panic!("{name}: cannot resolve {variable} outside a pod"),
        };
        options.extend(["--env".into(), format!("{name}={value}")]);
    }
    options
}

fn strings(value: &Value) -> Vec<String> {
    (value
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter())
    .map(|item| item.as_str().expect("a string").to_owned())
    .collect()
}

impl Drop for Release {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let logs = self.logs();
            let tail: Vec<&str> = logs.lines().rev().take(80).collect();
            eprintln!("--- last lines of the operator {}:", self.container);
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
        let _ = docker(&["rm", "--force", &self.container]);
    }
}
