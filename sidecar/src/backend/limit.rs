//! A layer any backend can wear: at most a fixed number of calls in flight at once, so a backup's
//! many uploaders do not open more connections than the gate (or its quota of them) allows.

use super::{Backend, BackendError, BackendResult, ObjectInfo, ObjectKind, SharedBackend};
use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::{Semaphore, SemaphorePermit};

/// `inner` with at most `slots` calls in flight; the others wait their turn.
#[derive(Debug)]
pub struct LimitedBackend {
    inner: SharedBackend,
    slots: Semaphore,
}

impl LimitedBackend {
    /// At most `slots` calls at once (at least one is allowed).
    pub fn new(inner: SharedBackend, slots: usize) -> LimitedBackend {
        LimitedBackend {
            inner,
            slots: Semaphore::new(slots.max(1)),
        }
    }

    async fn slot(&self) -> BackendResult<SemaphorePermit<'_>> {
        // The semaphore is never closed, so acquiring can only fail if that changes.
        self.slots
            .acquire()
            .await
            .map_err(|_| BackendError::Transport {
                location: self.inner.location(),
                message: "the request queue was closed".into(),
            })
    }
}

#[async_trait]
impl Backend for LimitedBackend {
    fn location(&self) -> String {
        self.inner.location()
    }

    async fn create(&self) -> BackendResult<()> {
        let _slot = self.slot().await?;
        self.inner.create().await
    }

    async fn list(&self, kind: ObjectKind) -> BackendResult<Vec<ObjectInfo>> {
        let _slot = self.slot().await?;
        self.inner.list(kind).await
    }

    async fn stat(&self, kind: ObjectKind, name: &str) -> BackendResult<Option<u64>> {
        let _slot = self.slot().await?;
        self.inner.stat(kind, name).await
    }

    async fn read(&self, kind: ObjectKind, name: &str) -> BackendResult<Bytes> {
        let _slot = self.slot().await?;
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
        let _slot = self.slot().await?;
        self.inner
            .read_range_into(kind, name, offset, length, buffer)
            .await
    }

    async fn write(&self, kind: ObjectKind, name: &str, data: Bytes) -> BackendResult<()> {
        let _slot = self.slot().await?;
        self.inner.write(kind, name, data).await
    }

    async fn delete(&self, kind: ObjectKind, name: &str) -> BackendResult<()> {
        let _slot = self.slot().await?;
        self.inner.delete(kind, name).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryBackend;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    /// Counts the calls in flight and remembers the most at once.
    #[derive(Debug, Default)]
    struct Crowd {
        inner: MemoryBackend,
        in_flight: AtomicUsize,
        most: AtomicUsize,
    }

    #[async_trait]
    impl Backend for Crowd {
        fn location(&self) -> String {
            "crowd".into()
        }
        async fn create(&self) -> BackendResult<()> {
            self.inner.create().await
        }
        async fn list(&self, kind: ObjectKind) -> BackendResult<Vec<ObjectInfo>> {
            self.inner.list(kind).await
        }
        async fn stat(&self, kind: ObjectKind, name: &str) -> BackendResult<Option<u64>> {
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(5)).await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
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
            self.inner.write(kind, name, data).await
        }
        async fn delete(&self, kind: ObjectKind, name: &str) -> BackendResult<()> {
            self.inner.delete(kind, name).await
        }
    }

    #[tokio::test]
    async fn calls_in_flight_never_exceed_the_slots() {
        let crowd = Arc::new(Crowd::default());
        let limited = Arc::new(LimitedBackend::new(crowd.clone(), 3));
        let calls = (0..20).map(|index| {
            let limited = limited.clone();
            tokio::spawn(async move {
                limited
                    .stat(ObjectKind::Data, &format!("{index:02x}"))
                    .await
            })
        });
        for call in futures::future::join_all(calls).await {
            assert_eq!(call.unwrap().unwrap(), None);
        }
        assert_eq!(crowd.most.load(Ordering::SeqCst), 3);
    }
}
