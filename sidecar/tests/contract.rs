//! The operator ↔ sidecar contract, by what it means: a BackupPlan and a Restore as a user writes
//! them go through the operator's own deciders (`backup_plan::decide`, `restore::decide`), and the
//! Jobs they create are run here as a kubelet would run them — the Job's `command` and `args`
//! (with Kubernetes' `$(VAR)` expansion), its environment from Secrets, its Secret, claim and
//! `emptyDir` volumes at their mount paths, its host name — with the sidecar binary of this build,
//! against a real rest-server. Then the repository is read back: which paths were backed up and
//! under which names, with which host and tags, which excludes applied (and to which volume),
//! which snapshots the keep rules left, and which snapshot a Restore of `latest` (with its plan's
//! host and `takenBefore`) brought back, file by file (SHA-256 and metadata).
//!
//! Each pod runs in a private mount namespace with a root of its own (`chroot`) in which the
//! pod's paths (`/data/<claim>`, `/var/run/neverwiped/…`, `/dev/termination-log`) are exactly
//! what the Job says; the machine's system folders are mounted read-only so the binary finds
//! its libraries. Not emulated: the user, capabilities and read-only root of the security
//! context (the container tests in `operator/tests/containers.rs` run the real images for that).
//! Needs root and `unshare`; skipped loudly otherwise (a failure under CI, see
//! `neverwiped_testkit::require_that`).

mod support;

use support::fixtures;

use fixtures::{facts, Noise};
use neverwiped::backend::local::LocalBackend;
use neverwiped::format::snapshot::Snapshot;
use neverwiped::format::tree::NodeKind;
use neverwiped::ids::SnapshotId;
use neverwiped::repository::Repository;
use neverwiped_operator::api::{BackupPlan, Restore};
use neverwiped_operator::controller::backup_plan::{self, ObservedPlan};
use neverwiped_operator::controller::restore::{self as restore_controller, ObservedRestore};
use neverwiped_operator::controller::Settings;
use neverwiped_operator::expansion::expand;
use neverwiped_operator::restore_access::AccessReview;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use support::sidecar::{Run, SIDECAR_BIN};
use support::{RestServer, RestServerOptions};
use tempfile::TempDir;

const NAMESPACE: &str = "shop";
const REPOSITORY_PASSWORD: &str = "the shop's repository password";

/// The `app` volume's entries, relative to its root, and whether the plan's excludes
/// (`cache`, `*.tmp`, `/logs/old`) leave them out.
const APP_ENTRIES: &[(&str, bool)] = &[
    ("index.html", false),
    ("version.txt", false),
    ("cache/", true),
    ("cache/page.bin", true),
    ("notes.tmp", true),
    ("sub/", false),
    ("sub/keep.txt", false),
    ("sub/cache/", true),
    ("sub/cache/deep.bin", true),
    ("sub/deep/", false),
    ("sub/deep/draft.tmp", true),
    ("sub/deep/final.txt", false),
    ("logs/", false),
    ("logs/old/", true),
    ("logs/old/a.log", true),
    ("logs/new/", false),
    ("logs/new/b.log", false),
    ("logs/old.txt", false),
];

/// The `media` volume's entries: the `app` volume's excludes do not apply to it.
const MEDIA_ENTRIES: &[&str] = &["photo.bin", "cache/", "cache/thumb.bin", "clip.tmp"];

/// Builds a volume's tree from `entries` (a trailing `/` is a folder), every file's content
/// depending on `version`.
fn build_volume<'a>(root: &Path, entries: impl IntoIterator<Item = &'a str>, version: u64) {
    fs::create_dir_all(root).unwrap();
    for (index, entry) in entries.into_iter().enumerate() {
        let path = root.join(entry.trim_end_matches('/'));
        if entry.ends_with('/') {
            fs::create_dir_all(&path).unwrap();
        } else {
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            let mut content = format!("{entry} of version {version}\n").into_bytes();
            content.extend(Noise::new(version * 100 + index as u64).bytes(20_000 + index * 777));
            fs::write(&path, content).unwrap();
        }
    }
}

