//! The Helm chart rendered by Helm's own engine (`tests/chart/check_chart.py render`, which needs
//! python3 and the modules of `tests/chart/requirements.txt`; without them a test skips loudly, or
//! fails where every test must run).

use std::process::{Command, Output, Stdio};

use serde_json::Value;

use super::repo_root;

/// The exit status of check_chart.py when a Python module is missing.
const MISSING_TOOL_EXIT: i32 = 77;

pub const CHECK_SCRIPT: &str = "tests/chart/check_chart.py";

/// Runs `python3 tests/chart/check_chart.py ARGS`. `None` (after a recorded skip) when python3 or
/// a module or program it needs is missing, which fails the test where every test must run.
pub fn run_check_script(args: &[&str]) -> Option<Output> {
    let spawned = Command::new("python3")
        .arg(repo_root().join(CHECK_SCRIPT))
        .args(args)
        .current_dir(repo_root())
        .stdin(Stdio::null())
        .output();
    let skipped = match spawned {
        Ok(output) if output.status.code() == Some(MISSING_TOOL_EXIT) => {
            // The script's last line: `SKIPPED: <what is missing and how to get it>`.
            let said = String::from_utf8_lossy(&output.stdout);
            let last = said.trim().lines().last().unwrap_or_default();
            last.trim_start_matches("SKIPPED: ").to_owned()
        }
        Ok(output) => return Some(output),
        Err(error) => format!("cannot run python3 ({error}); the chart checks need it"),
    };
    neverwiped_testkit::missing(
        format_args!("the chart checks cannot run: {skipped}"),
        "python3 -m pip install -r tests/chart/requirements.txt and \
         npm ci --prefix tests/chart/grafana-schema (scripts/test.sh does)",
    );
    None
}

/// The chart rendered by Helm for a release `release` in `namespace` with `values`: its
/// `manifests` and `crds_yaml`.
pub fn render_chart(release: &str, namespace: &str, values: &Value) -> Option<Value> {
    let values = values.to_string();
    let args = [
        "render",
        "--name",
        release,
        "--namespace",
        namespace,
        "--values",
        &values,
    ];
    let output = run_check_script(&args)?;
    assert!(
        output.status.success(),
        "rendering the chart failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Some(serde_json::from_slice(&output.stdout).expect("the rendered chart as JSON"))
}
