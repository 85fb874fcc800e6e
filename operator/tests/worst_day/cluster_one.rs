//! Cluster 1: the chart, the application's namespace `shop`, its plan `nightly`, three nights of
//! backups; then everything of it is gone but the repository.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use neverwiped_testkit::Login;
use serde_json::{json, Value};

use super::cluster::{Cluster, Ports};
use super::release::helm_install;
use super::shop::{change_database, claim, entries, table_checksums, write_night, CLAIMS};
use crate::support::containers::{
    container_config, image, recorded, run, succeeded, Scratch, REPOSITORY_PASSWORD,
};
use crate::support::kubelet::Kubelet;
use crate::support::postgres::{Postgres, PG_ADMIN, PG_PASSWORD};
use crate::support::*;

/// The old application's namespace and plan: the snapshots' origin.
pub const NAMESPACE: &str = "shop";
pub const PLAN: &str = "nightly";
/// The gate's login for the plan's repository.
pub const GATE_LOGIN: Login = Login {
    username: "shop-backup",
    password: "gate pass: 5b1e ü",
};
const PORTS: Ports = Ports {
    api: 6543,
    etcd: 23890,
    etcd_peer: 23900,
};

/// The gate: rest-server with a login, over a folder of its own. It outlives both clusters.
pub struct Gate {
    server: neverwiped_testkit::RestServer,
    _data: Scratch,
}

impl Gate {
    pub fn start() -> Gate {
        let data = Scratch::new("worst-day-gate");
        // The login file goes beside the data folder: both inside the scratch folder.
        let repositories = data.0.join("repositories");
        let server = neverwiped_testkit::RestServer::start(&repositories, Some(GATE_LOGIN), false);
        Gate {
            server,
            _data: data,
        }
    }

    /// The plan's repository.
    pub fn url(&self) -> String {
        self.server.url("team-a/shop")
    }

    /// The URL prefix of every repository of this gate (`http://HOST:PORT/`).
    pub fn prefix(&self) -> String {
        self.server.url("")
    }
}

/// What the last night's snapshot holds, as the old cluster had it.
pub struct LastNight {
    pub snapshot: String,
    /// Each claim's volume: path → content hash and metadata.
    pub volumes: BTreeMap<String, BTreeMap<String, String>>,
    /// Each table of the database `shop`: row count and checksum.
    pub tables: BTreeMap<String, String>,
    /// Each claim as the old cluster's API server had it.
    pub claims: BTreeMap<String, Value>,
}

/// The values that make the chart run the images under test.
pub fn image_values() -> Value {
    let reference = |name: &str| {
        let full = image(name);
        let (repository, tag) = full.rsplit_once(':').expect("REPOSITORY:TAG");
        json!({"repository": repository, "tag": tag})
    };
    json!({"image": reference("operator"), "sidecar": {"image": reference("sidecar")}, "logFormat": "text"})
}

/// `overlay` merged into `base`, objects key by key.
pub fn merged(mut base: Value, overlay: &Value) -> Value {
    match (base.as_object_mut(), overlay.as_object()) {
        (Some(base_map), Some(overlay_map)) => {
            for (key, value) in overlay_map {
                let merged_value = merged(base_map.remove(key).unwrap_or(Value::Null), value);
                base_map.insert(key.clone(), merged_value);
            }
            base
        }
        _ => overlay.clone(),
    }
}

