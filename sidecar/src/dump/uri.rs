//! Database URIs of `--database NAME=URI`: which server, as which user, which database — never a
//! password (that comes from the environment or a file, so it never shows in a process list).
//!
//! `postgresql://USER@HOST[:PORT][/DBNAME]` (also `postgres://`), `mariadb://…` and `mysql://…`
//! alike. No DBNAME means every database of the server.

use percent_encoding::percent_decode_str;
use std::fmt;
use url::{Host, Url};

/// Which dump and client tools speak to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// `pg_dumpall` / `pg_dump` and `psql`.
    Postgres,
    /// `mariadb-dump` and `mariadb`; users and grants dumped as SQL (`--system=users`).
    MariaDb,
    /// The same tools against a MySQL server: the `mysql` schema is dumped as tables, as
    /// `mysqldump --all-databases` always did.
    MySql,
}

impl Engine {
    pub fn default_port(self) -> u16 {
        match self {
            Engine::Postgres => 5432,
            Engine::MariaDb | Engine::MySql => 3306,
        }
    }

    /// Whether the MariaDB/MySQL tools serve this engine.
    pub fn is_mysql_family(self) -> bool {
        matches!(self, Engine::MariaDb | Engine::MySql)
    }

    pub fn scheme(self) -> &'static str {
        match self {
            Engine::Postgres => "postgresql",
            Engine::MariaDb => "mariadb",
            Engine::MySql => "mysql",
        }
    }
}

/// A parsed database URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseUri {
    pub engine: Engine,
    pub user: String,
    /// A host name or an IP address (IPv6 without brackets).
    pub host: String,
    pub port: Option<u16>,
    /// One database; `None` means all of them.
    pub database: Option<String>,
}

impl DatabaseUri {
    /// Parses a URI; the error says what is wrong in words a user can act on.
    pub fn parse(text: &str) -> Result<DatabaseUri, String> {
        let shape = "postgresql://USER@HOST[:PORT][/DBNAME], mariadb://… or mysql://…";
        let url = Url::parse(text.trim()).map_err(|e| format!("{e}: expected {shape}"))?;
        let engine = match url.scheme() {
            "postgresql" | "postgres" => Engine::Postgres,
            "mariadb" => Engine::MariaDb,
            "mysql" => Engine::MySql,
            other => return Err(format!("unknown scheme {other}: expected {shape}")),
        };
        if url.password().is_some() {
            return Err(
                "the URI holds a password: passwords are never taken from the command line".into(),
            );
        }
        let user = decode(url.username(), "user name")?;
        if user.is_empty() {
            return Err(format!("no user name: expected {shape}"));
        }
        if user.starts_with('-') {
            return Err(format!("the user name {user:?} starts with '-'"));
        }
        let host = match url.host() {
            Some(Host::Domain(name)) => decode(name, "host")?,
            Some(Host::Ipv4(address)) => address.to_string(),
            Some(Host::Ipv6(address)) => address.to_string(),
            None => String::new(),
        };
        if host.is_empty() || host.starts_with('-') || host.starts_with('/') {
            return Err(format!("no host name: expected {shape}"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(
                "query parameters (?…) and fragments (#…) are not supported in a database URI"
                    .into(),
            );
        }
        if has_dot_segment(text) {
            return Err("'.' and '..' are not database names".into());
        }
        let path = url.path().strip_prefix('/').unwrap_or(url.path());
        let database = match path {
            "" => None,
            path => {
                let name = decode(path, "database name")?;
                check_database_name(&name)?;
                Some(name)
            }
        };
        Ok(DatabaseUri {
            engine,
            user,
            host,
            port: url.port(),
            database,
        })
    }

    pub fn port(&self) -> u16 {
        self.port.unwrap_or(self.engine.default_port())
    }

    /// The same server and user with another database (or all of them).
    pub fn with_database(&self, database: Option<String>) -> DatabaseUri {
        DatabaseUri {
            database,
            ..self.clone()
        }
    }
}

impl fmt::Display for DatabaseUri {
    /// The URI as a user wrote it (it never holds a secret).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        write!(
            f,
            "{}://{}@{}:{}",
            self.engine.scheme(),
            self.user,
            host,
            self.port()
        )?;
        if let Some(database) = &self.database {
            write!(f, "/{database}")?;
        }
        Ok(())
    }
}

