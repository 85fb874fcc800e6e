//! Reading an answer's body: never more than the caller can use, never longer than a silence.

use reqwest::Response;
use std::time::Duration;

/// What to do when a body goes on past `limit_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PastTheLimit {
    /// The answer is wrong (a range answered with more than asked, an object above the ceiling).
    Refuse,
    /// The caller needs only the first `limit_bytes` (a server that ignored `Range` and sends
    /// the whole object): keep those and stop reading.
    Stop,
}

/// How a body read ended when it did not end well.
#[derive(Debug)]
pub(super) enum BodyError {
    /// The body went past the limit and the caller refuses that.
    TooLong { limit_bytes: u64 },
    /// The server was silent for longer than allowed.
    Stalled { silence: Duration },
    /// The connection failed mid-body, including one closed before the announced
    /// `Content-Length` was met (hyper checks that, for HTTP/1 and HTTP/2 alike).
    Transport(reqwest::Error),
}

/// The most memory reserved up front for a body, whatever its `Content-Length` says.
const MAX_RESERVED_BYTES: u64 = 256 * 1024 * 1024;

/// Reads `response`'s body into `body` (cleared first; its allocation is reused), at most
/// `limit_bytes` of it, waiting at most `silence` for each piece.
pub(super) async fn read_body(
    response: &mut Response,
    limit_bytes: u64,
    past_the_limit: PastTheLimit,
    silence: Duration,
    mut body: Vec<u8>,
) -> Result<Vec<u8>, BodyError> {
    let announced = response.content_length();
    if past_the_limit == PastTheLimit::Refuse && announced.is_some_and(|len| len > limit_bytes) {
        return Err(BodyError::TooLong { limit_bytes });
    }
    // Reserve what the server announces, within reason: a wrong header must not cost memory.
    let reserved = announced
        .unwrap_or(0)
        .min(limit_bytes)
        .min(MAX_RESERVED_BYTES);
    body.clear();
    body.reserve_exact(reserved as usize);
    let limit = usize::try_from(limit_bytes).unwrap_or(usize::MAX);
    loop {
        let chunk = match tokio::time::timeout(silence, response.chunk()).await {
            Ok(Ok(Some(chunk))) => chunk,
            Ok(Ok(None)) => break,
            Ok(Err(error)) => return Err(BodyError::Transport(error)),
            Err(_) => return Err(BodyError::Stalled { silence }),
        };
        let room = limit - body.len();
        if chunk.len() > room {
            if past_the_limit == PastTheLimit::Refuse {
                return Err(BodyError::TooLong { limit_bytes });
            }
            body.extend_from_slice(&chunk[..room]);
            return Ok(body);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
