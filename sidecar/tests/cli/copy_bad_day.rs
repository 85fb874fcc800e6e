//! A bad day at one end of a copy: each end a real rest-server, reached straight or through the
//! fault proxy, and stopped and started again as a gate that goes down for a night and comes
//! back. With the destination down, a copy fails within its retry budget naming the destination,
//! and the next one catches up; with the source down (answering 503, refusing connections, or
//! failing every read of a pack), a copy fails naming the source and what failed, and not one
//! file at the destination changes. Every snapshot then restores identically from the copy and
//! `check --read-data` is clean at both ends.

use super::support::fault_proxy::{Fault, FaultPlan, FaultProxy};
use super::support::fixtures::Noise;
use super::support::sidecar::Run;
use super::{text, Sidecar};
use neverwiped_testkit::RestServer;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The retry budget of the runs meant to fail: short, so the test does not wait a quarter hour.
const SHORT_BUDGET: &str = "3s";

/// One end of a copy: a rest-server (no login) over its own folder, and a fault proxy in front.
struct End {
    gate: RestServer,
    proxy: FaultProxy,
    data: PathBuf,
}

impl End {
    fn start(runtime: &tokio::runtime::Runtime, data: PathBuf) -> End {
        let gate = RestServer::start(&data, None, false);
        let proxy = runtime.block_on(FaultProxy::start(gate.address(), FaultPlan::none()));
        End { gate, proxy, data }
    }

    /// The repository `repo` straight at the gate.
    fn straight(&self) -> String {
        format!("rest:{}/", self.gate.url("repo"))
    }

    /// The repository `repo` through the fault proxy.
    fn proxied(&self) -> String {
        format!("rest:{}", self.proxy.repo_url("repo"))
    }

    /// Every file the gate stores for the repository, with the SHA-256 of its bytes.
    fn listing(&self) -> BTreeMap<String, String> {
        let root = self.data.join("repo");
        let mut listed = BTreeMap::new();
        let mut pending = vec![root.clone()];
        while let Some(dir) = pending.pop() {
            for entry in fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    pending.push(path);
                    continue;
                }
                let digest = hex::encode(Sha256::digest(fs::read(&path).unwrap()));
                let name = path.strip_prefix(&root).unwrap();
                listed.insert(name.display().to_string(), digest);
            }
        }
        listed
    }
}

/// A source and a destination, each with its own password, and the runtime their proxies run on.
struct Ends {
    source: End,
    destination: End,
    work: tempfile::TempDir,
    _runtime: tokio::runtime::Runtime,
}

impl Ends {
    fn start(test: &str) -> Option<Ends> {
        let found = neverwiped_testkit::require_that(
            neverwiped_testkit::program("rest-server").is_some(),
            format_args!("{test}: rest-server is missing"),
            "run ../shared/tools/install-peers.sh",
        );
        if !found {
            return None;
        }
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let work = tempfile::tempdir().unwrap();
        let source = End::start(&runtime, work.path().join("source-gate"));
        let destination = End::start(&runtime, work.path().join("destination-gate"));
        let ends = Ends {
            source,
            destination,
            work,
            _runtime: runtime,
        };
        ends.at_source(&ends.source.straight())
            .run(&["init"])
            .expect_ok();
        Some(ends)
    }

    /// The sidecar on the source at `repo`.
    fn at_source(&self, repo: &str) -> Sidecar {
        Sidecar::new(repo)
    }

    /// The sidecar on the destination at `repo`, with its own password, reading the source's.
    fn at_destination(&self, repo: &str) -> Sidecar {
        let mut sidecar = Sidecar::new(repo);
        fs::write(&sidecar.password_file, "the destination's password\n").unwrap();
        let source = self.at_source("unused");
        let from = fs::read_to_string(&source.password_file).unwrap();
        let from_file = self.work.path().join("source-password");
        fs::write(&from_file, from).unwrap();
        sidecar.env.push((
            "NEVERWIPED_FROM_PASSWORD_FILE".into(),
            text(&from_file).into(),
        ));
        sidecar
    }

