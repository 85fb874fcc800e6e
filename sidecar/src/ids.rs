//! Identities of the things in a repository, each its own type so they cannot be mixed up.

mod digits;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};
use std::fmt;
use std::str::FromStr;
use thiserror::Error;

/// A 32-byte identity, written as 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id32(pub [u8; 32]);

#[derive(Debug, Error)]
#[error("{text:?} is not a 64-digit hex id")]
pub struct ParseIdError {
    text: String,
}

impl Id32 {
    pub fn to_hex(&self) -> String {
        self.with_hex(str::to_owned)
    }

    /// Hands the id's hex digits to `use_text` without allocating them.
    fn with_hex<R>(&self, use_text: impl FnOnce(&str) -> R) -> R {
        let text = digits::encode(&self.0);
        use_text(std::str::from_utf8(&text).expect("hex digits are ASCII"))
    }

    fn from_hex(text: &[u8]) -> Result<Id32, ParseIdError> {
        digits::decode(text).map(Id32).ok_or_else(|| ParseIdError {
            text: String::from_utf8_lossy(text).into_owned(),
        })
    }
}

impl FromStr for Id32 {
    type Err = ParseIdError;
    fn from_str(text: &str) -> Result<Id32, ParseIdError> {
        Id32::from_hex(text.as_bytes())
    }
}

/// Reads an id from its hex text as the format hands it over, borrowed where it can be: no
/// allocation, and (from JSON) no UTF-8 check of digits that are checked one by one anyway.
struct HexVisitor;

impl Visitor<'_> for HexVisitor {
    type Value = Id32;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a 64-digit hex id")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Id32, E> {
        Id32::from_hex(text.as_bytes()).map_err(E::custom)
    }

    fn visit_bytes<E: de::Error>(self, text: &[u8]) -> Result<Id32, E> {
        Id32::from_hex(text).map_err(E::custom)
    }
}

impl Serialize for Id32 {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.with_hex(|text| serializer.serialize_str(text))
    }
}

impl<'de> Deserialize<'de> for Id32 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Id32, D::Error> {
        // serde_json hands a string's raw bytes to a bytes visitor; other formats call visit_str.
        deserializer.deserialize_bytes(HexVisitor)
    }
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub Id32);

        impl $name {
            pub fn from_bytes(bytes: [u8; 32]) -> Self {
                $name(Id32(bytes))
            }
            pub fn as_bytes(&self) -> &[u8; 32] {
                &self.0 .0
            }
            pub fn to_hex(&self) -> String {
                self.0.to_hex()
            }
            /// Appends the id's 64 hex digits to `out`.
            pub fn append_hex(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&digits::encode(&self.0 .0));
            }
            /// The first 8 hex digits, as shown in listings.
            pub fn short(&self) -> String {
                self.0.to_hex()[..8].to_owned()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.with_hex(|text| f.write_str(text))
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.short())
            }
        }

        impl FromStr for $name {
            type Err = ParseIdError;
            fn from_str(text: &str) -> Result<Self, ParseIdError> {
                Id32::from_str(text).map($name)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                self.0.serialize(serializer)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                Id32::deserialize(deserializer).map($name)
            }
        }
    };
}

id_type!(
    /// A blob (a chunk of file data or a tree): the keyed BLAKE3 hash of its plaintext.
    BlobId
);
id_type!(
    /// A stored object (pack, index, snapshot, key, lock): the SHA-256 of its stored bytes.
    ObjectId
);

impl ObjectId {
    /// The id of stored bytes: their SHA-256.
    pub fn of_bytes(stored: &[u8]) -> ObjectId {
        ObjectId::from_bytes(Sha256::digest(stored).into())
    }
}

id_type!(
    /// A pack of blobs: a `data/` object, named by the SHA-256 of its stored bytes.
    PackId
);
id_type!(
    /// A snapshot: a `snapshots/` object, named by the SHA-256 of its stored bytes.
    SnapshotId
);

/// Packs and snapshots are stored objects: each id names its object, and an object listed in
/// `data/` or `snapshots/` is a pack or a snapshot.
macro_rules! stored_object_id {
    ($name:ident) => {
        impl $name {
            /// The id of stored bytes: their SHA-256.
            pub fn of_bytes(stored: &[u8]) -> $name {
                $name(ObjectId::of_bytes(stored).0)
            }
        }

        impl From<$name> for ObjectId {
            fn from(id: $name) -> ObjectId {
                ObjectId(id.0)
            }
        }

        impl From<ObjectId> for $name {
            fn from(id: ObjectId) -> $name {
                $name(id.0)
            }
        }
    };
}
stored_object_id!(PackId);
stored_object_id!(SnapshotId);

/// What a blob holds; part of its sealed identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BlobKind {
    Data,
    Tree,
}

impl BlobKind {
    /// The byte that stands for the kind in pack headers and associated data.
    pub fn code(self) -> u8 {
        match self {
            BlobKind::Data => 0,
            BlobKind::Tree => 1,
        }
    }

    pub fn from_code(code: u8) -> Option<BlobKind> {
        match code {
            0 => Some(BlobKind::Data),
            1 => Some(BlobKind::Tree),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_through_hex_and_json() {
        let id = ObjectId::of_bytes(b"hello");
        assert_eq!(
            id.to_hex(),
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        let parsed: ObjectId = id.to_hex().parse().unwrap();
        assert_eq!(parsed, id);
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(serde_json::from_str::<ObjectId>(&json).unwrap(), id);
        assert!("xyz".parse::<BlobId>().is_err());
    }
}
