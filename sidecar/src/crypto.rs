//! Keys, sealing and identities: AES-256-GCM for everything stored, Argon2id for passwords, keyed
//! BLAKE3 for blob ids.

use crate::ids::{BlobId, BlobKind};
use rand::RngCore;
use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_256_GCM};
use serde::{Deserialize, Serialize};
use thiserror::Error;
use zeroize::{Zeroize, ZeroizeOnDrop};

/// Bytes of the random nonce in front of every sealed message.
pub const NONCE_BYTES: usize = 12;
/// Bytes of the authentication tag at the end of every sealed message.
pub const TAG_BYTES: usize = 16;
/// What sealing adds to a plaintext.
pub const SEAL_OVERHEAD_BYTES: usize = NONCE_BYTES + TAG_BYTES;

#[derive(Debug, Error)]
pub enum CryptoError {
    #[error(
        "{what} failed authentication: it was changed, corrupted, or belongs to another repository"
    )]
    Authentication { what: String },
    #[error("{what} is too short to be sealed data ({len} bytes)")]
    Truncated { what: String, len: usize },
    #[error("invalid key derivation parameters: {0}")]
    KdfParams(String),
}

/// The repository's master key: 32 random bytes, from which every working key is derived.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct MasterKey([u8; 32]);

impl MasterKey {
    pub fn generate() -> MasterKey {
        let mut bytes = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        MasterKey(bytes)
    }

    pub fn from_bytes(bytes: [u8; 32]) -> MasterKey {
        MasterKey(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The working keys, each derived with its own BLAKE3 context so none reveals another.
    pub fn derive(&self) -> RepositoryKeys {
        let encryption = zeroize::Zeroizing::new(blake3::derive_key(
            "neverwiped 2026-11 v1 AES-256-GCM sealing key",
            &self.0,
        ));
        let blob_id = blake3::derive_key("neverwiped 2026-11 v1 blob id key", &self.0);
        let tree_id = blake3::derive_key("neverwiped 2026-11 v1 tree id key", &self.0);
        let seed = zeroize::Zeroizing::new(blake3::derive_key(
            "neverwiped 2026-11 v1 chunker seed",
            &self.0,
        ));
        RepositoryKeys {
            sealer: Sealer::new(&encryption),
            blob_id_key: blob_id,
            tree_id_key: tree_id,
            chunker_seed: u64::from_le_bytes(seed[..8].try_into().expect("8 bytes")),
        }
    }
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(..)")
    }
}

/// The keys an open repository works with; the id keys and seed are wiped on drop (the
/// sealing key lives inside `ring`, which does not expose it).
#[derive(Clone, ZeroizeOnDrop)]
pub struct RepositoryKeys {
    #[zeroize(skip)]
    pub sealer: Sealer,
    blob_id_key: [u8; 32],
    tree_id_key: [u8; 32],
    /// Secret seed of the content-defined chunker, so cut points reveal nothing about the content.
    pub chunker_seed: u64,
}

impl RepositoryKeys {
    /// The id of a blob: BLAKE3 of its plaintext, keyed with the repository's secret id key, so the
    /// storage cannot confirm that it holds a known file. Trees have a key of their own, so a file
    /// chunk that happens to equal a tree's bytes is still a blob of its own kind.
    pub fn blob_id(&self, kind: BlobKind, plaintext: &[u8]) -> BlobId {
        let key = match kind {
            BlobKind::Data => &self.blob_id_key,
            BlobKind::Tree => &self.tree_id_key,
        };
        BlobId::from_bytes(*blake3::keyed_hash(key, plaintext).as_bytes())
    }
}

impl std::fmt::Debug for RepositoryKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RepositoryKeys(..)")
    }
}

/// AES-256-GCM with a fresh random nonce per message: `nonce ‖ ciphertext ‖ tag`.
///
/// The cipher is `ring`'s (assembly with AES-NI, CLMUL and VAES where the CPU has them); the bytes
/// are standard AES-256-GCM with a 96-bit nonce, as any implementation writes and reads them.
#[derive(Clone)]
pub struct Sealer {
    key: LessSafeKey,
}

