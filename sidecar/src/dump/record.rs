//! What a snapshot records of a database it dumps: its engine, its server's version and the
//! databases the dump holds, asked of the server just before the dump starts.

use super::{mariadb, postgres, DatabaseTarget, Engine};
use crate::error::Result;
use neverwiped_contract::record::RecordedDatabase;

/// The database the queries connect to when the URI names none: every PostgreSQL server has it.
const POSTGRES_MAINTENANCE_DATABASE: &str = "postgres";

/// What the snapshot records of `target`. A server that cannot be asked is recorded by its
/// engine alone: the dump that follows fails with the tool's own words if the server is gone.
pub fn describe(target: &DatabaseTarget) -> RecordedDatabase {
    let asked = ask(target);
    if let Err(error) = &asked {
        let error = error.to_string();
        let error = crate::text::escaped(&error);
        tracing::warn!(database = %target.name, "the server's version and databases are not recorded: {error}");
    }
    let (server_version, databases) = asked.unwrap_or_default();
    RecordedDatabase {
        name: target.name.clone(),
        engine: target.uri.engine.scheme().to_owned(),
        server_version,
        databases,
        // Counted as the dump streams (`super::rows`).
        tables: Vec::new(),
        unknown: Default::default(),
    }
}

/// The server's version and the databases the dump holds.
fn ask(target: &DatabaseTarget) -> Result<(Option<String>, Vec<String>)> {
    let named = target.uri.database.clone();
    let answer = match target.uri.engine {
        Engine::Postgres => {
            let connect = named.as_deref().unwrap_or(POSTGRES_MAINTENANCE_DATABASE);
            let version = first_row(postgres::query(target, connect, "SHOW server_version")?);
            let databases = match named {
                Some(database) => vec![database],
                None => postgres::query(
                    target,
                    connect,
                    "SELECT datname FROM pg_database WHERE NOT datistemplate ORDER BY 1",
                )?,
            };
            (version, databases)
        }
        Engine::MariaDb | Engine::MySql => {
            let version = first_row(mariadb::query(target, "SELECT VERSION()")?);
            let databases = match named {
                Some(database) => vec![database],
                None => mariadb::query(
                    target,
                    &format!(
                        "SELECT schema_name FROM information_schema.schemata \
                         WHERE schema_name NOT IN ({}) ORDER BY 1",
                        mariadb::SYSTEM_SCHEMAS
                    ),
                )?,
            };
            (version, databases)
        }
    };
    Ok(answer)
}

fn first_row(rows: Vec<String>) -> Option<String> {
    rows.into_iter().next()
}
