//! Restore of a dump: the entry `/databases/NAME/*.sql` of a snapshot streamed, blob by blob with
//! a little read-ahead, into `psql` or `mariadb` against a target server. The dump is never held
//! whole in memory nor written to disk.

use super::child::{failure_message, spawn_error, DumpState, DumpStatus, StderrTail};
use super::missing_roles::MissingRoles;
use super::script::{PassThrough, PreparedRestore};
use super::uri::Engine;
use super::{mariadb, postgres, DatabaseTarget, SNAPSHOT_DIR};
use crate::error::{Error, Result};
use crate::filter::{PathFilter, PatternList};
use crate::format::tree::NodeKind;
use crate::ids::BlobId;
use crate::repository::IndexedRepository;
use futures::StreamExt;
use std::io::Write;
use std::process::Stdio;
use std::sync::Arc;

/// Blobs fetched ahead of the one being written (each is at most 4 MiB).
const READ_AHEAD_BLOBS: usize = 4;

/// A dump stored in a snapshot.
#[derive(Debug, Clone)]
pub struct DumpEntry {
    /// Its path in the snapshot, `/databases/NAME/FILE.sql`.
    pub path: String,
    /// The file name without `.sql`: the database it holds, or `all`.
    pub stem: String,
    pub size: u64,
    pub content: Vec<BlobId>,
}

/// What a dump holds, told by its first lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DumpKind {
    /// `pg_dumpall`: every database and the roles.
    PostgresCluster,
    /// `pg_dump` of one database.
    PostgresDatabase,
    /// `mariadb-dump --all-databases`.
    MariaDbAll,
    /// `mariadb-dump` of one database.
    MariaDbDatabase,
}

impl DumpKind {
    /// Reads the kind from the first kilobytes of a dump.
    pub fn sniff(head: &[u8]) -> Option<DumpKind> {
        let head = &head[..head.len().min(8192)];
        let text = String::from_utf8_lossy(head);
        for line in text.lines().take(40) {
            let line = line.trim_end();
            match line {
                "-- PostgreSQL database cluster dump" => return Some(DumpKind::PostgresCluster),
                "-- PostgreSQL database dump" => return Some(DumpKind::PostgresDatabase),
                _ => {}
            }
            if line.starts_with("-- Host: ") {
                if let Some((_, database)) = line.split_once("Database: ") {
                    return Some(if database.trim().is_empty() {
                        DumpKind::MariaDbAll
                    } else {
                        DumpKind::MariaDbDatabase
                    });
                }
                return Some(DumpKind::MariaDbAll);
            }
        }
        None
    }

    pub fn engine_name(&self) -> &'static str {
        match self {
            DumpKind::PostgresCluster | DumpKind::PostgresDatabase => "PostgreSQL",
            DumpKind::MariaDbAll | DumpKind::MariaDbDatabase => "MariaDB/MySQL",
        }
    }

    fn is_whole_server(&self) -> bool {
        matches!(self, DumpKind::PostgresCluster | DumpKind::MariaDbAll)
    }
}

