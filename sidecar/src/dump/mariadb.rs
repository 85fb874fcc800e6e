//! MariaDB and MySQL: `mariadb-dump` (or `mysqldump`) with `--single-transaction`, routines,
//! events and triggers, of every database or one; restored with `mariadb` (or `mysql`).
//!
//! The password reaches the tools only through a private option file given as
//! `--defaults-extra-file` (which must be their first argument); `MYSQL_PWD` is removed from their
//! environment.
//!
//! # Users on restore
//!
//! A `mariadb://` dump of every database is made with `--system=users`: accounts, roles and grants
//! are dumped as `CREATE USER` / `GRANT` statements rather than as the rows of the `mysql` tables.
//! `CREATE USER` fails for an account that exists (`root@localhost` always does), so the restore
//! rewrites those statements to `CREATE USER IF NOT EXISTS`; the grants that follow then set the
//! account's password and privileges as dumped. A dumped role is made with `CREATE OR REPLACE
//! ROLE … WITH ADMIN mariadb_dump_import_role`, so that the grants of it that follow are allowed
//! even when it existed (they give its privileges and members back). The account
//! the restore connects as is left as the target has it: its `CREATE USER`, `GRANT`, default-role
//! lines are skipped, so the restore never replaces the password it is using. Only lines outside
//! `DELIMITER ;;` blocks (routine, trigger and event bodies) are looked at; table data lines start
//! with `(` or `INSERT` and are never touched.
//!
//! A dump of one database has no `CREATE DATABASE` / `USE` (no `--databases`), so that it restores
//! under any name: into an existing database without tables, or one the restore creates with the
//! server's default character set (the tables keep their own).
//!
//! A `mysql://` dump is what `mysqldump --all-databases` always made: the `mysql` schema as tables
//! (with `--flush-privileges`), restored as such.

use super::child::{find_program, SecretFile, ToolCommand, Trailer};
use super::script::{PassThrough, PreparedRestore, ScriptFilter};
use super::uri::Engine;
use super::DatabaseTarget;
use crate::error::{Error, Result};
use zeroize::Zeroizing;

/// Variables of the MariaDB/MySQL clients that would supply a password or another server.
const ENV_REMOVE: [&str; 4] = [
    "MYSQL_PWD",
    "MYSQL_HOST",
    "MYSQL_TCP_PORT",
    "MYSQL_UNIX_PORT",
];

pub const TRAILER: Trailer = Trailer {
    marker: "-- Dump completed",
    whole_line: false,
};

/// Schemas that belong to the server, never listed as occupying it.
pub(crate) const SYSTEM_SCHEMAS: &str =
    "'mysql', 'information_schema', 'performance_schema', 'sys'";

/// The same schemas, by name: the server's own, whose tables are not the application's.
pub(crate) const SYSTEM_SCHEMA_NAMES: [&str; 4] =
    ["mysql", "information_schema", "performance_schema", "sys"];

/// The option file holding the password: `[client]` is read by every client tool.
pub fn option_file(password: &str) -> Zeroizing<String> {
    let mut text = Zeroizing::new(String::from("[client]\npassword=\""));
    for c in password.chars() {
        match c {
            '\\' => text.push_str("\\\\"),
            '"' => text.push_str("\\\""),
            c => text.push(c),
        }
    }
    text.push_str("\"\n");
    text
}

/// An identifier quoted with backticks.
pub fn quote_ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// The first of the programs found on PATH.
fn find_first(names: &[&'static str]) -> Option<(&'static str, std::path::PathBuf)> {
    names
        .iter()
        .find_map(|name| find_program(name).map(|path| (*name, path)))
}

fn tool(names: &[&'static str], target: &DatabaseTarget) -> Result<ToolCommand> {
    let (name, program) = find_first(names).ok_or_else(|| Error::DatabaseToolMissing {
        tools: names.join(" or "),
        package: "the MariaDB client tools (Debian: mariadb-client)",
        database: target.name.clone(),
    })?;
    let uri = &target.uri;
    let mut command = ToolCommand::new(name, program);
    if let Some(password) = &target.password {
        let secret = SecretFile::create("client.cnf", option_file(password).as_bytes())
            .map_err(|e| Error::io("writing a private MariaDB option file", e))?;
        // Must come first, or the tools refuse it.
        command.arg(format!("--defaults-extra-file={}", secret.path().display()));
        command.secret = Some(secret);
    }
    command
        .arg("--protocol=TCP")
        .arg(format!("--host={}", uri.host))
        .arg(format!("--port={}", uri.port()))
        .arg(format!("--user={}", uri.user));
    command.env_remove = ENV_REMOVE.to_vec();
    Ok(command)
}

/// Whether a dump tool is MariaDB's (which knows `--system`), asked once per dump.
fn is_mariadb_tool(command: &ToolCommand) -> bool {
    std::process::Command::new(&command.program)
        .arg("--version")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).contains("MariaDB"))
        .unwrap_or(false)
}

