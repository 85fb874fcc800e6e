//! The sidecar's command line and environment, as the operator calls it.
//!
//! The operator builds a Job's `args` with [`BackupArgs::to_args`] / [`RestoreArgs::to_args`], and
//! passes secrets only through the environment variables and files named in [`env`]; the sidecar
//! parses the same flags. Keeping the shape here makes a renamed flag a compile error on one side
//! and a failing test on the other, instead of a Job that dies at 02:00.
//!
//! Nothing in these arguments is secret: passwords travel as files, usernames from Secrets as
//! environment variables that Kubernetes expands into the arguments (`$(VAR)`).

use crate::location::RepositoryLocation;

/// The sidecar binary's name, as the Job's `command`.
pub const SIDECAR_BINARY: &str = "neverwiped-sidecar";
/// Where the sidecar image installs the binary: the Job's `command`, by absolute path, so that
/// nothing mounted over a directory of `PATH` can stand in for it.
pub const SIDECAR_PATH: &str = "/usr/local/bin/neverwiped-sidecar";

/// Environment variables the sidecar reads. None of their values is ever put in an argument.
/// The sidecar's retry budget when none is given: a gate that is away for minutes does not fail a
/// run.
pub const DEFAULT_RETRY_BUDGET_SECS: u64 = 15 * 60;

/// Seconds between a restore's progress lines when none is given: the first comes after two.
pub const DEFAULT_PROGRESS_INTERVAL_SECS: u64 = 10;

pub mod env {
    /// Path of a file holding the repository password.
    pub const PASSWORD_FILE: &str = "NEVERWIPED_PASSWORD_FILE";
    /// User name for the gate's HTTP basic authentication.
    pub const GATE_USERNAME: &str = "NEVERWIPED_GATE_USERNAME";
    /// Path of a file holding the password for the gate's HTTP basic authentication.
    pub const GATE_PASSWORD_FILE: &str = "NEVERWIPED_GATE_PASSWORD_FILE";
    /// Path of a PEM file with the CA certificate(s) that sign the gate's TLS certificate.
    pub const GATE_CA_FILE: &str = "NEVERWIPED_GATE_CA_FILE";
    /// Prefix of the variable that holds a database's password (`NEVERWIPED_DB_PASSWORD_<NAME>`).
    pub const DB_PASSWORD_PREFIX: &str = "NEVERWIPED_DB_PASSWORD_";
    /// Prefix of the variable, set by the operator from a Secret, that holds a database's user
    /// name (`NEVERWIPED_DB_USERNAME_<NAME>`). The sidecar does not read it: Kubernetes expands
    /// `$(NEVERWIPED_DB_USERNAME_<NAME>)` in the `--database` URI before the process starts.
    pub const DB_USERNAME_PREFIX: &str = "NEVERWIPED_DB_USERNAME_";
    /// The repository (`--repo`): a folder or `rest:http(s)://…`.
    pub const REPOSITORY: &str = "NEVERWIPED_REPOSITORY";
    /// The repository password itself (`PASSWORD_FILE` is preferred).
    pub const PASSWORD: &str = "NEVERWIPED_PASSWORD";
    /// The gate's basic-authentication password itself (`GATE_PASSWORD_FILE` is preferred).
    pub const GATE_PASSWORD: &str = "NEVERWIPED_GATE_PASSWORD";
    /// The key tried first when opening the repository (`--key-hint`).
    pub const KEY_HINT: &str = "NEVERWIPED_KEY_HINT";
    /// `--retry-budget`: how long failed requests to the gate are retried (by default
    /// [`super::DEFAULT_RETRY_BUDGET_SECS`]).
    pub const RETRY_BUDGET: &str = "NEVERWIPED_RETRY_BUDGET";
    /// `--retry-delay-ms`: the first pause between retries.
    pub const RETRY_DELAY_MS: &str = "NEVERWIPED_RETRY_DELAY_MS";
    /// `--log-format`: `text` or `json`.
    pub const LOG_FORMAT: &str = "NEVERWIPED_LOG_FORMAT";
    /// The log filter (`info`, `debug`, `neverwiped=trace`, …).
    pub const LOG: &str = "NEVERWIPED_LOG";
    /// Seconds between the progress lines a restore logs when standard error is not a terminal
    /// (by default [`super::DEFAULT_PROGRESS_INTERVAL_SECS`]).
    pub const PROGRESS_INTERVAL: &str = "NEVERWIPED_PROGRESS_INTERVAL";
    /// `key add|passwd --new-password-file`: the file with the new password.
    pub const NEW_PASSWORD_FILE: &str = "NEVERWIPED_NEW_PASSWORD_FILE";
    /// `copy --from-repo`: the repository copied from.
    pub const FROM_REPOSITORY: &str = "NEVERWIPED_FROM_REPOSITORY";
    /// `copy --from-password-file`: the file with the password of the repository copied from.
    pub const FROM_PASSWORD_FILE: &str = "NEVERWIPED_FROM_PASSWORD_FILE";
    /// The password of the repository copied from itself (`FROM_PASSWORD_FILE` is preferred).
    pub const FROM_PASSWORD: &str = "NEVERWIPED_FROM_PASSWORD";
    /// The user name for the gate of the repository copied from.
    pub const FROM_GATE_USERNAME: &str = "NEVERWIPED_FROM_GATE_USERNAME";
    /// The file with the password for the gate of the repository copied from.
    pub const FROM_GATE_PASSWORD_FILE: &str = "NEVERWIPED_FROM_GATE_PASSWORD_FILE";
    /// That gate password itself (`FROM_GATE_PASSWORD_FILE` is preferred).
    pub const FROM_GATE_PASSWORD: &str = "NEVERWIPED_FROM_GATE_PASSWORD";
    /// `copy --from-cacert`: PEM CA certificate(s) of the gate of the repository copied from.
    pub const FROM_GATE_CA_FILE: &str = "NEVERWIPED_FROM_GATE_CA_FILE";
    /// The prefix every variable of the sidecar's starts with.
    pub const PREFIX: &str = "NEVERWIPED_";
}

