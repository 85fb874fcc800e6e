//! `--database NAME=URI` on `backup` and `restore`: the databases' passwords, their dump streams,
//! their restores, and their part of the JSON result.

use super::args::RestoreArgs;
use super::output::bytes;
use super::{secrets, Outcome};
use anyhow::{bail, Context, Result};
use neverwiped::archive::Source;
use neverwiped::dump::child::{DumpState, DumpStatus};
use neverwiped::dump::rows::CountedRows;
use neverwiped::dump::{self, DatabaseTarget, DatabaseUri};
use neverwiped::format::snapshot::Snapshot;
use neverwiped::ids::SnapshotId;
use neverwiped::repository::IndexedRepository;
use neverwiped_contract::record::{RecordedDatabase, RecordedTable};
use neverwiped_contract::DatabaseResult;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use zeroize::Zeroizing;

/// The databases of one run and how each went, entered as the run reaches them.
#[derive(Debug, Default)]
pub struct DatabaseRecord {
    entries: Mutex<Vec<(String, Arc<DumpStatus>)>>,
}

impl DatabaseRecord {
    fn enter(&self, name: &str, status: Arc<DumpStatus>) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((name.to_owned(), status));
    }

    /// One entry per database of the run; when the run failed, a database it never reached
    /// says so.
    pub fn results(&self, run_failed: bool) -> Vec<DatabaseResult> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .iter()
            .map(|(name, status)| {
                let error = match status.state() {
                    DumpState::Failed(message) => Some(message),
                    DumpState::NotStarted | DumpState::Running if run_failed => {
                        Some("not done: the run failed before it was complete".to_owned())
                    }
                    _ => None,
                };
                DatabaseResult {
                    name: name.clone(),
                    dump_bytes: status.bytes(),
                    error,
                }
            })
            .collect()
    }
}

/// Splits `NAME=VALUE`.
fn split_assignment<'a>(text: &'a str, option: &str, value: &str) -> Result<(&'a str, &'a str)> {
    match text.split_once('=') {
        Some((name, rest)) if !name.is_empty() && !rest.is_empty() => Ok((name, rest)),
        _ => bail!("{option} takes NAME={value}, not {text:?}"),
    }
}

/// The databases of `--database NAME=URI`, with their passwords from `--database-password-file
/// NAME=PATH` or else `NEVERWIPED_DB_PASSWORD_<NAME>`.
pub fn targets(databases: &[String], password_files: &[String]) -> Result<Vec<DatabaseTarget>> {
    let mut files: BTreeMap<&str, PathBuf> = BTreeMap::new();
    for assignment in password_files {
        let (name, path) = split_assignment(assignment, "--database-password-file", "PATH")?;
        if files.insert(name, PathBuf::from(path)).is_some() {
            bail!("--database-password-file names database {name} twice");
        }
    }
    let mut targets: Vec<DatabaseTarget> = Vec::new();
    for assignment in databases {
        let (name, uri_text) = split_assignment(assignment, "--database", "URI")?;
        dump::check_name(name)?;
        let variable = dump::password_variable(name);
        let uri = DatabaseUri::parse(uri_text).map_err(|error| {
            anyhow::anyhow!(
                "database {name}: {error}; a password goes in {variable} or a file given with --database-password-file {name}=PATH"
            )
        })?;
        // One entry may name several databases of one server (`NAME=URI/db1`, `NAME=URI/db2`).
        if targets
            .iter()
            .any(|t| t.name == name && t.uri.database == uri.database)
        {
            bail!("--database names {name} twice");
        }
        let password = match files.get(name) {
            Some(path) => {
                let secret = secrets::read_secret_file(path)?;
                let text = std::str::from_utf8(&secret).with_context(|| {
                    format!("the password file of database {name} is not UTF-8")
                })?;
                Some(Zeroizing::new(text.to_owned()))
            }
            None => match std::env::var_os(&variable) {
                Some(value) => Some(Zeroizing::new(
                    value
                        .into_string()
                        .map_err(|_| anyhow::anyhow!("{variable} is not UTF-8"))?,
                )),
                None => None,
            },
        };
        if password.is_none() {
            tracing::info!(database = name, "no password given ({variable} or --database-password-file): the tools will try without one");
        }
        targets.push(DatabaseTarget::new(name, uri, password)?);
    }
    if let Some(name) = files
        .keys()
        .find(|name| !targets.iter().any(|t| &t.name == *name))
    {
        bail!("--database-password-file names database {name}, which no --database gives");
    }
    Ok(targets)
}

/// The dump streams of `backup --database`, each dump started when the backup reaches it, and
/// what the snapshot records of each database (asked of its server now).
pub fn backup_sources(
    databases: &[String],
    password_files: &[String],
    record: &DatabaseRecord,
) -> Result<(Vec<Source>, DumpedDatabases)> {
    let mut sources = Vec::new();
    let mut dumped = DumpedDatabases::default();
    for target in targets(databases, password_files)? {
        let dump = dump::dump_source(&target)?;
        tracing::info!(database = %target.name, uri = %target.uri, path = %dump.source.snapshot_path, "database to dump");
        record.enter(&target.label(), dump.status);
        sources.push(Source::Stream(dump.source));
        dumped.add(dump::record::describe(&target), dump.rows);
    }
    Ok((sources, dumped))
}

