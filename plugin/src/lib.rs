//! `kubectl neverwiped`: a BackupPlan's snapshots, files and runs from kubectl, with the caller's
//! own Kubernetes rights and nothing else.
//!
//! - [`cluster`]: the plan, its Secrets and Restores, read with the caller's kubeconfig; every
//!   refusal names the verb and the object.
//! - [`source`]: which repository a command reads: a plan's, or one named with `--repository`.
//! - [`repository`]: that repository opened in this process, as the plan's Jobs open it.
//! - [`browse`]: `snapshots`, `ls`, `cat`, `download`, with the engine's own snapshot selection.
//! - [`mount`]: the plan's snapshots as a read-only FUSE file system.
//! - [`runs`]: `backup` and `restore`, asked of the operator and followed through status.
//! - [`claims`]: the claims a snapshot recorded, created anew before a Restore fills them;
//!   whether they fit the namespace's ResourceQuotas (`neverwiped_api::quota`).
//! - [`status`]: every plan at a glance.

pub mod args;
pub mod browse;
pub mod claims;

pub mod cluster;
pub mod drills;
pub mod freshness;
pub mod mount;
pub mod repository;
pub mod requester;
pub mod runs;
pub mod source;
pub mod status;
pub mod table;

use anyhow::Result;
use args::{Cli, Command};
use browse::SnapshotChoice;
use cluster::Cluster;
use neverwiped::text;
use source::Source;
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
    match &cli.command {
        Command::Backup { plan, wait } => {
            no_repository_flags(&cli, "backup")?;
            runs::backup(&cluster, &namespace, plan, *wait).await
        }
        Command::Verify { plan, wait } => {
            no_repository_flags(&cli, "verify")?;
            drills::verify(&cluster, &namespace, plan, *wait).await
        }
        Command::Restore(args) => restore(&cli, &cluster, &namespace, args).await,
        Command::Status { all_namespaces } => {
            no_repository_flags(&cli, "status")?;
            status(&cluster, &namespace, *all_namespaces).await
        }
        _ => read(&cli, &cluster, &namespace).await,
    }
}

/// `--repository` names a repository to read; the commands that ask the operator work on plans.
fn no_repository_flags(cli: &Cli, command: &str) -> Result<()> {
    if cli.repository.url.is_some() || cli.repository.copy.is_some() {
        anyhow::bail!(
            "{command} works on a BackupPlan; --repository is for snapshots, ls, cat, download, \
             mount and restore (and so is --copy)"
        );
    }
    Ok(())
}

/// The commands that read a repository: `snapshots`, `ls`, `cat`, `download`, `mount`.
async fn read(cli: &Cli, cluster: &Cluster, namespace: &str) -> Result<()> {
    let timeout = cli.gate_timeout;
    let choice = |arg: &args::SnapshotArg, opened: &repository::OpenedRepository| SnapshotChoice {
        spec: arg.snapshot.clone(),
        before: arg.before,
        last_success: opened.plan.as_ref().and_then(freshness::last_success),
    };
    // The repository a reading command opens, and the origin of the snapshots it means.
    let reading = |plan: &str| -> Result<(Source, String)> {
        let source = Source::from_args(Some(plan), &cli.repository)?;
        let host = match &source {
            Source::Plan { name, .. } => repository::plan_host(namespace, name),
            Source::CommandLine(_) => source::origin(namespace, plan)?,
        };
        Ok((source, host))
    };
    match &cli.command {
        Command::Snapshots { plan, json } => {
            let source = Source::from_args(plan.as_deref(), &cli.repository)?;
            let host = match (&source, plan) {
                (Source::Plan { name, .. }, _) => Some(repository::plan_host(namespace, name)),
                (Source::CommandLine(_), Some(plan)) => Some(source::origin(namespace, plan)?),
                (Source::CommandLine(_), None) => None,
            };
            let opened = repository::open(cluster, namespace, &source, timeout).await?;
            let count = browse::snapshots(&opened.repo, host.as_deref(), *json).await?;
            match (&source, host) {
                // A plan may have none yet; an origin named by hand that has none is a mistake.
                (Source::CommandLine(_), Some(host)) if count == 0 => {
                    Err(browse::no_snapshot_of(&opened.repo, &host).await?)
                }
                _ => Ok(()),
            }
        }
        Command::Ls {
            plan,
            snapshot,
            path,
        } => {
            let (source, host) = reading(plan)?;
            let opened = repository::open(cluster, namespace, &source, timeout).await?;
            let choice = choice(snapshot, &opened);
            let repo = opened.indexed().await?;
            browse::ls(&repo, &host, &choice, path.as_deref()).await
        }
        Command::Cat {
            plan,
            snapshot,
            file,
        } => {
            let (source, host) = reading(plan)?;
            let opened = repository::open(cluster, namespace, &source, timeout).await?;
            let choice = choice(snapshot, &opened);
            let repo = opened.indexed().await?;
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
            let (source, host) = reading(plan)?;
            let opened = repository::open(cluster, namespace, &source, timeout).await?;
            let choice = choice(snapshot, &opened);
            let repo = opened.indexed().await?;
            let keep = *keep_owners_and_special_files;
            let report = browse::download(&repo, &host, &choice, path, to, keep).await?;
            say_downloaded(&report, path, to);
            Ok(())
        }
        Command::Mount { plan, mountpoint } => {
            let (source, host) = reading(plan)?;
            let opened = repository::open(cluster, namespace, &source, timeout).await?;
            mount::serve(opened.indexed().await?, &host, mountpoint).await
        }
        Command::Backup { .. }
        | Command::Verify { .. }
        | Command::Restore(_)
        | Command::Status { .. } => {
            unreachable!("run handles the commands that ask the operator")
        }
    }
}

