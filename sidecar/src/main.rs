//! `neverwiped-sidecar`: the CLI over the engine. Parses arguments, runs one command, writes the
//! JSON result (when asked) and exits with restic's exit codes.

mod cli;

use clap::Parser;
use cli::args::Cli;
use cli::args::LogFormat;
use cli::output::Closing;
use neverwiped_contract::{ExitStatus, Operation};
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let started = chrono::Utc::now();
    map_large_allocations();
    let hardened = cli::hardening::disable_core_dumps();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(error, started),
    };
    let closing = cli::init_logging(cli.log_format, cli.quiet);
    if let Err(error) = hardened {
        // A hardened kernel may already forbid both; the run goes on.
        tracing::warn!(%error, "cannot disable core dumps");
    }
    let record = std::sync::Arc::new(cli::RunRecord::default());
    let operation = cli::operation_of(&cli.command);
    // As PID 1 of a Job's container the process has no default SIGTERM handler: without this,
    // a deleted or timed-out Job would wait out its whole grace period before being killed. The
    // handler runs on a worker thread, so it answers even while the command blocks the main one.
    // `mount` answers them itself: it unmounts first.
    if !matches!(cli.command, cli::args::Command::Mount(_)) {
        tokio::spawn(exit_on_stop_signal(
            operation,
            started,
            cli.result_file.clone(),
            closing,
            record.clone(),
        ));
    }
    let run = cli::run(&cli, &record).await;
    let databases = &record.databases;
    let (status, result) = match run {
        Ok(outcome) => {
            let status = if outcome.incomplete.is_empty() {
                ExitStatus::Success
            } else {
                ExitStatus::Partial
            };
            (
                status,
                cli::run_result(
                    operation,
                    status,
                    started,
                    &outcome,
                    databases.results(false),
                    None,
                ),
            )
        }
        Err(error) => {
            let status = cli::exit_status_of(&error);
            let message = cli::describe_chain(&error);
            closing.error(&message);
            let outcome = cli::outcome_of_failure(&error).unwrap_or(&cli::NO_OUTCOME);
            (
                status,
                cli::run_result(
                    operation,
                    status,
                    started,
                    outcome,
                    databases.results(true),
                    Some(message),
                ),
            )
        }
    };
    match status {
        ExitStatus::Partial => closing.warning(&format!(
            "the run had {} warning(s); what could not be read or restored is missing (the warnings say what)",
            result.warnings_total
        )),
        ExitStatus::Success if result.warnings_total > 0 => closing.warning(&format!(
            "the run succeeded with {} warning(s); nothing that could be read is missing",
            result.warnings_total
        )),
        _ => {}
    }
    if let Some(path) = &cli.result_file {
        if let Err(error) = std::fs::write(path, result.to_termination_message()) {
            closing.error(&format!(
                "cannot write the result file {}: {error}",
                path.display()
            ));
        }
    }
    ExitCode::from(status.code() as u8)
}

/// On SIGTERM or SIGINT: reports the run (result file, one closing line) and exits at once. A
/// backup whose snapshot is already stored succeeded, with a warning that what follows the
/// snapshot (retention) did not run; any other run failed. Nothing is lost: a snapshot only
/// exists once it is complete, and the locks left behind are removed by the next run of the same
/// host.
async fn exit_on_stop_signal(
    operation: Operation,
    started: chrono::DateTime<chrono::Utc>,
    result_file: Option<std::path::PathBuf>,
    closing: Closing,
    record: std::sync::Arc<cli::RunRecord>,
) {
    let signal = stop_signal().await;
    let (status, outcome, error) = match record.snapshot.get() {
        Some(snapshot_id) => {
            let message = format!(
                "stopped by {signal} after snapshot {} was stored: what follows a backup (retention) did not run",
                snapshot_id.short()
            );
            closing.warning(&message);
            let outcome = cli::Outcome {
                snapshot_id: Some(snapshot_id.to_hex()),
                warnings: vec![message],
                ..cli::Outcome::default()
            };
            (ExitStatus::Success, outcome, None)
        }
        None => {
            let message = format!(
                "stopped by {signal} before the run was complete; nothing after its last committed step was saved (the next run continues from there)"
            );
            closing.error(&message);
            (ExitStatus::Failed, cli::Outcome::default(), Some(message))
        }
    };
    if let Some(path) = result_file {
        let databases = record.databases.results(error.is_some());
        let result = cli::run_result(operation, status, started, &outcome, databases, error);
        // Exiting at once matters more than saying that the result file could not be written.
        let _ = std::fs::write(&path, result.to_termination_message());
    }
    std::process::exit(status.code());
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
    // What could be read of the command line despite the mistake: the command, the result file
    // and the log format.
    let partial = cli::args::PartialCommandLine::read();
    let closing = Closing::new(partial.log_format.unwrap_or_else(LogFormat::for_stderr));
    let text = cli::args::usage_error_text(&error, partial.command_name.as_deref());
    let message = cli::args::one_line(&text);
    match closing.format() {
        LogFormat::Json => closing.error(&message),
        LogFormat::Text => eprint!("{text}"),
    }
    if let Some(path) = partial.result_file {
        let operation = partial.operation.unwrap_or(Operation::Backup);
        let result = cli::run_result(
            operation,
            ExitStatus::Failed,
            started,
            &cli::NO_OUTCOME,
            Vec::new(),
            Some(message),
        );
        if let Err(write_error) = std::fs::write(&path, result.to_termination_message()) {
            closing.error(&format!(
                "cannot write the result file {}: {write_error}",
                path.display()
            ));
        }
    }
    ExitCode::from(ExitStatus::Failed.code() as u8)
}

/// Allocations of 1 MiB or more get their own mapping, given back when freed. The index and the
/// sets of blob ids grow by doubling, and under glibc's default threshold (which rises up to
/// 32 MiB) every outgrown copy stayed resident as free heap: a prune of a million files peaked at
/// 133 MiB that way.
fn map_large_allocations() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt sets one parameter of the allocator, under the allocator's own lock.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}