/// Appends `--key-hint ID` when there is a hint: the key object that opened the repository last
/// time, tried first (see [`crate::RunResult::key_id`]). Without one the arguments are unchanged.
pub fn push_key_hint(args: &mut Vec<String>, key_id: Option<&str>) {
    if let Some(key_id) = key_id {
        args.push("--key-hint".into());
        args.push(key_id.to_owned());
    }
}

/// One `--database NAME=URI` of a backup or restore, with its password file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseArg {
    /// The entry's name: the dump is stored under `/databases/NAME/` in the snapshot.
    pub name: String,
    /// `postgresql://USER@HOST[:PORT][/DBNAME]`, `mariadb://…` or `mysql://…`; never a password.
    pub uri: String,
    /// Passed as `--database-password-file NAME=PATH`.
    pub password_file: Option<String>,
}

impl DatabaseArg {
    fn push_args(&self, args: &mut Vec<String>) {
        args.push("--database".into());
        args.push(format!("{}={}", self.name, self.uri));
        if let Some(path) = &self.password_file {
            args.push("--database-password-file".into());
            args.push(format!("{}={path}", self.name));
        }
    }
}

/// The selection options of `backup` that act only inside one of its paths (a volume's folder):
/// `--exclude-caches-in PATH`, `--exclude-if-present-in PATH=FILE[:HEADER]` and
/// `--exclude-larger-than-in PATH=SIZE`, restic's `--exclude-caches`, `--exclude-if-present` and
/// `--exclude-larger-than` with a scope. What they leave out of PATH is what the unscoped option
/// leaves out of a backup of PATH alone; nothing outside PATH is touched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScopedSelection {
    /// Leave out the contents of folders tagged as caches (`CACHEDIR.TAG`).
    pub exclude_caches: bool,
    /// `FILE[:HEADER]`: leave out the contents of folders holding FILE (starting with HEADER).
    pub exclude_if_present: Vec<String>,
    /// A size in restic's syntax ([`parse_size`]): leave out files larger than it.
    pub exclude_larger_than: Option<String>,
}

impl ScopedSelection {
    /// Whether no option is set: nothing is passed.
    pub fn is_empty(&self) -> bool {
        !self.exclude_caches
            && self.exclude_if_present.is_empty()
            && self.exclude_larger_than.is_none()
    }

    /// Adds `other`'s options (a volume selected by two entries of a plan): the caches are left
    /// out if either says so, every tag file counts, and the smaller size limit wins.
    pub fn merge(&mut self, other: &ScopedSelection) {
        self.exclude_caches |= other.exclude_caches;
        for tag in &other.exclude_if_present {
            if !self.exclude_if_present.contains(tag) {
                self.exclude_if_present.push(tag.clone());
            }
        }
        let bytes = |size: &Option<String>| size.as_deref().and_then(|s| parse_size(s).ok());
        let smaller = match (
            bytes(&self.exclude_larger_than),
            bytes(&other.exclude_larger_than),
        ) {
            (Some(mine), Some(theirs)) => theirs < mine,
            // A size that does not parse is kept, for the operator to refuse.
            _ => self.exclude_larger_than.is_none(),
        };
        if smaller {
            self.exclude_larger_than = other.exclude_larger_than.clone();
        }
    }

