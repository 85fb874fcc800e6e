//! The speed of a long operation and the time it has left, from samples of its progress taken
//! as it runs: bytes per second over the last seconds (a stall shows within them, a fast start
//! is forgotten), the average since the first byte while fewer seconds than that have passed.
//! Pure: the caller says what time it is, so tests need no clock.

use std::collections::VecDeque;
use std::time::Duration;

/// How far back the speed looks by default.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(10);

/// How far an operation was at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sample {
    /// Since the operation started.
    elapsed: Duration,
    bytes_done: u64,
}

/// Speed and time left at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    pub bytes_per_second: f64,
    /// The time left at that speed: `None` while nothing moved, while the total is unknown, or
    /// while the speed is zero; zero once the total is reached.
    pub eta: Option<Duration>,
    /// How much of the total is done, 0 to 100; `None` while the total is unknown.
    pub percent: Option<f64>,
}

/// Samples of the last `window`, and the moment the first byte moved.
#[derive(Debug, Clone)]
pub struct RateMeter {
    window: Duration,
    samples: VecDeque<Sample>,
    /// The last sample before any byte moved: where the average starts.
    start: Sample,
}

impl RateMeter {
    pub fn new(window: Duration) -> RateMeter {
        RateMeter {
            window,
            samples: VecDeque::new(),
            start: Sample {
                elapsed: Duration::ZERO,
                bytes_done: 0,
            },
        }
    }

    /// Records that `bytes_done` of `bytes_total` (`None`: not known yet) were done `elapsed`
    /// after the start, and estimates the speed and the time left from it.
    pub fn estimate(
        &mut self,
        elapsed: Duration,
        bytes_done: u64,
        bytes_total: Option<u64>,
    ) -> Estimate {
        let now = Sample {
            elapsed,
            bytes_done,
        };
        if bytes_done == 0 {
            self.start = now;
        }
        self.samples.push_back(now);
        let window_start = elapsed.saturating_sub(self.window);
        // Keep the newest sample at or before the window's start, as the speed's base.
        while self.samples.len() > 1 && self.samples[1].elapsed <= window_start {
            self.samples.pop_front();
        }
        let base = match self.samples.front() {
            Some(&oldest)
                if oldest.elapsed <= window_start && oldest.elapsed > self.start.elapsed =>
            {
                oldest
            }
            _ => self.start,
        };
        let bytes_per_second = speed(base, now);
        Estimate {
            bytes_per_second,
            eta: time_left(bytes_done, bytes_total, bytes_per_second),
            percent: bytes_total.map(|total| percent(bytes_done, total)),
        }
    }
}

/// Bytes per second from `base` to `now` (zero when no time passed).
fn speed(base: Sample, now: Sample) -> f64 {
    let seconds = now.elapsed.saturating_sub(base.elapsed).as_secs_f64();
    if seconds <= 0.0 {
        return 0.0;
    }
    now.bytes_done.saturating_sub(base.bytes_done) as f64 / seconds
}

fn time_left(bytes_done: u64, bytes_total: Option<u64>, bytes_per_second: f64) -> Option<Duration> {
    let total = bytes_total?;
    if bytes_done >= total {
        return Some(Duration::ZERO);
    }
    if bytes_done == 0 || bytes_per_second <= 0.0 {
        return None;
    }
    Some(Duration::from_secs_f64(
        (total - bytes_done) as f64 / bytes_per_second,
    ))
}

fn percent(bytes_done: u64, bytes_total: u64) -> f64 {
    if bytes_total == 0 {
        return 100.0;
    }
    (bytes_done as f64 * 100.0 / bytes_total as f64).min(100.0)
}

/// Bytes per second over a whole run: `bytes` in `seconds` (none when no time passed).
pub fn average_bytes_per_second(bytes: u64, seconds: f64) -> Option<u64> {
    (seconds > 0.0).then(|| (bytes as f64 / seconds).round() as u64)
}

#[cfg(test)]
#[path = "rate_tests.rs"]
mod tests;
