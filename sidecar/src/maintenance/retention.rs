//! Retention: which snapshots of one group a keep policy keeps, and why — restic's rules.
//!
//! The counted rules (`last`, `hourly` … `yearly`) walk the snapshots newest first and keep the
//! newest of each period until their count is used; a rule with count left when it reaches the
//! oldest snapshot keeps that one too (the longest history the count allows). `within` keeps
//! everything newer than a span before the group's newest snapshot; `within-daily` and the like
//! keep the newest of each period inside such a span; `keep_tags` keeps what carries a tag list.
//! A snapshot kept by any rule stays. Periods are those of the time as the snapshot records it
//! (its own UTC offset), as in restic.

use crate::format::snapshot::Snapshot;
use crate::ids::SnapshotId;
use crate::selection::filter::{has_any_tag_list, TagList};
use chrono::{DateTime, Datelike, FixedOffset, NaiveDate, Timelike, Utc};

/// A count that keeps every period: `--keep-daily unlimited`.
pub const UNLIMITED: u32 = u32::MAX;

/// restic's calendar span `1y2m3d4h`: years, months, days and hours (`m` is months).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CalendarSpan {
    /// Whole years, months, days and hours, each counted on the calendar.
    pub years: u32,
    pub months: u32,
    pub days: u32,
    pub hours: u32,
}

impl std::str::FromStr for CalendarSpan {
    type Err = String;

    fn from_str(text: &str) -> Result<CalendarSpan, String> {
        let example = "such as 1y5m7d2h (years, months, days, hours)";
        let mut span = CalendarSpan::default();
        let mut number = String::new();
        let text = text.trim();
        if text.is_empty() {
            return Err(format!("an empty span: give one {example}"));
        }
        for c in text.chars() {
            if c.is_ascii_digit() {
                number.push(c);
                continue;
            }
            let value: u32 = number
                .parse()
                .map_err(|_| format!("{text:?} is not a span {example}: no number before {c:?}"))?;
            // As in restic, a unit given twice takes the last value.
            match c {
                'y' => span.years = value,
                'm' => span.months = value,
                'd' => span.days = value,
                'h' => span.hours = value,
                _ => {
                    return Err(format!(
                        "{text:?} is not a span {example}: unknown unit {c:?}"
                    ))
                }
            }
            number.clear();
        }
        if !number.is_empty() {
            return Err(format!(
                "{text:?} is not a span {example}: no unit after {number}"
            ));
        }
        Ok(span)
    }
}

impl std::fmt::Display for CalendarSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts = [
            (self.years, 'y'),
            (self.months, 'm'),
            (self.days, 'd'),
            (self.hours, 'h'),
        ];
        for (value, unit) in parts.iter().filter(|(value, _)| *value > 0) {
            write!(f, "{value}{unit}")?;
        }
        if self.is_zero() {
            write!(f, "0h")?;
        }
        Ok(())
    }
}

impl CalendarSpan {
    /// Whether the span is empty (such a `--keep-within` keeps nothing, as in restic).
    pub fn is_zero(&self) -> bool {
        *self == CalendarSpan::default()
    }

    /// The time this span before `time`, on the calendar of `time`'s offset. Months and days
    /// overflow into the next as Go's `AddDate` does (1 month before 31 March is 3 March, or 2
    /// in a leap year), so the cut is restic's to the second.
    pub fn before(&self, time: DateTime<FixedOffset>) -> DateTime<FixedOffset> {
        let local = time.naive_local();
        let months = i64::from(local.year()) * 12 + i64::from(local.month0())
            - i64::from(self.years) * 12
            - i64::from(self.months);
        let first = NaiveDate::from_ymd_opt(
            months.div_euclid(12) as i32,
            months.rem_euclid(12) as u32 + 1,
            1,
        );
        let day_offset = i64::from(local.day()) - 1 - i64::from(self.days);
        let shifted = first
            .and_then(|first| first.checked_add_signed(chrono::Duration::days(day_offset)))
            .map(|date| {
                date.and_time(local.time()) - chrono::Duration::hours(i64::from(self.hours))
            });
        shifted
            .and_then(|naive| naive.and_local_timezone(*time.offset()).single())
            .unwrap_or(DateTime::<Utc>::MIN_UTC.fixed_offset())
    }
}

