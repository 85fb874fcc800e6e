//! The operator binary: configuration from the environment, logs, the HTTP endpoints, leader
//! election, the controllers.
//!
//! The variables it reads are listed in `neverwiped_operator::environment`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context as _;
use futures::FutureExt;
use neverwiped_operator::controller::{self, Context};
use neverwiped_operator::environment::OperatorEnvironment;
use neverwiped_operator::http::{self, Health};
use neverwiped_operator::leader::LeaderElector;
use neverwiped_operator::metrics::Metrics;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let environment = OperatorEnvironment::from_env()?;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    if environment.json_logs {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }
    let OperatorEnvironment {
        settings,
        leader: leader_settings,
        http_address: address,
        ..
    } = environment;

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

    let client = neverwiped_operator::client::counting_client(&metrics)
        .await
        .context("cannot configure a Kubernetes client")?;
    let version = client
        .apiserver_version()
        .await
        .context("cannot reach the Kubernetes API server")?;
    tracing::info!(version = %version.git_version, "connected to the API server");
    let ctx = Arc::new(Context::new(client.clone(), metrics.clone(), settings));
    health.ready.store(true, Ordering::Relaxed);
    let stop = shutdown_signal().boxed().shared();

    let Some(leader_settings) = leader_settings else {
        metrics.leader.set(1);
        run_controllers(ctx, stop).await;
        tracing::info!("stopped");
        return Ok(());
    };
    tracing::info!(
        lease = %format!("{}/{}", leader_settings.namespace, leader_settings.name),
        identity = %leader_settings.identity,
        "waiting to lead"
    );
    let mut elector = LeaderElector::new(client, leader_settings);
    tokio::select! {
        () = elector.acquire() => {}
        () = stop.clone() => {
            tracing::info!("stopped before leading");
            return Ok(());
        }
    }
    metrics.leader.set(1);
    tracing::info!("leading: starting the controllers");
    // Losing the Lease stops everything at once: another replica may lead soon after.
    let lost = tokio::select! {
        () = run_controllers(ctx, stop) => None,
        lost = elector.hold() => Some(lost),
    };
    metrics.leader.set(0);
    match lost {
        Some(lost) => Err(anyhow::Error::new(lost).context("lost the leader Lease; exiting")),
        None => {
            match tokio::time::timeout(RELEASE_TIMEOUT, elector.release()).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => tracing::warn!(%error, "cannot release the leader Lease; another replica takes over when it expires"),
                Err(_) => tracing::warn!("the API server did not answer the Lease release in time; another replica takes over when it expires"),
            }
            tracing::info!("stopped");
            Ok(())
        }
    }
}

/// How long running reconciles may take to finish once the operator is asked to stop. Kubernetes
/// kills a pod 30 s after SIGTERM by default; what a reconcile left undone is redone by the next
/// leader, as every reconcile starts from what the API server holds.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);
/// How long giving the Lease up may take before the operator exits without it.
const RELEASE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs the controllers until `stop` resolves, then lets running reconciles finish for at most
/// [`SHUTDOWN_GRACE`].
async fn run_controllers(
    ctx: Arc<Context>,
    stop: futures::future::Shared<futures::future::BoxFuture<'static, ()>>,
) {
    let controllers = controller::run(ctx, stop.clone());
    tokio::pin!(controllers);
    tokio::select! {
        () = &mut controllers => return,
        () = stop => {}
    }
    if tokio::time::timeout(SHUTDOWN_GRACE, controllers)
        .await
        .is_err()
    {
        tracing::warn!(
            grace_seconds = SHUTDOWN_GRACE.as_secs(),
            "reconciles still running at the end of the shutdown grace; stopping without them"
        );
    }
}

/// Resolves on SIGTERM (Kubernetes stopping the pod) or Ctrl+C.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c().map(|_| ());
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    () = interrupt => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                interrupt.await;
            }
        }
    }
    #[cfg(not(unix))]
    interrupt.await;
    tracing::info!("shutting down");
}
