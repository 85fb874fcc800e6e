//! `kubectl neverwiped`: a BackupPlan's snapshots, files and runs from kubectl, with the caller's
//! own Kubernetes rights and nothing else.
//!
//! - [`cluster`]: the plan, its Secrets and Restores, read with the caller's kubeconfig; every
//!   refusal names the verb and the object.
//! - [`repository`]: the plan's repository opened in this process, as its Jobs open it.
//! - [`browse`]: `snapshots`, `ls`, `cat`, `download`, with the engine's own snapshot selection.
//! - [`mount`]: the plan's snapshots as a read-only FUSE file system.
//! - [`runs`]: `backup` and `restore`, asked of the operator and followed through status.
//! - [`status`]: every plan at a glance.

pub mod args;
pub mod browse;
pub mod cluster;
pub mod freshness;
pub mod mount;
pub mod repository;
pub mod requester;
pub mod runs;
pub mod status;
pub mod table;

use anyhow::Result;
use args::{Cli, Command};
use browse::SnapshotChoice;
use cluster::Cluster;
use neverwiped::text;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Runs one command line.
pub async fn run(cli: Cli) -> Result<()> {
    let cluster = Cluster::connect(cli.context.clone()).await?;
    let namespace = cli
        .namespace
        .clone()
        .unwrap_or_else(|| cluster.default_namespace.clone());
    let timeout = cli.gate_timeout;
    let choice = |arg: &args::SnapshotArg, opened: &repository::PlanRepository| SnapshotChoice {
        spec: arg.snapshot.clone(),
        before: arg.before,
        last_success: freshness::last_success(&opened.plan),
    };
    match &cli.command {
        Command::Snapshots { plan, json } => {
            let opened = repository::open(&cluster, &namespace, plan, timeout).await?;
            browse::snapshots(&opened.repo, &opened.host, *json).await
        }
        Command::Ls {
            plan,
            snapshot,
            path,
        } => {
            let opened = repository::open(&cluster, &namespace, plan, timeout).await?;
            let choice = choice(snapshot, &opened);
            let (host, repo) = opened.indexed().await?;
            browse::ls(&repo, &host, &choice, path.as_deref()).await
        }
        Command::Cat {
            plan,
            snapshot,
            file,
        } => {
            let opened = repository::open(&cluster, &namespace, plan, timeout).await?;
            let choice = choice(snapshot, &opened);
            let (host, repo) = opened.indexed().await?;
            let mut out = std::io::stdout().lock();
            browse::cat(&repo, &host, &choice, file, &mut out).await?;
            Ok(())
        }
        Command::Download {
            plan,
            snapshot,
            path,
            to,
            keep_owners_and_special_files,
        } => {
            let opened = repository::open(&cluster, &namespace, plan, timeout).await?;
            let choice = choice(snapshot, &opened);
            let (host, repo) = opened.indexed().await?;
            let keep = *keep_owners_and_special_files;
            let report = browse::download(&repo, &host, &choice, path, to, keep).await?;
            say_downloaded(&report, path, to);
            Ok(())
        }
        Command::Mount { plan, mountpoint } => {
            let (host, repo) = repository::open(&cluster, &namespace, plan, timeout)
                .await?
                .indexed()
                .await?;
            mount::serve(repo, &host, mountpoint).await
        }
        Command::Backup { plan, wait } => runs::backup(&cluster, &namespace, plan, *wait).await,
        Command::Restore(args) => {
            let plan = cluster.plan(&namespace, &args.plan).await?;
            let request = runs::RestoreRequest {
                name: args.name.clone(),
                snapshot: selection_spec(&args.snapshot),
                taken_before: args
                    .before
                    .and_then(|t| jiff::Timestamp::from_second(t.timestamp()).ok()),
                volumes: args.volumes.iter().map(|v| args::volume_pair(v)).collect(),
                includes: args.includes.clone(),
                databases: args.databases.clone(),
                overwrite_databases: args.overwrite_databases,
            };
            let mut restore = runs::restore_object(&plan, &request, jiff::Timestamp::now())?;
            requester::record_caller(&cluster, &mut restore.metadata).await;
            runs::restore(&cluster, restore, !args.no_wait).await
        }
        Command::Status { all_namespaces } => {
            let scope = (!all_namespaces).then_some(namespace.as_str());
            let plans = cluster.plans(scope).await?;
            let now = jiff::Timestamp::now();
            let rows: Vec<status::Row> = plans.iter().map(|p| status::row(p, now)).collect();
            for line in status::render(&rows, *all_namespaces) {
                println!("{line}");
            }
            if rows.is_empty() {
                eprintln!("no BackupPlans found");
            }
            Ok(())
        }
    }
}

/// An error as the terminal shows it: escaped, but for a failed run's status message, which
/// [`runs::status_text`] already made fit (escaping it again would double its backslashes).
pub fn error_text(error: &anyhow::Error) -> String {
    match error.downcast_ref::<runs::RunFailed>() {
        Some(failed) => failed.to_string(),
        None => text::escaped(&text::describe_chain(error.chain())).into_owned(),
    }
}

/// Says what `download` left out, and what it wrote.
fn say_downloaded(report: &neverwiped::restore::RestoreReport, path: &OsStr, to: &Path) {
    for warning in &report.warnings {
        eprintln!("warning: {}", text::escaped(warning));
    }
    eprintln!(
        "downloaded {} to {}: {} file(s), {}",
        text::quoted(path.as_bytes()),
        text::quoted(to.as_os_str().as_bytes()),
        report.files,
        table::bytes(report.bytes_written)
    );
}

/// A Restore's `snapshot` is `latest` or lower-case hex, as the sidecar matches ids.
fn selection_spec(text: &str) -> String {
    neverwiped::selection::snapshot_spec(text)
}
