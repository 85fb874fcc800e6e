//! Key objects: list, add, remove, and change a password without rewriting any data.

use crate::backend::ObjectKind;
use crate::crypto::{KdfParams, MasterKey};
use crate::error::{Error, Result};
use crate::format::key::{KeyFile, UnwrapError};
use crate::ids::ObjectId;
use crate::repository::Repository;
use bytes::Bytes;

/// One key object, as listed.
#[derive(Debug, Clone)]
pub struct KeyInfo {
    pub id: ObjectId,
    pub created: String,
    pub hostname: String,
    pub username: String,
    /// Whether this is the key that opened the repository.
    pub current: bool,
}

pub async fn list_keys(repo: &Repository) -> Result<Vec<KeyInfo>> {
    let mut keys = Vec::new();
    for id in repo.list_ids(ObjectKind::Keys).await? {
        let stored = repo.backend().read(ObjectKind::Keys, &id.to_hex()).await?;
        let key = KeyFile::parse(&stored, &format!("key {id}"))?;
        keys.push(KeyInfo {
            id,
            created: key.created,
            hostname: key.hostname,
            username: key.username,
            current: id == repo.key_id(),
        });
    }
    keys.sort_by(|a, b| a.created.cmp(&b.created));
    Ok(keys)
}

/// Adds a key object wrapping the same master key under `new_password`.
pub async fn add_key(
    repo: &Repository,
    current_password: &[u8],
    new_password: &[u8],
) -> Result<ObjectId> {
    if new_password.is_empty() {
        return Err(Error::EmptyNewPassword);
    }
    // Unwrap our own key again: the master key is not kept in memory beyond the derived keys.
    let stored = repo
        .backend()
        .read(ObjectKind::Keys, &repo.key_id().to_hex())
        .await?;
    let what = format!("key {}", repo.key_id());
    let master: MasterKey =
        match KeyFile::parse(&stored, &what)?.unwrap_master(current_password, &what) {
            Ok(master) => master,
            Err(UnwrapError::WrongPassword) => return Err(Error::WrongPassword),
            Err(UnwrapError::Format(error)) => return Err(error.into()),
        };
    let key = KeyFile::wrap(&master, new_password, KdfParams::default())
        .map_err(crate::format::FormatError::from)?;
    let bytes = key.to_bytes();
    let id = ObjectId::of_bytes(&bytes);
    repo.backend()
        .write(ObjectKind::Keys, &id.to_hex(), Bytes::from(bytes))
        .await?;
    Ok(id)
}

/// Removes a key object; never the one in use, never the last one.
pub async fn remove_key(repo: &Repository, id_prefix: &str) -> Result<ObjectId> {
    let keys = list_keys(repo).await?;
    let matches: Vec<&KeyInfo> = keys
        .iter()
        .filter(|k| k.id.to_hex().starts_with(id_prefix))
        .collect();
    let key = match matches.as_slice() {
        [key] => *key,
        [] => {
            return Err(Error::KeyNotFound {
                prefix: id_prefix.to_owned(),
            })
        }
        _ => {
            return Err(Error::AmbiguousKey {
                prefix: id_prefix.to_owned(),
                count: matches.len(),
            })
        }
    };
    if key.current {
        return Err(Error::KeyInUse);
    }
    repo.backend()
        .delete(ObjectKind::Keys, &key.id.to_hex())
        .await?;
    Ok(key.id)
}

/// Changes the password: adds a key for `new_password`, then removes the current one.
pub async fn change_password(
    repo: &Repository,
    current_password: &[u8],
    new_password: &[u8],
) -> Result<ObjectId> {
    let new_id = add_key(repo, current_password, new_password).await?;
    repo.backend()
        .delete(ObjectKind::Keys, &repo.key_id().to_hex())
        .await?;
    Ok(new_id)
}
