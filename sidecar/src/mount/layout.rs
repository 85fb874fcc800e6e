//! The folders above the snapshots, as restic's `mount` lays them out: `snapshots/<time>`,
//! `hosts/<host>/<time>`, `tags/<tag>/<time>` and `ids/<short id>`, with a `latest` symlink to the
//! newest snapshot beside each list of times.
//!
//! Pure: built once from the snapshot list, unit-tested without a mount. A host or tag with `/`
//! (the operator's hosts are `NAMESPACE/PLAN`) becomes nested folders, as in restic.

use crate::format::snapshot::Snapshot;
use crate::format::tree::Timestamp;
use crate::ids::{BlobId, SnapshotId};
use std::collections::BTreeMap;

/// The name of the symlink to the newest snapshot of a folder.
pub const LATEST: &[u8] = b"latest";

/// One snapshot as the mount shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountedSnapshot {
    pub id: SnapshotId,
    /// Its root tree: what the snapshot's folder holds.
    pub tree: BlobId,
    /// When it was taken: the time of its folders.
    pub time: Timestamp,
}

/// An entry of the folders above the snapshots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutEntry {
    Dir(LayoutDir),
    /// The root of a snapshot (an index into [`Layout::snapshots`]).
    Snapshot(usize),
    /// A relative symlink, e.g. `latest` → `2026-11-30T01:00:00Z`.
    Link(Vec<u8>),
}

/// A folder of the layout: its entries by name, and the time it shows (its newest snapshot's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LayoutDir {
    pub entries: BTreeMap<Vec<u8>, LayoutEntry>,
    pub time: Timestamp,
}

/// The whole layout: the root folder and the snapshots it leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub root: LayoutDir,
    pub snapshots: Vec<MountedSnapshot>,
}

/// Which snapshots the mount shows: all, or those of the given hosts and with all the given tags.
#[derive(Debug, Clone, Default)]
pub struct SnapshotSelection {
    pub hosts: Vec<String>,
    pub tags: Vec<String>,
}

impl SnapshotSelection {
    pub fn selects(&self, snapshot: &Snapshot) -> bool {
        (self.hosts.is_empty() || self.hosts.contains(&snapshot.hostname))
            && self.tags.iter().all(|tag| snapshot.tags.contains(tag))
    }
}

/// The time of a snapshot: its RFC 3339 time, or the epoch when it does not parse.
fn snapshot_time(snapshot: &Snapshot) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::parse_from_rfc3339(&snapshot.time)
        .ok()
        .map(|time| time.with_timezone(&chrono::Utc))
}

/// A snapshot's folder name: its time to the second in UTC (restic's default template
/// `2006-01-02T15:04:05Z07:00`), or its stored time string when that does not parse.
fn time_name(snapshot: &Snapshot) -> Vec<u8> {
    match snapshot_time(snapshot) {
        Some(time) => time.format("%Y-%m-%dT%H:%M:%SZ").to_string().into_bytes(),
        None => sanitize_component(&snapshot.time),
    }
}

/// One path component from a name: no `/`, no NUL, never empty, `.` or `..`.
fn sanitize_component(text: &str) -> Vec<u8> {
    let cleaned: Vec<u8> = text
        .bytes()
        .map(|byte| {
            if byte == b'/' || byte == 0 {
                b'_'
            } else {
                byte
            }
        })
        .collect();
    match cleaned.as_slice() {
        b"" | b"." | b".." => b"_".to_vec(),
        _ => cleaned,
    }
}

/// The folders a host or tag name stands for: one per `/`-separated part.
fn name_components(name: &str) -> Vec<Vec<u8>> {
    let parts: Vec<Vec<u8>> = name
        .split('/')
        .filter(|part| !part.is_empty())
        .map(sanitize_component)
        .collect();
    if parts.is_empty() {
        vec![b"_".to_vec()]
    } else {
        parts
    }
}

/// The shortest id prefix (at least 8 digits) that no other snapshot of the list shares.
fn unique_prefix(id: &SnapshotId, all: &[SnapshotId]) -> String {
    let hex = id.to_hex();
    let mut length = 8;
    while length < hex.len()
        && all
            .iter()
            .any(|other| other != id && other.to_hex().starts_with(&hex[..length]))
    {
        length += 2;
    }
    hex[..length].to_owned()
}

