//! The retry layer's decisions, against a scripted backend: no network at all.

use super::*;
use crate::backend::memory::MemoryBackend;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// A failure the script makes a call end with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// A 500 answer.
    ServerError,
    /// A connection dropped (or an answer's body cut short).
    Dropped,
    /// A 403 answer.
    Forbidden,
    /// A certificate the client does not trust.
    BadCertificate,
}

impl Fault {
    fn error(self) -> BackendError {
        match self {
            Fault::ServerError => BackendError::Http {
                status: 500,
                what: "scripted".into(),
                body: "scripted failure".into(),
            },
            Fault::Dropped => BackendError::Transport {
                location: "scripted".into(),
                message: "the answer ended after 3 of 10 bytes".into(),
            },
            Fault::Forbidden => BackendError::Forbidden {
                what: "scripted".into(),
            },
            Fault::BadCertificate => BackendError::Certificate {
                location: "scripted".into(),
                message: "invalid peer certificate: UnknownIssuer".into(),
            },
        }
    }
}

/// What the next call to the scripted backend does.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Fails without doing anything (the request never reached the server).
    FailBefore(Fault),
    /// Does the work, then fails (the answer was lost on the way back).
    FailAfter(Fault),
}

/// A memory backend that follows a script: each call takes the next step (none left: it works),
/// or fails with `always` when that is set; every call is recorded by name.
#[derive(Debug, Default)]
struct Scripted {
    objects: MemoryBackend,
    steps: Mutex<VecDeque<Step>>,
    always: Option<Fault>,
    calls: Mutex<Vec<&'static str>>,
}

impl Scripted {
    fn with_steps(steps: impl IntoIterator<Item = Step>) -> Arc<Scripted> {
        Arc::new(Scripted {
            steps: Mutex::new(steps.into_iter().collect()),
            ..Scripted::default()
        })
    }

    fn failing_always(fault: Fault) -> Arc<Scripted> {
        Arc::new(Scripted {
            always: Some(fault),
            ..Scripted::default()
        })
    }

    fn calls(&self) -> Vec<&'static str> {
        self.calls.lock().unwrap().clone()
    }

    /// Records the call and runs `work` as the script says.
    async fn call<T>(
        &self,
        name: &'static str,
        work: impl Future<Output = BackendResult<T>>,
    ) -> BackendResult<T> {
        self.calls.lock().unwrap().push(name);
        if let Some(fault) = self.always {
            return Err(fault.error());
        }
        let step = self.steps.lock().unwrap().pop_front();
        match step {
            None => work.await,
            Some(Step::FailBefore(fault)) => Err(fault.error()),
            Some(Step::FailAfter(fault)) => {
                work.await?;
                Err(fault.error())
            }
        }
    }
}

#[async_trait]
impl Backend for Scripted {
    fn location(&self) -> String {
        "scripted".into()
    }
    async fn create(&self) -> BackendResult<()> {
        self.call("create", self.objects.create()).await
    }
    async fn list(&self, kind: ObjectKind) -> BackendResult<Vec<ObjectInfo>> {
        self.call("list", self.objects.list(kind)).await
    }
    async fn stat(&self, kind: ObjectKind, name: &str) -> BackendResult<Option<u64>> {
        self.call("stat", self.objects.stat(kind, name)).await
    }
    async fn read(&self, kind: ObjectKind, name: &str) -> BackendResult<Bytes> {
        self.call("read", self.objects.read(kind, name)).await
    }
    async fn read_range_into(
        &self,
        kind: ObjectKind,
        name: &str,
        offset: u64,
        length: u64,
        buffer: Vec<u8>,
    ) -> BackendResult<Vec<u8>> {
        let work = self
            .objects
            .read_range_into(kind, name, offset, length, buffer);
        self.call("read_range", work).await
    }
    async fn write(&self, kind: ObjectKind, name: &str, data: Bytes) -> BackendResult<()> {
        self.call("write", self.objects.write(kind, name, data))
            .await
    }
    async fn delete(&self, kind: ObjectKind, name: &str) -> BackendResult<()> {
        self.call("delete", self.objects.delete(kind, name)).await
    }
}