/// The dumps of database entry `name` in the snapshot tree `root`: the `.sql` files of
/// `/databases/NAME/`, one per database when the entry dumped chosen databases.
pub async fn find_dumps(
    repo: &IndexedRepository,
    root: BlobId,
    name: &str,
) -> Result<Vec<DumpEntry>> {
    let dir = format!("{SNAPSHOT_DIR}/{name}");
    let filter = PathFilter::including(vec![PatternList::paths(std::slice::from_ref(&dir))]);
    let plan = crate::restore::plan_restore(repo, root, &filter)
        .await
        .map_err(|error| match error {
            // The planner's word for a path the snapshot lacks.
            Error::Usage(_) => Error::DumpNotFound(format!(
                "the snapshot holds no dump of database {name}: {dir} is not in it"
            )),
            error => error,
        })?;
    let prefix = format!("{}/", dir.trim_start_matches('/'));
    let dumps: Vec<DumpEntry> = plan
        .entries
        .iter()
        .filter_map(|entry| {
            let path = String::from_utf8_lossy(&entry.path).into_owned();
            let file = path.strip_prefix(&prefix)?;
            let stem = file
                .strip_suffix(".sql")
                .filter(|stem| !stem.contains('/') && !stem.is_empty())?;
            match &entry.node.kind {
                NodeKind::File { size, content } => Some(DumpEntry {
                    path: format!("/{path}"),
                    stem: stem.to_owned(),
                    size: *size,
                    content: content.clone(),
                }),
                _ => None,
            }
        })
        .collect();
    if dumps.is_empty() {
        return Err(Error::DumpNotFound(format!(
            "{dir} of the snapshot holds no .sql dump"
        )));
    }
    Ok(dumps)
}

/// Which of an entry's dumps a target gets: with a database name in its URI, the dump of that
/// database (or the entry's only dump, restored under that name); without, every dump, each
/// into the database it came from.
fn dumps_for(target: &DatabaseTarget, mut dumps: Vec<DumpEntry>) -> Result<Vec<DumpEntry>> {
    let Some(database) = &target.uri.database else {
        return Ok(dumps);
    };
    if dumps.len() == 1 {
        return Ok(dumps);
    }
    match dumps.iter().position(|d| &d.stem == database) {
        Some(index) => Ok(vec![dumps.swap_remove(index)]),
        None => {
            let names: Vec<&str> = dumps.iter().map(|d| d.stem.as_str()).collect();
            Err(Error::DumpNotFound(format!(
                "database entry {} holds dumps of {}, not of {database}",
                target.name,
                names.join(", ")
            )))
        }
    }
}

/// A finished database restore.
#[derive(Debug, Clone)]
pub struct DatabaseRestoreReport {
    pub entry: String,
    pub kind: DumpKind,
    pub bytes: u64,
    pub database: Option<String>,
    pub dropped: Vec<String>,
}

/// How a restore treats its target server.
#[derive(Debug, Clone, Copy, Default)]
pub struct RestoreChoices {
    /// Drop the databases the server holds first, rather than refuse it.
    pub overwrite: bool,
    /// Create each role a dump of one PostgreSQL database gives objects or privileges to when
    /// the server lacks it (a drill's fresh server; see [`super::missing_roles`]).
    pub create_missing_roles: bool,
}

/// Restores the dump of `target.name` from the snapshot tree `root` into `target`'s server.
/// A server that holds databases is refused unless `choices.overwrite`, which drops them first.
/// `status` counts the bytes fed to the client and records the outcome.
pub async fn restore_database(
    repo: &IndexedRepository,
    root: BlobId,
    target: &DatabaseTarget,
    choices: RestoreChoices,
    status: Arc<DumpStatus>,
) -> Result<Vec<DatabaseRestoreReport>> {
    status.set_state(DumpState::Running);
    let result: Result<Vec<DatabaseRestoreReport>> = async {
        let dumps = dumps_for(target, find_dumps(repo, root, &target.name).await?)?;
        let mut reports = Vec::new();
        for entry in dumps {
            reports.push(run_restore(repo, entry, target, choices, &status).await?);
        }
        Ok(reports)
    }
    .await;
    match &result {
        Ok(_) => status.set_state(DumpState::Complete),
        Err(error) => status.set_state(DumpState::Failed(error.to_string())),
    }
    result
}

