//! How to reach a gate (address, credentials, CA) and how long to wait for it.

use std::fmt;
use std::time::Duration;
use url::Url;

/// The number of requests in flight at once when a caller does not say.
pub const DEFAULT_CONNECTIONS: usize = 5;

/// The longest whole object read into memory: a pack is at most 256 MiB plus one blob (see the
/// config's `pack_target_bytes`), so an answer longer than this is a misbehaving server.
pub const DEFAULT_MAX_OBJECT_BYTES: u64 = 1 << 30;

/// How to reach a restic REST server. The password never appears in `Debug` output or messages.
#[derive(Clone)]
pub struct RestConfig {
    /// The repository's URL, `http(s)://host[:port]/path/`, without credentials (see
    /// [`neverwiped_contract::location::RestLocation::url`]).
    pub url: Url,
    /// The HTTP basic-auth user, if the server asks for one.
    pub username: Option<String>,
    /// The HTTP basic-auth password.
    pub password: Option<String>,
    /// Extra trusted CA certificates (PEM, one or more) for a server with a private certificate.
    pub ca_certificate_pem: Option<Vec<u8>>,
    /// How many requests may be in flight at once (at least one is).
    pub connections: usize,
}

impl RestConfig {
    /// A configuration without credentials or extra CA, with [`DEFAULT_CONNECTIONS`].
    pub fn new(url: Url) -> RestConfig {
        RestConfig {
            url,
            username: None,
            password: None,
            ca_certificate_pem: None,
            connections: DEFAULT_CONNECTIONS,
        }
    }
}

impl Default for RestConfig {
    /// rest-server's own default address (`http://localhost:8000/`), without credentials; meant
    /// to be completed with `RestConfig { url, ..RestConfig::default() }`.
    fn default() -> RestConfig {
        let url = Url::parse("http://localhost:8000/").expect("a valid constant URL");
        RestConfig::new(url)
    }
}

impl fmt::Debug for RestConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RestConfig")
            .field("url", &self.url.as_str())
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field(
                "ca_certificate_pem",
                &self.ca_certificate_pem.as_ref().map(|pem| pem.len()),
            )
            .field("connections", &self.connections)
            .finish()
    }
}

/// Timeouts and limits of one request of a [`super::RestBackend`]. The defaults suit a real
/// server; tests shorten them. Retries are the retry layer's ([`crate::backend::retry`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestOptions {
    /// The longest wait for a TCP (and TLS) connection.
    pub connect_timeout: Duration,
    /// The longest silence from the server: before it answers a request that carries no data,
    /// and between two pieces of an answer's body.
    pub read_timeout: Duration,
    /// The slowest upload that is not taken for a stalled one: a write may last
    /// `read_timeout` plus its size at this rate.
    pub min_upload_bytes_per_sec: u64,
    /// The longest answer accepted to a read of a whole object or a listing.
    pub max_object_bytes: u64,
}

impl Default for RestOptions {
    fn default() -> RestOptions {
        RestOptions {
            connect_timeout: Duration::from_secs(30),
            read_timeout: Duration::from_secs(120),
            min_upload_bytes_per_sec: 32 * 1024,
            max_object_bytes: DEFAULT_MAX_OBJECT_BYTES,
        }
    }
}
