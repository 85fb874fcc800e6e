//! The engine's errors, each mapped to the exit status a user or the operator sees.

use crate::backend::BackendError;
use crate::format::FormatError;
use crate::ids::BlobId;
use neverwiped_contract::ExitStatus;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum Error {
    #[error(transparent)]
    Backend(#[from] BackendError),

    #[error(transparent)]
    Format(#[from] FormatError),

    #[error("wrong password: no key of the repository opens with it")]
    WrongPassword,

    #[error("the repository has no keys: it was not initialised completely")]
    NoKeys,

    #[error("no snapshot matches {0:?}")]
    SnapshotNotFound(String),

    #[error("{prefix:?} matches {count} snapshots: give more digits")]
    AmbiguousSnapshot { prefix: String, count: usize },

    #[error("the repository is locked by {holder}; if that process is gone, run `neverwiped-sidecar unlock`")]
    Locked { holder: String },

    /// The run's lock could not be kept (refreshes failed, or another process took the repository
    /// over it); the run stopped before anything it wrote could be deleted under it.
    #[error("the repository lock was lost: {0}")]
    LockLost(String),

    #[error("blob {id} ({context}) is not in the index: the repository is damaged (missing data)")]
    BlobMissing { id: BlobId, context: String },

    #[error("{what} is corrupt: {reason}")]
    Corrupt { what: String, reason: String },

    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },

    #[error("no space left on the device while writing {what}")]
    DiskFull { what: String },

    #[error("nothing was backed up: {reason}")]
    NothingRead { reason: String },

    #[error("{0}")]
    Usage(String),

    #[error("the backup was interrupted: {0}")]
    Interrupted(String),
}

impl Error {
    /// The exit status this error ends the process with.
    pub fn exit_status(&self) -> ExitStatus {
        match self {
            Error::WrongPassword => ExitStatus::WrongPassword,
            Error::Locked { .. } => ExitStatus::LockFailed,
            Error::Backend(BackendError::NoRepository { .. }) => ExitStatus::NoRepository,
            Error::Format(FormatError::NotARepository { .. }) => ExitStatus::NoRepository,
            _ => ExitStatus::Failed,
        }
    }

    /// An I/O error on a local file, with "disk full" told apart.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Error {
        let what = what.into();
        if source.raw_os_error() == Some(libc::ENOSPC) {
            return Error::DiskFull { what };
        }
        Error::Io { what, source }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
