//! `scripts/test-summary.py` on sample logs of `cargo test` and `cargo test -- --list`.

use std::path::Path;
use std::process::Command;

use crate::{program, repo_root, require};

const LIST_LOG: &str = "\
     Running unittests src/lib.rs (target/debug/deps/neverwiped-1111)
walk::tests::a: test
walk::tests::b: test

2 tests, 0 benchmarks
     Running tests/cli.rs (target/debug/deps/cli-2222)
backup: test
restore: test
mount: test

3 tests, 0 benchmarks
   Doc-tests neverwiped
src/lib.rs - open (line 3): test

1 test, 0 benchmarks
";

/// A run log whose `cli` binary ends with `cli_result` (or never ends, when `None`).
fn run_log(cli_result: Option<&str>) -> String {
    let mut log = String::from(
        "\
     Running unittests src/lib.rs (target/debug/deps/neverwiped-1111)

running 2 tests
test walk::tests::a ... ok
test walk::tests::b ... ok

test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s

     Running tests/cli.rs (target/debug/deps/cli-2222)

running 3 tests
",
    );
    if let Some(result) = cli_result {
        log.push_str(&format!("{result}\n\n"));
    }
    log.push_str(
        "   Doc-tests neverwiped

running 1 test
test src/lib.rs - open (line 3) ... ok

test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.20s
",
    );
    log
}

const ALL_PASSED: &str =
    "test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.00s";

/// Runs the script on the logs; its exit status and standard output.
fn summarize(run: &str, skips: Option<&str>) -> Option<(bool, String)> {
    let python = require(
        program("python3"),
        "python3 is not on PATH",
        "install Debian's python3",
    )?;
    let folder = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = folder.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let mut command = Command::new(python);
    command
        .arg(repo_root().join("scripts/test-summary.py"))
        .arg(write("run.log", run))
        .arg(write("list.log", LIST_LOG));
    if let Some(skips) = skips {
        command.arg(write("skips.log", skips));
    } else {
        command.arg(Path::new(folder.path()).join("no-skips.log"));
    }
    let output = command.output().expect("python3 runs");
    assert!(
        output.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some((
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    ))
}

fn last_line(said: &str) -> &str {
    said.lines().last().unwrap_or_default()
}

#[test]
fn a_run_that_tested_everything_passes_with_the_closing_line() {
    let Some((passed, said)) = summarize(&run_log(Some(ALL_PASSED)), None) else {
        return;
    };
    assert!(passed, "{said}");
    assert_eq!(last_line(&said), "6 passed, 0 failed, 0 skipped", "{said}");
    assert!(said
        .lines()
        .any(|line| line.split_whitespace().eq(["cli-2222", "3", "3", "0", "0"])));
    assert!(!said.contains("FAILED"), "{said}");
}

#[test]
fn a_run_time_skip_fails_the_run_and_is_counted() {
    let skips = "cli-2222\tSKIPPED mount: /dev/fuse cannot be opened (load the fuse module)\n";
    let Some((passed, said)) = summarize(&run_log(Some(ALL_PASSED)), Some(skips)) else {
        return;
    };
    assert!(!passed, "{said}");
    assert!(
        said.contains("SKIPPED mount: /dev/fuse cannot be opened"),
        "{said}"
    );
    assert!(
        said.contains("FAILED: cli-2222: 1 skipped at run time"),
        "{said}"
    );
    assert!(said
        .lines()
        .any(|line| line.split_whitespace().eq(["cli-2222", "3", "2", "1", "0"])));
    assert_eq!(last_line(&said), "5 passed, 0 failed, 1 skipped", "{said}");
}

#[test]
fn an_ignored_test_fails_the_run_and_is_counted_as_skipped() {
    let result = "test result: ok. 2 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; \
                  finished in 1.00s";
    let Some((passed, said)) = summarize(&run_log(Some(result)), None) else {
        return;
    };
    assert!(!passed, "{said}");
    assert!(said.contains("FAILED: cli-2222: 1 ignored"), "{said}");
    assert_eq!(last_line(&said), "5 passed, 0 failed, 1 skipped", "{said}");
}

#[test]
fn a_binary_that_never_finished_fails_the_run() {
    let Some((passed, said)) = summarize(&run_log(None), None) else {
        return;
    };
    assert!(!passed, "{said}");
    assert!(
        said.contains("FAILED: cli-2222: holds 3 tests but did not finish a run"),
        "{said}"
    );
    assert_eq!(last_line(&said), "3 passed, 0 failed, 0 skipped", "{said}");
}

#[test]
fn a_failed_test_fails_the_run_and_is_counted() {
    let result = "test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; \
                  finished in 1.00s";
    let Some((passed, said)) = summarize(&run_log(Some(result)), None) else {
        return;
    };
    assert!(!passed, "{said}");
    assert!(said.contains("FAILED: cli-2222: 1 failed"), "{said}");
    assert_eq!(last_line(&said), "5 passed, 1 failed, 0 skipped", "{said}");
}
