//! The gate: a restic REST server (v2 protocol) over HTTP or HTTPS.
//!
//! The protocol maps each backend call onto one request below the repository's URL:
//!
//! | call          | request                                                        |
//! |---------------|----------------------------------------------------------------|
//! | `create`      | `POST /?create=true` (after a `HEAD /config` that must be 404) |
//! | `list`        | `GET /{type}/` with `Accept: application/vnd.x.restic.rest.v2` |
//! | `stat`        | `HEAD /{type}/{name}` (the size is the `Content-Length`)       |
//! | `read`        | `GET /{type}/{name}`, with `Range: bytes=a-b` for a range      |
//! | `write`       | `POST /{type}/{name}` with the bytes as the body               |
//! | `delete`      | `DELETE /{type}/{name}`                                        |
//!
//! The config object is `/config`. Failures that may pass (connection problems, 5xx) are retried
//! with exponential backoff; a 4xx never is. A write whose outcome is unknown, or that the server
//! refuses because the object already exists, is settled by looking at what the server holds.

use super::{Backend, BackendError, BackendResult, ObjectInfo, ObjectKind};
use async_trait::async_trait;
use bytes::Bytes;
use rand::Rng;
use reqwest::header::{HeaderMap, ACCEPT, CONTENT_LENGTH, RANGE};
use reqwest::{Client, Method, RequestBuilder, StatusCode};
use serde::Deserialize;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use url::Url;

/// The media type that asks a server for listings with sizes (version 2 of the protocol).
const REST_V2_MEDIA_TYPE: &str = "application/vnd.x.restic.rest.v2";

/// How much of an error answer's body is quoted in messages.
const ERROR_BODY_CHARS: usize = 200;

/// The most memory reserved up front for an answer's body, whatever its `Content-Length` says.
const MAX_RESERVED_BYTES: u64 = 256 * 1024 * 1024;

/// The number of requests in flight at once when a caller does not say.
pub const DEFAULT_CONNECTIONS: usize = 5;

/// How to reach a restic REST server. The password never appears in `Debug` output or messages.
#[derive(Clone)]
pub struct RestConfig {
    /// The repository's URL, `http(s)://host[:port]/path/`, without credentials (see
    /// [`parse_rest_address`]).
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

/// When to send a failed request again: `attempts` tries in all, the pause before each retry
/// doubling from `first_delay` up to `max_delay`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries in all, the first one included (at least one is made).
    pub attempts: u32,
    /// The pause before the first retry.
    pub first_delay: Duration,
    /// The longest pause between two tries.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    /// Five tries, pausing about 0.5 s, 1 s, 2 s and 4 s in between.
    fn default() -> RetryPolicy {
        RetryPolicy {
            attempts: 5,
            first_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
        }
    }
}

impl RetryPolicy {
    /// The pause before retry number `retry` (1 for the first retry).
    ///
    /// The doubled delay is jittered down to between half and all of itself, so that the many
    /// requests a server failed at the same moment do not all come back at the same moment.
    pub fn delay_before_retry(&self, retry: u32) -> Duration {
        let doublings = retry.saturating_sub(1).min(31);
        let delay = self
            .first_delay
            .saturating_mul(1u32 << doublings)
            .min(self.max_delay);
        delay.mul_f64(rand::thread_rng().gen_range(0.5..=1.0))
    }
}

/// Timeouts and retries of a [`RestBackend`]. The defaults suit a real server; tests shorten them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestOptions {
    /// How often to try a request that failed in a way that may pass.
    pub retry: RetryPolicy,
    /// The longest wait for a TCP (and TLS) connection.
    pub connect_timeout: Duration,
    /// The longest silence from the server: before it answers a request that carries no data,
    /// and between two pieces of an answer's body.
    pub read_timeout: Duration,
    /// The slowest upload that is not taken for a stalled one: a write may last
    /// `read_timeout` plus its size at this rate.
    pub min_upload_bytes_per_sec: u64,
}

