//! The operator's HTTP endpoints: `/healthz` (the process serves), `/readyz` (it reached the API
//! server and its controllers run) and `/metrics` (Prometheus).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::metrics::Metrics;

/// What the endpoints report.
pub struct Health {
    pub ready: AtomicBool,
    pub metrics: Arc<Metrics>,
}

/// The response to one request.
pub fn respond(health: &Health, method: &Method, path: &str) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (method, path) {
        (&Method::GET, "/healthz") => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
        (&Method::GET, "/readyz") if health.ready.load(Ordering::Relaxed) => {
            (StatusCode::OK, "text/plain", "ok\n".to_owned())
        }
        (&Method::GET, "/readyz") => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "not ready\n".to_owned(),
        ),
        (&Method::GET, "/metrics") => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            health.metrics.encode(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found\n".to_owned(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}

/// Serves the endpoints on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, health: Arc<Health>) {
    loop {
        let (stream, peer): (_, SocketAddr) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "cannot accept an HTTP connection");
                continue;
            }
        };
        let health = health.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let response = respond(&health, request.method(), request.uri().path());
                async move { Ok::<_, Infallible>(response) }
            });
            if let Err(error) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%error, %peer, "HTTP connection ended");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_follows_the_flag_and_metrics_are_text() {
        let health = Health {
            ready: AtomicBool::new(false),
            metrics: Arc::new(Metrics::default()),
        };
        assert_eq!(
            respond(&health, &Method::GET, "/healthz").status(),
            StatusCode::OK
        );
        assert_eq!(
            respond(&health, &Method::GET, "/readyz").status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        health.ready.store(true, Ordering::Relaxed);
        assert_eq!(
            respond(&health, &Method::GET, "/readyz").status(),
            StatusCode::OK
        );
        assert_eq!(
            respond(&health, &Method::GET, "/metrics").status(),
            StatusCode::OK
        );
        assert_eq!(
            respond(&health, &Method::GET, "/nope").status(),
            StatusCode::NOT_FOUND
        );
    }
}