fn decode(text: &str, what: &str) -> Result<String, String> {
    percent_decode_str(text)
        .decode_utf8()
        .map(|name| name.into_owned())
        .map_err(|_| format!("the {what} is not UTF-8 once percent-decoded"))
}

/// Whether the path of a URI has a `.` or `..` segment, which URL parsing would resolve away.
fn has_dot_segment(text: &str) -> bool {
    let Some((_, after_scheme)) = text.split_once("://") else {
        return false;
    };
    let Some((_, path)) = after_scheme.split_once('/') else {
        return false;
    };
    let path = path.split(['?', '#']).next().unwrap_or("");
    path.split('/').any(|segment| {
        let segment = segment.to_ascii_lowercase().replace("%2e", ".");
        segment == "." || segment == ".."
    })
}

/// A database name becomes a file name of the snapshot and an argument of the tools.
pub fn check_database_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(format!(
            "{name:?} is not a database name this tool can dump (no '/', not '.' or '..')"
        ));
    }
    if name.starts_with('-') {
        return Err(format!("the database name {name:?} starts with '-'"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_uris_name_user_host_port_and_database() {
        let uri = DatabaseUri::parse("postgresql://admin@db.example.com:6543/shop").unwrap();
        assert_eq!(uri.engine, Engine::Postgres);
        assert_eq!(
            (uri.user.as_str(), uri.host.as_str(), uri.port()),
            ("admin", "db.example.com", 6543)
        );
        assert_eq!(uri.database.as_deref(), Some("shop"));
        assert_eq!(
            uri.to_string(),
            "postgresql://admin@db.example.com:6543/shop"
        );

        let all = DatabaseUri::parse("postgres://postgres@10.0.0.7").unwrap();
        assert_eq!((all.port(), all.database.clone()), (5432, None));
        assert_eq!(
            DatabaseUri::parse("postgresql://u@h/").unwrap().database,
            None
        );
    }

    #[test]
    fn mariadb_and_mysql_uris_default_to_port_3306() {
        let uri = DatabaseUri::parse("mariadb://root@127.0.0.1").unwrap();
        assert_eq!(
            (uri.engine, uri.port(), uri.database),
            (Engine::MariaDb, 3306, None)
        );
        let uri = DatabaseUri::parse("mysql://app@[::1]:3307/Sales%20DB").unwrap();
        assert_eq!(
            (uri.engine, uri.host.as_str(), uri.port()),
            (Engine::MySql, "::1", 3307)
        );
        assert_eq!(uri.database.as_deref(), Some("Sales DB"));
        assert_eq!(uri.to_string(), "mysql://app@[::1]:3307/Sales DB");
    }

    #[test]
    fn percent_encoded_user_names_are_decoded() {
        let uri = DatabaseUri::parse("postgresql://svc%40team@host/db").unwrap();
        assert_eq!(uri.user, "svc@team");
    }

    #[test]
    fn a_password_in_the_uri_is_refused() {
        let error = DatabaseUri::parse("postgresql://admin:secret@host/db").unwrap_err();
        assert!(error.contains("holds a password"), "{error}");
        assert!(
            !error.contains("secret"),
            "the message must not repeat the password: {error}"
        );
    }

    #[test]
    fn malformed_uris_say_what_is_expected() {
        for (text, expected) in [
            ("redis://u@h", "unknown scheme redis"),
            ("postgresql://h/db", "no user name"),
            ("postgresql://u@h/a/b", "not a database name"),
            ("postgresql://u@h/..", "not database names"),
            ("postgresql://u@h/%2E", "not database names"),
            ("postgresql://u@h/-x", "starts with '-'"),
            ("postgresql://u@h/db?sslmode=require", "query parameters"),
            ("not a uri", "expected postgresql://"),
        ] {
            let error = DatabaseUri::parse(text).unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}
