//! A throwaway PostgreSQL server for a drill: `initdb` and `postgres` of the newest
//! `/usr/lib/postgresql/*/bin` (else of PATH), its data directory in the drill's scratch space,
//! listening on 127.0.0.1 only (no Unix socket), with one superuser whose random password lives
//! in memory (and, for `initdb`, for a moment in a private file).

use super::server::{self, ServerDir, ServerProcess};
use super::ThrowawayServer;
use crate::dump::child::is_executable;
use crate::dump::{postgres, DatabaseTarget, DatabaseUri, Engine};
use anyhow::{anyhow, Context, Result};
use nix::sys::signal::Signal;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use zeroize::Zeroizing;

/// The superuser the drill restores as.
pub const SUPERUSER: &str = "neverwiped_drill";

/// Where Debian and its derivatives install the servers, one folder per major version.
const VERSIONS_DIR: &str = "/usr/lib/postgresql";

/// The folder holding `initdb` and `postgres`: the newest version's under [`VERSIONS_DIR`], else
/// the one on PATH.
fn bin_dir() -> Option<PathBuf> {
    let has_server =
        |bin: &Path| is_executable(&bin.join("initdb")) && is_executable(&bin.join("postgres"));
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(VERSIONS_DIR)
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| has_server(bin))
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).or_else(|| {
        let initdb = server::find_program("initdb", &[])?;
        let bin = initdb.parent()?.to_owned();
        has_server(&bin).then_some(bin)
    })
}

/// Starts a server in `dir` (created; removed again when the server is dropped).
pub fn start(dir: &Path) -> Result<ThrowawayServer> {
    let bin = bin_dir().ok_or_else(|| {
        anyhow!(
            "the PostgreSQL server (initdb and postgres) is not installed: install it (Debian: \
             postgresql), or put initdb and postgres on PATH"
        )
    })?;
    let owner = server::server_owner();
    let folder = ServerDir::create(dir, owner)?;
    let password = server::random_password();
    let data = dir.join("data");
    init(&bin, dir, &data, &password, owner)?;
    let log = dir.join("server.log");
    let spawn = |port: u16| {
        let logged = std::fs::File::create(&log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let mut command = Command::new(bin.join("postgres"));
        command
            .arg("-D")
            .arg(&data)
            .arg("-p")
            .arg(port.to_string())
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "unix_socket_directories="])
            // A drill's data is thrown away: nothing needs to be durable.
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off", "-c", "max_wal_size=2GB"])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(logged.try_clone()?)
            .stderr(logged);
        server::as_owner(&mut command, owner);
        let child = command
            .spawn()
            .with_context(|| format!("cannot start {}", bin.join("postgres").display()))?;
        let process = ServerProcess::new("PostgreSQL", child, &log, Signal::SIGTERM);
        Ok((process, target(port, &password)?))
    };
    let ready = |target: &DatabaseTarget| postgres::query(target, "postgres", "SELECT 1").is_ok();
    let (process, target) = server::start_on_a_free_port("PostgreSQL", spawn, ready)?;
    Ok(ThrowawayServer {
        target,
        process,
        _folder: folder,
    })
}

/// `initdb` of `data` with [`SUPERUSER`] and `password`, password authentication only.
fn init(
    bin: &Path,
    dir: &Path,
    data: &Path,
    password: &str,
    owner: Option<(u32, u32)>,
) -> Result<()> {
    let pwfile = dir.join("pwfile");
    {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&pwfile)
            .with_context(|| format!("cannot create {}", pwfile.display()))?;
        writeln!(file, "{password}")?;
    }
    server::give_to(&pwfile, owner)?;
    let mut initdb = Command::new(bin.join("initdb"));
    initdb
        .arg("--pgdata")
        .arg(data)
        .arg(format!("--username={SUPERUSER}"))
        .arg("--pwfile")
        .arg(&pwfile)
        .args(["--auth=scram-sha-256", "--encoding=UTF8", "--no-locale"])
        .arg("--no-sync")
        .current_dir(dir);
    server::as_owner(&mut initdb, owner);
    let ran = server::run_tool(initdb, "initdb");
    let _ = std::fs::remove_file(&pwfile);
    ran
}

/// The server on `port`, as the drill's restore and row count reach it.
fn target(port: u16, password: &Zeroizing<String>) -> Result<DatabaseTarget> {
    let uri = DatabaseUri {
        engine: Engine::Postgres,
        user: SUPERUSER.to_owned(),
        host: "127.0.0.1".to_owned(),
        port: Some(port),
        database: None,
    };
    Ok(DatabaseTarget::new("drill", uri, Some(password.clone()))?)
}
