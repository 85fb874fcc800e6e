//! The plugin applies the cluster admin's tenant policy before it sends a plan's gate login: a
//! plan whose URL was pointed elsewhere, or a repository named with `--repository` outside it, gets
//! nothing, and the host is said before it is contacted.

use std::path::Path;
use std::process::Output;

use super::support::{Persona, RestServer, TestNamespace};
use super::{back_up, failed, plan_object, succeeded, PASSWORD};

/// Runs the plugin in `namespace` with the tenant policy `policy` in its environment.
fn plugin_under(policy: Option<&str>, kubeconfig: &Path, namespace: &str, args: &[&str]) -> Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-neverwiped"));
    command
        .env("KUBECONFIG", kubeconfig)
        .env_remove("NEVERWIPED_PASSWORD")
        .env_remove("NEVERWIPED_TENANT_POLICY")
        .args(["-n", namespace])
        .args(args);
    if let Some(policy) = policy {
        command.env("NEVERWIPED_TENANT_POLICY", policy);
    }
    command.output().expect("the plugin runs")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plan_url_outside_the_tenant_policy_gets_no_login_and_the_host_is_named_first() {
    if !super::support::api_server_or_skip() {
        return;
    }
    let Some(server) = RestServer::start() else {
        return;
    };
    super::support::apply_crds();
    let namespace = TestNamespace::create("plugin-policy");
    let ns = namespace.name.as_str();
    let Some(kubeconfig) = Persona::Download.kubeconfig(&namespace) else {
        return;
    };
    server.create_plan_secrets(&namespace, PASSWORD);
    let url = server.url("policy");
    let host = format!("{ns}/nightly");
    let source = tempfile::tempdir().unwrap();
    std::fs::write(source.path().join("file"), b"content").unwrap();
    back_up(
        &format!("rest:{url}"),
        &server,
        &host,
        &[source.path().to_path_buf()],
    )
    .await;

    // The attacker's gate: a listener that would receive the login.
    let attacker = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    attacker.set_nonblocking(true).unwrap();
    let attacker_url = format!("http://{}/policy", attacker.local_addr().unwrap());
    namespace.create_object(&plan_object("moved", &attacker_url));
    namespace.create_object(&plan_object("nightly", &url));
    let policy = format!(r#"{{"allowedRepositoryPrefixes": ["{}"]}}"#, server.url(""));
    let refused = failed(plugin_under(
        Some(&policy),
        &kubeconfig,
        ns,
        &["snapshots", "moved"],
    ));
    assert!(
        refused.contains(&format!("BackupPlan {ns}/moved"))
            && refused.contains(&attacker_url)
            && refused.contains("allowedRepositoryPrefixes"),
        "{refused}"
    );
    assert!(
        attacker.accept().is_err(),
        "the plugin connected to a gate the policy does not allow"
    );
    assert!(!refused.contains(&server.password), "{refused}");

    // Inside the policy: the host is named on standard error, then the snapshots are listed.
    let output = plugin_under(Some(&policy), &kubeconfig, ns, &["snapshots", "nightly"]);
    let said = String::from_utf8_lossy(&output.stderr).into_owned();
    let listed = String::from_utf8(succeeded(output)).unwrap();
    assert!(
        listed.contains(&format!("1 snapshot(s) of {host}")),
        "{listed}"
    );
    assert!(
        said.contains(&format!("127.0.0.1:{}", server.port)),
        "the gate's host is named: {said}"
    );
    // A policy that cannot be read is an error, not a policy that allows anything.
    let broken = failed(plugin_under(
        Some("{\"allowedRepositoryPrefixez\": []}"),
        &kubeconfig,
        ns,
        &["snapshots", "nightly"],
    ));
    assert!(broken.contains("NEVERWIPED_TENANT_POLICY"), "{broken}");
    // A repository named on the command line is held to the same policy.
    let named = [
        "snapshots",
        "--repository",
        &attacker_url,
        "--password-secret",
        super::support::PASSWORD_SECRET,
        "--login-secret",
        super::support::GATE_SECRET,
    ];
    let refused = failed(plugin_under(Some(&policy), &kubeconfig, ns, &named));
    assert!(
        refused.contains("--repository names the repository")
            && refused.contains("allowedRepositoryPrefixes"),
        "{refused}"
    );
    assert!(attacker.accept().is_err(), "{refused}");
}
