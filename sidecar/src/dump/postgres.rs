//! PostgreSQL: `pg_dumpall` (every database and the roles) or `pg_dump` (one database) in plain
//! SQL, restored with `psql -v ON_ERROR_STOP=1`.
//!
//! The password reaches the tools only through a private PGPASSFILE; `PGPASSWORD` and the
//! variables that could point them at another server are removed from their environment.
//!
//! # Roles on restore
//!
//! `pg_dumpall` writes `CREATE ROLE x;` followed by `ALTER ROLE x WITH … PASSWORD …;` for every
//! role, the bootstrap superuser included, expecting the `CREATE` to fail for roles that exist
//! (psql without `ON_ERROR_STOP`). A restore must stop at the first real error, so the restore
//! rewrites the roles section (the globals before the first `\connect`, which hold no data):
//!
//! - `CREATE ROLE x;` becomes a `DO` block that creates the role unless it exists; the
//!   `ALTER ROLE` that follows then sets its attributes and password as dumped.
//! - The role the restore connects as is left as the target has it: its `CREATE ROLE` and
//!   `ALTER ROLE … WITH …` lines are skipped, so the restore never changes the password it is
//!   using (which the following `\connect`s need) nor the operator's credentials.
//!
//! Everything after the globals streams through unchanged.
//!
//! # One database
//!
//! A `pg_dump` dump holds a database's contents, not the database itself (no `--create`), so that
//! it restores under any name: into an existing empty database (create it first to choose its
//! owner and settings), or into one the restore creates (from `template0`, owned by the restoring
//! role). psql runs it in a single transaction. The roles it names must exist on the target; a
//! dump of every database carries them, and the databases' owners, settings and privileges.

use super::child::{find_program, SecretFile, ToolCommand, Trailer};
use super::older_server::{OlderServerFilter, TRANSACTION_TIMEOUT_SINCE};
use super::script::{PassThrough, PreparedRestore, ScriptFilter};
use super::uri::DatabaseUri;
use super::DatabaseTarget;
use crate::error::{Error, Result};
use zeroize::Zeroizing;

/// Variables of libpq that would send the tools elsewhere or supply another password.
const ENV_REMOVE: [&str; 9] = [
    "PGHOST",
    "PGHOSTADDR",
    "PGPORT",
    "PGUSER",
    "PGDATABASE",
    "PGPASSWORD",
    "PGPASSFILE",
    "PGSERVICE",
    "PGSERVICEFILE",
];

/// Seconds libpq waits for a connection, unless `PGCONNECT_TIMEOUT` says otherwise.
const CONNECT_TIMEOUT_SECS: &str = "30";

pub const CLUSTER_TRAILER: Trailer = Trailer {
    marker: "-- PostgreSQL database cluster dump complete",
    whole_line: true,
};
pub const DATABASE_TRAILER: Trailer = Trailer {
    marker: "-- PostgreSQL database dump complete",
    whole_line: true,
};

/// The databases a restore never lists as occupying a server.
const SYSTEM_DATABASES: &str = "'template0', 'template1', 'postgres'";

/// A `.pgpass` line matching any server, database and user: the file serves one child only.
pub fn pgpass_line(password: &str) -> Zeroizing<String> {
    let mut line = Zeroizing::new(String::from("*:*:*:*:"));
    for c in password.chars() {
        if c == '\\' || c == ':' {
            line.push('\\');
        }
        line.push(c);
    }
    line.push('\n');
    line
}

/// A libpq connection string naming only a database: a name with `=` or a URI prefix cannot be
/// taken for a connection string of its own.
pub fn dbname_conninfo(database: &str) -> String {
    format!(
        "dbname='{}'",
        database.replace('\\', "\\\\").replace('\'', "\\'")
    )
}

/// An identifier quoted for SQL.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A string literal for SQL (standard_conforming_strings is on since PostgreSQL 9.1).
pub fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

