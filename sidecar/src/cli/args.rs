//! The command line, following restic's conventions where users already know them.

use super::durations::parse_duration;
pub use super::forget::{ForgetArgs, KeepArgs};
use super::location_arg::RepositoryLocationParser;
use clap::{Args, Parser, Subcommand};
use neverwiped_contract::cli::env;
use neverwiped_contract::location::RepositoryLocation;
use neverwiped_contract::Operation;
use std::path::PathBuf;

pub use super::ls::LsArgs;

/// The heading of the options every command takes, listed after the command's own.
const GLOBAL: &str = "Global options";

/// The environment and exit codes, at the end of every help page.
const ENVIRONMENT_AND_EXIT_CODES: &str = "\
Environment (secrets are never taken from the command line):
  NEVERWIPED_REPOSITORY          the repository, as --repo
  NEVERWIPED_PASSWORD_FILE       file holding the repository password, as --password-file
  NEVERWIPED_PASSWORD            the repository password itself
  NEVERWIPED_GATE_USERNAME       the gate's basic-auth user name
  NEVERWIPED_GATE_PASSWORD_FILE  file holding the gate's password (or NEVERWIPED_GATE_PASSWORD)
  NEVERWIPED_GATE_CA_FILE        PEM file of a CA for the gate's certificate, as --cacert
  NEVERWIPED_KEY_HINT            the key id tried first, as --key-hint
  NEVERWIPED_DB_PASSWORD_<NAME>  password of --database NAME (NAME upper-cased, '-' and '.' as '_')
  NEVERWIPED_NEW_PASSWORD_FILE   the new password of key add / key passwd
  NEVERWIPED_FROM_REPOSITORY     copy: the repository copied from, as --from-repo
  NEVERWIPED_FROM_PASSWORD_FILE  copy: its password file (or NEVERWIPED_FROM_PASSWORD)
  NEVERWIPED_FROM_GATE_USERNAME  copy: its gate's user name; the password in
                                 NEVERWIPED_FROM_GATE_PASSWORD_FILE (or ..._PASSWORD)
  NEVERWIPED_LOG_FORMAT          text or json, as --log-format
  NEVERWIPED_LOG                 log filter, e.g. debug or neverwiped=debug

Exit codes:
  0   done (warnings that lose nothing, such as a skipped socket, are listed in the result)
  1   failed: nothing the command claims was committed
  3   partial: a backup could not read some input, or a restore could not give back some entry
  10  no repository at --repo
  11  the repository is locked by another process
  12  wrong password
  13  `latest --host HOST` found no snapshot of HOST (the error lists the hosts the repository holds)
  14  verification failed: restore --verify or a drill found files (or a drill, database rows)
      that differ from the snapshot, or a dump that does not load
  129, 130, 143  stopped by SIGHUP, SIGINT (Ctrl-C) or SIGTERM: no snapshot after the signal,
                 the run's lock removed";