/// What to keep: the counts (0 disables a rule, [`UNLIMITED`] keeps every period), the spans
/// and the tag lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeepPolicy {
    /// Keep the newest N snapshots.
    pub last: u32,
    /// Keep the newest snapshot of each of the last N hours that have one.
    pub hourly: u32,
    /// … of each of the last N days.
    pub daily: u32,
    /// … of each of the last N ISO weeks.
    pub weekly: u32,
    /// … of each of the last N months.
    pub monthly: u32,
    /// … of each of the last N years.
    pub yearly: u32,
    /// Keep every snapshot newer than this span before the group's newest.
    pub within: Option<CalendarSpan>,
    /// Within this span before the group's newest snapshot, keep the newest of each hour.
    pub within_hourly: Option<CalendarSpan>,
    /// … of each day.
    pub within_daily: Option<CalendarSpan>,
    /// … of each ISO week.
    pub within_weekly: Option<CalendarSpan>,
    /// … of each month.
    pub within_monthly: Option<CalendarSpan>,
    /// … of each year.
    pub within_yearly: Option<CalendarSpan>,
    /// Keep every snapshot that has all tags of one of these lists.
    pub tags: Vec<TagList>,
}

impl KeepPolicy {
    /// Whether no rule is given (a forget by policy then refuses to run).
    pub fn is_empty(&self) -> bool {
        let spans = [
            self.within,
            self.within_hourly,
            self.within_daily,
            self.within_weekly,
            self.within_monthly,
            self.within_yearly,
        ];
        [
            self.last,
            self.hourly,
            self.daily,
            self.weekly,
            self.monthly,
            self.yearly,
        ]
        .iter()
        .all(|count| *count == 0)
            && spans.iter().all(|span| span.is_none_or(|s| s.is_zero()))
            && self.tags.is_empty()
    }
}

/// The verdict on one snapshot.
#[derive(Debug, Clone)]
pub struct Verdict {
    pub id: SnapshotId,
    /// The time the snapshot records, in UTC.
    pub time: DateTime<Utc>,
    pub snapshot: Snapshot,
    /// Whether any rule keeps it (else it is removed).
    pub keep: bool,
    /// The rules that keep it, e.g. `daily 2026-11-30`, `within 7d`, `tags a,b`.
    pub reasons: Vec<String>,
}

/// The periods rules count in.
#[derive(Debug, Clone, Copy)]
enum Period {
    /// Every snapshot its own period.
    Snapshot,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Period {
    fn name(self) -> &'static str {
        match self {
            Period::Snapshot => "last",
            Period::Hour => "hourly",
            Period::Day => "daily",
            Period::Week => "weekly",
            Period::Month => "monthly",
            Period::Year => "yearly",
        }
    }

    /// The period `time` falls in; `position` is the snapshot's place, newest first.
    fn of(self, time: &DateTime<FixedOffset>, position: usize) -> String {
        match self {
            Period::Snapshot => position.to_string(),
            Period::Hour => format!("{} {:02}:00", time.format("%Y-%m-%d"), time.hour()),
            Period::Day => time.format("%Y-%m-%d").to_string(),
            Period::Week => {
                let week = time.iso_week();
                format!("{}-W{:02}", week.year(), week.week())
            }
            Period::Month => format!("{}-{:02}", time.year(), time.month()),
            Period::Year => time.year().to_string(),
        }
    }

    /// How a kept snapshot names this rule.
    fn reason(self, period: &str) -> String {
        match self {
            Period::Snapshot => "last".into(),
            _ => format!("{} {period}", self.name()),
        }
    }
}

/// A counted rule as it walks the snapshots.
struct CountedRule {
    period: Period,
    remaining: u32,
    last_kept: Option<String>,
}

/// A rule within a span as it walks the snapshots.
struct SpanRule {
    period: Period,
    span: CalendarSpan,
    cut: DateTime<FixedOffset>,
    last_kept: Option<String>,
}

fn recorded_time(snapshot: &Snapshot) -> DateTime<FixedOffset> {
    DateTime::parse_from_rfc3339(&snapshot.time).unwrap_or(DateTime::<Utc>::MIN_UTC.fixed_offset())
}

