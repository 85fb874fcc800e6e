//! A repository held in memory, for fast tests of everything above the storage.

use super::{Backend, BackendError, BackendResult, ObjectInfo, ObjectKind};
use async_trait::async_trait;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Objects in a map; cloning the handle is not supported, share it through an `Arc`.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    objects: Mutex<BTreeMap<(ObjectKind, String), Bytes>>,
}

impl MemoryBackend {
    pub fn new() -> MemoryBackend {
        MemoryBackend::default()
    }

    fn objects(&self) -> std::sync::MutexGuard<'_, BTreeMap<(ObjectKind, String), Bytes>> {
        self.objects
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Replaces an object's bytes behind the repository's back (for corruption tests).
    pub fn tamper(&self, kind: ObjectKind, name: &str, edit: impl FnOnce(&mut Vec<u8>)) {
        let mut objects = self.objects();
        if let Some(data) = objects.get_mut(&(kind, name.to_owned())) {
            let mut bytes = data.to_vec();
            edit(&mut bytes);
            *data = Bytes::from(bytes);
        }
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    fn location(&self) -> String {
        "memory".into()
    }

    async fn create(&self) -> BackendResult<()> {
        if self
            .objects()
            .contains_key(&(ObjectKind::Config, "config".to_owned()))
        {
            return Err(BackendError::AlreadyExists {
                location: self.location(),
            });
        }
        Ok(())
    }

    async fn list(&self, kind: ObjectKind) -> BackendResult<Vec<ObjectInfo>> {
        Ok(self
            .objects()
            .iter()
            .filter(|((k, _), _)| *k == kind)
            .map(|((_, name), data)| ObjectInfo {
                name: name.clone(),
                size_bytes: data.len() as u64,
            })
            .collect())
    }

    async fn stat(&self, kind: ObjectKind, name: &str) -> BackendResult<Option<u64>> {
        Ok(self
            .objects()
            .get(&(kind, name.to_owned()))
            .map(|d| d.len() as u64))
    }

    async fn read(&self, kind: ObjectKind, name: &str) -> BackendResult<Bytes> {
        self.objects()
            .get(&(kind, name.to_owned()))
            .cloned()
            .ok_or_else(|| {
                if kind == ObjectKind::Config {
                    BackendError::NoRepository {
                        location: self.location(),
                    }
                } else {
                    BackendError::NotFound {
                        kind,
                        name: name.to_owned(),
                    }
                }
            })
    }

    async fn read_range_into(
        &self,
        kind: ObjectKind,
        name: &str,
        offset: u64,
        length: u64,
        mut buffer: Vec<u8>,
    ) -> BackendResult<Vec<u8>> {
        let data = self.read(kind, name).await?;
        let end = offset
            .checked_add(length)
            .filter(|end| *end <= data.len() as u64);
        match end {
            Some(end) => {
                buffer.clear();
                buffer.extend_from_slice(&data[offset as usize..end as usize]);
                Ok(buffer)
            }
            None => Err(BackendError::Io {
                what: format!("{kind}/{name}"),
                source: std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "range past the end",
                ),
            }),
        }
    }

    async fn write(&self, kind: ObjectKind, name: &str, data: Bytes) -> BackendResult<()> {
        self.objects().insert((kind, name.to_owned()), data);
        Ok(())
    }

    async fn delete(&self, kind: ObjectKind, name: &str) -> BackendResult<()> {
        self.objects().remove(&(kind, name.to_owned()));
        Ok(())
    }
}
