//! Cluster 2, from nothing: the chart with the runbook's admin values, namespaces made by the
//! runbook's admin block, and real users, each with a Role in its own namespace only, running the
//! runbook's blocks while the test plays the Jobs.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::cluster::{Cluster, Ports};
use super::cluster_one::{image_values, merged, new_disk, storage_class, Gate, LastNight};
use super::cluster_one::{GATE_LOGIN, NAMESPACE as ORIGIN_NAMESPACE, PLAN};
use super::release::{helm_install, Release};
use super::runbook;
use super::shop::{entries, table_checksums, CLAIMS, NEW_CLASS, OLD_CLASS};
use crate::support::containers::{container_config, run, succeeded, Scratch, REPOSITORY_PASSWORD};
use crate::support::kubelet::Kubelet;
use crate::support::postgres::{Postgres, PG_ADMIN, PG_PASSWORD};
use crate::support::tenant::{apply_as, refused};
use crate::support::*;

const PORTS: Ports = Ports {
    api: 6643,
    etcd: 23990,
    etcd_peer: 24000,
};
/// The namespaces of the new cluster, each with its team (a real user) and its database server.
const RESTORED: &str = "shop-restored";
const STAGING: &str = "shop-staging";
const INTRUDER: &str = "intruder";

/// A namespace of the new cluster: its team's kubeconfig and its database server.
struct Team {
    kubeconfig: PathBuf,
    user: &'static str,
    database: Postgres,
}

/// The new cluster, its release, its teams, and the files an operator keeps the secrets in.
pub struct Day {
    _release: Release,
    client: kube::Client,
    gate_url: String,
    teams: BTreeMap<&'static str, Team>,
    secret_files: Scratch,
    disks: Scratch,
    /// Last: what runs against it goes first.
    _cluster: Cluster,
}

impl Day {
    /// The new cluster with the chart installed as the runbook's admin values say, and the
    /// namespaces `shop-restored`, `shop-staging` and `intruder` made by the runbook's admin
    /// block for their teams; `None` (after a recorded skip) when Helm cannot render here.
    pub async fn on_a_new_cluster(script: &Path, gate: &Gate) -> Option<Day> {
        let cluster = Cluster::up(script, "cluster-2", PORTS);
        let values = admin_values(gate);
        let release = helm_install(&cluster, &merged(values, &image_values()))?;
        storage_class(NEW_CLASS);
        let mut teams = BTreeMap::new();
        for (namespace, user) in [(RESTORED, "alice"), (STAGING, "bob"), (INTRUDER, "mallory")] {
            let variables = [
                ("NAMESPACE", namespace.to_owned()),
                ("TEAM_USER", user.to_owned()),
            ];
            runbook::run("namespace", &cluster.admin, &variables).await;
            let team = Team {
                kubeconfig: cluster.user(user, &[]),
                user,
                database: Postgres::start(&format!("worst-day-{namespace}")),
            };
            teams.insert(namespace, team);
        }
        Some(Day {
            client: client().await,
            gate_url: gate.url(),
            _release: release,
            teams,
            secret_files: secret_files(),
            disks: Scratch::new("worst-day-cluster-2-disks"),
            _cluster: cluster,
        })
    }

    /// The runbook's variables for `namespace`'s team.
    fn variables(&self, namespace: &str, snapshot: &str) -> Vec<(&'static str, String)> {
        let team = &self.teams[namespace];
        let file = |name: &str| self.secret_files.0.join(name).display().to_string();
        vec![
            ("NAMESPACE", namespace.to_owned()),
            ("ORIGIN", format!("{ORIGIN_NAMESPACE}/{PLAN}")),
            ("REPOSITORY_URL", self.gate_url.clone()),
            ("REPOSITORY_PASSWORD_FILE", file("repository-password")),
            ("GATE_USERNAME", GATE_LOGIN.username.to_owned()),
            ("GATE_PASSWORD_FILE", file("gate-password")),
            ("DATABASE_HOST", "127.0.0.1".to_owned()),
            ("DATABASE_PORT", team.database.port.to_string()),
            ("DATABASE_USERNAME", PG_ADMIN.to_owned()),
            ("DATABASE_PASSWORD_FILE", file("database-password")),
            ("OLD_STORAGE_CLASS", OLD_CLASS.to_owned()),
            ("NEW_STORAGE_CLASS", NEW_CLASS.to_owned()),
            ("ME", team.user.to_owned()),
            ("SNAPSHOT", snapshot.to_owned()),
        ]
    }

    /// A kubelet for `namespace` whose claims' volumes are new, empty folders.
    fn kubelet(&self, namespace: &str) -> Kubelet {
        let mut kubelet = Kubelet::new(self.client.clone(), namespace);
        for (name, ..) in CLAIMS {
            let disk = self.disk(namespace, name);
            if !disk.exists() {
                new_disk(&disk);
            }
            kubelet.claim(name, &disk);
        }
        kubelet
    }

    fn disk(&self, namespace: &str, claim: &str) -> PathBuf {
        self.disks.0.join(namespace).join(claim)
    }

