//! `neverwiped-sidecar`: the CLI over the engine. Parses arguments, runs one command, writes the
//! JSON result (when asked) and exits with restic's exit codes.

mod cli;

use clap::Parser;
use cli::args::Cli;
use neverwiped_contract::ExitStatus;
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    cli::init_logging(cli.log_format, cli.quiet);
    let started = chrono::Utc::now();
    let operation = cli::operation_of(&cli.command);
    let (status, result) = match cli::run(&cli).await {
        Ok(outcome) => {
            let status = if outcome.warnings.is_empty() { ExitStatus::Success } else { ExitStatus::Partial };
            (status, cli::run_result(operation, status, started, &outcome, None))
        }
        Err(error) => {
            let status = cli::exit_status_of(&error);
            let message = format!("{error:#}");
            eprintln!("error: {message}");
            (status, cli::run_result(operation, status, started, &Default::default(), Some(message)))
        }
    };
    if status == ExitStatus::Partial {
        eprintln!("warning: {} input(s) could not be read; the snapshot lacks them", result.warnings_total);
    }
    if let Some(path) = &cli.result_file {
        if let Err(error) = std::fs::write(path, result.to_termination_message()) {
            eprintln!("error: cannot write the result file {}: {error}", path.display());
        }
    }
    ExitCode::from(status.code() as u8)
}
