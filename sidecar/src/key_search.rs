//! Opening a repository: which key objects are tried, in which order, and how much Argon2id work
//! one open may spend on them.
//!
//! Anyone who may write to the repository (an append-only login too) may add key objects, and
//! each may ask for up to 4 GiB × 64 passes of Argon2id. Trying them all would let a few hundred
//! of them hold every backup, restore and plugin command for hours. So an open
//!
//! - tries first the key the caller names (`--key-hint`, a prefix of its id as `key list` shows
//!   it), then the others from the cheapest to derive;
//! - refuses, without deriving, a key that asks for more than [`MOST_KEY_MEMORY_KIB`] of memory
//!   or [`MOST_KEY_WORK_KIB_PASSES`] of work;
//! - derives at most [`MOST_KEYS_TRIED`] keys and [`MOST_OPEN_WORK_KIB_PASSES`] of work in all,
//!   then fails saying so, and how to name the right key.

use crate::backend::{ObjectInfo, ObjectKind, SharedBackend};
use crate::crypto::{KdfParams, RepositoryKeys};
use crate::error::{Error, Result};
use crate::format::config::{ConfigFile, RepositoryParams};
use crate::format::key::{KeyFile, UnwrapError};
use crate::ids::ObjectId;

/// Most key objects one open derives a key for.
pub const MOST_KEYS_TRIED: usize = 16;
/// Most memory one key's Argon2id may ask for: 1 GiB (16 times the default of 64 MiB).
pub const MOST_KEY_MEMORY_KIB: u32 = 1024 * 1024;
/// Most Argon2id work (memory × passes) one key may ask for: 1 GiB × 4 passes, about 21 times
/// the default 64 MiB × 3.
pub const MOST_KEY_WORK_KIB_PASSES: u64 = 4 * 1024 * 1024;
/// Most Argon2id work one open spends on all the keys it tries: 8 GiB-passes, e.g. two keys at
/// the limit or 42 keys of the default parameters.
pub const MOST_OPEN_WORK_KIB_PASSES: u64 = 8 * 1024 * 1024;

/// What opened the repository.
pub(crate) struct Unlocked {
    pub key_id: ObjectId,
    pub keys: RepositoryKeys,
    pub params: RepositoryParams,
}

/// Checks that an object's bytes hash to its name, so a swapped or damaged object is caught and
/// named before anything else reads it.
pub(crate) fn verify_name(name: &str, stored: &[u8], what: &str) -> Result<()> {
    if ObjectId::of_bytes(stored).to_hex() != name {
        return Err(Error::Corrupt {
            what: what.to_owned(),
            reason: "its bytes do not match its name (SHA-256): the object was changed or damaged"
                .into(),
        });
    }
    Ok(())
}

/// The Argon2id work `params` asks for, in KiB × passes.
fn work(params: &KdfParams) -> u64 {
    u64::from(params.memory_kib) * u64::from(params.iterations)
}

/// Why a key is not derived: it asks for more than one key may.
fn too_costly(params: &KdfParams) -> Option<String> {
    (params.memory_kib > MOST_KEY_MEMORY_KIB || work(params) > MOST_KEY_WORK_KIB_PASSES).then(
        || {
            format!(
                "its Argon2id parameters ({} KiB, {} passes) ask for more than a key may \
                 (1 GiB, and 1 GiB × 4 passes of work)",
                params.memory_kib, params.iterations
            )
        },
    )
}

/// The keys read and parsed, the hinted one first, then the cheapest to derive; unreadable ones
/// are left out (the first such error kept).
async fn readable_keys(
    backend: &SharedBackend,
    infos: Vec<ObjectInfo>,
    hint: Option<&str>,
    skipped: &mut Option<Error>,
) -> Result<Vec<(String, KeyFile)>> {
    let mut keys = Vec::with_capacity(infos.len());
    for info in infos {
        let what = format!("key {}", info.name);
        let stored = backend.read(ObjectKind::Keys, &info.name).await?;
        match verify_name(&info.name, &stored, &what)
            .and_then(|()| Ok(KeyFile::parse(&stored, &what)?))
        {
            Ok(key) => keys.push((info.name, key)),
            Err(error) => {
                tracing::warn!(%error, "skipping an unreadable key object");
                skipped.get_or_insert(error);
            }
        }
    }
    let hinted = |name: &str| hint.is_some_and(|hint| name.starts_with(&hint.to_lowercase()));
    keys.sort_by_key(|(name, key)| (!hinted(name), work(&key.kdf.params), name.clone()));
    Ok(keys)
}