impl Default for RestOptions {
    fn default() -> RestOptions {
        RestOptions {
            retry: RetryPolicy::default(),
            connect_timeout: Duration::from_secs(30),
            read_timeout: Duration::from_secs(120),
            min_upload_bytes_per_sec: 32 * 1024,
        }
    }
}

/// Parses a repository address `rest:http(s)://host[:port]/path/` (the `rest:` prefix may be
/// left out) into the repository's URL, always ending in `/`.
///
/// Credentials in the address are refused: they would end up in process listings, shell history
/// and logs. They come from `NEVERWIPED_GATE_USERNAME` and `NEVERWIPED_GATE_PASSWORD` instead.
pub fn parse_rest_address(address: &str) -> BackendResult<Url> {
    let invalid = |reason: String| BackendError::InvalidAddress {
        address: redact_userinfo(address),
        reason,
    };
    let without_prefix = address.strip_prefix("rest:").unwrap_or(address);
    let url = Url::parse(without_prefix).map_err(|error| invalid(error.to_string()))?;
    checked_repository_url(url).map_err(invalid)
}

/// Checks that `url` can name a repository, and ends its path with `/` so that object paths can
/// be joined to it.
fn checked_repository_url(mut url: Url) -> Result<Url, String> {
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(format!(
            "the scheme must be http or https, not {:?}",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("the address names no host".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "credentials do not belong in the address: set NEVERWIPED_GATE_USERNAME \
                    and NEVERWIPED_GATE_PASSWORD instead"
                .into(),
        );
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("the address may not have a query (?...) or a fragment (#...)".into());
    }
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    Ok(url)
}

/// `address` with anything between `://` and the last `@` of the authority replaced, so that an
/// error about an address never repeats a password.
fn redact_userinfo(address: &str) -> String {
    let Some(authority_start) = address.find("://").map(|index| index + 3) else {
        return address.to_owned();
    };
    let authority_end = address[authority_start..]
        .find('/')
        .map_or(address.len(), |index| authority_start + index);
    match address[authority_start..authority_end].rfind('@') {
        Some(at) => format!(
            "{}***{}",
            &address[..authority_start],
            &address[authority_start + at..]
        ),
        None => address.to_owned(),
    }
}

/// HTTP basic-auth credentials; `Debug` shows the user only.
#[derive(Clone)]
struct Credentials {
    username: String,
    password: Option<String>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// One entry of a version 2 listing.
#[derive(Deserialize)]
struct ListedObject {
    name: String,
    size: u64,
}

/// A server's whole answer to one request.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

/// A repository on a restic REST server. One HTTP client (and its connection pool) serves every
/// call; at most `connections` requests are in flight at once.
#[derive(Debug)]
pub struct RestBackend {
    /// The repository's URL, ending in `/`, without credentials.
    base: Url,
    client: Client,
    credentials: Option<Credentials>,
    options: RestOptions,
    request_slots: Arc<Semaphore>,
}

impl RestBackend {
    /// A backend with the default timeouts and retries.
    pub fn new(config: RestConfig) -> BackendResult<RestBackend> {
        RestBackend::with_options(config, RestOptions::default())
    }

    /// A backend with chosen timeouts and retries.
    pub fn with_options(config: RestConfig, options: RestOptions) -> BackendResult<RestBackend> {
        let base = checked_repository_url(config.url.clone()).map_err(|reason| {
            BackendError::InvalidAddress {
                address: redact_userinfo(config.url.as_str()),
                reason,
            }
        })?;
        let invalid = |reason: String| BackendError::InvalidAddress {
            address: format!("rest:{base}"),
            reason,
        };
        if config.username.is_none() && config.password.is_some() {
            return Err(invalid(
                "a password was given without a user name: set NEVERWIPED_GATE_USERNAME too".into(),
            ));
        }
        let credentials = config.username.map(|username| Credentials {
            username,
            password: config.password,
        });
        let connections = config.connections.max(1);
        let client = build_client(config.ca_certificate_pem.as_deref(), &options, connections)
            .map_err(invalid)?;
        Ok(RestBackend {
            base,
            client,
            credentials,
            options,
            request_slots: Arc::new(Semaphore::new(connections)),
        })
    }

    /// The URL of one object.
    fn object_url(&self, kind: ObjectKind, name: &str) -> BackendResult<Url> {
        let relative = match kind {
            ObjectKind::Config => "config".to_owned(),
            _ => {
                // Names are joined into the URL: anything but plain digits and letters could
                // climb out of the repository (`..`) or change the request (`?`, `#`).
                if name.is_empty() || !name.bytes().all(|byte| byte.is_ascii_alphanumeric()) {
                    return Err(BackendError::InvalidAddress {
                        address: format!("{kind}/{name}"),
                        reason: "an object name is made of hex digits only".into(),
                    });
                }
                format!("{}/{name}", kind.dir_name())
            }
        };
        self.join(&relative)
    }

    fn join(&self, relative: &str) -> BackendResult<Url> {
        self.base
            .join(relative)
            .map_err(|error| BackendError::InvalidAddress {
                address: format!("{}{relative}", self.location()),
                reason: error.to_string(),
            })
    }

    /// A request with the credentials, if any.
    fn request(&self, method: Method, url: Url) -> RequestBuilder {
        let request = self.client.request(method, url);
        match &self.credentials {
            Some(credentials) => {
                request.basic_auth(&credentials.username, credentials.password.as_deref())
            }
            None => request,
        }
    }

    /// Sends one request and reads the whole answer, whatever its status; only a failure to get
    /// an answer is an error (`Transport`). `answer_within` bounds the wait for the answer's
    /// head, which for an upload includes sending the body.
    async fn exchange(
        &self,
        request: RequestBuilder,
        answer_within: Duration,
    ) -> BackendResult<Answer> {
        let (status, headers, body) = self
            .exchange_into(request, answer_within, Vec::new())
            .await?;
        Ok(Answer {
            status,
            headers,
            body: Bytes::from(body),
        })
    }

    /// [`RestBackend::exchange`] with the body read into `body` (cleared first), whose allocation
    /// is reused.
    async fn exchange_into(
        &self,
        request: RequestBuilder,
        answer_within: Duration,
        mut body: Vec<u8>,
    ) -> BackendResult<(StatusCode, HeaderMap, Vec<u8>)> {
        // The semaphore is never closed, so acquiring can only fail if that changes.
        let _slot = self
            .request_slots
            .acquire()
            .await
            .map_err(|_| self.transport_error("the request queue was closed".into()))?;
        let mut response = match tokio::time::timeout(answer_within, request.send()).await {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => return Err(self.transport_error(describe_reqwest_error(&error))),
            Err(_) => return Err(self.timeout_error(answer_within)),
        };
        let status = response.status();
        let headers = std::mem::take(response.headers_mut());
        // Reserve what the server announces, within reason: a wrong header must not cost memory.
        let announced_bytes = response
            .content_length()
            .unwrap_or(0)
            .min(MAX_RESERVED_BYTES);
        body.clear();
        body.reserve_exact(announced_bytes as usize);
        loop {
            match tokio::time::timeout(self.options.read_timeout, response.chunk()).await {
                Ok(Ok(Some(chunk))) => body.extend_from_slice(&chunk),
                Ok(Ok(None)) => break,
                Ok(Err(error)) => return Err(self.transport_error(describe_reqwest_error(&error))),
                Err(_) => return Err(self.timeout_error(self.options.read_timeout)),
            }
        }
        Ok((status, headers, body))
    }

    fn transport_error(&self, message: String) -> BackendError {
        BackendError::Transport {
            location: self.location(),
            message,
        }
    }

    fn timeout_error(&self, waited: Duration) -> BackendError {
        self.transport_error(format!(
            "the server did not answer within {:.1} s",
            waited.as_secs_f64()
        ))
    }

    /// Runs `attempt` (given the number of earlier tries) until it succeeds, fails in a way that
    /// cannot pass, or the retry policy is spent.
    async fn with_retries<T, Attempt, Fut>(
        &self,
        what: &str,
        mut attempt: Attempt,
    ) -> BackendResult<T>
    where
        Attempt: FnMut(u32) -> Fut,
        Fut: Future<Output = BackendResult<T>>,
    {
        let mut retries = 0;
        loop {
            match attempt(retries).await {
                Err(error) if error.is_retryable() && retries + 1 < self.options.retry.attempts => {
                    retries += 1;
                    let delay = self.options.retry.delay_before_retry(retries);
                    tracing::warn!(
                        location = %self.location(),
                        what,
                        retry = retries,
                        delay_ms = delay.as_millis() as u64,
                        "{error}; trying again"
                    );
                    tokio::time::sleep(delay).await;
                }
                result => return result,
            }
        }
    }

    async fn stat_once(
        &self,
        kind: ObjectKind,
        name: &str,
        what: &str,
    ) -> BackendResult<Option<u64>> {
        let url = self.object_url(kind, name)?;
        let answer = self
            .exchange(self.request(Method::HEAD, url), self.options.read_timeout)
            .await?;
        if answer.status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !answer.status.is_success() {
            return Err(status_error(&answer, what));
        }
        match header_u64(&answer.headers, CONTENT_LENGTH) {
            Some(size_bytes) => Ok(Some(size_bytes)),
            None => Err(BackendError::Http {
                status: answer.status.as_u16(),
                what: what.to_owned(),
                body: "the answer has no valid Content-Length, so the object's size is unknown"
                    .into(),
            }),
        }
    }

    async fn list_once(&self, kind: ObjectKind, what: &str) -> BackendResult<Vec<ObjectInfo>> {
        let url = self.join(&format!("{}/", kind.dir_name()))?;
        let request = self
            .request(Method::GET, url)
            .header(ACCEPT, REST_V2_MEDIA_TYPE);
        let answer = self.exchange(request, self.options.read_timeout).await?;
        if answer.status == StatusCode::NOT_FOUND {
            // rest-server answers 404 for the folders of a repository that was never created.
            return Err(BackendError::NoRepository {
                location: self.location(),
            });
        }
        if !answer.status.is_success() {
            return Err(status_error(&answer, what));
        }
        // An empty folder may be listed as `null`.
        let listed: Option<Vec<ListedObject>> =
            serde_json::from_slice(&answer.body).map_err(|error| BackendError::Http {
                status: answer.status.as_u16(),
                what: what.to_owned(),
                body: format!(
                    "not a listing of version 2 of the restic REST protocol ({error}): {}",
                    body_excerpt(&answer.body)
                ),
            })?;
        Ok(listed
            .unwrap_or_default()
            .into_iter()
            .map(|object| ObjectInfo {
                name: object.name,
                size_bytes: object.size,
            })
            .collect())
    }

    async fn read_once(
        &self,
        kind: ObjectKind,
        name: &str,
        range: Option<(u64, u64)>,
        what: &str,
    ) -> BackendResult<Answer> {
        let mut request = self.request(Method::GET, self.object_url(kind, name)?);
        if let Some((first, last)) = range {
            request = request.header(RANGE, format!("bytes={first}-{last}"));
        }
        let answer = self.exchange(request, self.options.read_timeout).await?;
        match answer.status {
            status if status.is_success() => Ok(answer),
            StatusCode::NOT_FOUND => Err(self.not_found(kind, name)),
            StatusCode::RANGE_NOT_SATISFIABLE => Err(short_read(
                what,
                "the range starts past the end of the object",
            )),
            _ => Err(status_error(&answer, what)),
        }
    }

    /// A ranged read into `buffer`: the status (200 or 206) and the body.
    async fn read_once_into(
        &self,
        kind: ObjectKind,
        name: &str,
        (first, last): (u64, u64),
        what: &str,
        buffer: Vec<u8>,
    ) -> BackendResult<(StatusCode, Vec<u8>)> {
        let request = self
            .request(Method::GET, self.object_url(kind, name)?)
            .header(RANGE, format!("bytes={first}-{last}"));
        let (status, headers, body) = self
            .exchange_into(request, self.options.read_timeout, buffer)
            .await?;
        match status {
            status if status.is_success() => Ok((status, body)),
            StatusCode::NOT_FOUND => Err(self.not_found(kind, name)),
            StatusCode::RANGE_NOT_SATISFIABLE => Err(short_read(
                what,
                "the range starts past the end of the object",
            )),
            _ => Err(status_error(
                &Answer {
                    status,
                    headers,
                    body: Bytes::from(body),
                },
                what,
            )),
        }
    }

    async fn write_once(
        &self,
        kind: ObjectKind,
        name: &str,
        data: Bytes,
        what: &str,
    ) -> BackendResult<()> {
        let url = self.object_url(kind, name)?;
        // A slow link is not a stalled one: allow the upload time in proportion to its size.
        let upload_secs = data.len() as u64 / self.options.min_upload_bytes_per_sec.max(1);
        let answer_within = self.options.read_timeout + Duration::from_secs(upload_secs);
        let request = self.request(Method::POST, url).body(data);
        let answer = self.exchange(request, answer_within).await?;
        if answer.status.is_success() {
            return Ok(());
        }
        if answer.status == StatusCode::BAD_REQUEST && kind != ObjectKind::Config {
            // rest-server's usual reason: it verifies every name against the SHA-256 of the bytes.
            let what = format!(
                "{what} (a restic REST server refuses an object whose name is not the SHA-256 \
                 of its bytes)"
            );
            return Err(status_error(&answer, &what));
        }
        Err(status_error(&answer, what))
    }

    /// Whether the server already holds this object: for a content-addressed object, one of the
    /// same name and size is the same object; the config, named "config" whatever it holds, is
    /// compared byte for byte. Asked once, without retries; any failure counts as "not known to".
    async fn already_stored(&self, kind: ObjectKind, name: &str, data: &Bytes) -> bool {
        let what = format!("checking whether {} is stored", object_label(kind, name));
        let stored = if kind == ObjectKind::Config {
            self.read_once(kind, name, None, &what)
                .await
                .map(|answer| answer.body == *data)
        } else {
            self.stat_once(kind, name, &what)
                .await
                .map(|size_bytes| size_bytes == Some(data.len() as u64))
        };
        match stored {
            Ok(stored) => stored,
            Err(error) => {
                tracing::debug!(location = %self.location(), "{what}: {error}");
                false
            }
        }
    }

    async fn delete_once(&self, kind: ObjectKind, name: &str, what: &str) -> BackendResult<()> {
        let url = self.object_url(kind, name)?;
        let answer = self
            .exchange(self.request(Method::DELETE, url), self.options.read_timeout)
            .await?;
        // Deleting what is already gone succeeds: a retried delete may find its own work done.
        if answer.status.is_success() || answer.status == StatusCode::NOT_FOUND {
            return Ok(());
        }
        Err(status_error(&answer, what))
    }

    async fn create_once(&self, what: &str) -> BackendResult<()> {
        let mut url = self.base.clone();
        url.set_query(Some("create=true"));
        let answer = self
            .exchange(self.request(Method::POST, url), self.options.read_timeout)
            .await?;
        if answer.status.is_success() {
            return Ok(());
        }
        Err(status_error(&answer, what))
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
}

#[async_trait]
impl Backend for RestBackend {
    fn location(&self) -> String {
        format!("rest:{}", self.base)
    }

    async fn create(&self) -> BackendResult<()> {
        // Servers answer `POST /?create=true` with success over an existing repository, so look.
        if self.stat(ObjectKind::Config, "config").await?.is_some() {
            return Err(BackendError::AlreadyExists {
                location: self.location(),
            });
        }
        let what = "creating the repository";
        self.with_retries(what, |_| self.create_once(what)).await
    }

    async fn list(&self, kind: ObjectKind) -> BackendResult<Vec<ObjectInfo>> {
        if kind == ObjectKind::Config {
            let size = self.stat(kind, "config").await?;
            return Ok(size
                .map(|size_bytes| ObjectInfo {
                    name: "config".into(),
                    size_bytes,
                })
                .into_iter()
                .collect());
        }
        let what = format!("listing {kind}/");
        self.with_retries(&what, |_| self.list_once(kind, &what))
            .await
    }

    async fn stat(&self, kind: ObjectKind, name: &str) -> BackendResult<Option<u64>> {
        let what = format!("looking up {}", object_label(kind, name));
        self.with_retries(&what, |_| self.stat_once(kind, name, &what))
            .await
    }

    async fn read(&self, kind: ObjectKind, name: &str) -> BackendResult<Bytes> {
        let what = format!("reading {}", object_label(kind, name));
        let answer = self
            .with_retries(&what, |_| self.read_once(kind, name, None, &what))
            .await?;
        Ok(answer.body)
    }

    async fn read_range(
        &self,
        kind: ObjectKind,
        name: &str,
        offset: u64,
        length: u64,
    ) -> BackendResult<Bytes> {
        self.read_range_into(kind, name, offset, length, Vec::new())
            .await
            .map(Bytes::from)
    }

    async fn read_range_into(
        &self,
        kind: ObjectKind,
        name: &str,
        offset: u64,
        length: u64,
        buffer: Vec<u8>,
    ) -> BackendResult<Vec<u8>> {
        let mut buffer = buffer;
        if length == 0 {
            buffer.clear();
            return Ok(buffer);
        }
        let what = format!(
            "reading {} bytes {offset}..{}",
            object_label(kind, name),
            offset.saturating_add(length)
        );
        let last = offset
            .checked_add(length - 1)
            .ok_or_else(|| short_read(&what, "the range ends past 2^64"))?;
        // Each try reads into the buffer; a failed try leaves a fresh one to the next.
        let spare = std::sync::Mutex::new(Some(buffer));
        let (status, mut body) = self
            .with_retries(&what, |_| {
                let buffer = spare
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take()
                    .unwrap_or_default();
                self.read_once_into(kind, name, (offset, last), &what, buffer)
            })
            .await?;
        if status != StatusCode::PARTIAL_CONTENT {
            // 200: the server ignored `Range` and sent the whole object; cut the range out.
            let start = usize::try_from(offset)
                .unwrap_or(usize::MAX)
                .min(body.len());
            body.drain(..start);
        }
        // A server ends a range that runs past the object at the object's end: check exactly.
        match usize::try_from(length) {
            Ok(length) if body.len() >= length => {
                body.truncate(length);
                Ok(body)
            }
            _ => Err(short_read(
                &what,
                &format!(
                    "the server returned {} bytes instead of {length}",
                    body.len()
                ),
            )),
        }
    }

    async fn write(&self, kind: ObjectKind, name: &str, data: Bytes) -> BackendResult<()> {
        let what = format!("writing {}", object_label(kind, name));
        let data = &data;
        let what_ref = what.as_str();
        self.with_retries(&what, |earlier_tries| async move {
            // A try that failed on the way back may have stored the object: do not send it twice.
            if earlier_tries > 0 && self.already_stored(kind, name, data).await {
                return Ok(());
            }
            match self.write_once(kind, name, data.clone(), what_ref).await {
                // rest-server never overwrites an object (nor does rclone in append-only mode):
                // it answers 403, which means success when what is there is what we are writing.
                Err(BackendError::Forbidden { .. })
                    if self.already_stored(kind, name, data).await =>
                {
                    Ok(())
                }
                result => result,
            }
        })
        .await
    }

    async fn delete(&self, kind: ObjectKind, name: &str) -> BackendResult<()> {
        let what = format!("deleting {}", object_label(kind, name));
        self.with_retries(&what, |_| self.delete_once(kind, name, &what))
            .await
    }
}

/// The HTTP client: one per backend, so that connections are pooled and reused.
fn build_client(
    ca_certificate_pem: Option<&[u8]>,
    options: &RestOptions,
    connections: usize,
) -> Result<Client, String> {
    let mut builder = Client::builder()
        .connect_timeout(options.connect_timeout)
        .tcp_keepalive(Duration::from_secs(30))
        .pool_max_idle_per_host(connections)
        // A REST server has no reason to redirect; following one could send the credentials
        // elsewhere.
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("neverwiped/", env!("CARGO_PKG_VERSION")));
    if let Some(pem) = ca_certificate_pem {
        let certificates = reqwest::Certificate::from_pem_bundle(pem)
            .map_err(|error| format!("the CA certificate is not valid PEM: {error}"))?;
        if certificates.is_empty() {
            return Err("the CA certificate PEM holds no certificate".into());
        }
        for certificate in certificates {
            builder = builder.add_root_certificate(certificate);
        }
    }
    builder.build().map_err(|error| {
        format!(
            "cannot set up the HTTP client: {}",
            describe_error_chain(&error)
        )
    })
}

/// A reqwest error with its causes, which hold the useful part ("connection refused", "invalid
/// peer certificate: UnknownIssuer"), plus a hint for certificate problems.
fn describe_reqwest_error(error: &reqwest::Error) -> String {
    let description = describe_error_chain(error);
    if description.contains("certificate") {
        format!(
            "{description} (if the server's certificate comes from a private CA, give that CA's \
             certificate)"
        )
    } else {
        description
    }
}

fn describe_error_chain(error: &dyn std::error::Error) -> String {
    let mut description = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        // Layers often repeat their cause's text; say each thing once.
        if !description.contains(&text) {
            description.push_str(": ");
            description.push_str(&text);
        }
        source = cause.source();
    }
    description
}

/// The error for a status that the operation does not handle itself.
fn status_error(answer: &Answer, what: &str) -> BackendError {
    match answer.status {
        StatusCode::UNAUTHORIZED => BackendError::Unauthorized,
        StatusCode::FORBIDDEN => BackendError::Forbidden {
            what: what.to_owned(),
        },
        StatusCode::PAYLOAD_TOO_LARGE => BackendError::TooLarge {
            what: what.to_owned(),
        },
        StatusCode::INSUFFICIENT_STORAGE => BackendError::RepositoryFull,
        status => BackendError::Http {
            status: status.as_u16(),
            what: what.to_owned(),
            body: body_excerpt(&answer.body),
        },
    }
}

/// The start of an answer's body, as text, for a message.
fn body_excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(empty answer)".into();
    }
    let mut excerpt: String = text.chars().take(ERROR_BODY_CHARS).collect();
    if excerpt.len() < text.len() {
        excerpt.push('…');
    }
    excerpt
}

