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

    /// An open derived as many keys as one open may (see [`crate::key_search`]).
    #[error(
        "tried {tried} of the repository's {total} keys without opening it, as many as one open \
         may try: name your key with --key-hint (NEVERWIPED_KEY_HINT), the first digits of its id \
         as `key list` shows it"
    )]
    KeySearchSpent { tried: usize, total: usize },

    #[error("no snapshot matches {0:?}")]
    SnapshotNotFound(String),

    /// `latest` of a host (a plan's `NAMESPACE/PLAN`) found nothing: the hosts the repository
    /// holds, so that a Restore that names the wrong origin says which are there.
    #[error("no snapshot matches {wanted:?}; the repository holds {}", origins_held(.held))]
    NoSnapshotOfHost {
        wanted: String,
        /// Each host with snapshots, and how many it has.
        held: Vec<(String, usize)>,
    },

    #[error("{prefix:?} matches {count} snapshots: give more digits")]
    AmbiguousSnapshot { prefix: String, count: usize },

    #[error("the repository is locked by {holder}; if that process is gone, run `neverwiped-sidecar unlock`")]
    Locked { holder: String },

    /// The run's lock could not be kept (refreshes failed, or another process took the repository
    /// over it); the run stopped before anything it wrote could be deleted under it.
    #[error("the repository lock was lost: {0}")]
    LockLost(String),

    /// A stop signal arrived: nothing more is committed.
    #[error("stopping on a signal: nothing more is written")]
    Stopping,

    #[error("blob {id} ({context}) is not in the index: the repository is damaged (missing data)")]
    BlobMissing { id: BlobId, context: String },

    /// A copy's read of its source failed: says which end of the copy it was (the other errors
    /// of a copy are the destination's).
    #[error("cannot read the source repository {location} (--from-repo): {error}")]
    CopySource { location: String, error: Box<Error> },

    #[error("{what} is corrupt: {reason}")]
    Corrupt { what: String, reason: String },

    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },

    #[error("{what}: no space left on the device")]
    DiskFull { what: String },

    #[error("nothing was backed up: {reason}")]
    NothingRead { reason: String },

    /// Include or exclude patterns restic refuses too (named with their option).
    #[error(transparent)]
    InvalidPatterns(#[from] crate::filter::InvalidPatterns),

    #[error("backing up the whole root file system `/` is not supported; name its folders")]
    WholeRootFileSystem,

    #[error("stream path {path:?} must be absolute")]
    StreamPathNotAbsolute { path: String },

    #[error("two sources claim {path} in the snapshot")]
    SourceConflict { path: String },

    #[error("no keep rule given: forget would remove every snapshot")]
    NoKeepRule,

    #[error("the new password is empty")]
    EmptyNewPassword,

    #[error("no key matches {prefix:?}")]
    KeyNotFound { prefix: String },

    #[error("{prefix:?} matches {count} keys: give more digits")]
    AmbiguousKey { prefix: String, count: usize },

    #[error("this is the key in use: open the repository with another password to remove it")]
    KeyInUse,

    #[error("{name:?} is not a database name for --database NAME=URI: use letters, digits, '.', '_' and '-' (at most 63)")]
    InvalidDatabaseName { name: String },

    #[error("{tools} not found on PATH: install {package} to use database {database}")]
    DatabaseToolMissing {
        tools: String,
        package: &'static str,
        database: String,
    },

    #[error("the target server {server} is not empty: it holds {occupied}; the dump of {entry} is not restored over it. Drop them first, or pass --overwrite-databases to drop them and restore")]
    TargetServerNotEmpty {
        server: String,
        occupied: String,
        entry: String,
    },

    #[error("{0}")]
    DumpNotFound(String),

    #[error("{entry} {problem}")]
    DumpNotRestorable { entry: String, problem: String },

    #[error("the password of database {name} {problem}")]
    DatabasePassword { name: String, problem: &'static str },

    /// A request that cannot be met, in words for the user (still used by the restore planner).
    #[error("{0}")]
    Usage(String),

    /// A hook that failed the run (a pre hook with `onError: Fail`), in words for the user.
    #[error("{0}")]
    Hook(String),

    #[error("the backup was interrupted: {0}")]
    Interrupted(String),

    /// A restore that stopped part way (a full disk, a lost connection): what it restored is in
    /// the target, whole and with its metadata (directories too); files it had not finished were
    /// removed (`removed`); the rest of the snapshot is not restored.
    #[error("{}", stopped_restore(cause, removed))]
    RestoreStopped {
        cause: Box<Error>,
        removed: Vec<String>,
    },

    /// A restore that wrote everything it could: the files named lack the ranges given.
    #[error("{}", incomplete_restore(damaged))]
    RestoreIncomplete { damaged: Vec<DamagedFile> },
}

/// A byte range of a file, `start..end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteRange {
    pub start: u64,
    pub end: u64,
}