#[derive(Debug, Parser)]
#[command(
    name = "neverwiped-sidecar",
    version,
    about = "Encrypted, deduplicated backups to a local folder or a restic REST server (the gate).",
    after_help = ENVIRONMENT_AND_EXIT_CODES,
)]
pub struct Cli {
    /// The repository: a folder, or rest:http(s)://host[:port]/path/ for the gate.
    #[arg(long, short = 'r', env = env::REPOSITORY, global = true, help_heading = GLOBAL,
          value_parser = RepositoryLocationParser)]
    pub repo: Option<RepositoryLocation>,

    /// File holding the repository password (or set NEVERWIPED_PASSWORD).
    #[arg(long, short = 'p', env = env::PASSWORD_FILE, global = true, help_heading = GLOBAL)]
    pub password_file: Option<PathBuf>,

    /// The first digits of the id of the key the password opens (as `key list` shows it): tried
    /// first, before the repository's other keys.
    #[arg(long, value_name = "ID", env = env::KEY_HINT, global = true, help_heading = GLOBAL)]
    pub key_hint: Option<String>,

    /// PEM file of a CA to trust for the gate's HTTPS certificate.
    #[arg(long, env = env::GATE_CA_FILE, global = true, help_heading = GLOBAL)]
    pub cacert: Option<PathBuf>,

    /// When the repository is locked by another process, wait up to this long for it (e.g. 30m,
    /// 1h, 90s) instead of failing at once.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, global = true, help_heading = GLOBAL)]
    pub retry_lock: Option<std::time::Duration>,

    /// Read without a lock (restore, ls, find, diff, stats, dump, cat, snapshots, mount,
    /// check): for a repository that cannot be written. Without it they take a shared lock, or
    /// go on without one when refused.
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub no_lock: bool,

    /// How long one request to the gate may keep being retried (pauses included) before the run
    /// fails, e.g. 15m (the default), 1h, 90s.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, env = env::RETRY_BUDGET, global = true, help_heading = GLOBAL)]
    pub retry_budget: Option<std::time::Duration>,

    /// The first pause, in milliseconds, before retrying a failed request to the gate (default
    /// 500); each further pause doubles, up to 30 s.
    #[arg(
        long,
        value_name = "MS",
        env = env::RETRY_DELAY_MS,
        global = true,
        help_heading = GLOBAL
    )]
    pub retry_delay_ms: Option<u64>,

    /// Write the run's JSON result here (the operator points it at /dev/termination-log).
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub result_file: Option<PathBuf>,

    /// Print results as JSON on standard output.
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub json: bool,

    /// No progress bar, only warnings and errors.
    #[arg(long, short = 'q', global = true, help_heading = GLOBAL)]
    pub quiet: bool,

    /// Log format on standard error: text or json (default: text on a terminal, else json).
    #[arg(long, env = env::LOG_FORMAT, global = true, help_heading = GLOBAL)]
    pub log_format: Option<LogFormat>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a new repository.
    Init,
    /// Back up files and folders (or standard input) into a new snapshot.
    Backup(Box<BackupArgs>),
    /// List snapshots: all, or those the filters and ids choose, optionally grouped.
    Snapshots(super::listing::SnapshotsArgs),
    /// Write a file of a snapshot, or a folder as a tar archive, to standard output (or --target
    /// FILE).
    Dump(super::dump::DumpArgs),
    /// Print one object of the repository: decrypted JSON, a pack's bytes, a blob's plaintext.
    Cat(super::cat::CatArgs),
    /// Count what snapshots hold: their restore size, or the stored data they reference.
    Stats(super::stats::StatsArgs),
    /// Show what changed between two snapshots: added, removed, changed, metadata, type.
    Diff(super::diff::DiffArgs),
    /// Find the entries whose paths match restic patterns, across snapshots.
    Find(super::find::FindArgs),
    /// List the entries of a snapshot: all, or folders and their direct entries (restic's rules).
    Ls(LsArgs),
    /// Restore a snapshot (or part of it) into a folder.
    Restore(RestoreArgs),
    /// Say which snapshot a selection means, and what it recorded of its claims and databases.
    Describe(super::describe::DescribeArgs),
    /// Remove stale locks (of processes that are gone, or not refreshed for 30 minutes).
    Unlock(UnlockArgs),
    /// Verify the repository: structure, and with --read-data every byte.
    Check(CheckArgs),
    /// Remove snapshots that a keep policy does not keep (their data stays until prune).
    Forget(ForgetArgs),
    /// Add, remove or set the tags of snapshots (each changed snapshot is written anew).
    Tag(super::tag::TagArgs),
    /// Repair the repository: the index from the packs (index), damaged snapshots (snapshots).
    #[command(subcommand)]
    Repair(super::repair::RepairCommand),
    /// Remove data no snapshot needs.
    Prune(PruneArgs),
    /// Manage the passwords (key objects) that open the repository.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Copy snapshots from another repository (--from-repo) into this one.
    Copy(Box<super::copy::CopyArgs>),
    /// Serve the snapshots as a read-only file system (FUSE) until interrupted or unmounted.
    Mount(super::mount::MountArgs),
    /// Restore a snapshot (or a sample of its files) into scratch space, hold it to the
    /// snapshot, load its database dumps into throwaway servers, and measure the recovery time.
    Drill(super::drill::DrillArgs),
    /// Run one phase of a plan's hooks alone (pre or post), as around the creation of CSI
    /// snapshots.
    Hooks(super::hooks::HooksArgs),
}

