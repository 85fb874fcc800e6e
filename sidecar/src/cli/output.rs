//! What the user sees: logs, a progress bar on a terminal, tables, and the JSON result.

use super::args::LogFormat;
use indicatif::{ProgressBar, ProgressStyle};
use neverwiped::progress::Progress;
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

/// Logs on standard error: readable text on a terminal, JSON lines otherwise (for Kubernetes).
pub fn init_logging(format: Option<LogFormat>, quiet: bool) {
    let default_level = if quiet { "warn" } else { "info" };
    let filter = tracing_subscriber::EnvFilter::try_from_env("NEVERWIPED_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let format = format.unwrap_or(if std::io::stderr().is_terminal() {
        LogFormat::Text
    } else {
        LogFormat::Json
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().with_current_span(false).init(),
        LogFormat::Text => builder.without_time().with_target(false).init(),
    }
}

/// A progress bar fed from the engine's counters, shown only on a terminal.
pub struct ProgressDisplay {
    bar: Option<ProgressBar>,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

impl ProgressDisplay {
    pub fn start(progress: Arc<Progress>, quiet: bool, restoring: bool) -> ProgressDisplay {
        if quiet || !std::io::stderr().is_terminal() {
            return ProgressDisplay {
                bar: None,
                ticker: None,
            };
        }
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        let shown = bar.clone();
        let ticker = tokio::spawn(async move {
            loop {
                let files = Progress::get(&progress.files);
                let processed = Progress::get(&progress.bytes_processed);
                let transferred = Progress::get(&progress.bytes_transferred);
                let total = Progress::get(&progress.bytes_total);
                let message = if restoring {
                    format!(
                        "{files} files, {} of {} written, {} fetched",
                        bytes(processed),
                        bytes(total),
                        bytes(transferred)
                    )
                } else {
                    format!(
                        "{files} files, {} read, {} sent",
                        bytes(processed),
                        bytes(transferred)
                    )
                };
                shown.set_message(message);
                shown.tick();
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        ProgressDisplay {
            bar: Some(bar),
            ticker: Some(ticker),
        }
    }

    pub fn finish(self) {
        if let Some(ticker) = self.ticker {
            ticker.abort();
        }
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Bytes in binary units, e.g. `1.5 GiB`.
pub fn bytes(count: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = count as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{count} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
