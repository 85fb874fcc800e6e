//! The drill of one database entry: a throwaway server started in the scratch space, the entry's
//! dump loaded into it by the restore `restore --database` runs, and every table the snapshot
//! recorded counted in it.

use super::ThrowawayServer;
use crate::dump::child::DumpStatus;
use crate::dump::restore::{restore_database, RestoreChoices};
use crate::dump::row_check::check_rows;
use crate::ids::BlobId;
use crate::repository::IndexedRepository;
use crate::text::escaped;
use anyhow::Context;
use neverwiped_contract::drill::DrillDatabase;
use neverwiped_contract::record::RecordedDatabase;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// Why a database's drill failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The drill could not be run: no server could be started (a missing binary, no room).
    NotDrilled,
    /// The dump does not load, or its tables do not hold the rows it recorded.
    Differs,
}

/// Drills the entry `recorded` of the snapshot tree `root` in a server whose folder is
/// `databases/NAME`; the stats carry the error, and the failure says of what kind.
pub async fn drill_database(
    repo: &IndexedRepository,
    root: BlobId,
    recorded: &RecordedDatabase,
    databases: &Path,
) -> (DrillDatabase, Option<Failure>) {
    let mut stats = DrillDatabase {
        name: recorded.name.clone(),
        engine: recorded.engine.clone(),
        ..DrillDatabase::default()
    };
    let started = Instant::now();
    let failure = match start(recorded, databases).await {
        Err(error) => {
            stats.error = Some(escaped(&format!("{error:#}")).into_owned());
            Some(Failure::NotDrilled)
        }
        Ok(server) => {
            let checked = load_and_count(repo, root, recorded, &server, &mut stats).await;
            stats.secs = started.elapsed().as_secs_f64();
            // Stopped and removed off the runtime's threads: a stop may wait seconds.
            let _ = tokio::task::spawn_blocking(move || drop(server)).await;
            checked.err().map(|error| {
                stats.error = Some(escaped(&error).into_owned());
                Failure::Differs
            })
        }
    };
    if stats.secs == 0.0 {
        stats.secs = started.elapsed().as_secs_f64();
    }
    (stats, failure)
}

/// Starts the server for `recorded` in `databases/NAME`.
async fn start(recorded: &RecordedDatabase, databases: &Path) -> anyhow::Result<ThrowawayServer> {
    crate::dump::check_name(&recorded.name)?;
    let dir = databases.join(&recorded.name);
    let engine = recorded.engine.clone();
    tokio::task::spawn_blocking(move || ThrowawayServer::start(&engine, &dir))
        .await
        .context("the server's start was interrupted")?
}

/// Loads the dump and counts the recorded tables; `Err` says what failed, in the tools' and the
/// server's own words.
async fn load_and_count(
    repo: &IndexedRepository,
    root: BlobId,
    recorded: &RecordedDatabase,
    server: &ThrowawayServer,
    stats: &mut DrillDatabase,
) -> Result<(), String> {
    let target = server.target_for(&recorded.name);
    let status = Arc::new(DumpStatus::default());
    // A dump of one database may give objects to roles that only its own server has.
    let choices = RestoreChoices {
        overwrite: false,
        create_missing_roles: true,
    };
    let loaded = restore_database(repo, root, &target, choices, status).await;
    let reports = loaded.map_err(|error| {
        format!(
            "the dump did not load into a {} server: {error}",
            server.label()
        )
    })?;
    stats.bytes = reports.iter().map(|report| report.bytes).sum();
    let tables = recorded.tables.clone();
    let counted = tokio::task::spawn_blocking(move || check_rows(&target, &tables, None))
        .await
        .map_err(|error| format!("the count of the rows was interrupted: {error}"))?;
    stats.tables_checked = recorded.tables.len() as u64;
    if counted.is_empty() {
        return Ok(());
    }
    let named: Vec<String> = counted.iter().map(ToString::to_string).collect();
    Err(format!(
        "{} of {} tables do not hold the rows the dump recorded: {}",
        counted.len(),
        recorded.tables.len(),
        named.join("; ")
    ))
}
