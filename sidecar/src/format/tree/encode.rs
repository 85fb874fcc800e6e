//! Writing a tree's JSON by hand, byte for byte what serde's derived encoder wrote (the format's
//! definition, kept in the tests as the reference). The derived one goes through a generic map
//! for the flattened kind and metadata and allocates each id's hex text; a quiet night encodes
//! every parent tree again to check that its id may be reused, so that cost was paid per entry.

use super::{Metadata, Node, NodeKind, Timestamp, Tree};
use crate::ids::BlobId;
use base64::Engine;

/// Appends the tree's JSON to `out`.
pub fn encode_tree(tree: &Tree, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"nodes\":[");
    for (position, node) in tree.nodes.iter().enumerate() {
        if position > 0 {
            out.push(b',');
        }
        encode_node(node, out);
    }
    out.extend_from_slice(b"]}");
}

fn encode_node(node: &Node, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"name\":");
    raw_bytes(&node.name, out);
    match &node.kind {
        NodeKind::File { size, content } => {
            number_field(b",\"type\":\"file\",\"size\":", *size, out);
            out.extend_from_slice(b",\"content\":[");
            for (position, id) in content.iter().enumerate() {
                if position > 0 {
                    out.push(b',');
                }
                blob_id(id, out);
            }
            out.push(b']');
        }
        NodeKind::Dir { subtree } => {
            out.extend_from_slice(b",\"type\":\"dir\",\"subtree\":");
            blob_id(subtree, out);
        }
        NodeKind::Symlink { target } => {
            out.extend_from_slice(b",\"type\":\"symlink\",\"target\":");
            raw_bytes(target, out);
        }
        NodeKind::Fifo => out.extend_from_slice(b",\"type\":\"fifo\""),
        NodeKind::CharDevice { rdev } => {
            number_field(b",\"type\":\"chardev\",\"rdev\":", *rdev, out);
        }
        NodeKind::BlockDevice { rdev } => {
            number_field(b",\"type\":\"blockdev\",\"rdev\":", *rdev, out);
        }
    }
    metadata(&node.meta, out);
    out.push(b'}');
}

fn metadata(meta: &Metadata, out: &mut Vec<u8>) {
    number_field(b",\"mode\":", meta.mode, out);
    number_field(b",\"uid\":", meta.uid, out);
    number_field(b",\"gid\":", meta.gid, out);
    timestamp_field(b",\"mtime\":", &meta.mtime, out);
    timestamp_field(b",\"ctime\":", &meta.ctime, out);
    number_field(b",\"inode\":", meta.inode, out);
    number_field(b",\"device\":", meta.device, out);
    if meta.links != 1 {
        number_field(b",\"links\":", meta.links, out);
    }
}

fn timestamp_field(key: &[u8], time: &Timestamp, out: &mut Vec<u8>) {
    out.extend_from_slice(key);
    number_field(b"{\"secs\":", time.secs, out);
    number_field(b",\"nanos\":", time.nanos, out);
    out.push(b'}');
}

/// `key` (with its separator and colon), then the number.
fn number_field(key: &[u8], value: impl itoa::Integer, out: &mut Vec<u8>) {
    out.extend_from_slice(key);
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

fn blob_id(id: &BlobId, out: &mut Vec<u8>) {
    out.push(b'"');
    id.append_hex(out);
    out.push(b'"');
}

/// As [`crate::format::raw_bytes`]: a JSON string when UTF-8, else `{"base64":"..."}`.
fn raw_bytes(bytes: &[u8], out: &mut Vec<u8>) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        out.extend_from_slice(b"{\"base64\":\"");
        let start = out.len();
        let length = base64::encoded_len(bytes.len(), true).expect("a name's base64 fits");
        out.resize(start + length, 0);
        base64::engine::general_purpose::STANDARD
            .encode_slice(bytes, &mut out[start..])
            .expect("the room is what encoded_len says");
        out.extend_from_slice(b"\"}");
        return;
    };
    string(text, out);
}

/// A JSON string, escaped as serde_json escapes: quote, backslash and control characters only.
fn string(text: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut start = 0;
    for (at, &byte) in bytes.iter().enumerate() {
        if byte >= 0x20 && byte != b'"' && byte != b'\\' {
            continue;
        }
        out.extend_from_slice(&bytes[start..at]);
        start = at + 1;
        match byte {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            _ => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(byte >> 4) as usize],
                HEX[(byte & 0xf) as usize],
            ]),
        }
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::super::{Metadata, Node, NodeKind, Timestamp, Tree};
    use super::encode_tree;
    use crate::ids::BlobId;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// Names and targets of every kind the encoder treats apart: plain, escaped, control
    /// characters, multi-byte UTF-8, and bytes that are not UTF-8 (base64).
    fn bytes(rng: &mut StdRng) -> Vec<u8> {
        let pieces: [&[u8]; 10] = [
            b"plain",
            b"\"",
            b"\\",
            b"\n\r\t\x08\x0c",
            b"\x00\x01\x1f\x7f",
            "é€😀".as_bytes(),
            b"/",
            b"\xff",
            b"\xc3",
            b"",
        ];
        (0..rng.gen_range(0..6))
            .flat_map(|_| pieces[rng.gen_range(0..pieces.len())].iter().copied())
            .collect()
    }

    fn time(rng: &mut StdRng) -> Timestamp {
        Timestamp {
            secs: rng.gen_range(i64::MIN..=i64::MAX) >> rng.gen_range(0..64),
            nanos: rng.gen_range(0..1_000_000_000),
        }
    }

    fn node(rng: &mut StdRng) -> Node {
        let id = |rng: &mut StdRng| BlobId::from_bytes(rng.gen());
        let kind = match rng.gen_range(0..6) {
            0 => NodeKind::File {
                size: rng.gen(),
                content: (0..rng.gen_range(0..4)).map(|_| id(rng)).collect(),
            },
            1 => NodeKind::Dir { subtree: id(rng) },
            2 => NodeKind::Symlink { target: bytes(rng) },
            3 => NodeKind::Fifo,
            4 => NodeKind::CharDevice { rdev: rng.gen() },
            _ => NodeKind::BlockDevice { rdev: rng.gen() },
        };
        Node {
            name: bytes(rng),
            kind,
            meta: Metadata {
                mode: rng.gen(),
                uid: rng.gen(),
                gid: rng.gen(),
                mtime: time(rng),
                ctime: time(rng),
                inode: rng.gen(),
                device: rng.gen(),
                links: [0, 1, 1, 2, u64::MAX][rng.gen_range(0..5)],
            },
        }
    }

    #[test]
    fn writes_what_the_derived_encoder_writes() {
        let mut rng = StdRng::seed_from_u64(20261203);
        for _ in 0..2000 {
            let tree = Tree {
                nodes: (0..rng.gen_range(0..5)).map(|_| node(&mut rng)).collect(),
            };
            let derived = serde_json::to_vec(&tree).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&tree.to_bytes()),
                String::from_utf8_lossy(&derived),
                "{tree:?}"
            );
            assert_eq!(Tree::from_bytes(&derived).unwrap(), tree);
        }
    }

    #[test]
    fn appends_to_what_the_buffer_holds() {
        let mut rng = StdRng::seed_from_u64(7);
        let tree = Tree {
            nodes: vec![node(&mut rng)],
        };
        let mut buffer = b"kept".to_vec();
        encode_tree(&tree, &mut buffer);
        assert_eq!(&buffer[..4], b"kept");
        assert_eq!(&buffer[4..], tree.to_bytes().as_slice());
    }
}