/// Opens the repository's keys with `password`, within the limits above.
pub(crate) async fn unlock(
    backend: &SharedBackend,
    password: &[u8],
    hint: Option<&str>,
) -> Result<Unlocked> {
    let config = ConfigFile::parse(&backend.read(ObjectKind::Config, "config").await?)?;
    let infos = backend.list(ObjectKind::Keys).await?;
    if infos.is_empty() {
        return Err(Error::NoKeys);
    }
    let total = infos.len();
    // A key that opens but does not open the config (left by an interrupted `init`) is skipped,
    // and so is an unreadable key object: another key may still open the repository.
    let mut skipped: Option<Error> = None;
    let keys = readable_keys(backend, infos, hint, &mut skipped).await?;
    let (mut refused, mut tried, mut spent) = (0, 0, 0u64);
    let mut config_error: Option<Error> = None;
    for (name, key) in keys {
        let params = key.kdf.params;
        if let Some(reason) = too_costly(&params) {
            tracing::warn!(key = %name, "not trying a key: {reason}");
            continue;
        }
        if tried == MOST_KEYS_TRIED || spent + work(&params) > MOST_OPEN_WORK_KIB_PASSES {
            return Err(Error::KeySearchSpent { tried, total });
        }
        tried += 1;
        spent += work(&params);
        let (password, what) = (password.to_vec(), format!("key {name}"));
        let unwrapped = tokio::task::spawn_blocking(move || key.unwrap_master(&password, &what))
            .await
            .map_err(|e| Error::Interrupted(e.to_string()))?;
        let master = match unwrapped {
            Ok(master) => master,
            Err(UnwrapError::WrongPassword) => {
                refused += 1;
                continue;
            }
            Err(UnwrapError::Format(error)) => {
                skipped.get_or_insert(error.into());
                continue;
            }
        };
        let keys = master.derive();
        match config.open(&keys.sealer) {
            Ok(params) => {
                let key_id = name.parse().map_err(|_| Error::Corrupt {
                    what: format!("key {name}"),
                    reason: "its name is not a hex id".into(),
                })?;
                return Ok(Unlocked {
                    key_id,
                    keys,
                    params,
                });
            }
            Err(error) => {
                tracing::warn!(key = %name, %error, "a key opens with this password but not the config");
                config_error.get_or_insert(error.into());
            }
        }
    }
    // A key that opened means the password was right and the repository is damaged; a key that
    // refused means the password is wrong (a damaged key cannot be told from another's).
    match (config_error, skipped) {
        (Some(error), _) => Err(error),
        (None, Some(error)) if refused == 0 => Err(error),
        _ => Err(Error::WrongPassword),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_over_the_limits_is_refused_before_deriving() {
        let default = KdfParams::default();
        assert!(too_costly(&default).is_none());
        let flood = KdfParams {
            memory_kib: 1024 * 1024,
            iterations: 16,
            parallelism: 4,
        };
        assert!(too_costly(&flood).is_some());
        let wide = KdfParams {
            memory_kib: 2 * 1024 * 1024,
            iterations: 1,
            parallelism: 4,
        };
        assert!(too_costly(&wide).is_some());
        let limit = KdfParams {
            memory_kib: 1024 * 1024,
            iterations: 4,
            parallelism: 4,
        };
        assert!(too_costly(&limit).is_none());
        assert_eq!(MOST_OPEN_WORK_KIB_PASSES / work(&default), 42);
    }
}
