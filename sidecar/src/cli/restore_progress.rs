//! A restore at one moment, as its bar and its progress lines show it: bytes written of the
//! total, the speed over the last seconds, the time left at it, files restored of the total.

use super::output::bytes;
use indicatif::{HumanDuration, ProgressBar};
use neverwiped::progress::rate::{Estimate, RateMeter};
use neverwiped::progress::Progress;
use std::time::Duration;

pub struct RestoreAt {
    bytes_done: u64,
    /// `None` until the first batch is planned (or the snapshot's record says it).
    bytes_total: Option<u64>,
    files_done: u64,
    files_total: u64,
    estimate: Estimate,
}

impl RestoreAt {
    /// Reads the counters `elapsed` after the start and feeds them to `meter`.
    pub fn sample(progress: &Progress, meter: &mut RateMeter, elapsed: Duration) -> RestoreAt {
        let bytes_done = Progress::get(&progress.bytes_processed);
        let (bytes_total, files_total) = progress.restore_totals();
        RestoreAt {
            bytes_done,
            bytes_total,
            files_done: Progress::get(&progress.files),
            files_total,
            estimate: meter.estimate(elapsed, bytes_done, bytes_total),
        }
    }

    fn bytes_per_second(&self) -> u64 {
        self.estimate.bytes_per_second.round() as u64
    }

    /// Whole seconds left, rounded up; `None` while they cannot be told.
    fn eta_seconds(&self) -> Option<u64> {
        self.estimate.eta.map(|eta| eta.as_secs_f64().ceil() as u64)
    }

    /// "5.1 MiB/s, 4 seconds left, 3 of 10 files": what follows the bytes.
    fn speed_and_files(&self) -> String {
        let left = match self.eta_seconds() {
            Some(seconds) => format!(", {} left", HumanDuration(Duration::from_secs(seconds))),
            None => String::new(),
        };
        format!(
            "{}/s{left}, {} of {} files",
            bytes(self.bytes_per_second()),
            self.files_done,
            self.files_total
        )
    }

    fn bytes_text(&self) -> String {
        match self.bytes_total {
            Some(total) => format!("{} of {}", bytes(self.bytes_done), bytes(total)),
            None => format!("{} written", bytes(self.bytes_done)),
        }
    }

    /// Shows this moment on `bar` in one update: a bar drawn here, the bytes, speed, time left
    /// and files (one message, so a redraw never mixes two moments).
    pub fn show_on(&self, bar: &ProgressBar) {
        const WIDTH: usize = 30;
        let filled = self
            .estimate
            .percent
            .map_or(0, |percent| (percent / 100.0 * WIDTH as f64) as usize);
        bar.set_message(format!(
            "[{}{}] {}, {}",
            "=".repeat(filled),
            " ".repeat(WIDTH - filled),
            self.bytes_text(),
            self.speed_and_files()
        ));
        bar.tick();
    }

    /// One log line, its fields for machines (`etaSeconds`, `bytesTotal` and `percent` absent
    /// while unknown), its message for people.
    pub fn log(&self) {
        let percent = self
            .estimate
            .percent
            .map(|percent| (percent * 10.0).round() / 10.0);
        let shown_percent = percent.map(|p| format!(" ({p}%)")).unwrap_or_default();
        tracing::info!(
            bytesDone = self.bytes_done,
            bytesTotal = self.bytes_total,
            bytesPerSecond = self.bytes_per_second(),
            etaSeconds = self.eta_seconds(),
            filesDone = self.files_done,
            filesTotal = self.files_total,
            percent,
            "restore progress: {}{shown_percent}, {}",
            self.bytes_text(),
            self.speed_and_files()
        );
    }
}
