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
    remove_locks(&repo, Unlock::All).await.unwrap();
    let error = guard.ensure_still_held().await.unwrap_err();
    assert!(error.to_string().contains("was removed"), "{error}");
}

#[tokio::test]
async fn a_stale_lock_of_this_host_met_while_locking_is_removed_and_one_of_another_host_is_kept() {
    let repo = repository(Arc::new(LockWritesFail::default())).await;
    let dead_here = Lock {
        pid: 0x7fff_fff0,
        ..Lock::new(true, "prune")
    };
    let dead_here = repo
        .write_object(ObjectKind::Locks, &dead_here)
        .await
        .unwrap();
    let old_elsewhere = Lock {
        hostname: "another-host".into(),
        time: (chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339(),
        ..Lock::new(true, "prune")
    };
    let old_elsewhere = repo
        .write_object(ObjectKind::Locks, &old_elsewhere)
        .await
        .unwrap();
    // Both are stale: neither blocks an exclusive lock.
    let guard = acquire(&repo, true, "prune").await.unwrap();
    let listed = repo.list_ids(ObjectKind::Locks).await.unwrap();
    assert!(
        !listed.contains(&dead_here),
        "this host's stale lock is removed"
    );
    assert!(
        listed.contains(&old_elsewhere),
        "another host's is left to unlock"
    );
    assert!(listed.contains(&guard.current_id()));
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_stop_removes_every_lock_object_of_this_process_and_no_other() {
    let repo = repository(Arc::new(LockWritesFail::default())).await;
    // Two of ours, as when a refresh was cut short; one of another process of this host.
    let ours = Lock::new(false, "backup");
    repo.write_object(ObjectKind::Locks, &ours).await.unwrap();
    repo.write_object(ObjectKind::Locks, &Lock::new(false, "backup"))
        .await
        .unwrap();
    let other = Lock {
        pid: ours.pid + 1,
        ..ours
    };
    let other = repo.write_object(ObjectKind::Locks, &other).await.unwrap();
    assert_eq!(held::remove_own_lock_objects(&repo).await.unwrap(), 2);
    assert_eq!(repo.list_ids(ObjectKind::Locks).await.unwrap(), vec![other]);
}