fn short_read(what: &str, reason: &str) -> BackendError {
    BackendError::Io {
        what: what.to_owned(),
        source: std::io::Error::new(std::io::ErrorKind::UnexpectedEof, reason.to_owned()),
    }
}

fn header_u64(headers: &HeaderMap, name: reqwest::header::HeaderName) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

/// `kind/name` for messages; the config object is just `config`.
fn object_label(kind: ObjectKind, name: &str) -> String {
    match kind {
        ObjectKind::Config => "config".to_owned(),
        _ => format!("{kind}/{name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_with_rest_prefix_and_no_trailing_slash_gets_one() {
        let url = parse_rest_address("rest:https://gate.example:8000/team/db").unwrap();
        assert_eq!(url.as_str(), "https://gate.example:8000/team/db/");
    }

    #[test]
    fn address_without_prefix_and_without_path_names_the_root() {
        let url = parse_rest_address("http://127.0.0.1:8000").unwrap();
        assert_eq!(url.as_str(), "http://127.0.0.1:8000/");
    }

    #[test]
    fn address_with_credentials_is_refused_without_repeating_the_password() {
        let error = parse_rest_address("rest:https://alice:s3cret@gate.example/repo/").unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(error, BackendError::InvalidAddress { .. }),
            "{error:?}"
        );
        assert!(message.contains("NEVERWIPED_GATE_USERNAME"), "{message}");
        assert!(message.contains("NEVERWIPED_GATE_PASSWORD"), "{message}");
        assert!(!message.contains("s3cret"), "{message}");
        assert!(!format!("{error:?}").contains("s3cret"));
    }

    #[test]
    fn unparsable_address_with_credentials_does_not_repeat_the_password() {
        let error = parse_rest_address("rest:https://alice:s3cret@gate example/repo/").unwrap_err();
        assert!(!error.to_string().contains("s3cret"), "{error}");
    }

    #[test]
    fn address_with_another_scheme_or_a_query_is_refused() {
        for address in [
            "rest:ftp://host/repo/",
            "rest:/tmp/repo",
            "https://host/repo/?x=1",
        ] {
            let error = parse_rest_address(address).unwrap_err();
            assert!(
                matches!(error, BackendError::InvalidAddress { .. }),
                "{address}: {error:?}"
            );
        }
    }

    #[test]
    fn config_debug_output_hides_the_password() {
        let mut config = RestConfig::new(Url::parse("https://gate.example/repo/").unwrap());
        config.username = Some("alice".into());
        config.password = Some("s3cret".into());
        let debug = format!("{config:?}");
        assert!(
            debug.contains("alice") && !debug.contains("s3cret"),
            "{debug}"
        );
        let backend = RestBackend::new(config).unwrap();
        let debug = format!("{backend:?}");
        assert!(!debug.contains("s3cret"), "{debug}");
        assert_eq!(backend.location(), "rest:https://gate.example/repo/");
    }

    #[test]
    fn config_url_with_credentials_is_refused() {
        let config =
            RestConfig::new(Url::parse("https://alice:s3cret@gate.example/repo/").unwrap());
        let error = RestBackend::new(config).unwrap_err();
        assert!(!error.to_string().contains("s3cret"), "{error}");
    }

    #[test]
    fn password_without_user_name_is_refused() {
        let mut config = RestConfig::new(Url::parse("https://gate.example/repo/").unwrap());
        config.password = Some("s3cret".into());
        let error = RestBackend::new(config).unwrap_err();
        assert!(
            error.to_string().contains("NEVERWIPED_GATE_USERNAME"),
            "{error}"
        );
    }

    #[test]
    fn garbage_ca_certificate_is_refused_clearly() {
        let mut config = RestConfig::new(Url::parse("https://gate.example/repo/").unwrap());
        config.ca_certificate_pem = Some(b"not a certificate".to_vec());
        let error = RestBackend::new(config).unwrap_err();
        assert!(error.to_string().contains("CA certificate"), "{error}");
    }

    #[test]
    fn retry_delays_double_and_stop_at_the_cap_with_jitter_below() {
        let policy = RetryPolicy {
            attempts: 10,
            first_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(500),
        };
        for (retry, full_ms) in [(1, 100), (2, 200), (3, 400), (4, 500), (9, 500)] {
            for _ in 0..50 {
                let delay = policy.delay_before_retry(retry).as_millis() as u64;
                assert!(
                    (full_ms / 2..=full_ms).contains(&delay),
                    "retry {retry}: {delay} ms"
                );
            }
        }
    }

    #[test]
    fn object_names_that_could_escape_the_repository_are_refused() {
        let backend =
            RestBackend::new(RestConfig::new(Url::parse("http://h/repo/").unwrap())).unwrap();
        for name in ["../config", "a/b", "", "x?y"] {
            assert!(
                backend.object_url(ObjectKind::Data, name).is_err(),
                "{name:?}"
            );
        }
        let url = backend.object_url(ObjectKind::Data, "ab12").unwrap();
        assert_eq!(url.as_str(), "http://h/repo/data/ab12");
        let url = backend.object_url(ObjectKind::Config, "config").unwrap();
        assert_eq!(url.as_str(), "http://h/repo/config");
    }

    #[test]
    fn long_error_bodies_are_cut_to_200_characters() {
        let excerpt = body_excerpt("é".repeat(500).as_bytes());
        assert_eq!(excerpt.chars().count(), ERROR_BODY_CHARS + 1);
        assert_eq!(body_excerpt(b"  \n"), "(empty answer)");
    }
}