    fn push_args(&self, path: &str, args: &mut Vec<String>) {
        if self.exclude_caches {
            args.push("--exclude-caches-in".into());
            args.push(path.to_owned());
        }
        for tag in &self.exclude_if_present {
            args.push("--exclude-if-present-in".into());
            args.push(format!("{path}={tag}"));
        }
        if let Some(size) = &self.exclude_larger_than {
            args.push("--exclude-larger-than-in".into());
            args.push(format!("{path}={size}"));
        }
    }
}

/// A size as restic writes it: digits, then optionally `b`, `k`, `m`, `g` or `t` (any case,
/// powers of 1024), e.g. `500k` or `2G`; at most `i64::MAX` bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let (digits, unit) = match text.chars().last().map(|c| c.to_ascii_lowercase()) {
        Some('b') => (&text[..text.len() - 1], 1u64),
        Some('k') => (&text[..text.len() - 1], 1 << 10),
        Some('m') => (&text[..text.len() - 1], 1 << 20),
        Some('g') => (&text[..text.len() - 1], 1 << 30),
        Some('t') => (&text[..text.len() - 1], 1 << 40),
        Some(_) => (text, 1),
        None => return Err("expected a size, got an empty string".into()),
    };
    // A leading `+` is taken, as restic's parser takes it.
    let unsigned = digits.strip_prefix('+').unwrap_or(digits);
    if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{text:?} is not a size: digits, then optionally b, k, m, g or t (e.g. 500k, 2G)"
        ));
    }
    unsigned
        .parse::<u64>()
        .ok()
        .and_then(|value| value.checked_mul(unit))
        .filter(|bytes| *bytes <= i64::MAX as u64)
        .ok_or_else(|| format!("{text:?} is too large (at most 8E, 2^63-1 bytes)"))
}

/// Retention rules: `--keep-last N`, `--keep-hourly N`, … of `backup` and `forget`. A snapshot is
/// kept when any rule keeps it; no rule at all keeps everything (`backup` then forgets nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeepRules {
    pub last: Option<u32>,
    pub hourly: Option<u32>,
    pub daily: Option<u32>,
    pub weekly: Option<u32>,
    pub monthly: Option<u32>,
    pub yearly: Option<u32>,
}

impl KeepRules {
    /// Whether no rule is set.
    pub fn is_empty(&self) -> bool {
        self.flags().all(|(_, count)| count.is_none())
    }

    /// Each rule's flag and count.
    pub fn flags(&self) -> impl Iterator<Item = (&'static str, Option<u32>)> {
        [
            ("--keep-last", self.last),
            ("--keep-hourly", self.hourly),
            ("--keep-daily", self.daily),
            ("--keep-weekly", self.weekly),
            ("--keep-monthly", self.monthly),
            ("--keep-yearly", self.yearly),
        ]
        .into_iter()
    }

    fn push_args(&self, args: &mut Vec<String>) {
        for (flag, count) in self.flags() {
            if let Some(count) = count {
                args.push(flag.into());
                args.push(count.to_string());
            }
        }
    }
}

