//! The rule seen from outside: this test binary runs itself for the probe test alone, in a child
//! process with a chosen environment, as `cargo test` runs a test binary.

use std::path::Path;
use std::process::{Command, Output};

const PROBE: &str = "require::tests::probe_a_missing_part";
/// Set only in the child process, where the probe then asks for its missing part.
const PROBE_VARIABLE: &str = "NEVERWIPED_REQUIRE_PROBE";
const WHAT: &str = "the probe's part is missing";
const HOW: &str = "install the probe's part";

/// Run by the tests below in a child process; does nothing in the suite's own run.
#[test]
fn probe_a_missing_part() {
    if std::env::var_os(PROBE_VARIABLE).is_none() {
        return;
    }
    eprintln!("captured by libtest");
    assert_eq!(super::require(None::<u8>, WHAT, HOW), None);
}

fn run_probe(environment: &[(&str, &str)], skip_log: &Path) -> Output {
    let mut command = Command::new(std::env::current_exe().expect("the test binary's path"));
    command
        .args(["--exact", PROBE])
        .env_remove("CI")
        .env_remove("NEVERWIPED_REQUIRE_ALL")
        .env(PROBE_VARIABLE, "1")
        .env(super::SKIP_LOG, skip_log);
    command.envs(environment.iter().copied());
    command.output().expect("the test binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn assert_skipped_loudly(environment: &[(&str, &str)]) {
    let folder = tempfile::tempdir().unwrap();
    let skip_log = folder.path().join("skips");
    let output = run_probe(environment, &skip_log);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(output.status.success(), "{environment:?}: {stdout}{stderr}");
    let line = format!("SKIPPED {PROBE}: {WHAT} ({HOW})\n");
    assert!(stderr.contains(&line), "{environment:?}: {stderr}");
    // libtest still captures what a passing test prints; the skip got through all the same.
    assert!(!stdout.contains("captured by libtest") && !stderr.contains("captured by libtest"));
    let binary = std::env::current_exe().unwrap();
    let binary = binary.file_name().unwrap().to_string_lossy();
    let recorded = std::fs::read_to_string(&skip_log).expect("the skip is recorded");
    assert_eq!(recorded, format!("{binary}\t{line}"));
}

#[test]
fn a_missing_part_is_a_loud_recorded_skip_where_not_every_test_must_run() {
    assert_skipped_loudly(&[]);
    assert_skipped_loudly(&[("CI", ""), ("NEVERWIPED_REQUIRE_ALL", "0")]);
}

#[test]
fn a_missing_part_fails_the_test_under_ci_of_any_value_and_with_require_all() {
    for environment in [
        ("CI", "true"),
        ("CI", "1"),
        ("CI", "yes"),
        ("NEVERWIPED_REQUIRE_ALL", "1"),
    ] {
        let folder = tempfile::tempdir().unwrap();
        let skip_log = folder.path().join("skips");
        let output = run_probe(&[environment], &skip_log);
        let said = format!("{}{}", text(&output.stdout), text(&output.stderr));
        assert!(!output.status.success(), "{environment:?}: {said}");
        assert!(
            said.contains(&format!("{PROBE} cannot run: {WHAT}")) && said.contains(HOW),
            "{environment:?}: {said}"
        );
        assert!(said.contains(&format!("test {PROBE} ... FAILED")), "{said}");
        assert!(!skip_log.exists(), "a failure is not a skip");
    }
}

#[test]
fn a_present_part_is_handed_over() {
    assert_eq!(super::require(Some(7), WHAT, HOW), Some(7));
    assert!(super::require_that(true, WHAT, HOW));
}
