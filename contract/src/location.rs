//! Where a repository is: one type, parsed once, shared by the CRD, admission, the tenant
//! policy, the operator's Jobs, the sidecar's `--repo` and the plugin.
//!
//! Two written forms exist, and each has one parser here:
//!
//! - a plan's `spec.repository.url` is a bare `http(s)://host[:port]/path` URL
//!   ([`RestLocation`]);
//! - the sidecar's `--repo` is `rest:http(s)://…` for a REST server, or a local folder
//!   ([`RepositoryLocation`]).
//!
//! Both keep the text as it was written, so that wire formats (CRD fields, Job arguments, status)
//! stay byte for byte what they were; the parsed URL is only what the client connects to.
//!
//! Adding a backend is adding a variant to [`RepositoryLocation`] with its own prefix.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use url::{Position, Url};

/// The prefix of a REST server's location on the sidecar's command line.
pub const REST_PREFIX: &str = "rest:";
/// The fewest characters of a repository URL (`http://a`).
pub const URL_MIN_CHARS: usize = 8;
/// The most characters of a repository URL.
pub const URL_MAX_CHARS: usize = 2048;
/// The CRD's pattern of a repository URL: `http(s)://` and no white space or control characters.
pub const URL_PATTERN: &str = r"^https?://[^\s\x00-\x1f\x7f]+$";
/// The CRD's CEL rule on a repository URL: no `.` or `..` segment (also percent-encoded), no
/// user, query or fragment, no backslash, so that a cluster's allowed URL prefixes cannot be
/// walked out of. The API server applies it before [`RestLocation`]'s parser sees the URL.
pub const URL_RULE: &str =
    r"!self.matches('(?i)(/|%2f)([.]|%2e){1,2}(/|%2f|$)') && !self.matches('[?#@\\\\]')";

/// Which rule a repository location breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocationFault {
    /// Shorter than [`URL_MIN_CHARS`] or longer than [`URL_MAX_CHARS`] (the CRD's length).
    Length,
    /// A control or white-space character (the CRD's pattern).
    ControlCharacter,
    /// A `?`, `#`, `\` or an `@` outside the authority (the CRD's rule, admission).
    UserQueryOrFragment,
    /// A user name or password before the host: it would show in process lists and logs.
    Credentials,
    /// A `.` or `..` segment, also percent-encoded (the CRD's rule, admission).
    DotSegment,
    /// Not `http://` or `https://` (the CRD's pattern, the sidecar).
    Scheme,
    /// No host after `://`.
    NoHost,
    /// Not a URL at all (the URL parser's reason is in [`LocationError::detail`]).
    Unparsable,
    /// A bare `http(s)://` URL where the sidecar wants `rest:http(s)://` or a folder.
    BareUrl,
    /// Nothing at all.
    Empty,
}

/// A repository location that is refused, with the rule it breaks. Its text never repeats a
/// user name or password written into the URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocationError {
    /// The location as written, with any user information replaced by `***`.
    pub location: String,
    pub fault: LocationFault,
    /// More about the fault: the URL parser's reason, or the scheme that is not supported.
    pub detail: Option<String>,
}

impl LocationError {
    fn new(location: &str, fault: LocationFault) -> LocationError {
        LocationError {
            location: redact_userinfo(location),
            fault,
            detail: None,
        }
    }

    fn with_detail(mut self, detail: impl Into<String>) -> LocationError {
        self.detail = Some(detail.into());
        self
    }
}

impl LocationError {
    /// Which rule the location breaks, in words (without the location).
    pub fn reason(&self) -> String {
        let location = &self.location;
        let detail = self.detail.as_deref().unwrap_or_default();
        match self.fault {
            LocationFault::Length => {
                format!("a repository URL has {URL_MIN_CHARS} to {URL_MAX_CHARS} characters")
            }
            LocationFault::ControlCharacter => {
                "it has a control or white-space character".to_owned()
            }
            LocationFault::UserQueryOrFragment => "it has a user, a query, a fragment or a \
                 backslash (@, ?, # or \\), which would change what an allowed prefix means"
                .to_owned(),
            LocationFault::Credentials => "credentials do not belong in the address: set \
                 NEVERWIPED_GATE_USERNAME and NEVERWIPED_GATE_PASSWORD instead"
                .to_owned(),
            LocationFault::DotSegment => "it has a '.' or '..' segment (also percent-encoded), \
                 which an HTTP client would resolve out of an allowed prefix"
                .to_owned(),
            LocationFault::Scheme => format!(
                "the scheme must be http or https, not {detail:?}: give a folder or \
                 rest:http(s)://host[:port]/path/"
            ),
            LocationFault::NoHost => "the address names no host".to_owned(),
            LocationFault::Unparsable => format!("it is not a URL ({detail})"),
            LocationFault::BareUrl => {
                format!("it is a URL: write {REST_PREFIX}{location} for a REST server (the gate)")
            }
            LocationFault::Empty => "it names no repository".to_owned(),
        }
    }
}