impl Sealer {
    pub fn new(key: &[u8; 32]) -> Sealer {
        Sealer {
            key: LessSafeKey::new(
                UnboundKey::new(&AES_256_GCM, key).expect("AES-256-GCM takes a 32-byte key"),
            ),
        }
    }

    /// Encrypts and authenticates `plaintext`, binding it to `associated_data`.
    pub fn seal(&self, plaintext: &[u8], associated_data: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(plaintext.len() + SEAL_OVERHEAD_BYTES);
        out.extend_from_slice(&[0u8; NONCE_BYTES]);
        out.extend_from_slice(plaintext);
        self.seal_in_place(&mut out, associated_data);
        out
    }

    /// Seals in place: `buffer` holds [`NONCE_BYTES`] bytes of room followed by the plaintext, and
    /// holds the sealed message afterwards (the tag is appended). Saves a copy of the plaintext.
    pub fn seal_in_place(&self, buffer: &mut Vec<u8>, associated_data: &[u8]) {
        assert!(
            buffer.len() >= NONCE_BYTES,
            "the buffer starts with room for the nonce"
        );
        let mut nonce = [0u8; NONCE_BYTES];
        rand::thread_rng().fill_bytes(&mut nonce);
        buffer[..NONCE_BYTES].copy_from_slice(&nonce);
        let tag = self
            .key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(associated_data),
                &mut buffer[NONCE_BYTES..],
            )
            .expect("AES-GCM encrypts any message below 64 GiB");
        buffer.extend_from_slice(tag.as_ref());
    }

    /// Checks and decrypts what [`Sealer::seal`] produced; `what` names the data in errors.
    pub fn open(
        &self,
        sealed: &[u8],
        associated_data: &[u8],
        what: &str,
    ) -> Result<Vec<u8>, CryptoError> {
        let mut copy = sealed.to_vec();
        let plaintext_len = self.open_in_place(&mut copy, associated_data, what)?.len();
        copy.copy_within(NONCE_BYTES..NONCE_BYTES + plaintext_len, 0);
        copy.truncate(plaintext_len);
        Ok(copy)
    }

    /// Checks and decrypts a sealed message where it lies, without copying it: returns the
    /// plaintext, the part of `sealed` between the nonce and the tag. On failure the content of
    /// `sealed` is unspecified.
    pub fn open_in_place<'a>(
        &self,
        sealed: &'a mut [u8],
        associated_data: &[u8],
        what: &str,
    ) -> Result<&'a mut [u8], CryptoError> {
        if sealed.len() < SEAL_OVERHEAD_BYTES {
            return Err(CryptoError::Truncated {
                what: what.to_owned(),
                len: sealed.len(),
            });
        }
        let (nonce, rest) = sealed.split_at_mut(NONCE_BYTES);
        let tag_at = rest.len() - TAG_BYTES;
        let (ciphertext, tag) = rest.split_at_mut(tag_at);
        let nonce = Nonce::try_assume_unique_for_key(nonce).expect("12 bytes");
        let tag = Tag::try_from(&tag[..]).expect("16 bytes");
        self.key
            .open_in_place_separate_tag(nonce, Aad::from(associated_data), tag, ciphertext, 0..)
            .map_err(|_| CryptoError::Authentication {
                what: what.to_owned(),
            })
    }
}

/// Associated data that binds a sealed blob to its kind and id: a blob moved, swapped or relabelled
/// inside the repository fails authentication.
pub fn blob_associated_data(kind: BlobKind, id: &BlobId) -> [u8; 51] {
    let mut aad = [0u8; 51];
    aad[..18].copy_from_slice(b"neverwiped/blob/v1");
    aad[18] = kind.code();
    aad[19..].copy_from_slice(id.as_bytes());
    aad
}

/// Argon2id parameters, stored in each key object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KdfParams {
    pub memory_kib: u32,
    pub iterations: u32,
    pub parallelism: u32,
}