/// Three nights on cluster 1, then the end of it; `None` (after a recorded skip) when Helm cannot
/// render here.
pub async fn three_nights_on_cluster_one(script: &Path, gate: &Gate) -> Option<LastNight> {
    let cluster = Cluster::up(script, "cluster-1", PORTS);
    let policy = json!({"policy": {
        "allowedRepositoryPrefixes": [gate.prefix()],
        "privilegedMoverNamespaces": [NAMESPACE],
    }});
    let release = helm_install(&cluster, &merged(policy, &image_values()))?;
    storage_class(super::shop::OLD_CLASS);
    kubectl(&["create", "namespace", NAMESPACE]);
    let database = Postgres::start("worst-day-shop");
    let disks = Scratch::new("worst-day-cluster-1-disks");
    create_secret(
        NAMESPACE,
        "shop-repository",
        &[("password", REPOSITORY_PASSWORD)],
    );
    let (user, password) = (GATE_LOGIN.username, GATE_LOGIN.password);
    create_basic_auth_secret(NAMESPACE, "gate-login", user, password);
    create_basic_auth_secret(NAMESPACE, "pg-backup", PG_ADMIN, PG_PASSWORD);
    let client = client().await;
    let mut kubelet = Kubelet::new(client.clone(), NAMESPACE);
    for (name, size, access_mode) in CLAIMS {
        kubectl_stdin(
            &["apply", "-f", "-"],
            Some(&claim(NAMESPACE, name, size, access_mode).to_string()),
        );
        kubelet.claim(name, &disks.0.join(name));
    }
    let mut snapshots = Vec::new();
    for night in 1..=3 {
        let snapshot = one_night(&mut kubelet, &client, &disks.0, &database, gate, night).await;
        assert!(
            !snapshots.contains(&snapshot),
            "night {night} made a snapshot of its own"
        );
        snapshots.push(snapshot);
    }
    let last_night = LastNight {
        snapshot: snapshots.pop().expect("three snapshots"),
        volumes: CLAIMS
            .iter()
            .map(|(name, ..)| (name.to_string(), entries(&disks.0.join(name))))
            .collect(),
        tables: table_checksums(&database),
        claims: CLAIMS
            .iter()
            .map(|(name, ..)| {
                (
                    name.to_string(),
                    kubectl_json(&["get", "pvc", name, "-n", NAMESPACE]),
                )
            })
            .collect(),
    };
    // Everything goes: the namespace with the plan and the claims, the CRDs, the operator, the
    // API server and its etcd data, the database server and the volumes' disks.
    kubectl(&["delete", "namespace", NAMESPACE]);
    kubectl(&[
        "delete",
        "crd",
        "backupplans.neverwiped.io",
        "restores.neverwiped.io",
    ]);
    drop((release, kubelet));
    cluster.destroy();
    drop((database, disks));
    Some(last_night)
}

/// Night `night`: the application changes its files and its database, then the plan backs them
/// up (a manual run, as a schedule's would be); returns the night's snapshot id.
async fn one_night(
    kubelet: &mut Kubelet,
    client: &kube::Client,
    disks: &Path,
    database: &Postgres,
    gate: &Gate,
    night: u64,
) -> String {
    for (name, ..) in CLAIMS {
        write_night(&disks.join(name), name, night);
    }
    change_database(database, night);
    let trigger = format!("night-{night}");
    if night == 1 {
        let plan = plan(gate, database.port, &trigger).to_string();
        kubectl_stdin(&["apply", "-f", "-"], Some(&plan));
    } else {
        let patch = json!({"spec": {"manualTrigger": trigger}}).to_string();
        kubectl(&[
            "patch",
            "backupplan",
            PLAN,
            "-n",
            NAMESPACE,
            "--type",
            "merge",
            "-p",
            &patch,
        ]);
    }
    // The plan's generation is the night's number: its manual run is `nightly-manual-NIGHT`.
    let job = format!("{PLAN}-manual-{night}");
    let backup = run(kubelet, client, NAMESPACE, &job).await;
    assert!(
        succeeded(&backup),
        "night {night}'s backup failed: {:?}\n{}",
        backup.ending,
        container_config(&backup)
    );
    let status = recorded(NAMESPACE, PLAN, &job).await;
    assert_eq!(status["lastRun"]["result"], "Succeeded", "{status:#}");
    assert_eq!(
        status["lastRun"]["warnings"].as_u64().unwrap_or(0),
        0,
        "{status:#}"
    );
    let snapshot = status["lastRun"]["snapshotId"]
        .as_str()
        .expect("a snapshot id");
    snapshot.to_owned()
}

/// The plan: both claims and the database, read as root with DAC_READ_SEARCH (the files of
/// three owners are private), to the gate with its login.
fn plan(gate: &Gate, database_port: u16, trigger: &str) -> Value {
    json!({
        "apiVersion": "neverwiped.io/v1alpha1", "kind": "BackupPlan",
        "metadata": {"name": PLAN, "namespace": NAMESPACE},
        "spec": {
            "schedule": "30 2 * * *",
            "manualTrigger": trigger,
            "repository": {
                "url": gate.url(),
                "passwordSecretRef": {"name": "shop-repository", "key": "password"},
                "credentialsSecretRef": {"name": "gate-login"},
            },
            "copyMethod": "Direct",
            "volumes": CLAIMS.map(|(name, ..)| json!({"claimName": name})),
            "databases": [{
                "name": "orders", "type": "postgresql", "host": "127.0.0.1", "port": database_port,
                "credentialsSecretRef": {"name": "pg-backup"}, "databases": ["shop"],
            }],
            "mover": {"mode": "Privileged"},
        },
    })
}

/// A StorageClass of the cluster, as its admin (or its provider) made it.
pub fn storage_class(name: &str) {
    let class = json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": name}, "provisioner": "csi.example.com",
    });
    kubectl_stdin(&["apply", "-f", "-"], Some(&class.to_string()));
}

/// A folder standing for a new, empty volume, as a provisioner makes it: root's, 0755.
pub fn new_disk(path: &Path) -> PathBuf {
    super::shop::empty_volume(path);
    path.to_owned()
}