async fn run_restore(
    repo: &IndexedRepository,
    entry: DumpEntry,
    target: &DatabaseTarget,
    choices: RestoreChoices,
    status: &Arc<DumpStatus>,
) -> Result<DatabaseRestoreReport> {
    let overwrite = choices.overwrite;
    let Some(first_id) = entry.content.first() else {
        return Err(Error::DumpNotRestorable {
            entry: entry.path,
            problem: "is empty: there is nothing to restore".into(),
        });
    };
    let first = repo
        .read_blob(first_id, &format!("content of {}", entry.path))
        .await?;
    let kind = DumpKind::sniff(&first).ok_or_else(|| Error::DumpNotRestorable {
        entry: entry.path.clone(),
        problem: "is not a dump of pg_dumpall, pg_dump or mariadb-dump".into(),
    })?;
    let postgres_dump = matches!(kind, DumpKind::PostgresCluster | DumpKind::PostgresDatabase);
    if postgres_dump != (target.uri.engine == Engine::Postgres) {
        return Err(Error::DumpNotRestorable {
            entry: entry.path,
            problem: format!(
                "is a {} dump: it cannot be restored into {}",
                kind.engine_name(),
                target.uri
            ),
        });
    }
    if kind.is_whole_server() && target.uri.database.is_some() {
        return Err(Error::DumpNotRestorable {
            entry: entry.path,
            problem: format!(
                "holds every database of its server: restore it to a URI without a database name, not {}",
                target.uri
            ),
        });
    }
    let database = target
        .uri
        .database
        .clone()
        .unwrap_or_else(|| entry.stem.clone());
    let prepared = {
        let (target, kind, database) = (target.clone(), kind.clone(), database.clone());
        tokio::task::spawn_blocking(move || match kind {
            DumpKind::PostgresCluster => postgres::prepare_cluster_restore(&target, overwrite),
            DumpKind::PostgresDatabase => {
                postgres::prepare_database_restore(&target, &database, overwrite)
            }
            DumpKind::MariaDbAll => mariadb::prepare_all_restore(&target, overwrite),
            DumpKind::MariaDbDatabase => {
                mariadb::prepare_database_restore(&target, &database, overwrite)
            }
        })
        .await
        .map_err(|e| Error::Interrupted(e.to_string()))??
    };
    let mut prepared = prepared;
    if choices.create_missing_roles && kind == DumpKind::PostgresDatabase {
        let inner = std::mem::replace(&mut prepared.filter, Box::new(PassThrough));
        prepared.filter = Box::new(MissingRoles::new(&target.uri.user, inner));
    }
    for dropped in &prepared.dropped {
        tracing::warn!(database = %dropped, "dropped on the target before the restore (--overwrite-databases)");
    }
    let report = DatabaseRestoreReport {
        entry: entry.path.clone(),
        kind,
        bytes: entry.size,
        database: prepared.database.clone(),
        dropped: prepared.dropped.clone(),
    };
    let what = format!(
        "restoring {} into {}",
        entry.path,
        target.uri.with_database(prepared.database.clone())
    );
    stream_into_client(repo, &entry, first, prepared, status)
        .await
        .map_err(|message| Error::Io {
            what,
            source: std::io::Error::other(message),
        })?;
    Ok(report)
}

enum Piece {
    Data(Vec<u8>),
    End,
}

/// Feeds the dump to the client; `Err` holds the client's (or the repository's) message.
async fn stream_into_client(
    repo: &IndexedRepository,
    entry: &DumpEntry,
    first: Vec<u8>,
    prepared: PreparedRestore,
    status: &Arc<DumpStatus>,
) -> std::result::Result<(), String> {
    let (sender, receiver) = tokio::sync::mpsc::channel::<Piece>(2);
    let writer = {
        let status = status.clone();
        tokio::task::spawn_blocking(move || feed_client(prepared, receiver, &status))
    };
    let mut read_error = None;
    if sender.send(Piece::Data(first)).await.is_ok() {
        let rest = entry.content[1..].to_vec();
        let context = format!("content of {}", entry.path);
        let mut blobs = futures::stream::iter(rest)
            .map(|id| {
                let (repo, context) = (repo.clone(), context.clone());
                async move { repo.read_blob(&id, &context).await }
            })
            .buffered(READ_AHEAD_BLOBS);
        let mut complete = true;
        while let Some(blob) = blobs.next().await {
            match blob {
                Ok(data) => {
                    if sender.send(Piece::Data(data)).await.is_err() {
                        // The client stopped reading: its exit says why.
                        complete = false;
                        break;
                    }
                }
                Err(error) => {
                    read_error = Some(error.to_string());
                    complete = false;
                    break;
                }
            }
        }
        if complete {
            let _ = sender.send(Piece::End).await;
        }
    }
    drop(sender);
    let fed = writer
        .await
        .map_err(|e| format!("the restore writer failed: {e}"))?;
    match (read_error, fed) {
        (Some(error), _) => Err(format!(
            "reading the dump from the repository failed, the client was stopped: {error}"
        )),
        (None, result) => result,
    }
}

