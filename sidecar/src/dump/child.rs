//! A dump tool run as a child process, its standard output read as a stream.
//!
//! The stream decides whether the dump is good: at the end of the output it waits for the tool,
//! and a non-zero exit, a signal, or an output that lacks the tool's completion trailer turns into
//! an error carrying the tool's own message (the end of its standard error). The backup reading
//! the stream then fails, and no snapshot claims the dump.

use std::ffi::OsString;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How much of a tool's standard error is kept: the end, where its error is.
pub const STDERR_TAIL_BYTES: usize = 8 * 1024;

/// How long to wait, after the tool exited, for the rest of its standard error (a grandchild
/// could keep the pipe open).
const STDERR_GRACE: Duration = Duration::from_secs(5);

/// How much of the output's end is kept to check the completion trailer.
const TRAILER_WINDOW_BYTES: usize = 4096;

/// A file holding a secret for one child (a PGPASSFILE, a MariaDB option file), in a private
/// temporary folder (mode 0700, the file 0600), removed when dropped.
#[derive(Debug)]
pub struct SecretFile {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl SecretFile {
    pub fn create(name: &str, contents: &[u8]) -> io::Result<SecretFile> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("neverwiped-db-")
            .permissions(fs::Permissions::from_mode(0o700))
            .tempdir()?;
        // Whatever the umask and the platform did: only this user may look inside.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700))?;
        let path = dir.path().join(name);
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        file.write_all(contents)?;
        file.sync_all()?;
        Ok(SecretFile { _dir: dir, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SecretFile {
    fn drop(&mut self) {
        // Overwrite before removing, so that the secret does not linger in a page of the disk.
        if let Ok(metadata) = fs::metadata(&self.path) {
            if let Ok(mut file) = fs::OpenOptions::new().write(true).open(&self.path) {
                let _ = file.write_all(&vec![0u8; metadata.len() as usize]);
            }
        }
        let _ = fs::remove_file(&self.path);
    }
}

/// A tool to run: program, arguments, environment, and the secret file it reads (kept until the
/// tool has exited).
#[derive(Debug)]
pub struct ToolCommand {
    /// The tool's name in messages (`pg_dumpall`).
    pub tool: String,
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
    /// Variables of the sidecar's environment the tool must not see (they would redirect it).
    pub env_remove: Vec<&'static str>,
    pub secret: Option<SecretFile>,
}

impl ToolCommand {
    pub fn new(tool: impl Into<String>, program: PathBuf) -> ToolCommand {
        ToolCommand {
            tool: tool.into(),
            program,
            args: Vec::new(),
            env: Vec::new(),
            env_remove: Vec::new(),
            secret: None,
        }
    }

    pub fn arg(&mut self, arg: impl Into<OsString>) -> &mut ToolCommand {
        self.args.push(arg.into());
        self
    }

    pub fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command.args(&self.args);
        // The sidecar's own secrets (the repository's, the gate's, every database's password)
        // are no business of the tools.
        for (name, _) in std::env::vars_os() {
            if name
                .to_string_lossy()
                .starts_with(neverwiped_contract::cli::env::PREFIX)
            {
                command.env_remove(name);
            }
        }
        for name in &self.env_remove {
            command.env_remove(name);
        }
        for (name, value) in &self.env {
            command.env(name, value);
        }
        command
    }

    /// Runs the tool to the end with `input` on its standard input; its standard output, or an
    /// error with its message.
    pub fn output(self, input: &[u8]) -> io::Result<Vec<u8>> {
        let mut child = self
            .command()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| spawn_error(&self.tool, &self.program, e))?;
        let mut stdin = child.stdin.take().expect("piped");
        let input = input.to_vec();
        let writer = std::thread::spawn(move || stdin.write_all(&input));
        let output = child.wait_with_output()?;
        let _ = writer.join();
        drop(self.secret);
        if output.status.success() {
            return Ok(output.stdout);
        }
        let tail = tail_of(&output.stderr, STDERR_TAIL_BYTES);
        Err(io::Error::other(failure_message(
            &self.tool,
            output.status,
            &tail,
        )))
    }
}

/// "cannot start TOOL (PROGRAM): ERROR", with a hint when it is not installed.
pub fn spawn_error(tool: &str, program: &Path, error: io::Error) -> io::Error {
    let hint = if error.kind() == io::ErrorKind::NotFound {
        " (is it installed?)"
    } else {
        ""
    };
    io::Error::new(
        error.kind(),
        format!("cannot start {tool} ({}){hint}: {error}", program.display()),
    )
}

/// The message of a tool that failed: how it ended, then what it said.
pub fn failure_message(tool: &str, status: ExitStatus, stderr: &str) -> String {
    let how = match (status.code(), status.signal()) {
        (Some(code), _) => format!("{tool} failed (exit status {code})"),
        (None, Some(signal)) => {
            let name = nix::sys::signal::Signal::try_from(signal)
                .map(|s| s.as_str())
                .unwrap_or("unknown signal");
            format!("{tool} was killed by signal {signal} ({name})")
        }
        (None, None) => format!("{tool} failed ({status})"),
    };
    if stderr.is_empty() {
        format!("{how} without a message")
    } else {
        format!("{how}: {stderr}")
    }
}

/// The last `limit` bytes of a tool's standard error as one line: lines trimmed and joined.
pub fn tail_of(stderr: &[u8], limit: usize) -> String {
    let start = stderr.len().saturating_sub(limit);
    let text = String::from_utf8_lossy(&stderr[start..]);
    let mut lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if start > 0 && !lines.is_empty() {
        // The first line was cut in the middle.
        lines.remove(0);
    }
    lines.join(" ")
}

/// Collects the end of a child's standard error in a thread.
pub struct StderrTail {
    buffer: Arc<Mutex<Vec<u8>>>,
    done: mpsc::Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

impl StderrTail {
    pub fn start(mut stderr: impl Read + Send + 'static) -> io::Result<StderrTail> {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let (done_tx, done) = mpsc::channel();
        let shared = buffer.clone();
        let thread = std::thread::Builder::new()
            .name("tool-stderr".into())
            .spawn(move || {
                let mut chunk = [0u8; 4096];
                loop {
                    match stderr.read(&mut chunk) {
                        Ok(0) => break,
                        Ok(n) => {
                            let mut buffer = shared.lock().unwrap_or_else(|p| p.into_inner());
                            buffer.extend_from_slice(&chunk[..n]);
                            if buffer.len() > 2 * STDERR_TAIL_BYTES {
                                let excess = buffer.len() - STDERR_TAIL_BYTES;
                                buffer.drain(..excess);
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                }
                let _ = done_tx.send(());
            })?;
        Ok(StderrTail {
            buffer,
            done,
            thread: Some(thread),
        })
    }

    /// The end of what the tool wrote, once it closed its standard error (or after a grace
    /// period), as one line.
    pub fn finish(mut self) -> String {
        if self.done.recv_timeout(STDERR_GRACE).is_ok() {
            if let Some(thread) = self.thread.take() {
                let _ = thread.join();
            }
        }
        let buffer = self.buffer.lock().unwrap_or_else(|p| p.into_inner());
        tail_of(&buffer, STDERR_TAIL_BYTES)
    }
}

/// How a dump must end to be complete: a line with the tool's completion marker, after which
/// only blank lines, comments and psql's `\unrestrict` may follow.
#[derive(Debug, Clone)]
pub struct Trailer {
    /// The marker the completion line starts with, e.g. `-- PostgreSQL database dump complete`.
    pub marker: &'static str,
    /// Whether the line must be exactly the marker (else it may go on, e.g. with a date).
    pub whole_line: bool,
}

impl Trailer {
    /// Whether `tail` (the end of the output) holds the completion line.
    pub fn is_complete(&self, tail: &[u8]) -> bool {
        let text = String::from_utf8_lossy(tail);
        let lines: Vec<&str> = text.lines().map(|l| l.trim_end_matches('\r')).collect();
        for (index, line) in lines.iter().enumerate().rev() {
            let is_marker = if self.whole_line {
                line.trim_end() == self.marker
            } else {
                line.starts_with(self.marker)
            };
            if is_marker {
                return true;
            }
            let ignorable = line.trim().is_empty()
                || line.starts_with("--")
                || line.starts_with("\\unrestrict ");
            if !ignorable || index == 0 {
                return false;
            }
        }
        false
    }
}

/// What became of one dump, shared between the stream and whoever reports on it.
#[derive(Debug, Default)]
pub struct DumpStatus {
    bytes: AtomicU64,
    state: Mutex<DumpState>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum DumpState {
    /// The tool has not been started (the backup stopped before reaching it).
    #[default]
    NotStarted,
    Running,
    /// The tool exited successfully and its output is complete.
    Complete,
    Failed(String),
}

impl DumpStatus {
    /// Bytes the tool produced (for a backup) or consumed (for a restore).
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    pub fn add_bytes(&self, count: u64) {
        self.bytes.fetch_add(count, Ordering::Relaxed);
    }

    pub fn state(&self) -> DumpState {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set_state(&self, state: DumpState) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = state;
    }
}

struct Running {
    child: Child,
    stdout: ChildStdout,
    stderr: Option<StderrTail>,
    _secret: Option<SecretFile>,
}

/// The standard output of a dump tool as a `Read`. The tool starts at the first read (so that
/// dumps run one after another as the backup reaches them) and is killed if the stream is
/// dropped before its end.
pub struct ChildStream {
    command: Option<ToolCommand>,
    tool: String,
    running: Option<Running>,
    trailer: Option<Trailer>,
    tail: Vec<u8>,
    status: Arc<DumpStatus>,
    /// Set once the stream ended: `Ok(0)` or this error from then on.
    ended: Option<Result<(), String>>,
}

impl ChildStream {
    pub fn new(command: ToolCommand, trailer: Option<Trailer>) -> ChildStream {
        ChildStream {
            tool: command.tool.clone(),
            command: Some(command),
            running: None,
            trailer,
            tail: Vec::new(),
            status: Arc::new(DumpStatus::default()),
            ended: None,
        }
    }

    pub fn status(&self) -> Arc<DumpStatus> {
        self.status.clone()
    }

    fn start(&mut self) -> io::Result<()> {
        let Some(mut tool) = self.command.take() else {
            return Ok(());
        };
        let mut child = tool
            .command()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| spawn_error(&tool.tool, &tool.program, e))?;
        let stdout = child.stdout.take().expect("piped");
        let stderr = StderrTail::start(child.stderr.take().expect("piped"))?;
        tracing::info!(tool = %tool.tool, pid = child.id(), "dump started");
        self.status.set_state(DumpState::Running);
        self.running = Some(Running {
            child,
            stdout,
            stderr: Some(stderr),
            _secret: tool.secret.take(),
        });
        Ok(())
    }

    fn fail(&mut self, message: String) -> io::Error {
        self.status.set_state(DumpState::Failed(message.clone()));
        self.ended = Some(Err(message.clone()));
        io::Error::other(message)
    }

    /// The output ended: wait for the tool and judge the dump.
    fn finish(&mut self) -> io::Result<()> {
        let Some(mut running) = self.running.take() else {
            return Ok(());
        };
        let status = running.child.wait()?;
        let stderr = running
            .stderr
            .take()
            .map(StderrTail::finish)
            .unwrap_or_default();
        drop(running);
        if !status.success() {
            return Err(self.fail(failure_message(&self.tool, status, &stderr)));
        }
        if let Some(trailer) = &self.trailer {
            if !trailer.is_complete(&self.tail) {
                let message = format!(
                    "{} exited successfully but its output ends without the line `{}`: the dump is truncated",
                    self.tool, trailer.marker
                );
                return Err(self.fail(message));
            }
        }
        if !stderr.is_empty() {
            tracing::warn!(tool = %self.tool, "{stderr}");
        }
        tracing::info!(tool = %self.tool, bytes = self.status.bytes(), "dump complete");
        self.status.set_state(DumpState::Complete);
        self.ended = Some(Ok(()));
        Ok(())
    }

    fn remember_tail(&mut self, data: &[u8]) {
        if data.len() >= TRAILER_WINDOW_BYTES {
            self.tail.clear();
            self.tail
                .extend_from_slice(&data[data.len() - TRAILER_WINDOW_BYTES..]);
            return;
        }
        self.tail.extend_from_slice(data);
        if self.tail.len() > 2 * TRAILER_WINDOW_BYTES {
            let excess = self.tail.len() - TRAILER_WINDOW_BYTES;
            self.tail.drain(..excess);
        }
    }
}

impl Read for ChildStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &self.ended {
            Some(Ok(())) => return Ok(0),
            Some(Err(message)) => return Err(io::Error::other(message.clone())),
            None => {}
        }
        if self.running.is_none() {
            if let Err(error) = self.start() {
                return Err(self.fail(error.to_string()));
            }
        }
        let read = loop {
            match self.running.as_mut().expect("started").stdout.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other,
            }
        };
        match read {
            Ok(0) => {
                self.finish()?;
                Ok(0)
            }
            Ok(n) => {
                self.status.add_bytes(n as u64);
                if self.trailer.is_some() {
                    self.remember_tail(&buf[..n]);
                }
                Ok(n)
            }
            Err(e) => {
                let message = format!("reading the output of {}: {e}", self.tool);
                Err(self.fail(message))
            }
        }
    }
}

impl Drop for ChildStream {
    fn drop(&mut self) {
        if let Some(mut running) = self.running.take() {
            // The backup stopped before the dump's end: the tool must not outlive it.
            let _ = running.child.kill();
            let _ = running.child.wait();
            if self.status.state() == DumpState::Running {
                self.status.set_state(DumpState::Failed(format!(
                    "{} was stopped: the backup ended before the dump",
                    self.tool
                )));
            }
        }
    }
}

/// Finds a program on `PATH`.
pub fn find_program(name: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|dir| dir.join(name))
        .find(|path| is_executable(path))
}

/// Whether `path` is a file with an execute bit.
pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(script: &str, trailer: Option<Trailer>) -> ChildStream {
        let mut command = ToolCommand::new("fake-dump", PathBuf::from("/bin/sh"));
        command.arg("-c").arg(script);
        ChildStream::new(command, trailer)
    }

