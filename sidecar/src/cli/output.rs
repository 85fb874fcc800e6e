//! What the user sees: logs, tables, and the JSON result (progress: `progress_display`).

use super::args::LogFormat;
use std::io::IsTerminal;

impl LogFormat {
    /// The default: readable text on a terminal, JSON lines otherwise (for Kubernetes).
    pub fn for_stderr() -> LogFormat {
        if std::io::stderr().is_terminal() {
            LogFormat::Text
        } else {
            LogFormat::Json
        }
    }
}

/// Logs on standard error in `format` (default [`LogFormat::for_stderr`]); colours only on a
/// terminal. Returns what writes the run's closing lines in the same format.
pub fn init_logging(format: Option<LogFormat>, quiet: bool) -> Closing {
    let default_level = if quiet { "warn" } else { "info" };
    let filter = tracing_subscriber::EnvFilter::try_from_env(neverwiped_contract::cli::env::LOG)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let format = format.unwrap_or_else(LogFormat::for_stderr);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().with_current_span(false).init(),
        LogFormat::Text => builder.without_time().with_target(false).init(),
    }
    Closing::new(format)
}

/// The lines that end a run on standard error (`error: ...`, `warning: ...`): text, or JSON
/// lines shaped like the log's, so a log collector reads every line of standard error as JSON.
#[derive(Debug, Clone, Copy)]
pub struct Closing {
    format: LogFormat,
}

impl Closing {
    pub fn new(format: LogFormat) -> Closing {
        Closing { format }
    }

    pub fn format(&self) -> LogFormat {
        self.format
    }

    pub fn error(&self, message: &str) {
        self.say("ERROR", "error", message);
    }

    pub fn warning(&self, message: &str) {
        self.say("WARN", "warning", message);
    }

    fn say(&self, level: &str, prefix: &str, message: &str) {
        match self.format {
            // Messages quote names a workload chose: escaped, they cannot drive the terminal.
            LogFormat::Text => eprintln!("{prefix}: {}", neverwiped::text::escaped(message)),
            LogFormat::Json => eprintln!(
                "{}",
                serde_json::json!({
                    "timestamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
                    "level": level,
                    "fields": {"message": message},
                })
            ),
        }
    }
}

pub use neverwiped::text::bytes;

/// The files of a backup, told apart by where their content came from; the parts add up to
/// `summary.files`, the files the snapshot holds.
pub fn file_counts(
    summary: &neverwiped::format::snapshot::SnapshotSummary,
    hard_links: u64,
) -> String {
    let unchanged = summary
        .files
        .saturating_sub(summary.files_read)
        .saturating_sub(hard_links);
    let mut parts = vec![
        format!("{} read", summary.files_read),
        format!("{unchanged} unchanged"),
    ];
    if hard_links > 0 {
        parts.push(format!("{hard_links} hard link(s) to files above"));
    }
    format!("{} files ({})", summary.files, parts.join(", "))
}

/// What a stored backup prints: one JSON object with `json`, else one line unless `quiet`.
pub fn print_backup(report: &neverwiped::archive::BackupReport, json: bool, quiet: bool) {
    let summary = &report.snapshot.summary;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "snapshotId": report.snapshot_id,
                "summary": neverwiped::views::SummaryView::from(summary),
                "hardLinks": report.hard_links,
                // A list, as in every command; the count is the summary's `warningsTotal`.
                "warnings": report.warnings.iter().chain(&report.notices).collect::<Vec<_>>(),
            })
        );
    } else if !quiet {
        println!(
            "snapshot {} saved: {}, {} in, {} added in {:.1}s",
            report.snapshot_id.short(),
            file_counts(summary, report.hard_links),
            bytes(summary.bytes_read),
            bytes(summary.bytes_added),
            summary.duration_millis as f64 / 1000.0
        );
    }
}
