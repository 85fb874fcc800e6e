//! Never wiped, end to end through the built images: the operator from its image as the chart's
//! ServiceAccount of a namespace of its own, every Job a container of the sidecar image
//! (`support::kubelet`), the gate two rest-servers on one data folder behind one URL (the
//! tenant's login to an `--append-only` one, the admin's to a full one), and the tenant a real
//! user of the API server with every right in its own namespace.
//!
//! With all its namespace holds (the Secrets the backup pod mounts: the gate login and the
//! repository password), the tenant runs the sidecar image to forget and prune, and sends raw
//! deletes and a new `config` to the gate: each is refused and nothing changes. Then a ransomware
//! night: the application's files become random bytes of the same sizes, the tenant sets
//! `keepLast: 1` and a prune every minute, three nightly backups follow. The plan shows
//! `SuspiciousChange`, the operator's gauge makes the chart's alert fire (promtool), the admin's
//! prune (in the operator's namespace, with the admin's login) frees the junk the tenant uploaded
//! and forgets nothing, every snapshot is still there, `check --read-data` is clean, and the
//! last snapshot before the attack restores identically through a Restore.

use neverwiped_testkit::{request_as, GatePair, Login};

use super::*;
use support::alert_rules::{
    alert_rule, assert_promtool_tests, chart_rule_groups, expanded_annotations, promtool,
};
use support::tenant::{kubectl_as, refused, tenant};

const TENANT: Login = Login {
    username: "tenant",
    password: "tenant-gate-password-61b0",
};
const ADMIN: Login = Login {
    username: "gate-admin",
    password: "gate-admin-password-3f9e",
};
/// The application's user, whose pod mounts the volume.
const APP: (u32, u32) = (1000, 1000);
/// The admin's prune is scheduled every minute; it may take that long to come.
const PRUNE_WAIT: Duration = Duration::from_secs(150);
/// The junk the tenant uploads as a pack: what the admin's prune must free.
const JUNK_BYTES: usize = 1 << 20;

/// 24 files of text that compresses, 32 KiB to 128 KiB each, in two private folders of the
/// application's user.
fn fill_documents(root: &Path) {
    folder(root, "", APP, 0o750);
    for index in 0..24usize {
        let folder_name = if index % 2 == 0 { "docs" } else { "db" };
        let line = format!("order {index}: customer record, shipped, invoice paid\n");
        let size = (32 + (index % 4) * 32) << 10;
        let text = line.repeat(size / line.len() + 1)[..size].to_owned();
        let path = format!("{folder_name}/file-{index:02}.txt");
        put(root, &path, text.as_bytes(), APP, 0o640);
    }
    folder(root, "docs", APP, 0o750);
    folder(root, "db", APP, 0o700);
}

/// The attack: every file rewritten in place with bytes that do not compress, of its size.
fn encrypt(root: &Path) {
    for (seed, folder_name) in ["docs", "db"].into_iter().enumerate() {
        for entry in std::fs::read_dir(root.join(folder_name)).expect("the folder") {
            let path = entry.expect("an entry").path();
            let size = std::fs::metadata(&path).expect("metadata").len() as usize;
            std::fs::write(&path, noise(size, 77 + seed as u64)).expect("encrypted");
        }
    }
}

/// Runs the sidecar image with `login` and the repository password mounted as files, as the
/// tenant could from its namespace's Secrets (or the admin from the maintenance Secret): the
/// host's network, a read-only root, no capability, the image's user.
fn sidecar_as(login: Login, args: &[&str]) -> std::process::Output {
    let secrets = Scratch::new(&format!("secrets-{}", login.username));
    for (file, text) in [
        ("password", REPOSITORY_PASSWORD),
        ("gate-password", login.password),
    ] {
        std::fs::write(secrets.0.join(file), text).expect("a secret file");
    }
    let env = secrets.0.join("env");
    let pairs = format!(
        "NEVERWIPED_PASSWORD_FILE=/secrets/password\nNEVERWIPED_GATE_USERNAME={}\n\
         NEVERWIPED_GATE_PASSWORD_FILE=/secrets/gate-password\nTMPDIR=/tmp\nHOME=/tmp\n",
        login.username
    );
    std::fs::write(&env, pairs).expect("the env file");
    let mount = format!(
        "type=bind,source={},target=/secrets,readonly",
        secrets.0.display()
    );
    let mut command = vec!["run", "--rm", "--network", "host", "--read-only"];
    command.extend(["--tmpfs", "/tmp", "--cap-drop=ALL"]);
    command.extend(["--security-opt", "no-new-privileges", "--mount", &mount]);
    let env_file = env.to_str().expect("a path");
    command.extend(["--env-file", env_file, SIDECAR_IMAGE_DEV.as_str()]);
    command.extend(args);
    docker(&command)
}

