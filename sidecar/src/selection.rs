//! Which snapshot a command means — `latest` (among those of a host, taken before a time) or an
//! id prefix — and which of its entries a path means; and the list of a host's snapshots that a
//! run reports. Shared by the CLI and the kubectl plugin, so both pick the same snapshot.

pub mod filter;

pub use filter::{GroupBy, GroupKey, SnapshotMatch};

use crate::error::{Error, Result};
use crate::format::snapshot::Snapshot;
use crate::ids::SnapshotId;
use crate::repository::{Repository, SnapshotFilter};
use neverwiped_contract::{HostSnapshots, SnapshotEntry, HOST_SNAPSHOTS_LISTED};

/// An id prefix as ids are stored (lower-case hex); `latest` and anything else as given.
pub fn snapshot_spec(text: &str) -> String {
    if !text.is_empty() && text.chars().all(|c| c.is_ascii_hexdigit()) {
        text.to_ascii_lowercase()
    } else {
        text.to_owned()
    }
}

/// Why no snapshot could be chosen.
#[derive(Debug, thiserror::Error)]
pub enum SelectionError {
    #[error(transparent)]
    Repository(#[from] Error),
    /// An id was given that names a snapshot of another host.
    #[error("snapshot {id} is of host {found}, not of {wanted}")]
    OtherHost {
        id: String,
        found: String,
        wanted: String,
    },
    /// An id was given that names a snapshot taken at or after the time asked for.
    #[error("snapshot {id} was taken at {taken}, not before {before}")]
    NotBefore {
        id: String,
        taken: String,
        before: String,
    },
}

/// The snapshot `spec` names (`latest` or an id prefix, any case). `filter` chooses among the
/// snapshots for `latest`; an id that names a snapshot it rules out is refused rather than
/// silently used.
pub async fn find_snapshot(
    repo: &Repository,
    spec: &str,
    filter: &SnapshotFilter,
) -> std::result::Result<(SnapshotId, Snapshot), SelectionError> {
    let spec = snapshot_spec(spec);
    let (id, snapshot) = repo.find_snapshot_where(&spec, filter).await?;
    if spec == "latest" {
        return Ok((id, snapshot));
    }
    if let Some(host) = filter.host.as_deref().filter(|h| *h != snapshot.hostname) {
        return Err(SelectionError::OtherHost {
            id: id.short(),
            found: snapshot.hostname,
            wanted: host.to_owned(),
        });
    }
    if let Some(before) = filter.before {
        let taken = chrono::DateTime::parse_from_rfc3339(&snapshot.time)
            .map(|time| time.with_timezone(&chrono::Utc));
        if taken.map_or(true, |time| time >= before) {
            return Err(SelectionError::NotBefore {
                id: id.short(),
                taken: snapshot.time,
                before: before.to_rfc3339(),
            });
        }
    }
    Ok((id, snapshot))
}

/// The time a snapshot was taken; the earliest time when it cannot be read.
fn taken(snapshot: &Snapshot) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(&snapshot.time)
        .map(|time| time.with_timezone(&chrono::Utc))
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC)
}

/// The newest `count` snapshots of each host and set of paths (restic's `--latest N`), oldest
/// first.
pub fn latest_of_each_source(
    mut snapshots: Vec<(SnapshotId, Snapshot)>,
    count: usize,
) -> Vec<(SnapshotId, Snapshot)> {
    snapshots.sort_by(|a, b| taken(&b.1).cmp(&taken(&a.1)).then(b.0.cmp(&a.0)));
    let mut seen: std::collections::HashMap<GroupKey, usize> = std::collections::HashMap::new();
    let by_source = GroupBy::default();
    snapshots.retain(|(_, snapshot)| {
        let kept = seen.entry(by_source.key(snapshot)).or_default();
        *kept += 1;
        *kept <= count
    });
    snapshots.reverse();
    snapshots
}