/// Runs the client and writes what arrives to its input until `End`; a channel closed without
/// `End` means the dump could not be read whole, and the client is killed rather than given an
/// end of input (which it would take for a complete, shorter dump).
fn feed_client(
    mut prepared: PreparedRestore,
    mut receiver: tokio::sync::mpsc::Receiver<Piece>,
    status: &DumpStatus,
) -> std::result::Result<(), String> {
    let tool = prepared.command.tool.clone();
    let mut child = prepared
        .command
        .command()
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| spawn_error(&tool, &prepared.command.program, e).to_string())?;
    let stderr =
        StderrTail::start(child.stderr.take().expect("piped")).map_err(|e| e.to_string())?;
    let mut stdin = child.stdin.take().expect("piped");
    let mut out = Vec::new();
    let mut ended = false;
    let mut write_failed = None;
    while let Some(piece) = receiver.blocking_recv() {
        out.clear();
        match piece {
            Piece::Data(data) => {
                status.add_bytes(data.len() as u64);
                prepared.filter.push(&data, &mut out);
            }
            Piece::End => {
                prepared.filter.finish(&mut out);
                ended = true;
            }
        }
        if let Err(error) = stdin.write_all(&out) {
            write_failed = Some(error);
            break;
        }
        if ended {
            break;
        }
    }
    drop(receiver);
    if !ended && write_failed.is_none() {
        let _ = child.kill();
    }
    drop(stdin);
    let exit = child
        .wait()
        .map_err(|e| format!("waiting for {tool}: {e}"))?;
    let message = stderr.finish();
    drop(prepared.command.secret.take());
    if !exit.success() {
        return Err(failure_message(&tool, exit, &message));
    }
    if let Some(error) = write_failed {
        return Err(format!("{tool} stopped reading the dump: {error}"));
    }
    if !ended {
        return Err(format!(
            "{tool} was stopped: the dump could not be read whole"
        ));
    }
    if !message.is_empty() {
        tracing::info!(tool = %tool, "{message}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dumps_are_told_apart_by_their_first_lines() {
        let cases: [(&[u8], Option<DumpKind>); 6] = [
            (b"--\n-- PostgreSQL database cluster dump\n--\n\n\\restrict x\n", Some(DumpKind::PostgresCluster)),
            (b"--\n-- PostgreSQL database dump\n--\n", Some(DumpKind::PostgresDatabase)),
            (
                b"/*M!999999\\- enable the sandbox mode */ \n-- MariaDB dump 10.19  Distrib 10.11.19-MariaDB\n--\n-- Host: 127.0.0.1    Database: \n",
                Some(DumpKind::MariaDbAll),
            ),
            (b"-- MySQL dump 10.13\n--\n-- Host: db    Database: shop\n", Some(DumpKind::MariaDbDatabase)),
            (b"SELECT 1;\n", None),
            (b"", None),
        ];
        for (head, kind) in cases {
            assert_eq!(
                DumpKind::sniff(head),
                kind,
                "{}",
                String::from_utf8_lossy(head)
            );
        }
    }
}
