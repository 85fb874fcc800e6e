//! Retention: which snapshots a keep policy keeps, and why.
//!
//! Rules count distinct periods, newest first, like restic's: `keepDaily: 7` keeps the newest
//! snapshot of each of the 7 most recent days that have one. A snapshot kept by any rule stays.
//! Periods are computed in UTC.

use crate::backend::ObjectKind;
use crate::error::{Error, Result};
use crate::format::snapshot::Snapshot;
use crate::ids::SnapshotId;
use crate::repository::Repository;
use chrono::{DateTime, Datelike, Utc};
use std::collections::BTreeMap;

/// How many snapshots (or periods) to keep per rule; 0 disables a rule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeepPolicy {
    pub last: u32,
    pub hourly: u32,
    pub daily: u32,
    pub weekly: u32,
    pub monthly: u32,
    pub yearly: u32,
}

impl KeepPolicy {
    pub fn is_empty(&self) -> bool {
        *self == KeepPolicy::default()
    }
}

/// The verdict on one snapshot.
#[derive(Debug, Clone)]
pub struct Verdict {
    pub id: SnapshotId,
    pub time: DateTime<Utc>,
    pub keep: bool,
    /// The rules that keep it, e.g. `daily 2026-11-30`.
    pub reasons: Vec<String>,
}

fn parse_time(snapshot: &Snapshot) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(&snapshot.time)
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// Applies `policy` to one group of snapshots (e.g. one plan's); the verdicts come newest first.
pub fn apply_policy(snapshots: &[(SnapshotId, Snapshot)], policy: &KeepPolicy) -> Vec<Verdict> {
    let mut verdicts: Vec<Verdict> = snapshots
        .iter()
        .map(|(id, snapshot)| Verdict {
            id: *id,
            time: parse_time(snapshot),
            keep: false,
            reasons: Vec::new(),
        })
        .collect();
    verdicts.sort_by(|a, b| b.time.cmp(&a.time).then(b.id.cmp(&a.id)));
    type Period = fn(&DateTime<Utc>) -> String;
    let rules: [(&str, u32, Period); 6] = [
        ("last", policy.last, |_| String::new()),
        ("hourly", policy.hourly, |t| {
            t.format("%Y-%m-%d %H:00").to_string()
        }),
        ("daily", policy.daily, |t| t.format("%Y-%m-%d").to_string()),
        ("weekly", policy.weekly, |t| {
            format!("{}-W{:02}", t.iso_week().year(), t.iso_week().week())
        }),
        ("monthly", policy.monthly, |t| {
            format!("{}-{:02}", t.year(), t.month())
        }),
        ("yearly", policy.yearly, |t| t.year().to_string()),
    ];
    for (name, count, period) in rules {
        let mut remaining = count;
        let mut last_period: Option<String> = None;
        for verdict in verdicts.iter_mut() {
            if remaining == 0 {
                break;
            }
            let this_period = period(&verdict.time);
            // "last" counts snapshots, not periods: every one is its own period.
            if name != "last" && last_period.as_deref() == Some(this_period.as_str()) {
                continue;
            }
            verdict.keep = true;
            verdict.reasons.push(if name == "last" {
                "last".into()
            } else {
                format!("{name} {this_period}")
            });
            remaining -= 1;
            last_period = Some(this_period);
        }
    }
    verdicts
}

/// A group of snapshots: their host and their paths.
type GroupKey = (String, Vec<String>);

/// The snapshots of one host and set of paths (one plan's, or one source's), with verdicts.
#[derive(Debug)]
pub struct ForgetGroup {
    pub hostname: String,
    pub paths: Vec<String>,
    pub verdicts: Vec<Verdict>,
}

/// Applies `policy` to each group of snapshots (same host and paths), optionally only those of
/// `host`, and removes the snapshots it does not keep unless `dry_run`. Their data stays until
/// `prune`.
pub async fn forget(
    repo: &Repository,
    policy: &KeepPolicy,
    host: Option<&str>,
    dry_run: bool,
) -> Result<Vec<ForgetGroup>> {
    if policy.is_empty() {
        return Err(Error::NoKeepRule);
    }
    let mut groups: BTreeMap<GroupKey, Vec<(SnapshotId, Snapshot)>> = BTreeMap::new();
    for (id, snapshot) in repo.snapshots().await? {
        if host.is_some_and(|host| host != snapshot.hostname) {
            continue;
        }
        let paths = snapshot.paths.iter().map(|p| p.display()).collect();
        groups
            .entry((snapshot.hostname.clone(), paths))
            .or_default()
            .push((id, snapshot));
    }
    let mut result = Vec::new();
    for ((hostname, paths), snapshots) in groups {
        let verdicts = apply_policy(&snapshots, policy);
        if !dry_run {
            for verdict in verdicts.iter().filter(|v| !v.keep) {
                repo.backend()
                    .delete(ObjectKind::Snapshots, &verdict.id.to_hex())
                    .await?;
            }
        }
        result.push(ForgetGroup {
            hostname,
            paths,
            verdicts,
        });
    }
    Ok(result)
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
            summary: SnapshotSummary::default(),
            program_version: "test".into(),
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
}
