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
    let (lost_sender, lost) = watch::channel(None);
    let refresher = tokio::spawn(refresh_until_lost(
        repo.clone(),
        current.clone(),
        Lock::new(exclusive, purpose),
        lost_sender,
    ));
    Ok(LockGuard {
        repo: repo.clone(),
        exclusive,
        current,
        lost,
        refresher,
    })
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
        self.repo
            .backend()
            .delete(ObjectKind::Locks, &id.to_hex())
            .await?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryBackend;
    use crate::backend::{Backend, BackendResult, ObjectInfo};
    use crate::crypto::KdfParams;
    use async_trait::async_trait;
    use bytes::Bytes;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A memory backend whose lock writes can be made to fail, as on a gate that went away.
    #[derive(Debug, Default)]
    struct LockWritesFail {
        inner: MemoryBackend,
        failing: AtomicBool,
    }

    #[async_trait]
    impl Backend for LockWritesFail {
        fn location(&self) -> String {
            "memory".into()
        }
        async fn create(&self) -> BackendResult<()> {
            self.inner.create().await
        }
        async fn list(&self, kind: ObjectKind) -> BackendResult<Vec<ObjectInfo>> {
            self.inner.list(kind).await
        }
        async fn stat(&self, kind: ObjectKind, name: &str) -> BackendResult<Option<u64>> {
            self.inner.stat(kind, name).await
        }
        async fn read(&self, kind: ObjectKind, name: &str) -> BackendResult<Bytes> {
            self.inner.read(kind, name).await
        }
        async fn read_range_into(
            &self,
            kind: ObjectKind,
            name: &str,
            offset: u64,
            length: u64,
            buffer: Vec<u8>,
        ) -> BackendResult<Vec<u8>> {
            self.inner
                .read_range_into(kind, name, offset, length, buffer)
                .await
        }
        async fn write(&self, kind: ObjectKind, name: &str, data: Bytes) -> BackendResult<()> {
            if kind == ObjectKind::Locks && self.failing.load(Ordering::SeqCst) {
                return Err(BackendError::Http {
                    status: 503,
                    what: format!("writing locks/{name}"),
                    body: "gate away".into(),
                });
            }
            self.inner.write(kind, name, data).await
        }
        async fn delete(&self, kind: ObjectKind, name: &str) -> BackendResult<()> {
            self.inner.delete(kind, name).await
        }
    }

    async fn repository(backend: Arc<LockWritesFail>) -> Repository {
        let kdf = KdfParams {
            memory_kib: 64,
            iterations: 1,
            parallelism: 1,
        };
        Repository::init(backend, b"pw", kdf)
            .await
            .unwrap()
            // The timings a holder really uses: the tests run on tokio's paused clock, where their
            // minutes pass at once and exactly.
            .with_lock_timings(LockTimings::default())
    }

    #[tokio::test(start_paused = true)]
    async fn a_lock_that_cannot_be_refreshed_stops_the_work_before_it_could_be_taken_for_stale() {
        let backend = Arc::new(LockWritesFail::default());
        let repo = repository(backend.clone()).await;
        let timings = repo.lock_timings();
        let taken = Instant::now();
        let guard = acquire(&repo, false, "backup").await.unwrap();
        // Two refreshes are stored (at 5 and 10 minutes), then the gate refuses them.
        tokio::time::sleep(timings.refresh_every * 2 + Duration::from_secs(60)).await;
        let last_stored = taken + timings.refresh_every * 2;
        backend.failing.store(true, Ordering::SeqCst);
        let never_done = tokio::time::sleep(Duration::from_secs(24 * 3600));
        let error = guard
            .held_while(async {
                never_done.await;
                Ok(())
            })
            .await
            .unwrap_err();
        let stopped_after = last_stored.elapsed();
        assert!(matches!(error, Error::LockLost(_)), "{error:?}");
        assert!(
            error.to_string().contains("could not be refreshed"),
            "{error}"
        );
        assert!(error.to_string().contains("503"), "the last error: {error}");
        // Others take the lock for stale 30 minutes after its last stored refresh; the holder
        // stops within one retry of 25 minutes after it, and not before.
        let give_up_after = timings.give_up_after();
        assert!(stopped_after <= give_up_after, "{stopped_after:?}");
        assert!(
            stopped_after >= give_up_after - timings.retry_every,
            "{stopped_after:?}"
        );
        assert!(stopped_after < timings.stale_after);
        assert!(guard.ensure_still_held().await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_lock_that_refreshes_keeps_the_work_going() {
        let backend = Arc::new(LockWritesFail::default());
        let repo = repository(backend).await;
        let timings = repo.lock_timings();
        let guard = acquire(&repo, false, "backup").await.unwrap();
        let first = repo.list_ids(ObjectKind::Locks).await.unwrap();
        let done = guard
            .held_while(async {
                tokio::time::sleep(timings.stale_after * 2).await;
                Ok("done")
            })
            .await
            .unwrap();
        assert_eq!(done, "done");
        guard.ensure_still_held().await.unwrap();
        // Refreshed: one lock object, a newer one than the first.
        let now = repo.list_ids(ObjectKind::Locks).await.unwrap();
        assert_eq!(now.len(), 1);
        assert_ne!(now, first);
        guard.release().await.unwrap();
    }

    #[tokio::test]
    async fn a_backup_lock_is_not_held_once_an_exclusive_lock_was_taken_over_it() {
        let backend = Arc::new(LockWritesFail::default());
        let repo = repository(backend).await;
        let guard = acquire(&repo, false, "backup").await.unwrap();
        guard.ensure_still_held().await.unwrap();
        let mut prune = Lock::new(true, "prune");
        prune.hostname = "another-host".into();
        repo.write_object(ObjectKind::Locks, &prune).await.unwrap();
        let error = guard.ensure_still_held().await.unwrap_err();
        assert!(matches!(error, Error::LockLost(_)), "{error:?}");
        assert!(
            error.to_string().contains("exclusive lock of prune"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_lock_removed_by_another_process_is_not_held() {
        let backend = Arc::new(LockWritesFail::default());
        let repo = repository(backend).await;
        let guard = acquire(&repo, false, "backup").await.unwrap();
        remove_locks(&repo, true).await.unwrap();
        let error = guard.ensure_still_held().await.unwrap_err();
        assert!(error.to_string().contains("was removed"), "{error}");
    }
}