    /// "The cluster is gone": the team of `shop-restored` creates the Secrets and one Restore of
    /// everything; the claims come back as recorded, the files and tables as the last night had
    /// them. Returns the snapshot it restored.
    pub async fn the_cluster_is_gone(&mut self, last: &LastNight) -> String {
        let variables = self.variables(RESTORED, "latest");
        let team = &self.teams[RESTORED];
        runbook::run("secrets", &team.kubeconfig, &variables).await;
        let mut kubelet = self.kubelet(RESTORED);
        let jobs = play(&mut kubelet, &self.client, RESTORED, "the-day-after", true);
        let (output, ()) =
            runbook::run_while("cluster-gone", &team.kubeconfig, &variables, jobs).await;
        let status = restore_status(RESTORED, "the-day-after");
        assert_eq!(status["phase"], "Succeeded", "{status:#}");
        assert_eq!(
            status["snapshotId"],
            last.snapshot.as_str(),
            "the last night's"
        );
        let mut created: Vec<String> = serde_json::from_value(status["createdClaims"].clone())
            .unwrap_or_else(|_| panic!("createdClaims in {status:#}"));
        created.sort();
        assert_eq!(created, ["catalog", "uploads"], "{status:#}");
        // What the block shows its reader: the snapshot and the claims it created.
        let shown = String::from_utf8_lossy(&output.stdout);
        assert!(
            shown.contains(&last.snapshot)
                && shown.contains("uploads")
                && shown.contains("catalog"),
            "{shown}"
        );
        claims_as_recorded(RESTORED, "the-day-after", last);
        self.volumes_and_tables_as_last_night(RESTORED, last);
        last.snapshot.clone()
    }

    /// "Move": the team of `shop-staging` clones the application from the same snapshot.
    pub async fn move_to_staging(&mut self, last: &LastNight, snapshot: &str) {
        let variables = self.variables(STAGING, snapshot);
        let team = &self.teams[STAGING];
        runbook::run("secrets", &team.kubeconfig, &variables).await;
        let mut kubelet = self.kubelet(STAGING);
        let jobs = play(&mut kubelet, &self.client, STAGING, "moved-in", true);
        runbook::run_while("move", &team.kubeconfig, &variables, jobs).await;
        let status = restore_status(STAGING, "moved-in");
        assert_eq!(status["phase"], "Succeeded", "{status:#}");
        assert_eq!(status["snapshotId"], snapshot, "{status:#}");
        claims_as_recorded(STAGING, "moved-in", last);
        self.volumes_and_tables_as_last_night(STAGING, last);
    }

    /// A clone into `intruder`, which no rule of the admin's policy allows: refused, no Job. And
    /// every team's rights end at its namespace.
    pub async fn a_clone_the_policy_forbids(&mut self) {
        let variables = self.variables(INTRUDER, "latest");
        let team = &self.teams[INTRUDER];
        // The intruder holds the repository's password and login: the rule still stops it.
        runbook::run("secrets", &team.kubeconfig, &variables).await;
        apply_as(&team.kubeconfig, &clone_restore(&self.gate_url, team.user));
        let what = "the Restore take-it Ready=False, reason CloneNotAllowed";
        let ready = eventually(what, ACT_TIMEOUT, || async {
            let status = restore_status(INTRUDER, "take-it");
            let ready = (status["conditions"].as_array().into_iter().flatten())
                .find(|condition| condition["type"] == "Ready")
                .cloned();
            ready.filter(|ready| ready["status"] == "False" && ready["reason"] == "CloneNotAllowed")
        })
        .await;
        let message = ready["message"].as_str().unwrap_or_default();
        assert!(message.contains("from: shop, to: intruder"), "{message}");
        let jobs = kubectl_json(&["get", "jobs", "-n", INTRUDER]);
        assert_eq!(jobs["items"], json!([]), "no Job for a refused clone");
        for (user_namespace, other) in [
            (RESTORED, STAGING),
            (STAGING, RESTORED),
            (INTRUDER, RESTORED),
        ] {
            let kubeconfig = &self.teams[user_namespace].kubeconfig;
            refused(kubeconfig, &["get", "restores.neverwiped.io", "-n", other]);
            refused(kubeconfig, &["get", "secrets", "-n", other]);
        }
    }

    /// "Restore one file": a file of `shop-restored`'s volume is damaged and a file added after
    /// the snapshot; the team restores the one file in place, and nothing else changes.
    pub async fn restore_one_file(&mut self, last: &LastNight, snapshot: &str) {
        let (claim, file) = ("uploads", "user-1001/notes.txt");
        let disk = self.disk(RESTORED, claim);
        std::fs::write(disk.join(file), b"overwritten by mistake\n").expect("damaged");
        std::fs::set_permissions(disk.join(file), std::fs::Permissions::from_mode(0o644))
            .expect("a mode");
        std::fs::write(
            disk.join("user-1000/later.txt"),
            b"written after the snapshot\n",
        )
        .expect("a new file");
        let mut expected = entries(&disk);
        for path in ["/user-1001/notes.txt", "/user-1001"] {
            expected.insert(path.to_owned(), last.volumes[claim][path].clone());
        }
        assert_ne!(entries(&disk), expected, "the file is damaged");
        let mut variables = self.variables(RESTORED, snapshot);
        variables.extend([("CLAIM", claim.to_owned()), ("FILE", file.to_owned())]);
        let mut kubelet = self.kubelet(RESTORED);
        let jobs = play(&mut kubelet, &self.client, RESTORED, "one-file", false);
        let kubeconfig = &self.teams[RESTORED].kubeconfig;
        runbook::run_while("one-file", kubeconfig, &variables, jobs).await;
        assert_eq!(restore_status(RESTORED, "one-file")["phase"], "Succeeded");
        assert_eq!(entries(&disk), expected, "only the one file was restored");
    }