impl fmt::Display for LocationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the repository {:?} is refused: {}",
            self.location,
            self.reason()
        )
    }
}

impl std::error::Error for LocationError {}

/// A repository on a restic REST server (the gate): `http(s)://host[:port]/path`, as written.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RestLocation {
    /// As written (what the CRD holds and Job arguments repeat).
    text: String,
    /// What the client connects to: the same URL, its path ending in `/`.
    url: Url,
}

impl RestLocation {
    /// Parses a bare repository URL, `http(s)://host[:port]/path`, under every rule the CRD,
    /// admission, the tenant policy and the sidecar apply.
    pub fn parse(text: &str) -> Result<RestLocation, LocationError> {
        let refuse = |fault| LocationError::new(text, fault);
        let chars = text.chars().count();
        if text.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(refuse(LocationFault::ControlCharacter));
        }
        let Some((scheme, after_scheme)) = text.split_once("://") else {
            return Err(refuse(LocationFault::Scheme).with_detail(text_scheme(text)));
        };
        if scheme != "http" && scheme != "https" {
            return Err(refuse(LocationFault::Scheme).with_detail(scheme));
        }
        if !(URL_MIN_CHARS..=URL_MAX_CHARS).contains(&chars) {
            return Err(refuse(LocationFault::Length));
        }
        if text.contains(['?', '#', '\\']) {
            return Err(refuse(LocationFault::UserQueryOrFragment));
        }
        let authority = after_scheme.split('/').next().unwrap_or_default();
        if authority.contains('@') {
            return Err(refuse(LocationFault::Credentials));
        }
        if text.contains('@') {
            return Err(refuse(LocationFault::UserQueryOrFragment));
        }
        if has_dot_segment(after_scheme) {
            return Err(refuse(LocationFault::DotSegment));
        }
        if authority.is_empty() {
            return Err(refuse(LocationFault::NoHost));
        }
        let mut url = Url::parse(text)
            .map_err(|error| refuse(LocationFault::Unparsable).with_detail(error.to_string()))?;
        if url.host_str().is_none_or(str::is_empty) {
            return Err(refuse(LocationFault::NoHost));
        }
        if !url.path().ends_with('/') {
            let path = format!("{}/", url.path());
            url.set_path(&path);
        }
        Ok(RestLocation {
            text: text.to_owned(),
            url,
        })
    }

    /// The URL as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The URL the client connects to: its path always ends in `/`, so that object paths join.
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// The same repository written as the URL the client connects to (its path ending in `/`),
    /// as the sidecar names it in messages and results.
    pub fn as_connected(&self) -> RestLocation {
        RestLocation {
            text: self.url.to_string(),
            url: self.url.clone(),
        }
    }

    /// The host and, when one is written other than the scheme's default, the port; lower-case.
    /// What the operator's per-host limit counts.
    pub fn host(&self) -> String {
        self.url[Position::BeforeHost..Position::AfterPort].to_owned()
    }

    /// The sidecar's `--repo` for this repository: `rest:` and the URL as written.
    pub fn to_arg(&self) -> String {
        format!("{REST_PREFIX}{}", self.text)
    }

    /// Whether this repository lies under `prefix`: the same scheme, host and port, and a path
    /// that continues `prefix`'s only at a `/` (`/team-a` never covers `/team-ab`).
    pub fn is_under(&self, prefix: &RestLocation) -> bool {
        if self.url[..Position::AfterPort] != prefix.url[..Position::AfterPort] {
            return false;
        }
        // Both paths end in `/`, so a prefix of whole segments is a prefix of the text.
        self.url.path().starts_with(prefix.url.path())
    }
}

impl fmt::Display for RestLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for RestLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RestLocation({:?})", self.text)
    }
}

impl FromStr for RestLocation {
    type Err = LocationError;

    fn from_str(text: &str) -> Result<RestLocation, LocationError> {
        RestLocation::parse(text)
    }
}

/// Where the sidecar finds a repository: its `--repo`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum RepositoryLocation {
    /// A restic REST server: `rest:http(s)://host[:port]/path`.
    Rest(RestLocation),
    /// A folder of this machine (tests, and copies of a repository outside the cluster).
    Local(String),
}

