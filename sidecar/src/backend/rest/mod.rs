//! The gate: a restic REST server (v2 protocol) over HTTP or HTTPS, one request per call.
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
//! The config object is `/config`. This client neither retries nor limits: [`open`] wears it with
//! the layers any backend can ([`crate::backend::retry`], which also settles writes whose
//! outcome is unknown, and [`crate::backend::limit`]). A rest-server answers 403 to a second
//! write of an object; only the retry layer turns that into the trait's "rewriting succeeds".

mod address;
mod answer;
mod body;
mod config;
mod tls;

pub use address::invalid_address;
pub use config::{RestConfig, RestOptions, DEFAULT_CONNECTIONS, DEFAULT_MAX_OBJECT_BYTES};

use super::retry::RetryPolicy;
use super::{Backend, BackendError, BackendResult, ObjectInfo, ObjectKind, SharedBackend};
use address::checked_repository_location;
use answer::{header_u64, object_label, short_read, status_error, Answer, ERROR_BODY_BYTES};
use async_trait::async_trait;
use body::{read_body, BodyError, PastTheLimit};
use bytes::Bytes;
use neverwiped_contract::location::RestLocation;
use reqwest::header::{ACCEPT, CONTENT_LENGTH, RANGE};
use reqwest::{Client, Method, RequestBuilder, StatusCode};
use serde::Deserialize;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use url::Url;

/// The media type that asks a server for listings with sizes (version 2 of the protocol).
const REST_V2_MEDIA_TYPE: &str = "application/vnd.x.restic.rest.v2";

