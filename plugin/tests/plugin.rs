//! `kubectl-neverwiped` against the real API server and a real rest-server, as real users bound
//! by the Roles `docs/security.md` recommends (`docs/examples/rbac-plugin-*.yaml`): with only a
//! kubeconfig, it lists a plan's snapshots, prints a file byte for byte, downloads a folder that
//! matches its source (SHA-256 and metadata), and says which right is missing when one is.

#[path = "plugin/from_copy.rs"]
mod from_copy;
#[path = "plugin/hostile_snapshots.rs"]
mod hostile_snapshots;
#[path = "plugin/personas.rs"]
mod personas;
#[path = "plugin/runs.rs"]
mod runs;
mod support;
#[path = "plugin/tenant_policy.rs"]
mod tenant_policy;
#[path = "plugin/without_a_plan.rs"]
mod without_a_plan;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;

use neverwiped::archive::{self, BackupOptions, Source};
use neverwiped::backend::rest::{self, RestConfig, RestOptions};
use neverwiped::backend::retry::RetryPolicy;
use neverwiped::crypto::KdfParams;
use neverwiped::repository::Repository;
use neverwiped_contract::location::RepositoryLocation;
use serde_json::json;
use sha2::{Digest, Sha256};
use support::{Persona, RestServer, TestNamespace, GATE_SECRET, PASSWORD_SECRET};

const PASSWORD: &str = "correct horse battery staple";

/// Runs the plugin with `kubeconfig`, in `namespace`.
fn plugin(kubeconfig: &Path, namespace: &str, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-neverwiped"))
        .env("KUBECONFIG", kubeconfig)
        .env_remove("NEVERWIPED_PASSWORD")
        .args(["-n", namespace])
        .args(args)
        .output()
        .expect("the plugin runs")
}

