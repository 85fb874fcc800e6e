//! The runbook's blocks, run verbatim: each block of docs/restore-runbook.md that follows a mark
//! `<!-- runbook: NAME -->` is read from the Markdown by its mark (so the docs and this test cannot
//! drift apart) and run by `bash -euo pipefail` with the variables the runbook tells its reader to
//! set, as the user whose kubeconfig it is given, while the test plays the Jobs the operator makes.

use std::future::Future;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::support::{kubectl_path, repo_root};

/// The runbook the blocks come from.
pub const RUNBOOK: &str = "docs/restore-runbook.md";
/// How long a block may take once its Jobs ran.
const AFTER_JOBS: Duration = Duration::from_secs(60);

/// The text of the fenced block right after the mark `<!-- runbook: NAME -->`.
pub fn block(name: &str) -> String {
    let markdown = std::fs::read_to_string(repo_root().join(RUNBOOK)).expect("the runbook");
    let mark = format!("<!-- runbook: {name} -->");
    let (_, after) = markdown
        .split_once(&mark)
        .unwrap_or_else(|| panic!("{RUNBOOK} has no mark {mark}"));
    let mut lines = after.trim_start_matches('\n').lines();
    let fence = lines.next().unwrap_or_default();
    assert!(
        fence.starts_with("```"),
        "{mark} is not right before a fenced block: {fence:?}"
    );
    let body: Vec<&str> = lines.take_while(|line| !line.starts_with("```")).collect();
    body.join("\n") + "\n"
}

/// Runs the `sh` block `name` as the user of `kubeconfig` with `variables`, while `jobs` plays
/// the Jobs it waits for; returns the block's output once both ended, and fails the test when the
/// block fails, ends before its Jobs ran, or does not end after them.
pub async fn run_while<J: Future>(
    name: &str,
    kubeconfig: &Path,
    variables: &[(&str, String)],
    jobs: J,
) -> (Output, J::Output) {
    let text = block(name);
    let kubectl_folder = kubectl_path().parent().expect("a folder").to_owned();
    let path = std::env::join_paths(std::iter::once(kubectl_folder).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("a PATH");
    let mut command = Command::new("bash");
    command
        .args(["-euo", "pipefail", "-c", &text])
        .env("PATH", path)
        .env("KUBECONFIG", kubeconfig)
        .envs(variables.iter().map(|(key, value)| (key, value)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let child = command.spawn().expect("bash runs");
    let _group = ProcessGroup(child.id());
    let ended = tokio::task::spawn_blocking(move || child.wait_with_output().expect("bash ends"));
    tokio::pin!(ended);
    let played = tokio::select! {
        played = jobs => played,
        output = &mut ended => {
            let output = output.expect("the block's output");
            panic!("the runbook block {name} ended before its Jobs ran: {}", said(&output))
        }
    };
    let output = match tokio::time::timeout(AFTER_JOBS, &mut ended).await {
        Ok(output) => output.expect("the block's output"),
        Err(_) => panic!("the runbook block {name} did not end {AFTER_JOBS:?} after its Jobs ran"),
    };
    assert!(
        output.status.success(),
        "the runbook block {name} failed: {}",
        said(&output)
    );
    (output, played)
}

/// Runs the `sh` block `name` as the user of `kubeconfig`, when it makes no Job.
pub async fn run(name: &str, kubeconfig: &Path, variables: &[(&str, String)]) -> Output {
    run_while(name, kubeconfig, variables, async {}).await.0
}

fn said(output: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The process group of a block: bash and the kubectl it runs, which this test started; killed
/// when the test leaves the block (a failing test does not leave a `kubectl wait` behind).
struct ProcessGroup(u32);

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0)])
            .stderr(Stdio::null())
            .status();
    }
}
