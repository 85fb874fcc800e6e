//! The command line: `kubectl neverwiped COMMAND PLAN …`, or `… --repository URL …` without a
//! plan.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// A plan's snapshots, files and runs, with your own Kubernetes rights and nothing else: the plan
/// and its Secrets are read with your kubeconfig, the repository is read from the gate in this
/// process, and nothing is written to disk but what you download.
#[derive(Debug, Parser)]
#[command(name = "kubectl neverwiped", version)]
pub struct Cli {
    /// The plan's namespace; by default the kubeconfig context's.
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// The kubeconfig context; by default the current one.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// How long one request to the gate may be retried before the command fails (`30s`, `5m`).
    #[arg(long, global = true, default_value = "30s", value_parser = parse_duration)]
    pub gate_timeout: Duration,
    #[command(flatten)]
    pub repository: RepositoryArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The plan's snapshots in its repository, newest first. With `--repository` and no PLAN,
    /// every snapshot of the repository, with the origin (`NAMESPACE/PLAN`) that took it.
    Snapshots {
        plan: Option<String>,
        /// Print JSON: every snapshot object, with its full id.
        #[arg(long)]
        json: bool,
    },
    /// The entries of a snapshot: all of them, or PATH and what is below it.
    Ls {
        plan: String,
        #[command(flatten)]
        snapshot: SnapshotArg,
        path: Option<OsString>,
    },
    /// Writes a file of a snapshot to standard output, byte for byte.
    Cat {
        plan: String,
        #[command(flatten)]
        snapshot: SnapshotArg,
        file: OsString,
    },
    /// Fetches a file or folder of a snapshot into a local folder, with its contents, modes and
    /// times: `/data/app/conf` lands in `DIR/data/app/conf`. What a workload could use to gain
    /// rights on this machine is left out, each said: device files and FIFOs are skipped,
    /// set-user-ID, set-group-ID and sticky bits cleared, and files belong to you.
    Download {
        plan: String,
        #[command(flatten)]
        snapshot: SnapshotArg,
        path: OsString,
        /// The local folder (created when missing).
        #[arg(long)]
        to: PathBuf,
        /// Restore owners (as root), device files, FIFOs and set-user-ID, set-group-ID and
        /// sticky bits as backed up, as a restore of a system does. Only for snapshots whose
        /// workload you trust with root on this machine.
        #[arg(long)]
        keep_owners_and_special_files: bool,
    },
    /// The plan's snapshots as a read-only file system at MOUNTPOINT (an existing folder), in
    /// restic's layout (snapshots/TIME/, snapshots/latest, ids/ID/, ...), until Ctrl-C.
    Mount { plan: String, mountpoint: PathBuf },
    /// Runs a backup of the plan now (sets `spec.manualTrigger`).
    Backup {
        plan: String,
        /// Follow the run to its end; fail when it fails.
        #[arg(long)]
        wait: bool,
    },
    /// Runs a restore drill of the plan now (`spec.verify`'s settings, or their defaults):
    /// its newest snapshot restored into scratch space, held to the snapshot, its dumps loaded
    /// into throwaway servers; prints how long each volume and database took to come back.
    Verify {
        plan: String,
        /// Follow the drill to its end; fail when it fails.
        #[arg(long)]
        wait: bool,
    },
    /// Creates a Restore of the plan and follows it to its end.
    Restore(RestoreArgs),
    /// Every plan at a glance: last success, newest snapshot, state, repository size, failures.
    Status {
        /// The plans of every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
    },
}

/// A repository named on the command line, for when its BackupPlan is gone, renamed or in
/// another cluster: `snapshots`, `ls`, `cat`, `download`, `mount` and `restore` then read no
/// plan, and their PLAN is the origin of the snapshots (`NAMESPACE/PLAN`, or PLAN of `-n`'s
/// namespace). The Secrets are read from `-n`'s namespace (a Restore's, from its own), and the
/// URL must be within the tenant policy's allowed repository prefixes, as a plan's.
#[derive(Debug, Clone, Default, Args)]
pub struct RepositoryArgs {
    /// The repository's URL on the gate (as a plan's `spec.repository.url`).
    #[arg(long = "repository", value_name = "URL", global = true)]
    pub url: Option<String>,
    /// The Secret holding the repository password: `NAME` (key `password`) or `NAME:KEY`.
    #[arg(long, value_name = "NAME[:KEY]", global = true, requires = "url")]
    pub password_secret: Option<String>,
    /// The Secret holding the gate login (keys `username` and `password`, as a
    /// `kubernetes.io/basic-auth` Secret).
    #[arg(long, value_name = "NAME", global = true, requires = "url")]
    pub login_secret: Option<String>,
    /// The Secret holding the CA certificate(s) of a gate with a private CA: `NAME` (key
    /// `ca.crt`) or `NAME:KEY`.
    #[arg(long, value_name = "NAME[:KEY]", global = true, requires = "url")]
    pub ca_secret: Option<String>,
    /// A copy of the plan (the `name` of one of its `spec.copies`) to read in place of its
    /// repository, with that copy's Secrets; `restore` creates a Restore with `copy`.
    #[arg(long, value_name = "NAME", global = true, conflicts_with = "url")]
    pub copy: Option<String>,
}

