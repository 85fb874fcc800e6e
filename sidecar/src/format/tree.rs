//! Trees: one blob per directory, listing its entries sorted by name.
//!
//! A tree's plaintext is JSON: `{"nodes":[...]}`; each node carries the entry's name, its kind and
//! the kind's payload (content blob ids for files, a subtree id for directories, a target for
//! symlinks, a device number for devices), and its metadata (mode, owner, times).

mod decode;
mod encode;

use super::raw_bytes;
use crate::ids::BlobId;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tree {
    pub nodes: Vec<Node>,
}

/// A time as seconds and nanoseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timestamp {
    pub secs: i64,
    pub nanos: u32,
}

/// One entry of a directory. Read by a visitor of its own (`decode`), not by a derived one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Node {
    /// The entry's name, which need not be UTF-8.
    #[serde(with = "raw_bytes")]
    pub name: Vec<u8>,
    #[serde(flatten)]
    pub kind: NodeKind,
    #[serde(flatten)]
    pub meta: Metadata,
}

/// What an entry is, with what only that kind has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum NodeKind {
    File {
        size: u64,
        /// Data blobs in order; their plaintext concatenated is the file.
        content: Vec<BlobId>,
    },
    Dir {
        subtree: BlobId,
    },
    Symlink {
        #[serde(with = "raw_bytes")]
        target: Vec<u8>,
    },
    Fifo,
    #[serde(rename = "chardev")]
    CharDevice {
        rdev: u64,
    },
    #[serde(rename = "blockdev")]
    BlockDevice {
        rdev: u64,
    },
}

/// What a restore puts back, and what the next backup compares to skip unchanged files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    /// Permission bits, including setuid, setgid and sticky (`mode & 0o7777`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: Timestamp,
    /// Change time: not restored, used to notice changed files.
    pub ctime: Timestamp,
    pub inode: u64,
    pub device: u64,
    /// Hard links to the same inode; files with more than one are restored as hard links.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub links: u64,
}

fn one() -> u64 {
    1
}

fn is_one(links: &u64) -> bool {
    *links == 1
}

impl Tree {
    /// The tree's plaintext bytes: JSON, nodes sorted by name. They are what the derived
    /// `Serialize` writes (the tests hold the two to each other), written without it.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        encode::encode_tree(self, &mut bytes);
        bytes
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Tree, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// The node named `name`, if any (nodes are sorted by name).
    pub fn find(&self, name: &[u8]) -> Option<&Node> {
        self.nodes
            .binary_search_by(|node| node.name.as_slice().cmp(name))
            .ok()
            .map(|i| &self.nodes[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> Metadata {
        Metadata {
            mode: 0o644,
            uid: 1000,
            gid: 1000,
            mtime: Timestamp {
                secs: 1_700_000_000,
                nanos: 123_456_789,
            },
            ctime: Timestamp {
                secs: 1_700_000_001,
                nanos: 0,
            },
            inode: 42,
            device: 7,
            links: 1,
        }
    }

    #[test]
    fn golden_tree_json_and_non_utf8_names() {
        let tree = Tree {
            nodes: vec![
                Node {
                    name: b"a.txt".to_vec(),
                    kind: NodeKind::File {
                        size: 3,
                        content: vec![BlobId::from_bytes([5; 32])],
                    },
                    meta: meta(),
                },
                Node {
                    name: vec![0xff, b'x'],
                    kind: NodeKind::Symlink {
                        target: b"/t".to_vec(),
                    },
                    meta: meta(),
                },
            ],
        };
        let json = String::from_utf8(tree.to_bytes()).unwrap();
        assert_eq!(
            json,
            format!(
                "{{\"nodes\":[{{\"name\":\"a.txt\",\"type\":\"file\",\"size\":3,\"content\":[\"{}\"],\"mode\":420,\"uid\":1000,\"gid\":1000,\"mtime\":{{\"secs\":1700000000,\"nanos\":123456789}},\"ctime\":{{\"secs\":1700000001,\"nanos\":0}},\"inode\":42,\"device\":7}},{{\"name\":{{\"base64\":\"/3g=\"}},\"type\":\"symlink\",\"target\":\"/t\",\"mode\":420,\"uid\":1000,\"gid\":1000,\"mtime\":{{\"secs\":1700000000,\"nanos\":123456789}},\"ctime\":{{\"secs\":1700000001,\"nanos\":0}},\"inode\":42,\"device\":7}}]}}",
                "05".repeat(32)
            )
        );
        let parsed = Tree::from_bytes(json.as_bytes()).unwrap();
        assert_eq!(parsed, tree);
        assert!(parsed.find(&[0xff, b'x']).is_some());
        assert!(parsed.find(b"missing").is_none());
    }
}
