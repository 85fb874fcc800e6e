//! The run's JSON result ([`RunResult`], `--result-file`): built and written here, whichever way
//! the run ends — done, failed, stopped by a signal, or a command line that does not parse.

use super::output::Closing;
use super::{Outcome, RunRecord};
use neverwiped_contract::{ExitStatus, Operation, RunResult, RESULT_FORMAT_VERSION};
use std::path::PathBuf;

/// How many warnings a result lists (it counts them all).
const MAX_WARNINGS_KEPT: usize = 20;

/// Where and for what a run reports its result.
#[derive(Debug, Clone)]
pub struct ResultFile {
    /// `--result-file`; none: the result is only built, for the closing lines.
    pub path: Option<PathBuf>,
    pub operation: Operation,
    pub started: chrono::DateTime<chrono::Utc>,
}

/// How a run ended, for its result.
pub struct RunEnd<'a> {
    pub status: ExitStatus,
    pub outcome: &'a Outcome,
    /// The error that ended the run; with one, a database not done is reported failed.
    pub error: Option<String>,
}

impl ResultFile {
    /// Builds the result of `end`, with what `record` holds (none: a run that never started),
    /// and writes it to the result file when there is one; says so on `closing` when it cannot.
    pub fn write(&self, end: RunEnd, record: Option<&RunRecord>, closing: &Closing) -> RunResult {
        let result = self.result(end, record);
        self.save(&result, closing);
        result
    }

    /// Writes `result` to the result file, when there is one: the only place that does.
    pub fn save(&self, result: &RunResult, closing: &Closing) {
        let Some(path) = &self.path else {
            return;
        };
        if let Err(error) = std::fs::write(path, result.to_termination_message()) {
            closing.error(&format!(
                "cannot write the result file {}: {error}",
                path.display()
            ));
        }
    }

    /// The result of `end`, finished now.
    pub fn result(&self, end: RunEnd, record: Option<&RunRecord>) -> RunResult {
        let finished = chrono::Utc::now();
        let outcome = end.outcome;
        let databases = record
            .map(|r| r.databases.results(end.error.is_some()))
            .unwrap_or_default();
        let exchange = record.map(|r| r.exchange.as_ref());
        let hook_warnings = exchange.map(|e| e.warnings()).unwrap_or_default();
        RunResult {
            hooks: exchange.map(|e| e.hook_results()).unwrap_or_default(),
            paused_secs: exchange.and_then(|e| e.paused_secs()),
            streams: exchange
                .map(|e| e.stream_results(end.error.is_some()))
                .unwrap_or_default(),
            verification: outcome.verification.clone(),
            version: RESULT_FORMAT_VERSION,
            operation: self.operation,
            status: end.status,
            snapshot_id: outcome.snapshot_id.clone(),
            snapshot_time: outcome.snapshot_time.clone(),
            started_at: self
                .started
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            finished_at: finished.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            duration_secs: (finished - self.started).num_milliseconds() as f64 / 1000.0,
            files: outcome.files,
            bytes_read: outcome.bytes_read,
            bytes_added: outcome.bytes_added,
            bytes_transferred: outcome.bytes_transferred,
            bytes_per_second: outcome.bytes_per_second,
            databases,
            warnings_total: (outcome.incomplete.len()
                + outcome.warnings.len()
                + hook_warnings.len()) as u64,
            warnings: outcome
                .incomplete
                .iter()
                .chain(&outcome.warnings)
                .chain(&hook_warnings)
                .take(MAX_WARNINGS_KEPT)
                .cloned()
                .collect(),
            error: end.error,
            repository: outcome.repository,
            snapshots_forgotten: outcome.snapshots_forgotten,
            prune: outcome.prune,
            check: outcome.check,
            host_snapshots: outcome.host_snapshots.clone(),
            key_id: record.and_then(|r| r.key_id.get().cloned()),
            changes: outcome.changes,
            drill: outcome.drill.clone(),
            sources: outcome.sources.clone(),
        }
    }
}
