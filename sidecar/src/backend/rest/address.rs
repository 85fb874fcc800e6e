//! Repository addresses of the gate: `rest:http(s)://host[:port]/path/`, checked and redacted.

use crate::backend::{BackendError, BackendResult};
use url::Url;

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
pub(super) fn checked_repository_url(mut url: Url) -> Result<Url, String> {
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
pub(super) fn redact_userinfo(address: &str) -> String {
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
}
