//! Real database servers for the database tests: PostgreSQL (`initdb` + `postgres` of Debian's
//! `postgresql`) and MariaDB (`mariadb-install-db` + `mariadbd` of Debian's `mariadb-server`),
//! each started in its own temporary folder on a free loopback port, with a password-authenticated
//! administrator, and stopped (folder removed) when dropped.
//!
//! When the binaries are missing, `start` records a skip and returns `None` — except where every
//! test must run (`CI` set, or `NEVERWIPED_REQUIRE_ALL=1`), where a missing server is a broken
//! machine and fails the test with what to install (`neverwiped_testkit::missing`).
//! As root, PostgreSQL runs as the `postgres` user (it refuses root); MariaDB runs as root with
//! `--user=root`.

#![allow(dead_code)]

use sha2::{Digest, Sha256};
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// The administrator of every test server.
pub const ADMIN: &str = "admin";

/// Its password: quotes, a backslash, a space, `#`, `:` and a non-ASCII letter, so that the
/// PGPASSFILE and option-file escaping are exercised.
pub const ADMIN_PASSWORD: &str = "p\"a ss\\w#rd:é";

/// How long a server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A missing server fails the test where every test must run; elsewhere the test is skipped.
fn missing(test: &str, what: &str, hint: &str) {
    neverwiped_testkit::missing(format_args!("{what} (for {test})"), hint);
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// A program on PATH, or at one of `fallbacks`.
pub fn find_program(name: &str, fallbacks: &[&str]) -> Option<PathBuf> {
    let from_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| is_executable(p))
    });
    from_path.or_else(|| {
        fallbacks
            .iter()
            .map(PathBuf::from)
            .find(|p| is_executable(p))
    })
}

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn read_tail(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut file) = fs::File::open(path) {
        let length = file.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = file.seek(SeekFrom::Start(length.saturating_sub(8192)));
        let _ = file.read_to_string(&mut text);
    }
    text
}

/// The SHA-256 of a command's standard output and how many lines it had, read as it comes
/// (table contents are tens of megabytes).
pub fn hash_output(mut command: Command) -> Result<(String, u64), String> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let mut hasher = Sha256::new();
    let mut lines = 0u64;
    let mut buffer = vec![0u8; 1 << 16];
    loop {
        let n = stdout.read(&mut buffer).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        lines += buffer[..n].iter().filter(|b| **b == b'\n').count() as u64;
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    let errors = errors.join().unwrap_or_default();
    if !status.success() {
        return Err(format!("{status}: {errors}"));
    }
    Ok((hex::encode(hasher.finalize()), lines))
}

fn output_text(mut command: Command, what: &str) -> Result<String, String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{what}: {}\nstdout: {}\nstderr: {}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Waits until `ready` says the server accepts connections. `Err` with the log when the server
/// exited (another process took its port); a panic when it neither listens nor exits in time.
fn wait_until_ready(
    name: &str,
    child: &mut Child,
    log: &Path,
    ready: impl Fn() -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("({status})\n{}", read_tail(log)));
        }
        if ready() {
            return Ok(());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "{name} did not accept connections within {START_TIMEOUT:?}:\n{}",
                read_tail(log)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Stops a server with `signal`, then kills it if it has not exited within `grace`.
fn stop(child: &mut Child, signal: nix::sys::signal::Signal, grace: Duration) {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, signal);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL
// ---------------------------------------------------------------------------------------------

/// A PostgreSQL server of its own.
pub struct Postgres {
    dir: TempDir,
    bin: PathBuf,
    port: u16,
    child: Child,
    pgpass: PathBuf,
}

/// The newest `/usr/lib/postgresql/*/bin` with a server, or `NEVERWIPED_POSTGRES_BIN_DIR`.
fn postgres_bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("NEVERWIPED_POSTGRES_BIN_DIR") {
        return Some(PathBuf::from(dir)).filter(|d| is_executable(&d.join("postgres")));
    }
    let mut dirs: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            (is_executable(&bin.join("initdb")) && is_executable(&bin.join("postgres")))
                .then_some((version, bin))
        })
        .collect();
    dirs.sort();
    dirs.pop().map(|(_, dir)| dir)
}

/// The user a server runs as: `postgres` when the tests run as root (it refuses root).
fn postgres_user() -> Option<(u32, u32)> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    let user = nix::unistd::User::from_name("postgres")
        .ok()
        .flatten()
        .expect("running as root, the `postgres` user is needed");
    Some((user.uid.as_raw(), user.gid.as_raw()))
}

