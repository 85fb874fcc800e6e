//! When a BackupPlan runs: its cron schedule read in its time zone, the next run, and what to do
//! about runs missed while the operator was down or a previous run was still going.
//!
//! A field may hold a Jenkins-style `H` ([`crate::hashed_schedule`]): [`Schedule::parse_hashed`]
//! replaces it with the plan's own value first.
//!
//! Daylight saving time follows the usual cron rules (croner's): a time a spring-forward change
//! skips runs at the first instant after the gap; a time a fall-back change repeats runs once, at
//! its first occurrence; schedules of every hour or minute keep running through both halves.

use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, Zoned};

use crate::api::RunTrigger;

/// A run this much later than its scheduled time still counts as on time: the operator wakes at
/// the scheduled second, and a queue or a leader change adds a little.
pub const ON_TIME_GRACE: SignedDuration = SignedDuration::from_mins(5);

/// By default, a missed run is caught up when the operator notices it within this long.
pub const DEFAULT_CATCH_UP_WINDOW: SignedDuration = SignedDuration::from_hours(24);

/// Counting missed runs stops here, so a minutely schedule and a week of downtime stay cheap.
pub const MAX_COUNTED_MISSED_RUNS: u32 = 1000;

/// A schedule that could not be understood; the message tells the user what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("schedule {expression:?} is not a cron schedule ({detail}); write five fields \"minute hour day-of-month month day-of-week\", e.g. \"30 2 * * *\", or @hourly, @daily, @weekly, @monthly; H picks a time of the plan's own, e.g. \"H H(1-5) * * *\" once a day between 01:00 and 05:59")]
    InvalidSchedule { expression: String, detail: String },
    #[error("time zone {name:?} is not an IANA time zone name; use one such as \"UTC\", \"Europe/Berlin\" or \"America/New_York\"")]
    InvalidTimeZone { name: String },
}

/// A cron schedule in a time zone.
#[derive(Debug, Clone)]
pub struct Schedule {
    expression: String,
    /// The expression with every `H` replaced (the same when it has none).
    resolved: String,
    cron: Cron,
    time_zone: TimeZone,
}

impl Schedule {
    /// Parses five cron fields or an `@` macro, read in the IANA time zone `time_zone`.
    pub fn parse(expression: &str, time_zone: &str) -> Result<Schedule, ScheduleError> {
        let invalid = |detail: String| ScheduleError::InvalidSchedule {
            expression: expression.to_owned(),
            detail,
        };
        let trimmed = expression.trim();
        if !trimmed.starts_with('@') && trimmed.split_whitespace().count() != 5 {
            return Err(invalid(format!(
                "it has {} fields, not 5",
                trimmed.split_whitespace().count()
            )));
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(trimmed)
            .map_err(|error| invalid(error.to_string()))?;
        let zone = TimeZone::get(time_zone).map_err(|_| ScheduleError::InvalidTimeZone {
            name: time_zone.to_owned(),
        })?;
        let schedule = Schedule {
            expression: expression.to_owned(),
            resolved: expression.to_owned(),
            cron,
            time_zone: zone,
        };
        // A pattern such as "0 0 31 2 *" parses but never comes.
        if schedule.next_after(Timestamp::UNIX_EPOCH).is_none() {
            return Err(invalid("it matches no date".into()));
        }
        Ok(schedule)
    }

    /// Parses like [`Schedule::parse`], after replacing every `H` with the value `seed` (the
    /// plan's `namespace/name`) gives it.
    pub fn parse_hashed(
        expression: &str,
        time_zone: &str,
        seed: &str,
    ) -> Result<Schedule, ScheduleError> {
        let written = |detail: String| ScheduleError::InvalidSchedule {
            expression: expression.to_owned(),
            detail,
        };
        let resolved = crate::hashed_schedule::resolve(expression, seed).map_err(written)?;
        let mut schedule = Schedule::parse(&resolved, time_zone).map_err(|error| match error {
            ScheduleError::InvalidSchedule { detail, .. } => written(detail),
            other => other,
        })?;
        schedule.expression = expression.to_owned();
        schedule.resolved = resolved;
        Ok(schedule)
    }

    /// The expression as written.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The expression with every `H` replaced by this plan's value: when it really runs.
    pub fn resolved(&self) -> &str {
        &self.resolved
    }

    /// The time between the next two scheduled times after `after`: the schedule's nominal
    /// interval (for a schedule such as weekdays only, the one that follows `after`).
    pub fn interval_after(&self, after: Timestamp) -> Option<SignedDuration> {
        let next = self.next_after(after)?;
        Some(self.next_after(next)?.duration_since(next))
    }

    /// The first scheduled time strictly after `after`.
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        let zoned = after.to_zoned(self.time_zone.clone());
        self.cron
            .find_next_occurrence(&zoned, false)
            .ok()
            .map(|next: Zoned| next.timestamp())
    }

