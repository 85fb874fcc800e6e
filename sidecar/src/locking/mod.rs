//! Taking, refreshing and releasing repository locks.
//!
//! A lock that other processes may take for stale protects nothing, so a holder that cannot
//! refresh its lock stops (its work is cancelled by [`LockGuard::held_while`]) before the last
//! stored refresh is old enough for that, and says why. A backup also checks, before it writes its
//! snapshot, that its lock is still there and no exclusive lock was taken over it
//! ([`LockGuard::ensure_still_held`]): a prune that ran meanwhile may have deleted its packs.

use crate::backend::{BackendError, ObjectKind};
use crate::error::{Error, Result};
use crate::format::lock::Lock;
pub use crate::format::lock::LockTimings;
use crate::ids::ObjectId;
use crate::repository::Repository;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

mod held;
mod reading;

pub use held::release_all_held;
pub use reading::{acquire_for_reading, release_read_lock};
use tokio::time::Instant;

/// A lock held on the repository; refreshed in the background until released.
#[derive(Debug)]
pub struct LockGuard {
    repo: Repository,
    exclusive: bool,
    current: Arc<Mutex<ObjectId>>,
    /// Set to why the lock was lost, once it was.
    lost: watch::Receiver<Option<String>>,
    refresher: tokio::task::JoinHandle<()>,
    /// This lock's entry among the locks a stop signal removes.
    token: u64,
}

/// The lock objects of the repository, each read, or why it could not be read when it is
/// damaged (junk or torn: no process holds it). Objects removed meanwhile are left out.
async fn lock_objects(repo: &Repository) -> Result<Vec<(ObjectId, Result<Lock>)>> {
    let mut locks = Vec::new();
    for id in repo.list_ids(ObjectKind::Locks).await? {
        match repo.read_object(ObjectKind::Locks, &id).await {
            Ok(lock) => locks.push((id, Ok(lock))),
            // Released between the listing and the read.
            Err(Error::Backend(BackendError::NotFound { .. })) => {}
            Err(error @ (Error::Corrupt { .. } | Error::Format(_))) => locks.push((id, Err(error))),
            Err(error) => return Err(error),
        }
    }
    Ok(locks)
}

/// The locks of other holders that conflict with the one we want. Stale locks of this host met
/// on the way are removed (their process is gone); a repository that refuses is left as it is.
async fn conflicting_locks(
    repo: &Repository,
    exclusive: bool,
    ours: Option<ObjectId>,
) -> Result<Vec<Lock>> {
    let now = chrono::Utc::now();
    let hostname = crate::host::hostname();
    let mut conflicts = Vec::new();
    for (id, lock) in lock_objects(repo).await? {
        if Some(id) == ours {
            continue;
        }
        let lock = match lock {
            Ok(lock) => lock,
            Err(error) => {
                // Protects nothing (`unlock` removes it).
                tracing::warn!(lock = %id, "skipping the damaged lock object locks/{id}: {error}");
                continue;
            }
        };
        if lock.is_stale(now) {
            if lock.hostname == hostname {
                remove_stale_lock(repo, id, &lock).await;
            }
            continue;
        }
        if exclusive || lock.exclusive {
            conflicts.push(lock);
        }
    }
    Ok(conflicts)
}

/// Deletes a stale lock of this host, saying whose it was.
async fn remove_stale_lock(repo: &Repository, id: ObjectId, lock: &Lock) {
    match repo.backend().delete(ObjectKind::Locks, &id.to_hex()).await {
        Ok(()) => tracing::info!("removed the stale {}", describe(lock)),
        Err(error) => tracing::warn!(%error, "could not remove the stale {}", describe(lock)),
    }
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
    let token = held::register(repo);
    let taken = write_unless_conflicting(repo, exclusive, purpose).await;
    let id = match taken {
        Ok(id) => id,
        Err(error) => {
            held::unregister(token);
            return Err(error);
        }
    };
    let current = Arc::new(Mutex::new(id));
    let (lost_sender, lost) = watch::channel(None);
    let refresher = tokio::spawn(refresh_until_lost(
        repo.clone(),
        current.clone(),
        Lock::new(exclusive, purpose),
        lost_sender,
    ));
    held::set_refresher(token, refresher.abort_handle());
    Ok(LockGuard {
        repo: repo.clone(),
        exclusive,
        current,
        lost,
        refresher,
        token,
    })
}

/// Writes our lock object unless another holder's conflicts, before or just after it is visible.
async fn write_unless_conflicting(
    repo: &Repository,
    exclusive: bool,
    purpose: &str,
) -> Result<ObjectId> {
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
    Ok(id)
}