#[derive(Debug, Args)]
pub struct BackupArgs {
    /// Files and folders to back up.
    pub paths: Vec<PathBuf>,
    /// Back up standard input as one file.
    #[arg(long)]
    pub stdin: bool,
    /// Where standard input appears in the snapshot, e.g. databases/main/dump.sql.
    #[arg(long, default_value = "stdin", requires = "stdin")]
    pub stdin_name: String,
    /// Host name recorded in the snapshot (the operator uses NAMESPACE/PLAN).
    #[arg(long)]
    pub host: Option<String>,
    /// Tags recorded in the snapshot (repeatable).
    #[arg(long = "tag")]
    pub tags: Vec<String>,
    /// The time the snapshot records instead of now: RFC 3339 (2026-11-30T02:00:00+01:00) or
    /// "2026-11-30 02:00:00" in local time.
    #[arg(long, value_name = "TIME", value_parser = parse_snapshot_time)]
    pub time: Option<chrono::DateTime<chrono::FixedOffset>>,
    #[command(flatten)]
    pub excludes: super::patterns::ExcludeArgs,
    #[command(flatten)]
    pub selection: super::patterns::SelectionArgs,
    #[command(flatten)]
    pub files_from: super::files_from::FilesFromArgs,
    /// Compare with this snapshot instead of the latest of the same host and paths.
    #[arg(long, conflicts_with = "force")]
    pub parent: Option<String>,
    /// Read every file, even unchanged ones.
    #[arg(long)]
    pub force: bool,
    /// Upload at most this many bytes per second (suffixes K, M, G: powers of 1024).
    #[arg(long, value_parser = parse_byte_rate)]
    pub limit_upload: Option<u64>,
    /// Memory for finished packs waiting for or in upload (suffixes K, M, G); each 8 MiB lets one
    /// more pack upload at once, which helps on a link with long round trips [default: 16M].
    #[arg(long, value_name = "SIZE", value_parser = parse_memory_size)]
    pub upload_memory: Option<u64>,
    /// Before locking, remove every lock written on this host name: for a caller (the operator)
    /// that knows no process of that host still uses the repository.
    #[arg(long, value_name = "HOSTNAME")]
    pub remove_locks_of_host: Option<String>,
    /// Dump a database into /databases/NAME/ of the snapshot (repeatable): URI is
    /// postgresql://USER@HOST[:PORT][/DBNAME], mariadb://… or mysql://… (no DBNAME: all of them);
    /// the password comes from NEVERWIPED_DB_PASSWORD_<NAME> or --database-password-file.
    #[arg(long = "database", value_name = "NAME=URI")]
    pub databases: Vec<String>,
    /// File holding the password of database NAME (repeatable).
    #[arg(long = "database-password-file", value_name = "NAME=PATH")]
    pub database_password_files: Vec<String>,
    /// What the claim of the volume at PATH was (repeatable; the operator gives one per
    /// volume): JSON {"path": PATH, "name", "requestedSize", "storageClassName", "accessModes",
    /// "volumeMode", "labels", "annotations"}, recorded in the snapshot so a restore can recreate
    /// the claim. PATH must be one of the paths backed up.
    #[arg(long = "claim", value_name = "JSON")]
    pub claims: Vec<String>,
    /// Create the repository first when there is none at --repo (with the password given).
    #[arg(long)]
    pub init: bool,
    /// Read and chunk what would be backed up and print what it would add to the repository;
    /// store nothing (no pack, index, snapshot or lock) and apply no --keep-* rule.
    #[arg(long, short = 'n', conflicts_with_all = ["init", "remove_locks_of_host"])]
    pub dry_run: bool,
    /// Store the snapshot even when it holds no file or a stream gave no byte (without this, such
    /// a backup fails: an empty input is most often a producer that failed).
    #[arg(long)]
    pub allow_empty: bool,
    /// After the snapshot is written, forget the snapshots of its host that these rules do not
    /// keep (as `forget --host`); none given: keep every snapshot.
    #[command(flatten)]
    pub keep: KeepArgs,
    #[command(flatten)]
    pub exchange: super::streams::BackupStreamFlags,
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// Snapshot id prefix, or "latest".
    pub snapshot: String,
    /// Folder to restore into; /data/x of the snapshot lands in TARGET/data/x. With --database
    /// too, files and databases come from the same snapshot, restored at the same time.
    #[arg(long, short = 't', required_unless_present_any = ["databases", "streams"])]
    pub target: Option<PathBuf>,
    #[command(flatten)]
    pub patterns: super::patterns::RestorePatternArgs,
    /// Restore the dump of database NAME into the server of URI instead of writing files
    /// (repeatable); the password as for backup.
    #[arg(long = "database", value_name = "NAME=URI")]
    pub databases: Vec<String>,
    /// File holding the password of database NAME (repeatable).
    #[arg(long = "database-password-file", value_name = "NAME=PATH")]
    pub database_password_files: Vec<String>,
    /// Restore into servers that already hold databases: drop them first (all of the server's
    /// for a dump of every database, the one restored into for a dump of one).
    #[arg(long, requires = "databases")]
    pub overwrite_databases: bool,
    /// As --overwrite-databases, for database entry NAME only (repeatable).
    #[arg(long, value_name = "NAME", requires = "databases")]
    pub overwrite_database: Vec<String>,
    /// With `latest`: the newest snapshot of this host.
    #[arg(long)]
    pub host: Option<String>,
    /// With `latest`: the newest snapshot taken before this time (RFC 3339).
    #[arg(long, value_parser = super::durations::parse_time)]
    pub before: Option<chrono::DateTime<chrono::Utc>>,
    /// What to do where the target already holds an entry that is not a folder: always (replace
    /// it), if-changed (replace it unless it is a file with the snapshot's content: same size and
    /// time, or same bytes), if-newer (replace it when the snapshot's is newer) or never. A
    /// folder of the snapshot replaces any non-folder in its way.
    #[arg(long, value_name = "WHEN", default_value = "if-changed", value_parser = parse_overwrite)]
    pub overwrite: neverwiped::restore::Overwrite,
    /// Remove what the snapshot does not hold from the folders restored (only those the restore
    /// gives back whole, so never outside the --include paths); a folder that is not empty may
    /// then be replaced by a file.
    #[arg(long)]
    pub delete: bool,
    /// Memory for fetched pack data (suffixes K, M, G), read in ranges of up to a quarter of it
    /// (at most 8 MiB); more keeps more fetches in flight from a distant gate [default: 32M].
    #[arg(long, value_name = "SIZE", value_parser = parse_memory_size)]
    pub fetch_memory: Option<u64>,
    /// After the restore, read every regular file restored back and hold its content (blob by
    /// blob) and metadata to the snapshot, as restic's --verify; files kept or left in the target
    /// count too. Any difference fails the run (exit 14), naming the files.
    #[arg(long, requires = "target")]
    pub verify: bool,
    /// Restore nothing: hold what --target holds to the snapshot as --verify does after a
    /// restore (the files --include/--exclude select).
    #[arg(long, requires = "target", conflicts_with_all = ["verify", "databases", "delete"])]
    pub verify_only: bool,
    #[command(flatten)]
    pub streams: super::streams::RestoreStreamFlags,
}

