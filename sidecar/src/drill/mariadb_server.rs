//! A throwaway MariaDB server for a drill: `mariadb-install-db` and `mariadbd`, its data
//! directory, socket and temporary files in the drill's scratch space, listening on 127.0.0.1
//! only, with one account of all privileges whose random password lives in memory (and, until
//! the server has read it at its start, in a private init file).

use super::server::{self, ServerDir, ServerProcess};
use super::ThrowawayServer;
use crate::dump::{mariadb, DatabaseTarget, DatabaseUri, Engine};
use anyhow::{anyhow, Context, Result};
use nix::sys::signal::Signal;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use zeroize::Zeroizing;

/// The account the drill restores as.
pub const ACCOUNT: &str = "neverwiped_drill";

/// What to install when a program is missing.
const INSTALL: &str = "install the MariaDB server (Debian: mariadb-server)";

/// The setup tool and the server.
fn programs() -> Result<(PathBuf, PathBuf)> {
    let install = server::find_program(
        "mariadb-install-db",
        &["/usr/bin/mariadb-install-db", "/usr/bin/mysql_install_db"],
    )
    .ok_or_else(|| anyhow!("mariadb-install-db is not installed: {INSTALL}"))?;
    let daemon = server::find_program("mariadbd", &["/usr/sbin/mariadbd", "/usr/sbin/mysqld"])
        .ok_or_else(|| anyhow!("the MariaDB server mariadbd is not installed: {INSTALL}"))?;
    Ok((install, daemon))
}

/// Starts a server in `dir` (created; removed again when the server is dropped).
pub fn start(dir: &Path) -> Result<ThrowawayServer> {
    let (install, daemon) = programs()?;
    let owner = server::server_owner();
    let folder = ServerDir::create(dir, owner)?;
    let (data, tmp) = (dir.join("data"), dir.join("tmp"));
    std::fs::create_dir(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    server::give_to(&tmp, owner)?;
    let mut command = Command::new(&install);
    command
        .arg("--no-defaults")
        .arg(format!("--datadir={}", data.display()))
        .args(["--auth-root-authentication-method=socket", "--skip-test-db"])
        .arg("--skip-name-resolve")
        .arg(format!("--tmpdir={}", tmp.display()))
        .current_dir(dir);
    server::as_owner(&mut command, owner);
    server::run_tool(command, "mariadb-install-db")?;
    let password = server::random_password();
    let init_file = write_init_file(dir, &password, owner)?;
    let log = dir.join("server.log");
    let spawn = |port: u16| {
        let mut command = Command::new(&daemon);
        command
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", dir.join("mysqld.sock").display()))
            .arg(format!("--pid-file={}", dir.join("mysqld.pid").display()))
            .arg(format!("--log-error={}", log.display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .arg(format!("--init-file={}", init_file.display()))
            .arg(format!("--port={port}"))
            .args(["--bind-address=127.0.0.1", "--skip-name-resolve"])
            // A drill's data is thrown away: nothing needs to be durable.
            .args(["--skip-log-bin", "--innodb-flush-log-at-trx-commit=0"])
            .args(["--innodb-doublewrite=0", "--max-allowed-packet=256M"])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        server::as_owner(&mut command, owner);
        let child = command
            .spawn()
            .with_context(|| format!("cannot start {}", daemon.display()))?;
        let process = ServerProcess::new("MariaDB", child, &log, Signal::SIGTERM);
        Ok((process, target(port, &password)?))
    };
    let ready = |target: &DatabaseTarget| mariadb::query(target, "SELECT 1").is_ok();
    let started = server::start_on_a_free_port("MariaDB", spawn, ready);
    // Read at the start: the password need not stay on disk.
    let _ = std::fs::remove_file(&init_file);
    let (process, target) = started?;
    Ok(ThrowawayServer {
        target,
        process,
        _folder: folder,
    })
}

/// The statements the server runs at its start: the drill's account, reachable from 127.0.0.1
/// with `password`, with every privilege (a dump of every database recreates users and grants).
fn write_init_file(dir: &Path, password: &str, owner: Option<(u32, u32)>) -> Result<PathBuf> {
    let path = dir.join("init.sql");
    let account = format!("'{ACCOUNT}'@'127.0.0.1'");
    let statements = Zeroizing::new(format!(
        "CREATE USER IF NOT EXISTS {account} IDENTIFIED BY '{password}';\n\
         GRANT ALL PRIVILEGES ON *.* TO {account} WITH GRANT OPTION;\n\
         GRANT PROXY ON ''@'%' TO {account} WITH GRANT OPTION;\n"
    ));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(statements.as_bytes())?;
    server::give_to(&path, owner)?;
    Ok(path)
}

/// The server on `port`, as the drill's restore and row count reach it.
fn target(port: u16, password: &Zeroizing<String>) -> Result<DatabaseTarget> {
    let uri = DatabaseUri {
        engine: Engine::MariaDb,
        user: ACCOUNT.to_owned(),
        host: "127.0.0.1".to_owned(),
        port: Some(port),
        database: None,
    };
    Ok(DatabaseTarget::new("drill", uri, Some(password.clone()))?)
}