/// Pauses short enough for tests, and a budget of `budget_ms`.
fn policy(budget_ms: u64) -> RetryPolicy {
    RetryPolicy {
        budget: Duration::from_millis(budget_ms),
        first_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(4),
    }
}

fn retrying(inner: &Arc<Scripted>) -> RetryingBackend {
    RetryingBackend::new(inner.clone(), policy(5_000))
}

const NAME: &str = "ab12";

fn payload() -> Bytes {
    Bytes::from_static(b"the bytes of one object")
}

#[tokio::test]
async fn write_answered_500_after_it_was_stored_is_settled_by_a_look_and_not_sent_again() {
    for kind in [
        ObjectKind::Data,
        ObjectKind::Index,
        ObjectKind::Snapshots,
        ObjectKind::Locks,
        ObjectKind::Keys,
    ] {
        let inner = Scripted::with_steps([Step::FailAfter(Fault::ServerError)]);
        retrying(&inner).write(kind, NAME, payload()).await.unwrap();
        assert_eq!(inner.calls(), ["write", "stat"], "{kind}");
        assert_eq!(inner.objects.read(kind, NAME).await.unwrap(), payload());
    }
}

#[tokio::test]
async fn write_whose_connection_dropped_before_the_server_is_looked_up_then_sent_again() {
    let inner = Scripted::with_steps([Step::FailBefore(Fault::Dropped)]);
    let store = retrying(&inner);
    store
        .write(ObjectKind::Data, NAME, payload())
        .await
        .unwrap();
    assert_eq!(inner.calls(), ["write", "stat", "write"]);
    assert_eq!(
        inner.objects.read(ObjectKind::Data, NAME).await.unwrap(),
        payload()
    );
}

#[tokio::test]
async fn write_answered_403_over_the_same_object_succeeds() {
    let inner = Scripted::with_steps([Step::FailBefore(Fault::Forbidden)]);
    inner
        .objects
        .write(ObjectKind::Snapshots, NAME, payload())
        .await
        .unwrap();
    retrying(&inner)
        .write(ObjectKind::Snapshots, NAME, payload())
        .await
        .unwrap();
    assert_eq!(inner.calls(), ["write", "stat"]);
}

#[tokio::test]
async fn write_answered_403_with_nothing_stored_is_the_credentials_refusal() {
    let inner = Scripted::with_steps([Step::FailBefore(Fault::Forbidden)]);
    let error = retrying(&inner)
        .write(ObjectKind::Data, NAME, payload())
        .await
        .unwrap_err();
    assert!(matches!(error, BackendError::Forbidden { .. }), "{error:?}");
    assert_eq!(inner.calls(), ["write", "stat"], "a refusal is not retried");
}

#[tokio::test]
async fn write_answered_403_over_an_object_of_another_length_is_a_refusal() {
    let inner = Scripted::with_steps([Step::FailBefore(Fault::Forbidden)]);
    inner
        .objects
        .write(ObjectKind::Index, NAME, Bytes::from_static(b"torn"))
        .await
        .unwrap();
    let error = retrying(&inner)
        .write(ObjectKind::Index, NAME, payload())
        .await
        .unwrap_err();
    assert!(matches!(error, BackendError::Forbidden { .. }), "{error:?}");
}

#[tokio::test]
async fn config_write_is_settled_by_comparing_bytes_not_length() {
    let same_length_other_bytes = Bytes::from(vec![b'x'; payload().len()]);
    let inner = Scripted::with_steps([Step::FailBefore(Fault::Forbidden)]);
    inner
        .objects
        .write(ObjectKind::Config, "config", same_length_other_bytes)
        .await
        .unwrap();
    let error = retrying(&inner)
        .write(ObjectKind::Config, "config", payload())
        .await
        .unwrap_err();
    assert!(matches!(error, BackendError::Forbidden { .. }), "{error:?}");
    assert_eq!(inner.calls(), ["write", "read"]);

    let inner = Scripted::with_steps([Step::FailAfter(Fault::ServerError)]);
    retrying(&inner)
        .write(ObjectKind::Config, "config", payload())
        .await
        .unwrap();
    assert_eq!(inner.calls(), ["write", "read"]);
}