impl Default for KdfParams {
    /// RFC 9106's second recommended option: 64 MiB, 3 passes, 4 lanes. Costly to guess at
    /// scale; the lanes are derived in parallel, so opening a repository takes about a tenth of a
    /// second on two cores (the same CPU time as one lane, half the wall time).
    fn default() -> KdfParams {
        KdfParams {
            memory_kib: 64 * 1024,
            iterations: 3,
            parallelism: 4,
        }
    }
}

impl KdfParams {
    /// Derives the 32-byte key that wraps the master key.
    pub fn derive(&self, password: &[u8], salt: &[u8]) -> Result<[u8; 32], CryptoError> {
        // Bounds keep a key object written by someone else from hanging or exhausting every open.
        if self.memory_kib > 4 * 1024 * 1024 || self.iterations > 64 || self.parallelism > 16 {
            return Err(CryptoError::KdfParams(format!(
                "Argon2id parameters {self:?} exceed the limits (4 GiB, 64 passes, 16 lanes)"
            )));
        }
        let params =
            argon2::Params::new(self.memory_kib, self.iterations, self.parallelism, Some(32))
                .map_err(|e| CryptoError::KdfParams(e.to_string()))?;
        let argon =
            argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
        let mut out = [0u8; 32];
        argon
            .hash_password_into(password, salt, &mut out)
            .map_err(|e| CryptoError::KdfParams(e.to_string()))?;
        Ok(out)
    }
}

