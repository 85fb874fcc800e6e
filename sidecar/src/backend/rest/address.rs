//! Repository addresses of the gate, as the REST backend takes them: parsed and checked only by
//! [`neverwiped_contract::location`], turned into backend errors here.

use crate::backend::{BackendError, BackendResult};
use neverwiped_contract::location::{LocationError, RestLocation};
use url::Url;

/// The refusal of a location as a backend error; its address never repeats a password.
pub fn invalid_address(error: LocationError) -> BackendError {
    BackendError::InvalidAddress {
        reason: error.reason(),
        address: error.location,
    }
}

/// Checks `url` under the rules of every repository URL ([`RestLocation::parse`]), and returns it
/// as a location whose URL (and text) ends in `/`, so that object paths can be joined to it.
pub(super) fn checked_repository_location(url: &Url) -> BackendResult<RestLocation> {
    RestLocation::parse(url.as_str())
        .map(|location| location.as_connected())
        .map_err(invalid_address)
}

#[cfg(test)]
fn checked_repository_url(url: &Url) -> BackendResult<Url> {
    checked_repository_location(url).map(|location| location.url().clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_without_a_trailing_slash_gets_one() {
        let url = Url::parse("https://gate.example:8000/team/db").unwrap();
        let checked = checked_repository_url(&url).unwrap();
        assert_eq!(checked.as_str(), "https://gate.example:8000/team/db/");
    }

    #[test]
    fn a_url_with_credentials_is_refused_without_repeating_the_password() {
        let url = Url::parse("https://alice:s3cret@gate.example/repo/").unwrap();
        let error = checked_repository_url(&url).unwrap_err();
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
    fn a_url_with_another_scheme_or_a_query_is_refused() {
        for address in ["ftp://host/repo/", "https://host/repo/?x=1"] {
            let error = checked_repository_url(&Url::parse(address).unwrap()).unwrap_err();
            assert!(
                matches!(error, BackendError::InvalidAddress { .. }),
                "{address}: {error:?}"
            );
        }
    }
}
