use super::ObjectKind;
use thiserror::Error;

/// What went wrong talking to the storage. Each variant says what a user can do about it.
#[derive(Debug, Error)]
pub enum BackendError {
    #[error("{kind}/{name} does not exist in the repository")]
    NotFound { kind: ObjectKind, name: String },

    #[error("the repository at {location} does not exist (run `neverwiped-sidecar init` first)")]
    NoRepository { location: String },

    #[error("a repository already exists at {location}")]
    AlreadyExists { location: String },

    #[error("the server refused the credentials (401 Unauthorized): check NEVERWIPED_GATE_USERNAME and NEVERWIPED_GATE_PASSWORD")]
    Unauthorized,

    #[error("the server forbids this operation (403 Forbidden) on {what}: the credentials may be append-only or lack access to this repository")]
    Forbidden { what: String },

    #[error("the server refused {what} as too large (413 Payload Too Large)")]
    TooLarge { what: String },

    #[error("the repository is full (507 Insufficient Storage; the server says: {message}): free space or raise the quota, then run again (what was uploaded is reused)")]
    RepositoryFull { message: String },

    #[error("no space left on the device holding {path}")]
    DiskFull { path: String },

    #[error("the server answered {status} to {what}: {body}")]
    Http {
        status: u16,
        what: String,
        body: String,
    },

    #[error("cannot reach the repository at {location}: {message}")]
    Transport { location: String, message: String },

    /// The server's TLS certificate is not trusted. Final: sending again cannot change it.
    #[error("the certificate of the server at {location} is not accepted: {message}")]
    Certificate { location: String, message: String },

    /// An answer longer than what was asked for (or than the ceiling for whole objects); a
    /// misbehaving server must not be able to fill memory.
    #[error(
        "the server's answer to {what} is longer than the {limit_bytes} bytes expected; refused"
    )]
    OversizedAnswer { what: String, limit_bytes: u64 },

    /// The retry layer gave up: every try within the time budget failed in a way that may pass.
    #[error("{last_error} (gave up after {tries} tries in {waited_secs:.0} s: the retry budget is spent)")]
    RetryBudgetSpent {
        #[source]
        last_error: Box<BackendError>,
        tries: u32,
        waited_secs: f64,
    },

    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },

    #[error("invalid repository address {address:?}: {reason}")]
    InvalidAddress { address: String, reason: String },
}

impl BackendError {
    /// Whether the same request may succeed if sent again: connection problems and 5xx answers.
    ///
    /// For a write, these are also the failures after which the write's outcome is unknown: the
    /// request may have reached the server and been stored before the answer was lost.
    pub fn is_retryable(&self) -> bool {
        match self {
            BackendError::Transport { .. } => true,
            BackendError::Http { status, .. } => *status >= 500 && *status != 507,
            _ => false,
        }
    }

    /// The error a retry layer's last try ended with, under any [`BackendError::RetryBudgetSpent`].
    pub fn root(&self) -> &BackendError {
        match self {
            BackendError::RetryBudgetSpent { last_error, .. } => last_error.root(),
            other => other,
        }
    }

    /// Whether the repository refused a write or delete as not allowed, rather than failed it: a
    /// read-only file system or folder, or a server answering 403 or 405 (append-only, read-only).
    pub fn refuses_writes(&self) -> bool {
        match self.root() {
            BackendError::Forbidden { .. } => true,
            BackendError::Http { status, .. } => *status == 405,
            BackendError::Io { source, .. } => matches!(
                source.raw_os_error(),
                Some(libc::EROFS | libc::EACCES | libc::EPERM)
            ),
            _ => false,
        }
    }

    /// An I/O error on a local path, classifying "disk full" so users see it plainly.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> BackendError {
        let what = what.into();
        if source.raw_os_error() == Some(libc::ENOSPC) {
            return BackendError::DiskFull { path: what };
        }
        BackendError::Io { what, source }
    }
}

pub type BackendResult<T> = Result<T, BackendError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_of_writes_are_told_apart_from_failures() {
        let io = |errno| BackendError::io("locks/x", std::io::Error::from_raw_os_error(errno));
        let http = |status| BackendError::Http {
            status,
            what: "writing locks/x".into(),
            body: String::new(),
        };
        let forbidden = BackendError::Forbidden {
            what: "writing locks/x".into(),
        };
        for refused in [
            io(libc::EROFS),
            io(libc::EACCES),
            io(libc::EPERM),
            http(405),
            forbidden,
        ] {
            assert!(refused.refuses_writes(), "{refused}");
        }
        for failed in [io(libc::EIO), io(libc::ENOSPC), http(500), http(404)] {
            assert!(!failed.refuses_writes(), "{failed}");
        }
        let spent = BackendError::RetryBudgetSpent {
            last_error: Box::new(http(405)),
            tries: 3,
            waited_secs: 1.0,
        };
        assert!(spent.refuses_writes(), "the last try's answer counts");
    }
}
