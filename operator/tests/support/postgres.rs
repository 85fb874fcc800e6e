//! A PostgreSQL server of a test's own, from this machine's newest PostgreSQL, on a loopback port.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use super::containers::Scratch;
use super::free_port;

pub const PG_ADMIN: &str = "admin";
pub const PG_PASSWORD: &str = "pg p@ss:wörd 9c";

/// PostgreSQL's newest server binaries of this machine (`/usr/lib/postgresql/<major>/bin`).
pub fn postgres_bin(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| entry.ok().map(|e| e.path().join("bin")))
        .collect();
    dirs.sort_by_key(|dir| {
        dir.parent()
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str()?.parse::<u32>().ok())
    });
    dirs.into_iter()
        .rev()
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}

/// A PostgreSQL server of its own on a loopback port, with a password-authenticated superuser.
pub struct Postgres {
    child: Child,
    pub port: u16,
    dir: Scratch,
}

impl Postgres {
    pub fn start(name: &str) -> Postgres {
        let dir = Scratch::new(&format!("{name}-pg"));
        // PostgreSQL refuses to run as root: as the `postgres` user of the Debian package.
        let (uid, gid) = postgres_user();
        std::os::unix::fs::chown(&dir.0, Some(uid), Some(gid)).expect("the folder's owner");
        let pwfile = dir.0.join("pwfile");
        std::fs::write(&pwfile, format!("{PG_PASSWORD}\n")).expect("the password file");
        std::os::unix::fs::chown(&pwfile, Some(uid), Some(gid)).expect("its owner");
        let data = dir.0.join("data");
        let initdb = Command::new(postgres_bin("initdb").expect("initdb"))
            .arg("--pgdata")
            .arg(&data)
            .args([
                &format!("--username={PG_ADMIN}"),
                "--auth=scram-sha-256",
                "--no-sync",
            ])
            .arg("--pwfile")
            .arg(&pwfile)
            .uid(uid)
            .gid(gid)
            .output()
            .expect("initdb runs");
        assert!(
            initdb.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&initdb.stderr)
        );
        let port = free_port();
        let log = std::fs::File::create(dir.0.join("server.log")).expect("a log");
        let child = Command::new(postgres_bin("postgres").expect("postgres"))
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(&dir.0)
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .uid(uid)
            .gid(gid)
            .stdout(log.try_clone().expect("a log"))
            .stderr(log)
            .spawn()
            .expect("postgres starts");
        let server = Postgres { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(60);
        while server.try_sql("postgres", "SELECT 1").is_err() {
            assert!(
                Instant::now() < deadline,
                "postgres does not start: {}",
                server.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        server
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("server.log")).unwrap_or_default()
    }

    pub fn try_sql(&self, database: &str, sql: &str) -> Result<String, String> {
        let output = Command::new(postgres_bin("psql").expect("psql"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                PG_ADMIN,
                "-d",
                database,
            ])
            .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .env("PGPASSWORD", PG_PASSWORD)
            .output()
            .expect("psql runs");
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    }

    pub fn sql(&self, database: &str, sql: &str) -> String {
        self.try_sql(database, sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGINT: PostgreSQL's fast shutdown.
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

pub fn postgres_user() -> (u32, u32) {
    let id = |flag: &str| -> u32 {
        let output = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .expect("id runs");
        String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse()
            .expect("the postgres user exists")
    };
    (id("-u"), id("-g"))
}