/// `mariadb-dump` (else `mysqldump`) of every database or of one.
pub fn dump_command(target: &DatabaseTarget) -> Result<(ToolCommand, Trailer)> {
    let mut command = tool(&["mariadb-dump", "mysqldump"], target)?;
    command
        .arg("--single-transaction")
        .arg("--routines")
        .arg("--events")
        .arg("--triggers");
    match &target.uri.database {
        None => {
            command.arg("--all-databases");
            match target.uri.engine {
                Engine::MariaDb if is_mariadb_tool(&command) => {
                    command.arg("--system=users");
                }
                _ => {
                    command.arg("--flush-privileges");
                }
            }
        }
        Some(database) => {
            // Without --databases: no CREATE DATABASE / USE, so that it restores under any name.
            command.arg("--").arg(database);
        }
    }
    Ok((command, TRAILER))
}

/// The client, stopping at the first error (its default), reading SQL from its input.
fn client(target: &DatabaseTarget, database: Option<&str>) -> Result<ToolCommand> {
    let mut command = tool(&["mariadb", "mysql"], target)?;
    // Binary mode: no client commands but DELIMITER in the dump, NUL bytes pass.
    command
        .arg("--binary-mode")
        .arg("--max-allowed-packet=1073741824")
        .arg("--connect-timeout=30");
    if let Some(database) = database {
        command.arg(format!("--database={database}"));
    }
    Ok(command)
}