fn succeeded(output: Output) -> Vec<u8> {
    assert!(
        output.status.success(),
        "the plugin failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

fn failed(output: Output) -> String {
    assert!(!output.status.success(), "the plugin should have failed");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A source tree with what a restore must keep: nested folders, modes, times, a symbolic link,
/// an empty file and a file of several chunks.
fn source_tree(root: &Path) {
    let app = root.join("app");
    std::fs::create_dir_all(app.join("conf/deep")).unwrap();
    std::fs::write(app.join("conf/app.yaml"), b"replicas: 3\n").unwrap();
    std::fs::write(app.join("conf/deep/secret.key"), b"k3y\x00\xff").unwrap();
    std::fs::set_permissions(
        app.join("conf/deep/secret.key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::fs::write(app.join("empty"), b"").unwrap();
    let mut large = Vec::with_capacity(5 << 20);
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    while large.len() < 5 << 20 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        large.extend_from_slice(&state.to_le_bytes());
    }
    std::fs::write(app.join("large.bin"), &large).unwrap();
    std::os::unix::fs::symlink("conf/app.yaml", app.join("current")).unwrap();
    std::fs::set_permissions(app.join("conf"), std::fs::Permissions::from_mode(0o750)).unwrap();
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
    for file in ["conf/app.yaml", "large.bin", "empty"] {
        let handle = std::fs::File::options()
            .write(true)
            .open(app.join(file))
            .unwrap();
        handle.set_modified(old).unwrap();
    }
    std::fs::write(root.join("outside.txt"), b"not asked for").unwrap();
}

/// Every entry below `root`: its relative path, kind, mode, mtime, size, owner and SHA-256 (or
/// link target).
fn tree_facts(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut facts = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let relative = path.strip_prefix(root).unwrap().to_path_buf();
            let content = if meta.file_type().is_symlink() {
                format!("-> {}", std::fs::read_link(&path).unwrap().display())
            } else if meta.is_dir() {
                stack.push(path.clone());
                "dir".to_owned()
            } else {
                format!("{:x}", Sha256::digest(std::fs::read(&path).unwrap()))
            };
            // Directory times change as a restore fills them: compared for files and links.
            let mtime = if meta.is_dir() { 0 } else { meta.mtime() };
            facts.insert(
                relative,
                format!(
                    "{content} mode={:o} mtime={mtime} size={} owner={}:{}",
                    meta.mode() & 0o7777,
                    if meta.is_dir() { 0 } else { meta.len() },
                    meta.uid(),
                    meta.gid()
                ),
            );
        }
    }
    facts
}

/// Backs up `paths` into the repository at `url` under `host`; returns the snapshot's id.
async fn back_up(url: &str, server: &RestServer, host: &str, paths: &[PathBuf]) -> String {
    back_up_recording(url, server, host, paths, Default::default()).await
}

/// As [`back_up`], the snapshot recording `sources` as a plan's backup Job does.
async fn back_up_recording(
    url: &str,
    server: &RestServer,
    host: &str,
    paths: &[PathBuf],
    sources: neverwiped_contract::record::RecordedSources,
) -> String {
    let RepositoryLocation::Rest(location) = RepositoryLocation::parse(url).unwrap() else {
        panic!("{url} names no gate");
    };
    let config = RestConfig {
        url: location.url().clone(),
        username: Some(server.username.clone()),
        password: Some(server.password.clone()),
        ..RestConfig::default()
    };
    let backend = rest::open(config, RestOptions::default(), RetryPolicy::default()).unwrap();
    let repo = match Repository::open(backend.clone(), PASSWORD.as_bytes()).await {
        Ok(repo) => repo,
        Err(_) => Repository::init(backend, PASSWORD.as_bytes(), KdfParams::default())
            .await
            .unwrap(),
    };
    let repo = repo.load_index().await.unwrap();
    let mut options = BackupOptions::new(paths.iter().cloned().map(Source::Path).collect());
    options.hostname = host.to_owned();
    options.tags = vec!["plan=nightly".into()];
    options.recorded = std::sync::Arc::new(move || sources.clone());
    let report = archive::backup(&repo, options).await.unwrap();
    report.snapshot_id.to_hex()
}

fn plan_object(name: &str, url: &str) -> serde_json::Value {
    json!({
        "apiVersion": "neverwiped.io/v1alpha1", "kind": "BackupPlan",
        "metadata": {"name": name},
        "spec": {
            "schedule": "@daily",
            "suspend": true,
            "repository": {
                "url": url,
                "passwordSecretRef": {"name": PASSWORD_SECRET, "key": "password"},
                "credentialsSecretRef": {"name": GATE_SECRET},
            },
            "volumes": [{"claimName": "data"}],
        },
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn with_only_a_kubeconfig_the_plugin_lists_prints_and_downloads_a_plans_snapshots() {
    if !support::api_server_or_skip() {
        return;
    }
    let Some(server) = RestServer::start() else {
        return;
    };
    support::apply_crds();
    let namespace = TestNamespace::create("plugin");
    let ns = namespace.name.as_str();
    let Some(kubeconfig) = Persona::Download.kubeconfig(&namespace) else {
        return;
    };
    // The password as `kubectl create secret --from-file` stores a file `echo` wrote.
    server.create_plan_secrets(&namespace, &format!("{PASSWORD}\n"));
    let url = server.url("shop");
    namespace.create_object(&plan_object("nightly", &url));

    let source = tempfile::tempdir().unwrap();
    source_tree(source.path());
    let data = source.path().to_path_buf();
    let host = format!("{ns}/nightly");
    let rest_url = format!("rest:{url}");
    let first = back_up(&rest_url, &server, &host, std::slice::from_ref(&data)).await;
    // Another plan's snapshot in the same repository: not the plan's, never listed or chosen.
    let other = back_up(
        &rest_url,
        &server,
        "elsewhere/plan",
        std::slice::from_ref(&data),
    )
    .await;
    let config = data.join("app/conf/app.yaml");
    std::fs::write(&config, b"replicas: 5\n").unwrap();
    let second = back_up(&rest_url, &server, &host, std::slice::from_ref(&data)).await;

    // snapshots: the plan's own, newest first.
    let listed = String::from_utf8(succeeded(plugin(
        &kubeconfig,
        ns,
        &["snapshots", "nightly"],
    )))
    .unwrap();
    let first_at = listed
        .find(&first[..8])
        .expect("the first snapshot is listed");
    let second_at = listed
        .find(&second[..8])
        .expect("the second snapshot is listed");
    assert!(second_at < first_at, "newest first:\n{listed}");
    assert!(!listed.contains(&other[..8]), "{listed}");
    assert!(
        listed.contains(&format!("2 snapshot(s) of {host}")),
        "{listed}"
    );

    // cat: byte for byte, of the newest and of an older snapshot by id prefix.
    let large = data.join("app/large.bin");
    let large_path = large.to_str().unwrap();
    let printed = succeeded(plugin(
        &kubeconfig,
        ns,
        &["cat", "nightly", "latest", large_path],
    ));
    assert_eq!(printed, std::fs::read(&large).unwrap());
    let config_path = config.to_str().unwrap();
    let old = succeeded(plugin(
        &kubeconfig,
        ns,
        &["cat", "nightly", &first[..10], config_path],
    ));
    assert_eq!(old, b"replicas: 3\n");
    let new = succeeded(plugin(
        &kubeconfig,
        ns,
        &["cat", "nightly", "latest", config_path],
    ));
    assert_eq!(new, b"replicas: 5\n");

    // ls: the folder and what is below it, nothing beside it.
    let app = data.join("app");
    let app_path = app.to_str().unwrap();
    let entries = String::from_utf8(succeeded(plugin(
        &kubeconfig,
        ns,
        &["ls", "nightly", "latest", app_path],
    )))
    .unwrap();
    assert!(entries.contains("/app/conf/deep/secret.key"), "{entries}");
    assert!(entries.contains("current -> conf/app.yaml"), "{entries}");
    assert!(!entries.contains("outside.txt"), "{entries}");

    // download: the folder comes back as it was backed up.
    let target = tempfile::tempdir().unwrap();
    let to = target.path().join("out");
    succeeded(plugin(
        &kubeconfig,
        ns,
        &[
            "download",
            "nightly",
            "latest",
            app_path,
            "--to",
            to.to_str().unwrap(),
        ],
    ));
    let downloaded = to.join(app.strip_prefix("/").unwrap());
    let source_facts = tree_facts(&app);
    assert_eq!(source_facts.len(), 7, "{source_facts:#?}");
    assert_eq!(tree_facts(&downloaded), source_facts);
    assert!(!to
        .join(data.strip_prefix("/").unwrap())
        .join("outside.txt")
        .exists());

    // Clear refusals: another host's snapshot, a missing plan, a missing file.
    let refused = failed(plugin(
        &kubeconfig,
        ns,
        &["cat", "nightly", &other[..8], config_path],
    ));
    assert!(
        refused.contains(&format!("is of host elsewhere/plan, not of {host}")),
        "{refused}"
    );
    let missing = failed(plugin(&kubeconfig, ns, &["snapshots", "nope"]));
    assert!(
        missing.contains(&format!(
            "BackupPlan \"nope\" does not exist in namespace \"{ns}\""
        )),
        "{missing}"
    );
    let no_file = failed(plugin(
        &kubeconfig,
        ns,
        &["cat", "nightly", "latest", "/no/such"],
    ));
    assert!(
        no_file.contains("/no/such is not in the snapshot"),
        "{no_file}"
    );
}

#[test]
fn each_user_is_told_by_the_api_servers_refusal_which_right_they_lack() {
    if !support::api_server_or_skip() {
        return;
    }
    support::apply_crds();
    let namespace = TestNamespace::create("plugin-rbac");
    let ns = namespace.name.as_str();
    namespace.create_secret(PASSWORD_SECRET, "Opaque", &[("password", PASSWORD)]);
    namespace.create_secret("elsewhere", "Opaque", &[("password", PASSWORD)]);
    namespace.create_object(&plan_object("nightly", "http://127.0.0.1:9/shop"));
    let mut other = plan_object("other", "http://127.0.0.1:9/other");
    other["spec"]["repository"]["passwordSecretRef"]["name"] = json!("elsewhere");
    namespace.create_object(&other);
    let (Some(watcher), Some(reader), Some(nobody)) = (
        Persona::Watch.kubeconfig(&namespace),
        Persona::Download.kubeconfig(&namespace),
        support::nobody_kubeconfig(),
    ) else {
        return;
    };
    let refused = |kubeconfig: &Path, args: &[&str], right: &str| {
        let error = failed(plugin(kubeconfig, ns, args));
        assert!(error.contains(&format!("you may not {right}")), "{error}");
        assert!(error.contains("403 Forbidden"), "{error}");
        assert!(!error.contains(PASSWORD), "{error}");
    };

    // Who watches sees the plans, and no Secret: no snapshot, no run.
    let table = String::from_utf8(succeeded(plugin(&watcher, ns, &["status"]))).unwrap();
    assert!(table.lines().any(|l| l.starts_with("nightly ")), "{table}");
    let secret = format!("get secrets \"{PASSWORD_SECRET}\" in namespace \"{ns}\"");
    refused(&watcher, &["snapshots", "nightly"], &secret);
    let trigger = format!("patch backupplans.neverwiped.io \"nightly\" in namespace \"{ns}\"");
    refused(&watcher, &["backup", "nightly"], &trigger);
    // Who reads files reads only the Secrets the plan names, and starts nothing.
    let elsewhere = format!("get secrets \"elsewhere\" in namespace \"{ns}\"");
    refused(&reader, &["ls", "other", "latest"], &elsewhere);
    refused(
        &reader,
        &["restore", "nightly", "--no-wait"],
        "create restores.neverwiped.io",
    );
    refused(&reader, &["status"], "list backupplans.neverwiped.io");
    // Without any Role, the plan itself is refused.
    let plan = "get backupplans.neverwiped.io \"nightly\"";
    refused(&nobody, &["ls", "nightly", "latest"], plan);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gate_that_cannot_be_reached_is_named_with_the_plan() {
    if !support::api_server_or_skip() {
        return;
    }
    support::apply_crds();
    let namespace = TestNamespace::create("plugin-gate");
    let ns = namespace.name.as_str();
    let Some(kubeconfig) = Persona::Download.kubeconfig(&namespace) else {
        return;
    };
    namespace.create_secret(PASSWORD_SECRET, "Opaque", &[("password", PASSWORD)]);
    namespace.create_secret(
        GATE_SECRET,
        "kubernetes.io/basic-auth",
        &[("username", "u"), ("password", "p")],
    );
    let closed = support::free_port();
    let url = format!("http://127.0.0.1:{closed}/shop");
    namespace.create_object(&plan_object("nightly", &url));
    let started = std::time::Instant::now();
    let error = failed(plugin(
        &kubeconfig,
        ns,
        &["--gate-timeout", "2s", "snapshots", "nightly"],
    ));
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    assert!(
        error.contains(&format!(
            "the repository of BackupPlan {ns}/nightly at {url}"
        )),
        "{error}"
    );
    assert!(error.contains("cannot be reached"), "{error}");
}