/// The snapshots `specs` name (`latest`: the newest that `selection` chooses; an id prefix:
/// that snapshot, whatever the selection), oldest first and each once; with no specs, every
/// snapshot `selection` chooses.
pub async fn select_snapshots(
    repo: &Repository,
    specs: &[String],
    selection: &SnapshotMatch,
) -> Result<Vec<(SnapshotId, Snapshot)>> {
    let all = repo.snapshots().await?;
    if specs.is_empty() {
        return Ok(all
            .into_iter()
            .filter(|(_, snapshot)| selection.matches(snapshot))
            .collect());
    }
    let mut chosen: Vec<(SnapshotId, Snapshot)> = Vec::new();
    for spec in specs.iter().map(|spec| snapshot_spec(spec)) {
        let found = if spec == "latest" {
            all.iter()
                .rev()
                .find(|(_, snapshot)| selection.matches(snapshot))
                .cloned()
                .ok_or_else(|| Error::SnapshotNotFound(spec.clone()))?
        } else {
            repo.find_snapshot(&spec).await?
        };
        if !chosen.iter().any(|(id, _)| *id == found.0) {
            chosen.push(found);
        }
    }
    chosen.sort_by(|a, b| taken(&a.1).cmp(&taken(&b.1)).then(a.0.cmp(&b.0)));
    Ok(chosen)
}

/// Whether the snapshot path `entry` (`/a/b`, bytes as stored) is `path` or below it.
pub fn is_at_or_below(entry: &[u8], path: &[u8]) -> bool {
    let mut path = path;
    while let Some(shorter) = path.strip_suffix(b"/") {
        path = shorter;
    }
    if path.is_empty() {
        return true;
    }
    entry == path
        || entry
            .strip_prefix(path)
            .is_some_and(|rest| rest.starts_with(b"/"))
}

/// The snapshots of `host`, newest first.
pub async fn snapshots_of_host(
    repo: &Repository,
    host: &str,
) -> Result<Vec<(SnapshotId, Snapshot)>> {
    let mut snapshots: Vec<(SnapshotId, Snapshot)> = repo
        .snapshots()
        .await?
        .into_iter()
        .filter(|(_, snapshot)| snapshot.hostname == host)
        .collect();
    snapshots.reverse();
    Ok(snapshots)
}

/// What a run reports of `host`'s snapshots: their count and the newest
/// [`HOST_SNAPSHOTS_LISTED`].
pub async fn host_snapshots(repo: &Repository, host: &str) -> Result<HostSnapshots> {
    let snapshots = snapshots_of_host(repo, host).await?;
    Ok(HostSnapshots {
        host: host.to_owned(),
        total: snapshots.len() as u64,
        newest: snapshots
            .iter()
            .take(HOST_SNAPSHOTS_LISTED)
            .map(|(id, snapshot)| snapshot_entry(id, snapshot))
            .collect(),
    })
}

/// One snapshot as a status lists it: its short id, time in seconds (UTC), files, size and tags.
pub fn snapshot_entry(id: &SnapshotId, snapshot: &Snapshot) -> SnapshotEntry {
    let time = chrono::DateTime::parse_from_rfc3339(&snapshot.time)
        .map(|time| {
            time.with_timezone(&chrono::Utc)
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        })
        .unwrap_or_else(|_| snapshot.time.clone());
    SnapshotEntry {
        id: id.short(),
        time,
        files: snapshot.summary.files,
        size_bytes: snapshot.summary.total_bytes,
        tags: snapshot.tags.clone(),
    }
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
        assert!(is_at_or_below(b"/data/app", b"/data/app"));
        assert!(is_at_or_below(b"/data/app/x", b"/data/app/"));
        assert!(!is_at_or_below(b"/data", b"/data/app"));
        assert!(!is_at_or_below(b"/data/apple", b"/data/app"));
        assert!(is_at_or_below(b"/data", b"/"));
        assert!(is_at_or_below(b"/caf\xe9/x", b"/caf\xe9"));
    }
}