/// Plays the kubelet for one Job's pod on this machine (see the top of the file).
struct Kubelet {
    /// Secrets by name: key → value.
    secrets: BTreeMap<String, BTreeMap<String, String>>,
    /// PersistentVolumeClaims by name: the folder that holds the volume.
    claims: BTreeMap<String, PathBuf>,
    work: TempDir,
    pods: usize,
}

impl Kubelet {
    /// Runs the pod of `job` to its end; the result is what it left in its termination message.
    fn run(&mut self, job: &impl serde::Serialize) -> Run {
        let job = serde_json::to_value(job).unwrap();
        let pod = &job["spec"]["template"]["spec"];
        let containers = pod["containers"].as_array().expect("containers");
        assert_eq!(containers.len(), 1, "one container: {pod}");
        let container = &containers[0];
        self.pods += 1;
        let dir = self.work.path().join(format!("pod-{}", self.pods));
        let root = dir.join("root");
        fs::create_dir_all(&root).unwrap();
        let env = self.environment(container);
        let termination_log = dir.join("termination-log");
        fs::write(&termination_log, "").unwrap();
        fs::set_permissions(&termination_log, fs::Permissions::from_mode(0o666)).unwrap();

        let mut script = String::from("set -eu\n");
        system_folders(&mut script, &root);
        let command: Vec<String> = strings(&container["command"]);
        let binary = Path::new(&command[0]);
        assert!(
            binary.is_absolute(),
            "the sidecar by absolute path: {command:?}"
        );
        let inside = |path: &Path| root.join(path.strip_prefix("/").unwrap());
        // The image's binary where `command` names it: this build's.
        let bin_dir = inside(binary.parent().unwrap());
        script += &format!("mount -t tmpfs tmpfs {}\n", quote(&bin_dir));
        script += &format!(
            "touch {0}\nmount --bind {1} {0}\n",
            quote(&inside(binary)),
            quote(Path::new(SIDECAR_BIN))
        );
        script += &format!(
            "touch {0}\nmount --bind {1} {0}\n",
            quote(&inside(Path::new(neverwiped_operator::job::RESULT_FILE))),
            quote(&termination_log)
        );
        let mut mounts: Vec<&Value> = container["volumeMounts"]
            .as_array()
            .map(|m| m.iter().collect())
            .unwrap_or_default();
        // A mount below another (a claim under an emptyDir) comes after it.
        mounts.sort_by_key(|m| m["mountPath"].as_str().unwrap().len());
        for mount in mounts {
            assert!(
                mount.get("subPath").is_none(),
                "subPath is not emulated: {mount}"
            );
            let name = mount["name"].as_str().unwrap();
            let volume = pod["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == name)
                .unwrap_or_else(|| panic!("no volume {name}"));
            let (source, read_only) = self.volume_source(volume, &dir);
            let target = inside(Path::new(mount["mountPath"].as_str().unwrap()));
            script += &format!(
                "mkdir -p {0}\nmount --bind {1} {0}\n",
                quote(&target),
                quote(&source)
            );
            if read_only || mount["readOnly"] == true {
                script += &format!("mount -o remount,bind,ro {}\n", quote(&target));
            }
        }
        if let Some(hostname) = pod["hostname"].as_str() {
            script += &format!("hostname '{hostname}'\n");
        }
        script += &format!("exec chroot {} \"$@\"\n", quote(&root));

        let args = strings(&container["args"])
            .iter()
            .map(|arg| expand(arg, &|name| env.get(name).cloned()))
            .collect::<Vec<_>>();
        let output = Command::new("unshare")
            .args([
                "--mount",
                "--uts",
                "--propagation",
                "private",
                "sh",
                "-c",
                &script,
                "sh",
            ])
            .args(&command)
            .args(&args)
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .envs(&env)
            .output()
            .expect("run unshare");
        let has_result = fs::metadata(&termination_log).unwrap().len() > 0;
        Run::from_output(output, has_result.then_some(termination_log.as_path()))
    }

    /// The container's environment: values, and Secret keys (a missing one fails the pod, as the
    /// kubelet's `CreateContainerConfigError` would).
    fn environment(&self, container: &Value) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        for variable in container["env"].as_array().into_iter().flatten() {
            let name = variable["name"].as_str().unwrap().to_owned();
            let value = match variable.get("value") {
                Some(value) => value.as_str().unwrap().to_owned(),
                None => {
                    let reference = &variable["valueFrom"]["secretKeyRef"];
                    self.secret_key(
                        reference["name"].as_str().unwrap(),
                        reference["key"].as_str().unwrap(),
                    )
                }
            };
            env.insert(name, value);
        }
        env
    }

