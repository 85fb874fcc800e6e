//! `kubectl-neverwiped`: found on `PATH` by kubectl as the plugin `kubectl neverwiped`.

use clap::Parser;
use kubectl_neverwiped::args::Cli;
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env(neverwiped_contract::cli::env::LOG)
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .without_time()
        .init();
    match kubectl_neverwiped::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", kubectl_neverwiped::error_text(&error));
            ExitCode::FAILURE
        }
    }
}