fn tool(name: &str, target: &DatabaseTarget) -> Result<ToolCommand> {
    let program = find_program(name).ok_or_else(|| Error::DatabaseToolMissing {
        tools: name.to_owned(),
        package: "the PostgreSQL client tools (Debian: postgresql-client)",
        database: target.name.clone(),
    })?;
    let uri = &target.uri;
    let mut command = ToolCommand::new(name, program);
    command
        .arg(format!("--host={}", uri.host))
        .arg(format!("--port={}", uri.port()))
        .arg(format!("--username={}", uri.user))
        .arg("--no-password");
    command.env_remove = ENV_REMOVE.to_vec();
    if std::env::var_os("PGCONNECT_TIMEOUT").is_none() {
        command
            .env
            .push(("PGCONNECT_TIMEOUT".into(), CONNECT_TIMEOUT_SECS.into()));
    }
    command.env.push(("PGAPPNAME".into(), "neverwiped".into()));
    if let Some(password) = &target.password {
        let secret = SecretFile::create("pgpass", pgpass_line(password).as_bytes())
            .map_err(|e| Error::io("writing a private PGPASSFILE", e))?;
        command
            .env
            .push(("PGPASSFILE".into(), secret.path().into()));
        command.secret = Some(secret);
    }
    Ok(command)
}

/// `pg_dumpall` for a URI without a database, else `pg_dump` of the database; plain SQL.
pub fn dump_command(target: &DatabaseTarget) -> Result<(ToolCommand, Trailer)> {
    match &target.uri.database {
        None => Ok((tool("pg_dumpall", target)?, CLUSTER_TRAILER)),
        Some(database) => {
            let mut command = tool("pg_dump", target)?;
            command.arg(format!("--dbname={}", dbname_conninfo(database)));
            Ok((command, DATABASE_TRAILER))
        }
    }
}

/// `psql` connected to `database`, stopping at the first error, reading SQL from its input.
fn psql(target: &DatabaseTarget, database: &str) -> Result<ToolCommand> {
    let mut command = tool("psql", target)?;
    command
        .arg("--no-psqlrc")
        .arg("--quiet")
        .arg("--set=ON_ERROR_STOP=1")
        .arg(format!("--dbname={}", dbname_conninfo(database)));
    Ok(command)
}

/// Runs one SQL command with psql in `database`; the rows, one per line, fields tab-separated.
pub fn query(target: &DatabaseTarget, database: &str, sql: &str) -> Result<Vec<String>> {
    let mut command = psql(target, database)?;
    command
        .arg("--tuples-only")
        .arg("--no-align")
        .arg("--field-separator=\t")
        .arg(format!("--command={sql}"));
    let what = format!(
        "querying {} ({})",
        target.uri.with_database(Some(database.to_owned())),
        target.name
    );
    let output = command
        .output(b"")
        .map_err(|e| Error::Io { what, source: e })?;
    Ok(String::from_utf8_lossy(&output)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect())
}

/// How many objects a user made in a database (tables, views, sequences, functions, schemas,
/// extensions); 0 for a fresh one.
pub fn user_objects(target: &DatabaseTarget, database: &str) -> Result<u64> {
    let sql = "SELECT \
        (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
           WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname !~ '^pg_(toast|temp_)') \
      + (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
           WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')) \
      + (SELECT count(*) FROM pg_namespace \
           WHERE nspname NOT IN ('pg_catalog', 'information_schema', 'public') AND nspname !~ '^pg_(toast|temp_)') \
      + (SELECT count(*) FROM pg_extension WHERE extname <> 'plpgsql')";
    let rows = query(target, database, sql)?;
    Ok(rows
        .first()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0))
}

fn server_version(target: &DatabaseTarget) -> Result<u32> {
    let rows = query(target, "postgres", "SHOW server_version_num")?;
    Ok(rows
        .first()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0))
}

