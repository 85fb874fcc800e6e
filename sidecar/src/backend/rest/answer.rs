//! A server's answer to one request, and the error each status means.

use crate::backend::{BackendError, ObjectKind};
use bytes::Bytes;
use reqwest::header::HeaderMap;
use reqwest::StatusCode;

/// How much of an error answer's body is quoted in messages.
pub(super) const ERROR_BODY_CHARS: usize = 200;

/// How much of an error answer's body is read at all.
pub(super) const ERROR_BODY_BYTES: u64 = 16 * 1024;

/// A server's whole answer to one request.
pub(super) struct Answer {
    pub(super) status: StatusCode,
    pub(super) headers: HeaderMap,
    pub(super) body: Bytes,
}

/// The error for a status that the operation does not handle itself.
pub(super) fn status_error(answer: &Answer, what: &str) -> BackendError {
    match answer.status {
        StatusCode::UNAUTHORIZED => BackendError::Unauthorized,
        StatusCode::FORBIDDEN => BackendError::Forbidden {
            what: what.to_owned(),
        },
        StatusCode::PAYLOAD_TOO_LARGE => BackendError::TooLarge {
            what: with_gate_message(what, &answer.body),
        },
        StatusCode::INSUFFICIENT_STORAGE => BackendError::RepositoryFull {
            message: body_excerpt(&answer.body),
        },
        status => BackendError::Http {
            status: status.as_u16(),
            what: what.to_owned(),
            body: body_excerpt(&answer.body),
        },
    }
}

/// `what`, followed by the gate's own words when it gave any (a quota's message, say).
fn with_gate_message(what: &str, body: &[u8]) -> String {
    match body_excerpt(body).as_str() {
        "(empty answer)" => what.to_owned(),
        message => format!("{what}; the server says: {message}"),
    }
}

/// The start of an answer's body, as text, for a message.
pub(super) fn body_excerpt(body: &[u8]) -> String {
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

pub(super) fn short_read(what: &str, reason: &str) -> BackendError {
    BackendError::Io {
        what: what.to_owned(),
        source: std::io::Error::new(std::io::ErrorKind::UnexpectedEof, reason.to_owned()),
    }
}

pub(super) fn header_u64(headers: &HeaderMap, name: reqwest::header::HeaderName) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

/// `kind/name` for messages; the config object is just `config`.
pub(super) fn object_label(kind: ObjectKind, name: &str) -> String {
    match kind {
        ObjectKind::Config => "config".to_owned(),
        _ => format!("{kind}/{name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_error_bodies_are_cut_to_200_characters() {
        let excerpt = body_excerpt("é".repeat(500).as_bytes());
        assert_eq!(excerpt.chars().count(), ERROR_BODY_CHARS + 1);
        assert_eq!(body_excerpt(b"  \n"), "(empty answer)");
    }

    #[test]
    fn a_full_gate_is_reported_in_its_own_words() {
        let answer = Answer {
            status: StatusCode::INSUFFICIENT_STORAGE,
            headers: HeaderMap::new(),
            body: Bytes::from_static(b"quota of team-a exceeded (10 GiB)"),
        };
        let message = status_error(&answer, "writing data/ab").to_string();
        assert!(message.contains("507"), "{message}");
        assert!(message.contains("quota of team-a exceeded"), "{message}");
    }
}
