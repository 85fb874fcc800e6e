//! A layer any backend can wear: calls that failed in a way that may pass are sent again, with
//! exponential backoff and jitter, until a time budget per call is spent; and writes are
//! idempotent.
//!
//! The write rule lives here and nowhere else: a write whose outcome is unknown (a transport
//! error, which may come after the request reached the server; a 5xx, which a proxy may send
//! after forwarding; a timeout) or that the server answers 403 (a restic REST server never
//! overwrites an object, so a second write of one it holds is refused) is followed, before any
//! retry or report, by a look at what the server holds. An object stored with the expected length
//! (the config: the expected bytes) means the write succeeded; a 403 with nothing there is the
//! credentials' real refusal. This holds for every object kind alike.

use super::{Backend, BackendError, BackendResult, ObjectInfo, ObjectKind, SharedBackend};
use async_trait::async_trait;
use bytes::Bytes;
use rand::Rng;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// How long to keep trying one call: pauses doubling from `first_delay` up to `max_delay`, for as
/// long as the next try can start within `budget` of the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The longest time one call may spend, its tries and pauses together, before it fails. A
    /// load balancer's bad quarter of an hour should pass within it.
    pub budget: Duration,
    /// The pause before the first retry.
    pub first_delay: Duration,
    /// The longest pause between two tries.
    pub max_delay: Duration,
}

/// The default [`RetryPolicy::budget`]: a gate that is away for minutes does not fail a backup.
pub const DEFAULT_RETRY_BUDGET: Duration =
    Duration::from_secs(neverwiped_contract::cli::DEFAULT_RETRY_BUDGET_SECS);