    /// The last scheduled time at or before `at`.
    pub fn last_at_or_before(&self, at: Timestamp) -> Option<Timestamp> {
        let zoned = at.to_zoned(self.time_zone.clone());
        self.cron
            .find_previous_occurrence(&zoned, true)
            .ok()
            .map(|previous: Zoned| previous.timestamp())
    }
}

/// What the plan's status says about past scheduling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleState {
    /// `status.lastScheduleTime`: the latest scheduled time already acted on.
    pub last_schedule_time: Option<Timestamp>,
    /// When the plan was created: scheduled times before it were never due.
    pub created: Timestamp,
    /// `spec.suspend`.
    pub suspended: bool,
}

/// A run to start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduledRun {
    pub scheduled_time: Timestamp,
    /// [`RunTrigger::Schedule`] when on time, [`RunTrigger::CatchUp`] when late.
    pub trigger: RunTrigger,
}

/// What to do now about the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleDecision {
    /// Start this run now (the caller makes sure no other run of the plan is going).
    pub run: Option<ScheduledRun>,
    /// Scheduled times newly found missed: add them to `status.missedRuns`.
    pub newly_missed: u32,
    /// The new `status.lastScheduleTime`.
    pub last_schedule_time: Option<Timestamp>,
    /// The next scheduled time after now (`status.nextScheduleTime`, and when to wake up);
    /// `None` while suspended.
    pub next_run: Option<Timestamp>,
}

/// Decides whether a scheduled run is due at `now`.
///
/// Of the scheduled times since the last one acted on, only the latest may run: on time when it is
/// at most [`ON_TIME_GRACE`] old, as a catch-up when it is at most `catch_up_window` old, and not
/// at all when older. Every time that did not start on time is counted as missed. While suspended
/// nothing runs and nothing counts as missed.
pub fn decide(
    schedule: &Schedule,
    state: &ScheduleState,
    now: Timestamp,
    catch_up_window: SignedDuration,
) -> ScheduleDecision {
    let since = state.last_schedule_time.unwrap_or(state.created);
    let latest_due = schedule
        .last_at_or_before(now)
        .filter(|&latest| latest > since);
    let next_run = schedule.next_after(now.max(since));

    let Some(latest) = latest_due else {
        return ScheduleDecision {
            run: None,
            newly_missed: 0,
            last_schedule_time: state.last_schedule_time,
            next_run: next_run.filter(|_| !state.suspended),
        };
    };
    if state.suspended {
        return ScheduleDecision {
            run: None,
            newly_missed: 0,
            last_schedule_time: Some(latest),
            next_run: None,
        };
    }

    let due = count_between(schedule, since, latest);
    let late_by = now.duration_since(latest);
    let (run, newly_missed) = if late_by <= ON_TIME_GRACE {
        let run = ScheduledRun {
            scheduled_time: latest,
            trigger: RunTrigger::Schedule,
        };
        (Some(run), due.saturating_sub(1))
    } else if late_by <= catch_up_window {
        let run = ScheduledRun {
            scheduled_time: latest,
            trigger: RunTrigger::CatchUp,
        };
        (Some(run), due)
    } else {
        (None, due)
    };
    ScheduleDecision {
        run,
        newly_missed,
        last_schedule_time: Some(latest),
        next_run,
    }
}