impl LayoutDir {
    /// The folder at `components` below this one, created as needed. A name already taken by a
    /// snapshot or link is not replaced: the folder gets the name with `_` appended.
    fn dir_at(&mut self, components: &[Vec<u8>]) -> &mut LayoutDir {
        let Some((first, rest)) = components.split_first() else {
            return self;
        };
        let mut name = first.clone();
        while matches!(self.entries.get(&name), Some(entry) if !matches!(entry, LayoutEntry::Dir(_)))
        {
            name.push(b'_');
        }
        let entry = self
            .entries
            .entry(name)
            .or_insert_with(|| LayoutEntry::Dir(LayoutDir::default()));
        match entry {
            LayoutEntry::Dir(dir) => dir.dir_at(rest),
            _ => unreachable!("the name was chosen free or a folder"),
        }
    }

    /// Adds `snapshot` (oldest first) under a unique time name, and points `latest` at it.
    fn add_snapshot(&mut self, name: &[u8], index: usize, time: Timestamp) {
        let mut unique = name.to_vec();
        let mut suffix = 1;
        while self.entries.contains_key(&unique) || unique == LATEST {
            unique = [name, format!("-{suffix}").as_bytes()].concat();
            suffix += 1;
        }
        self.entries
            .insert(unique.clone(), LayoutEntry::Snapshot(index));
        self.entries
            .insert(LATEST.to_vec(), LayoutEntry::Link(unique));
        self.time = self.time.max_of(time);
    }

    /// Gives every folder the time of its newest entry.
    fn settle_times(&mut self) -> Timestamp {
        for entry in self.entries.values_mut() {
            if let LayoutEntry::Dir(dir) = entry {
                let time = dir.settle_times();
                self.time = self.time.max_of(time);
            }
        }
        self.time
    }
}

trait Newest {
    fn max_of(self, other: Timestamp) -> Timestamp;
}

impl Newest for Timestamp {
    fn max_of(self, other: Timestamp) -> Timestamp {
        if (other.secs, other.nanos) > (self.secs, self.nanos) {
            other
        } else {
            self
        }
    }
}