fn drop_database(target: &DatabaseTarget, database: &str, from: &str) -> Result<()> {
    // WITH (FORCE) (PostgreSQL 13) ends the sessions still connected to it.
    let force = if server_version(target)? >= 130000 {
        " WITH (FORCE)"
    } else {
        ""
    };
    query(
        target,
        from,
        &format!("DROP DATABASE {}{force}", quote_ident(database)),
    )?;
    Ok(())
}

fn refuse(target: &DatabaseTarget, occupied: &[String]) -> Error {
    Error::TargetServerNotEmpty {
        server: target.uri.to_string(),
        occupied: occupied.join(", "),
        entry: target.name.clone(),
    }
}

/// Prepares the restore of a `pg_dumpall` dump: checks that the server holds no databases (or
/// drops them when `overwrite`), then `psql` with the roles filter.
pub fn prepare_cluster_restore(
    target: &DatabaseTarget,
    overwrite: bool,
) -> Result<PreparedRestore> {
    let databases = query(
        target,
        "postgres",
        &format!(
            "SELECT datname FROM pg_database WHERE datname NOT IN ({SYSTEM_DATABASES}) ORDER BY 1"
        ),
    )?;
    let postgres_used = user_objects(target, "postgres")? > 0;
    let mut occupied: Vec<String> = databases.iter().map(|d| format!("database {d}")).collect();
    if postgres_used {
        occupied.push("objects in the database postgres".into());
    }
    let mut dropped = Vec::new();
    if !occupied.is_empty() {
        if !overwrite {
            return Err(refuse(target, &occupied));
        }
        for database in &databases {
            drop_database(target, database, "postgres")?;
            dropped.push(database.clone());
        }
        if postgres_used {
            // pg_dumpall restores into the existing postgres database: recreate it empty.
            drop_database(target, "postgres", "template1")?;
            query(
                target,
                "template1",
                "CREATE DATABASE postgres TEMPLATE template0",
            )?;
            dropped.push("postgres".into());
        }
    }
    Ok(PreparedRestore {
        command: psql(target, "postgres")?,
        filter: for_server(target, Box::new(ClusterScriptFilter::new(&target.uri)))?,
        database: None,
        dropped,
    })
}

/// Prepares the restore of a `pg_dump` dump into `database`: created when missing, refused when
/// it holds objects (dropped and created again when `overwrite`). psql runs it in one
/// transaction: a failed restore leaves the database as it was.
pub fn prepare_database_restore(
    target: &DatabaseTarget,
    database: &str,
    overwrite: bool,
) -> Result<PreparedRestore> {
    let exists = !query(
        target,
        "postgres",
        &format!(
            "SELECT 1 FROM pg_database WHERE datname = {}",
            quote_literal(database)
        ),
    )?
    .is_empty();
    let mut dropped = Vec::new();
    let mut create = !exists;
    if exists && user_objects(target, database)? > 0 {
        if !overwrite {
            return Err(refuse(
                target,
                &[format!("database {database} (not empty)")],
            ));
        }
        drop_database(target, database, "postgres")?;
        dropped.push(database.to_owned());
        create = true;
    }
    if create {
        query(
            target,
            "postgres",
            &format!(
                "CREATE DATABASE {} TEMPLATE template0",
                quote_ident(database)
            ),
        )?;
    }
    let mut command = psql(target, database)?;
    command.arg("--single-transaction");
    Ok(PreparedRestore {
        command,
        filter: for_server(target, Box::new(PassThrough))?,
        database: Some(database.to_owned()),
        dropped,
    })
}

/// `filter`, behind the one that leaves out what the server's version refuses of a newer
/// pg_dump's script (see [`OlderServerFilter`]).
fn for_server(
    target: &DatabaseTarget,
    filter: Box<dyn ScriptFilter>,
) -> Result<Box<dyn ScriptFilter>> {
    if server_version(target)? >= TRANSACTION_TIMEOUT_SINCE {
        return Ok(filter);
    }
    Ok(Box::new(OlderServerFilter::new(filter)))
}

