//! Index objects: which pack holds which blob, so that nothing needs to read pack headers.
//!
//! A sealed metadata object (JSON, see `docs/repository-format.md`):
//! `{"packs":[{"id":"<pack>","blobs":[{"id":"<blob>","kind":"data","offset":0,"length":123,"rawLength":100}]}]}`

use super::pack::PackEntry;
use crate::ids::{BlobId, BlobKind, PackId};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexFile {
    pub packs: Vec<IndexedPack>,
    /// Index objects this one replaces (written by prune); readers ignore those.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub supersedes: Vec<crate::ids::ObjectId>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexedPack {
    pub id: PackId,
    pub blobs: Vec<IndexedBlob>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IndexedBlob {
    pub id: BlobId,
    pub kind: BlobKind,
    pub offset: u32,
    pub length: u32,
    pub raw_length: u32,
}

impl From<&PackEntry> for IndexedBlob {
    fn from(entry: &PackEntry) -> IndexedBlob {
        IndexedBlob {
            id: entry.id,
            kind: entry.kind,
            offset: entry.offset,
            length: entry.length,
            raw_length: entry.raw_length,
        }
    }
}

impl IndexedPack {
    /// The pack's stored length implied by its blobs (without the header).
    pub fn blobs_end(&self) -> u64 {
        self.blobs
            .iter()
            .map(|b| b.offset as u64 + b.length as u64)
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_index_json() {
        let index = IndexFile {
            packs: vec![IndexedPack {
                id: PackId::from_bytes([1; 32]),
                blobs: vec![IndexedBlob {
                    id: BlobId::from_bytes([2; 32]),
                    kind: BlobKind::Data,
                    offset: 0,
                    length: 40,
                    raw_length: 11,
                }],
            }],
            supersedes: vec![],
        };
        let json = serde_json::to_string(&index).unwrap();
        assert_eq!(
            json,
            format!(
                "{{\"packs\":[{{\"id\":\"{}\",\"blobs\":[{{\"id\":\"{}\",\"kind\":\"data\",\"offset\":0,\"length\":40,\"rawLength\":11}}]}}]}}",
                "01".repeat(32),
                "02".repeat(32)
            )
        );
        assert_eq!(serde_json::from_str::<IndexFile>(&json).unwrap(), index);
    }
}