/// `neverwiped-sidecar backup PATH... --repo REPO --result-file PATH [--host NAME] [--tag K=V]...
/// [--exclude PATTERN]... [--exclude-caches-in PATH]... [--exclude-if-present-in PATH=FILE[:HEADER]]...
/// [--exclude-larger-than-in PATH=SIZE]... [--limit-upload BYTES_PER_SEC] [--remove-locks-of-host HOSTNAME]
/// [--database NAME=URI]... [--database-password-file NAME=PATH]... [--keep-last N]...
/// [--retry-lock DURATION]`
///
/// The `--keep-*` rules are applied to the snapshots of the backup's host after the snapshot is
/// written (as `forget --host HOST`); a failure to apply them is a warning, never a lost snapshot.
///
/// `--remove-locks-of-host HOSTNAME`: before taking its own lock, the sidecar removes every lock
/// object whose `hostname` is HOSTNAME, whatever its age, pid or kind (shared or exclusive). The
/// caller promises that no process running under that host name still uses the repository: the
/// operator gives every pod of one BackupPlan the same host name, and passes the flag only when no
/// other pod of that plan is alive, so the locks of a killed run never block the next one.
#[derive(Debug, Clone, PartialEq)]
pub struct BackupArgs {
    pub paths: Vec<String>,
    /// `--repo`, as [`RepositoryLocation::to_arg`] writes it.
    pub repository: RepositoryLocation,
    pub result_file: String,
    pub host: Option<String>,
    /// `(key, value)` pairs, each passed as `--tag key=value`.
    pub tags: Vec<(String, String)>,
    pub excludes: Vec<String>,
    /// Selection options scoped to one of `paths` each (`--exclude-caches-in PATH`, ...).
    pub scoped: Vec<(String, ScopedSelection)>,
    pub upload_limit_bytes_per_sec: Option<u64>,
    /// `--remove-locks-of-host`: the host name whose locks are all left by processes that are gone.
    pub remove_locks_of_host: Option<String>,
    pub databases: Vec<DatabaseArg>,
    /// Retention applied to the host's snapshots after the backup.
    pub keep: KeepRules,
    /// `--retry-lock DURATION` (e.g. `30m`): wait that long for another process's lock.
    pub retry_lock: Option<String>,
    /// `--init`: create the repository when there is none yet (a plan's first backup).
    pub init: bool,
    /// `--protect-within DURATION` (e.g. `14d`): the `--keep-*` rules never remove a snapshot
    /// younger than this. The admin's protection window, never the plan's.
    pub protect_within: Option<String>,
    /// `--claim JSON`: what each volume's claim was, recorded in the snapshot.
    pub claims: Vec<crate::record::RecordedClaim>,
    /// `--stream NAME=SLOT`: the output of a stream container, stored as `/streams/NAME`.
    pub streams: Vec<crate::streams::StreamArg>,
    /// `--hook PHASE:NAME=SLOT`: hooks run before the data is read and after (always).
    pub hooks: Vec<crate::streams::HookArg>,
}

impl BackupArgs {
    /// The arguments after the binary's name, starting with the subcommand.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = vec!["backup".to_owned()];
        args.extend(self.paths.iter().cloned());
        push_repository_args(&mut args, &self.repository, &self.result_file);
        if let Some(host) = &self.host {
            args.push("--host".into());
            args.push(host.clone());
        }
        for (key, value) in &self.tags {
            args.push("--tag".into());
            args.push(format!("{key}={value}"));
        }
        for pattern in &self.excludes {
            args.push("--exclude".into());
            args.push(pattern.clone());
        }
        for (path, selection) in &self.scoped {
            selection.push_args(path, &mut args);
        }
        if let Some(limit) = self.upload_limit_bytes_per_sec {
            args.push("--limit-upload".into());
            args.push(limit.to_string());
        }
        if let Some(hostname) = &self.remove_locks_of_host {
            args.push("--remove-locks-of-host".into());
            args.push(hostname.clone());
        }
        for database in &self.databases {
            database.push_args(&mut args);
        }
        self.keep.push_args(&mut args);
        push_retry_lock(&mut args, self.retry_lock.as_deref());
        if self.init {
            args.push("--init".into());
        }
        push_protect_within(&mut args, self.protect_within.as_deref());
        for claim in &self.claims {
            args.push("--claim".into());
            args.push(claim.to_arg());
        }
        for stream in &self.streams {
            stream.push_args(&mut args);
        }
        for hook in &self.hooks {
            hook.push_args(&mut args);
        }
        args
    }
}

/// `neverwiped-sidecar prune --repo REPO --result-file PATH [--remove-locks-of-host HOSTNAME]
/// [--host NAME] [--keep-last N]... [--protect-within DURATION]`: forgets the host's snapshots
/// that no `--keep-*` rule keeps (none given: forgets nothing), then removes the data no snapshot
/// uses, under an exclusive lock. With `--protect-within`, no snapshot younger than the window is
/// forgotten and no pack such a snapshot needs is deleted, whatever the rules or the index say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PruneArgs {
    /// As for [`BackupArgs::repository`].
    pub repository: RepositoryLocation,
    pub result_file: String,
    /// As for [`BackupArgs::remove_locks_of_host`].
    pub remove_locks_of_host: Option<String>,
    /// As for [`BackupArgs::retry_lock`].
    pub retry_lock: Option<String>,
    /// `--host NAME`: the result lists the snapshots of this host that remain (the plan's
    /// `NAMESPACE/PLAN`, as for [`BackupArgs::host`]); the `--keep-*` rules apply to its
    /// snapshots.
    pub host: Option<String>,
    /// Retention applied to the host's snapshots before the prune (the maintenance Job's forget).
    pub keep: KeepRules,
    /// As for [`BackupArgs::protect_within`].
    pub protect_within: Option<String>,
}

