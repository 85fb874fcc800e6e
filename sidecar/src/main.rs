//! `neverwiped-sidecar`: the CLI over the engine. Parses arguments, runs one command, writes the
//! JSON result (when asked) and exits with restic's exit codes.

mod cli;

use cli::args::Cli;
use cli::args::LogFormat;
use cli::output::Closing;
use cli::result_file::{ResultFile, RunEnd};
use neverwiped_contract::{ExitStatus, Operation};
use std::process::ExitCode;
use std::sync::Arc;

#[tokio::main]
async fn main() -> ExitCode {
    if let Some(code) = cli::launch::run_if_asked() {
        return code;
    }
    let started = chrono::Utc::now();
    map_large_allocations();
    let hardened = cli::hardening::disable_core_dumps();
    let (cli, operation) = match cli::args::parse() {
        Ok(parsed) => parsed,
        Err(error) => return usage_error(error, started),
    };
    let closing = cli::init_logging(cli.log_format, cli.quiet);
    if let Err(error) = hardened {
        // A hardened kernel may already forbid both; the run goes on.
        tracing::warn!(%error, "cannot disable core dumps");
    }
    let record = Arc::new(cli::RunRecord::default());
    let report = ResultFile {
        path: cli.result_file.clone(),
        operation,
        started,
    };
    let run = run_until_stopped(&cli, record.clone(), report.clone(), closing).await;
    // Whatever the command: no launcher is left waiting for a sidecar that is done.
    cli::hooks::finish(&record.exchange).await;
    let end = match &run {
        Ok(outcome) => RunEnd {
            status: match outcome.incomplete.is_empty() {
                true => ExitStatus::Success,
                false => ExitStatus::Partial,
            },
            outcome,
            error: None,
        },
        Err(error) => {
            let message = cli::describe_chain(error);
            closing.error(&message);
            RunEnd {
                status: cli::exit_status_of(error),
                outcome: cli::outcome_of_failure(error).unwrap_or(&cli::NO_OUTCOME),
                error: Some(message),
            }
        }
    };
    let status = end.status;
    let result = report.result(end, Some(record.as_ref()));
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
    report.save(&result, &closing);
    ExitCode::from(status.code() as u8)
}

/// Runs the command; on SIGHUP, SIGINT or SIGTERM the stop (see [`cli::stop`]) drops it (a mount
/// unmounts first), removes its locks, reports and exits.
async fn run_until_stopped(
    cli: &Cli,
    record: Arc<cli::RunRecord>,
    report: ResultFile,
    closing: Closing,
) -> anyhow::Result<cli::Outcome> {
    let control = cli::stop::watch(cli::stop::StoppedRun {
        report,
        closing,
        record: record.clone(),
        ends_itself: matches!(cli.command, cli::args::Command::Mount(_)),
    });
    let Some(control) = control else {
        return cli::run(cli, &record).await;
    };
    let ended = tokio::select! {
        outcome = cli::run(cli, &record) => Some(outcome),
        _ = control.drop_now => None,
    };
    match ended {
        Some(outcome) if !neverwiped::stopping::is_requested() => outcome,
        // The run is dropped, or ended after the signal: the stop reports and exits.
        _ => {
            let _ = control.gone.send(());
            std::future::pending().await
        }
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
    let report = ResultFile {
        path: partial.result_file,
        operation: partial.operation.unwrap_or(Operation::Backup),
        started,
    };
    let end = RunEnd {
        status: ExitStatus::Failed,
        outcome: &cli::NO_OUTCOME,
        error: Some(message),
    };
    report.write(end, None, &closing);
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