/// Rewrites the lock every `refresh_every`; when refreshes fail until the last stored one is
/// nearly old enough to be taken for stale, reports the lock lost and stops.
async fn refresh_until_lost(
    repo: Repository,
    current: Arc<Mutex<ObjectId>>,
    template: Lock,
    lost: watch::Sender<Option<String>>,
) {
    let timings = repo.lock_timings();
    let mut last_stored = Instant::now();
    let mut pause = timings.refresh_every;
    loop {
        tokio::time::sleep(pause).await;
        let give_up_at = last_stored + timings.give_up_after();
        let attempt_started = Instant::now();
        let lock = Lock::new(template.exclusive, &template.purpose);
        let left = give_up_at.saturating_duration_since(attempt_started);
        let error =
            match tokio::time::timeout(left, repo.write_object(ObjectKind::Locks, &lock)).await {
                Ok(Ok(new_id)) => {
                    last_stored = attempt_started;
                    pause = timings.refresh_every;
                    replace_lock_object(&repo, &current, new_id).await;
                    continue;
                }
                Ok(Err(error)) => error.to_string(),
                Err(_) => "the refresh did not finish in time".to_owned(),
            };
        let now = Instant::now();
        if now + timings.retry_every.min(timings.safety_margin) >= give_up_at {
            let reason = format!(
                "it could not be refreshed for {:.0} s (last error: {error}); stopping before \
                 other processes may take it for stale",
                (now - last_stored).as_secs_f64()
            );
            tracing::error!("{reason}");
            let _ = lost.send(Some(reason));
            return;
        }
        tracing::warn!(%error, "could not refresh the repository lock; trying again");
        pause = timings.retry_every.min(give_up_at - now);
    }
}

/// Makes `new_id` the current lock object and removes the previous one.
async fn replace_lock_object(repo: &Repository, current: &Mutex<ObjectId>, new_id: ObjectId) {
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

impl LockGuard {
    /// Runs `work` while the lock is held: when the lock is lost first, `work` is dropped (its
    /// uploads stop) and the error says why.
    pub async fn held_while<T>(&self, work: impl Future<Output = Result<T>>) -> Result<T> {
        let mut lost = self.lost.clone();
        tokio::select! {
            result = work => result,
            reason = wait_until_lost(&mut lost) => Err(Error::LockLost(reason)),
        }
    }

    /// Checks that the lock is still stored and that no other holder took an exclusive lock
    /// over it (or, for an exclusive lock, any lock): what a backup must know before its
    /// snapshot makes its packs count.
    pub async fn ensure_still_held(&self) -> Result<()> {
        if let Some(reason) = self.lost.borrow().clone() {
            return Err(Error::LockLost(reason));
        }
        let ours = self.current_id();
        let listed = self.repo.list_ids(ObjectKind::Locks).await?;
        // A refresh may have replaced our object between reading it and the listing.
        let ours = if listed.contains(&ours) {
            ours
        } else {
            self.current_id()
        };
        if !listed.contains(&ours) {
            return Err(Error::LockLost(format!(
                "its lock object locks/{} was removed by another process",
                ours.to_hex()
            )));
        }
        if let Some(lock) = conflicting_locks(&self.repo, self.exclusive, Some(ours))
            .await?
            .into_iter()
            .find(|lock| self.exclusive || lock.exclusive)
        {
            return Err(Error::LockLost(format!(
                "{} was taken over it",
                describe(&lock)
            )));
        }
        Ok(())
    }

    fn current_id(&self) -> ObjectId {
        *self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Removes the lock.
    pub async fn release(self) -> Result<()> {
        self.refresher.abort();
        let id = self.current_id();
        let deleted = self
            .repo
            .backend()
            .delete(ObjectKind::Locks, &id.to_hex())
            .await;
        // Only now: a stop while the delete runs must still find the lock.
        held::unregister(self.token);
        deleted?;
        Ok(())
    }
}

/// Waits until the refresher reports the lock lost, and returns why; forever if it never does.
async fn wait_until_lost(lost: &mut watch::Receiver<Option<String>>) -> String {
    loop {
        if let Some(reason) = lost.borrow_and_update().clone() {
            return reason;
        }
        if lost.changed().await.is_err() {
            // The refresher ended without losing the lock (it was released): nothing to report.
            std::future::pending::<()>().await;
        }
    }
}

/// Removes every lock written on the host `hostname`, whatever its age or kind; returns how many.
///
/// Only for a caller that knows no process of that host uses the repository: the operator gives
/// the pods of one plan one host name and runs them one at a time, so a killed run's locks can be
/// cleared by the next run instead of blocking it until they go stale.
pub async fn remove_locks_of_host(repo: &Repository, hostname: &str) -> Result<usize> {
    let mut removed = 0;
    for (id, lock) in lock_objects(repo).await? {
        // Damaged locks are not this host's to judge: `unlock` removes them.
        if lock.is_ok_and(|lock| lock.hostname == hostname) {
            repo.backend()
                .delete(ObjectKind::Locks, &id.to_hex())
                .await?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Which locks `unlock` removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unlock {
    /// Stale locks of any host, and damaged ones (restic's `unlock`).
    Stale,
    /// Every lock, held or not (`unlock --remove-all`).
    All,
}

/// Removes the locks `which` names; returns how many were removed.
pub async fn remove_locks(repo: &Repository, which: Unlock) -> Result<usize> {
    let now = chrono::Utc::now();
    let mut removed = 0;
    for (id, lock) in lock_objects(repo).await? {
        // Damaged or foreign: it cannot protect anything.
        let stale = lock.map_or(true, |lock| lock.is_stale(now));
        if which == Unlock::All || stale {
            repo.backend()
                .delete(ObjectKind::Locks, &id.to_hex())
                .await?;
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests;