/// Runs SQL with the client; the rows, one per line, fields tab-separated.
pub fn query(target: &DatabaseTarget, sql: &str) -> Result<Vec<String>> {
    let mut command = client(target, None)?;
    command
        .arg("--batch")
        .arg("--skip-column-names")
        .arg(format!("--execute={sql}"));
    let what = format!(
        "querying {} ({})",
        target.uri.with_database(None),
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

/// The databases of the server with their count of tables, views, routines and events.
fn schemas(target: &DatabaseTarget) -> Result<Vec<(String, u64)>> {
    let sql = format!(
        "SELECT s.schema_name, \
           (SELECT count(*) FROM information_schema.tables t WHERE t.table_schema = s.schema_name) \
         + (SELECT count(*) FROM information_schema.routines r WHERE r.routine_schema = s.schema_name) \
         + (SELECT count(*) FROM information_schema.events e WHERE e.event_schema = s.schema_name) \
         FROM information_schema.schemata s WHERE s.schema_name NOT IN ({SYSTEM_SCHEMAS}) ORDER BY 1"
    );
    Ok(query(target, &sql)?
        .into_iter()
        .filter_map(|row| {
            let (name, count) = row.rsplit_once('\t')?;
            Some((name.to_owned(), count.trim().parse().unwrap_or(0)))
        })
        .collect())
}

fn refuse(target: &DatabaseTarget, occupied: &[String]) -> Error {
    Error::TargetServerNotEmpty {
        server: target.uri.with_database(None).to_string(),
        occupied: occupied.join(", "),
        entry: target.name.clone(),
    }
}

/// The account the client is logged in as, `user@host` split.
fn current_account(target: &DatabaseTarget) -> Result<Option<(String, String)>> {
    let rows = query(target, "SELECT CURRENT_USER()")?;
    Ok(rows
        .first()
        .and_then(|a| a.rsplit_once('@'))
        .map(|(u, h)| (u.to_owned(), h.to_owned())))
}

/// Prepares the restore of a dump of every database: refused when the server holds databases
/// with objects (dropped when `overwrite`); the users filter for `mariadb://` dumps.
pub fn prepare_all_restore(target: &DatabaseTarget, overwrite: bool) -> Result<PreparedRestore> {
    let occupied: Vec<String> = schemas(target)?
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(name, _)| name)
        .collect();
    let mut dropped = Vec::new();
    if !occupied.is_empty() {
        if !overwrite {
            let listed: Vec<String> = occupied.iter().map(|d| format!("database {d}")).collect();
            return Err(refuse(target, &listed));
        }
        for database in &occupied {
            query(target, &format!("DROP DATABASE {}", quote_ident(database)))?;
            dropped.push(database.clone());
        }
    }
    let account = current_account(target)?;
    Ok(PreparedRestore {
        command: client(target, None)?,
        filter: Box::new(UsersScriptFilter::new(account)),
        database: None,
        dropped,
    })
}

/// Prepares the restore of one database's dump into `database`: created when missing, refused
/// when it holds objects (dropped and created again when `overwrite`).
pub fn prepare_database_restore(
    target: &DatabaseTarget,
    database: &str,
    overwrite: bool,
) -> Result<PreparedRestore> {
    let existing = schemas(target)?
        .into_iter()
        .find(|(name, _)| name == database);
    let mut dropped = Vec::new();
    if let Some((_, objects)) = existing {
        if objects > 0 {
            if !overwrite {
                return Err(refuse(
                    target,
                    &[format!("database {database} (not empty)")],
                ));
            }
            query(target, &format!("DROP DATABASE {}", quote_ident(database)))?;
            dropped.push(database.to_owned());
        }
    }
    query(
        target,
        &format!("CREATE DATABASE IF NOT EXISTS {}", quote_ident(database)),
    )?;
    Ok(PreparedRestore {
        command: client(target, Some(database))?,
        filter: Box::new(PassThrough),
        database: Some(database.to_owned()),
        dropped,
    })
}

/// The users filter of a restore (see the module's documentation).
pub struct UsersScriptFilter {
    /// The connecting account as the dump writes it: `` `u`@`h` `` and `'u'@'h'`.
    account: Option<(String, String)>,
    in_routine: bool,
    pending: Vec<u8>,
}

impl UsersScriptFilter {
    pub fn new(account: Option<(String, String)>) -> UsersScriptFilter {
        let account = account.map(|(user, host)| {
            (
                format!("{}@{}", quote_ident(&user), quote_ident(&host)),
                format!(
                    "'{}'@'{}'",
                    user.replace('\'', "\\'"),
                    host.replace('\'', "\\'")
                ),
            )
        });
        UsersScriptFilter {
            account,
            in_routine: false,
            pending: Vec::new(),
        }
    }

    fn is_connecting_account(&self, body: &str) -> bool {
        let Some((backticked, quoted)) = &self.account else {
            return false;
        };
        let names =
            |rest: &str| rest.starts_with(backticked.as_str()) || rest.starts_with(quoted.as_str());
        if let Some(rest) = body.strip_prefix("CREATE USER ") {
            return names(rest.strip_prefix("IF NOT EXISTS ").unwrap_or(rest));
        }
        if body.starts_with("GRANT ") || body.starts_with("/*M!100005 GRANT ") {
            return body.contains(&format!(" TO {backticked}"))
                || body.contains(&format!(" TO {quoted}"));
        }
        if body.starts_with("/*M!100005 SET DEFAULT ROLE ") {
            return body.contains(&format!(" FOR {quoted}"))
                || body.contains(&format!(" FOR {backticked}"));
        }
        if let Some(rest) = body.strip_prefix("/*!80001 ALTER USER ") {
            return names(rest);
        }
        false
    }

    fn rewrite_line(&mut self, line: &[u8], out: &mut Vec<u8>) {
        // Data lines are most of a dump: decide on their first bytes.
        if line.first() == Some(&b'(') || line.starts_with(b"INSERT ") {
            out.extend_from_slice(line);
            return;
        }
        let Ok(text) = std::str::from_utf8(line) else {
            out.extend_from_slice(line);
            return;
        };
        let body = text.trim_end_matches(['\n', '\r']);
        match body {
            "DELIMITER ;;" => self.in_routine = true,
            "DELIMITER ;" => self.in_routine = false,
            _ => {}
        }
        if self.in_routine {
            out.extend_from_slice(line);
            return;
        }
        if self.is_connecting_account(body) {
            out.extend_from_slice(
                b"-- neverwiped: the connecting account is kept as the target has it\n",
            );
            return;
        }
        // A dumped role is made again, administered by mariadb-dump's import role, so that the
        // grants of it that follow are allowed even when the role already existed.
        if let Some(rest) = body.strip_prefix("/*M!100005 CREATE ROLE ") {
            if !rest.starts_with("IF NOT EXISTS ") && !rest.starts_with("OR REPLACE ") {
                out.extend_from_slice(b"/*M!100005 CREATE OR REPLACE ROLE ");
                out.extend_from_slice(&line["/*M!100005 CREATE ROLE ".len()..]);
                return;
            }
        }
        for prefix in ["CREATE USER ", "CREATE ROLE ", "/*!80001 CREATE ROLE "] {
            if let Some(rest) = body.strip_prefix(prefix) {
                if !rest.starts_with("IF NOT EXISTS ") {
                    out.extend_from_slice(prefix.as_bytes());
                    out.extend_from_slice(b"IF NOT EXISTS ");
                    out.extend_from_slice(&line[prefix.len()..]);
                    return;
                }
            }
        }
        out.extend_from_slice(line);
    }
}

impl ScriptFilter for UsersScriptFilter {
    fn push(&mut self, data: &[u8], out: &mut Vec<u8>) {
        self.pending.extend_from_slice(data);
        let pending = std::mem::take(&mut self.pending);
        let mut start = 0;
        while let Some(newline) = memchr::memchr(b'\n', &pending[start..]) {
            let end = start + newline + 1;
            self.rewrite_line(&pending[start..end], out);
            start = end;
        }
        self.pending = pending[start..].to_vec();
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        let pending = std::mem::take(&mut self.pending);
        if !pending.is_empty() {
            self.rewrite_line(&pending, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_files_quote_the_password() {
        assert_eq!(
            option_file("p\"a ss\\w#rd:é").as_str(),
            "[client]\npassword=\"p\\\"a ss\\\\w#rd:é\"\n"
        );
        assert_eq!(quote_ident("a`b"), "`a``b`");
    }

    fn filtered(input: &str, account: Option<(&str, &str)>, piece: usize) -> String {
        let mut filter = UsersScriptFilter::new(account.map(|(u, h)| (u.to_owned(), h.to_owned())));
        let mut out = Vec::new();
        for chunk in input.as_bytes().chunks(piece) {
            filter.push(chunk, &mut out);
        }
        filter.finish(&mut out);
        String::from_utf8(out).unwrap()
    }

    const DUMP: &str = "USE `shop`;\nINSERT INTO `t` VALUES\n(1,'CREATE USER x'),\n(2,'b');\n\
DELIMITER ;;\nCREATE USER `inside`@`%`;\nDELIMITER ;\n\
CREATE USER `root`@`localhost`;\nCREATE USER `app`@`%` IDENTIFIED BY PASSWORD '*B6';\n\
CREATE USER `admin`@`%` IDENTIFIED BY PASSWORD '*81';\n\
/*M!100005 CREATE ROLE 'reader' WITH ADMIN mariadb_dump_import_role */;\n\
CREATE ROLE IF NOT EXISTS mariadb_dump_import_role;\n\
GRANT `reader` TO `app`@`%`;\nGRANT ALL PRIVILEGES ON *.* TO `admin`@`%` IDENTIFIED BY PASSWORD '*81' WITH GRANT OPTION;\n\
/*M!100005 SET DEFAULT ROLE NONE FOR 'admin'@'%' */;\n/*!80001 ALTER USER 'admin'@'%' DEFAULT ROLE NONE */;\n\
GRANT ALL PRIVILEGES ON *.* TO `admin`@`%x`;\n-- Dump completed on 2026-11-30";

    #[test]
    fn existing_users_are_kept_and_the_connecting_account_is_not_touched() {
        for piece in [1, 5, 4096] {
            let out = filtered(DUMP, Some(("admin", "%")), piece);
            assert!(
                out.contains("(1,'CREATE USER x'),\n"),
                "data is untouched: {out}"
            );
            assert!(
                out.contains("DELIMITER ;;\nCREATE USER `inside`@`%`;\nDELIMITER ;\n"),
                "routine bodies are untouched"
            );
            assert!(
                out.contains("CREATE USER IF NOT EXISTS `root`@`localhost`;\n"),
                "{out}"
            );
            assert!(
                out.contains("CREATE USER IF NOT EXISTS `app`@`%` IDENTIFIED BY PASSWORD '*B6';\n")
            );
            assert!(
                !out.contains("'*81'"),
                "the connecting account's password is never replaced: {out}"
            );
            assert!(!out.contains("FOR 'admin'@'%'") && !out.contains("ALTER USER 'admin'@'%'"));
            assert!(
                out.contains("/*M!100005 CREATE OR REPLACE ROLE 'reader' WITH ADMIN"),
                "{out}"
            );
            assert!(out.contains("CREATE ROLE IF NOT EXISTS mariadb_dump_import_role;\n"));
            assert!(out.contains("GRANT `reader` TO `app`@`%`;\n"));
            assert!(
                out.contains("GRANT ALL PRIVILEGES ON *.* TO `admin`@`%x`;\n"),
                "another account"
            );
            assert!(out.ends_with("-- Dump completed on 2026-11-30"));
        }
    }
}