    fn secret_key(&self, secret: &str, key: &str) -> String {
        self.secrets
            .get(secret)
            .and_then(|keys| keys.get(key))
            .unwrap_or_else(|| {
                panic!("CreateContainerConfigError: no key {key} in Secret {secret}")
            })
            .clone()
    }

    /// The folder a volume shows, and whether the volume itself is read-only.
    fn volume_source(&self, volume: &Value, pod_dir: &Path) -> (PathBuf, bool) {
        let name = volume["name"].as_str().unwrap();
        if let Some(secret) = volume.get("secret") {
            let folder = pod_dir.join("volumes").join(name);
            fs::create_dir_all(&folder).unwrap();
            let secret_name = secret["secretName"].as_str().unwrap();
            let default_mode = secret["defaultMode"].as_u64().unwrap_or(0o644) as u32;
            for item in secret["items"]
                .as_array()
                .expect("the operator names its items")
            {
                let path = folder.join(item["path"].as_str().unwrap());
                fs::create_dir_all(path.parent().unwrap()).unwrap();
                fs::write(
                    &path,
                    self.secret_key(secret_name, item["key"].as_str().unwrap()),
                )
                .unwrap();
                let mode = item["mode"]
                    .as_u64()
                    .map(|m| m as u32)
                    .unwrap_or(default_mode);
                fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
            }
            (folder, true)
        } else if let Some(claim) = volume.get("persistentVolumeClaim") {
            let claim_name = claim["claimName"].as_str().unwrap();
            let folder = self.claims.get(claim_name).unwrap_or_else(|| {
                panic!("the pod mounts claim {claim_name}, which the test has not registered")
            });
            (folder.clone(), claim["readOnly"] == true)
        } else if volume.get("emptyDir").is_some() {
            let folder = pod_dir.join("volumes").join(name);
            fs::create_dir_all(&folder).unwrap();
            fs::set_permissions(&folder, fs::Permissions::from_mode(0o777)).unwrap();
            (folder, false)
        } else {
            panic!("a volume this kubelet does not emulate: {volume}");
        }
    }
}

/// The machine's system folders in `root`, read-only (symbolic links, as `/lib` → `usr/lib`, as
/// they are); `/proc`, a `/dev` with the usual devices, and a fresh `/tmp`.
fn system_folders(script: &mut String, root: &Path) {
    for top in [
        "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc",
    ] {
        let host = Path::new("/").join(top);
        let Ok(meta) = fs::symlink_metadata(&host) else {
            continue;
        };
        let inside = root.join(top);
        if meta.file_type().is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&host).unwrap(), &inside).unwrap();
        } else if meta.is_dir() {
            fs::create_dir_all(&inside).unwrap();
            *script += &format!(
                "mount --rbind {0} {1}\nmount -o remount,bind,ro {1}\n",
                quote(&host),
                quote(&inside)
            );
        }
    }
    for folder in ["proc", "dev", "tmp"] {
        fs::create_dir_all(root.join(folder)).unwrap();
    }
    *script += &format!("mount -t proc proc {}\n", quote(&root.join("proc")));
    *script += &format!(
        "mount -t tmpfs -o mode=755 tmpfs {}\n",
        quote(&root.join("dev"))
    );
    for device in ["null", "zero", "random", "urandom"] {
        let inside = root.join("dev").join(device);
        *script += &format!(
            "touch {0}\nmount --bind /dev/{device} {0}\n",
            quote(&inside)
        );
    }
    *script += &format!(
        "mount -t tmpfs -o mode=1777 tmpfs {}\n",
        quote(&root.join("tmp"))
    );
}