/// How many scheduled times lie in `(after, until]`, at most [`MAX_COUNTED_MISSED_RUNS`].
fn count_between(schedule: &Schedule, after: Timestamp, until: Timestamp) -> u32 {
    let mut count = 0;
    let mut cursor = after;
    while count < MAX_COUNTED_MISSED_RUNS {
        match schedule.next_after(cursor) {
            Some(next) if next <= until => {
                count += 1;
                cursor = next;
            }
            _ => break,
        }
    }
    count
}

/// A duration as the CRD writes it (`12h`, `90m`, `1h30m`, `45s`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a duration; write hours, minutes and seconds such as \"12h\", \"90m\" or \"1h30m\"")]
pub struct DurationError {
    text: String,
}

/// Parses a duration of hours, minutes and seconds, in that order, each at most once.
pub fn parse_duration(text: &str) -> Result<SignedDuration, DurationError> {
    let error = || DurationError {
        text: text.to_owned(),
    };
    let mut total_secs: i64 = 0;
    let mut digits = String::new();
    let mut last_unit_rank = 0;
    for character in text.chars() {
        if character.is_ascii_digit() {
            digits.push(character);
            continue;
        }
        let (rank, unit_secs) = match character {
            'h' => (1, 3600),
            'm' => (2, 60),
            's' => (3, 1),
            _ => return Err(error()),
        };
        if digits.is_empty() || rank <= last_unit_rank {
            return Err(error());
        }
        let value: i64 = digits.parse().map_err(|_| error())?;
        total_secs = value
            .checked_mul(unit_secs)
            .and_then(|secs| total_secs.checked_add(secs))
            .ok_or_else(error)?;
        digits.clear();
        last_unit_rank = rank;
    }
    if !digits.is_empty() || last_unit_rank == 0 {
        return Err(error());
    }
    Ok(SignedDuration::from_secs(total_secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn berlin_daily_0230() -> Schedule {
        Schedule::parse("30 2 * * *", "Europe/Berlin").unwrap()
    }

    #[test]
    fn daily_schedule_runs_at_local_time_in_its_time_zone() {
        let schedule = berlin_daily_0230();
        // Winter: Berlin is UTC+1.
        assert_eq!(
            schedule.next_after(at("2026-01-10T12:00:00Z")),
            Some(at("2026-01-11T01:30:00Z"))
        );
        // Summer: Berlin is UTC+2.
        assert_eq!(
            schedule.next_after(at("2026-07-10T12:00:00Z")),
            Some(at("2026-07-11T00:30:00Z"))
        );
    }

    #[test]
    fn spring_forward_runs_the_skipped_time_at_the_first_instant_after_the_gap() {
        // 2026-03-29 in Berlin: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist that day.
        let schedule = berlin_daily_0230();
        let before = at("2026-03-28T12:00:00Z");
        let skipped_day = schedule.next_after(before).unwrap();
        assert_eq!(skipped_day, at("2026-03-29T01:00:00Z"), "03:00 CEST");
        // The next day is back at 02:30 local (CEST, UTC+2).
        assert_eq!(
            schedule.next_after(skipped_day),
            Some(at("2026-03-30T00:30:00Z"))
        );
    }

    #[test]
    fn fall_back_runs_the_repeated_time_once() {
        // 2026-10-25 in Berlin: 03:00 CEST goes back to 02:00 CET; 02:30 happens twice.
        let schedule = berlin_daily_0230();
        let first = schedule.next_after(at("2026-10-24T12:00:00Z")).unwrap();
        assert_eq!(
            first,
            at("2026-10-25T00:30:00Z"),
            "02:30 CEST, the first one"
        );
        let second = schedule.next_after(first).unwrap();
        assert_eq!(
            second,
            at("2026-10-26T01:30:00Z"),
            "the next day, 02:30 CET"
        );
    }

    #[test]
    fn hourly_schedule_runs_through_both_halves_of_a_repeated_hour() {
        let schedule = Schedule::parse("@hourly", "Europe/Berlin").unwrap();
        let mut runs = Vec::new();
        let mut cursor = at("2026-10-24T23:30:00Z");
        for _ in 0..4 {
            cursor = schedule.next_after(cursor).unwrap();
            runs.push(cursor);
        }
        // 02:00 CEST, 02:00 CET, 03:00 CET: hourly in absolute time, nothing skipped or doubled.
        assert_eq!(
            runs,
            [
                at("2026-10-25T00:00:00Z"),
                at("2026-10-25T01:00:00Z"),
                at("2026-10-25T02:00:00Z"),
                at("2026-10-25T03:00:00Z"),
            ]
        );
    }

    #[test]
    fn macros_and_named_fields_are_accepted() {
        for expression in [
            "@hourly",
            "@daily",
            "@weekly",
            "@monthly",
            "0 3 * * SUN",
            "*/15 * * * 1-5",
        ] {
            assert!(Schedule::parse(expression, "UTC").is_ok(), "{expression}");
        }
        let weekly = Schedule::parse("@weekly", "UTC").unwrap();
        // 2026-11-30 is a Monday; @weekly is Sunday midnight.
        assert_eq!(
            weekly.next_after(at("2026-11-30T10:00:00Z")),
            Some(at("2026-12-06T00:00:00Z"))
        );
    }

    #[test]
    fn invalid_schedules_say_what_to_write() {
        for expression in [
            "",
            "* * * *",
            "0 0 * * * *",
            "61 * * * *",
            "0 25 * * *",
            "every day",
            "0 0 31 2 *",
        ] {
            let error = Schedule::parse(expression, "UTC").unwrap_err();
            assert!(
                matches!(error, ScheduleError::InvalidSchedule { .. }),
                "{expression}: {error:?}"
            );
            assert!(error.to_string().contains("30 2 * * *"), "{error}");
        }
    }

    #[test]
    fn unknown_time_zone_is_an_error_naming_it() {
        let error = Schedule::parse("@daily", "Europe/Atlantis").unwrap_err();
        assert_eq!(
            error,
            ScheduleError::InvalidTimeZone {
                name: "Europe/Atlantis".into()
            }
        );
        assert!(error.to_string().contains("Europe/Berlin"));
    }

    fn state(last: Option<&str>) -> ScheduleState {
        ScheduleState {
            last_schedule_time: last.map(at),
            created: at("2026-01-01T00:00:00Z"),
            suspended: false,
        }
    }

    #[test]
    fn nothing_is_due_before_the_first_scheduled_time_after_creation() {
        let schedule = Schedule::parse("30 2 * * *", "UTC").unwrap();
        let decision = decide(
            &schedule,
            &state(None),
            at("2026-01-01T01:00:00Z"),
            DEFAULT_CATCH_UP_WINDOW,
        );
        assert_eq!(decision.run, None);
        assert_eq!(decision.newly_missed, 0);
        assert_eq!(decision.next_run, Some(at("2026-01-01T02:30:00Z")));
        assert_eq!(decision.last_schedule_time, None);
    }

    #[test]
    fn a_run_on_time_is_started_and_not_counted_as_missed() {
        let schedule = Schedule::parse("30 2 * * *", "UTC").unwrap();
        let now = at("2026-01-02T02:30:01Z");
        let decision = decide(
            &schedule,
            &state(Some("2026-01-01T02:30:00Z")),
            now,
            DEFAULT_CATCH_UP_WINDOW,
        );
        assert_eq!(
            decision.run,
            Some(ScheduledRun {
                scheduled_time: at("2026-01-02T02:30:00Z"),
                trigger: RunTrigger::Schedule
            })
        );
        assert_eq!(decision.newly_missed, 0);
        assert_eq!(
            decision.last_schedule_time,
            Some(at("2026-01-02T02:30:00Z"))
        );
        assert_eq!(decision.next_run, Some(at("2026-01-03T02:30:00Z")));
    }

    #[test]
    fn runs_missed_while_down_catch_up_once_and_are_counted() {
        // Down from before the 2nd until the 4th, 09:00: the 2nd, 3rd and 4th were missed.
        let schedule = Schedule::parse("30 2 * * *", "UTC").unwrap();
        let now = at("2026-01-04T09:00:00Z");
        let decision = decide(
            &schedule,
            &state(Some("2026-01-01T02:30:00Z")),
            now,
            DEFAULT_CATCH_UP_WINDOW,
        );
        assert_eq!(
            decision.run,
            Some(ScheduledRun {
                scheduled_time: at("2026-01-04T02:30:00Z"),
                trigger: RunTrigger::CatchUp
            })
        );
        assert_eq!(decision.newly_missed, 3);
        assert_eq!(
            decision.last_schedule_time,
            Some(at("2026-01-04T02:30:00Z"))
        );
        // Acting on the decision does not run it again.
        let again = decide(
            &schedule,
            &state(Some("2026-01-04T02:30:00Z")),
            now,
            DEFAULT_CATCH_UP_WINDOW,
        );
        assert_eq!(again.run, None);
        assert_eq!(again.newly_missed, 0);
    }

    #[test]
    fn a_run_missed_longer_ago_than_the_window_is_counted_but_not_run() {
        let schedule = Schedule::parse("0 0 * * 0", "UTC").unwrap(); // Sundays
        let now = at("2026-01-06T12:00:00Z"); // Tuesday; Sunday the 4th was missed.
        let decision = decide(
            &schedule,
            &state(Some("2025-12-28T00:00:00Z")),
            now,
            SignedDuration::from_hours(6),
        );
        assert_eq!(decision.run, None);
        assert_eq!(decision.newly_missed, 1);
        assert_eq!(
            decision.last_schedule_time,
            Some(at("2026-01-04T00:00:00Z"))
        );
        assert_eq!(decision.next_run, Some(at("2026-01-11T00:00:00Z")));
    }

    #[test]
    fn counting_missed_runs_is_bounded() {
        let schedule = Schedule::parse("* * * * *", "UTC").unwrap();
        let decision = decide(
            &schedule,
            &state(Some("2026-01-01T00:00:00Z")),
            at("2026-01-08T00:00:30Z"),
            DEFAULT_CATCH_UP_WINDOW,
        );
        assert_eq!(decision.newly_missed, MAX_COUNTED_MISSED_RUNS - 1);
        assert_eq!(
            decision.run.map(|run| run.trigger),
            Some(RunTrigger::Schedule)
        );
    }

    #[test]
    fn a_suspended_plan_neither_runs_nor_counts_missed_runs() {
        let schedule = Schedule::parse("30 2 * * *", "UTC").unwrap();
        let mut suspended = state(Some("2026-01-01T02:30:00Z"));
        suspended.suspended = true;
        let decision = decide(
            &schedule,
            &suspended,
            at("2026-01-05T03:00:00Z"),
            DEFAULT_CATCH_UP_WINDOW,
        );
        assert_eq!(decision.run, None);
        assert_eq!(decision.newly_missed, 0);
        assert_eq!(decision.next_run, None);
        // The cursor moves on, so resuming does not count the suspended days as missed.
        assert_eq!(
            decision.last_schedule_time,
            Some(at("2026-01-05T02:30:00Z"))
        );
    }

    #[test]
    fn catch_up_across_a_dst_change_uses_local_times() {
        let schedule = berlin_daily_0230();
        // Down over the spring-forward night; back at 05:00 CEST on the 29th.
        let decision = decide(
            &schedule,
            &state(Some("2026-03-28T01:30:00Z")),
            at("2026-03-29T03:00:00Z"),
            DEFAULT_CATCH_UP_WINDOW,
        );
        assert_eq!(
            decision.run,
            Some(ScheduledRun {
                scheduled_time: at("2026-03-29T01:00:00Z"),
                trigger: RunTrigger::CatchUp
            })
        );
        assert_eq!(decision.newly_missed, 1);
    }

    #[test]
    fn durations_parse_hours_minutes_and_seconds() {
        assert_eq!(parse_duration("12h"), Ok(SignedDuration::from_hours(12)));
        assert_eq!(parse_duration("90m"), Ok(SignedDuration::from_mins(90)));
        assert_eq!(
            parse_duration("1h30m15s"),
            Ok(SignedDuration::from_secs(5415))
        );
        for bad in ["", "h", "12", "1m1h", "1h1h", "1.5h", "12 h", "1d", "-1h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert!(parse_duration("99999999999999999999h").is_err());
    }
}