impl PruneArgs {
    /// The arguments after the binary's name, starting with the subcommand.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = vec!["prune".to_owned()];
        push_repository_args(&mut args, &self.repository, &self.result_file);
        if let Some(hostname) = &self.remove_locks_of_host {
            args.push("--remove-locks-of-host".into());
            args.push(hostname.clone());
        }
        push_retry_lock(&mut args, self.retry_lock.as_deref());
        if let Some(host) = &self.host {
            args.push("--host".into());
            args.push(host.clone());
        }
        self.keep.push_args(&mut args);
        push_protect_within(&mut args, self.protect_within.as_deref());
        args
    }
}

/// `neverwiped-sidecar check --repo REPO --result-file PATH [--read-data-subset N%]
/// [--remove-locks-of-host HOSTNAME]`: checks the repository's structure and reads back a share of
/// its packs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckArgs {
    /// As for [`BackupArgs::repository`].
    pub repository: RepositoryLocation,
    pub result_file: String,
    /// Percent of the packs to read back (1–100); none: structure only.
    pub read_data_percent: Option<u32>,
    /// As for [`BackupArgs::remove_locks_of_host`].
    pub remove_locks_of_host: Option<String>,
    /// As for [`BackupArgs::retry_lock`].
    pub retry_lock: Option<String>,
}

impl CheckArgs {
    /// The arguments after the binary's name, starting with the subcommand.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = vec!["check".to_owned()];
        push_repository_args(&mut args, &self.repository, &self.result_file);
        if let Some(percent) = self.read_data_percent {
            args.push("--read-data-subset".into());
            args.push(format!("{percent}%"));
        }
        if let Some(hostname) = &self.remove_locks_of_host {
            args.push("--remove-locks-of-host".into());
            args.push(hostname.clone());
        }
        push_retry_lock(&mut args, self.retry_lock.as_deref());
        args
    }
}

/// `neverwiped-sidecar copy --repo DESTINATION --result-file PATH --from-repo SOURCE --host NAME
/// [--init] [--after-newest-copy] [--retry-lock DURATION]`: stores the host's snapshots of SOURCE that DESTINATION
/// lacks (one already there is skipped). The passwords and logins of both come from the
/// environment ([`env::FROM_PASSWORD_FILE`] and the others of `env`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyArgs {
    /// The destination, written under a backup's lock.
    pub repository: RepositoryLocation,
    pub result_file: String,
    /// The repository copied from, read under a shared lock.
    pub from_repository: RepositoryLocation,
    /// Only this host's snapshots (a plan's `NAMESPACE/PLAN`).
    pub host: String,
    /// `--init`: create the destination when there is none.
    pub init: bool,
    /// `--after-newest-copy`: only the snapshots taken at or after the newest the destination
    /// holds of the host (a destination with retention: what it forgot is not sent again).
    pub after_newest_copy: bool,
    /// As for [`BackupArgs::retry_lock`].
    pub retry_lock: Option<String>,
}

impl CopyArgs {
    /// The arguments after the binary's name, starting with the subcommand.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = vec!["copy".to_owned()];
        push_repository_args(&mut args, &self.repository, &self.result_file);
        args.push("--from-repo".into());
        args.push(self.from_repository.to_arg());
        args.push("--host".into());
        args.push(self.host.clone());
        if self.init {
            args.push("--init".into());
        }
        if self.after_newest_copy {
            args.push("--after-newest-copy".into());
        }
        push_retry_lock(&mut args, self.retry_lock.as_deref());
        args
    }
}

fn push_retry_lock(args: &mut Vec<String>, wait: Option<&str>) {
    if let Some(wait) = wait {
        args.push("--retry-lock".into());
        args.push(wait.to_owned());
    }
}

fn push_protect_within(args: &mut Vec<String>, window: Option<&str>) {
    if let Some(window) = window {
        args.push("--protect-within".into());
        args.push(window.to_owned());
    }
}

fn push_repository_args(
    args: &mut Vec<String>,
    repository: &RepositoryLocation,
    result_file: &str,
) {
    args.push("--repo".into());
    args.push(repository.to_arg());
    args.push("--result-file".into());
    args.push(result_file.to_owned());
}