impl RestoreArgs {
    /// Which snapshot the restore means.
    pub fn selection(&self) -> super::select::Selection<'_> {
        super::select::Selection {
            snapshot: &self.snapshot,
            host: self.host.as_deref(),
            before: self.before,
        }
    }
}

fn parse_overwrite(text: &str) -> Result<neverwiped::restore::Overwrite, String> {
    text.parse()
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Read back and authenticate every byte of every pack.
    #[arg(long, conflicts_with = "read_data_subset")]
    pub read_data: bool,
    /// Read back some of the packs: n/t reads group n of t (the packs whose id's first byte
    /// modulo t is n-1, so runs 1/t … t/t read each pack once), P% a share chosen at random each
    /// run, SIZE (500M, 2G) random packs up to that many bytes.
    #[arg(long, value_name = "n/t|P%|SIZE", value_parser = super::subset::parse_read_data_subset)]
    pub read_data_subset: Option<neverwiped::maintenance::check::ReadData>,
    /// Before locking, remove every lock written on this host name (see backup).
    #[arg(long, value_name = "HOSTNAME")]
    pub remove_locks_of_host: Option<String>,
}

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Show the plan, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Before locking, remove every lock written on this host name (see backup).
    #[arg(long, value_name = "HOSTNAME")]
    pub remove_locks_of_host: Option<String>,
    /// List the snapshots of this host in the result (`--result-file`, `--json`); the
    /// --keep-* rules apply to its snapshots only.
    #[arg(long)]
    pub host: Option<String>,
    /// Before pruning, under the same exclusive lock, forget the snapshots (of --host, when
    /// given) that these rules do not keep, as `forget` would; none given: forget nothing.
    #[command(flatten)]
    pub keep: KeepArgs,
}