/// What the snapshot records of the databases a backup dumps: described before the dumps start,
/// with their tables' rows once the dumps have been read.
#[derive(Default)]
pub struct DumpedDatabases {
    described: Vec<RecordedDatabase>,
    /// Each dump's entry, and the rows counted in it.
    counted: Vec<(String, Arc<CountedRows>)>,
}

impl DumpedDatabases {
    /// Adds `database` to what the snapshot records: an entry given once per database it names
    /// (`--database orders=…/shop --database orders=…/stock`) is recorded once, with them all.
    fn add(&mut self, database: RecordedDatabase, rows: Arc<CountedRows>) {
        self.counted.push((database.name.clone(), rows));
        match self.described.iter_mut().find(|d| d.name == database.name) {
            Some(entry) => entry.databases.extend(database.databases),
            None => self.described.push(database),
        }
    }

    /// The record, with every table of an entry whose dumps were all counted (an entry with one
    /// dump not understood records no table: a drill then checks none rather than some).
    pub fn record(&self) -> Vec<RecordedDatabase> {
        let mut databases = self.described.clone();
        for entry in &mut databases {
            let counts: Option<Vec<Vec<RecordedTable>>> = (self.counted.iter())
                .filter(|(name, _)| *name == entry.name)
                .map(|(_, rows)| rows.tables())
                .collect();
            entry.tables = counts.unwrap_or_default().concat();
        }
        databases
    }
}

/// The databases a restore puts back, entered in the run's record before anything starts.
pub struct DatabaseRestores {
    targets: Vec<(DatabaseTarget, Arc<DumpStatus>)>,
}

impl DatabaseRestores {
    /// Reads `--database` and `--database-password-file`; an entry for each in `record`.
    pub fn enter(args: &RestoreArgs, record: &DatabaseRecord) -> Result<DatabaseRestores> {
        let targets = targets(&args.databases, &args.database_password_files)?
            .into_iter()
            .map(|target| {
                let status = Arc::new(DumpStatus::default());
                record.enter(&target.label(), status.clone());
                (target, status)
            })
            .collect();
        Ok(DatabaseRestores { targets })
    }

    /// Streams each database's dump of `snapshot` into its server.
    pub async fn run(
        self,
        cli: &super::args::Cli,
        args: &RestoreArgs,
        repo: &IndexedRepository,
        snapshot_id: SnapshotId,
        snapshot: &Snapshot,
    ) -> Result<Outcome> {
        let mut outcome = Outcome {
            snapshot_id: Some(snapshot_id.to_hex()),
            snapshot_time: Some(snapshot.time.clone()),
            ..Outcome::default()
        };
        for (target, status) in &self.targets {
            let chosen = (snapshot_id, snapshot);
            restore_one(cli, args, repo, chosen, target, status, &mut outcome).await?;
        }
        Ok(outcome)
    }
}

/// One `--database` entry: its dump (or dumps) into the server, each said and counted.
async fn restore_one(
    cli: &super::args::Cli,
    args: &RestoreArgs,
    repo: &IndexedRepository,
    (snapshot_id, snapshot): (SnapshotId, &Snapshot),
    target: &DatabaseTarget,
    status: &Arc<DumpStatus>,
    outcome: &mut Outcome,
) -> Result<()> {
    let choices = dump::restore::RestoreChoices {
        overwrite: args.overwrite_databases || args.overwrite_database.contains(&target.name),
        ..Default::default()
    };
    let reports =
        dump::restore::restore_database(repo, snapshot.tree, target, choices, status.clone())
            .await
            .with_context(|| format!("database {}", target.label()))?;
    for report in reports {
        let into = target.uri.with_database(report.database.clone());
        if cli.json {
            println!(
                "{}",
                serde_json::json!({
                    "entry": report.entry,
                    "snapshotId": snapshot_id.to_hex(),
                    "database": report.database,
                    "bytes": report.bytes,
                })
            );
        } else if !cli.quiet {
            println!(
                "restored {} of snapshot {} into {}: {}{}",
                report.entry,
                snapshot_id.short(),
                into,
                bytes(report.bytes),
                renamed_note(&report.entry, report.database.as_deref())
            );
        }
        outcome.files += 1;
        outcome.bytes_read += report.bytes;
    }
    Ok(())
}

/// Says so when the dump of one database went into a database of another name (a URI naming
/// `/OTHER` for an entry holding the single dump `NAME.sql`).
fn renamed_note(entry: &str, database: Option<&str>) -> String {
    let dumped = std::path::Path::new(entry)
        .file_stem()
        .and_then(|stem| stem.to_str());
    match (dumped, database) {
        (Some(dumped), Some(database)) if dumped != database => {
            format!(" (the dump of database {dumped}, restored under the name {database})")
        }
        _ => String::new(),
    }
}