/// `neverwiped-sidecar restore SNAPSHOT --repo REPO --result-file PATH [--target DIR]
/// [--include PATH]... [--host NAME] [--before RFC3339] [--database NAME=URI]...
/// [--database-password-file NAME=PATH]... [--overwrite-database NAME]...
/// [--overwrite always|if-changed|if-newer|never] [--delete] [--verify]` (the last three with
/// `--target`)
///
/// `SNAPSHOT` is `latest`, or a snapshot id or a unique prefix of one. With `latest`, `--host`
/// restricts the choice to the snapshots of that host and `--before` to those taken before that
/// time. Files are restored as `DIR` + their path in the snapshot (restic's rule): a volume backed
/// up from `/data/app` and restored with `--target /restore` lands in `/restore/data/app`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreArgs {
    pub snapshot: String,
    /// As for [`BackupArgs::repository`].
    pub repository: RepositoryLocation,
    pub result_file: String,
    pub target: Option<String>,
    pub includes: Vec<String>,
    pub host: Option<String>,
    /// RFC 3339 time: with `latest`, the newest snapshot taken before it.
    pub before: Option<String>,
    pub databases: Vec<DatabaseArg>,
    /// Names of database entries whose databases are dropped on a target server that already
    /// holds them, then restored (`--overwrite-database NAME`); the others refuse such a server.
    pub databases_to_overwrite: Vec<String>,
    /// `--overwrite WHEN`: what happens to an entry that already stands where a file goes.
    pub overwrite: Overwrite,
    /// `--delete`: remove what the snapshot lacks from the folders restored whole.
    pub delete: bool,
    /// `--verify`: read every restored file back and hold it to the snapshot (restic's flag); a
    /// difference exits [`crate::ExitStatus::VerifyFailed`].
    pub verify: bool,
    /// `--stream NAME=SLOT`: the snapshot's `/streams/NAME` into a restore container's input.
    pub streams: Vec<crate::streams::StreamArg>,
}

/// `neverwiped-sidecar describe SNAPSHOT --repo URL --result-file PATH [--host H] [--before T]`:
/// which snapshot `restore` with the same selection would restore, and its record of claims and
/// databases, in the result ([`crate::RunResult::sources`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeArgs {
    pub snapshot: String,
    /// As for [`BackupArgs::repository`].
    pub repository: RepositoryLocation,
    pub result_file: String,
    pub host: Option<String>,
    /// RFC 3339 time: with `latest`, the newest snapshot taken before it.
    pub before: Option<String>,
}

impl DescribeArgs {
    /// The arguments after the binary's name, starting with the subcommand.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = vec!["describe".to_owned(), self.snapshot.clone()];
        push_repository_args(&mut args, &self.repository, &self.result_file);
        for (flag, value) in [("--host", &self.host), ("--before", &self.before)] {
            if let Some(value) = value {
                args.push(flag.into());
                args.push(value.clone());
            }
        }
        args
    }
}

/// The sidecar's `restore --overwrite` policies (restic's): when a restore replaces an entry that
/// stands where a file, symlink or special file of the snapshot goes. A folder of the snapshot
/// replaces whatever non-folder is in its way under every policy, as restic's does: nothing below
/// it could be restored otherwise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Overwrite {
    /// Replace every entry; files are rewritten whole.
    Always,
    /// The default: replace every entry except a file that already holds the snapshot's content
    /// (one with the snapshot's size and modification time is taken as such, one of the same size
    /// and another time is read and compared blob by blob). A kept file still gets the snapshot's
    /// metadata.
    #[default]
    IfChanged,
    /// Replace an entry only when the snapshot's is newer (by modification time).
    IfNewer,
    /// Never replace an entry.
    Never,
}

impl Overwrite {
    /// Every policy, in the order `--help` names them.
    pub const ALL: [Overwrite; 4] = [
        Overwrite::Always,
        Overwrite::IfChanged,
        Overwrite::IfNewer,
        Overwrite::Never,
    ];

    /// The value of `--overwrite`.
    pub fn arg(self) -> &'static str {
        match self {
            Overwrite::Always => "always",
            Overwrite::IfChanged => "if-changed",
            Overwrite::IfNewer => "if-newer",
            Overwrite::Never => "never",
        }
    }
}

impl std::str::FromStr for Overwrite {
    type Err = String;

