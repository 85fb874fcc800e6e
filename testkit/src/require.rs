//! The one rule for everything a test needs from the machine (a server, a program, FUSE, root, the
//! container engine, an image, a Python or npm module, the API server): the test gets it, or the
//! missing part FAILS the test wherever every test must run (`CI` set to any non-empty value, or
//! `NEVERWIPED_REQUIRE_ALL=1`), and elsewhere the test is skipped loudly:
//!
//! - a `SKIPPED <test>: <what is missing> (<how to get it>)` line goes straight to the process's
//!   standard error, which libtest does not capture, so it shows even for a passing test;
//! - the same line, prefixed with the test binary's name, is appended to the file named by
//!   `NEVERWIPED_SKIP_LOG` when it is set, so that a run can count its skips
//!   (`scripts/test-summary.py`).

use std::fmt::Display;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;

/// The environment variable naming the file every skip is appended to.
pub const SKIP_LOG: &str = "NEVERWIPED_SKIP_LOG";

/// Whether every test must run here: `CI` is set to anything non-empty, or
/// `NEVERWIPED_REQUIRE_ALL=1`.
pub fn every_test_must_run() -> bool {
    std::env::var_os("CI").is_some_and(|value| !value.is_empty())
        || std::env::var_os("NEVERWIPED_REQUIRE_ALL").is_some_and(|value| value == "1")
}

/// `found` when it is there; when it is `None`, [`missing`] decides: a failure where every test
/// must run, else a recorded skip and `None`.
#[track_caller]
pub fn require<T>(found: Option<T>, what: impl Display, how_to_get_it: &str) -> Option<T> {
    if found.is_none() {
        missing(what, how_to_get_it);
    }
    found
}

/// `true` when `present`; otherwise as [`require`]: a failure where every test must run, else a
/// recorded skip and `false`.
#[track_caller]
pub fn require_that(present: bool, what: impl Display, how_to_get_it: &str) -> bool {
    require(present.then_some(()), what, how_to_get_it).is_some()
}

/// Says that this test cannot run because `what` is missing: panics (failing the test) where every
/// test must run, else writes and records the skip and returns, after which the test returns.
#[track_caller]
pub fn missing(what: impl Display, how_to_get_it: &str) {
    let test = current_test();
    if every_test_must_run() {
        panic!(
            "{test} cannot run: {what}; every test must run here (CI={:?}, NEVERWIPED_REQUIRE_ALL={:?}): {how_to_get_it}",
            std::env::var("CI").unwrap_or_default(),
            std::env::var("NEVERWIPED_REQUIRE_ALL").unwrap_or_default(),
        );
    }
    let line = format!("SKIPPED {test}: {what} ({how_to_get_it})\n");
    // Straight to the handle: libtest captures `eprintln!` of a passing test, not this.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
    if let Some(log) = std::env::var_os(SKIP_LOG) {
        record(Path::new(&log), &format!("{}\t{line}", test_binary()));
    }
}

/// Appends one line to the skip log in a single write, so that parallel test processes do not
/// mix their lines.
fn record(log: &Path, line: &str) {
    let written = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .and_then(|mut file| file.write_all(line.as_bytes()));
    if let Err(error) = written {
        panic!(
            "cannot record a skip in {SKIP_LOG}={}: {error}",
            log.display()
        );
    }
}

/// The running test's name: libtest names each test's thread after it (and `#[tokio::test]` runs
/// the body on that thread).
fn current_test() -> String {
    match std::thread::current().name() {
        Some(name) if name != "main" => name.to_owned(),
        _ => format!("a test of {}", test_binary()),
    }
}

/// The file name of the test binary (`cli-0123abcd`), as cargo's `Running ...` line names it.
fn test_binary() -> String {
    std::env::current_exe()
        .ok()
        .as_deref()
        .and_then(Path::file_name)
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| "unknown".to_owned())
}

#[cfg(test)]
mod tests;
