//! Snapshot objects: the root of one backup, written last.

use super::raw_bytes;
use crate::ids::{BlobId, SnapshotId};
use serde::{Deserialize, Serialize};

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
}