#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// List the key objects.
    List,
    /// Add a password (read from a file).
    Add(NewPasswordArgs),
    /// Remove a key object by id prefix (not the one in use).
    Remove {
        /// Id prefix of the key object to remove, as `key list` shows it.
        id: String,
    },
    /// Change the password: add the new one, remove the one in use.
    Passwd(NewPasswordArgs),
}

#[derive(Debug, Args)]
pub struct NewPasswordArgs {
    /// File holding the new password.
    #[arg(long, env = env::NEW_PASSWORD_FILE)]
    pub new_password_file: PathBuf,
}

/// What can be read of a command line that does not parse, for the result file of a usage
/// error: clap reads it again, ignoring the mistakes.
pub struct PartialCommandLine {
    pub command_name: Option<String>,
    pub operation: Option<Operation>,
    pub result_file: Option<PathBuf>,
    pub log_format: Option<LogFormat>,
}

impl PartialCommandLine {
    pub fn read() -> PartialCommandLine {
        use clap::CommandFactory;
        let matches = Cli::command().ignore_errors(true).try_get_matches();
        let Ok(matches) = matches else {
            return PartialCommandLine {
                command_name: None,
                operation: None,
                result_file: None,
                log_format: None,
            };
        };
        // Global arguments may follow the command: clap keeps them on the command's matches.
        let command = matches.subcommand();
        let find_path = |name: &str| {
            command
                .and_then(|(_, sub)| sub.try_get_one::<PathBuf>(name).ok().flatten().cloned())
                .or_else(|| matches.try_get_one::<PathBuf>(name).ok().flatten().cloned())
        };
        let log_format = command
            .and_then(|(_, sub)| {
                sub.try_get_one::<LogFormat>("log_format")
                    .ok()
                    .flatten()
                    .copied()
            })
            .or_else(|| {
                matches
                    .try_get_one::<LogFormat>("log_format")
                    .ok()
                    .flatten()
                    .copied()
            });
        PartialCommandLine {
            command_name: command.map(|(name, _)| name.to_owned()),
            operation: command.and_then(|(name, _)| operation_named(name)),
            result_file: find_path("result_file"),
            log_format,
        }
    }
}

