//! A restore says how far it is while it runs: off a terminal, progress lines on standard error
//! (JSON, shaped as the other log lines) with its bytes, speed and time left; at its end, its
//! average speed in its JSON and its result file. `--quiet` prints none, and a progress interval
//! that is not whole seconds fails the run before it starts.

use super::support::fault_proxy::{Fault, FaultPlan, FaultProxy};
use super::support::fixtures::Noise;
use super::support::sidecar::read_result;
use super::{initialised, text, Sidecar};
use neverwiped_testkit::RestServer;
use serde_json::Value;
use std::fs;
use std::path::Path;
use std::time::Duration;

const MIB: usize = 1024 * 1024;

/// A rest-server, and a proxy in front of it that holds back every answer to a read of a pack.
struct SlowGate {
    gate: RestServer,
    proxy: FaultProxy,
    _runtime: tokio::runtime::Runtime,
}

impl SlowGate {
    fn start(data: &Path) -> Option<SlowGate> {
        let found = neverwiped_testkit::require_that(
            neverwiped_testkit::program("rest-server").is_some(),
            "restore_progress: rest-server is missing",
            "run ../shared/tools/install-peers.sh",
        );
        if !found {
            return None;
        }
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let gate = RestServer::start(data, None, false);
        let slow_reads = FaultPlan {
            faults: vec![Fault::StallAnswer],
            stall: Duration::from_millis(400),
            only: Some(("GET", "/data/")),
            first_try_only: false,
            ..FaultPlan::every_fault(0, 100)
        };
        let proxy = runtime.block_on(FaultProxy::start(gate.address(), slow_reads));
        Some(SlowGate {
            gate,
            proxy,
            _runtime: runtime,
        })
    }

    /// The sidecar straight at the gate.
    fn straight(&self) -> Sidecar {
        Sidecar::new(format!("rest:{}/", self.gate.url("repo")))
    }

    /// The sidecar through the slow proxy, logging progress every second.
    fn slow(&self) -> Sidecar {
        let mut sidecar = Sidecar::new(format!("rest:{}", self.proxy.repo_url("repo")));
        sidecar
            .env
            .push(("NEVERWIPED_PROGRESS_INTERVAL".into(), "1".into()));
        sidecar
    }
}

/// The `fields` of every progress line on standard error.
fn progress_lines(stderr: &str) -> Vec<Value> {
    stderr
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|line| line["fields"].clone())
        .filter(|fields| fields.get("bytesDone").is_some())
        .collect()
}

/// Checks one progress line against a restore of `total` bytes in `files` files.
fn check_line(fields: &Value, total: u64, files: u64) {
    let done = fields["bytesDone"].as_u64().expect("bytesDone");
    assert_eq!(fields["bytesTotal"], total, "{fields}");
    assert!(done <= total, "{fields}");
    assert_eq!(fields["filesTotal"], files, "{fields}");
    assert!(fields["filesDone"].as_u64().unwrap() <= files, "{fields}");
    let percent = fields["percent"].as_f64().expect("percent");
    assert!((0.0..=100.0).contains(&percent), "{fields}");
    let message = fields["message"].as_str().unwrap();
    assert!(message.starts_with("restore progress: "), "{fields}");
}

#[test]
fn a_slow_restore_logs_its_speed_and_time_left_and_records_its_average_speed() {
    let work = tempfile::tempdir().unwrap();
    let Some(gate) = SlowGate::start(&work.path().join("gate")) else {
        return;
    };
    let source = work.path().join("source");
    fs::create_dir_all(&source).unwrap();
    let mut noise = Noise::new(43);
    let sizes = [8 * MIB, 8 * MIB, 8 * MIB, 1000];
    for (number, size) in sizes.iter().enumerate() {
        fs::write(
            source.join(format!("part-{number}.bin")),
            noise.bytes(*size),
        )
        .unwrap();
    }
    let total: u64 = sizes.iter().map(|&size| size as u64).sum();
    let straight = gate.straight();
    straight.run(&["init"]).expect_ok();
    straight.run(&["backup", text(&source)]).expect_ok();

    // Small fetches, each held back: the restore takes seconds, and logs a line each.
    let target = work.path().join("target");
    let result_file = work.path().join("result.json");
    let run = gate
        .slow()
        .run(&[
            "restore",
            "latest",
            "--target",
            text(&target),
            "--fetch-memory",
            "2M",
            "--json",
            "--result-file",
            text(&result_file),
        ])
        .expect_ok();
    let lines = progress_lines(&run.stderr);
    assert!(!lines.is_empty(), "no progress line:\n{}", run.stderr);
    for fields in &lines {
        check_line(fields, total, sizes.len() as u64);
    }
    let moving: Vec<&Value> = lines
        .iter()
        .filter(|fields| (1..total).contains(&fields["bytesDone"].as_u64().unwrap()))
        .collect();
    assert!(!moving.is_empty(), "no line part way:\n{}", run.stderr);
    for fields in moving {
        assert!(fields["bytesPerSecond"].as_u64().unwrap() > 0, "{fields}");
        assert!(fields["etaSeconds"].as_u64().is_some(), "{fields}");
    }

    let printed: Value = serde_json::from_str(&run.stdout).expect("one JSON object");
    assert_eq!(printed["bytesWritten"], total, "{printed}");
    let seconds = printed["restoreSecs"].as_f64().expect("restoreSecs");
    assert!(seconds > 1.0, "held back reads take seconds: {printed}");
    let rate = printed["bytesPerSecond"].as_u64().expect("bytesPerSecond");
    let expected = total as f64 / seconds;
    assert!((rate as f64 - expected).abs() <= 1.0, "{printed}");
    assert_eq!(read_result(&result_file).bytes_per_second, Some(rate));

    // Quiet: the same slow restore logs no progress, and prints nothing.
    let quiet = gate
        .slow()
        .run(&[
            "restore",
            "latest",
            "--target",
            text(&work.path().join("quiet")),
            "--fetch-memory",
            "2M",
            "--quiet",
        ])
        .expect_ok();
    assert!(progress_lines(&quiet.stderr).is_empty(), "{}", quiet.stderr);
    assert!(!quiet.stderr.contains("progress"), "{}", quiet.stderr);
    assert_eq!(quiet.stdout, "");
}

#[test]
fn the_text_summary_of_a_restore_says_its_time_and_speed() {
    let (work, _repo, sidecar) = initialised();
    let source = super::small_tree(work.path(), "source");
    sidecar.run(&["backup", text(&source)]).expect_ok();
    let target = work.path().join("target");
    let run = sidecar
        .run(&["restore", "latest", "--target", text(&target)])
        .expect_ok();
    let line = run.stdout.trim();
    assert!(line.starts_with("restored snapshot "), "{line}");
    let (_, timing) = line.split_once(" in ").expect("its time");
    assert!(timing.ends_with("/s)"), "{line}");
}

#[test]
fn a_progress_interval_that_is_not_whole_seconds_fails_the_restore_before_it_starts() {
    let (work, _repo, mut sidecar) = initialised();
    sidecar
        .env
        .push(("NEVERWIPED_PROGRESS_INTERVAL".into(), "10s".into()));
    let target = work.path().join("target");
    let run = sidecar
        .run(&["restore", "latest", "--target", text(&target)])
        .expect_code(1);
    let error = run.error_line();
    assert!(error.contains("NEVERWIPED_PROGRESS_INTERVAL"), "{error}");
    assert!(
        error.contains("\\\"10s\\\"") || error.contains("\"10s\""),
        "{error}"
    );
    assert!(!target.exists(), "nothing restored");
}
