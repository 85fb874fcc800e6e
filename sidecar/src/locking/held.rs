//! The locks this process holds or is taking, so that a stop signal can remove them although the
//! run that took them is dropped halfway (its guards never reach their release).

use super::lock_objects;
use crate::backend::ObjectKind;
use crate::error::Result;
use crate::format::lock::Lock;
use crate::repository::Repository;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// A repository this process writes locks to, and the task refreshing them once there is one.
struct Holding {
    token: u64,
    repo: Repository,
    refresher: Option<tokio::task::AbortHandle>,
}

static HOLDINGS: Mutex<Vec<Holding>> = Mutex::new(Vec::new());
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(0);

fn holdings() -> std::sync::MutexGuard<'static, Vec<Holding>> {
    HOLDINGS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Enters a lock about to be written in `repo`, before its first write (a write that lands while
/// the run is dropped is still found); returns its token.
pub(super) fn register(repo: &Repository) -> u64 {
    let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
    holdings().push(Holding {
        token,
        repo: repo.clone(),
        refresher: None,
    });
    token
}

/// Enters the task that refreshes the lock of `token`, so that a stop ends it first.
pub(super) fn set_refresher(token: u64, refresher: tokio::task::AbortHandle) {
    if let Some(holding) = holdings().iter_mut().find(|h| h.token == token) {
        holding.refresher = Some(refresher);
    }
}

/// Forgets the lock of `token`: it was released, or never taken.
pub(super) fn unregister(token: u64) {
    holdings().retain(|h| h.token != token);
}

/// Removes every lock this process holds or was taking: stops their refreshes, then deletes each
/// lock object of this process in their repositories. Returns how many objects were removed; a
/// repository that refuses is logged (its locks go stale once this process is gone).
pub async fn release_all_held() -> usize {
    let taken = std::mem::take(&mut *holdings());
    for refresher in taken.iter().filter_map(|h| h.refresher.as_ref()) {
        refresher.abort();
    }
    let mut removed = 0;
    for holding in taken {
        match remove_own_lock_objects(&holding.repo).await {
            Ok(count) => removed += count,
            Err(error) => tracing::warn!(%error, "could not remove this process's lock"),
        }
    }
    removed
}

/// Deletes the lock objects this very process wrote (its host, PID and start time).
pub(super) async fn remove_own_lock_objects(repo: &Repository) -> Result<usize> {
    let me = Lock::new(false, "");
    let mut removed = 0;
    for (id, lock) in lock_objects(repo).await? {
        let Ok(lock) = lock else { continue };
        if lock.hostname == me.hostname
            && lock.pid == me.pid
            && lock.process_start == me.process_start
        {
            repo.backend()
                .delete(ObjectKind::Locks, &id.to_hex())
                .await?;
            removed += 1;
        }
    }
    Ok(removed)
}
