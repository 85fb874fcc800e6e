//! The container images' recipes, checked without a container engine (tests/images/).
//!
//! - `tests/images/check_dockerfiles.py` parses operator/Dockerfile and sidecar/Dockerfile and
//!   checks their invariants against the workspace and docs/images.md (a second or so). It needs
//!   python3 and the PyPI package `dockerfile-parse`.
//! - `tests/images/static-build.sh` checks that the images' binaries are static and round-trips a
//!   folder through the static sidecar: the binaries `scripts/build-images.sh` put in the images
//!   when `NEVERWIPED_STATIC_BINARIES` names their folder (`.image-binaries/<arch>`, as
//!   `scripts/test.sh` sets it), else built here as the Dockerfile builds them with
//!   `NEVERWIPED_TEST_STATIC_BUILD=1` (minutes on a fresh target directory).
//!
//! Without what they need the tests skip loudly, and fail under CI (`neverwiped_testkit`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// The folder holding the images' `neverwiped-operator` and `neverwiped-sidecar`.
const STATIC_BINARIES: &str = "NEVERWIPED_STATIC_BINARIES";

/// The exit status of `check_dockerfiles.py` when a module it needs is missing.
const MISSING_TOOL_EXIT: i32 = 77;

fn python() -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|dir| dir.join("python3"))
        .find(|candidate| candidate.is_file())
}

#[test]
fn the_dockerfiles_keep_their_invariants() {
    let Some(python) = neverwiped_testkit::require(
        python(),
        "python3 is not on PATH",
        "install Debian's python3",
    ) else {
        return;
    };
    let root = repo_root();
    let output = Command::new(python)
        .arg(root.join("tests/images/check_dockerfiles.py"))
        .current_dir(&root)
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    if output.status.code() == Some(MISSING_TOOL_EXIT) {
        neverwiped_testkit::missing(
            stdout.trim().trim_start_matches("SKIPPED: "),
            "python3 -m pip install -r tests/images/requirements.txt (scripts/test.sh does)",
        );
        return;
    }
    assert!(
        output.status.success(),
        "tests/images/check_dockerfiles.py failed:\n{stdout}{stderr}"
    );
}

#[test]
fn the_static_binaries_build_and_round_trip_a_folder() {
    let build_here = std::env::var("NEVERWIPED_TEST_STATIC_BUILD").as_deref() == Ok("1");
    if !neverwiped_testkit::require_that(
        std::env::var_os(STATIC_BINARIES).is_some() || build_here,
        format_args!("no static binaries: {STATIC_BINARIES} is not set"),
        "run scripts/build-images.sh and set NEVERWIPED_STATIC_BINARIES=.image-binaries/<arch> \
         (scripts/test.sh does both), or set NEVERWIPED_TEST_STATIC_BUILD=1 to build them here \
         (minutes)",
    ) {
        return;
    }
    let root = repo_root();
    let mut command = Command::new("bash");
    command
        .arg(root.join("tests/images/static-build.sh"))
        .current_dir(&root);
    // What `cargo test` sets for this process only; inherited, it would make the nested cargo
    // see another environment than a shell's and rebuild dependencies for nothing.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_PKG_")
            || matches!(
                key.as_ref(),
                "CARGO"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
                    | "LD_LIBRARY_PATH"
                    | "RUST_RECURSION_COUNT"
            )
        {
            command.env_remove(key.as_ref());
        }
    }
    let status = command.status().expect("bash runs");
    assert!(status.success(), "tests/images/static-build.sh failed");
}
