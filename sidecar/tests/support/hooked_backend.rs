//! A local repository whose writes and deletes pass through a test's hook first: to fail them as
//! a process killed there would, or to slow and count them as a distant gate would be.

use async_trait::async_trait;
use bytes::Bytes;
use neverwiped::backend::local::LocalBackend;
use neverwiped::backend::{Backend, BackendResult, ObjectInfo, ObjectKind};

/// A write or a delete about to reach the repository's folder.
pub struct Mutation {
    pub kind: ObjectKind,
    /// The bytes written; `None` for a delete.
    pub bytes: Option<usize>,
}

/// What a test does around each write and delete.
#[async_trait]
pub trait Hook: Send + Sync + std::fmt::Debug {
    /// Before the change is made; an error is the call's, and nothing changes.
    async fn before(&self, mutation: &Mutation) -> BackendResult<()>;

    /// Once the change is made, or has failed.
    fn after(&self, _mutation: &Mutation) {}
}

/// `inner` with `hook` around its writes and deletes; everything else goes straight through.
#[derive(Debug)]
pub struct HookedBackend<H> {
    pub inner: LocalBackend,
    pub hook: H,
}

impl<H: Hook> HookedBackend<H> {
    async fn mutate<T>(
        &self,
        mutation: Mutation,
        change: impl std::future::Future<Output = BackendResult<T>> + Send,
    ) -> BackendResult<T> {
        self.hook.before(&mutation).await?;
        let changed = change.await;
        self.hook.after(&mutation);
        changed
    }
}

#[async_trait]
impl<H: Hook> Backend for HookedBackend<H> {
    fn location(&self) -> String {
        self.inner.location()
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
        let read = self
            .inner
            .read_range_into(kind, name, offset, length, buffer);
        read.await
    }
    async fn write(&self, kind: ObjectKind, name: &str, data: Bytes) -> BackendResult<()> {
        let bytes = Some(data.len());
        let write = self.inner.write(kind, name, data);
        self.mutate(Mutation { kind, bytes }, write).await
    }
    async fn delete(&self, kind: ObjectKind, name: &str) -> BackendResult<()> {
        let delete = self.inner.delete(kind, name);
        self.mutate(Mutation { kind, bytes: None }, delete).await
    }
}
