//! The HTTP(S) client of the gate, and what its errors mean: a certificate that is not trusted is
//! final (sending again cannot change it) and says which certificate is needed.

use super::RestOptions;
use crate::backend::BackendError;
use reqwest::Client;
use std::time::Duration;

/// What a user must give for a server whose certificate is not trusted. rustls accepts a server
/// certificate issued by a CA given with `--cacert`, or a self-signed one given itself, provided
/// it is not marked as a CA (a CA certificate may not be used as a server's: `CaUsedAsEndEntity`).
const CERTIFICATE_HINT: &str = "give --cacert (NEVERWIPED_GATE_CA_FILE) the PEM certificate of \
     the CA that issued the server's certificate, or the server's own certificate if it is \
     self-signed and not marked as a CA";

/// The hint for a self-signed server certificate marked as a CA.
const CA_AS_SERVER_HINT: &str = "the server presents a CA certificate as its own: a self-signed \
     server certificate is accepted only when it is not marked as a CA (basicConstraints \
     CA:FALSE), or give the server a certificate issued by that CA";

/// The HTTP client: one per backend, so that connections are pooled and reused.
pub(super) fn build_client(
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

/// The error for a request that got no answer: a certificate problem (final), or a transport
/// problem (may pass).
pub(super) fn send_error(location: String, error: &reqwest::Error) -> BackendError {
    let message = describe_error_chain(error);
    // rustls reports every verification failure as "invalid peer certificate: …".
    if message.contains("invalid peer certificate") || message.contains("certificate verify") {
        let hint = if message.contains("CaUsedAsEndEntity") {
            CA_AS_SERVER_HINT
        } else {
            CERTIFICATE_HINT
        };
        return BackendError::Certificate {
            location,
            message: format!("{message}; {hint}"),
        };
    }
    BackendError::Transport { location, message }
}

/// An error with its causes, which hold the useful part ("connection refused", "invalid peer
/// certificate: UnknownIssuer").
pub(super) fn describe_error_chain(error: &dyn std::error::Error) -> String {
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
