//! A repository in a local folder, laid out like a restic REST server's storage.

use super::{Backend, BackendError, BackendResult, ObjectInfo, ObjectKind};
use async_trait::async_trait;
use bytes::Bytes;
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// A repository rooted at a folder: `config`, `keys/`, `locks/`, `snapshots/`, `index/`, and
/// `data/XX/` where `XX` is the first two hex digits of the object name.
#[derive(Debug, Clone)]
pub struct LocalBackend {
    root: PathBuf,
}

impl LocalBackend {
    pub fn new(root: impl Into<PathBuf>) -> LocalBackend {
        LocalBackend { root: root.into() }
    }

    fn object_path(&self, kind: ObjectKind, name: &str) -> PathBuf {
        match kind {
            ObjectKind::Config => self.root.join("config"),
            ObjectKind::Data if name.len() >= 2 => {
                self.root.join("data").join(&name[..2]).join(name)
            }
            _ => self.root.join(kind.dir_name()).join(name),
        }
    }

    fn not_found(&self, kind: ObjectKind, name: &str) -> BackendError {
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
    }

    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> BackendResult<T> + Send + 'static,
    ) -> BackendResult<T> {
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|join_error| BackendError::Io {
                what: "a storage task".into(),
                source: std::io::Error::other(join_error.to_string()),
            })?
    }
}

/// Writes `data` to `path` atomically: a temporary file in the same folder, flushed to disk, then
/// renamed over the final name.
fn write_atomically(path: &Path, data: &[u8]) -> BackendResult<()> {
    let dir = path.parent().expect("object paths have a parent");
    std::fs::create_dir_all(dir).map_err(|e| BackendError::io(dir.display().to_string(), e))?;
    let mut temp = tempfile_in(dir)?;
    let temp_path = temp.1.clone();
    let result = (|| {
        temp.0.write_all(data)?;
        temp.0.sync_all()?;
        std::fs::rename(&temp_path, path)?;
        // The rename itself must survive a power loss before anything that refers to it is written.
        std::fs::File::open(dir)?.sync_all()
    })();
    if let Err(error) = result {
        let _ = std::fs::remove_file(&temp_path);
        return Err(BackendError::io(path.display().to_string(), error));
    }
    Ok(())
}

fn tempfile_in(dir: &Path) -> BackendResult<(std::fs::File, PathBuf)> {
    loop {
        let candidate = dir.join(format!(".tmp-{:016x}", rand::random::<u64>()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&candidate)
        {
            Ok(file) => return Ok((file, candidate)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(BackendError::io(dir.display().to_string(), e)),
        }
    }
}

fn list_dir(dir: &Path, out: &mut Vec<ObjectInfo>, recurse: bool) -> BackendResult<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(BackendError::io(dir.display().to_string(), e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| BackendError::io(dir.display().to_string(), e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue; // temporary files of writes in progress
        }
        let meta = entry
            .metadata()
            .map_err(|e| BackendError::io(entry.path().display().to_string(), e))?;
        if meta.is_dir() {
            if recurse {
                list_dir(&entry.path(), out, false)?;
            }
        } else {
            out.push(ObjectInfo {
                name,
                size_bytes: meta.len(),
            });
        }
    }
    Ok(())
}

#[async_trait]
impl Backend for LocalBackend {
    fn location(&self) -> String {
        self.root.display().to_string()
    }

    async fn create(&self) -> BackendResult<()> {
        let root = self.root.clone();
        let location = self.location();
        self.blocking(move || {
            if root.join("config").exists() {
                return Err(BackendError::AlreadyExists { location });
            }
            for kind in ObjectKind::LISTABLE {
                let dir = root.join(kind.dir_name());
                std::fs::create_dir_all(&dir)
                    .map_err(|e| BackendError::io(dir.display().to_string(), e))?;
            }
            Ok(())
        })
        .await
    }

    async fn list(&self, kind: ObjectKind) -> BackendResult<Vec<ObjectInfo>> {
        let dir = self.root.join(kind.dir_name());
        self.blocking(move || {
            let mut out = Vec::new();
            list_dir(&dir, &mut out, kind == ObjectKind::Data)?;
            Ok(out)
        })
        .await
    }

    async fn stat(&self, kind: ObjectKind, name: &str) -> BackendResult<Option<u64>> {
        let path = self.object_path(kind, name);
        match tokio::fs::metadata(&path).await {
            Ok(meta) => Ok(Some(meta.len())),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(BackendError::io(path.display().to_string(), e)),
        }
    }

    async fn read(&self, kind: ObjectKind, name: &str) -> BackendResult<Bytes> {
        let path = self.object_path(kind, name);
        match tokio::fs::read(&path).await {
            Ok(data) => Ok(Bytes::from(data)),
            Err(e) if e.kind() == ErrorKind::NotFound => Err(self.not_found(kind, name)),
            Err(e) => Err(BackendError::io(path.display().to_string(), e)),
        }
    }

    async fn read_range_into(
        &self,
        kind: ObjectKind,
        name: &str,
        offset: u64,
        length: u64,
        mut buffer: Vec<u8>,
    ) -> BackendResult<Vec<u8>> {
        let path = self.object_path(kind, name);
        let not_found = self.not_found(kind, name);
        self.blocking(move || {
            let mut file = match std::fs::File::open(&path) {
                Ok(file) => file,
                Err(e) if e.kind() == ErrorKind::NotFound => return Err(not_found),
                Err(e) => return Err(BackendError::io(path.display().to_string(), e)),
            };
            let at = |e| BackendError::io(format!("{} at offset {offset}", path.display()), e);
            buffer.clear();
            buffer.reserve_exact(usize::try_from(length).unwrap_or(usize::MAX));
            // Into the buffer's spare capacity: nothing is zeroed first.
            file.seek(SeekFrom::Start(offset)).map_err(at)?;
            (&mut file)
                .take(length)
                .read_to_end(&mut buffer)
                .map_err(at)?;
            if buffer.len() as u64 != length {
                return Err(at(std::io::Error::new(
                    ErrorKind::UnexpectedEof,
                    format!("{} bytes instead of {length}", buffer.len()),
                )));
            }
            Ok(buffer)
        })
        .await
    }

    async fn write(&self, kind: ObjectKind, name: &str, data: Bytes) -> BackendResult<()> {
        let path = self.object_path(kind, name);
        self.blocking(move || write_atomically(&path, &data)).await
    }

    async fn delete(&self, kind: ObjectKind, name: &str) -> BackendResult<()> {
        let path = self.object_path(kind, name);
        match tokio::fs::remove_file(&path).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(BackendError::io(path.display().to_string(), e)),
        }
    }
}
