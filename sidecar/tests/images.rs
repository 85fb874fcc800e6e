//! The container images' recipes, checked without a container engine (tests/images/).
//!
//! - `tests/images/check_dockerfiles.py` parses operator/Dockerfile and sidecar/Dockerfile and
//!   checks their invariants against the workspace and docs/images.md (a second or so). It needs
//!   python3 and the PyPI package `dockerfile-parse`; without them the test prints `SKIPPED: ...`
//!   and passes, except under `CI=true`.
//! - `tests/images/static-build.sh` builds both binaries as the Dockerfiles do (static release
//!   builds), checks that they are static and round-trips a folder through the static sidecar. It
//!   takes minutes on a fresh target directory, so it runs only with
//!   `NEVERWIPED_TEST_STATIC_BUILD=1`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

fn in_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

fn python() -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|dir| dir.join("python3"))
        .find(|candidate| candidate.is_file())
}

#[test]
fn the_dockerfiles_keep_their_invariants() {
    let Some(python) = python() else {
        assert!(!in_ci(), "CI=true but python3 is not on PATH");
        eprintln!("SKIPPED: python3 is not on PATH");
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
    assert!(
        output.status.success(),
        "tests/images/check_dockerfiles.py failed:\n{stdout}{stderr}"
    );
}

#[test]
fn the_static_binaries_build_and_round_trip_a_folder() {
    if std::env::var("NEVERWIPED_TEST_STATIC_BUILD").as_deref() != Ok("1") {
        eprintln!(
            "SKIPPED: the static release build takes minutes; set NEVERWIPED_TEST_STATIC_BUILD=1 \
             to run tests/images/static-build.sh"
        );
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
