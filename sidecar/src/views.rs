//! The JSON the front ends print for scripts (`snapshots --json`, `ls --json`): one stable shape
//! per command, published as JSON Schemas in `docs/schema/`.
//!
//! Names need not be UTF-8, and JSON strings must be. So every name is a string (invalid bytes
//! replaced by U+FFFD, for reading) and, only when it is not UTF-8, a `…Raw` field beside it holds
//! its exact bytes in base64: a script that needs the exact name takes `nameRaw` when present,
//! else `name`. The stored objects keep their own format; these are views of them.

use base64::Engine;
use neverwiped_contract::record::RecordedSources;
use serde::Serialize;

use crate::format::snapshot::{Snapshot, SnapshotSummary};
use crate::format::tree::{Node, NodeKind, Timestamp};
use crate::ids::SnapshotId;

/// `bytes` for reading: UTF-8, invalid bytes replaced.
fn readable(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `bytes` in base64 when they are not UTF-8 (the `…Raw` field beside a name).
pub fn raw(bytes: &[u8]) -> Option<String> {
    std::str::from_utf8(bytes)
        .is_err()
        .then(|| base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// A snapshot as `snapshots --json` prints it (`docs/schema/snapshots.json`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotView {
    pub id: String,
    pub short_id: String,
    pub time: String,
    pub hostname: String,
    pub username: String,
    /// The backed-up paths, for reading.
    pub paths: Vec<String>,
    /// Every path's bytes in base64, in the order of `paths`; present only when one of them
    /// is not UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paths_raw: Option<Vec<String>>,
    pub tags: Vec<String>,
    pub tree: String,
    pub parent: Option<String>,
    /// The id the snapshot was first written under, when `tag` has rewritten it since.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub original: Option<String>,
    pub summary: SummaryView,
    pub program_version: String,
    /// What the backed-up claims and databases were; absent when nothing was recorded.
    #[serde(skip_serializing_if = "RecordedSources::is_empty")]
    pub sources: RecordedSources,
    /// The members a newer version stored that this one does not know; absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unknown_members: Vec<String>,
}

/// A snapshot's summary. `warnings` is a list of messages wherever a command prints it; here
/// the snapshot stores only how many there were: `warningsTotal`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SummaryView {
    pub files: u64,
    pub dirs: u64,
    pub files_read: u64,
    pub bytes_read: u64,
    pub total_bytes: u64,
    pub bytes_added: u64,
    pub blobs_added: u64,
    pub warnings_total: u64,
    pub duration_millis: u64,
}

impl From<&SnapshotSummary> for SummaryView {
    fn from(summary: &SnapshotSummary) -> SummaryView {
        SummaryView {
            files: summary.files,
            dirs: summary.dirs,
            files_read: summary.files_read,
            bytes_read: summary.bytes_read,
            total_bytes: summary.total_bytes,
            bytes_added: summary.bytes_added,
            blobs_added: summary.blobs_added,
            warnings_total: summary.warnings,
            duration_millis: summary.duration_millis,
        }
    }
}

impl SnapshotView {
    /// The view of the snapshot `id`.
    pub fn new(id: &SnapshotId, snapshot: &Snapshot) -> SnapshotView {
        let any_raw = snapshot
            .paths
            .iter()
            .any(|path| std::str::from_utf8(&path.0).is_err());
        let engine = base64::engine::general_purpose::STANDARD;
        SnapshotView {
            id: id.to_hex(),
            short_id: id.short(),
            time: snapshot.time.clone(),
            hostname: snapshot.hostname.clone(),
            username: snapshot.username.clone(),
            paths: snapshot
                .paths
                .iter()
                .map(|path| readable(&path.0))
                .collect(),
            paths_raw: any_raw.then(|| {
                snapshot
                    .paths
                    .iter()
                    .map(|path| engine.encode(&path.0))
                    .collect()
            }),
            tags: snapshot.tags.clone(),
            tree: snapshot.tree.to_string(),
            parent: snapshot.parent.map(|parent| parent.to_hex()),
            original: snapshot.original.map(|original| original.to_hex()),
            summary: SummaryView::from(&snapshot.summary),
            program_version: snapshot.program_version.clone(),
            sources: snapshot.sources.clone(),
            unknown_members: snapshot.unknown.keys().cloned().collect(),
        }
    }
}

/// The key of a group of snapshots as `snapshots --group-by … --json` prints it: each part the
/// snapshots were grouped by, `null` for the others.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupKeyView {
    pub hostname: Option<String>,
    pub paths: Option<Vec<String>>,
    /// Every path's bytes in base64, in the order of `paths`; present only when one of them
    /// is not UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paths_raw: Option<Vec<String>>,
    pub tags: Option<Vec<String>>,
}

impl GroupKeyView {
    /// The view of `key`.
    pub fn new(key: &crate::selection::GroupKey) -> GroupKeyView {
        let engine = base64::engine::general_purpose::STANDARD;
        let any_raw = key
            .paths
            .iter()
            .flatten()
            .any(|path| std::str::from_utf8(&path.0).is_err());
        GroupKeyView {
            hostname: key.host.clone(),
            paths: key
                .paths
                .as_ref()
                .map(|paths| paths.iter().map(|path| readable(&path.0)).collect()),
            paths_raw: key
                .paths
                .as_ref()
                .filter(|_| any_raw)
                .map(|paths| paths.iter().map(|path| engine.encode(&path.0)).collect()),
            tags: key.tags.clone(),
        }
    }
}

/// An entry of a snapshot as `ls --json` prints it, one object per line
/// (`docs/schema/ls.json`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryView {
    /// The entry's path in the snapshot, from `/`.
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_raw: Option<String>,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name_raw: Option<String>,
    /// `file`, `dir`, `symlink`, `fifo`, `chardev` or `blockdev`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Permission bits with set-user-ID, set-group-ID and sticky (`mode & 0o7777`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Bytes of a file; 0 for anything else.
    pub size: u64,
    /// Modification time, RFC 3339 in UTC with nanoseconds.
    pub mtime: String,
    /// A symlink's target, for reading; `null` for anything else.
    pub link_target: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_target_raw: Option<String>,
    /// A device file's device number; `null` for anything else.
    pub device_number: Option<u64>,
}

/// An RFC 3339 time in UTC with nanoseconds; the epoch when out of range.
fn rfc3339(time: &Timestamp) -> String {
    chrono::DateTime::from_timestamp(time.secs, time.nanos)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

impl EntryView {
    /// The view of `node` at `path` (relative to the snapshot's root, without the leading `/`).
    pub fn new(path: &[u8], node: &Node) -> EntryView {
        let full = [b"/", path].concat();
        let (kind, size, target, device) = match &node.kind {
            NodeKind::File { size, .. } => ("file", *size, None, None),
            NodeKind::Dir { .. } => ("dir", 0, None, None),
            NodeKind::Symlink { target } => ("symlink", 0, Some(target.as_slice()), None),
            NodeKind::Fifo => ("fifo", 0, None, None),
            NodeKind::CharDevice { rdev } => ("chardev", 0, None, Some(*rdev)),
            NodeKind::BlockDevice { rdev } => ("blockdev", 0, None, Some(*rdev)),
        };
        EntryView {
            path: readable(&full),
            path_raw: raw(&full),
            name: readable(&node.name),
            name_raw: raw(&node.name),
            kind,
            mode: node.meta.mode & 0o7777,
            uid: node.meta.uid,
            gid: node.meta.gid,
            size,
            mtime: rfc3339(&node.meta.mtime),
            link_target: target.map(readable),
            link_target_raw: target.and_then(raw),
            device_number: device,
        }
    }
}
