//! The operator binary: configuration from the environment, logs, the HTTP endpoints, the
//! controllers.
//!
//! Environment:
//! - `NEVERWIPED_SIDECAR_IMAGE`: the image of the Jobs' sidecar (required).
//! - `NEVERWIPED_SIDECAR_IMAGE_PULL_POLICY`: `Always`, `IfNotPresent` or `Never`.
//! - `NEVERWIPED_HTTP_ADDR`: where `/healthz`, `/readyz` and `/metrics` listen (`0.0.0.0:8080`).
//! - `NEVERWIPED_CATCH_UP_WINDOW`: how late a missed run may still start (`24h`).
//! - `NEVERWIPED_WATCH_NAMESPACE`: reconcile only this namespace's resources (default: all).
//! - `NEVERWIPED_LOG_FORMAT`: `json` for JSON logs; `RUST_LOG` filters them (`info`).
//! - `KUBECONFIG` or the in-cluster service account: how to reach the API server.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context as _;
use neverwiped_operator::controller::{self, Context, Settings};
use neverwiped_operator::http::{self, Health};
use neverwiped_operator::metrics::Metrics;
use neverwiped_operator::schedule::parse_duration;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    if std::env::var("NEVERWIPED_LOG_FORMAT").as_deref() == Ok("json") {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }

    let image = std::env::var("NEVERWIPED_SIDECAR_IMAGE")
        .context("NEVERWIPED_SIDECAR_IMAGE must name the sidecar image the Jobs run")?;
    let mut settings = Settings::with_image(image);
    settings.job.image_pull_policy = std::env::var("NEVERWIPED_SIDECAR_IMAGE_PULL_POLICY").ok();
    if let Ok(window) = std::env::var("NEVERWIPED_CATCH_UP_WINDOW") {
        settings.catch_up_window = parse_duration(&window).context("NEVERWIPED_CATCH_UP_WINDOW")?;
    }
    settings.watch_namespace = std::env::var("NEVERWIPED_WATCH_NAMESPACE")
        .ok()
        .filter(|n| !n.is_empty());
    let address = std::env::var("NEVERWIPED_HTTP_ADDR").unwrap_or_else(|_| "0.0.0.0:8080".into());

    let metrics = Arc::new(Metrics::default());
    let health = Arc::new(Health {
        ready: AtomicBool::new(false),
        metrics: metrics.clone(),
    });
    let listener = tokio::net::TcpListener::bind(&address)
        .await
        .with_context(|| format!("cannot listen on {address}"))?;
    tracing::info!(%address, "serving /healthz, /readyz and /metrics");
    tokio::spawn(http::serve(listener, health.clone()));

    let client = kube::Client::try_default()
        .await
        .context("cannot configure a Kubernetes client")?;
    let version = client
        .apiserver_version()
        .await
        .context("cannot reach the Kubernetes API server")?;
    tracing::info!(version = %version.git_version, "connected to the API server");
    let ctx = Arc::new(Context::new(client, metrics, settings));
    health.ready.store(true, Ordering::Relaxed);
    controller::run(ctx, futures::future::pending()).await;
    tracing::info!("stopped");
    Ok(())
}