impl Postgres {
    /// Starts a fresh server, or returns `None` (after `SKIPPED`) when PostgreSQL is missing.
    pub fn start(test: &str) -> Option<Postgres> {
        let Some(bin) = postgres_bin_dir() else {
            missing(
                test,
                "PostgreSQL server binaries not found",
                "apt-get install postgresql (or set NEVERWIPED_POSTGRES_BIN_DIR)",
            );
            return None;
        };
        for tool in ["pg_dump", "pg_dumpall", "psql"] {
            if !is_executable(&bin.join(tool)) {
                missing(
                    test,
                    &format!("{tool} not found in {}", bin.display()),
                    "apt-get install postgresql",
                );
                return None;
            }
        }
        let owner = postgres_user();
        let dir = tempfile::Builder::new()
            .prefix("neverwiped-postgres-")
            .tempdir()
            .unwrap();
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
        }
        let pwfile = dir.path().join("pwfile");
        fs::write(&pwfile, format!("{ADMIN_PASSWORD}\n")).unwrap();
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&pwfile, Some(uid), Some(gid)).unwrap();
        }
        let data = dir.path().join("data");
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("--pgdata")
            .arg(&data)
            .arg(format!("--username={ADMIN}"))
            .arg("--pwfile")
            .arg(&pwfile)
            .arg("--auth=scram-sha-256")
            .arg("--encoding=UTF8")
            .arg("--no-locale")
            .arg("--no-sync")
            .current_dir(dir.path());
        as_user(&mut initdb, owner);
        output_text(initdb, "initdb").unwrap_or_else(|e| panic!("{e}"));
        fs::remove_file(&pwfile).unwrap();

        let pgpass = dir.path().join("pgpass");
        let escaped = ADMIN_PASSWORD.replace('\\', "\\\\").replace(':', "\\:");
        fs::write(&pgpass, format!("*:*:*:{ADMIN}:{escaped}\n")).unwrap();
        fs::set_permissions(&pgpass, fs::Permissions::from_mode(0o600)).unwrap();

        let mut last_log = String::new();
        for _ in 0..3 {
            let port = free_port();
            let log_path = dir.path().join("server.log");
            let log = fs::File::create(&log_path).unwrap();
            if let Some((uid, gid)) = owner {
                std::os::unix::fs::chown(&log_path, Some(uid), Some(gid)).unwrap();
            }
            let mut command = Command::new(bin.join("postgres"));
            command
                .arg("-D")
                .arg(&data)
                .arg("-p")
                .arg(port.to_string())
                .arg("-k")
                .arg(dir.path())
                .args(["-c", "listen_addresses=127.0.0.1"])
                .args([
                    "-c",
                    "fsync=off",
                    "-c",
                    "synchronous_commit=off",
                    "-c",
                    "full_page_writes=off",
                ])
                .args([
                    "-c",
                    "max_wal_size=2GB",
                    "-c",
                    "shared_buffers=64MB",
                    "-c",
                    "max_connections=40",
                ])
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log);
            as_user(&mut command, owner);
            let mut child = command.spawn().expect("start postgres");
            let probe = || {
                let mut psql = psql_command(&bin, port, &pgpass, "postgres");
                psql.arg("--command=SELECT 1");
                output_text(psql, "probe").is_ok()
            };
            match wait_until_ready("postgres", &mut child, &log_path, probe) {
                Ok(()) => {
                    return Some(Postgres {
                        dir,
                        bin,
                        port,
                        child,
                        pgpass,
                    })
                }
                // Another process took the port: try another one.
                Err(log) => last_log = log,
            }
        }
        panic!("postgres did not start, three times; its last log:\n{last_log}");
    }

    pub fn log(&self) -> String {
        read_tail(&self.dir.path().join("server.log"))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The folder of the server's client tools (to put first on the sidecar's PATH, so that the
    /// dump tools match the server).
    pub fn bin_dir(&self) -> &Path {
        &self.bin
    }

    /// `postgresql://admin@127.0.0.1:PORT[/DATABASE]`.
    pub fn uri(&self, database: Option<&str>) -> String {
        match database {
            Some(database) => format!("postgresql://{ADMIN}@127.0.0.1:{}/{database}", self.port),
            None => format!("postgresql://{ADMIN}@127.0.0.1:{}", self.port),
        }
    }

    /// psql as the administrator, with `args` after the connection options.
    pub fn psql_command(&self, database: &str) -> Command {
        psql_command(&self.bin, self.port, &self.pgpass, database)
    }

    pub fn try_psql(&self, database: &str, sql: &str) -> Result<String, String> {
        let mut command = self.psql_command(database);
        command.arg("--command").arg(sql);
        output_text(command, &format!("psql {database}: {sql}"))
    }

    /// Runs SQL as the administrator; panics with psql's message when it fails.
    #[track_caller]
    pub fn psql(&self, database: &str, sql: &str) -> String {
        self.try_psql(database, sql)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Runs SQL as another role with its password (to prove a restored password works).
    pub fn psql_as(
        &self,
        user: &str,
        password: &str,
        database: &str,
        sql: &str,
    ) -> Result<String, String> {
        let pgpass = self.dir.path().join(format!("pgpass-{user}"));
        let escaped = password.replace('\\', "\\\\").replace(':', "\\:");
        fs::write(&pgpass, format!("*:*:*:{user}:{escaped}\n")).unwrap();
        fs::set_permissions(&pgpass, fs::Permissions::from_mode(0o600)).unwrap();
        let mut command = self.psql_command(database);
        command
            .arg(format!("--username={user}"))
            .env("PGPASSFILE", &pgpass)
            .arg("--command")
            .arg(sql);
        output_text(command, &format!("psql as {user}"))
    }

    /// The SHA-256 and line count of a query's rows in COPY text format.
    pub fn hash_query(&self, database: &str, query: &str) -> (String, u64) {
        let mut command = self.psql_command(database);
        command
            .arg("--command")
            .arg(format!("COPY ({query}) TO STDOUT"));
        hash_output(command).unwrap_or_else(|e| panic!("hashing {query}: {e}"))
    }
}

fn psql_command(bin: &Path, port: u16, pgpass: &Path, database: &str) -> Command {
    let mut command = Command::new(bin.join("psql"));
    command
        .args([
            "--no-psqlrc",
            "--quiet",
            "--no-password",
            "--tuples-only",
            "--no-align",
            "--set=ON_ERROR_STOP=1",
        ])
        .arg("--host=127.0.0.1")
        .arg(format!("--port={port}"))
        .arg(format!("--username={ADMIN}"))
        .arg(format!("--dbname={database}"))
        .env("PGPASSFILE", pgpass)
        .env("PGCLIENTENCODING", "UTF8")
        .env_remove("PGPASSWORD")
        .env_remove("PGHOST")
        .env_remove("PGUSER");
    command
}

fn as_user(command: &mut Command, owner: Option<(u32, u32)>) {
    if let Some((uid, gid)) = owner {
        // std drops the supplementary groups when switching from root.
        command.uid(uid).gid(gid);
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGINT: the fast shutdown (sessions ended, clean stop).
        stop(
            &mut self.child,
            nix::sys::signal::Signal::SIGINT,
            Duration::from_secs(20),
        );
        if std::thread::panicking() {
            eprintln!("--- postgres log ---\n{}", self.log());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// MariaDB
// ---------------------------------------------------------------------------------------------

/// A MariaDB server of its own.
pub struct MariaDb {
    dir: TempDir,
    client: PathBuf,
    port: u16,
    child: Child,
}

impl MariaDb {
    /// Starts a fresh server, or returns `None` (after `SKIPPED`) when MariaDB is missing.
    pub fn start(test: &str) -> Option<MariaDb> {
        let hint = "apt-get install mariadb-server mariadb-client";
        let install = find_program(
            "mariadb-install-db",
            &["/usr/bin/mariadb-install-db", "/usr/bin/mysql_install_db"],
        );
        let server = find_program("mariadbd", &["/usr/sbin/mariadbd", "/usr/sbin/mysqld"]);
        let client = find_program("mariadb", &["/usr/bin/mariadb"]);
        let dump = find_program("mariadb-dump", &[]).or_else(|| find_program("mysqldump", &[]));
        let (Some(install), Some(server), Some(client), Some(_)) = (install, server, client, dump)
        else {
            missing(
                test,
                "MariaDB (mariadb-install-db, mariadbd, mariadb, mariadb-dump) not found",
                hint,
            );
            return None;
        };
        let dir = tempfile::Builder::new()
            .prefix("neverwiped-mariadb-")
            .tempdir()
            .unwrap();
        let data = dir.path().join("data");
        // A temporary folder of its own: servers set up at once must not meet in /tmp (an
        // install was seen failing on temporary tables that vanished from under it).
        let tmp = dir.path().join("tmp");
        fs::create_dir(&tmp).unwrap();
        let user = nix::unistd::User::from_uid(nix::unistd::geteuid())
            .ok()
            .flatten()
            .map(|u| u.name)
            .unwrap_or("root".into());
        let mut command = Command::new(&install);
        command
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--user={user}"))
            .arg("--auth-root-authentication-method=normal")
            .arg("--skip-test-db")
            .arg("--skip-name-resolve")
            .arg(format!("--tmpdir={}", tmp.display()))
            .current_dir(dir.path());
        output_text(command, "mariadb-install-db").unwrap_or_else(|e| panic!("{e}"));

        let mut last_log = String::new();
        for _ in 0..3 {
            let port = free_port();
            let log_path = dir.path().join("server.log");
            let _ = fs::remove_file(&log_path);
            let mut child = Command::new(&server)
                .arg("--no-defaults")
                .arg(format!("--datadir={}", data.display()))
                .arg(format!(
                    "--socket={}",
                    dir.path().join("mysqld.sock").display()
                ))
                .arg(format!(
                    "--pid-file={}",
                    dir.path().join("mysqld.pid").display()
                ))
                .arg(format!("--log-error={}", log_path.display()))
                .arg(format!("--tmpdir={}", tmp.display()))
                .arg(format!("--port={port}"))
                .arg("--bind-address=127.0.0.1")
                .arg("--skip-name-resolve")
                .arg(format!("--user={user}"))
                .arg("--skip-log-bin")
                .arg("--innodb-buffer-pool-size=128M")
                .arg("--innodb-flush-log-at-trx-commit=0")
                .arg("--innodb-doublewrite=0")
                .arg("--max-allowed-packet=256M")
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start mariadbd");
            let socket = dir.path().join("mysqld.sock");
            let probe = || {
                let mut command = root_command(&client, &socket);
                command.arg("--execute=SELECT 1");
                output_text(command, "probe").is_ok()
            };
            match wait_until_ready("mariadbd", &mut child, &log_path, probe) {
                Ok(()) => {
                    let maria = MariaDb {
                        dir,
                        client,
                        port,
                        child,
                    };
                    maria.root_sql(&format!(
                        // No anonymous accounts, none by host name (which --skip-name-resolve ignores).
                        "DELETE FROM mysql.global_priv WHERE User = '' OR Host NOT IN ('localhost', '127.0.0.1', '::1', '%'); \
                         FLUSH PRIVILEGES; \
                         CREATE USER '{ADMIN}'@'%' IDENTIFIED BY {}; \
                         GRANT ALL PRIVILEGES ON *.* TO '{ADMIN}'@'%' WITH GRANT OPTION; \
                         GRANT PROXY ON ''@'%' TO '{ADMIN}'@'%' WITH GRANT OPTION;",
                        sql_string(ADMIN_PASSWORD)
                    ));
                    return Some(maria);
                }
                Err(log) => last_log = log,
            }
        }
        panic!("mariadbd did not start, three times; its last log:\n{last_log}");
    }

    pub fn log(&self) -> String {
        read_tail(&self.dir.path().join("server.log"))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `mariadb://admin@127.0.0.1:PORT[/DATABASE]`.
    pub fn uri(&self, database: Option<&str>) -> String {
        match database {
            Some(database) => format!("mariadb://{ADMIN}@127.0.0.1:{}/{database}", self.port),
            None => format!("mariadb://{ADMIN}@127.0.0.1:{}", self.port),
        }
    }

    /// The client as root over the server's socket, batch mode, no column names.
    pub fn root_command(&self) -> Command {
        root_command(&self.client, &self.dir.path().join("mysqld.sock"))
    }

    pub fn try_root_sql(&self, sql: &str) -> Result<String, String> {
        let mut command = self.root_command();
        command.arg(format!("--execute={sql}"));
        output_text(command, &format!("mariadb: {sql}"))
    }

    #[track_caller]
    pub fn root_sql(&self, sql: &str) -> String {
        self.try_root_sql(sql).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Runs SQL over TCP as another account with its password.
    pub fn sql_as(&self, user: &str, password: &str, sql: &str) -> Result<String, String> {
        let mut command = Command::new(&self.client);
        command
            .arg("--no-defaults")
            .args([
                "--protocol=TCP",
                "--host=127.0.0.1",
                "--batch",
                "--skip-column-names",
            ])
            .arg(format!("--port={}", self.port))
            .arg(format!("--user={user}"))
            .arg(format!("--execute={sql}"))
            .env("MYSQL_PWD", password);
        output_text(command, &format!("mariadb as {user}"))
    }

    /// The SHA-256 and line count of a query's rows (tab-separated, as the batch client prints).
    pub fn hash_query(&self, query: &str) -> (String, u64) {
        let mut command = self.root_command();
        command.arg("--quick").arg(format!("--execute={query}"));
        hash_output(command).unwrap_or_else(|e| panic!("hashing {query}: {e}"))
    }
}

fn root_command(client: &Path, socket: &Path) -> Command {
    let mut command = Command::new(client);
    command
        .arg("--no-defaults")
        .arg(format!("--socket={}", socket.display()))
        .args([
            "--user=root",
            "--batch",
            "--skip-column-names",
            "--default-character-set=utf8mb4",
        ])
        .env_remove("MYSQL_PWD");
    command
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        stop(
            &mut self.child,
            nix::sys::signal::Signal::SIGTERM,
            Duration::from_secs(20),
        );
        if std::thread::panicking() {
            eprintln!("--- mariadbd log ---\n{}", self.log());
        }
    }
}

/// A MariaDB string literal.
pub fn sql_string(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// Writes an executable script.
pub fn write_script(path: &Path, body: &str) {
    let mut file = fs::File::create(path).unwrap();
    file.write_all(body.as_bytes()).unwrap();
    drop(file);
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}