#[tokio::test]
async fn the_look_after_an_unknown_outcome_is_itself_retried() {
    let inner = Scripted::with_steps([
        Step::FailAfter(Fault::Dropped),
        Step::FailBefore(Fault::ServerError),
    ]);
    retrying(&inner)
        .write(ObjectKind::Data, NAME, payload())
        .await
        .unwrap();
    assert_eq!(inner.calls(), ["write", "stat", "stat"]);
}

#[tokio::test]
async fn truncated_reads_are_retried_until_whole() {
    let inner = Scripted::with_steps([
        Step::FailBefore(Fault::Dropped),
        Step::FailBefore(Fault::Dropped),
    ]);
    inner
        .objects
        .write(ObjectKind::Data, NAME, payload())
        .await
        .unwrap();
    let store = retrying(&inner);
    assert_eq!(store.read(ObjectKind::Data, NAME).await.unwrap(), payload());
    assert_eq!(inner.calls(), ["read", "read", "read"]);

    let inner_steps = [Step::FailBefore(Fault::Dropped)];
    inner.steps.lock().unwrap().extend(inner_steps);
    let range = store
        .read_range_into(ObjectKind::Data, NAME, 4, 5, Vec::with_capacity(64))
        .await
        .unwrap();
    assert_eq!(range, b"bytes");
}

/// On tokio's paused clock the pauses take no wall time, so the default policy (pauses from 0.5 s
/// up to 30 s, a 15-minute budget) is what runs, and the figures are exact on any machine.
#[tokio::test(start_paused = true)]
async fn persistent_failures_end_when_the_budget_is_spent_and_say_so() {
    let inner = Scripted::failing_always(Fault::ServerError);
    let policy = RetryPolicy::default();
    let store = RetryingBackend::new(inner.clone(), policy);
    let started = Instant::now();
    let error = store
        .write(ObjectKind::Data, NAME, payload())
        .await
        .unwrap_err();
    let waited = started.elapsed();
    let BackendError::RetryBudgetSpent {
        last_error, tries, ..
    } = &error
    else {
        panic!("{error:?}");
    };
    // It gives up only when the next pause would end past the budget: it used all but at most
    // one pause of it, and never more.
    assert!(waited <= policy.budget, "{waited:?}");
    assert!(waited > policy.budget - policy.max_delay, "{waited:?}");
    // Every pause is at most `max_delay`, so at least budget / max_delay tries fit, less one.
    let fewest = (policy.budget.as_secs() / policy.max_delay.as_secs()) as u32 - 1;
    assert!(*tries >= fewest, "{tries} tries in {waited:?}");
    // The write was followed by a look for the object, retried until the end: one write only.
    assert_eq!(inner.calls().iter().filter(|c| **c == "write").count(), 1);
    assert_eq!(inner.calls().len() as u32, 1 + *tries);
    assert!(last_error.is_retryable(), "{last_error:?}");
    assert!(error.to_string().contains("retry budget"), "{error}");
    assert!(error.to_string().contains("500"), "{error}");
}

#[tokio::test]
async fn certificate_errors_and_missing_objects_are_final() {
    let inner = Scripted::failing_always(Fault::BadCertificate);
    let error = retrying(&inner)
        .list(ObjectKind::Snapshots)
        .await
        .unwrap_err();
    assert!(
        matches!(error, BackendError::Certificate { .. }),
        "{error:?}"
    );
    assert_eq!(inner.calls(), ["list"]);

    let inner = Scripted::with_steps([]);
    let error = retrying(&inner)
        .read(ObjectKind::Index, NAME)
        .await
        .unwrap_err();
    assert!(matches!(error, BackendError::NotFound { .. }), "{error:?}");
    assert_eq!(inner.calls(), ["read"]);
}

#[test]
fn retry_delays_double_and_stop_at_the_cap_with_jitter_below() {
    let policy = RetryPolicy {
        budget: Duration::from_secs(60),
        first_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(500),
    };
    for (retry, full_ms) in [(1, 100), (2, 200), (3, 400), (4, 500), (9, 500)] {
        for _ in 0..50 {
            let delay = policy.delay_before_retry(retry).as_millis() as u64;
            assert!(
                (full_ms / 2..=full_ms).contains(&delay),
                "retry {retry}: {delay} ms"
            );
        }
    }
}