/// Lays out the selected snapshots, oldest first in each folder (so that `latest` is the newest;
/// snapshots of the same time are ordered by id).
pub fn build_layout(snapshots: &[(SnapshotId, Snapshot)], selection: &SnapshotSelection) -> Layout {
    let mut selected: Vec<&(SnapshotId, Snapshot)> = snapshots
        .iter()
        .filter(|(_, snapshot)| selection.selects(snapshot))
        .collect();
    selected.sort_by_key(|(id, snapshot)| (snapshot_time(snapshot), *id));
    let ids: Vec<SnapshotId> = selected.iter().map(|(id, _)| *id).collect();
    let mut root = LayoutDir::default();
    // The four folders exist even when no snapshot is there yet.
    for folder in [b"snapshots", b"hosts".as_slice(), b"tags", b"ids"] {
        root.dir_at(&[folder.to_vec()]);
    }
    let mut mounted = Vec::with_capacity(selected.len());
    for (index, (id, snapshot)) in selected.iter().enumerate() {
        let time = snapshot_time(snapshot)
            .map(|time| Timestamp {
                secs: time.timestamp(),
                nanos: time.timestamp_subsec_nanos(),
            })
            .unwrap_or_default();
        mounted.push(MountedSnapshot {
            id: *id,
            tree: snapshot.tree,
            time,
        });
        let name = time_name(snapshot);
        root.dir_at(&[b"snapshots".to_vec()])
            .add_snapshot(&name, index, time);
        let host = [vec![b"hosts".to_vec()], name_components(&snapshot.hostname)].concat();
        root.dir_at(&host).add_snapshot(&name, index, time);
        for tag in &snapshot.tags {
            let folder = [vec![b"tags".to_vec()], name_components(tag)].concat();
            root.dir_at(&folder).add_snapshot(&name, index, time);
        }
        let ids_dir = root.dir_at(&[b"ids".to_vec()]);
        ids_dir.entries.insert(
            unique_prefix(id, &ids).into_bytes(),
            LayoutEntry::Snapshot(index),
        );
        ids_dir.time = ids_dir.time.max_of(time);
    }
    root.settle_times();
    Layout {
        root,
        snapshots: mounted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::snapshot::SnapshotSummary;

    fn snapshot(time: &str, host: &str, tags: &[&str], tree: u8) -> Snapshot {
        Snapshot {
            time: time.into(),
            hostname: host.into(),
            username: "root".into(),
            paths: Vec::new(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            tree: BlobId::from_bytes([tree; 32]),
            parent: None,
            original: None,
            summary: SnapshotSummary::default(),
            program_version: "test".into(),
            sources: Default::default(),
            unknown: Default::default(),
        }
    }

    fn id(byte: u8) -> SnapshotId {
        SnapshotId::from_bytes([byte; 32])
    }

    fn dir<'a>(layout: &'a Layout, path: &[&str]) -> &'a LayoutDir {
        let mut current = &layout.root;
        for part in path {
            match current.entries.get(part.as_bytes()) {
                Some(LayoutEntry::Dir(dir)) => current = dir,
                other => panic!("{path:?}: {part} is {other:?}"),
            }
        }
        current
    }

    fn names(dir: &LayoutDir) -> Vec<String> {
        dir.entries
            .keys()
            .map(|name| String::from_utf8_lossy(name).into_owned())
            .collect()
    }

    #[test]
    fn snapshots_appear_by_time_host_tag_and_id_with_latest_links() {
        let list = vec![
            (
                id(2),
                snapshot("2026-11-30T02:00:00.5Z", "shop/db", &["plan=db"], 2),
            ),
            (id(1), snapshot("2026-11-30T01:00:00Z", "shop/db", &[], 1)),
            (
                id(3),
                snapshot("2026-11-30T03:00:00+01:00", "other", &["plan=db", "x"], 3),
            ),
        ];
        let layout = build_layout(&list, &SnapshotSelection::default());
        assert_eq!(names(&layout.root), ["hosts", "ids", "snapshots", "tags"]);
        let snapshots = dir(&layout, &["snapshots"]);
        assert_eq!(
            names(snapshots),
            [
                "2026-11-30T01:00:00Z",
                "2026-11-30T02:00:00Z",
                "2026-11-30T02:00:00Z-1",
                "latest"
            ]
        );
        // 03:00+01:00 is 02:00 UTC, half a second before the other, which is the newest.
        assert_eq!(
            snapshots.entries[LATEST],
            LayoutEntry::Link(b"2026-11-30T02:00:00Z-1".to_vec())
        );
        assert_eq!(layout.snapshots[2].id, id(2));
        assert_eq!(
            names(dir(&layout, &["hosts", "shop", "db"])),
            ["2026-11-30T01:00:00Z", "2026-11-30T02:00:00Z", "latest"]
        );
        assert_eq!(
            names(dir(&layout, &["hosts", "other"])),
            ["2026-11-30T02:00:00Z", "latest"]
        );
        assert_eq!(names(dir(&layout, &["tags"])), ["plan=db", "x"]);
        assert_eq!(
            names(dir(&layout, &["tags", "plan=db"])),
            ["2026-11-30T02:00:00Z", "2026-11-30T02:00:00Z-1", "latest"]
        );
        let ids = dir(&layout, &["ids"]);
        assert_eq!(names(ids), ["01010101", "02020202", "03030303"]);
        assert_eq!(
            ids.entries[b"01010101".as_slice()],
            LayoutEntry::Snapshot(0)
        );
        assert_eq!(layout.root.time, layout.snapshots[2].time);
        assert_eq!(dir(&layout, &["hosts", "shop"]).time.nanos, 500_000_000);
    }

    #[test]
    fn ids_sharing_eight_digits_get_longer_names_and_odd_names_stay_one_component() {
        let mut first = [0xab; 32];
        let mut second = [0xab; 32];
        first[31] = 1;
        second[31] = 2;
        let list = vec![
            (
                SnapshotId::from_bytes(first),
                snapshot("2026-01-01T00:00:00Z", "..", &["a//b/"], 1),
            ),
            (
                SnapshotId::from_bytes(second),
                snapshot("not a time", "", &[], 2),
            ),
        ];
        let layout = build_layout(&list, &SnapshotSelection::default());
        let ids = names(dir(&layout, &["ids"]));
        assert_eq!(ids.len(), 2);
        assert!(
            ids.iter()
                .all(|name| name.len() > 8 && name.starts_with("abababab")),
            "{ids:?}"
        );
        assert_eq!(names(dir(&layout, &["hosts"])), ["_"]);
        assert_eq!(names(dir(&layout, &["tags", "a"])), ["b"]);
        assert_eq!(
            names(dir(&layout, &["snapshots"])),
            ["2026-01-01T00:00:00Z", "latest", "not a time"]
        );
    }

    #[test]
    fn a_selection_keeps_only_its_hosts_and_tags() {
        let list = vec![
            (id(1), snapshot("2026-11-30T01:00:00Z", "a", &["t"], 1)),
            (id(2), snapshot("2026-11-30T02:00:00Z", "b", &["t"], 2)),
            (id(3), snapshot("2026-11-30T03:00:00Z", "a", &[], 3)),
        ];
        let selection = SnapshotSelection {
            hosts: vec!["a".into()],
            tags: vec!["t".into()],
        };
        let layout = build_layout(&list, &selection);
        assert_eq!(layout.snapshots.len(), 1);
        assert_eq!(layout.snapshots[0].id, id(1));
        let empty = build_layout(&[], &SnapshotSelection::default());
        assert_eq!(names(dir(&empty, &["snapshots"])), Vec::<String>::new());
    }
}
