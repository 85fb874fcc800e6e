//! Reading a node without `#[serde(flatten)]`: serde buffers every field of a flattened struct
//! into a generic map before it decodes it, and an untagged enum (a name as text or base64) the
//! same, which made decoding the parent snapshot's trees the largest cost of a quiet night. This
//! visitor reads each field once, straight into its place. It accepts what the derived decoder
//! accepted: the same fields, unknown ones ignored, the same ones required; a key that is not
//! UTF-8, which the derived one refused, is ignored as unknown (a tree holding one is not what
//! this program writes, so it is never reused by id either).

use super::{Metadata, Node, NodeKind, Timestamp};
use crate::ids::BlobId;
use base64::Engine;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::fmt;

/// A node's field, by its key.
#[derive(Clone, Copy)]
enum Field {
    Name,
    Type,
    Size,
    Content,
    Subtree,
    Target,
    Rdev,
    Mode,
    Uid,
    Gid,
    Mtime,
    Ctime,
    Inode,
    Device,
    Links,
    Other,
}

impl Field {
    fn of(key: &[u8]) -> Field {
        match key {
            b"name" => Field::Name,
            b"type" => Field::Type,
            b"size" => Field::Size,
            b"content" => Field::Content,
            b"subtree" => Field::Subtree,
            b"target" => Field::Target,
            b"rdev" => Field::Rdev,
            b"mode" => Field::Mode,
            b"uid" => Field::Uid,
            b"gid" => Field::Gid,
            b"mtime" => Field::Mtime,
            b"ctime" => Field::Ctime,
            b"inode" => Field::Inode,
            b"device" => Field::Device,
            b"links" => Field::Links,
            _ => Field::Other,
        }
    }
}

#[derive(Clone, Copy)]
enum KindTag {
    File,
    Dir,
    Symlink,
    Fifo,
    CharDevice,
    BlockDevice,
}

const KIND_TAGS: &[&str] = &["file", "dir", "symlink", "fifo", "chardev", "blockdev"];

impl KindTag {
    fn of<E: de::Error>(tag: &[u8]) -> Result<KindTag, E> {
        Ok(match tag {
            b"file" => KindTag::File,
            b"dir" => KindTag::Dir,
            b"symlink" => KindTag::Symlink,
            b"fifo" => KindTag::Fifo,
            b"chardev" => KindTag::CharDevice,
            b"blockdev" => KindTag::BlockDevice,
            other => {
                let other = String::from_utf8_lossy(other);
                return Err(de::Error::unknown_variant(&other, KIND_TAGS));
            }
        })
    }
}

/// Reads a key or a tag as serde_json hands a string's bytes to a bytes visitor: each node has
/// fifteen of them, and this skips checking that each is UTF-8 (only known ASCII ones match).
struct Word<T>(std::marker::PhantomData<T>);

impl<T> Word<T> {
    fn new() -> Word<T> {
        Word(std::marker::PhantomData)
    }
}

impl Visitor<'_> for Word<Field> {
    type Value = Field;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_bytes<E: de::Error>(self, key: &[u8]) -> Result<Field, E> {
        Ok(Field::of(key))
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Field, E> {
        Ok(Field::of(key.as_bytes()))
    }
}

impl Visitor<'_> for Word<KindTag> {
    type Value = KindTag;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a node type")
    }

    fn visit_bytes<E: de::Error>(self, tag: &[u8]) -> Result<KindTag, E> {
        KindTag::of(tag)
    }

    fn visit_str<E: de::Error>(self, tag: &str) -> Result<KindTag, E> {
        KindTag::of(tag.as_bytes())
    }
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Field, D::Error> {
        deserializer.deserialize_bytes(Word::<Field>::new())
    }
}

impl<'de> Deserialize<'de> for KindTag {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<KindTag, D::Error> {
        deserializer.deserialize_bytes(Word::<KindTag>::new())
    }
}

/// Bytes written by [`crate::format::raw_bytes`]: a string, or `{"base64": "..."}`.
struct RawBytes(Vec<u8>);

impl<'de> Deserialize<'de> for RawBytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<RawBytes, D::Error> {
        deserializer.deserialize_any(RawBytesVisitor)
    }
}

struct RawBytesVisitor;

impl<'de> Visitor<'de> for RawBytesVisitor {
    type Value = RawBytes;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string or {\"base64\": ...}")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<RawBytes, E> {
        Ok(RawBytes(text.as_bytes().to_vec()))
    }

