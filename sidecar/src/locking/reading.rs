//! Locks of the commands that only read (restore, ls, find, diff, stats, dump, snapshots, mount,
//! check): a shared lock when the repository can take one, so that no prune deletes what they
//! read; none, with a warning, when it cannot be written (a read-only copy, an append-only or
//! read-only server), or when the user asked for none (`--no-lock`).

use super::{acquire, LockGuard};
use crate::error::{Error, Result};
use crate::repository::Repository;

/// Takes a shared lock for the reading command `purpose`, or goes on without one (`None`) when
/// the repository refuses writes or [`Repository::locks_reads`] is off. Another holder's
/// exclusive lock still fails it ([`Error::Locked`]): a prune is deleting.
pub async fn acquire_for_reading(repo: &Repository, purpose: &str) -> Result<Option<LockGuard>> {
    if !repo.locks_reads() {
        tracing::info!("{purpose} runs without a lock (--no-lock)");
        return Ok(None);
    }
    match acquire(repo, false, purpose).await {
        Ok(lock) => Ok(Some(lock)),
        Err(Error::Backend(error)) if error.refuses_writes() => {
            tracing::warn!(
                "the repository cannot be written ({error}): {purpose} goes on without a lock, \
                 so a prune started meanwhile could remove what it reads"
            );
            Ok(None)
        }
        Err(error) => Err(error),
    }
}

/// Releases a lock of [`acquire_for_reading`]. A repository that refuses the delete (an
/// append-only server) keeps the lock object until it is stale; the command's result stands.
pub async fn release_read_lock(lock: Option<LockGuard>, purpose: &str) {
    let Some(lock) = lock else { return };
    if let Err(error) = lock.release().await {
        tracing::warn!(
            %error,
            "could not remove the {purpose}'s lock; it goes stale once this process has ended"
        );
    }
}