/// Applies `policy` to one group of snapshots; the verdicts come newest first.
pub fn apply_policy(snapshots: &[(SnapshotId, Snapshot)], policy: &KeepPolicy) -> Vec<Verdict> {
    let mut walk: Vec<(DateTime<FixedOffset>, &SnapshotId, &Snapshot)> = snapshots
        .iter()
        .map(|(id, snapshot)| (recorded_time(snapshot), id, snapshot))
        .collect();
    walk.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(a.1)));
    let Some(newest) = walk.first().map(|(time, _, _)| *time) else {
        return Vec::new();
    };
    let counts = [
        (Period::Snapshot, policy.last),
        (Period::Hour, policy.hourly),
        (Period::Day, policy.daily),
        (Period::Week, policy.weekly),
        (Period::Month, policy.monthly),
        (Period::Year, policy.yearly),
    ];
    let mut counted: Vec<CountedRule> = counts
        .into_iter()
        .filter(|(_, count)| *count > 0)
        .map(|(period, remaining)| CountedRule {
            period,
            remaining,
            last_kept: None,
        })
        .collect();
    let spans = [
        (Period::Hour, policy.within_hourly),
        (Period::Day, policy.within_daily),
        (Period::Week, policy.within_weekly),
        (Period::Month, policy.within_monthly),
        (Period::Year, policy.within_yearly),
    ];
    let mut within: Vec<SpanRule> = spans
        .into_iter()
        .filter_map(|(period, span)| span.filter(|s| !s.is_zero()).map(|span| (period, span)))
        .map(|(period, span)| SpanRule {
            period,
            span,
            cut: span.before(newest),
            last_kept: None,
        })
        .collect();
    let within_all = policy.within.filter(|span| !span.is_zero());
    let oldest_position = walk.len() - 1;
    let mut verdicts = Vec::with_capacity(walk.len());
    for (position, (time, id, snapshot)) in walk.into_iter().enumerate() {
        let mut reasons = Vec::new();
        if !policy.tags.is_empty() && has_any_tag_list(snapshot, &policy.tags) {
            reasons.push(format!("tags {}", snapshot.tags.join(",")));
        }
        if let Some(span) = within_all.filter(|span| time > span.before(newest)) {
            reasons.push(format!("within {span}"));
        }
        let oldest = position == oldest_position;
        for rule in counted.iter_mut().filter(|rule| rule.remaining > 0) {
            let period = rule.period.of(&time, position);
            if oldest || rule.last_kept.as_deref() != Some(period.as_str()) {
                reasons.push(rule.period.reason(&period));
                rule.remaining -= 1;
                rule.last_kept = Some(period);
            }
        }
        for rule in within.iter_mut().filter(|rule| time > rule.cut) {
            let period = rule.period.of(&time, position);
            if oldest || rule.last_kept.as_deref() != Some(period.as_str()) {
                reasons.push(format!(
                    "{} within {}",
                    rule.period.reason(&period),
                    rule.span
                ));
                rule.last_kept = Some(period);
            }
        }
        verdicts.push(Verdict {
            id: *id,
            time: time.with_timezone(&Utc),
            snapshot: snapshot.clone(),
            keep: !reasons.is_empty(),
            reasons,
        });
    }
    verdicts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::snapshot::SnapshotSummary;
    use crate::ids::{BlobId, SnapshotId};

    fn snapshot_at(time: DateTime<Utc>, n: u8) -> (SnapshotId, Snapshot) {
        let snapshot = Snapshot {
            time: time.to_rfc3339(),
            hostname: "h".into(),
            username: "u".into(),
            paths: vec![],
            tags: vec![],
            tree: BlobId::from_bytes([0; 32]),
            parent: None,
            original: None,
            summary: SnapshotSummary::default(),
            program_version: "test".into(),
            sources: Default::default(),
            unknown: Default::default(),
        };
        let mut id = [0u8; 32];
        id[..8].copy_from_slice(&time.timestamp().to_le_bytes());
        id[8] = n;
        (SnapshotId::from_bytes(id), snapshot)
    }

    #[test]
    fn a_year_of_nightly_backups_keeps_7_daily_4_weekly_12_monthly() {
        let start = DateTime::parse_from_rfc3339("2025-12-01T02:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let snapshots: Vec<_> = (0..365)
            .map(|day| snapshot_at(start + chrono::Duration::days(day), 0))
            .collect();
        let policy = KeepPolicy {
            daily: 7,
            weekly: 4,
            monthly: 12,
            ..Default::default()
        };
        let verdicts = apply_policy(&snapshots, &policy);
        let kept: Vec<String> = verdicts
            .iter()
            .filter(|v| v.keep)
            .map(|v| v.time.format("%Y-%m-%d").to_string())
            .collect();
        // The newest is 2026-11-30 (a Monday). 7 days: 11-24..11-30. Weekly (ISO weeks, newest per
        // week = Sunday): 11-30 is week 49's first day; then 11-29, 11-22, 11-15. Monthly: the last
        // day of each of the 12 most recent months.
        assert_eq!(
            kept,
            [
                "2026-11-30",
                "2026-11-29",
                "2026-11-28",
                "2026-11-27",
                "2026-11-26",
                "2026-11-25",
                "2026-11-24",
                "2026-11-22",
                "2026-11-15",
                "2026-10-31",
                "2026-09-30",
                "2026-08-31",
                "2026-07-31",
                "2026-06-30",
                "2026-05-31",
                "2026-04-30",
                "2026-03-31",
                "2026-02-28",
                "2026-01-31",
                "2025-12-31",
            ]
        );
        assert_eq!(verdicts.iter().filter(|v| !v.keep).count(), 365 - 20);
        let newest = &verdicts[0];
        assert_eq!(
            newest.reasons,
            ["daily 2026-11-30", "weekly 2026-W49", "monthly 2026-11"]
        );
    }

    #[test]
    fn keep_last_counts_snapshots_and_an_empty_policy_keeps_nothing() {
        let start = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let snapshots: Vec<_> = (0..5)
            .map(|i| snapshot_at(start + chrono::Duration::minutes(i), i as u8))
            .collect();
        let verdicts = apply_policy(
            &snapshots,
            &KeepPolicy {
                last: 2,
                ..Default::default()
            },
        );
        assert_eq!(verdicts.iter().filter(|v| v.keep).count(), 2);
        assert!(verdicts[0].keep && verdicts[1].keep && !verdicts[2].keep);
        assert!(apply_policy(&snapshots, &KeepPolicy::default())
            .iter()
            .all(|v| !v.keep));
    }

    #[test]
    fn a_span_steps_back_on_the_calendar_as_go_does() {
        let span: CalendarSpan = "1m".parse().unwrap();
        let march_31 = DateTime::parse_from_rfc3339("2026-03-31T10:00:00+02:00").unwrap();
        // 31 February does not exist: Go (and restic) land on 3 March.
        assert_eq!(
            span.before(march_31).to_rfc3339(),
            "2026-03-03T10:00:00+02:00"
        );
        let span: CalendarSpan = "1y2m3d4h".parse().unwrap();
        assert_eq!(span.to_string(), "1y2m3d4h");
        let time = DateTime::parse_from_rfc3339("2026-01-02T03:00:00Z").unwrap();
        assert_eq!(span.before(time).to_rfc3339(), "2024-10-29T23:00:00+00:00");
        assert!("7".parse::<CalendarSpan>().unwrap_err().contains("no unit"));
        assert!("7w"
            .parse::<CalendarSpan>()
            .unwrap_err()
            .contains("unknown unit"));
        assert!("".parse::<CalendarSpan>().is_err());
    }

    #[test]
    fn a_count_left_over_keeps_the_oldest_snapshot_too() {
        let start = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let snapshots: Vec<_> = (0..3)
            .map(|i| snapshot_at(start + chrono::Duration::minutes(i), i as u8))
            .collect();
        let verdicts = apply_policy(
            &snapshots,
            &KeepPolicy {
                daily: 5,
                ..Default::default()
            },
        );
        let kept: Vec<bool> = verdicts.iter().map(|v| v.keep).collect();
        assert_eq!(kept, [true, false, true]);
    }
}
