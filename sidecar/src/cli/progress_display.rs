//! What a long command shows while it runs. On a terminal, a bar: a spinner with counts for a
//! backup; for a restore, bytes written of the total, the speed, the time left and the files.
//! Off a terminal, a restore logs a progress line after two seconds and then every
//! `NEVERWIPED_PROGRESS_INTERVAL` seconds: a JSON line on standard error with the default log
//! format, which `kubectl logs` of a restore Job shows while it runs.

use super::output::bytes;
use super::restore_progress::RestoreAt;
use anyhow::{bail, Result};
use indicatif::{ProgressBar, ProgressStyle};
use neverwiped::progress::rate::{RateMeter, DEFAULT_WINDOW};
use neverwiped::progress::Progress;
use neverwiped_contract::cli::{env, DEFAULT_PROGRESS_INTERVAL_SECS};
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// When a restore's first progress line comes (or after the interval, when that is shorter).
const FIRST_LINE_AFTER: Duration = Duration::from_secs(2);
/// How often a bar is redrawn.
const BAR_TICK: Duration = Duration::from_millis(200);
/// How often the speed is sampled between progress lines.
const LINE_TICK: Duration = Duration::from_millis(250);

/// A progress bar or progress lines fed from the engine's counters, until [`finish`].
///
/// [`finish`]: ProgressDisplay::finish
pub struct ProgressDisplay {
    bar: Option<ProgressBar>,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

impl ProgressDisplay {
    fn hidden() -> ProgressDisplay {
        ProgressDisplay {
            bar: None,
            ticker: None,
        }
    }

    /// A backup's spinner: files, bytes read and sent; on a terminal only.
    pub fn start(progress: Arc<Progress>, quiet: bool) -> ProgressDisplay {
        if quiet || !std::io::stderr().is_terminal() {
            return ProgressDisplay::hidden();
        }
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        let shown = bar.clone();
        let ticker = tokio::spawn(async move {
            loop {
                shown.set_message(format!(
                    "{} files, {} read, {} sent",
                    Progress::get(&progress.files),
                    bytes(Progress::get(&progress.bytes_processed)),
                    bytes(Progress::get(&progress.bytes_transferred))
                ));
                shown.tick();
                tokio::time::sleep(BAR_TICK).await;
            }
        });
        ProgressDisplay {
            bar: Some(bar),
            ticker: Some(ticker),
        }
    }

    /// A restore's progress: a bar on a terminal, else a log line every `interval`; nothing
    /// when `quiet`.
    pub fn restore(progress: Arc<Progress>, quiet: bool, interval: Duration) -> ProgressDisplay {
        if quiet {
            return ProgressDisplay::hidden();
        }
        let started = Instant::now();
        let mut meter = RateMeter::new(DEFAULT_WINDOW);
        if !std::io::stderr().is_terminal() {
            let ticker = tokio::spawn(async move {
                let mut due = FIRST_LINE_AFTER.min(interval);
                loop {
                    tokio::time::sleep(LINE_TICK).await;
                    let at = RestoreAt::sample(&progress, &mut meter, started.elapsed());
                    if started.elapsed() >= due {
                        at.log();
                        while due <= started.elapsed() {
                            due += interval;
                        }
                    }
                }
            });
            return ProgressDisplay {
                bar: None,
                ticker: Some(ticker),
            };
        }
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{elapsed_precise} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        let shown = bar.clone();
        let ticker = tokio::spawn(async move {
            loop {
                RestoreAt::sample(&progress, &mut meter, started.elapsed()).show_on(&shown);
                tokio::time::sleep(BAR_TICK).await;
            }
        });
        ProgressDisplay {
            bar: Some(bar),
            ticker: Some(ticker),
        }
    }

    /// Stops the updates and clears the bar: called when the work ends, however it ends.
    pub fn finish(self) {
        if let Some(ticker) = self.ticker {
            ticker.abort();
        }
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}

/// The seconds between a restore's progress lines: `NEVERWIPED_PROGRESS_INTERVAL`, by default
/// [`DEFAULT_PROGRESS_INTERVAL_SECS`].
pub fn progress_interval() -> Result<Duration> {
    match std::env::var(env::PROGRESS_INTERVAL) {
        Ok(value) => parse_interval(&value),
        Err(std::env::VarError::NotPresent) => {
            Ok(Duration::from_secs(DEFAULT_PROGRESS_INTERVAL_SECS))
        }
        Err(std::env::VarError::NotUnicode(_)) => parse_interval("(not UTF-8)"),
    }
}

fn parse_interval(value: &str) -> Result<Duration> {
    match value.trim().parse::<u64>() {
        Ok(seconds) if (1..=86_400).contains(&seconds) => Ok(Duration::from_secs(seconds)),
        _ => bail!(
            "{} must be a whole number of seconds from 1 to 86400 (the time between progress \
             lines), not {value:?}",
            env::PROGRESS_INTERVAL
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_is_whole_seconds_and_junk_is_named() {
        assert_eq!(parse_interval("1").unwrap(), Duration::from_secs(1));
        assert_eq!(parse_interval(" 30 ").unwrap(), Duration::from_secs(30));
        for junk in ["", "0", "-5", "1.5", "10s", "ten", "86401"] {
            let error = parse_interval(junk).unwrap_err().to_string();
            assert!(error.contains("NEVERWIPED_PROGRESS_INTERVAL"), "{error}");
            assert!(error.contains(&format!("{junk:?}")), "{error}");
        }
    }
}
