//! The `config` object: what this repository is, readable before any key is opened.
//!
//! ```json
//! {"format":"neverwiped-repository","version":1,"id":"<64 hex>","sealed":"<base64>"}
//! ```
//! `format` and `version` are plain so that any tool fails fast on a repository it cannot read;
//! `sealed` holds the [`RepositoryParams`], sealed under the master key, so they cannot be forged.

use super::FormatError;
use crate::chunker::ChunkerParams;
use crate::crypto::Sealer;
use base64::Engine;
use serde::{Deserialize, Serialize};

pub const FORMAT_MARKER: &str = "neverwiped-repository";
pub const FORMAT_VERSION: u32 = 1;
const CONFIG_ASSOCIATED_DATA: &[u8] = b"neverwiped/config/v1";

/// The plain outer object.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConfigFile {
    pub format: String,
    pub version: u32,
    pub id: String,
    pub sealed: String,
}

/// The authenticated settings of a repository, fixed at `init`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RepositoryParams {
    /// Random id of the repository, 64 hex digits.
    pub id: String,
    pub chunker: ChunkerParams,
    /// Size at which a pack is closed and uploaded.
    pub pack_target_bytes: u32,
}

impl RepositoryParams {
    pub fn new(id: String) -> RepositoryParams {
        RepositoryParams {
            id,
            chunker: ChunkerParams::default(),
            pack_target_bytes: 8 * 1024 * 1024,
        }
    }

    /// The stored bytes of the config object.
    pub fn to_config_bytes(&self, sealer: &Sealer) -> Vec<u8> {
        let inner = serde_json::to_vec(self).expect("params serialise");
        let sealed = sealer.seal(&inner, CONFIG_ASSOCIATED_DATA);
        let outer = ConfigFile {
            format: FORMAT_MARKER.into(),
            version: FORMAT_VERSION,
            id: self.id.clone(),
            sealed: base64::engine::general_purpose::STANDARD.encode(sealed),
        };
        serde_json::to_vec_pretty(&outer).expect("config serialises")
    }
}

impl ConfigFile {
    /// Parses the plain part and checks the format marker and version.
    pub fn parse(stored: &[u8]) -> Result<ConfigFile, FormatError> {
        let config: ConfigFile = serde_json::from_slice(stored).map_err(|_| FormatError::NotARepository {
            reason: "the config object is not a neverwiped config (maybe a restic or other repository)".into(),
        })?;
        if config.format != FORMAT_MARKER {
            return Err(FormatError::NotARepository {
                reason: format!(
                    "the config object names the format {:?}, not {FORMAT_MARKER:?}",
                    config.format
                ),
            });
        }
        if config.version != FORMAT_VERSION {
            return Err(FormatError::invalid(
                "the config object",
                format!(
                    "repository format version {} is not supported by this version of neverwiped (which reads version {FORMAT_VERSION})",
                    config.version
                ),
            ));
        }
        Ok(config)
    }

    /// Opens the sealed parameters and checks that they belong to this config.
    pub fn open(&self, sealer: &Sealer) -> Result<RepositoryParams, FormatError> {
        let sealed = base64::engine::general_purpose::STANDARD
            .decode(&self.sealed)
            .map_err(|e| FormatError::invalid("the config object", e))?;
        let inner = sealer.open(&sealed, CONFIG_ASSOCIATED_DATA, "the config object")?;
        let params: RepositoryParams = serde_json::from_slice(&inner)
            .map_err(|e| FormatError::invalid("the config object", e))?;
        if params.id != self.id {
            return Err(FormatError::invalid(
                "the config object",
                "the sealed id does not match the plain id",
            ));
        }
        params
            .chunker
            .validate()
            .map_err(|m| FormatError::invalid("the config object", m))?;
        if !(1 << 20..=1 << 28).contains(&params.pack_target_bytes) {
            return Err(FormatError::invalid(
                "the config object",
                "the pack target size is out of range",
            ));
        }
        Ok(params)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::MasterKey;

    #[test]
    fn config_round_trips_and_rejects_foreign_formats() {
        let keys = MasterKey::generate().derive();
        let params = RepositoryParams::new("ab".repeat(32));
        let bytes = params.to_config_bytes(&keys.sealer);
        let config = ConfigFile::parse(&bytes).unwrap();
        assert_eq!(config.open(&keys.sealer).unwrap(), params);

        let restic_like = br#"{"version":2,"id":"x","chunker_polynomial":"3"}"#;
        let error = ConfigFile::parse(restic_like).unwrap_err().to_string();
        assert!(error.contains("not a neverwiped repository"), "{error}");

        let future = String::from_utf8(bytes)
            .unwrap()
            .replace("\"version\": 1", "\"version\": 9");
        let error = ConfigFile::parse(future.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(error.contains("version 9 is not supported"), "{error}");
    }

    #[test]
    fn a_forged_plain_id_is_detected() {
        let keys = MasterKey::generate().derive();
        let bytes = RepositoryParams::new("ab".repeat(32)).to_config_bytes(&keys.sealer);
        let forged = String::from_utf8(bytes)
            .unwrap()
            .replace(&"ab".repeat(32), &"cd".repeat(32));
        let config = ConfigFile::parse(forged.as_bytes()).unwrap();
        assert!(config.open(&keys.sealer).is_err());
    }

    #[test]
    fn golden_config_layout() {
        let keys = MasterKey::from_bytes([3; 32]).derive();
        let bytes = RepositoryParams::new("00".repeat(32)).to_config_bytes(&keys.sealer);
        let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let keys_present: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(keys_present, ["format", "id", "sealed", "version"]);
        assert_eq!(value["format"], "neverwiped-repository");
        assert_eq!(value["version"], 1);
        let inner = serde_json::to_string(&RepositoryParams::new("00".repeat(32))).unwrap();
        assert_eq!(
            inner,
            format!(
                "{{\"id\":\"{}\",\"chunker\":{{\"minBytes\":262144,\"avgBytes\":1048576,\"maxBytes\":4194304}},\"packTargetBytes\":8388608}}",
                "00".repeat(32)
            )
        );
    }
}