    fn read_all(stream: &mut ChildStream) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        stream.read_to_end(&mut out).map(|_| out)
    }

    const PG: Trailer = Trailer {
        marker: "-- PostgreSQL database dump complete",
        whole_line: true,
    };

    #[test]
    fn a_successful_tool_streams_its_output_and_counts_it() {
        let mut stream = shell(
            "printf 'SELECT 1;\\n--\\n-- PostgreSQL database dump complete\\n--\\n\\n'",
            Some(PG),
        );
        let status = stream.status();
        assert_eq!(
            status.state(),
            DumpState::NotStarted,
            "nothing runs before the first read"
        );
        let out = read_all(&mut stream).unwrap();
        assert!(out.starts_with(b"SELECT 1;"));
        assert_eq!(status.bytes(), out.len() as u64);
        assert_eq!(status.state(), DumpState::Complete);
        assert_eq!(
            stream.read(&mut [0u8; 8]).unwrap(),
            0,
            "the end stays the end"
        );
    }

    #[test]
    fn a_failing_tool_fails_the_stream_with_its_own_message() {
        let script = "echo 'partial output'; echo 'pg_dumpall: error: connection to server failed: Connection refused' >&2; \
                      printf '\\tIs the server running?\\n' >&2; exit 1";
        let mut stream = shell(script, Some(PG));
        let error = read_all(&mut stream).unwrap_err().to_string();
        assert_eq!(
            error,
            "fake-dump failed (exit status 1): pg_dumpall: error: connection to server failed: Connection refused Is the server running?"
        );
        assert!(matches!(stream.status().state(), DumpState::Failed(m) if m == error));
        assert_eq!(
            stream.read(&mut [0u8; 8]).unwrap_err().to_string(),
            error,
            "the error stays"
        );
    }