/// A restored file whose content the repository could not give whole: those ranges read as
/// zeros; the rest of the file, and its metadata, are restored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedFile {
    /// The snapshot path (`/data/db/table`).
    pub path: String,
    /// Sorted, each a whole blob of the file.
    pub ranges: Vec<ByteRange>,
    /// Why, per distinct reason (which blob of which pack, and what was wrong).
    pub reasons: Vec<String>,
}

impl std::fmt::Display for DamagedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ranges: Vec<String> = self
            .ranges
            .iter()
            .map(|r| format!("{}-{}", r.start, r.end.saturating_sub(1)))
            .collect();
        let (ranges, reasons) = (ranges.join(", "), self.reasons.join("; "));
        write!(f, "{} (bytes {ranges}: {reasons})", self.path)
    }
}

fn incomplete_restore(damaged: &[DamagedFile]) -> String {
    let files: Vec<String> = damaged.iter().map(|file| file.to_string()).collect();
    format!(
        "the restore is incomplete: the repository is damaged, and {} file(s) lack some content \
         (those bytes read as zeros; everything else is restored): {}",
        files.len(),
        files.join("; ")
    )
}

fn stopped_restore(cause: &Error, removed: &[String]) -> String {
    const NAMED: usize = 10;
    let removed = match removed {
        [] => String::new(),
        files if files.len() <= NAMED => format!(" (unfinished, removed: {})", files.join(", ")),
        files => format!(
            " (unfinished, removed: {} and {} more)",
            files[..NAMED].join(", "),
            files.len() - NAMED
        ),
    };
    format!(
        "the restore stopped: {cause}; every file it left in the target is whole and has its \
         metadata{removed}, the rest of the snapshot is not restored"
    )
}

/// The hosts of a repository's snapshots, for a person: `snapshots of a/b (3), c/d (1)`.
fn origins_held(held: &[(String, usize)]) -> String {
    if held.is_empty() {
        return "no snapshots".to_owned();
    }
    let listed: Vec<String> = held
        .iter()
        .map(|(host, count)| format!("{} ({count})", neverwiped_contract::text::escaped(host)))
        .collect();
    format!("snapshots of {}", listed.join(", "))
}

impl Error {
    /// The exit status this error ends the process with.
    pub fn exit_status(&self) -> ExitStatus {
        match self {
            Error::WrongPassword => ExitStatus::WrongPassword,
            Error::Locked { .. } => ExitStatus::LockFailed,
            Error::Backend(BackendError::NoRepository { .. }) => ExitStatus::NoRepository,
            Error::Format(FormatError::NotARepository { .. }) => ExitStatus::NoRepository,
            Error::RestoreStopped { .. } => ExitStatus::Partial,
            Error::NoSnapshotOfHost { .. } => ExitStatus::NoSnapshotOfHost,
            Error::CopySource { error, .. } => error.exit_status(),
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