/// A usage error as clap words it, but with the command's plain usage line: clap's own lists
/// the options the environment set (`--repo` from `NEVERWIPED_REPOSITORY`), as if they were
/// missing.
pub fn usage_error_text(error: &clap::Error, command_name: Option<&str>) -> String {
    use clap::CommandFactory;
    let mut command = Cli::command();
    let usage = match command_name.and_then(|name| command.find_subcommand_mut(name)) {
        Some(sub) => {
            let name = sub.get_name().to_owned();
            let mut sub = sub.clone().bin_name(format!("neverwiped-sidecar {name}"));
            sub.render_usage().to_string()
        }
        None => command.render_usage().to_string(),
    };
    let mut text = String::new();
    for line in error.render().to_string().lines() {
        if line.starts_with("Usage:") {
            text.push_str(usage.trim_end());
        } else {
            text.push_str(line);
        }
        text.push('\n');
    }
    text
}

/// A multi-line message on one line, without clap's prefix and hints.
pub fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|line| {
            !line.is_empty()
                && !line.starts_with("Usage:")
                && !line.starts_with("For more information")
        })
        .map(|line| line.trim_start_matches("error: "))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Each command's name and the operation its result reports: the one table of both.
const OPERATIONS: [(&str, Operation); 22] = [
    ("init", Operation::Init),
    ("backup", Operation::Backup),
    ("snapshots", Operation::Snapshots),
    ("ls", Operation::Ls),
    ("find", Operation::Find),
    ("diff", Operation::Diff),
    ("stats", Operation::Stats),
    ("dump", Operation::Dump),
    ("cat", Operation::Cat),
    ("restore", Operation::Restore),
    ("unlock", Operation::Unlock),
    ("check", Operation::Check),
    ("forget", Operation::Forget),
    ("tag", Operation::Tag),
    ("prune", Operation::Prune),
    ("repair", Operation::Repair),
    ("key", Operation::Key),
    ("mount", Operation::Mount),
    ("copy", Operation::Copy),
    ("describe", Operation::Describe),
    ("drill", Operation::Drill),
    ("hooks", Operation::Hooks),
];

/// The operation of the subcommand called `name` on the command line.
pub fn operation_named(name: &str) -> Option<Operation> {
    OPERATIONS
        .iter()
        .find(|(command, _)| *command == name)
        .map(|(_, operation)| *operation)
}

/// Parses the command line: the arguments, and the operation its command reports.
pub fn parse() -> Result<(Cli, Operation), clap::Error> {
    parse_from(std::env::args_os())
}

/// As [`parse`], from `args` (the binary's name first).
pub fn parse_from<I, T>(args: I) -> Result<(Cli, Operation), clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::{CommandFactory, FromArgMatches};
    let mut command = Cli::command();
    let mut matches = command.try_get_matches_from_mut(args)?;
    let name = matches.subcommand_name().unwrap_or_default().to_owned();
    let operation = operation_named(&name).ok_or_else(|| {
        command.error(
            clap::error::ErrorKind::InvalidSubcommand,
            format!("the command {name:?} has no operation to report"),
        )
    })?;
    let cli = Cli::from_arg_matches_mut(&mut matches).map_err(|e| e.format(&mut command))?;
    Ok((cli, operation))
}

fn parse_snapshot_time(text: &str) -> Result<chrono::DateTime<chrono::FixedOffset>, String> {
    use chrono::TimeZone;
    if let Ok(time) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(time);
    }
    chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S")
        .ok()
        .and_then(|local| chrono::Local.from_local_datetime(&local).single())
        .map(|time| time.fixed_offset())
        .ok_or_else(|| {
            format!(
                "{text:?} is not a time such as 2026-11-30T02:00:00Z or \"2026-11-30 02:00:00\""
            )
        })
}

#[derive(Debug, Args)]
pub struct UnlockArgs {
    /// Remove every lock, not only stale ones (only when no other process uses the repository).
    #[arg(long)]
    pub remove_all: bool,
}