    /// `copy --init` from `from` to `to`, with `budget` and short pauses between tries.
    fn copy(&self, from: &str, to: &str, budget: &str) -> Run {
        let sidecar = self.at_destination(to);
        let result = self.work.path().join("copy-result.json");
        let _ = fs::remove_file(&result);
        let args = ["--retry-budget", budget, "--retry-delay-ms", "50"];
        let mut all = args.to_vec();
        all.extend(["--result-file", text(&result), "copy", "--init"]);
        all.extend(["--from-repo", from]);
        let mut run = sidecar.run(&all);
        run.result = fs::read_to_string(&result)
            .ok()
            .map(|json| neverwiped_contract::RunResult::from_json(&json).unwrap());
        run
    }

    /// The first night at the source, its tree kept aside: the snapshots to restore at the end,
    /// by id, with the trees they hold.
    fn first_night(&self, folder: &Path) -> BTreeMap<String, PathBuf> {
        let first = self.night(folder, 1);
        let aside = kept_aside(folder, &self.work.path().join("night-1"));
        BTreeMap::from([(first, aside)])
    }

    /// A night at the source: `folder` changed and backed up; its snapshot id.
    fn night(&self, folder: &Path, night: u64) -> String {
        let mut noise = Noise::new(300 + night);
        fs::create_dir_all(folder.join("sub")).unwrap();
        fs::write(
            folder.join(format!("sub/night-{night}.bin")),
            noise.bytes(600_000),
        )
        .unwrap();
        fs::write(
            folder.join("log.txt"),
            format!("night {night}\n").repeat(2000),
        )
        .unwrap();
        let source = self.at_source(&self.source.straight());
        let result = self.work.path().join("backup-result.json");
        let args = ["--result-file", text(&result), "backup", text(folder)];
        source.run(&args).expect_ok();
        let snapshot = super::read_result(&result).snapshot_id;
        snapshot.expect("the backup's snapshot id")
    }

    /// Every snapshot of the source is in the destination, restores identically there (`trees`:
    /// a copy of the folder as each night left it, by snapshot id), and both ends check clean.
    fn caught_up_and_clean(&self, trees: &BTreeMap<String, PathBuf>) {
        let destination = self.at_destination(&self.destination.straight());
        let copies = destination.snapshots();
        assert_eq!(copies.len(), trees.len(), "{copies:#?}");
        for copy in &copies {
            let original = copy["original"]
                .as_str()
                .expect("a copy names its original");
            let tree = &trees[original];
            let restored = tempfile::tempdir().unwrap();
            let id = copy["id"].as_str().unwrap();
            let target = text(restored.path());
            destination
                .run(&["restore", id, "--target", target])
                .expect_ok();
            let folder = restored
                .path()
                .join(copy["paths"][0].as_str().unwrap().trim_start_matches('/'));
            super::assert_same_tree(tree, &folder, super::is_root());
        }
        destination.run(&["check", "--read-data"]).expect_ok();
        let source = self.at_source(&self.source.straight());
        source.run(&["check", "--read-data"]).expect_ok();
    }
}

/// The folder as it is now, kept aside (with its times and modes) to compare a restore with.
fn kept_aside(folder: &Path, aside: &Path) -> PathBuf {
    let status = std::process::Command::new("cp")
        .args(["-a", text(folder), text(aside)])
        .status()
        .unwrap();
    assert!(status.success());
    aside.to_owned()
}

/// The error a failed run reports, in its result file and its last lines.
fn failure(run: &Run) -> String {
    assert_ne!(
        run.code, 0,
        "the copy succeeded:\n{}\n{}",
        run.stdout, run.stderr
    );
    let result = run.result.as_ref().expect("a result file");
    let error = result.error.clone().expect("an error in the result");
    format!("{error}\n{}", run.stderr)
}

