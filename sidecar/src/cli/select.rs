//! Which snapshot a command means: `latest` (with `--host`/`--before`) or an id prefix, and
//! which of its entries `ls PATH` means.

use super::args::RestoreArgs;
use anyhow::{bail, Result};
use neverwiped::format::snapshot::Snapshot;
use neverwiped::ids::SnapshotId;
use neverwiped::repository::{Repository, SnapshotFilter};

/// An id prefix as ids are stored (lower-case hex); `latest` and anything else as given.
pub fn snapshot_spec(text: &str) -> String {
    if !text.is_empty() && text.chars().all(|c| c.is_ascii_hexdigit()) {
        text.to_ascii_lowercase()
    } else {
        text.to_owned()
    }
}

/// Finds a snapshot by `latest` or id prefix (any case).
pub async fn find(repo: &Repository, spec: &str) -> Result<(SnapshotId, Snapshot)> {
    Ok(repo.find_snapshot(&snapshot_spec(spec)).await?)
}

/// The snapshot a restore means. `--host` and `--before` choose among snapshots for `latest`; an
/// id that names a snapshot they rule out is refused rather than silently restored.
pub async fn for_restore(repo: &Repository, args: &RestoreArgs) -> Result<(SnapshotId, Snapshot)> {
    let filter = SnapshotFilter {
        host: args.host.clone(),
        before: args.before,
    };
    let spec = snapshot_spec(&args.snapshot);
    let (id, snapshot) = repo.find_snapshot_where(&spec, &filter).await?;
    if spec == "latest" {
        return Ok((id, snapshot));
    }
    if let Some(host) = args.host.as_deref().filter(|h| *h != snapshot.hostname) {
        bail!(
            "snapshot {} is of host {}, not of --host {host}: give a snapshot of {host}, or `latest --host {host}`",
            id.short(),
            snapshot.hostname
        );
    }
    if let Some(before) = args.before {
        let taken = chrono::DateTime::parse_from_rfc3339(&snapshot.time)
            .map(|time| time.with_timezone(&chrono::Utc));
        if taken.map_or(true, |time| time >= before) {
            bail!(
                "snapshot {} was taken at {}, not before --before {}",
                id.short(),
                snapshot.time,
                before.to_rfc3339()
            );
        }
    }
    Ok((id, snapshot))
}

/// Whether the snapshot path `entry` (as `ls` shows it, `/a/b`) is `path` or below it.
pub fn is_at_or_below(entry: &str, path: &str) -> bool {
    let path = path.trim_end_matches('/');
    if path.is_empty() {
        return true;
    }
    entry == path
        || entry
            .strip_prefix(path)
            .is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_prefixes_are_matched_in_lower_case_and_latest_is_kept() {
        assert_eq!(snapshot_spec("AB12cd"), "ab12cd");
        assert_eq!(snapshot_spec("latest"), "latest");
        assert_eq!(snapshot_spec("LATEST"), "LATEST");
    }

    #[test]
    fn ls_paths_match_whole_components() {
        assert!(is_at_or_below("/data/app", "/data/app"));
        assert!(is_at_or_below("/data/app/x", "/data/app/"));
        assert!(!is_at_or_below("/data", "/data/app"));
        assert!(!is_at_or_below("/data/apple", "/data/app"));
        assert!(is_at_or_below("/data", "/"));
    }
}
