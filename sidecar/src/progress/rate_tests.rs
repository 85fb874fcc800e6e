use super::*;

const MB: u64 = 1_000_000;

fn at(seconds: f64) -> Duration {
    Duration::from_secs_f64(seconds)
}

/// Feeds one sample a second, `bytes_done(second)` for seconds `from..=to`; returns the last
/// estimate.
fn feed(
    meter: &mut RateMeter,
    seconds: std::ops::RangeInclusive<u64>,
    total: Option<u64>,
    bytes_done: impl Fn(u64) -> u64,
) -> Estimate {
    let mut last = None;
    for second in seconds {
        last = Some(meter.estimate(Duration::from_secs(second), bytes_done(second), total));
    }
    last.expect("at least one sample")
}

fn close(actual: f64, expected: f64) -> bool {
    (actual - expected).abs() < expected * 1e-9 + 1e-9
}

#[test]
fn a_steady_restore_has_its_rate_and_the_time_the_rest_takes_at_it() {
    let mut meter = RateMeter::new(DEFAULT_WINDOW);
    let estimate = feed(&mut meter, 0..=30, Some(100 * MB), |s| s * MB);
    assert!(close(estimate.bytes_per_second, MB as f64), "{estimate:?}");
    assert_eq!(estimate.eta, Some(Duration::from_secs(70)));
    assert!(close(estimate.percent.unwrap(), 30.0), "{estimate:?}");
}

#[test]
fn a_stall_lowers_the_rate_and_lengthens_the_time_left_until_the_rate_is_zero() {
    let mut meter = RateMeter::new(DEFAULT_WINDOW);
    let total = Some(100 * MB);
    let before = feed(&mut meter, 0..=20, total, |s| s * MB);
    // Stalled at 20 MB for five seconds: half the window moved nothing.
    let stalled = feed(&mut meter, 21..=25, total, |_| 20 * MB);
    assert!(
        close(stalled.bytes_per_second, MB as f64 / 2.0),
        "{stalled:?}"
    );
    assert!(stalled.eta > before.eta, "{before:?} then {stalled:?}");
    assert_eq!(stalled.eta, Some(Duration::from_secs(160)));
    // A whole window without a byte: no speed, so no time left can be told.
    let stopped = feed(&mut meter, 26..=30, total, |_| 20 * MB);
    assert_eq!(stopped.bytes_per_second, 0.0);
    assert_eq!(stopped.eta, None);
    assert!(close(stopped.percent.unwrap(), 20.0), "{stopped:?}");
}

#[test]
fn a_fast_start_is_forgotten_after_the_window() {
    let mut meter = RateMeter::new(DEFAULT_WINDOW);
    let done = |s: u64| {
        if s <= 5 {
            s * 10 * MB
        } else {
            50 * MB + (s - 5) * MB
        }
    };
    let estimate = feed(&mut meter, 0..=25, None, done);
    assert!(close(estimate.bytes_per_second, MB as f64), "{estimate:?}");
}

#[test]
fn the_total_reached_leaves_no_time() {
    let mut meter = RateMeter::new(DEFAULT_WINDOW);
    let estimate = feed(&mut meter, 0..=4, Some(4 * MB), |s| s * MB);
    assert_eq!(estimate.eta, Some(Duration::ZERO));
    assert_eq!(estimate.percent, Some(100.0));
}

#[test]
fn a_zero_total_is_done_from_the_start() {
    let mut meter = RateMeter::new(DEFAULT_WINDOW);
    let estimate = meter.estimate(at(0.5), 0, Some(0));
    assert_eq!(estimate.eta, Some(Duration::ZERO));
    assert_eq!(estimate.percent, Some(100.0));
    assert_eq!(estimate.bytes_per_second, 0.0);
}

#[test]
fn an_unknown_total_gives_a_rate_but_no_time_left() {
    let mut meter = RateMeter::new(DEFAULT_WINDOW);
    let estimate = feed(&mut meter, 0..=3, None, |s| s * MB);
    assert!(close(estimate.bytes_per_second, MB as f64), "{estimate:?}");
    assert_eq!(estimate.eta, None);
    assert_eq!(estimate.percent, None);
}

#[test]
fn the_first_second_counts_from_the_first_byte_not_from_the_start() {
    let mut meter = RateMeter::new(DEFAULT_WINDOW);
    let total = Some(10 * MB);
    let first = meter.estimate(Duration::ZERO, 0, total);
    assert_eq!((first.bytes_per_second, first.eta), (0.0, None));
    // Planning: nothing moved for 0.3 s, so no time left yet.
    let planning = meter.estimate(at(0.3), 0, total);
    assert_eq!(planning.eta, None);
    // 1 MB in the half second since then: 2 MB/s, 4.5 s for the 9 MB left.
    let moving = meter.estimate(at(0.8), MB, total);
    assert!(
        close(moving.bytes_per_second, 2.0 * MB as f64),
        "{moving:?}"
    );
    let eta = moving.eta.expect("a time left").as_secs_f64();
    assert!((eta - 4.5).abs() < 1e-6, "{moving:?}");
}

#[test]
fn bytes_at_the_very_start_give_no_rate_until_time_passes() {
    let mut meter = RateMeter::new(DEFAULT_WINDOW);
    let estimate = meter.estimate(Duration::ZERO, MB, Some(10 * MB));
    assert_eq!((estimate.bytes_per_second, estimate.eta), (0.0, None));
}

#[test]
fn the_average_of_a_run_is_its_bytes_over_its_seconds() {
    assert_eq!(average_bytes_per_second(30 * MB, 2.0), Some(15 * MB));
    assert_eq!(average_bytes_per_second(MB, 0.0), None);
}