fn quote(path: &Path) -> String {
    let text = path.to_str().expect("a UTF-8 path");
    assert!(!text.contains('\''), "{text}");
    format!("'{text}'")
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

/// Whether this machine can run the pods: root and `unshare`. Where every test must run, it must.
fn can_run_pods() -> bool {
    let unshare = Command::new("unshare")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    neverwiped_testkit::require_that(
        fixtures::is_root(),
        "the contract test runs pods in mount namespaces, which needs root",
        "run the tests as root (scripts/test.sh does)",
    ) && neverwiped_testkit::require_that(
        unshare,
        "unshare does not run",
        "install Debian's util-linux",
    )
}

/// A BackupPlan as stored, with `spec`; `generation` and `manualTrigger` make each run a new one.
fn backup_plan(name: &str, spec: Value, generation: i64) -> BackupPlan {
    let mut spec = spec;
    spec["manualTrigger"] = json!(format!("run-{generation}"));
    serde_json::from_value(json!({
        "apiVersion": "neverwiped.io/v1alpha1",
        "kind": "BackupPlan",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": format!("uid-{name}"),
                     "generation": generation, "creationTimestamp": "2026-11-01T00:00:00Z"},
        "spec": spec,
    }))
    .unwrap()
}

fn claim(name: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": NAMESPACE},
           "spec": {"accessModes": ["ReadWriteOnce"]}})
}

fn observed_plan(claims: &[&str]) -> ObservedPlan {
    ObservedPlan {
        secrets: [("shop-repository".to_owned(), ["password".to_owned()].into())].into(),
        claims: claims
            .iter()
            .map(|name| serde_json::from_value(claim(name)).unwrap())
            .collect(),
        ..ObservedPlan::default()
    }
}

fn settings() -> Settings {
    Settings::with_image("neverwiped/sidecar:dev")
}

/// The Job the operator creates now for a new manual run of `plan`.
fn backup_job_of(plan: &BackupPlan, claims: &[&str]) -> impl serde::Serialize {
    let decision = backup_plan::decide(
        plan,
        &observed_plan(claims),
        jiff::Timestamp::now(),
        &settings(),
    );
    decision
        .create
        .unwrap_or_else(|| panic!("no Job for a manual run: {:?}", decision.status.conditions))
}

/// The Job the operator creates for `spec`, a Restore of `plan`, into the claims `targets`.
fn restore_job_of(
    name: &str,
    spec: Value,
    plan: &BackupPlan,
    targets: &[&str],
) -> impl serde::Serialize {
    let restore: Restore = serde_json::from_value(json!({
        "apiVersion": "neverwiped.io/v1alpha1",
        "kind": "Restore",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": format!("uid-{name}"), "generation": 1},
        "spec": spec,
    }))
    .unwrap();
    let observed = ObservedRestore {
        plan: Some(plan.clone()),
        secrets: [("shop-repository".to_owned(), ["password".to_owned()].into())].into(),
        claims: targets
            .iter()
            .map(|name| {
                (
                    name.to_string(),
                    serde_json::from_value(claim(name)).unwrap(),
                )
            })
            .collect(),
        // The SubjectAccessReviews found the creator allowed everything.
        access: AccessReview::Reviewed { denied: vec![] },
        ..ObservedRestore::default()
    };
    let decision =
        restore_controller::decide(&restore, &observed, jiff::Timestamp::now(), &settings());
    decision
        .create_job
        .unwrap_or_else(|| panic!("no Job for the Restore: {:?}", decision.status.conditions))
}

/// What the repository holds: its snapshots, and each one's entries as absolute paths.
struct Stored {
    snapshots: Vec<(SnapshotId, Snapshot, BTreeSet<String>)>,
}

impl Stored {
    fn read(repository: &Path) -> Stored {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let backend = Arc::new(LocalBackend::new(repository));
            let repo = Repository::open(backend, REPOSITORY_PASSWORD.as_bytes())
                .await
                .unwrap();
            let listed = repo.snapshots().await.unwrap();
            let repo = repo.load_index().await.unwrap();
            let mut snapshots = Vec::new();
            for (id, snapshot) in listed {
                let mut entries = BTreeSet::new();
                let mut pending = vec![(String::new(), snapshot.tree)];
                while let Some((prefix, tree)) = pending.pop() {
                    for node in repo
                        .read_tree(&tree, "a snapshot's tree")
                        .await
                        .unwrap()
                        .nodes
                    {
                        let path = format!("{prefix}/{}", String::from_utf8_lossy(&node.name));
                        if let NodeKind::Dir { subtree } = &node.kind {
                            pending.push((path.clone(), *subtree));
                        }
                        entries.insert(path);
                    }
                }
                snapshots.push((id, snapshot, entries));
            }
            snapshots.sort_by(|a, b| a.1.time.cmp(&b.1.time));
            Stored { snapshots }
        })
    }

    fn of_host(&self, host: &str) -> Vec<&(SnapshotId, Snapshot, BTreeSet<String>)> {
        self.snapshots
            .iter()
            .filter(|s| s.1.hostname == host)
            .collect()
    }
}