    fn from_str(text: &str) -> Result<Overwrite, String> {
        Overwrite::ALL
            .into_iter()
            .find(|policy| policy.arg() == text)
            .ok_or_else(|| format!("{text:?} is not one of always, if-changed, if-newer, never"))
    }
}

impl RestoreArgs {
    /// The arguments after the binary's name, starting with the subcommand.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = vec!["restore".to_owned(), self.snapshot.clone()];
        push_repository_args(&mut args, &self.repository, &self.result_file);
        if let Some(target) = &self.target {
            args.push("--target".into());
            args.push(target.clone());
        }
        for include in &self.includes {
            args.push("--include".into());
            args.push(include.clone());
        }
        if let Some(host) = &self.host {
            args.push("--host".into());
            args.push(host.clone());
        }
        if let Some(before) = &self.before {
            args.push("--before".into());
            args.push(before.clone());
        }
        for database in &self.databases {
            database.push_args(&mut args);
        }
        for name in &self.databases_to_overwrite {
            args.push("--overwrite-database".into());
            args.push(name.clone());
        }
        if self.target.is_some() {
            // The sidecar's default is left out, so that a default Job's arguments stay as they
            // were before the option existed.
            if self.overwrite != Overwrite::default() {
                args.push("--overwrite".into());
                args.push(self.overwrite.arg().into());
            }
            if self.delete {
                args.push("--delete".into());
            }
            if self.verify {
                args.push("--verify".into());
            }
        }
        for stream in &self.streams {
            stream.push_args(&mut args);
        }
        args
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn location(text: &str) -> RepositoryLocation {
        RepositoryLocation::parse(text).unwrap()
    }

    #[test]
    fn sizes_take_restic_suffixes_and_refuse_the_rest() {
        assert_eq!(parse_size("40"), Ok(40));
        assert_eq!(parse_size("1k"), Ok(1024));
        assert_eq!(parse_size("2M"), Ok(2 << 20));
        assert_eq!(parse_size("3b"), Ok(3));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert_eq!(parse_size("+5k"), Ok(5 << 10));
        for refused in [
            "",
            "k",
            "1.5G",
            "-1",
            "+",
            "1 G",
            "1Gi",
            "G1",
            "99999999999t",
        ] {
            assert!(parse_size(refused).is_err(), "{refused:?}");
        }
    }

    #[test]
    fn merged_selections_keep_every_tag_and_the_smaller_size() {
        let mut first = ScopedSelection {
            exclude_caches: false,
            exclude_if_present: vec!["a".into()],
            exclude_larger_than: Some("1G".into()),
        };
        first.merge(&ScopedSelection {
            exclude_caches: true,
            exclude_if_present: vec!["a".into(), "b".into()],
            exclude_larger_than: Some("500m".into()),
        });
        assert_eq!(
            first,
            ScopedSelection {
                exclude_caches: true,
                exclude_if_present: vec!["a".into(), "b".into()],
                exclude_larger_than: Some("500m".into()),
            }
        );
        first.merge(&ScopedSelection::default());
        assert_eq!(first.exclude_larger_than.as_deref(), Some("500m"));
        assert!(ScopedSelection::default().is_empty());
    }

