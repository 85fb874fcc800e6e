//! The operator binary: configuration from the environment, logs, the HTTP endpoints, leader
//! election, the controllers.
//!
//! Environment:
//! - `NEVERWIPED_SIDECAR_IMAGE`: the image of the Jobs' sidecar (required).
//! - `NEVERWIPED_SIDECAR_IMAGE_PULL_POLICY`: `Always`, `IfNotPresent` or `Never`.
//! - `NEVERWIPED_HTTP_ADDR`: where `/healthz`, `/readyz` and `/metrics` listen (`0.0.0.0:8080`).
//! - `NEVERWIPED_CATCH_UP_WINDOW`: how late a missed run may still start (`24h`).
//! - `NEVERWIPED_WATCH_NAMESPACE`: reconcile only this namespace's resources (default: all).
//! - `NEVERWIPED_TENANT_POLICY`: the cluster admin's limits on plans and Restores, as JSON
//!   (the chart's `policy` values; default: none).
//! - `NEVERWIPED_MAX_RUNNING_BACKUPS` (`25`), `NEVERWIPED_MAX_RUNNING_MAINTENANCE` (`5`),
//!   `NEVERWIPED_MAX_RUNNING_PER_NODE` (`3`), `NEVERWIPED_MAX_RUNNING_PER_REPOSITORY_HOST` (`10`):
//!   how many backup Jobs, prune and check Jobs, Jobs pinned to one node and Jobs using one
//!   repository host run at once; `0` is no limit. A run beyond them waits in a queue.
//! - `NEVERWIPED_PLAN_SELECTOR`: reconcile only the BackupPlans and Restores this label selector
//!   matches (default: all).
//! - `NEVERWIPED_RECONCILE_CONCURRENCY` (`32`): how many BackupPlans are reconciled at once (`0`:
//!   no limit).
//! - `NEVERWIPED_LEADER_ELECTION`: `false` runs the controllers without a Lease (one replica only).
//! - `NEVERWIPED_LEASE_NAME` (`neverwiped-operator`), `NEVERWIPED_LEASE_NAMESPACE` (default: the
//!   pod's namespace, `POD_NAMESPACE` or the service account's), `NEVERWIPED_LEASE_DURATION`
//!   (`15s`): the leader Lease.
//! - `POD_NAME`: this replica's identity in the Lease and in Events (default: host name and pid).
//! - `NEVERWIPED_LOG_FORMAT`: `json` for JSON logs; `RUST_LOG` filters them (`info`).
//! - `KUBECONFIG` or the in-cluster service account: how to reach the API server.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context as _;
use futures::FutureExt;
use neverwiped_operator::controller::queue::Limits;
use neverwiped_operator::controller::{self, Context, Settings};
use neverwiped_operator::http::{self, Health};
use neverwiped_operator::leader::{LeaderElector, LeaderSettings};
use neverwiped_operator::metrics::Metrics;
use neverwiped_operator::schedule::parse_duration;
use neverwiped_operator::tenant_policy::{TenantPolicy, POLICY_ENV};
use tracing_subscriber::EnvFilter;

const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

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
    settings.watch_namespace = non_empty_env("NEVERWIPED_WATCH_NAMESPACE");
    settings.tenant_policy =
        TenantPolicy::from_json(&std::env::var(POLICY_ENV).unwrap_or_default())?;
    settings.limits = limits()?;
    settings.plan_selector = non_empty_env("NEVERWIPED_PLAN_SELECTOR");
    if let Some(text) = non_empty_env("NEVERWIPED_RECONCILE_CONCURRENCY") {
        settings.reconcile_concurrency = text.parse().context(
            "NEVERWIPED_RECONCILE_CONCURRENCY must be a number of reconciles (0: no limit)",
        )?;
    }
    let leader_settings = leader_settings()?;
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

/// The concurrency limits from the environment; an unset variable keeps its default.
fn limits() -> anyhow::Result<Limits> {
    let defaults = Limits::default();
    let limit = |name: &str, default: Option<NonZeroUsize>| -> anyhow::Result<_> {
        match non_empty_env(name) {
            None => Ok(default),
            Some(text) => {
                let value: usize = text
                    .parse()
                    .with_context(|| format!("{name} must be a number of Jobs (0: no limit)"))?;
                Ok(NonZeroUsize::new(value))
            }
        }
    };
    Ok(Limits {
        backups: limit("NEVERWIPED_MAX_RUNNING_BACKUPS", defaults.backups)?,
        maintenance: limit("NEVERWIPED_MAX_RUNNING_MAINTENANCE", defaults.maintenance)?,
        per_node: limit("NEVERWIPED_MAX_RUNNING_PER_NODE", defaults.per_node)?,
        per_repository_host: limit(
            "NEVERWIPED_MAX_RUNNING_PER_REPOSITORY_HOST",
            defaults.per_repository_host,
        )?,
    })
}

fn non_empty_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// The leader election's settings; `None` when it is turned off.
fn leader_settings() -> anyhow::Result<Option<LeaderSettings>> {
    if std::env::var("NEVERWIPED_LEADER_ELECTION").as_deref() == Ok("false") {
        return Ok(None);
    }
    let namespace = non_empty_env("NEVERWIPED_LEASE_NAMESPACE")
        .or_else(|| non_empty_env("POD_NAMESPACE"))
        .or_else(|| {
            std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE)
                .ok()
                .map(|n| n.trim().to_owned())
                .filter(|n| !n.is_empty())
        })
        .unwrap_or_else(|| "default".into());
    let name =
        non_empty_env("NEVERWIPED_LEASE_NAME").unwrap_or_else(|| "neverwiped-operator".into());
    let identity = non_empty_env("POD_NAME").unwrap_or_else(|| {
        let host = non_empty_env("HOSTNAME").unwrap_or_else(|| "neverwiped-operator".into());
        format!("{host}-{}", std::process::id())
    });
    let duration = match non_empty_env("NEVERWIPED_LEASE_DURATION") {
        Some(text) => parse_duration(&text)
            .context("NEVERWIPED_LEASE_DURATION")?
            .unsigned_abs(),
        None => std::time::Duration::from_secs(15),
    };
    Ok(Some(LeaderSettings::new(
        namespace, name, identity, duration,
    )))
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
