//! `unlock`, and the shared lock the reading commands run under.

use super::args::UnlockArgs;
use super::Outcome;
use anyhow::Result;
use neverwiped::locking::{self, Unlock};
use neverwiped::repository::Repository;
use std::future::Future;

/// Removes stale locks (every lock with `--remove-all`) and says how many, as restic does: a
/// line only when some were removed.
pub async fn unlock(repo: &Repository, args: &UnlockArgs, json: bool) -> Result<Outcome> {
    let which = if args.remove_all {
        Unlock::All
    } else {
        Unlock::Stale
    };
    let removed = locking::remove_locks(repo, which).await?;
    if json {
        println!("{}", serde_json::json!({ "locksRemoved": removed }));
    } else if removed > 0 {
        println!("successfully removed {removed} locks");
    }
    Ok(Outcome::default())
}

/// Runs the reading command `purpose` under a shared lock, or without one where the repository
/// cannot take it (see [`locking::acquire_for_reading`]).
pub async fn read_locked<T>(
    repo: &Repository,
    purpose: &str,
    command: impl Future<Output = Result<T>>,
) -> Result<T> {
    let lock = locking::acquire_for_reading(repo, purpose).await?;
    let result = command.await;
    locking::release_read_lock(lock, purpose).await;
    result
}