/// `restore`: a Restore of the plan, or with `--repository` of an origin's snapshots in that
/// repository (in `--to-namespace`, else the command's namespace), created with the caller's
/// rights and followed; with `--create-claims`, after the claims the snapshot recorded.
async fn restore(
    cli: &Cli,
    cluster: &Cluster,
    namespace: &str,
    args: &args::RestoreArgs,
) -> Result<()> {
    let mut request = restore_request(args, cli.repository.copy.clone());
    let now = jiff::Timestamp::now();
    let (mut restore, claims) = match (cli.repository.to_repository()?, &args.to_namespace) {
        (Some(repository), to_namespace) => {
            let origin = source::origin(namespace, &args.plan)?;
            let target = to_namespace.as_deref().unwrap_or(namespace);
            let source = Source::CommandLine(repository.clone());
            let claims =
                recorded_claims(cli, cluster, (target, &source), &origin, args, &mut request)
                    .await?;
            let restore =
                runs::restore_from_repository(repository, &origin, target, &request, now)?;
            (restore, claims)
        }
        (None, Some(_)) => anyhow::bail!(
            "--to-namespace needs --repository URL --password-secret NAME: a Restore in another \
             namespace reads the repository with Secrets of that namespace"
        ),
        (None, None) => {
            let source = Source::Plan {
                name: args.plan.clone(),
                copy: cli.repository.copy.clone(),
            };
            let host = repository::plan_host(namespace, &args.plan);
            let claims = recorded_claims(
                cli,
                cluster,
                (namespace, &source),
                &host,
                args,
                &mut request,
            )
            .await?;
            let plan = cluster.plan(namespace, &args.plan).await?;
            (runs::restore_object(&plan, &request, now)?, claims)
        }
    };
    let target = restore.metadata.namespace.clone().unwrap_or_default();
    claims::create(cluster, &target, &claims).await?;
    requester::record_caller(cluster, &mut restore.metadata).await;
    runs::restore(cluster, restore, !args.no_wait).await
}

/// With `--create-claims`: the claims the snapshot of `host` that `request` means recorded, to
/// create in `namespace` (whose Secrets open the repository); `request` then names that snapshot
/// by its id and each claim as a volume. Without: none.
async fn recorded_claims(
    cli: &Cli,
    cluster: &Cluster,
    (namespace, source): (&str, &Source),
    host: &str,
    args: &args::RestoreArgs,
    request: &mut runs::RestoreRequest,
) -> Result<Vec<claims::ClaimToCreate>> {
    if !args.create_claims {
        return Ok(Vec::new());
    }
    let classes = claims::class_map(&args.storage_classes)?;
    let opened = repository::open(cluster, namespace, source, cli.gate_timeout).await?;
    let choice = SnapshotChoice {
        spec: request.snapshot.clone(),
        before: args.before,
        last_success: None,
    };
    let (id, snapshot) = browse::find(&opened.repo, host, &choice).await?;
    let made = claims::from_snapshot(&snapshot, &request.volumes, &classes, namespace)?;
    request.volumes = made
        .iter()
        .map(|c| {
            (
                c.source.clone(),
                c.claim.metadata.name.clone().unwrap_or_default(),
            )
        })
        .collect();
    request.snapshot = id.to_hex();
    request.taken_before = None;
    Ok(made)
}

/// What `restore`'s arguments ask to bring back.
fn restore_request(args: &args::RestoreArgs, copy: Option<String>) -> runs::RestoreRequest {
    runs::RestoreRequest {
        name: args.name.clone(),
        snapshot: selection_spec(&args.snapshot),
        taken_before: args
            .before
            .and_then(|t| jiff::Timestamp::from_second(t.timestamp()).ok()),
        volumes: args.volumes.iter().map(|v| args::volume_pair(v)).collect(),
        includes: args.includes.clone(),
        databases: args.databases.clone(),
        overwrite_databases: args.overwrite_databases,
        copy,
    }
}

/// `status`: every plan of the namespace (or of all) at a glance.
async fn status(cluster: &Cluster, namespace: &str, all_namespaces: bool) -> Result<()> {
    let scope = (!all_namespaces).then_some(namespace);
    let plans = cluster.plans(scope).await?;
    let now = jiff::Timestamp::now();
    let rows: Vec<status::Row> = plans.iter().map(|p| status::row(p, now)).collect();
    for line in status::render(&rows, all_namespaces) {
        println!("{line}");
    }
    if rows.is_empty() {
        eprintln!("no BackupPlans found");
    }
    Ok(())
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
