//! The sidecar binary as the CLI tests run it: a command with none of the caller's
//! `NEVERWIPED_*` environment, and what one run did (exit code, output, result file, closing
//! lines).

use neverwiped_contract::{ExitStatus, RunResult};
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// The binary under test.
pub const SIDECAR_BIN: &str = env!("CARGO_BIN_EXE_neverwiped-sidecar");

/// Every variable the sidecar reads (besides `NEVERWIPED_DB_PASSWORD_<NAME>`): none may leak in
/// from the environment running the tests.
pub const SIDECAR_VARIABLES: [&str; 17] = [
    "NEVERWIPED_REPOSITORY",
    "NEVERWIPED_PASSWORD",
    "NEVERWIPED_PASSWORD_FILE",
    "NEVERWIPED_NEW_PASSWORD_FILE",
    "NEVERWIPED_GATE_USERNAME",
    "NEVERWIPED_GATE_PASSWORD",
    "NEVERWIPED_GATE_PASSWORD_FILE",
    "NEVERWIPED_GATE_CA_FILE",
    "NEVERWIPED_LOG_FORMAT",
    "NEVERWIPED_LOG",
    "NEVERWIPED_PROGRESS_INTERVAL",
    "NEVERWIPED_FROM_REPOSITORY",
    "NEVERWIPED_FROM_PASSWORD",
    "NEVERWIPED_FROM_PASSWORD_FILE",
    "NEVERWIPED_FROM_GATE_USERNAME",
    "NEVERWIPED_FROM_GATE_PASSWORD",
    "NEVERWIPED_FROM_GATE_PASSWORD_FILE",
];

/// The sidecar without any `NEVERWIPED_*` variable of the caller, standard input closed.
pub fn bare_command() -> Command {
    let mut command = Command::new(SIDECAR_BIN);
    for name in SIDECAR_VARIABLES {
        command.env_remove(name);
    }
    for (name, _) in std::env::vars_os() {
        if name
            .to_string_lossy()
            .starts_with("NEVERWIPED_DB_PASSWORD_")
        {
            command.env_remove(name);
        }
    }
    command.stdin(Stdio::null());
    command
}

/// What one run of the sidecar did.
#[derive(Debug)]
pub struct Run {
    /// The exit code; -1 when a signal ended the process.
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    /// The result file, when the run was given one and wrote it.
    pub result: Option<RunResult>,
}

/// Runs `command` to its end.
pub fn run(mut command: Command) -> Run {
    Run::from_output(command.output().expect("start neverwiped-sidecar"), None)
}

/// Reads a result file; panics when it is missing or not a [`RunResult`].
pub fn read_result(path: &Path) -> RunResult {
    let json = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("no result file at {}: {e}", path.display()));
    RunResult::from_json(&json)
        .unwrap_or_else(|e| panic!("the result file is not a RunResult ({e}):\n{json}"))
}

impl Run {
    /// The run that gave `output`, with its result file when `result_file` names one it wrote.
    pub fn from_output(output: Output, result_file: Option<&Path>) -> Run {
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            result: result_file.filter(|path| path.exists()).map(read_result),
        }
    }

    /// Panics with the whole output unless the run exited with `code`.
    #[track_caller]
    pub fn expect_code(self, code: i32) -> Run {
        assert_eq!(
            self.code, code,
            "exit code; stdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }

    #[track_caller]
    pub fn expect_ok(self) -> Run {
        self.expect_code(0)
    }

    #[track_caller]
    pub fn result(&self) -> &RunResult {
        self.result.as_ref().expect("a result file")
    }

    /// The error of a failed run, from its result file.
    #[track_caller]
    pub fn error(&self) -> String {
        assert_eq!(self.code, 1, "expected a failure; stderr:\n{}", self.stderr);
        let result = self.result();
        assert_eq!(result.status, ExitStatus::Failed);
        result.error.clone().expect("a failed run has an error")
    }

    /// The lines the sidecar printed as `error: ...` (there should be exactly one on failure),
    /// as text; under JSON logs (the default off a terminal) the JSON lines of level ERROR.
    pub fn error_lines(&self) -> Vec<String> {
        self.closing_lines("error", "ERROR")
    }

    /// The `warning: ...` lines, as [`Run::error_lines`] reads them.
    pub fn warning_lines(&self) -> Vec<String> {
        self.closing_lines("warning", "WARN")
    }

    /// The single error line of a failed run.
    #[track_caller]
    pub fn error_line(&self) -> String {
        let lines = self.error_lines();
        assert_eq!(
            lines.len(),
            1,
            "expected one `error:` line; stderr:\n{}",
            self.stderr
        );
        lines[0].clone()
    }

    fn closing_lines(&self, prefix: &str, level: &str) -> Vec<String> {
        let mut lines = Vec::new();
        for line in self.stderr.lines() {
            if line.starts_with(&format!("{prefix}: ")) {
                lines.push(line.to_owned());
                continue;
            }
            let Ok(json) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            // The closing lines are the ones without a target: no module logged them.
            if json["level"] == level && json.get("target").is_none() {
                let message = json["fields"]["message"].as_str().unwrap_or_default();
                lines.push(format!("{prefix}: {message}"));
            }
        }
        lines
    }
}

/// The arguments of a run over databases, built instead of spelt out: `backup` or `restore
/// SNAPSHOT`, then each `--database NAME=URI` with its `--database-password-file NAME=PATH`.
#[derive(Debug, Clone)]
pub struct DatabaseRun {
    args: Vec<String>,
}

impl DatabaseRun {
    pub fn backup() -> DatabaseRun {
        DatabaseRun {
            args: vec!["backup".into()],
        }
    }

    pub fn restore(snapshot: &str) -> DatabaseRun {
        DatabaseRun {
            args: vec!["restore".into(), snapshot.into()],
        }
    }

    /// `--database ENTRY` (`NAME=URI`) and `--database-password-file PASSWORD_FILE`
    /// (`NAME=PATH`).
    pub fn database(mut self, entry: &str, password_file: &str) -> DatabaseRun {
        self.args.extend([
            "--database".into(),
            entry.into(),
            "--database-password-file".into(),
            password_file.into(),
        ]);
        self
    }

    /// Any other argument, e.g. `--overwrite-databases`.
    pub fn arg(mut self, arg: &str) -> DatabaseRun {
        self.args.push(arg.into());
        self
    }

    /// The arguments, as the harness's `run` takes them.
    pub fn args(&self) -> Vec<&str> {
        self.args.iter().map(String::as_str).collect()
    }
}