/// Parses the role name at the start of `text` as pg_dumpall writes it (`fmtId`): a quoted
/// identifier with `""` for `"`, or a plain lower-case one. Returns it and the rest.
pub fn parse_ident(text: &str) -> Option<(String, &str)> {
    if let Some(quoted) = text.strip_prefix('"') {
        let mut name = String::new();
        let mut chars = quoted.char_indices().peekable();
        while let Some((index, c)) = chars.next() {
            if c == '"' {
                if let Some((_, '"')) = chars.peek() {
                    chars.next();
                    name.push('"');
                    continue;
                }
                return Some((name, &quoted[index + 1..]));
            }
            name.push(c);
        }
        return None;
    }
    let end = text
        .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '$'))
        .unwrap_or(text.len());
    (end > 0).then(|| (text[..end].to_owned(), &text[end..]))
}

/// The roles filter of a `pg_dumpall` restore (see the module's documentation).
pub struct ClusterScriptFilter {
    connecting_role: String,
    in_globals: bool,
    pending: Vec<u8>,
}

const DO_TAG: &str = "$neverwiped_role$";

impl ClusterScriptFilter {
    pub fn new(uri: &DatabaseUri) -> ClusterScriptFilter {
        ClusterScriptFilter {
            connecting_role: uri.user.clone(),
            in_globals: true,
            pending: Vec::new(),
        }
    }

    fn rewrite_line(&self, line: &[u8], out: &mut Vec<u8>) {
        let Ok(text) = std::str::from_utf8(line) else {
            out.extend_from_slice(line);
            return;
        };
        let body = text.trim_end_matches(['\n', '\r']);
        if let Some(rest) = body.strip_prefix("CREATE ROLE ") {
            if let Some((role, ";")) = parse_ident(rest) {
                if role == self.connecting_role {
                    out.extend_from_slice(
                        format!("-- neverwiped: role {role} exists, the restore connects as it\n")
                            .as_bytes(),
                    );
                    return;
                }
                if !body.contains(DO_TAG) {
                    let statement = format!(
                        "DO {DO_TAG}BEGIN {body} EXCEPTION WHEN duplicate_object THEN NULL; END{DO_TAG};\n"
                    );
                    out.extend_from_slice(statement.as_bytes());
                    return;
                }
            }
        }
        if let Some(rest) = body.strip_prefix("ALTER ROLE ") {
            if let Some((role, rest)) = parse_ident(rest) {
                if role == self.connecting_role && rest.starts_with(" WITH ") {
                    out.extend_from_slice(
                        format!(
                            "-- neverwiped: attributes of {role} kept as the target has them\n"
                        )
                        .as_bytes(),
                    );
                    return;
                }
            }
        }
        out.extend_from_slice(line);
    }
}

