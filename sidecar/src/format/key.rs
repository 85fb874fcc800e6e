//! Key objects: the master key wrapped under a password. Several may wrap the same master key, so
//! a password can be added or changed without touching data.
//!
//! ```json
//! {"format":"neverwiped-key","version":1,"created":"...","hostname":"...","username":"...",
//!  "kdf":{"algorithm":"argon2id","memoryKib":65536,"iterations":3,"parallelism":4,"salt":"<base64>"},
//!  "wrappedMasterKey":"<base64 of nonce ‖ ciphertext ‖ tag>"}
//! ```

use super::FormatError;
use crate::crypto::{random_bytes, CryptoError, KdfParams, MasterKey, Sealer};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde::{Deserialize, Serialize};
use zeroize::Zeroize;

const KEY_FORMAT: &str = "neverwiped-key";

/// The costliest key derivation a key object may ask for: 16 times the memory `init` writes
/// (64 MiB), a few times its passes and lanes. Anyone who may post objects (append-only
/// credentials suffice) could otherwise make every open spend gigabytes or hours.
pub const MAX_KDF: KdfParams = KdfParams {
    memory_kib: 1024 * 1024,
    iterations: 16,
    parallelism: 16,
};
const WRAP_ASSOCIATED_DATA: &[u8] = b"neverwiped/key/v1";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KdfSettings {
    pub algorithm: String,
    #[serde(flatten)]
    pub params: KdfParams,
    pub salt: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyFile {
    pub format: String,
    pub version: u32,
    pub created: String,
    pub hostname: String,
    pub username: String,
    pub kdf: KdfSettings,
    pub wrapped_master_key: String,
}

/// Why a key object did not yield the master key.
#[derive(Debug)]
pub enum UnwrapError {
    /// The password is not this key's.
    WrongPassword,
    Format(FormatError),
}

impl KeyFile {
    /// Wraps `master` under `password` with fresh salt.
    pub fn wrap(
        master: &MasterKey,
        password: &[u8],
        kdf: KdfParams,
    ) -> Result<KeyFile, CryptoError> {
        let salt: [u8; 16] = random_bytes();
        let mut kek = kdf.derive(password, &salt)?;
        let wrapped = Sealer::new(&kek).seal(master.as_bytes(), WRAP_ASSOCIATED_DATA);
        kek.zeroize();
        Ok(KeyFile {
            format: KEY_FORMAT.into(),
            version: 1,
            created: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
            hostname: crate::host::hostname(),
            username: crate::host::username(),
            kdf: KdfSettings {
                algorithm: "argon2id".into(),
                params: kdf,
                salt: BASE64.encode(salt),
            },
            wrapped_master_key: BASE64.encode(wrapped),
        })
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("key serialises")
    }

    pub fn parse(stored: &[u8], what: &str) -> Result<KeyFile, FormatError> {
        let key: KeyFile =
            serde_json::from_slice(stored).map_err(|e| FormatError::invalid(what, e))?;
        if key.format != KEY_FORMAT || key.version != 1 || key.kdf.algorithm != "argon2id" {
            return Err(FormatError::invalid(
                what,
                "unknown key format, version or KDF",
            ));
        }
        let params = key.kdf.params;
        if params.memory_kib > MAX_KDF.memory_kib
            || params.iterations > MAX_KDF.iterations
            || params.parallelism > MAX_KDF.parallelism
        {
            return Err(FormatError::invalid(
                what,
                format!(
                    "it asks for an Argon2id cost of {} KiB, {} passes, {} lanes, above the \
                     limit of {} KiB, {} passes, {} lanes (init writes {} KiB, {} passes)",
                    params.memory_kib,
                    params.iterations,
                    params.parallelism,
                    MAX_KDF.memory_kib,
                    MAX_KDF.iterations,
                    MAX_KDF.parallelism,
                    KdfParams::default().memory_kib,
                    KdfParams::default().iterations,
                ),
            ));
        }
        Ok(key)
    }

    /// The master key, when `password` is this key's password.
    pub fn unwrap_master(&self, password: &[u8], what: &str) -> Result<MasterKey, UnwrapError> {
        let salt = BASE64
            .decode(&self.kdf.salt)
            .map_err(|e| UnwrapError::Format(FormatError::invalid(what, e)))?;
        let wrapped = BASE64
            .decode(&self.wrapped_master_key)
            .map_err(|e| UnwrapError::Format(FormatError::invalid(what, e)))?;
        let mut kek = self
            .kdf
            .params
            .derive(password, &salt)
            .map_err(|e| UnwrapError::Format(e.into()))?;
        let opened = Sealer::new(&kek).open(&wrapped, WRAP_ASSOCIATED_DATA, what);
        kek.zeroize();
        let mut plain = opened.map_err(|_| UnwrapError::WrongPassword)?;
        let bytes: [u8; 32] = plain.as_slice().try_into().map_err(|_| {
            UnwrapError::Format(FormatError::invalid(what, "wrapped key is not 32 bytes"))
        })?;
        plain.zeroize();
        Ok(MasterKey::from_bytes(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAST: KdfParams = KdfParams {
        memory_kib: 64,
        iterations: 1,
        parallelism: 1,
    };

    #[test]
    fn a_key_opens_with_its_password_only() {
        let master = MasterKey::generate();
        let key = KeyFile::wrap(&master, b"correct horse", FAST).unwrap();
        let parsed = KeyFile::parse(&key.to_bytes(), "keys/x").unwrap();
        let opened = parsed.unwrap_master(b"correct horse", "keys/x").unwrap();
        assert_eq!(opened.as_bytes(), master.as_bytes());
        assert!(matches!(
            parsed.unwrap_master(b"wrong", "keys/x"),
            Err(UnwrapError::WrongPassword)
        ));
    }

    #[test]
    fn two_keys_wrap_the_same_master_key() {
        let master = MasterKey::generate();
        let a = KeyFile::wrap(&master, b"one", FAST).unwrap();
        let b = KeyFile::wrap(&master, b"two", FAST).unwrap();
        assert_ne!(a.wrapped_master_key, b.wrapped_master_key);
        assert_eq!(
            a.unwrap_master(b"one", "a").unwrap().as_bytes(),
            b.unwrap_master(b"two", "b").unwrap().as_bytes()
        );
    }

    #[test]
    fn golden_key_layout() {
        let key = KeyFile::wrap(&MasterKey::generate(), b"pw", FAST).unwrap();
        let value: serde_json::Value = serde_json::from_slice(&key.to_bytes()).unwrap();
        let mut fields: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        fields.sort();
        assert_eq!(
            fields,
            [
                "created",
                "format",
                "hostname",
                "kdf",
                "username",
                "version",
                "wrappedMasterKey"
            ]
        );
        let mut kdf: Vec<&str> = value["kdf"]
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        kdf.sort();
        assert_eq!(
            kdf,
            [
                "algorithm",
                "iterations",
                "memoryKib",
                "parallelism",
                "salt"
            ]
        );
        assert_eq!(
            BASE64
                .decode(value["wrappedMasterKey"].as_str().unwrap())
                .unwrap()
                .len(),
            12 + 32 + 16
        );
    }
}