/// The entries a backup of the `app` and `media` volumes must hold, as absolute paths.
fn expected_entries() -> BTreeSet<String> {
    let mut expected: BTreeSet<String> = ["/data", "/data/app", "/data/media"]
        .map(String::from)
        .into();
    for (entry, excluded) in APP_ENTRIES {
        if !excluded {
            expected.insert(format!("/data/app/{}", entry.trim_end_matches('/')));
        }
    }
    for entry in MEDIA_ENTRIES {
        expected.insert(format!("/data/media/{}", entry.trim_end_matches('/')));
    }
    expected
}

/// `restored` holds exactly `source` without the excluded entries: every file's SHA-256, every
/// entry's type, mode, owner and times (the source was not touched after its backup).
fn assert_restored_without_excluded(source: &Path, restored: &Path) {
    let excluded: Vec<&str> = APP_ENTRIES
        .iter()
        .filter(|(_, excluded)| *excluded)
        .map(|(entry, _)| entry.trim_end_matches('/'))
        .collect();
    let mut expected = facts(source);
    expected.retain(|path, _| {
        let path = String::from_utf8_lossy(path);
        !excluded
            .iter()
            .any(|e| path == *e || path.starts_with(&format!("{e}/")))
    });
    let actual = facts(restored);
    assert_eq!(
        expected
            .keys()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect::<Vec<_>>(),
        actual
            .keys()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect::<Vec<_>>(),
        "the restored entries"
    );
    assert_eq!(expected, actual, "the restored content and metadata");
}

