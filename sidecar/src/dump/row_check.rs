//! A dump loaded into a server, checked against the rows its snapshot recorded ([`super::rows`]):
//! each recorded table is counted in the server, and every table whose count differs (or that
//! cannot be counted) is a [`RowMismatch`]. This is what a restore drill proves of a database
//! beyond "the dump loaded": the data the dump held is in the tables.
//!
//! The table names come from the snapshot, so each is checked to be nothing but a (qualified)
//! identifier, quoted as the dump tool quotes it, before it reaches a query.

use super::{mariadb, postgres, DatabaseTarget, Engine};
use neverwiped_contract::record::RecordedTable;

/// A table whose rows in the server are not those the snapshot recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowMismatch {
    /// The database it was counted in.
    pub database: String,
    pub table: String,
    pub recorded: u64,
    /// What the server counted, or why it could not.
    pub found: Result<u64, String>,
}

impl std::fmt::Display for RowMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (database, table) = (&self.database, &self.table);
        match &self.found {
            Ok(found) => write!(
                f,
                "{database} {table}: {found} rows, the dump held {}",
                self.recorded
            ),
            Err(error) => write!(f, "{database} {table}: not counted ({error})"),
        }
    }
}

/// Counts each of `tables` in `target`'s server. A dump of one database loaded under another name
/// is counted in `into`; a dump of every database, in the databases it recorded.
pub fn check_rows(
    target: &DatabaseTarget,
    tables: &[RecordedTable],
    into: Option<&str>,
) -> Vec<RowMismatch> {
    let mut mismatches = Vec::new();
    for table in tables {
        let database = into.unwrap_or(&table.database).to_owned();
        let found = count(target, &database, &table.table);
        if found.as_ref().ok() != Some(&table.rows) {
            mismatches.push(RowMismatch {
                database,
                table: table.table.clone(),
                recorded: table.rows,
                found,
            });
        }
    }
    mismatches
}

/// `SELECT count(*)` of `table` in `database`.
fn count(target: &DatabaseTarget, database: &str, table: &str) -> Result<u64, String> {
    let rows = match target.uri.engine {
        Engine::Postgres => {
            check_identifiers(table, '"')?;
            postgres::query(target, database, &format!("SELECT count(*) FROM {table}"))
        }
        Engine::MariaDb | Engine::MySql => {
            check_identifiers(table, '`')?;
            let database = format!("`{}`", database.replace('`', "``"));
            mariadb::query(target, &format!("SELECT count(*) FROM {database}.{table}"))
        }
    };
    let rows: crate::error::Result<Vec<String>> = rows;
    let rows = rows.map_err(|e| crate::text::escaped(&e.to_string()).into_owned())?;
    let first = rows.first().map(|row| row.trim());
    first
        .and_then(|row| row.parse().ok())
        .ok_or_else(|| format!("the server answered {rows:?}"))
}

/// Whether `name` is one or more identifiers joined by `.`, each plain (letters, digits, `_`,
/// `$`) or quoted with `quote` (a quote inside doubled).
fn check_identifiers(name: &str, quote: char) -> Result<(), String> {
    let mut chars = name.chars().peekable();
    loop {
        match chars.next() {
            Some(c) if c == quote => loop {
                match chars.next() {
                    Some(c) if c == quote && chars.peek() == Some(&quote) => {
                        chars.next();
                    }
                    Some(c) if c == quote => break,
                    Some(c) if !c.is_control() => {}
                    _ => return Err(format!("{name:?} is not a table name")),
                }
            },
            Some(c) if c.is_alphanumeric() || c == '_' => {
                while chars
                    .peek()
                    .is_some_and(|c| c.is_alphanumeric() || *c == '_' || *c == '$')
                {
                    chars.next();
                }
            }
            _ => return Err(format!("{name:?} is not a table name")),
        }
        match chars.next() {
            None => return Ok(()),
            Some('.') => {}
            Some(_) => return Err(format!("{name:?} is not a table name")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_identifiers_as_the_dump_tools_quote_them_are_table_names() {
        for good in [
            "public.orders",
            "\"Sales\".\"Q1 \"\"big\"\"\"",
            "t$1.x_2",
            "\"a.b\"",
        ] {
            assert_eq!(check_identifiers(good, '"'), Ok(()), "{good}");
        }
        for good in ["`orders`", "`odd``name`", "orders"] {
            assert_eq!(check_identifiers(good, '`'), Ok(()), "{good}");
        }
        for bad in [
            "",
            "public.",
            "t; DROP TABLE t",
            "\"open",
            "a b",
            "t--",
            "(SELECT 1)",
            "\"a\"x",
            "\"line\nbreak\"",
        ] {
            assert!(check_identifiers(bad, '"').is_err(), "{bad:?}");
        }
        assert!(check_identifiers("`t`; DROP TABLE `t`", '`').is_err());
        assert!(check_identifiers("\"t\"", '`').is_err());
    }
}
