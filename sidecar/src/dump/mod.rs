//! Databases: dumps of PostgreSQL and MariaDB/MySQL servers streamed into a snapshot, and
//! restores of them back into a server.
//!
//! A backup runs the dump tool as a child process and chunks its standard output into the
//! snapshot as the file `/databases/NAME/all.sql` (every database of the server) or
//! `/databases/NAME/DBNAME.sql` (one database), through [`dump_source`]: plain SQL, which
//! deduplicates well from one night to the next. The tool's exit status, its standard error and
//! the completion line at the end of its output decide: a failed or truncated dump fails the
//! backup with the tool's own message ([`child::ChildStream`]).
//!
//! A restore ([`restore::restore_database`]) streams that file back into `psql` or `mariadb`.
//!
//! Passwords never appear on a command line: they come from `NEVERWIPED_DB_PASSWORD_<NAME>` or a
//! file, and reach the tools through a private temporary file ([`child::SecretFile`]).

pub mod child;
pub mod mariadb;
pub mod missing_roles;
pub mod older_server;
pub mod postgres;
pub mod record;
pub mod restore;
pub mod row_check;
pub mod rows;
pub mod script;
pub mod uri;

use crate::archive::StreamSource;
use crate::error::{Error, Result};
use child::{ChildStream, DumpStatus};
use std::sync::Arc;
pub use uri::{DatabaseUri, Engine};
use zeroize::Zeroizing;

/// Where dumps live in a snapshot.
pub const SNAPSHOT_DIR: &str = "/databases";

/// The file name of a dump of every database.
pub const ALL_DATABASES_FILE: &str = "all.sql";

/// A database of `--database NAME=URI`, with its password.
#[derive(Clone)]
pub struct DatabaseTarget {
    /// The name of the database in the plan; the dump lives in `/databases/NAME/`.
    pub name: String,
    pub uri: DatabaseUri,
    pub password: Option<Zeroizing<String>>,
}

impl std::fmt::Debug for DatabaseTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseTarget")
            .field("name", &self.name)
            .field("uri", &self.uri.to_string())
            .field("password", &self.password.as_ref().map(|_| "<set>"))
            .finish()
    }
}

impl DatabaseTarget {
    /// The entry's name, and the database when the URI names one (`orders/shop`): what the result
    /// file reports it as.
    pub fn label(&self) -> String {
        match &self.uri.database {
            Some(database) => format!("{}/{database}", self.name),
            None => self.name.clone(),
        }
    }

    /// Checks the name and the password (which must fit in a PGPASSFILE line).
    pub fn new(
        name: &str,
        uri: DatabaseUri,
        password: Option<Zeroizing<String>>,
    ) -> Result<DatabaseTarget> {
        check_name(name)?;
        if let Some(password) = &password {
            check_password(name, password)?;
        }
        Ok(DatabaseTarget {
            name: name.to_owned(),
            uri,
            password,
        })
    }

    /// `/databases/NAME/all.sql` or `/databases/NAME/DBNAME.sql`.
    pub fn snapshot_path(&self) -> String {
        let file = match &self.uri.database {
            Some(database) => format!("{database}.sql"),
            None => ALL_DATABASES_FILE.to_owned(),
        };
        format!("{SNAPSHOT_DIR}/{}/{file}", self.name)
    }
}

/// A password goes into a line of a PGPASSFILE or a MariaDB option file: a line break would end
/// that line and let the rest add an entry or a connection option of its own, and the other
/// control characters have meanings of their own to some parser. None of them is accepted.
fn check_password(name: &str, password: &str) -> Result<()> {
    let problem = if password.is_empty() {
        "is empty"
    } else if password.chars().any(char::is_control) {
        "holds a control character (a line break, a tab, a NUL byte, ...), which the tools' password files cannot carry"
    } else {
        return Ok(());
    };
    Err(Error::DatabasePassword {
        name: name.to_owned(),
        problem,
    })
}

/// A database's name in the plan becomes a folder of the snapshot and part of a variable name:
/// letters, digits, `.`, `_` and `-`, starting with a letter or a digit.
pub fn check_name(name: &str) -> Result<()> {
    let valid = name.len() <= 63
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if valid {
        Ok(())
    } else {
        Err(Error::InvalidDatabaseName {
            name: name.to_owned(),
        })
    }
}

/// The variable holding the password of database `name`: `NEVERWIPED_DB_PASSWORD_` and the name
/// upper-cased, other characters than letters and digits turned into `_`.
pub fn password_variable(name: &str) -> String {
    let suffix: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!(
        "{}{suffix}",
        neverwiped_contract::cli::env::DB_PASSWORD_PREFIX
    )
}

/// A database's dump, as a backup reads it.
pub struct DumpSource {
    /// The stream to back up as [`crate::archive::Source::Stream`]: the tool starts when the
    /// backup first reads it.
    pub source: StreamSource,
    /// How the dump went.
    pub status: Arc<DumpStatus>,
    /// The rows of each table, counted as the stream is read.
    pub rows: Arc<rows::CountedRows>,
}

/// The dump of `target`.
pub fn dump_source(target: &DatabaseTarget) -> Result<DumpSource> {
    let (command, trailer) = match target.uri.engine {
        Engine::Postgres => postgres::dump_command(target)?,
        Engine::MariaDb | Engine::MySql => mariadb::dump_command(target)?,
    };
    let tool = command.tool.clone();
    let stream = ChildStream::new(command, Some(trailer));
    let status = stream.status();
    let reader =
        rows::RowCountingReader::new(stream, target.uri.engine, target.uri.database.clone());
    let rows = reader.counted();
    let source = StreamSource {
        snapshot_path: target.snapshot_path(),
        label: format!("the dump of database {} ({tool})", target.name),
        reader: Box::new(reader),
        may_be_empty: false,
    };
    Ok(DumpSource {
        source,
        status,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_folders_and_variables() {
        assert_eq!(password_variable("main"), "NEVERWIPED_DB_PASSWORD_MAIN");
        assert_eq!(
            password_variable("shop-eu.2"),
            "NEVERWIPED_DB_PASSWORD_SHOP_EU_2"
        );
        for bad in ["", "-x", ".x", "a/b", "a b", "é"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        check_name("Main_1.db-2").unwrap();
    }

    #[test]
    fn dumps_land_under_databases_name() {
        let all = DatabaseTarget::new(
            "main",
            DatabaseUri::parse("postgresql://u@h").unwrap(),
            None,
        )
        .unwrap();
        assert_eq!(all.snapshot_path(), "/databases/main/all.sql");
        let one = DatabaseTarget::new(
            "main",
            DatabaseUri::parse("mariadb://u@h/shop").unwrap(),
            None,
        )
        .unwrap();
        assert_eq!(one.snapshot_path(), "/databases/main/shop.sql");
    }

    #[test]
    fn passwords_must_fit_a_passfile_line() {
        let uri = DatabaseUri::parse("postgresql://u@h").unwrap();
        let with = |pw: &str| {
            DatabaseTarget::new("main", uri.clone(), Some(Zeroizing::new(pw.to_owned())))
        };
        assert!(with("").is_err());
        assert!(with("a\nb").unwrap_err().to_string().contains("line break"));
        with("p\"a ss\\w#rd:é").unwrap();
        assert!(!format!("{:?}", with("hunter2").unwrap()).contains("hunter2"));
    }
}