impl Default for RetryPolicy {
    /// Pauses of about 0.5 s, 1 s, 2 s, … up to 30 s, for up to [`DEFAULT_RETRY_BUDGET`].
    fn default() -> RetryPolicy {
        RetryPolicy {
            budget: DEFAULT_RETRY_BUDGET,
            first_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The default pauses with another budget.
    pub fn with_budget(budget: Duration) -> RetryPolicy {
        RetryPolicy {
            budget,
            ..RetryPolicy::default()
        }
    }

    /// The pause before retry number `retry` (1 for the first retry).
    ///
    /// The doubled delay is jittered down to between half and all of itself, so that the many
    /// requests a server failed at the same moment do not all come back at the same moment.
    pub fn delay_before_retry(&self, retry: u32) -> Duration {
        let doublings = retry.saturating_sub(1).min(31);
        let delay = self
            .first_delay
            .saturating_mul(1u32 << doublings)
            .min(self.max_delay);
        delay.mul_f64(rand::thread_rng().gen_range(0.5..=1.0))
    }
}

/// `inner` with retries and idempotent writes; see the module's documentation.
#[derive(Debug)]
pub struct RetryingBackend {
    inner: SharedBackend,
    policy: RetryPolicy,
}

impl RetryingBackend {
    pub fn new(inner: SharedBackend, policy: RetryPolicy) -> RetryingBackend {
        RetryingBackend { inner, policy }
    }

    /// Runs `attempt` until it succeeds, fails in a way that cannot pass, or no retry can start
    /// before `deadline`.
    async fn with_retries<T, Attempt, Fut>(
        &self,
        what: &str,
        deadline: Instant,
        mut attempt: Attempt,
    ) -> BackendResult<T>
    where
        Attempt: FnMut() -> Fut,
        Fut: Future<Output = BackendResult<T>>,
    {
        let started = Instant::now();
        let mut tries = 0;
        loop {
            tries += 1;
            match attempt().await {
                Err(error) if error.is_retryable() => {
                    self.pause_or_give_up(what, error, tries, started, deadline)
                        .await?
                }
                result => return result,
            }
        }
    }

    /// After try number `tries` failed with `error` (one that may pass): sleeps before the next
    /// try, or, when that would start past `deadline`, returns the error that ends the call.
    async fn pause_or_give_up(
        &self,
        what: &str,
        error: BackendError,
        tries: u32,
        started: Instant,
        deadline: Instant,
    ) -> BackendResult<()> {
        let delay = self.policy.delay_before_retry(tries);
        if Instant::now() + delay > deadline {
            return Err(BackendError::RetryBudgetSpent {
                last_error: Box::new(error),
                tries,
                waited_secs: started.elapsed().as_secs_f64(),
            });
        }
        tracing::warn!(
            location = %self.inner.location(),
            what,
            retry = tries,
            delay_ms = delay.as_millis() as u64,
            "{error}; trying again"
        );
        tokio::time::sleep(delay).await;
        Ok(())
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.policy.budget
    }

    /// Whether the storage holds `data` under this name: for a content-addressed object, one of
    /// the same name and length is the same object; the config, named "config" whatever it
    /// holds, is compared byte for byte. Retried within `deadline` like any read.
    async fn stored_as_expected(
        &self,
        kind: ObjectKind,
        name: &str,
        data: &Bytes,
        deadline: Instant,
    ) -> BackendResult<bool> {
        let what = format!("checking whether {} is stored", label(kind, name));
        if kind == ObjectKind::Config {
            let stored = self
                .with_retries(&what, deadline, || self.inner.read(kind, name))
                .await;
            return match stored {
                Ok(stored) => Ok(stored == *data),
                Err(BackendError::NoRepository { .. } | BackendError::NotFound { .. }) => Ok(false),
                Err(error) => Err(error),
            };
        }
        let size_bytes = self
            .with_retries(&what, deadline, || self.inner.stat(kind, name))
            .await?;
        Ok(size_bytes == Some(data.len() as u64))
    }
}

/// `kind/name` for messages; the config object is just `config`.
fn label(kind: ObjectKind, name: &str) -> String {
    match kind {
        ObjectKind::Config => "config".to_owned(),
        _ => format!("{kind}/{name}"),
    }
}

#[async_trait]
impl Backend for RetryingBackend {
    fn location(&self) -> String {
        self.inner.location()
    }

    async fn create(&self) -> BackendResult<()> {
        let what = "creating the repository";
        self.with_retries(what, self.deadline(), || self.inner.create())
            .await
    }

    async fn list(&self, kind: ObjectKind) -> BackendResult<Vec<ObjectInfo>> {
        let what = format!("listing {kind}/");
        self.with_retries(&what, self.deadline(), || self.inner.list(kind))
            .await
    }

    async fn stat(&self, kind: ObjectKind, name: &str) -> BackendResult<Option<u64>> {
        let what = format!("looking up {}", label(kind, name));
        self.with_retries(&what, self.deadline(), || self.inner.stat(kind, name))
            .await
    }

    async fn read(&self, kind: ObjectKind, name: &str) -> BackendResult<Bytes> {
        let what = format!("reading {}", label(kind, name));
        self.with_retries(&what, self.deadline(), || self.inner.read(kind, name))
            .await
    }

    async fn read_range_into(
        &self,
        kind: ObjectKind,
        name: &str,
        offset: u64,
        length: u64,
        buffer: Vec<u8>,
    ) -> BackendResult<Vec<u8>> {
        let what = format!("reading {} at {offset}", label(kind, name));
        // The first try reads into the caller's buffer; a failed try leaves a fresh one to the next.
        let spare = std::sync::Mutex::new(Some(buffer));
        self.with_retries(&what, self.deadline(), || {
            let buffer = spare
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .take()
                .unwrap_or_default();
            self.inner
                .read_range_into(kind, name, offset, length, buffer)
        })
        .await
    }

    async fn write(&self, kind: ObjectKind, name: &str, data: Bytes) -> BackendResult<()> {
        let what = format!("writing {}", label(kind, name));
        let started = Instant::now();
        let deadline = self.deadline();
        let mut tries = 0;
        loop {
            tries += 1;
            let error = match self.inner.write(kind, name, data.clone()).await {
                Ok(()) => return Ok(()),
                Err(error) => error,
            };
            let refused = matches!(error, BackendError::Forbidden { .. });
            if refused || error.is_retryable() {
                if self.stored_as_expected(kind, name, &data, deadline).await? {
                    tracing::debug!(
                        what,
                        "{error}; the object is stored, so the write succeeded"
                    );
                    return Ok(());
                }
                if refused {
                    return Err(error);
                }
            }
            if !error.is_retryable() {
                return Err(error);
            }
            self.pause_or_give_up(&what, error, tries, started, deadline)
                .await?;
        }
    }

    async fn delete(&self, kind: ObjectKind, name: &str) -> BackendResult<()> {
        let what = format!("deleting {}", label(kind, name));
        self.with_retries(&what, self.deadline(), || self.inner.delete(kind, name))
            .await
    }
}

#[cfg(test)]
mod tests;