/// A gate as the engine uses it: the client, at most `config.connections` requests in flight,
/// each call retried within `retry`'s time budget, writes idempotent.
pub fn open(
    config: RestConfig,
    options: RestOptions,
    retry: RetryPolicy,
) -> BackendResult<SharedBackend> {
    let connections = config.connections;
    let client: SharedBackend = Arc::new(RestBackend::with_options(config, options)?);
    Ok(super::layered(client, retry, connections))
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

/// How much of a successful answer's body a request can use.
#[derive(Debug, Clone, Copy)]
struct BodyLimit {
    limit_bytes: u64,
    past_the_limit: PastTheLimit,
}

/// The protocol client of a repository on a restic REST server: each call is one request. One
/// HTTP client (and its connection pool) serves every call.
#[derive(Debug)]
pub struct RestBackend {
    /// The repository, its URL ending in `/`, without credentials.
    location: RestLocation,
    client: Client,
    credentials: Option<Credentials>,
    options: RestOptions,
}

impl RestBackend {
    /// A client with the default timeouts.
    pub fn new(config: RestConfig) -> BackendResult<RestBackend> {
        RestBackend::with_options(config, RestOptions::default())
    }

    /// A client with chosen timeouts.
    pub fn with_options(config: RestConfig, options: RestOptions) -> BackendResult<RestBackend> {
        let location = checked_repository_location(&config.url)?;
        let invalid = |reason: String| BackendError::InvalidAddress {
            address: location.to_arg(),
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
        let client = tls::build_client(config.ca_certificate_pem.as_deref(), &options, connections)
            .map_err(invalid)?;
        Ok(RestBackend {
            location,
            client,
            credentials,
            options,
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
        self.location
            .url()
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

    /// The limit for an answer that is a whole object or a listing.
    fn whole_object(&self) -> BodyLimit {
        BodyLimit {
            limit_bytes: self.options.max_object_bytes,
            past_the_limit: PastTheLimit::Refuse,
        }
    }

    /// Sends one request and reads its answer, whatever its status; only a failure to get an
    /// answer is an error. `answer_within` bounds the wait for the answer's head, which for an
    /// upload includes sending the body. A success's body is read within `limit`, an error's
    /// only as far as a message needs.
    async fn exchange(
        &self,
        request: RequestBuilder,
        answer_within: Duration,
        limit: BodyLimit,
        what: &str,
    ) -> BackendResult<Answer> {
        let (status, headers, body) = self
            .exchange_into(request, answer_within, limit, what, Vec::new())
            .await?;
        Ok(Answer {
            status,
            headers,
            body: Bytes::from(body),
        })
    }

    /// [`RestBackend::exchange`] with the body read into `body`, whose allocation is reused.
    async fn exchange_into(
        &self,
        request: RequestBuilder,
        answer_within: Duration,
        limit: BodyLimit,
        what: &str,
        body: Vec<u8>,
    ) -> BackendResult<(StatusCode, reqwest::header::HeaderMap, Vec<u8>)> {
        let mut response = match tokio::time::timeout(answer_within, request.send()).await {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => return Err(tls::send_error(self.location(), &error)),
            Err(_) => return Err(self.timeout_error(answer_within)),
        };
        let status = response.status();
        let headers = std::mem::take(response.headers_mut());
        let limit = if status.is_success() {
            limit
        } else {
            BodyLimit {
                limit_bytes: ERROR_BODY_BYTES,
                past_the_limit: PastTheLimit::Stop,
            }
        };
        let silence = self.options.read_timeout;
        match read_body(
            &mut response,
            limit.limit_bytes,
            limit.past_the_limit,
            silence,
            body,
        )
        .await
        {
            Ok(body) => Ok((status, headers, body)),
            Err(error) => Err(self.body_error(error, what)),
        }
    }

    fn body_error(&self, error: BodyError, what: &str) -> BackendError {
        match error {
            BodyError::TooLong { limit_bytes } => BackendError::OversizedAnswer {
                what: what.to_owned(),
                limit_bytes,
            },
            BodyError::Stalled { silence } => self.timeout_error(silence),
            BodyError::Transport(error) => tls::send_error(self.location(), &error),
        }
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

    /// A ranged read into `buffer`: the status (200 or 206) and the body. A 206 longer than the
    /// range is refused; of a 200 (the server ignored `Range`), only what reaches the range's
    /// end is read.
    async fn read_range_answer(
        &self,
        kind: ObjectKind,
        name: &str,
        (offset, length): (u64, u64),
        what: &str,
        buffer: Vec<u8>,
    ) -> BackendResult<(StatusCode, Vec<u8>)> {
        let last = offset
            .checked_add(length - 1)
            .ok_or_else(|| short_read(what, "the range ends past 2^64"))?;
        let request = self
            .request(Method::GET, self.object_url(kind, name)?)
            .header(RANGE, format!("bytes={offset}-{last}"));
        let response = tokio::time::timeout(self.options.read_timeout, request.send()).await;
        let mut response = match response {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => return Err(tls::send_error(self.location(), &error)),
            Err(_) => return Err(self.timeout_error(self.options.read_timeout)),
        };
        let status = response.status();
        let limit = match status {
            StatusCode::PARTIAL_CONTENT => (length, PastTheLimit::Refuse),
            status if status.is_success() => (last + 1, PastTheLimit::Stop),
            _ => (ERROR_BODY_BYTES, PastTheLimit::Stop),
        };
        let headers = std::mem::take(response.headers_mut());
        let silence = self.options.read_timeout;
        let body = read_body(&mut response, limit.0, limit.1, silence, buffer)
            .await
            .map_err(|error| self.body_error(error, what))?;
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
}

#[async_trait]
impl Backend for RestBackend {
    fn location(&self) -> String {
        self.location.to_arg()
    }

    async fn create(&self) -> BackendResult<()> {
        // Servers answer `POST /?create=true` with success over an existing repository, so look.
        if self.stat(ObjectKind::Config, "config").await?.is_some() {
            return Err(BackendError::AlreadyExists {
                location: self.location(),
            });
        }
        let what = "creating the repository";
        let mut url = self.location.url().clone();
        url.set_query(Some("create=true"));
        let request = self.request(Method::POST, url);
        let limit = self.whole_object();
        let answer = self
            .exchange(request, self.options.read_timeout, limit, what)
            .await?;
        if answer.status.is_success() {
            return Ok(());
        }
        Err(status_error(&answer, what))
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
        let url = self.join(&format!("{}/", kind.dir_name()))?;
        let request = self
            .request(Method::GET, url)
            .header(ACCEPT, REST_V2_MEDIA_TYPE);
        let limit = self.whole_object();
        let answer = self
            .exchange(request, self.options.read_timeout, limit, &what)
            .await?;
        if answer.status == StatusCode::NOT_FOUND {
            // rest-server answers 404 for the folders of a repository that was never created.
            return Err(BackendError::NoRepository {
                location: self.location(),
            });
        }
        if !answer.status.is_success() {
            return Err(status_error(&answer, &what));
        }
        // An empty folder may be listed as `null`.
        let listed: Option<Vec<ListedObject>> =
            serde_json::from_slice(&answer.body).map_err(|error| BackendError::Http {
                status: answer.status.as_u16(),
                what: what.clone(),
                body: format!(
                    "not a listing of version 2 of the restic REST protocol ({error}): {}",
                    answer::body_excerpt(&answer.body)
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

    async fn stat(&self, kind: ObjectKind, name: &str) -> BackendResult<Option<u64>> {
        let what = format!("looking up {}", object_label(kind, name));
        let request = self.request(Method::HEAD, self.object_url(kind, name)?);
        let limit = self.whole_object();
        let answer = self
            .exchange(request, self.options.read_timeout, limit, &what)
            .await?;
        if answer.status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !answer.status.is_success() {
            return Err(status_error(&answer, &what));
        }
        match header_u64(&answer.headers, CONTENT_LENGTH) {
            Some(size_bytes) => Ok(Some(size_bytes)),
            None => Err(BackendError::Http {
                status: answer.status.as_u16(),
                what,
                body: "the answer has no valid Content-Length, so the object's size is unknown"
                    .into(),
            }),
        }
    }

    async fn read(&self, kind: ObjectKind, name: &str) -> BackendResult<Bytes> {
        let what = format!("reading {}", object_label(kind, name));
        let request = self.request(Method::GET, self.object_url(kind, name)?);
        let limit = self.whole_object();
        let answer = self
            .exchange(request, self.options.read_timeout, limit, &what)
            .await?;
        match answer.status {
            status if status.is_success() => Ok(answer.body),
            StatusCode::NOT_FOUND => Err(self.not_found(kind, name)),
            _ => Err(status_error(&answer, &what)),
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
        if length == 0 {
            buffer.clear();
            return Ok(buffer);
        }
        let what = format!(
            "reading {} bytes {offset}..{}",
            object_label(kind, name),
            offset.saturating_add(length)
        );
        let (status, mut body) = self
            .read_range_answer(kind, name, (offset, length), &what, buffer)
            .await?;
        if status != StatusCode::PARTIAL_CONTENT {
            // 200: the server ignored `Range` and sent the object from its start; cut the range.
            let start = usize::try_from(offset)
                .unwrap_or(usize::MAX)
                .min(body.len());
            body.drain(..start);
        }
        // A server ends a range that runs past the object at the object's end: check exactly.
        match usize::try_from(length) {
            Ok(length) if body.len() == length => Ok(body),
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
        let url = self.object_url(kind, name)?;
        // A slow link is not a stalled one: allow the upload time in proportion to its size.
        let upload_secs = data.len() as u64 / self.options.min_upload_bytes_per_sec.max(1);
        let answer_within = self.options.read_timeout + Duration::from_secs(upload_secs);
        let request = self.request(Method::POST, url).body(data);
        let limit = self.whole_object();
        let answer = self.exchange(request, answer_within, limit, &what).await?;
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
        Err(status_error(&answer, &what))
    }

    async fn delete(&self, kind: ObjectKind, name: &str) -> BackendResult<()> {
        let what = format!("deleting {}", object_label(kind, name));
        let request = self.request(Method::DELETE, self.object_url(kind, name)?);
        let limit = self.whole_object();
        let answer = self
            .exchange(request, self.options.read_timeout, limit, &what)
            .await?;
        // Deleting what is already gone succeeds: a retried delete may find its own work done.
        if answer.status.is_success() || answer.status == StatusCode::NOT_FOUND {
            return Ok(());
        }
        Err(status_error(&answer, &what))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
