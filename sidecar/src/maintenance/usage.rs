//! How much a repository stores: what its status and metrics report after each run.

use crate::backend::ObjectKind;
use crate::repository::Repository;
use crate::Result;

/// The repository's stored bytes and snapshot count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Bytes of every object the gate stores for the repository.
    pub bytes: u64,
    pub snapshots: u64,
}

/// Lists every kind of object once (the packs' listing dominates: one request over REST).
pub async fn measure(repo: &Repository) -> Result<Usage> {
    let backend = repo.backend();
    let mut usage = Usage {
        bytes: backend
            .stat(ObjectKind::Config, "config")
            .await?
            .unwrap_or(0),
        snapshots: 0,
    };
    for kind in [
        ObjectKind::Keys,
        ObjectKind::Locks,
        ObjectKind::Snapshots,
        ObjectKind::Index,
        ObjectKind::Data,
    ] {
        let objects = backend.list(kind).await?;
        usage.bytes += objects.iter().map(|o| o.size_bytes).sum::<u64>();
        if kind == ObjectKind::Snapshots {
            usage.snapshots = objects.len() as u64;
        }
    }
    Ok(usage)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryBackend;
    use crate::backend::Backend;
    use crate::crypto::KdfParams;
    use bytes::Bytes;
    use std::sync::Arc;

    #[tokio::test]
    async fn usage_adds_up_every_object() {
        let backend = Arc::new(MemoryBackend::default());
        let repo = Repository::init(
            backend.clone(),
            b"secret",
            KdfParams {
                memory_kib: 64,
                iterations: 1,
                parallelism: 1,
            },
        )
        .await
        .unwrap();
        let empty = measure(&repo).await.unwrap();
        assert_eq!(empty.snapshots, 0);
        assert!(empty.bytes > 0, "config and key count");
        backend
            .write(
                ObjectKind::Data,
                &"ab".repeat(32),
                Bytes::from(vec![0; 1000]),
            )
            .await
            .unwrap();
        backend
            .write(
                ObjectKind::Snapshots,
                &"cd".repeat(32),
                Bytes::from(vec![0; 10]),
            )
            .await
            .unwrap();
        let after = measure(&repo).await.unwrap();
        assert_eq!(after.bytes, empty.bytes + 1010);
        assert_eq!(after.snapshots, 1);
    }
}