    #[test]
    fn a_killed_tool_fails_the_stream_naming_the_signal() {
        let mut stream = shell("echo start; kill -KILL $$", None);
        let error = read_all(&mut stream).unwrap_err().to_string();
        assert!(
            error.starts_with("fake-dump was killed by signal 9 (SIGKILL)"),
            "{error}"
        );
    }

    #[test]
    fn an_output_without_the_trailer_is_a_truncated_dump() {
        let mut stream = shell(
            "printf -- '--\\n-- PostgreSQL database dump\\n--\\nCOPY t FROM stdin;\\n1\\n'",
            Some(PG),
        );
        let error = read_all(&mut stream).unwrap_err().to_string();
        assert!(
            error.contains("ends without the line `-- PostgreSQL database dump complete`"),
            "{error}"
        );
    }

    #[test]
    fn a_missing_program_says_so() {
        let command = ToolCommand::new("pg_dumpall", PathBuf::from("/nonexistent/pg_dumpall"));
        let mut stream = ChildStream::new(command, None);
        let error = read_all(&mut stream).unwrap_err().to_string();
        assert!(
            error.contains("cannot start pg_dumpall (/nonexistent/pg_dumpall) (is it installed?)"),
            "{error}"
        );
    }

    #[test]
    fn only_the_end_of_a_long_stderr_is_kept() {
        let mut stream = shell("i=0; while [ $i -lt 3000 ]; do echo \"noise line $i\" >&2; i=$((i+1)); done; echo 'the real error' >&2; exit 2", None);
        let error = read_all(&mut stream).unwrap_err().to_string();
        assert!(
            error.ends_with("noise line 2999 the real error"),
            "{}",
            &error[error.len() - 80..]
        );
        assert!(error.len() < STDERR_TAIL_BYTES + 100, "{}", error.len());
        assert!(!error.contains("noise line 1 "), "the start is dropped");
    }

