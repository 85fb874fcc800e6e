//! What a backup reads: paths on disk and named streams, arranged in the tree they will have in
//! the snapshot (`/data/db` becomes `data` → `db` below the root, as restic does).

use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// A stream stored as a file of the snapshot, e.g. a database dump at `/databases/main/dump.sql`.
pub struct StreamSource {
    /// Absolute path of the file in the snapshot.
    pub snapshot_path: String,
    /// Names the stream in errors (e.g. "the dump of main").
    pub label: String,
    /// The content; an error (also at the end, e.g. a dump tool that failed) fails the backup.
    pub reader: Box<dyn Read + Send>,
    /// Zero bytes is a good stream (a plan's stream with `allowEmpty`); otherwise an empty
    /// stream fails the backup unless the whole backup allows empty input.
    pub may_be_empty: bool,
}

/// A reader that counts the bytes read through it, so a backup can tell an empty stream apart.
pub struct CountedReader {
    inner: Box<dyn Read + Send>,
    bytes_read: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl CountedReader {
    /// Wraps `inner`; the counter returned grows with every byte read.
    pub fn new(
        inner: Box<dyn Read + Send>,
    ) -> (CountedReader, std::sync::Arc<std::sync::atomic::AtomicU64>) {
        let bytes_read = std::sync::Arc::default();
        let reader = CountedReader {
            inner,
            bytes_read: std::sync::Arc::clone(&bytes_read),
        };
        (reader, bytes_read)
    }
}

impl Read for CountedReader {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        let count = self.inner.read(buffer)?;
        self.bytes_read
            .fetch_add(count as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(count)
    }
}

/// One thing to back up.
pub enum Source {
    Path(PathBuf),
    Stream(StreamSource),
}

/// A directory level of the snapshot's tree above the sources.
pub enum VirtualEntry {
    /// A directory on the way to a source; its metadata comes from `meta_from` when it exists.
    Dir {
        children: BTreeMap<Vec<u8>, VirtualEntry>,
        meta_from: Option<PathBuf>,
    },
    Path(PathBuf),
    Stream(StreamSource),
}

#[derive(Default)]
pub struct SourceTree {
    pub children: BTreeMap<Vec<u8>, VirtualEntry>,
    /// The snapshot's paths, as recorded.
    pub paths: Vec<Vec<u8>>,
    /// The paths on disk given as sources, absolute, as the walk names them.
    pub disk_paths: Vec<PathBuf>,
}

/// The normal components of an absolute path (`.` dropped, `..` resolved lexically).
fn components(path: &Path) -> Vec<Vec<u8>> {
    let mut parts: Vec<Vec<u8>> = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => parts.push(part.as_bytes().to_vec()),
            Component::ParentDir => {
                parts.pop();
            }
            _ => {}
        }
    }
    parts
}

impl SourceTree {
    pub fn build(sources: Vec<Source>) -> Result<SourceTree> {
        let mut tree = SourceTree::default();
        for source in sources {
            let (absolute, entry) = match source {
                Source::Path(path) => {
                    let absolute = std::path::absolute(&path)
                        .map_err(|e| Error::io(format!("cannot resolve {}", path.display()), e))?;
                    tree.disk_paths.push(absolute.clone());
                    (absolute.clone(), VirtualEntry::Path(absolute))
                }
                Source::Stream(stream) => {
                    let path = PathBuf::from(&stream.snapshot_path);
                    if !path.is_absolute() {
                        return Err(Error::StreamPathNotAbsolute {
                            path: stream.snapshot_path,
                        });
                    }
                    (path, VirtualEntry::Stream(stream))
                }
            };
            let parts = components(&absolute);
            let mut recorded = b"/".to_vec();
            recorded.extend(parts.join(&b'/'));
            tree.insert(&parts, entry)?;
            if !tree.paths.contains(&recorded) {
                tree.paths.push(recorded);
            }
        }
        tree.paths.sort();
        Ok(tree)
    }

    fn insert(&mut self, parts: &[Vec<u8>], entry: VirtualEntry) -> Result<()> {
        let Some((last, ancestors)) = parts.split_last() else {
            return Err(Error::WholeRootFileSystem);
        };
        let mut level = &mut self.children;
        let mut walked = PathBuf::from("/");
        for part in ancestors {
            walked.push(std::ffi::OsStr::from_bytes(part));
            let is_real = matches!(entry, VirtualEntry::Path(_));
            let next = level
                .entry(part.clone())
                .or_insert_with(|| VirtualEntry::Dir {
                    children: BTreeMap::new(),
                    meta_from: is_real.then(|| walked.clone()),
                });
            match next {
                VirtualEntry::Dir { children, .. } => level = children,
                // An ancestor is backed up whole: this path is already inside it.
                VirtualEntry::Path(_) if is_real => return Ok(()),
                _ => return Err(conflict(&walked)),
            }
        }
        match (level.get(last), &entry) {
            (None, _) => {
                level.insert(last.clone(), entry);
            }
            // A real path covers the virtual directories of sources below it.
            (Some(VirtualEntry::Dir { children, .. }), VirtualEntry::Path(_))
                if children
                    .values()
                    .all(|c| !matches!(c, VirtualEntry::Stream(_))) =>
            {
                level.insert(last.clone(), entry);
            }
            (Some(VirtualEntry::Path(existing)), VirtualEntry::Path(new)) if existing == new => {}
            _ => return Err(conflict(&walked.join(std::ffi::OsStr::from_bytes(last)))),
        }
        Ok(())
    }
}

fn conflict(path: &Path) -> Error {
    Error::SourceConflict {
        path: path.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_nest_below_the_root_and_duplicates_merge() {
        let tree = SourceTree::build(vec![
            Source::Path("/data/a".into()),
            Source::Path("/data/a/inner".into()),
            Source::Path("/srv/./b/".into()),
        ])
        .unwrap();
        assert_eq!(
            tree.paths,
            vec![
                b"/data/a".to_vec(),
                b"/data/a/inner".to_vec(),
                b"/srv/b".to_vec()
            ]
        );
        assert_eq!(
            tree.children.keys().cloned().collect::<Vec<_>>(),
            vec![b"data".to_vec(), b"srv".to_vec()]
        );
    }

    #[test]
    fn a_stream_and_a_path_cannot_share_a_name() {
        let stream = StreamSource {
            snapshot_path: "/data/a".into(),
            label: "x".into(),
            reader: Box::new(std::io::empty()),
            may_be_empty: false,
        };
        let error = SourceTree::build(vec![Source::Path("/data/a".into()), Source::Stream(stream)])
            .err()
            .unwrap();
        assert!(
            error.to_string().contains("two sources claim /data/a"),
            "{error}"
        );
        assert!(SourceTree::build(vec![Source::Path("/".into())]).is_err());
    }
}