impl ScriptFilter for ClusterScriptFilter {
    fn push(&mut self, data: &[u8], out: &mut Vec<u8>) {
        if !self.in_globals {
            out.extend_from_slice(data);
            return;
        }
        self.pending.extend_from_slice(data);
        let mut start = 0;
        while let Some(newline) = memchr::memchr(b'\n', &self.pending[start..]) {
            let end = start + newline + 1;
            let line = &self.pending[start..end];
            if line.starts_with(b"\\connect ") {
                // The databases begin: from here on the dump passes unchanged.
                self.in_globals = false;
                out.extend_from_slice(&self.pending[start..]);
                self.pending.clear();
                return;
            }
            self.rewrite_line(line, out);
            start = end;
        }
        self.pending.drain(..start);
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        let pending = std::mem::take(&mut self.pending);
        if self.in_globals && !pending.is_empty() {
            self.rewrite_line(&pending, out);
        } else {
            out.extend_from_slice(&pending);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgpass_escapes_colons_and_backslashes() {
        assert_eq!(pgpass_line("a:b\\c").as_str(), "*:*:*:*:a\\:b\\\\c\n");
    }

    #[test]
    fn database_names_are_passed_as_a_quoted_conninfo() {
        assert_eq!(dbname_conninfo("shop"), "dbname='shop'");
        assert_eq!(
            dbname_conninfo("it's host=evil"),
            "dbname='it\\'s host=evil'"
        );
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_literal("o'k"), "'o''k'");
    }

    #[test]
    fn identifiers_parse_as_pg_dumpall_writes_them() {
        assert_eq!(parse_ident("admin;"), Some(("admin".into(), ";")));
        assert_eq!(
            parse_ident("\"Ad\"\"min\" WITH"),
            Some(("Ad\"min".into(), " WITH"))
        );
        assert_eq!(parse_ident("\"unterminated"), None);
        assert_eq!(parse_ident(";"), None);
    }

    fn filtered(input: &str, user: &str, piece: usize) -> String {
        let uri = DatabaseUri::parse(&format!("postgresql://{user}@h")).unwrap();
        let mut filter = ClusterScriptFilter::new(&uri);
        let mut out = Vec::new();
        for chunk in input.as_bytes().chunks(piece) {
            filter.push(chunk, &mut out);
        }
        filter.finish(&mut out);
        String::from_utf8(out).unwrap()
    }

    const DUMP: &str = "--\n-- PostgreSQL database cluster dump\n--\n\n\\restrict KEY\n\nSET default_transaction_read_only = off;\n\n\
CREATE ROLE admin;\nALTER ROLE admin WITH SUPERUSER INHERIT CREATEROLE CREATEDB LOGIN PASSWORD 'SCRAM-x';\n\
CREATE ROLE \"App Owner\";\nALTER ROLE \"App Owner\" WITH NOSUPERUSER LOGIN PASSWORD 'SCRAM-y';\n\
ALTER ROLE admin SET search_path TO public;\n\\unrestrict KEY\n\n\\connect template1\n\n\
COPY t (v) FROM stdin;\nCREATE ROLE admin;\n\\.\n";

    #[test]
    fn the_roles_filter_creates_missing_roles_and_leaves_the_connecting_one_alone() {
        for piece in [1, 7, 4096] {
            let out = filtered(DUMP, "admin", piece);
            let (globals, databases) = out.split_once("\\connect template1\n").unwrap();
            assert!(
                globals.contains("-- neverwiped: role admin exists"),
                "{globals}"
            );
            assert!(!globals.contains("ALTER ROLE admin WITH"), "{globals}");
            assert!(
                globals.contains("ALTER ROLE admin SET search_path TO public;"),
                "settings stay: {globals}"
            );
            assert!(
                globals.contains(
                    "DO $neverwiped_role$BEGIN CREATE ROLE \"App Owner\"; EXCEPTION WHEN duplicate_object THEN NULL; END$neverwiped_role$;\n"
                ),
                "{globals}"
            );
            assert!(globals
                .contains("ALTER ROLE \"App Owner\" WITH NOSUPERUSER LOGIN PASSWORD 'SCRAM-y';\n"));
            assert!(globals.contains("\\restrict KEY\n") && globals.contains("\\unrestrict KEY\n"));
            assert_eq!(
                databases, "\nCOPY t (v) FROM stdin;\nCREATE ROLE admin;\n\\.\n",
                "data passes unchanged"
            );
        }
    }

    #[test]
    fn restoring_as_another_role_creates_the_dumped_superuser_if_missing() {
        let out = filtered(DUMP, "postgres", 13);
        assert!(
            out.contains("DO $neverwiped_role$BEGIN CREATE ROLE admin;"),
            "{out}"
        );
        assert!(out.contains("ALTER ROLE admin WITH SUPERUSER"), "{out}");
    }
}