#[test]
fn a_copy_to_a_destination_down_fails_within_its_budget_and_the_next_one_catches_up() {
    // Emulates a night when the destination's gate answers 503 (its load balancer without a
    // backend), a night when its rest-server is stopped, and the morning it is started again.
    let Some(mut ends) = Ends::start("copy_bad_day::a_copy_to_a_destination_down") else {
        return;
    };
    let folder = ends.work.path().join("app");
    let mut trees = ends.first_night(&folder);
    let (source, to) = (ends.source.straight(), ends.destination.proxied());
    ends.copy(&source, &to, "60s").expect_ok();

    let second = ends.night(&folder, 2);
    trees.insert(
        second,
        kept_aside(&folder, &ends.work.path().join("night-2")),
    );
    let always_503 = FaultPlan {
        faults: vec![Fault::ErrorBeforeForwarding],
        ..FaultPlan::every_fault(7, 100)
    };
    ends.destination.proxy.set_plan(always_503);
    let started = Instant::now();
    let error = failure(&ends.copy(&source, &to, SHORT_BUDGET));
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    let url = to.trim_start_matches("rest:");
    for part in ["(--repo)", url, "503", "retry budget"] {
        assert!(error.contains(part), "{part:?} in: {error}");
    }

    let third = ends.night(&folder, 3);
    trees.insert(
        third,
        kept_aside(&folder, &ends.work.path().join("night-3")),
    );
    ends.destination.proxy.set_plan(FaultPlan::none());
    ends.destination.gate.stop();
    let to = ends.destination.straight();
    let error = failure(&ends.copy(&source, &to, SHORT_BUDGET));
    let url = to.trim_start_matches("rest:");
    for part in ["(--repo)", url, "onnection refused", "retry budget"] {
        assert!(error.contains(part), "{part:?} in: {error}");
    }

    ends.destination.gate.start_again();
    let caught_up = ends.copy(&source, &to, "60s").expect_ok();
    assert!(
        caught_up
            .stdout
            .contains("copied 2 snapshots, 1 already there"),
        "{}",
        caught_up.stdout
    );
    ends.caught_up_and_clean(&trees);
}

#[test]
fn a_copy_from_a_source_down_fails_naming_it_and_changes_nothing_at_the_destination() {
    // Emulates the plan's gate answering 503, its rest-server stopped, and a gate that answers
    // the listing but fails every read of a pack (a disk gone under it), while the destination
    // is up: each copy fails naming the source and what failed, and not one file at the
    // destination changes. The source started again, the next copy catches up.
    let Some(mut ends) = Ends::start("copy_bad_day::a_copy_from_a_source_down") else {
        return;
    };
    let folder = ends.work.path().join("app");
    let mut trees = ends.first_night(&folder);
    let to = ends.destination.straight();
    ends.copy(&ends.source.straight(), &to, "60s").expect_ok();
    let second = ends.night(&folder, 2);
    trees.insert(
        second,
        kept_aside(&folder, &ends.work.path().join("night-2")),
    );
    let before = ends.destination.listing();

    let proxied = ends.source.proxied();
    let always_503 = FaultPlan {
        faults: vec![Fault::ErrorBeforeForwarding],
        ..FaultPlan::every_fault(3, 100)
    };
    let pack_reads_503 = FaultPlan {
        only: Some(("GET", "/data/")),
        ..always_503.clone()
    };
    let downs = [
        ("answering 503", Some(always_503), "503"),
        ("stopped", None, "onnection refused"),
        ("failing pack reads", Some(pack_reads_503), "503"),
    ];
    for (down, plan, what) in downs {
        let from = match plan {
            Some(plan) => {
                ends.source.proxy.set_plan(plan);
                proxied.clone()
            }
            None => {
                ends.source.gate.stop();
                ends.source.straight()
            }
        };
        let error = failure(&ends.copy(&from, &to, SHORT_BUDGET));
        let url = from.trim_start_matches("rest:");
        for part in ["--from-repo", url, what] {
            assert!(error.contains(part), "source {down}: {part:?} in: {error}");
        }
        let after = ends.destination.listing();
        assert_eq!(after, before, "source {down}: the destination changed");
        if from == ends.source.straight() {
            ends.source.gate.start_again();
        }
    }

    ends.source.proxy.set_plan(FaultPlan::none());
    let caught_up = ends.copy(&proxied, &to, "60s").expect_ok();
    assert!(
        caught_up
            .stdout
            .contains("copied 1 snapshots, 1 already there"),
        "{}",
        caught_up.stdout
    );
    ends.caught_up_and_clean(&trees);
}
