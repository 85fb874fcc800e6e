//! The repository's on-disk objects, one module each. `docs/repository-format.md` specifies them.

pub mod config;
pub mod index;
pub mod key;
pub mod lock;
pub mod pack;
pub mod snapshot;
pub mod tree;

use crate::backend::ObjectKind;
use crate::compress::{self, CompressError};
use crate::crypto::{CryptoError, Sealer};
use serde::de::DeserializeOwned;
use serde::Serialize;
use thiserror::Error;

/// The most a metadata object may decompress to (a guard against a hostile zstd bomb).
pub const METADATA_MAX_BYTES: usize = 1 << 30;

#[derive(Debug, Error)]
pub enum FormatError {
    #[error(transparent)]
    Crypto(#[from] CryptoError),
    #[error("{what}: {source}")]
    Compress {
        what: String,
        #[source]
        source: CompressError,
    },
    #[error("{what} is not valid: {message}")]
    Invalid { what: String, message: String },
    #[error("this is not a neverwiped repository: {reason}")]
    NotARepository { reason: String },
}

impl FormatError {
    pub fn invalid(what: impl Into<String>, message: impl ToString) -> FormatError {
        FormatError::Invalid {
            what: what.into(),
            message: message.to_string(),
        }
    }
}

/// Associated data of a metadata object: binds it to its type, so an index cannot pose as a
/// snapshot.
fn object_associated_data(kind: ObjectKind) -> Vec<u8> {
    format!("neverwiped/object/v1/{}", kind.dir_name()).into_bytes()
}

/// Serialises a metadata object: JSON, compressed (codec byte first), sealed.
pub fn seal_object<T: Serialize>(sealer: &Sealer, kind: ObjectKind, value: &T) -> Vec<u8> {
    let json = serde_json::to_vec(value).expect("metadata serialises to JSON");
    let encoded = compress::encode(&json, &mut compress::new_compressor());
    sealer.seal(&encoded, &object_associated_data(kind))
}

/// Opens what [`seal_object`] wrote; `what` names the object in errors.
pub fn open_object<T: DeserializeOwned>(
    sealer: &Sealer,
    kind: ObjectKind,
    stored: &[u8],
    what: &str,
) -> Result<T, FormatError> {
    let json = open_object_json(sealer, kind, stored, what)?;
    serde_json::from_slice(&json).map_err(|e| FormatError::invalid(what, e))
}

/// The JSON bytes [`seal_object`] sealed, authenticated and decompressed, as they were written
/// (`cat` prints them).
pub fn open_object_json(
    sealer: &Sealer,
    kind: ObjectKind,
    stored: &[u8],
    what: &str,
) -> Result<Vec<u8>, FormatError> {
    let encoded = sealer.open(stored, &object_associated_data(kind), what)?;
    compress::decode_unsized(&encoded, METADATA_MAX_BYTES).map_err(|source| FormatError::Compress {
        what: what.to_owned(),
        source,
    })
}

/// Bytes that may not be UTF-8 (file names, link targets, paths), stored as a JSON string when
/// they are UTF-8 and as `{"base64": "..."}` when they are not.
pub mod raw_bytes {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Text(String),
        Bytes { base64: String },
    }

    pub fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(bytes) {
            Ok(text) => serializer.serialize_str(text),
            Err(_) => Repr::Bytes {
                base64: base64::engine::general_purpose::STANDARD.encode(bytes),
            }
            .serialize(serializer),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        match Repr::deserialize(deserializer)? {
            Repr::Text(text) => Ok(text.into_bytes()),
            Repr::Bytes { base64 } => base64::engine::general_purpose::STANDARD
                .decode(base64)
                .map_err(serde::de::Error::custom),
        }
    }
}