    #[test]
    fn backup_args_follow_the_documented_order() {
        let args = BackupArgs {
            hooks: Vec::new(),
            streams: Vec::new(),
            paths: vec!["/data/app".into(), "/data/db".into()],
            repository: location("rest:https://gate.example/shop"),
            result_file: "/dev/termination-log".into(),
            host: Some("shop/nightly".into()),
            tags: vec![("plan".into(), "nightly".into())],
            excludes: vec!["/data/app/**/cache".into()],
            scoped: vec![(
                "/data/app".into(),
                ScopedSelection {
                    exclude_caches: true,
                    exclude_if_present: vec![".nobackup".into(), "TAG:sig".into()],
                    exclude_larger_than: Some("2G".into()),
                },
            )],
            upload_limit_bytes_per_sec: Some(1_000_000),
            remove_locks_of_host: Some("nightly-0123456789abcdef".into()),
            databases: vec![DatabaseArg {
                name: "orders".into(),
                uri: "postgresql://$(NEVERWIPED_DB_USERNAME_ORDERS)@pg:5432".into(),
                password_file: Some("/var/run/neverwiped/databases/orders/password".into()),
            }],
            keep: KeepRules {
                daily: Some(7),
                weekly: Some(4),
                ..KeepRules::default()
            },
            retry_lock: Some("1800s".into()),
            init: true,
            protect_within: Some("14d".into()),
            claims: vec![crate::record::RecordedClaim {
                path: "/data/app".into(),
                name: "app".into(),
                requested_size: Some("1Gi".into()),
                ..Default::default()
            }],
        }
        .to_args();
        assert_eq!(
            args,
            [
                "backup",
                "/data/app",
                "/data/db",
                "--repo",
                "rest:https://gate.example/shop",
                "--result-file",
                "/dev/termination-log",
                "--host",
                "shop/nightly",
                "--tag",
                "plan=nightly",
                "--exclude",
                "/data/app/**/cache",
                "--exclude-caches-in",
                "/data/app",
                "--exclude-if-present-in",
                "/data/app=.nobackup",
                "--exclude-if-present-in",
                "/data/app=TAG:sig",
                "--exclude-larger-than-in",
                "/data/app=2G",
                "--limit-upload",
                "1000000",
                "--remove-locks-of-host",
                "nightly-0123456789abcdef",
                "--database",
                "orders=postgresql://$(NEVERWIPED_DB_USERNAME_ORDERS)@pg:5432",
                "--database-password-file",
                "orders=/var/run/neverwiped/databases/orders/password",
                "--keep-daily",
                "7",
                "--keep-weekly",
                "4",
                "--retry-lock",
                "1800s",
                "--init",
                "--protect-within",
                "14d",
                "--claim",
                r#"{"path":"/data/app","name":"app","requestedSize":"1Gi"}"#,
            ]
        );
    }

    #[test]
    fn maintenance_args_name_their_subcommand_first() {
        let prune = PruneArgs {
            repository: location("rest:http://gate/r"),
            result_file: "/dev/termination-log".into(),
            remove_locks_of_host: Some("nightly-0123".into()),
            retry_lock: None,
            host: Some("shop/nightly".into()),
            keep: KeepRules {
                last: Some(3),
                ..KeepRules::default()
            },
            protect_within: Some("14d".into()),
        }
        .to_args();
        assert_eq!(
            prune,
            [
                "prune",
                "--repo",
                "rest:http://gate/r",
                "--result-file",
                "/dev/termination-log",
                "--remove-locks-of-host",
                "nightly-0123",
                "--host",
                "shop/nightly",
                "--keep-last",
                "3",
                "--protect-within",
                "14d",
            ]
        );
        let check = CheckArgs {
            repository: location("rest:http://gate/r"),
            result_file: "/dev/termination-log".into(),
            read_data_percent: Some(5),
            remove_locks_of_host: None,
            retry_lock: Some("30m".into()),
        }
        .to_args();
        let prune_of_host = PruneArgs {
            repository: location("/srv/repository"),
            result_file: "/dev/termination-log".into(),
            remove_locks_of_host: None,
            retry_lock: None,
            host: Some("shop/nightly".into()),
            keep: KeepRules::default(),
            protect_within: None,
        };
        assert!(prune_of_host
            .to_args()
            .windows(2)
            .any(|w| w == ["--host", "shop/nightly"]));
        assert_eq!(&check[..1], ["check"]);
        assert!(check.windows(2).any(|w| w == ["--read-data-subset", "5%"]));
        assert!(check.windows(2).any(|w| w == ["--retry-lock", "30m"]));
        assert!(KeepRules::default().is_empty());
    }

    #[test]
    fn restore_args_name_the_snapshot_first() {
        let args = RestoreArgs {
            streams: Vec::new(),
            snapshot: "latest".into(),
            repository: location("rest:http://127.0.0.1:8000/r"),
            result_file: "/dev/termination-log".into(),
            target: Some("/restore".into()),
            includes: vec!["/data/app".into()],
            host: Some("shop/nightly".into()),
            before: Some("2026-11-29T00:00:00Z".into()),
            databases: Vec::new(),
            databases_to_overwrite: Vec::new(),
            overwrite: Overwrite::IfNewer,
            delete: true,
            verify: true,
        }
        .to_args();
        assert_eq!(&args[..2], ["restore", "latest"]);
        assert!(args.windows(2).any(|w| w == ["--overwrite", "if-newer"]));
        assert!(args.iter().any(|arg| arg == "--delete"));
        assert_eq!(args.last().map(String::as_str), Some("--verify"));
        assert!(args
            .windows(2)
            .any(|w| w == ["--before", "2026-11-29T00:00:00Z"]));
        assert!(args.windows(2).any(|w| w == ["--include", "/data/app"]));
    }
}
