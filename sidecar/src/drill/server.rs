//! What the throwaway servers of a drill share: their folder in the scratch space, the user they
//! run as, a free loopback port, a random password, waiting for them to accept connections, and
//! stopping them (the folder removed) however the drill ends.

use anyhow::{bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

/// The unprivileged user and group a server runs as when the drill runs as root (`nobody`):
/// PostgreSQL refuses to run as root. In the cluster the drill's pod runs as 65532 already.
pub const UNPRIVILEGED_ID: u32 = 65534;

/// How long a server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// How long a server may take to stop after its signal before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// The user and group the servers run as: `None` (the drill's own) unless the drill runs as
/// root, then [`UNPRIVILEGED_ID`].
pub fn server_owner() -> Option<(u32, u32)> {
    nix::unistd::geteuid()
        .is_root()
        .then_some((UNPRIVILEGED_ID, UNPRIVILEGED_ID))
}

/// Runs `command` as `owner`, when one is given.
pub fn as_owner(command: &mut Command, owner: Option<(u32, u32)>) {
    if let Some((uid, gid)) = owner {
        // Switching from root, std drops the supplementary groups too.
        command.uid(uid).gid(gid);
    }
}

/// Makes `path` (a folder or file the drill created) `owner`'s.
pub fn give_to(path: &Path, owner: Option<(u32, u32)>) -> Result<()> {
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))
            .with_context(|| format!("cannot give {} to uid {uid}", path.display()))?;
    }
    Ok(())
}

/// A server's folder in the scratch space, removed with all it holds when dropped.
pub struct ServerDir(super::RemovedOnDrop);

impl ServerDir {
    /// Creates the folder `dir` (removing what an earlier drill left there), private to
    /// `owner`; the folder above must let `owner` through.
    pub fn create(dir: &Path, owner: Option<(u32, u32)>) -> Result<ServerDir> {
        if dir.exists() {
            super::remove_tree(dir)?;
        }
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let created = ServerDir(super::RemovedOnDrop(dir.to_owned()));
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot make {} private", dir.display()))?;
        give_to(dir, owner)?;
        Ok(created)
    }

    pub fn path(&self) -> &Path {
        &self.0 .0
    }
}

/// A port of the loopback address that was free a moment ago.
pub fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .context("cannot find a free port on 127.0.0.1")?;
    Ok(listener.local_addr()?.port())
}

/// A password made for one server and forgotten with it: 32 letters and digits.
pub fn random_password() -> Zeroizing<String> {
    use rand::distributions::{Alphanumeric, DistString};
    Zeroizing::new(Alphanumeric.sample_string(&mut rand::rngs::OsRng, 32))
}

/// The last kilobytes of a log, for an error.
pub fn log_tail(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut file) = std::fs::File::open(path) {
        let length = file.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = file.seek(SeekFrom::Start(length.saturating_sub(4096)));
        let mut bytes = Vec::new();
        let _ = file.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).trim().to_owned();
    }
    crate::text::escaped(&text).into_owned()
}

/// Runs a setup tool (`initdb`, `mariadb-install-db`) to its end; its output in the error.
pub fn run_tool(mut command: Command, tool: &str) -> Result<()> {
    let output = command
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("cannot run {tool}"))?;
    if !output.status.success() {
        let mut text = String::from_utf8_lossy(&output.stderr).into_owned();
        if text.trim().is_empty() {
            text = String::from_utf8_lossy(&output.stdout).into_owned();
        }
        let tail = crate::dump::child::tail_of(text.as_bytes(), 2000);
        bail!("{tool} failed ({}): {tail}", output.status);
    }
    Ok(())
}

/// An executable file on PATH, or the first of `fallbacks` that is one.
pub fn find_program(name: &str, fallbacks: &[&str]) -> Option<PathBuf> {
    crate::dump::child::find_program(name).or_else(|| {
        fallbacks
            .iter()
            .map(PathBuf::from)
            .find(|path| crate::dump::child::is_executable(path))
    })
}

/// A running server, stopped when dropped (its `signal`, then SIGKILL after a grace): when the
/// drill of its database ends, fails, or is dropped on a stop signal.
pub struct ServerProcess {
    /// What it is, for messages: `PostgreSQL`, `MariaDB`.
    pub label: &'static str,
    child: Child,
    log: PathBuf,
    signal: Signal,
}

impl ServerProcess {
    pub fn new(label: &'static str, child: Child, log: &Path, signal: Signal) -> Self {
        ServerProcess {
            label,
            child,
            log: log.to_owned(),
            signal,
        }
    }

    /// Waits until `ready` says the server accepts connections. `Ok(false)` when it exited first
    /// (another process may have taken its port); an error when it does neither in time.
    pub fn wait_until_ready(&mut self, ready: impl Fn() -> bool) -> Result<bool> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(_)) = self.child.try_wait() {
                return Ok(false);
            }
            if ready() {
                return Ok(true);
            }
            if Instant::now() > deadline {
                bail!(
                    "the {} server did not accept connections within {START_TIMEOUT:?}: {}",
                    self.label,
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn log_tail(&self) -> String {
        log_tail(&self.log)
    }

    /// Stops the server: its signal, then SIGKILL when it has not exited within the grace.
    fn stop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let _ = kill(Pid::from_raw(self.child.id() as i32), self.signal);
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        tracing::warn!(
            "the {} server did not stop within {STOP_GRACE:?}: killed",
            self.label
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts a server up to three times, each on a port free a moment before (another process may
/// take it first): `spawn` starts it on the port it is given, `ready` tells when it accepts
/// connections.
pub fn start_on_a_free_port<T>(
    label: &str,
    mut spawn: impl FnMut(u16) -> Result<(ServerProcess, T)>,
    ready: impl Fn(&T) -> bool,
) -> Result<(ServerProcess, T)> {
    let mut last_log = String::new();
    for _ in 0..3 {
        let (mut process, started) = spawn(free_port()?)?;
        if process.wait_until_ready(|| ready(&started))? {
            return Ok((process, started));
        }
        last_log = process.log_tail();
    }
    bail!("the {label} server did not start, three times: {last_log}")
}