/// Which snapshot: `latest`, or an id prefix; `--before` picks the newest taken before a time.
#[derive(Debug, Clone, Args)]
pub struct SnapshotArg {
    /// `latest`, or the first digits of a snapshot id (as `snapshots` lists them).
    pub snapshot: String,
    /// With `latest`: the newest snapshot taken before this RFC 3339 time.
    #[arg(long, value_parser = parse_time)]
    pub before: Option<chrono::DateTime<chrono::Utc>>,
}

#[derive(Debug, Clone, Args)]
pub struct RestoreArgs {
    /// The BackupPlan; with --repository, the origin of the snapshots: PLAN (of -n's
    /// namespace) or NAMESPACE/PLAN, as `snapshots --repository` lists them.
    pub plan: String,
    /// `latest`, or the first digits (8 or more) of a snapshot id.
    #[arg(default_value = "latest")]
    pub snapshot: String,
    /// With `latest`: the newest snapshot taken before this RFC 3339 time.
    #[arg(long, value_parser = parse_time)]
    pub before: Option<chrono::DateTime<chrono::Utc>>,
    /// A backed-up claim and the claim to restore it into (`data=data-copy`; `data` alone
    /// restores in place). By default every claim the plan names, in place.
    #[arg(long = "volume", value_name = "SOURCE[=TARGET]")]
    pub volumes: Vec<String>,
    /// Paths inside the volumes to restore (a folder brings all below it).
    #[arg(long = "include", value_name = "PATH")]
    pub includes: Vec<String>,
    /// A database entry of the plan, restored into the server it was dumped from.
    #[arg(long = "database", value_name = "NAME")]
    pub databases: Vec<String>,
    /// Drop the databases being restored on the target server first.
    #[arg(long, requires = "databases")]
    pub overwrite_databases: bool,
    /// The Restore's name; by default PLAN-restore-TIME.
    #[arg(long)]
    pub name: Option<String>,
    /// Create the Restore and return, without following it.
    #[arg(long)]
    pub no_wait: bool,
    /// First create the claims the snapshot recorded (every one, or those --volume names, under
    /// their TARGET names), as they were: size, storage class, access and volume modes, labels
    /// and annotations. The Restore then restores that snapshot (its id) into them. Refused if
    /// one of them exists.
    #[arg(long)]
    pub create_claims: bool,
    /// With --create-claims: a storage class of the snapshot's claims and the one to create
    /// them with here (repeatable), e.g. fast-ssd=standard.
    #[arg(
        long = "storage-class",
        value_name = "OLD=NEW",
        requires = "create_claims"
    )]
    pub storage_classes: Vec<String>,
    /// With --repository: create the Restore in this namespace, whose Secrets the flags name
    /// and whose claims it restores into (by default -n's). An origin of another namespace makes
    /// it a clone, which the cluster admin's policy allows or refuses.
    #[arg(long, value_name = "NAMESPACE")]
    pub to_namespace: Option<String>,
}

fn parse_time(text: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|time| time.with_timezone(&chrono::Utc))
        .map_err(|e| format!("{text:?} is not an RFC 3339 time such as 2026-11-30T02:00:00Z: {e}"))
}

/// `90s`, `5m`, `1h30m`, or plain seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    let span: jiff::SignedDuration = text
        .parse()
        .map_err(|_| format!("{text:?} is not a duration such as 30s, 5m or 1h30m"))?;
    Duration::try_from(span).map_err(|_| format!("{text:?} is negative"))
}

/// `SOURCE[=TARGET]` as a pair; `TARGET` defaults to `SOURCE`.
pub fn volume_pair(text: &str) -> (String, String) {
    match text.split_once('=') {
        Some((source, target)) => (source.to_owned(), target.to_owned()),
        None => (text.to_owned(), text.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_volume_pairs_parse() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("soon").is_err());
        assert_eq!(volume_pair("data"), ("data".into(), "data".into()));
        assert_eq!(volume_pair("data=copy"), ("data".into(), "copy".into()));
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "kubectl-neverwiped",
            "download",
            "nightly",
            "latest",
            "/data/app",
            "--to",
            "out",
            "-n",
            "shop",
            "--before",
            "2026-11-30T00:00:00Z",
        ])
        .unwrap();
        assert_eq!(cli.namespace.as_deref(), Some("shop"));
        let Command::Download { snapshot, path, .. } = cli.command else {
            panic!("download");
        };
        assert_eq!(
            (snapshot.snapshot.as_str(), path.to_str().unwrap()),
            ("latest", "/data/app")
        );
        assert!(snapshot.before.is_some());
    }
}