    fn volumes_and_tables_as_last_night(&self, namespace: &str, last: &LastNight) {
        for (claim, ..) in CLAIMS {
            let restored = entries(&self.disk(namespace, claim));
            assert_eq!(restored, last.volumes[claim], "{namespace}/{claim} differs");
        }
        let database = &self.teams[namespace].database;
        assert_eq!(
            table_checksums(database),
            last.tables,
            "{namespace}'s tables differ"
        );
    }
}

/// The runbook's admin values, the example gate's URL replaced by the test's gate.
fn admin_values(gate: &Gate) -> Value {
    let text = runbook::block("admin-values").replace("https://gate.example.com/", &gate.prefix());
    serde_saphyr::from_str(&text).expect("the admin values are YAML")
}

/// The secret files the runbook reads: the repository's password, the gate's and the database
/// server's, each without a final newline (as `--from-file` then stores them).
fn secret_files() -> Scratch {
    let files = Scratch::new("worst-day-secret-files");
    for (name, text) in [
        ("repository-password", REPOSITORY_PASSWORD),
        ("gate-password", GATE_LOGIN.password),
        ("database-password", PG_PASSWORD),
    ] {
        let path = files.0.join(name);
        std::fs::write(&path, text).expect("a secret file");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("its mode");
    }
    files
}

/// The intruder's clone of `shop/nightly`, as the runbook's move block would write it.
fn clone_restore(gate_url: &str, user: &str) -> Value {
    json!({
        "apiVersion": "neverwiped.io/v1alpha1", "kind": "Restore",
        "metadata": {"name": "take-it", "namespace": INTRUDER,
                     "annotations": {"neverwiped.io/requested-by": user}},
        "spec": {
            "repository": {
                "url": gate_url,
                "passwordSecretRef": {"name": "shop-repository", "key": "password"},
                "credentialsSecretRef": {"name": "gate-login"},
            },
            "origin": format!("{ORIGIN_NAMESPACE}/{PLAN}"),
            "allVolumes": true, "createClaims": "FromSnapshot",
            "storageClassMapping": [{"from": OLD_CLASS, "to": NEW_CLASS}],
        },
    })
}

/// Each claim as the old cluster had it: size, access and volume modes, labels and annotations,
/// its class mapped, labelled with the Restore that made it.
fn claims_as_recorded(namespace: &str, restore: &str, last: &LastNight) {
    for (name, ..) in CLAIMS {
        let got = kubectl_json(&["get", "pvc", name, "-n", namespace]);
        let was = &last.claims[name];
        for field in ["accessModes", "volumeMode", "resources"] {
            assert_eq!(
                got["spec"][field], was["spec"][field],
                "{name}'s {field}: {got:#}"
            );
        }
        assert_eq!(got["spec"]["storageClassName"], NEW_CLASS, "{got:#}");
        for part in ["labels", "annotations"] {
            let recorded = was["metadata"][part].as_object().expect("recorded");
            // kubectl's own bookkeeping (last-applied-configuration) is no part of the claim:
            // the snapshot's record leaves it out.
            let recorded = recorded
                .iter()
                .filter(|(key, _)| !key.starts_with("kubectl.kubernetes.io/"));
            for (key, value) in recorded {
                assert_eq!(
                    &got["metadata"][part][key], value,
                    "{name}'s {part} {key}: {got:#}"
                );
            }
        }
        assert_eq!(
            got["metadata"]["labels"]["neverwiped.io/restore"], restore,
            "{got:#}"
        );
    }
}

fn restore_status(namespace: &str, name: &str) -> Value {
    kubectl_json(&["get", "restores.neverwiped.io", name, "-n", namespace])["status"].clone()
}

/// Plays the Restore `restore`'s Jobs as they come: its describe Job (when it reads the
/// snapshot's record), then its restore Job; each must succeed.
async fn play(
    kubelet: &mut Kubelet,
    client: &kube::Client,
    namespace: &str,
    restore: &str,
    describe: bool,
) {
    let mut jobs = vec![format!("{restore}-restore")];
    if describe {
        jobs.insert(0, format!("{restore}-describe"));
    }
    for job in jobs {
        let ran = run(kubelet, client, namespace, &job).await;
        assert!(
            succeeded(&ran),
            "{namespace}/{job} failed: {:?}\n{}\nthe Restore: {:#}",
            ran.ending,
            container_config(&ran),
            restore_status(namespace, restore)
        );
    }
}
