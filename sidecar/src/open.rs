//! Opening a repository from its location, where its secrets come from, and how to talk to it:
//! the one way the command line and the plugin do it.
//!
//! A caller says where each secret is ([`SecretSource`]: a file, a variable of the environment,
//! or bytes held in memory such as a Kubernetes Secret's value); every secret is read and trimmed
//! here by one rule ([`SecretSource::read`]).

use std::path::PathBuf;
use std::sync::Arc;

use neverwiped_contract::location::RepositoryLocation;
use zeroize::Zeroizing;

use crate::backend::local::LocalBackend;
use crate::backend::rest::{self, RestConfig, RestOptions};
use crate::backend::retry::RetryPolicy;
use crate::backend::SharedBackend;
use crate::repository::Repository;

/// Where a secret comes from.
#[derive(Clone)]
pub enum SecretSource {
    /// A file; one trailing newline (`echo pw > file`) is dropped.
    File(PathBuf),
    /// A variable of the environment, taken as it is.
    Env(String),
    /// Bytes already held, such as a Kubernetes Secret's value; one trailing newline is dropped,
    /// as from a file, since such values are often written from files.
    Memory(Zeroizing<Vec<u8>>),
}

impl std::fmt::Debug for SecretSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretSource::File(path) => write!(f, "File({})", path.display()),
            SecretSource::Env(name) => write!(f, "Env({name})"),
            SecretSource::Memory(_) => f.write_str("Memory(<redacted>)"),
        }
    }
}

impl SecretSource {
    /// The secret's bytes, wiped from memory when dropped; `what` names it in errors.
    pub fn read(&self, what: &str) -> Result<Zeroizing<Vec<u8>>, OpenError> {
        let bytes = match self {
            SecretSource::File(path) => {
                let bytes = std::fs::read(path).map_err(|error| OpenError::Secret {
                    what: what.to_owned(),
                    reason: format!("cannot read the file {}: {error}", path.display()),
                })?;
                without_trailing_newline(Zeroizing::new(bytes))
            }
            SecretSource::Env(name) => match std::env::var_os(name) {
                Some(value) => Zeroizing::new(std::os::unix::ffi::OsStringExt::into_vec(value)),
                None => {
                    return Err(OpenError::Secret {
                        what: what.to_owned(),
                        reason: format!("{name} is not set"),
                    })
                }
            },
            SecretSource::Memory(bytes) => without_trailing_newline(bytes.clone()),
        };
        Ok(bytes)
    }

    /// The secret as text (a gate password goes into an HTTP header).
    pub fn read_text(&self, what: &str) -> Result<Zeroizing<String>, OpenError> {
        let bytes = self.read(what)?;
        let text = std::str::from_utf8(&bytes).map_err(|_| OpenError::Secret {
            what: what.to_owned(),
            reason: "it is not UTF-8".into(),
        })?;
        Ok(Zeroizing::new(text.to_owned()))
    }
}

/// Drops one trailing newline (`\n` or `\r\n`): the one trimming rule of every secret.
pub fn without_trailing_newline(mut bytes: Zeroizing<Vec<u8>>) -> Zeroizing<Vec<u8>> {
    if bytes.ends_with(b"\n") {
        bytes.pop();
        if bytes.ends_with(b"\r") {
            bytes.pop();
        }
    }
    bytes
}

/// The gate's HTTP basic authentication: a user name, and where its password is.
#[derive(Debug, Clone, Default)]
pub struct GateLogin {
    pub username: Option<String>,
    pub password: Option<SecretSource>,
}

/// How to talk to the repository.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// How long each call to a gate is retried.
    pub retry: RetryPolicy,
    /// Timeouts and limits of each request to a gate.
    pub rest: RestOptions,
    /// PEM CA certificate(s) that sign the gate's TLS certificate, when a private CA did.
    pub ca_certificate_pem: Option<Vec<u8>>,
    /// The key the password opens, tried first (as `--key-hint`).
    pub key_hint: Option<String>,
}

/// A repository that could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{what}: {reason}")]
    Secret { what: String, reason: String },
    #[error("a gate password is set without a user name: set NEVERWIPED_GATE_USERNAME too")]
    PasswordWithoutUser,
    #[error("the repository password is empty")]
    EmptyPassword,
    #[error(transparent)]
    Repository(#[from] crate::Error),
}

impl OpenError {
    /// As an [`anyhow::Error`] whose chain holds the engine's own error, when it is one, so that
    /// its exit status (wrong password, no repository, …) is still found.
    pub fn into_anyhow(self) -> anyhow::Error {
        match self {
            OpenError::Repository(error) => error.into(),
            other => other.into(),
        }
    }
}

impl From<crate::backend::BackendError> for OpenError {
    fn from(error: crate::backend::BackendError) -> OpenError {
        OpenError::Repository(error.into())
    }
}

/// The backend of the repository at `location`: a folder as it is, a gate with its login,
/// TLS roots, limits and retries.
pub fn open_backend(
    location: &RepositoryLocation,
    login: &GateLogin,
    options: &OpenOptions,
) -> Result<SharedBackend, OpenError> {
    let rest_location = match location {
        RepositoryLocation::Local(folder) => return Ok(Arc::new(LocalBackend::new(folder))),
        RepositoryLocation::Rest(rest_location) => rest_location,
    };
    let username = login.username.clone().filter(|name| !name.is_empty());
    if username.is_none() && login.password.is_some() {
        return Err(OpenError::PasswordWithoutUser);
    }
    let password = match &login.password {
        Some(source) => Some(source.read_text("the gate password")?.to_string()),
        None => None,
    };
    let config = RestConfig {
        url: rest_location.url().clone(),
        username,
        password,
        ca_certificate_pem: options.ca_certificate_pem.clone(),
        ..RestConfig::default()
    };
    Ok(rest::open(config, options.rest.clone(), options.retry)?)
}

/// Opens the repository at `location` with the password from `password`.
pub async fn open(
    location: &RepositoryLocation,
    password: &SecretSource,
    login: &GateLogin,
    options: &OpenOptions,
) -> Result<Repository, OpenError> {
    let backend = open_backend(location, login, options)?;
    let password = password.read("the repository password")?;
    if password.is_empty() {
        return Err(OpenError::EmptyPassword);
    }
    Ok(Repository::open_with_key_hint(backend, &password, options.key_hint.as_deref()).await?)
}

#[cfg(test)]
#[path = "open_tests.rs"]
mod tests;