/// Parses `1048576`, `512K`, `10M`, `1G`.
pub fn parse_byte_rate(text: &str) -> Result<u64, String> {
    match parse_bytes(text) {
        Some(0) => Err("the upload limit must be above zero".into()),
        Some(rate) => Ok(rate),
        None => Err(format!(
            "{text:?} is not a byte rate such as 1048576, 512K or 10M"
        )),
    }
}

/// A memory budget: at least 1 MiB, at most 4 GiB.
fn parse_memory_size(text: &str) -> Result<u64, String> {
    const MIB: u64 = 1024 * 1024;
    match parse_bytes(text) {
        Some(bytes) if (MIB..=4096 * MIB).contains(&bytes) => Ok(bytes),
        Some(_) => Err(format!("{text:?} is out of range: give 1M to 4G")),
        None => Err(format!("{text:?} is not a size such as 16M or 1G")),
    }
}

/// Bytes, with an optional suffix K, M or G (powers of 1024).
fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let (number, factor) = match text.char_indices().last() {
        Some((i, 'k' | 'K')) => (&text[..i], 1024),
        Some((i, 'm' | 'M')) => (&text[..i], 1024 * 1024),
        Some((i, 'g' | 'G')) => (&text[..i], 1024 * 1024 * 1024),
        _ => (text, 1),
    };
    number.parse::<u64>().ok()?.checked_mul(factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_rates_accept_binary_suffixes() {
        assert_eq!(parse_byte_rate("1000"), Ok(1000));
        assert_eq!(parse_byte_rate("512K"), Ok(512 * 1024));
        assert_eq!(parse_byte_rate("10m"), Ok(10 * 1024 * 1024));
        assert!(parse_byte_rate("fast").is_err());
        assert!(parse_byte_rate("0").is_err());
        assert_eq!(parse_memory_size("64M"), Ok(64 * 1024 * 1024));
        assert_eq!(parse_memory_size("1g"), Ok(1024 * 1024 * 1024));
        assert!(parse_memory_size("512K").unwrap_err().contains("1M to 4G"));
        assert!(parse_memory_size("99999999999G").is_err());
        assert!(parse_memory_size("lots")
            .unwrap_err()
            .contains("not a size"));
    }

    #[test]
    fn every_command_names_its_own_operation() {
        use clap::CommandFactory;
        let examples: [(&[&str], Operation); 20] = [
            (&["hooks", "--phase", "post"], Operation::Hooks),
            (
                &["drill", "latest", "--scratch", "/scratch", "--databases"],
                Operation::Drill,
            ),
            (
                &["describe", "latest", "--host", "shop/nightly"],
                Operation::Describe,
            ),
            (&["repair", "index"], Operation::Repair),
            (&["cat", "config"], Operation::Cat),
            (&["tag", "--add", "a"], Operation::Tag),
            (&["dump", "latest", "/a"], Operation::Dump),
            (&["stats"], Operation::Stats),
            (&["diff", "a1", "b2"], Operation::Diff),
            (&["find", "*.txt"], Operation::Find),
            (&["init"], Operation::Init),
            (&["backup", "/x"], Operation::Backup),
            (&["snapshots"], Operation::Snapshots),
            (&["ls", "latest"], Operation::Ls),
            (&["restore", "latest", "--target", "/t"], Operation::Restore),
            (&["unlock"], Operation::Unlock),
            (&["check"], Operation::Check),
            (&["forget", "--keep-last", "1"], Operation::Forget),
            (&["prune"], Operation::Prune),
            (&["key", "list"], Operation::Key),
        ];
        for (args, operation) in examples {
            let (_, parsed) =
                parse_from(std::iter::once("neverwiped-sidecar").chain(args.iter().copied()))
                    .unwrap_or_else(|e| panic!("{args:?}: {e}"));
            assert_eq!(parsed, operation, "{args:?}");
            assert_eq!(operation_named(args[0]), Some(operation), "{args:?}");
        }
        // Every subcommand has an operation: a new one without fails here.
        for sub in Cli::command().get_subcommands() {
            assert!(
                operation_named(sub.get_name()).is_some(),
                "{}",
                sub.get_name()
            );
        }
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
