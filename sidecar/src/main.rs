//! `neverwiped-sidecar`: the CLI over the engine. Parses arguments, runs one command, writes the
//! JSON result (when asked) and exits with restic's exit codes.

mod cli;

use clap::Parser;
use cli::args::Cli;
use neverwiped_contract::ExitStatus;
use neverwiped_contract::Operation;
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let started = chrono::Utc::now();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(error, started),
    };
    cli::init_logging(cli.log_format, cli.quiet);
    let operation = cli::operation_of(&cli.command);
    // As PID 1 of a Job's container the process has no default SIGTERM handler: without this,
    // a deleted or timed-out Job would wait out its whole grace period before being killed. The
    // handler runs on a worker thread, so it answers even while the command blocks the main one.
    tokio::spawn(exit_on_stop_signal(
        operation,
        started,
        cli.result_file.clone(),
    ));
    let run = cli::run(&cli).await;
    let (status, result) = match run {
        Ok(outcome) => {
            let status = if outcome.warnings.is_empty() {
                ExitStatus::Success
            } else {
                ExitStatus::Partial
            };
            (
                status,
                cli::run_result(operation, status, started, &outcome, None),
            )
        }
        Err(error) => {
            let status = cli::exit_status_of(&error);
            let message = cli::describe_chain(&error);
            eprintln!("error: {message}");
            (
                status,
                cli::run_result(
                    operation,
                    status,
                    started,
                    cli::outcome_of_failure(&error).unwrap_or(&Default::default()),
                    Some(message),
                ),
            )
        }
    };
    if status == ExitStatus::Partial {
        eprintln!("warning: the run had {} warning(s); inputs that could not be read are not in the snapshot", result.warnings_total);
    }
    if let Some(path) = &cli.result_file {
        if let Err(error) = std::fs::write(path, result.to_termination_message()) {
            eprintln!(
                "error: cannot write the result file {}: {error}",
                path.display()
            );
        }
    }
    ExitCode::from(status.code() as u8)
}

/// On SIGTERM or SIGINT: reports the run as failed (result file, one error line) and exits at
/// once. Nothing is lost: a snapshot only exists once it is complete, and the locks left behind
/// are removed by the next run of the same host.
async fn exit_on_stop_signal(
    operation: Operation,
    started: chrono::DateTime<chrono::Utc>,
    result_file: Option<std::path::PathBuf>,
) {
    let signal = stop_signal().await;
    let message = format!(
        "stopped by {signal} before the run was complete; nothing after its last committed step was saved (the next run continues from there)"
    );
    eprintln!("error: {message}");
    if let Some(path) = result_file {
        // Exiting at once matters more than saying that the result file could not be written.
        let _ = write_failed_result(&path, operation, started, message);
    }
    std::process::exit(ExitStatus::Failed.code());
}

/// Writes the result of a run that failed before it did anything worth counting.
fn write_failed_result(
    path: &std::path::Path,
    operation: Operation,
    started: chrono::DateTime<chrono::Utc>,
    message: String,
) -> std::io::Result<()> {
    let result = cli::run_result(
        operation,
        ExitStatus::Failed,
        started,
        &Default::default(),
        Some(message),
    );
    std::fs::write(path, result.to_termination_message())
}

/// Waits for SIGTERM or SIGINT; returns the signal's name.
async fn stop_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut terminate), Ok(mut interrupt)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = terminate.recv() => "SIGTERM",
        _ = interrupt.recv() => "SIGINT",
    }
}

/// A command line that does not parse: help and version exit 0; a mistake exits 1 (restic's
/// "failed", not clap's 2) and still writes the result file, so the operator sees why.
fn usage_error(error: clap::Error, started: chrono::DateTime<chrono::Utc>) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = error.print();
        return ExitCode::SUCCESS;
    }
    let _ = error.print();
    let args: Vec<String> = std::env::args().collect();
    let result_file =
        args.iter()
            .enumerate()
            .find_map(|(i, arg)| match arg.strip_prefix("--result-file") {
                Some("") => args.get(i + 1).cloned(),
                Some(value) => value.strip_prefix('=').map(str::to_owned),
                None => None,
            });
    if let Some(path) = result_file {
        let operation = match args
            .iter()
            .skip(1)
            .find(|arg| !arg.starts_with('-'))
            .map(String::as_str)
        {
            Some("restore") => Operation::Restore,
            Some("init") => Operation::Init,
            Some("forget") => Operation::Forget,
            Some("prune") => Operation::Prune,
            Some("check") => Operation::Check,
            _ => Operation::Backup,
        };
        let message = error.kind().to_string();
        let detail = error
            .to_string()
            .lines()
            .next()
            .unwrap_or_default()
            .trim_start_matches("error: ")
            .to_owned();
        let text = if detail.is_empty() { message } else { detail };
        if let Err(write_error) = write_failed_result(path.as_ref(), operation, started, text) {
            eprintln!("error: cannot write the result file {path}: {write_error}");
        }
    }
    ExitCode::from(ExitStatus::Failed.code() as u8)
}
