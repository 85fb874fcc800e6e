//! Snapshot objects: the root of one backup, written last.

use super::raw_bytes;
use crate::ids::{BlobId, SnapshotId};
use neverwiped_contract::record::RecordedSources;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// RFC 3339 with nanoseconds, UTC.
    pub time: String,
    pub hostname: String,
    pub username: String,
    /// The backed-up paths as given (absolute), e.g. `/data/db`; `/databases/NAME/...` for dumps.
    pub paths: Vec<SnapshotPath>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The root tree: the paths are found below it by their components.
    pub tree: BlobId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<SnapshotId>,
    /// The id this snapshot had when it was first written, kept by each rewrite (`tag`), as
    /// restic's `original`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original: Option<SnapshotId>,
    pub summary: SnapshotSummary,
    pub program_version: String,
    /// What the backed-up volumes and databases were: enough to recreate their claims.
    #[serde(default, skip_serializing_if = "RecordedSources::is_empty")]
    pub sources: RecordedSources,
    /// Members a newer version wrote that this one does not know: kept as they are by every
    /// rewrite (`tag`, `copy`), so no reader loses what a newer writer recorded.
    #[serde(flatten)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

impl Snapshot {
    /// The names of the members this version does not know, for a warning.
    pub fn unknown_members(&self) -> Option<String> {
        (!self.unknown.is_empty()).then(|| {
            let names: Vec<&str> = self.unknown.keys().map(String::as_str).collect();
            names.join(", ")
        })
    }
}

/// A path that need not be UTF-8.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SnapshotPath(#[serde(with = "raw_bytes")] pub Vec<u8>);

impl SnapshotPath {
    pub fn display(&self) -> String {
        String::from_utf8_lossy(&self.0).into_owned()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotSummary {
    pub files: u64,
    pub dirs: u64,
    /// Files whose content was read (not reused from the parent snapshot).
    pub files_read: u64,
    pub bytes_read: u64,
    /// Total size of the files in the snapshot.
    pub total_bytes: u64,
    /// Bytes of the packs this backup uploaded (sealed blobs and pack headers).
    pub bytes_added: u64,
    pub blobs_added: u64,
    pub warnings: u64,
    pub duration_millis: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_snapshot_json() {
        let snapshot = Snapshot {
            time: "2026-11-30T01:00:00.000000001Z".into(),
            hostname: "ns/plan".into(),
            username: "root".into(),
            paths: vec![SnapshotPath(b"/data/db".to_vec())],
            tags: vec!["plan=db".into()],
            tree: BlobId::from_bytes([9; 32]),
            parent: None,
            original: None,
            summary: SnapshotSummary {
                files: 1,
                ..Default::default()
            },
            program_version: "neverwiped 0.1.0".into(),
            sources: RecordedSources::default(),
            unknown: BTreeMap::new(),
        };
        let json = serde_json::to_string(&snapshot).unwrap();
        assert_eq!(
            json,
            format!(
                "{{\"time\":\"2026-11-30T01:00:00.000000001Z\",\"hostname\":\"ns/plan\",\"username\":\"root\",\"paths\":[\"/data/db\"],\"tags\":[\"plan=db\"],\"tree\":\"{}\",\"summary\":{{\"files\":1,\"dirs\":0,\"filesRead\":0,\"bytesRead\":0,\"totalBytes\":0,\"bytesAdded\":0,\"blobsAdded\":0,\"warnings\":0,\"durationMillis\":0}},\"programVersion\":\"neverwiped 0.1.0\"}}",
                "09".repeat(32)
            )
        );
        assert_eq!(serde_json::from_str::<Snapshot>(&json).unwrap(), snapshot);
    }

    #[test]
    fn members_of_a_newer_version_are_kept_through_a_rewrite() {
        let newer = format!(
            "{{\"time\":\"2026-11-30T01:00:00.000000001Z\",\"hostname\":\"ns/plan\",\"username\":\"root\",\"paths\":[\"/data/db\"],\"tree\":\"{}\",\"summary\":{{\"files\":1,\"dirs\":0,\"filesRead\":0,\"bytesRead\":0,\"totalBytes\":0,\"bytesAdded\":0,\"blobsAdded\":0,\"warnings\":0,\"durationMillis\":0}},\"programVersion\":\"neverwiped 9.0.0\",\"sources\":{{\"claims\":[{{\"path\":\"/data/db\",\"name\":\"db\",\"future\":1}}]}},\"zeta\":{{\"a\":[1,2]}},\"alpha\":\"x\"}}",
            "09".repeat(32)
        );
        let mut read: Snapshot = serde_json::from_str(&newer).unwrap();
        assert_eq!(read.unknown_members().as_deref(), Some("alpha, zeta"));
        assert_eq!(read.sources.claims[0].name, "db");
        read.tags.push("kept".into());
        let written: serde_json::Value = serde_json::to_value(&read).unwrap();
        assert_eq!(written["zeta"], serde_json::json!({"a": [1, 2]}));
        assert_eq!(written["alpha"], "x");
        assert_eq!(written["tags"], serde_json::json!(["kept"]));
        assert_eq!(written["sources"]["claims"][0]["path"], "/data/db");
        assert_eq!(written["sources"]["claims"][0]["future"], 1);
    }
}