/// Random bytes for salts and ids.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_data_opens_only_with_the_same_key_and_associated_data() {
        let keys = MasterKey::generate().derive();
        let sealed = keys.sealer.seal(b"secret payload", b"ad-1");
        assert_eq!(sealed.len(), 14 + SEAL_OVERHEAD_BYTES);
        assert_eq!(
            keys.sealer.open(&sealed, b"ad-1", "test").unwrap(),
            b"secret payload"
        );
        assert!(keys.sealer.open(&sealed, b"ad-2", "test").is_err());
        let other = MasterKey::generate().derive();
        assert!(other.sealer.open(&sealed, b"ad-1", "test").is_err());
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let keys = MasterKey::generate().derive();
        let sealed = keys.sealer.seal(b"0123456789", b"ad");
        for byte in 0..sealed.len() {
            let mut tampered = sealed.clone();
            tampered[byte] ^= 0x01;
            let error = keys.sealer.open(&tampered, b"ad", "blob x").unwrap_err();
            assert!(
                error.to_string().contains("blob x failed authentication"),
                "{error}"
            );
        }
        assert!(matches!(
            keys.sealer.open(&sealed[..10], b"ad", "x"),
            Err(CryptoError::Truncated { .. })
        ));
    }

    #[test]
    fn sealing_is_standard_aes_256_gcm() {
        // The stored bytes must not depend on the implementation: RustCrypto's AES-GCM opens what
        // ring seals, and ring opens what RustCrypto seals.
        use aes_gcm::aead::{AeadInPlace, KeyInit};
        let key = [9u8; 32];
        let sealer = Sealer::new(&key);
        let other = aes_gcm::Aes256Gcm::new((&key).into());
        for len in [0usize, 1, 15, 16, 17, 1000, 70_000] {
            let plaintext: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let sealed = sealer.seal(&plaintext, b"ad");
            let mut body = sealed[NONCE_BYTES..sealed.len() - TAG_BYTES].to_vec();
            other
                .decrypt_in_place_detached(
                    aes_gcm::Nonce::from_slice(&sealed[..NONCE_BYTES]),
                    b"ad",
                    &mut body,
                    aes_gcm::Tag::from_slice(&sealed[sealed.len() - TAG_BYTES..]),
                )
                .unwrap();
            assert_eq!(body, plaintext);

            let nonce = [len as u8; NONCE_BYTES];
            let mut theirs = plaintext.clone();
            let tag = other
                .encrypt_in_place_detached(aes_gcm::Nonce::from_slice(&nonce), b"ad", &mut theirs)
                .unwrap();
            let mut stored = nonce.to_vec();
            stored.extend_from_slice(&theirs);
            stored.extend_from_slice(&tag);
            assert_eq!(sealer.open(&stored, b"ad", "x").unwrap(), plaintext);
            assert_eq!(
                sealer.open_in_place(&mut stored, b"ad", "x").unwrap(),
                &plaintext[..]
            );
        }
    }

    #[test]
    fn sealing_in_place_matches_sealing_a_copy() {
        let keys = MasterKey::generate().derive();
        let mut buffer = vec![0u8; NONCE_BYTES];
        buffer.extend_from_slice(b"in place");
        keys.sealer.seal_in_place(&mut buffer, b"ad");
        assert_eq!(buffer.len(), 8 + SEAL_OVERHEAD_BYTES);
        assert_eq!(keys.sealer.open(&buffer, b"ad", "x").unwrap(), b"in place");
    }

    #[test]
    fn the_same_plaintext_seals_differently_each_time() {
        let keys = MasterKey::generate().derive();
        assert_ne!(
            keys.sealer.seal(b"same", b""),
            keys.sealer.seal(b"same", b"")
        );
    }

    #[test]
    fn blob_ids_are_keyed_per_repository() {
        let a = MasterKey::from_bytes([1; 32]).derive();
        let b = MasterKey::from_bytes([2; 32]).derive();
        assert_eq!(
            a.blob_id(BlobKind::Data, b"data"),
            a.blob_id(BlobKind::Data, b"data")
        );
        assert_ne!(
            a.blob_id(BlobKind::Data, b"data"),
            b.blob_id(BlobKind::Data, b"data")
        );
        assert_ne!(
            a.blob_id(BlobKind::Data, b"data").as_bytes(),
            blake3::hash(b"data").as_bytes()
        );
        assert_ne!(
            a.blob_id(BlobKind::Data, b"data"),
            a.blob_id(BlobKind::Tree, b"data")
        );
    }

    #[test]
    fn derived_keys_are_stable_for_a_master_key() {
        // Golden values: a change here would make every existing repository unreadable.
        let keys = MasterKey::from_bytes([7; 32]).derive();
        assert_eq!(
            keys.blob_id(BlobKind::Data, b"neverwiped").to_hex(),
            "6c8ddfd2f9f27f8facd431ade95a455566ac571f098e8370efd991cace6b7d49"
        );
        assert_eq!(keys.chunker_seed, 2362557555301519107);
    }

    #[test]
    fn argon2id_derivation_depends_on_password_and_salt() {
        let params = KdfParams {
            memory_kib: 64,
            iterations: 1,
            parallelism: 1,
        };
        let a = params.derive(b"password", b"salt-salt-salt-1").unwrap();
        assert_eq!(a, params.derive(b"password", b"salt-salt-salt-1").unwrap());
        assert_ne!(a, params.derive(b"Password", b"salt-salt-salt-1").unwrap());
        assert_ne!(a, params.derive(b"password", b"salt-salt-salt-2").unwrap());
    }

    /// Known answers from the reference implementation (Debian's `argon2` command:
    /// `echo -n password | argon2 salt-salt-salt-1 -id -t T -k M -p P -l 32 -r`): lanes derived in
    /// parallel give the same key as the specification's sequential order.
    #[test]
    fn argon2id_with_lanes_matches_the_reference_implementation() {
        let small = KdfParams {
            memory_kib: 64,
            iterations: 1,
            parallelism: 4,
        };
        assert_eq!(
            hex::encode(small.derive(b"password", b"salt-salt-salt-1").unwrap()),
            "023890ec84718a3e3d646d6a44821c104444688a17c961e796227224bfe1689f"
        );
        assert_eq!(
            hex::encode(
                KdfParams::default()
                    .derive(b"password", b"salt-salt-salt-1")
                    .unwrap()
            ),
            "4489ad2328d4699de234c34f29d1a1f3e7b5b784e15728caabdb582706fc914e"
        );
    }
}
