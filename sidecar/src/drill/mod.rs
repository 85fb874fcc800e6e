//! Restore drills: a snapshot restored into scratch space and held to itself, to prove it can be
//! restored and to measure how long that takes (see [`neverwiped_contract::drill`]).
//!
//! - [`volume`]: each volume's files (all, or a [`sample`] of them) restored under
//!   `SCRATCH/files`, read back and held to the snapshot, then removed: the scratch space needs
//!   room for the largest volume only (its sampled share), not for the snapshot.
//! - [`database`]: each database dump loaded into a throwaway server ([`postgres_server`],
//!   [`mariadb_server`]) whose data directory is under `SCRATCH/databases/NAME`, its tables'
//!   rows counted against what the snapshot recorded; the server is stopped and its folder
//!   removed however the drill of that database ends.

pub mod database;
pub mod mariadb_server;
pub mod postgres_server;
pub mod sample;
pub mod server;
pub mod volume;

use crate::dump::DatabaseTarget;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// A server started for one database of a drill. Dropped, it stops the server, then removes its
/// folder (the fields are dropped in this order).
pub struct ThrowawayServer {
    target: DatabaseTarget,
    process: server::ServerProcess,
    _folder: server::ServerDir,
}

impl ThrowawayServer {
    /// Starts a server for dumps of `engine` (`postgresql`, `mariadb` or `mysql`, as a snapshot
    /// records it) in `dir`.
    pub fn start(engine: &str, dir: &Path) -> Result<ThrowawayServer> {
        match engine {
            "postgresql" => postgres_server::start(dir),
            // MariaDB's server loads the dumps of MySQL's tools too.
            "mariadb" | "mysql" => mariadb_server::start(dir),
            other => anyhow::bail!("no throwaway server for the engine {other:?}"),
        }
    }

    /// The server, as the restore of database entry `name` reaches it.
    pub fn target_for(&self, name: &str) -> DatabaseTarget {
        DatabaseTarget {
            name: name.to_owned(),
            ..self.target.clone()
        }
    }

    /// What the server is: `PostgreSQL`, `MariaDB`.
    pub fn label(&self) -> &'static str {
        self.process.label
    }

    /// The end of the server's log, for an error.
    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }
}

/// A folder of the scratch space, removed with all it holds when dropped (however the drill of
/// what it holds ends).
pub struct RemovedOnDrop(pub PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        if let Err(error) = remove_tree(&self.0) {
            tracing::warn!("{}", crate::text::escaped(&format!("{error:#}")));
        }
    }
}

/// Removes `path` and all it holds (nothing when it is not there), first making its folders
/// writable: a restored folder may be read-only.
pub fn remove_tree(path: &Path) -> Result<()> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => return Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(_) => {}
    }
    open_folders(path);
    std::fs::remove_dir_all(path).with_context(|| format!("cannot remove {}", path.display()))
}

/// Gives the owner every permission on each folder at or below `path` (symbolic links not
/// followed).
fn open_folders(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return;
    };
    if !meta.is_dir() {
        return;
    }
    let mode = meta.permissions().mode() | 0o700;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
    for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
        open_folders(&entry.path());
    }
}