    #[test]
    fn dropping_the_stream_kills_the_tool() {
        let mut stream = shell("echo started; exec sleep 600", None);
        let mut first = [0u8; 8];
        assert!(stream.read(&mut first).unwrap() > 0);
        let status = stream.status();
        let started = std::time::Instant::now();
        drop(stream);
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(matches!(status.state(), DumpState::Failed(m) if m.contains("was stopped")));
    }

    #[test]
    fn trailers_accept_only_blank_comment_and_unrestrict_lines_after_them() {
        let cluster = Trailer {
            marker: "-- PostgreSQL database cluster dump complete",
            whole_line: true,
        };
        assert!(cluster.is_complete(b"x\n--\n-- PostgreSQL database cluster dump complete\n--\n\n"));
        assert!(
            PG.is_complete(b"--\n-- PostgreSQL database dump complete\n--\n\n\\unrestrict abc\n\n")
        );
        assert!(
            !cluster.is_complete(b"-- PostgreSQL database dump complete\n--\n"),
            "a database's end is not the cluster's"
        );
        assert!(!PG.is_complete(b"-- PostgreSQL database dump complete\n--\nCREATE TABLE x ();\n"));
        let maria = Trailer {
            marker: "-- Dump completed",
            whole_line: false,
        };
        assert!(maria.is_complete(b"/*!40111 SET SQL_NOTES=@OLD_SQL_NOTES */;\n\n-- Dump completed on 2026-11-30  9:54:00\n"));
        assert!(!maria.is_complete(b"INSERT INTO t VALUES (1);\n"));
        assert!(!maria.is_complete(b""));
    }

    #[test]
    fn secret_files_are_private_and_removed() {
        use std::os::unix::fs::PermissionsExt;
        let secret = SecretFile::create("pgpass", b"*:*:*:*:pw\n").unwrap();
        let path = secret.path().to_path_buf();
        assert_eq!(fs::read(&path).unwrap(), b"*:*:*:*:pw\n");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            fs::metadata(path.parent().unwrap())
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o700
        );
        drop(secret);
        assert!(!path.exists() && !path.parent().unwrap().exists());
    }
}
