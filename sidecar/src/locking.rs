//! Taking, refreshing and releasing repository locks.

use crate::backend::{BackendError, ObjectKind};
use crate::error::{Error, Result};
use crate::format::lock::{Lock, REFRESH_EVERY_SECS};
use crate::ids::ObjectId;
use crate::repository::Repository;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A lock held on the repository; refreshed in the background until released.
#[derive(Debug)]
pub struct LockGuard {
    repo: Repository,
    current: Arc<Mutex<ObjectId>>,
    refresher: tokio::task::JoinHandle<()>,
}

/// The locks of other holders that conflict with the one we want.
async fn conflicting_locks(
    repo: &Repository,
    exclusive: bool,
    ours: Option<ObjectId>,
) -> Result<Vec<Lock>> {
    let now = chrono::Utc::now();
    let mut conflicts = Vec::new();
    for id in repo.list_ids(ObjectKind::Locks).await? {
        if Some(id) == ours {
            continue;
        }
        let lock: Lock = match repo.read_object(ObjectKind::Locks, &id).await {
            Ok(lock) => lock,
            // Released between the listing and the read.
            Err(Error::Backend(BackendError::NotFound { .. })) => continue,
            // Junk or torn: no process holds it, so it protects nothing (`unlock` removes it).
            Err(error @ (Error::Corrupt { .. } | Error::Format(_))) => {
                tracing::warn!(lock = %id, "skipping the damaged lock object locks/{id}: {error}");
                continue;
            }
            Err(error) => return Err(error),
        };
        if !lock.is_stale(now) && (exclusive || lock.exclusive) {
            conflicts.push(lock);
        }
    }
    Ok(conflicts)
}

fn describe(lock: &Lock) -> String {
    format!(
        "{} lock of {} (pid {} on {}, since {})",
        if lock.exclusive { "an exclusive" } else { "a" },
        lock.purpose,
        lock.pid,
        lock.hostname,
        lock.time
    )
}

/// How often a waiting [`acquire`] looks at the locks again.
const LOCK_RETRY_INTERVAL: Duration = Duration::from_secs(10);

/// Takes a lock: shared for backups and restores, exclusive for prune. While another holder's
/// lock conflicts, it looks again every few seconds for up to [`Repository::lock_wait`], then fails
/// with [`Error::Locked`] naming the holder.
pub async fn acquire(repo: &Repository, exclusive: bool, purpose: &str) -> Result<LockGuard> {
    let give_up_at = tokio::time::Instant::now() + repo.lock_wait();
    let mut announced = false;
    loop {
        match try_acquire(repo, exclusive, purpose).await {
            Err(Error::Locked { holder }) if tokio::time::Instant::now() < give_up_at => {
                if !announced {
                    tracing::info!(%holder, "the repository is locked; waiting for it");
                    announced = true;
                }
                let left = give_up_at - tokio::time::Instant::now();
                tokio::time::sleep(left.min(LOCK_RETRY_INTERVAL)).await;
            }
            other => return other,
        }
    }
}

async fn try_acquire(repo: &Repository, exclusive: bool, purpose: &str) -> Result<LockGuard> {
    if let Some(lock) = conflicting_locks(repo, exclusive, None).await?.first() {
        return Err(Error::Locked {
            holder: describe(lock),
        });
    }
    let id = repo
        .write_object(ObjectKind::Locks, &Lock::new(exclusive, purpose))
        .await?;
    // Two processes may have passed the first check at once: look again now that ours is visible.
    if let Some(lock) = conflicting_locks(repo, exclusive, Some(id)).await?.first() {
        repo.backend()
            .delete(ObjectKind::Locks, &id.to_hex())
            .await?;
        return Err(Error::Locked {
            holder: describe(lock),
        });
    }
    let current = Arc::new(Mutex::new(id));
    let refresher = tokio::spawn(refresh_forever(
        repo.clone(),
        current.clone(),
        exclusive,
        purpose.to_owned(),
    ));
    Ok(LockGuard {
        repo: repo.clone(),
        current,
        refresher,
    })
}

async fn refresh_forever(
    repo: Repository,
    current: Arc<Mutex<ObjectId>>,
    exclusive: bool,
    purpose: String,
) {
    loop {
        tokio::time::sleep(Duration::from_secs(REFRESH_EVERY_SECS)).await;
        match repo
            .write_object(ObjectKind::Locks, &Lock::new(exclusive, &purpose))
            .await
        {
            Ok(new_id) => {
                let old_id = std::mem::replace(
                    &mut *current.lock().unwrap_or_else(|p| p.into_inner()),
                    new_id,
                );
                if let Err(error) = repo
                    .backend()
                    .delete(ObjectKind::Locks, &old_id.to_hex())
                    .await
                {
                    tracing::warn!(%error, "could not remove the previous lock object");
                }
            }
            Err(error) => tracing::warn!(%error, "could not refresh the repository lock"),
        }
    }
}

impl LockGuard {
    /// Removes the lock.
    pub async fn release(self) -> Result<()> {
        self.refresher.abort();
        let id = *self.current.lock().unwrap_or_else(|p| p.into_inner());
        self.repo
            .backend()
            .delete(ObjectKind::Locks, &id.to_hex())
            .await?;
        Ok(())
    }
}

/// Removes every lock written on the host `hostname`, whatever its age or kind; returns how many.
///
/// Only for a caller that knows no process of that host uses the repository: the operator gives
/// the pods of one plan one host name and runs them one at a time, so a killed run's locks can be
/// cleared by the next run instead of blocking it until they go stale.
pub async fn remove_locks_of_host(repo: &Repository, hostname: &str) -> Result<usize> {
    let mut removed = 0;
    for id in repo.list_ids(ObjectKind::Locks).await? {
        let lock: Lock = match repo.read_object(ObjectKind::Locks, &id).await {
            Ok(lock) => lock,
            Err(Error::Backend(BackendError::NotFound { .. })) => continue,
            // Not this host's to judge: `unlock` removes damaged locks.
            Err(Error::Corrupt { .. } | Error::Format(_)) => continue,
            Err(error) => return Err(error),
        };
        if lock.hostname == hostname {
            repo.backend()
                .delete(ObjectKind::Locks, &id.to_hex())
                .await?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Removes stale locks (all locks with `all`); returns how many were removed.
pub async fn remove_locks(repo: &Repository, all: bool) -> Result<usize> {
    let now = chrono::Utc::now();
    let mut removed = 0;
    for id in repo.list_ids(ObjectKind::Locks).await? {
        let stale = match repo.read_object::<Lock>(ObjectKind::Locks, &id).await {
            Ok(lock) => lock.is_stale(now),
            Err(Error::Backend(BackendError::NotFound { .. })) => continue,
            // Damaged or foreign: it cannot protect anything. Storage errors are not judged here.
            Err(Error::Corrupt { .. } | Error::Format(_)) => true,
            Err(error) => return Err(error),
        };
        if all || stale {
            repo.backend()
                .delete(ObjectKind::Locks, &id.to_hex())
                .await?;
            removed += 1;
        }
    }
    Ok(removed)
}
