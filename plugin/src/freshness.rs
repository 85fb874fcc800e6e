//! Whether the snapshot `latest` found is older than the plan's last successful backup: a gate
//! can withhold the newest snapshots from its listing (it cannot forge them), and then `latest`
//! quietly means an older one.

use jiff::Timestamp;
use neverwiped_api::BackupPlan;

/// The plan's last successful backup, as its status records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastSuccess {
    /// The snapshot it wrote.
    pub snapshot_id: String,
    /// When its run started (its snapshot is taken after that).
    pub started: Timestamp,
}

/// The newest successful run of the plan's history that wrote a snapshot.
pub fn last_success(plan: &BackupPlan) -> Option<LastSuccess> {
    let history = &plan.status.as_ref()?.history;
    history
        .iter()
        .filter(|run| run.result.is_success())
        .filter_map(|run| {
            Some(LastSuccess {
                snapshot_id: run.snapshot_id.clone()?,
                started: run.start_time.as_ref()?.0,
            })
        })
        .max_by_key(|last| last.started)
}

/// A warning when the snapshot `found_id` taken at `found_time` (restic's RFC 3339 text) is
/// older than `last`, the plan's last successful backup.
pub fn older_than_last_success(
    found_id: &str,
    found_time: &str,
    last: &LastSuccess,
) -> Option<String> {
    let same = found_id.starts_with(&last.snapshot_id) || last.snapshot_id.starts_with(found_id);
    let taken: Timestamp = found_time.parse().ok()?;
    if same || taken >= last.started {
        return None;
    }
    // The last success's id is status text, which anyone who may write status may set.
    let short = |id: &str| {
        let id: String = id.chars().take(8).collect();
        crate::runs::status_text(&id).into_owned()
    };
    Some(format!(
        "latest is snapshot {} taken {taken}, older than the plan's last successful backup (snapshot {}, started {}): the gate does not list its newest snapshots",
        short(found_id),
        short(&last.snapshot_id),
        last.started
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> LastSuccess {
        LastSuccess {
            snapshot_id: "bbbb2222ffff".into(),
            started: "2026-12-01T02:30:00Z".parse().unwrap(),
        }
    }

    #[test]
    fn an_older_latest_is_named_with_both_snapshots() {
        let warning = older_than_last_success(
            "aaaa1111eeee",
            "2026-11-30T02:30:05.123456789+01:00",
            &last(),
        )
        .expect("a warning");
        assert!(
            warning.contains("aaaa1111") && warning.contains("bbbb2222"),
            "{warning}"
        );
    }

    #[test]
    fn the_last_success_itself_or_a_newer_snapshot_is_no_warning() {
        assert_eq!(
            older_than_last_success("bbbb2222ffff", "2026-12-01T02:30:05Z", &last()),
            None
        );
        assert_eq!(
            older_than_last_success("cccc3333", "2026-12-02T02:30:05.5Z", &last()),
            None
        );
    }
}