impl RepositoryLocation {
    /// Parses the sidecar's form: `rest:http(s)://…`, or a folder. Any other `scheme://` is
    /// refused, a bare `http(s)://` URL with a hint, so that neither names a folder such as
    /// `./http:/host/…` by mistake.
    pub fn parse(text: &str) -> Result<RepositoryLocation, LocationError> {
        if let Some(url) = text.strip_prefix(REST_PREFIX) {
            return RestLocation::parse(url)
                .map(RepositoryLocation::Rest)
                .map_err(|error| LocationError {
                    location: redact_userinfo(text),
                    ..error
                });
        }
        if text.is_empty() {
            return Err(LocationError::new(text, LocationFault::Empty));
        }
        if let Some((scheme, _)) = text.split_once("://") {
            if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https") {
                return Err(LocationError::new(text, LocationFault::BareUrl));
            }
            let scheme_like = !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
            if scheme_like {
                return Err(LocationError::new(text, LocationFault::Scheme).with_detail(scheme));
            }
        }
        Ok(RepositoryLocation::Local(text.to_owned()))
    }

    /// The host (and port) of a REST server, as [`RestLocation::host`]; a folder has none.
    pub fn host(&self) -> Option<String> {
        match self {
            RepositoryLocation::Rest(rest) => Some(rest.host()),
            RepositoryLocation::Local(_) => None,
        }
    }

    /// The folder of a local repository.
    pub fn folder(&self) -> Option<&Path> {
        match self {
            RepositoryLocation::Local(folder) => Some(Path::new(folder)),
            RepositoryLocation::Rest(_) => None,
        }
    }

    /// The sidecar's `--repo` (the same text as [`fmt::Display`]).
    pub fn to_arg(&self) -> String {
        self.to_string()
    }
}

impl From<RestLocation> for RepositoryLocation {
    fn from(rest: RestLocation) -> RepositoryLocation {
        RepositoryLocation::Rest(rest)
    }
}

impl fmt::Display for RepositoryLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RepositoryLocation::Rest(rest) => write!(f, "{REST_PREFIX}{rest}"),
            RepositoryLocation::Local(folder) => f.write_str(folder),
        }
    }
}

impl fmt::Debug for RepositoryLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RepositoryLocation({:?})", self.to_string())
    }
}

impl FromStr for RepositoryLocation {
    type Err = LocationError;

    fn from_str(text: &str) -> Result<RepositoryLocation, LocationError> {
        RepositoryLocation::parse(text)
    }
}

impl TryFrom<&str> for RepositoryLocation {
    type Error = LocationError;

    fn try_from(text: &str) -> Result<RepositoryLocation, LocationError> {
        RepositoryLocation::parse(text)
    }
}

impl TryFrom<&str> for RestLocation {
    type Error = LocationError;

    fn try_from(text: &str) -> Result<RestLocation, LocationError> {
        RestLocation::parse(text)
    }
}

macro_rules! serde_as_string {
    ($type:ty) => {
        impl Serialize for $type {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $type {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<$type, D::Error> {
                let text = String::deserialize(deserializer)?;
                <$type>::from_str(&text).map_err(serde::de::Error::custom)
            }
        }
    };
}

serde_as_string!(RestLocation);
serde_as_string!(RepositoryLocation);

/// The text before `:` when there is no `://`, for the error about a missing scheme.
fn text_scheme(text: &str) -> &str {
    text.split_once(':').map_or(text, |(scheme, _)| scheme)
}

/// Whether a path has a `.` or `..` segment, also percent-encoded (`%2e`, `%2f`), which an HTTP
/// client would resolve away.
fn has_dot_segment(after_scheme: &str) -> bool {
    let decoded = after_scheme
        .to_ascii_lowercase()
        .replace("%2f", "/")
        .replace("%2e", ".");
    decoded
        .split('/')
        .any(|segment| segment == "." || segment == "..")
}

/// `location` with anything between `://` and the last `@` of the authority replaced by `***`,
/// so that an error about a location never repeats a password.
pub fn redact_userinfo(location: &str) -> String {
    let Some(authority_start) = location.find("://").map(|index| index + 3) else {
        return location.to_owned();
    };
    let authority_end = location[authority_start..]
        .find('/')
        .map_or(location.len(), |index| authority_start + index);
    match location[authority_start..authority_end].rfind('@') {
        Some(at) => format!(
            "{}***{}",
            &location[..authority_start],
            &location[authority_start + at..]
        ),
        None => location.to_owned(),
    }
}

#[cfg(test)]
#[path = "location_tests.rs"]
mod tests;