    fn visit_string<E: de::Error>(self, text: String) -> Result<RawBytes, E> {
        Ok(RawBytes(text.into_bytes()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawBytes, A::Error> {
        let mut encoded: Option<String> = None;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == "base64" {
                encoded = Some(map.next_value()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        let encoded = encoded.ok_or_else(|| de::Error::missing_field("base64"))?;
        base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map(RawBytes)
            .map_err(de::Error::custom)
    }
}

/// A file's content: ids in order.
struct Content(Vec<BlobId>);

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Content, D::Error> {
        deserializer.deserialize_seq(ContentVisitor)
    }
}

struct ContentVisitor;

impl<'de> Visitor<'de> for ContentVisitor {
    type Value = Content;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of blob ids")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Content, A::Error> {
        let mut ids = Vec::with_capacity(seq.size_hint().unwrap_or(1).min(4096));
        while let Some(id) = seq.next_element::<BlobId>()? {
            ids.push(id);
        }
        Ok(Content(ids))
    }
}

/// The fields of one node as read, before they are checked to make a whole node.
#[derive(Default)]
struct Fields {
    name: Option<Vec<u8>>,
    tag: Option<KindTag>,
    size: Option<u64>,
    content: Option<Vec<BlobId>>,
    subtree: Option<BlobId>,
    target: Option<Vec<u8>>,
    rdev: Option<u64>,
    mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    mtime: Option<Timestamp>,
    ctime: Option<Timestamp>,
    inode: Option<u64>,
    device: Option<u64>,
    links: Option<u64>,
}

fn required<T, E: de::Error>(value: Option<T>, field: &'static str) -> Result<T, E> {
    value.ok_or_else(|| de::Error::missing_field(field))
}

impl Fields {
    fn read<'de, A: MapAccess<'de>>(&mut self, field: Field, map: &mut A) -> Result<(), A::Error> {
        match field {
            Field::Name => self.name = Some(map.next_value::<RawBytes>()?.0),
            Field::Type => self.tag = Some(map.next_value()?),
            Field::Size => self.size = Some(map.next_value()?),
            Field::Content => self.content = Some(map.next_value::<Content>()?.0),
            Field::Subtree => self.subtree = Some(map.next_value()?),
            Field::Target => self.target = Some(map.next_value::<RawBytes>()?.0),
            Field::Rdev => self.rdev = Some(map.next_value()?),
            Field::Mode => self.mode = Some(map.next_value()?),
            Field::Uid => self.uid = Some(map.next_value()?),
            Field::Gid => self.gid = Some(map.next_value()?),
            Field::Mtime => self.mtime = Some(map.next_value()?),
            Field::Ctime => self.ctime = Some(map.next_value()?),
            Field::Inode => self.inode = Some(map.next_value()?),
            Field::Device => self.device = Some(map.next_value()?),
            Field::Links => self.links = Some(map.next_value()?),
            Field::Other => {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }

    fn into_node<E: de::Error>(self) -> Result<Node, E> {
        let kind = match required(self.tag, "type")? {
            KindTag::File => NodeKind::File {
                size: required(self.size, "size")?,
                content: required(self.content, "content")?,
            },
            KindTag::Dir => NodeKind::Dir {
                subtree: required(self.subtree, "subtree")?,
            },
            KindTag::Symlink => NodeKind::Symlink {
                target: required(self.target, "target")?,
            },
            KindTag::Fifo => NodeKind::Fifo,
            KindTag::CharDevice => NodeKind::CharDevice {
                rdev: required(self.rdev, "rdev")?,
            },
            KindTag::BlockDevice => NodeKind::BlockDevice {
                rdev: required(self.rdev, "rdev")?,
            },
        };
        let meta = Metadata {
            mode: required(self.mode, "mode")?,
            uid: required(self.uid, "uid")?,
            gid: required(self.gid, "gid")?,
            mtime: required(self.mtime, "mtime")?,
            ctime: required(self.ctime, "ctime")?,
            inode: required(self.inode, "inode")?,
            device: required(self.device, "device")?,
            links: self.links.unwrap_or(1),
        };
        Ok(Node {
            name: required(self.name, "name")?,
            kind,
            meta,
        })
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a tree node")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut fields = Fields::default();
        while let Some(field) = map.next_key::<Field>()? {
            fields.read(field, &mut map)?;
        }
        fields.into_node()
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Node, D::Error> {
        deserializer.deserialize_map(NodeVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{raw_bytes, Metadata, Node, NodeKind, Tree};
    use serde::Deserialize;

    /// The decoder this module replaces, kept to check that both read the same.
    #[derive(Deserialize, Debug)]
    struct DerivedNode {
        #[serde(with = "raw_bytes")]
        name: Vec<u8>,
        #[serde(flatten)]
        kind: NodeKind,
        #[serde(flatten)]
        meta: Metadata,
    }

    #[derive(Deserialize)]
    struct DerivedTree {
        nodes: Vec<DerivedNode>,
    }

    fn derived(json: &str) -> Result<Vec<Node>, String> {
        let tree: DerivedTree = serde_json::from_str(json).map_err(|e| e.to_string())?;
        Ok(tree
            .nodes
            .into_iter()
            .map(|n| Node {
                name: n.name,
                kind: n.kind,
                meta: n.meta,
            })
            .collect())
    }

    #[test]
    fn ignores_a_key_that_is_not_utf8() {
        let mut bytes = br#"{"nodes":[{"name":"a","type":"fifo",""#.to_vec();
        bytes.push(0xff);
        bytes.extend_from_slice(br#"":1,"#);
        bytes.extend_from_slice(META.as_bytes());
        bytes.extend_from_slice(b"}]}");
        let tree = Tree::from_bytes(&bytes).unwrap();
        assert_eq!(tree.nodes[0].name, b"a");
        assert_ne!(tree.to_bytes(), bytes, "such a tree is never reused by id");
    }

    fn visited(json: &str) -> Result<Vec<Node>, String> {
        Tree::from_bytes(json.as_bytes())
            .map(|tree| tree.nodes)
            .map_err(|e| e.to_string())
    }

    const META: &str = r#""mode":420,"uid":1,"gid":2,"mtime":{"secs":5,"nanos":6},"ctime":{"secs":7,"nanos":8},"inode":9,"device":10"#;

    #[test]
    fn reads_what_the_derived_decoder_read() {
        let id = "ab".repeat(32);
        let accepted = [
            format!(
                r#"{{"nodes":[{{"name":"a","type":"file","size":3,"content":["{id}"],{META}}}]}}"#
            ),
            format!(
                r#"{{"nodes":[{{"type":"dir","subtree":"{id}","name":{{"base64":"/3g="}},{META},"links":3}}]}}"#
            ),
            format!(
                r#"{{"nodes":[{{"name":"l","type":"symlink","target":{{"base64":"/w=="}},{META},"extra":[1,{{"x":2}}]}}]}}"#
            ),
            format!(
                r#"{{"nodes":[{{"name":"f","type":"fifo",{META}}},{{"name":"c","type":"chardev","rdev":77,{META}}},{{"name":"b","type":"blockdev","rdev":78,{META}}}]}}"#
            ),
            format!(r#"{{"nodes":[{{"name":"e","type":"file","size":0,"content":[],{META}}}]}}"#),
        ];
        for json in &accepted {
            assert_eq!(visited(json).unwrap(), derived(json).unwrap(), "{json}");
        }
        let refused = [
            format!(r#"{{"nodes":[{{"name":"a","type":"file","size":3,{META}}}]}}"#),
            format!(r#"{{"nodes":[{{"name":"a","type":"dir",{META}}}]}}"#),
            format!(r#"{{"nodes":[{{"type":"fifo",{META}}}]}}"#),
            format!(r#"{{"nodes":[{{"name":"a","type":"socket",{META}}}]}}"#),
            format!(
                r#"{{"nodes":[{{"name":"a","type":"file","size":1,"content":["xy"],{META}}}]}}"#
            ),
            r#"{"nodes":[{"name":"a","type":"fifo","mode":420}]}"#.to_owned(),
            r#"{"nodes":[{"name":{"base64":"!!"},"type":"fifo"}]}"#.to_owned(),
            format!(r#"{{"nodes":[{{"name":"a","type":[102,105,102,111],{META}}}]}}"#),
            format!(r#"{{"nodes":[{{"name":"a","type":"FIFO",{META}}}]}}"#),
        ];
        // Keys and tags may be escaped, as JSON allows.
        let escaped = format!(r#"{{"nodes":[{{"n\u0061me":"a","type":"f\u0069fo",{META}}}]}}"#);
        assert_eq!(visited(&escaped).unwrap(), derived(&escaped).unwrap());
        for json in &refused {
            assert!(visited(json).is_err(), "accepted {json}");
            assert!(
                derived(json).is_err(),
                "the derived decoder accepted {json}"
            );
        }
    }
}