/// Asserts the gate refused the sidecar's deletes as append-only, and nothing was called damage.
fn refused_by_gate(output: std::process::Output, what: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{what} succeeded: {stderr}");
    assert!(
        stderr.contains("403 Forbidden") && stderr.contains("append-only"),
        "{what}: {stderr}"
    );
    assert!(
        !stderr.to_lowercase().contains("corrupt"),
        "{what}: {stderr}"
    );
}

/// The ids of the snapshots the admin's login lists.
fn snapshot_ids(url: &str) -> Vec<String> {
    let repository = format!("rest:{url}");
    let output = sidecar_as(ADMIN, &["--repo", &repository, "snapshots", "--json"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let listed: Vec<Value> = serde_json::from_slice(&output.stdout).expect("JSON");
    let mut ids: Vec<String> = listed
        .iter()
        .map(|s| s["id"].as_str().expect("an id").to_owned())
        .collect();
    ids.sort();
    ids
}

/// The first stored object of `kind` in the repository's folder (data packs sit one level down).
fn first_object(repository: &Path, kind: &str) -> String {
    let mut pending = vec![repository.join(kind)];
    let mut files = Vec::new();
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("a folder") {
            let path = entry.expect("an entry").path();
            match path.is_dir() {
                true => pending.push(path),
                false => files.push(path),
            }
        }
    }
    files.sort();
    let first = files.first().unwrap_or_else(|| panic!("no {kind} object"));
    first.file_name().unwrap().to_str().unwrap().to_owned()
}

/// The namespaces, the gate and the tenant of the test.
struct World {
    ns: String,
    own_ns: String,
    gate: GatePair,
    /// The repository's folder at the gate.
    repository: PathBuf,
    /// The tenant's kubeconfig.
    tenant: PathBuf,
}

impl World {
    fn url(&self) -> String {
        self.gate.url("app")
    }

    /// Applies a merge patch to the plan as the tenant.
    fn tenant_patches_plan(&self, patch: Value) {
        let patch = patch.to_string();
        let args = [
            "patch",
            "backupplan",
            "nightly",
            "-n",
            &self.ns,
            "--type=merge",
            "-p",
            &patch,
        ];
        let output = kubectl_as(&self.tenant, &args);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// Everything the tenant's namespace holds, used against the repository: the sidecar's forget and
/// prune, raw deletes of each kind of object and a new `config`, and a look at the operator's
/// namespace. The tenant may still add objects: it uploads junk, returned as its pack name.
async fn the_tenant_tries_everything(world: &World, good: &str) -> String {
    // The tenant holds the backup pod's login.
    let template = "go-template={{.data.password | base64decode}}";
    let args = [
        "get",
        "secret",
        "gate-login",
        "-n",
        &world.ns,
        "-o",
        template,
    ];
    let held = kubectl_as(&world.tenant, &args);
    assert_eq!(String::from_utf8_lossy(&held.stdout), TENANT.password);
    let (url, repository) = (world.url(), world.repository.as_path());
    let repo = format!("rest:{url}");
    for args in [
        vec!["forget", "--keep-last", "1"],
        vec!["forget", good],
        vec!["prune", "--keep-last", "1"],
    ] {
        let mut command = vec!["--repo", repo.as_str()];
        command.extend(&args);
        refused_by_gate(sidecar_as(TENANT, &command), &args.join(" "));
    }
    let login = (TENANT.username, TENANT.password);
    for kind in ["snapshots", "data", "index", "keys"] {
        let name = first_object(repository, kind);
        let status = request_as("DELETE", &format!("{url}{kind}/{name}"), login, vec![]).await;
        assert_eq!(status, 403, "DELETE {kind}/{name}");
        assert_eq!(
            first_object(repository, kind),
            name,
            "{kind}/{name} is kept"
        );
    }
    let config = std::fs::read(repository.join("config")).expect("the config");
    let status = request_as("POST", &format!("{url}config"), login, b"junk".to_vec()).await;
    assert_eq!(status, 403, "POST config");
    assert_eq!(std::fs::read(repository.join("config")).unwrap(), config);
    for args in [
        ["get", "secret", "gate-maintenance", "-n", &world.own_ns],
        ["get", "jobs", "-n", &world.own_ns, "-o=name"],
    ] {
        refused(&world.tenant, &args);
    }
    let junk = noise(JUNK_BYTES, 91);
    let scratch = Scratch::new("junk");
    std::fs::write(scratch.0.join("junk"), &junk).unwrap();
    let name = sha256(&scratch.0.join("junk"));
    let status = request_as("POST", &format!("{url}data/{name}"), login, junk).await;
    assert_eq!(status, 200, "the append-only login adds objects");
    name
}

/// Runs the backup of night `night` (the plan's manual trigger), as a container; returns the
/// plan's status once recorded.
async fn night(world: &World, kubelet: &mut Kubelet, client: &kube::Client, night: u32) -> Value {
    if night > 1 {
        world.tenant_patches_plan(json!({"spec": {"manualTrigger": night.to_string()}}));
    }
    let job = format!("nightly-manual-{night}");
    let run = run(kubelet, client, &world.ns, &job).await;
    assert!(succeeded(&run), "night {night}: {}", container_config(&run));
    let status = recorded(&world.ns, "nightly", &job).await;
    assert_eq!(status["lastRun"]["result"], "Succeeded", "{status:#}");
    status
}

fn condition(status: &Value, type_: &str) -> Value {
    let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    let found = conditions.into_iter().find(|c| c["type"] == type_);
    found.unwrap_or_else(|| panic!("no {type_} condition: {status:#}"))
}

/// The chart's alert fires for the gauge the operator serves for the plan.
fn the_alert_fires(operator: &OperatorContainer, ns: &str) {
    let metrics = http_get(operator.port, "/metrics").expect("the operator's metrics");
    let series = format!("neverwiped_suspicious_change{{namespace=\"{ns}\",plan=\"nightly\"}}");
    let sample = metrics.lines().find_map(|line| line.strip_prefix(&series));
    assert_eq!(sample.map(str::trim), Some("1"), "{series} in:\n{metrics}");
    let (Some(promtool), Some(groups)) = (promtool(), chart_rule_groups()) else {
        panic!("promtool and the chart's rules are needed");
    };
    let rule = alert_rule(&groups, "NeverwipedSuspiciousChange");
    let tests = json!([{
        "interval": "1m",
        "input_series": [{"series": series, "values": "1x5"}],
        "alert_rule_test": [{"eval_time": "5m", "alertname": "NeverwipedSuspiciousChange", "exp_alerts": [{
            "exp_labels": {"severity": "critical", "namespace": ns, "plan": "nightly"},
            "exp_annotations": expanded_annotations(&rule, ns, "nightly"),
        }]}],
    }]);
    assert_promtool_tests(promtool, &groups, tests);
}

/// Waits for the admin's prune Job of the plan in the operator's namespace and runs it.
async fn admins_prune(world: &World, client: &kube::Client) -> PodRun {
    let jobs: kube::Api<k8s_openapi::api::batch::v1::Job> =
        kube::Api::namespaced(client.clone(), &world.own_ns);
    let labels = format!(
        "neverwiped.io/plan=nightly,neverwiped.io/plan-namespace={}",
        world.ns
    );
    let job = eventually("the admin's prune Job", PRUNE_WAIT, || async {
        let listed = jobs
            .list(&kube::api::ListParams::default().labels(&labels))
            .await;
        listed.ok()?.items.into_iter().next()
    })
    .await;
    let name = job.metadata.name.expect("a name");
    let mut kubelet = Kubelet::new(client.clone(), &world.own_ns);
    let run = run(&mut kubelet, client, &world.own_ns, &name).await;
    assert!(succeeded(&run), "the prune: {}", container_config(&run));
    run
}

#[tokio::test]
async fn the_tenant_deletes_nothing_and_the_snapshot_before_a_ransomware_night_restores() {
    if !parts_or_skip() {
        return;
    }
    apply_crds();
    let namespace = TestNamespace::create("never-wiped");
    let own = TestNamespace::create("never-wiped-op");
    let client = client().await;
    let scratch = Scratch::new(&format!("{}-volumes", namespace.name));
    let (data, restored) = (scratch.0.join("app"), scratch.0.join("restored"));
    let gate_data = scratch.0.join("gate");
    let world = World {
        ns: namespace.name.clone(),
        own_ns: own.name.clone(),
        gate: GatePair::start(&gate_data, TENANT, ADMIN),
        repository: gate_data.join("app"),
        tenant: tenant(&namespace.name),
    };
    let ns = world.ns.as_str();
    secret(ns, "repository", &[("password", REPOSITORY_PASSWORD)]);
    create_basic_auth_secret(ns, "gate-login", TENANT.username, TENANT.password);
    create_basic_auth_secret(
        &world.own_ns,
        "gate-maintenance",
        ADMIN.username,
        ADMIN.password,
    );
    fill_documents(&data);
    folder(&restored, "", (0, 1000), 0o2775);
    claim(ns, "app");
    claim(ns, "app-restored");
    application_pod(ns, "app");
    let mut kubelet = Kubelet::new(client.clone(), ns);
    kubelet.claim("app", &data);
    kubelet.claim("app-restored", &restored);
    let maintenance = json!({
        "credentials": [{"urlPrefix": world.gate.front.base_url(), "secretName": "gate-maintenance"}],
        "protectionWindow": {"default": "14d"},
    });
    let operator = OperatorContainer::start_in(
        Some(ns),
        &world.own_ns,
        "{}",
        &[
            ("NEVERWIPED_MAINTENANCE", &maintenance.to_string()),
            // Two nights of history with a parent are enough here (the chart's default is three).
            ("NEVERWIPED_SUSPICIOUS_MIN_HISTORY", "2"),
        ],
    );
    let mut spec = plan(
        ns,
        "nightly",
        &world.url(),
        json!({"volumes": [{"claimName": "app"}]}),
    );
    spec["spec"]["repository"]["credentialsSecretRef"] = json!({"name": "gate-login"});
    spec["spec"]["retention"] = json!({"keepDaily": 7});
    spec["spec"]["maintenance"] = json!({"prune": {"suspend": true}, "check": {"suspend": true}});
    support::tenant::apply_as(&world.tenant, &spec);

    // Three usual nights: a file edited each night.
    night(&world, &mut kubelet, &client, 1).await;
    for n in 2..=3 {
        let edited = data.join("docs/file-00.txt");
        let text = std::fs::read_to_string(&edited).unwrap() + &format!("night {n}\n");
        std::fs::write(&edited, text).unwrap();
        night(&world, &mut kubelet, &client, n).await;
    }
    let status = plan_status(ns, "nightly");
    assert_eq!(condition(&status, "Ready")["reason"], "Ready", "{status:#}");
    let good = status["lastRun"]["snapshotId"].as_str().unwrap().to_owned();
    let before = tree(&data);
    let junk = the_tenant_tries_everything(&world, &good).await;
    assert_eq!(snapshot_ids(&world.url()).len(), 3);

    // The attack, then the tenant's retention of one snapshot, and three nights.
    encrypt(&data);
    world
        .tenant_patches_plan(json!({"spec": {"retention": {"keepLast": 1}, "manualTrigger": "4"}}));
    for n in 4..=6 {
        night(&world, &mut kubelet, &client, n).await;
    }
    let status = plan_status(ns, "nightly");
    let flagged = condition(&status, "SuspiciousChange");
    assert_eq!(
        (&flagged["status"], &flagged["reason"]),
        (&json!("True"), &json!("MassRewrite")),
        "{status:#}"
    );
    the_alert_fires(&operator, ns);

    // The tenant asks for a prune every minute: the admin's runs, frees the junk, keeps history.
    world.tenant_patches_plan(
        json!({"spec": {"maintenance": {"prune": {"suspend": false, "schedule": "* * * * *"}}}}),
    );
    let junk_path = world.repository.join("data").join(&junk[..2]).join(&junk);
    assert!(junk_path.is_file(), "{}", junk_path.display());
    let prune = admins_prune(&world, &client).await;
    assert!(
        !junk_path.exists(),
        "the junk is freed: {}",
        container_config(&prune)
    );
    let ids = snapshot_ids(&world.url());
    assert_eq!(ids.len(), 6, "every snapshot kept: {ids:?}");
    let repository = format!("rest:{}", world.url());
    let check = sidecar_as(ADMIN, &["--repo", &repository, "check", "--read-data"]);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );

    // The last snapshot before the attack comes back whole.
    let volumes = json!([{"sourceClaimName": "app", "targetClaimName": "app-restored"}]);
    restore(
        &mut kubelet,
        &client,
        ns,
        "before-attack",
        json!({"snapshot": good, "volumes": volumes}),
    )
    .await;
    let (mut expected, mut got) = (before, tree(&restored));
    // The target's root keeps its own owner and mode (see the unprivileged test).
    assert!(expected.remove("/").is_some() && got.remove("/").is_some());
    assert_eq!(
        got, expected,
        "the snapshot before the attack restores identically"
    );
}