#[test]
fn the_operators_jobs_back_up_forget_and_restore_what_the_plan_and_restore_say() {
    if !can_run_pods() {
        return;
    }
    let Some(server) = RestServer::start("contract", RestServerOptions::default()) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let mut kubelet = Kubelet {
        secrets: [(
            "shop-repository".to_owned(),
            [("password".to_owned(), REPOSITORY_PASSWORD.to_owned())].into(),
        )]
        .into(),
        claims: BTreeMap::new(),
        work: tempfile::tempdir().unwrap(),
        pods: 0,
    };
    let url = server.url().to_string();
    let nightly = json!({
        "schedule": "30 2 * * *",
        "repository": {"url": url, "passwordSecretRef": {"name": "shop-repository", "key": "password"}},
        "volumes": [
            {"claimName": "app", "excludes": ["cache", "*.tmp", "/logs/old"]},
            {"claimName": "media"},
        ],
        "copyMethod": "Direct",
        "retention": {"keepLast": 2},
        "maintenance": {"prune": {"suspend": true}, "check": {"suspend": true}},
    });
    let weekly = json!({
        "schedule": "0 4 * * 0",
        "repository": nightly["repository"].clone(),
        "volumes": [{"claimName": "app"}],
        "copyMethod": "Direct",
        "retention": {"keepLast": 1},
        "maintenance": nightly["maintenance"].clone(),
    });
    let repository = server.data_dir().join(support::TEST_REPO);

    // Three nightly runs and, between the second and the third, one of another plan (another
    // host) on the same repository; each run reads its own version of the volumes.
    let run_backup = |kubelet: &mut Kubelet, plan: &BackupPlan, version: u64| -> Run {
        let app = work.path().join(format!("app-{version}"));
        let media = work.path().join(format!("media-{version}"));
        build_volume(&app, APP_ENTRIES.iter().map(|(entry, _)| *entry), version);
        build_volume(&media, MEDIA_ENTRIES.iter().copied(), version);
        kubelet.claims.insert("app".into(), app);
        kubelet.claims.insert("media".into(), media);
        let run = kubelet
            .run(&backup_job_of(plan, &["app", "media"]))
            .expect_ok();
        std::thread::sleep(Duration::from_millis(1100));
        run
    };
    let first = run_backup(&mut kubelet, &backup_plan("nightly", nightly.clone(), 1), 1);
    let second = run_backup(&mut kubelet, &backup_plan("nightly", nightly.clone(), 2), 2);
    let other = run_backup(&mut kubelet, &backup_plan("weekly", weekly.clone(), 1), 3);
    let nightly_plan = backup_plan("nightly", nightly.clone(), 3);
    let third = run_backup(&mut kubelet, &nightly_plan, 4);
    let id = |run: &Run| run.result().snapshot_id.clone().expect("a snapshot id");

    let stored = Stored::read(&repository);
    // The keep rules (keepLast: 2) forgot the first nightly snapshot only: the other plan's
    // snapshot, of another host, is not the nightly plan's to forget.
    let nightly_ids: Vec<String> = stored
        .of_host("shop/nightly")
        .iter()
        .map(|s| s.0.to_string())
        .collect();
    assert_eq!(
        nightly_ids,
        [id(&second), id(&third)],
        "the nightly snapshots kept"
    );
    assert!(!nightly_ids.contains(&id(&first)));
    let weekly_snapshots = stored.of_host("shop/weekly");
    assert_eq!(weekly_snapshots.len(), 1);
    assert_eq!(weekly_snapshots[0].0.to_string(), id(&other));

    // What each nightly snapshot holds: both volumes, under /data/<claim>, the plan's tag, and
    // the app volume's excludes applied to it alone.
    for (_, snapshot, entries) in stored.of_host("shop/nightly") {
        let paths: Vec<String> = snapshot.paths.iter().map(|p| p.display()).collect();
        assert_eq!(paths, ["/data/app", "/data/media"]);
        assert_eq!(snapshot.tags, ["plan=nightly"]);
        assert_eq!(*entries, expected_entries());
    }
    let (_, weekly_snapshot, weekly_entries) = weekly_snapshots[0];
    assert_eq!(weekly_snapshot.tags, ["plan=weekly"]);
    assert!(
        weekly_entries.contains("/data/app/cache/page.bin"),
        "the weekly plan excludes nothing"
    );
    assert!(!weekly_entries.iter().any(|e| e.starts_with("/data/media")));

    // A Restore of `latest` brings back the nightly plan's newest snapshot, not the other
    // plan's, into the target claim.
    let restored = work.path().join("app-restored");
    fs::create_dir_all(&restored).unwrap();
    kubelet
        .claims
        .insert("app-restored".into(), restored.clone());
    let latest = json!({"backupPlanName": "nightly", "snapshot": "latest",
                        "volumes": [{"sourceClaimName": "app", "targetClaimName": "app-restored"}]});
    let run = kubelet
        .run(&restore_job_of(
            "latest",
            latest,
            &nightly_plan,
            &["app-restored"],
        ))
        .expect_ok();
    assert_eq!(
        run.result().snapshot_id.as_deref(),
        Some(id(&third).as_str())
    );
    assert_restored_without_excluded(&work.path().join("app-4"), &restored);

    // With `takenBefore` just after the other plan's run: the nightly snapshot before it.
    let cut = chrono::DateTime::parse_from_rfc3339(&weekly_snapshot.time).unwrap()
        + chrono::Duration::milliseconds(500);
    let before = work.path().join("app-before");
    fs::create_dir_all(&before).unwrap();
    kubelet.claims.insert("app-before".into(), before.clone());
    let earlier = json!({"backupPlanName": "nightly", "snapshot": "latest",
                         "takenBefore": cut.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                         "volumes": [{"sourceClaimName": "app", "targetClaimName": "app-before"}]});
    let run = kubelet
        .run(&restore_job_of(
            "earlier",
            earlier,
            &nightly_plan,
            &["app-before"],
        ))
        .expect_ok();
    assert_eq!(
        run.result().snapshot_id.as_deref(),
        Some(id(&second).as_str())
    );
    assert_restored_without_excluded(&work.path().join("app-2"), &before);
}
