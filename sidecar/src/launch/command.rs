//! The user's command, run by the launcher: its standard error copied to the container's log
//! with its end kept for the status, a time limit that kills its whole process group, and how it
//! ended as a [`LaunchStatus`].

use neverwiped_contract::streams::{LaunchStatus, STDERR_TAIL_BYTES};
use std::io::{self, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long, after the command ended, its standard error may stay open (a background process
/// it left could hold it).
const STDERR_GRACE: Duration = Duration::from_secs(2);

/// Where the command's input and output go, and its time limit.
pub struct Wiring {
    pub stdin: Stdio,
    pub stdout: Stdio,
    /// Hooks: killed (its process group) at the limit, which runs it in a group of its own.
    pub timeout: Option<Duration>,
}

/// The RFC 3339 time now, as a status records it.
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Runs `command` to its end; never fails: what went wrong is in the status.
pub fn run(command: &[String], wiring: Wiring) -> LaunchStatus {
    let started_at = Some(now());
    let mut status = LaunchStatus {
        started_at: started_at.clone(),
        ..LaunchStatus::default()
    };
    let spawned = spawn(
        command,
        wiring.stdin,
        wiring.stdout,
        wiring.timeout.is_some(),
    );
    let (mut child, stderr) = match spawned {
        Ok(spawned) => spawned,
        Err(error) => {
            let shown = command.join(" ");
            status.error = Some(format!("could not start `{shown}`: {error}"));
            status.finished_at = Some(now());
            return status;
        }
    };
    let ended = wait(&mut child, wiring.timeout);
    status.stderr = stderr
        .recv_timeout(STDERR_GRACE)
        .map(|tail| crate::dump::child::tail_of(&tail, STDERR_TAIL_BYTES))
        .unwrap_or_default();
    match ended {
        Ok(exit) => {
            status.exit_code = exit.code();
            status.signal = exit.signal();
        }
        Err(Ended::TimedOut(limit)) => {
            status.signal = Some(libc::SIGKILL);
            status.error = Some(format!(
                "outlived its time limit of {} s: its process group was killed",
                limit.as_secs()
            ));
        }
        Err(Ended::Lost(error)) => status.error = Some(format!("lost the command: {error}")),
    }
    status.finished_at = Some(now());
    status
}

/// Starts the command, and a thread copying its standard error that sends the end it kept.
fn spawn(
    command: &[String],
    stdin: Stdio,
    stdout: Stdio,
    own_group: bool,
) -> io::Result<(Child, mpsc::Receiver<Vec<u8>>)> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| io::Error::other("no command given"))?;
    let mut builder = Command::new(program);
    builder
        .args(args)
        .stdin(stdin)
        .stdout(stdout)
        .stderr(Stdio::piped());
    if own_group {
        builder.process_group(0);
    }
    // The builder holds the FIFO's end: dropped with it, so the command's end is the only one.
    let mut child = builder.spawn()?;
    drop(builder);
    let stderr = child.stderr.take().expect("piped");
    let (sender, receiver) = mpsc::channel();
    std::thread::Builder::new()
        .name("command-stderr".into())
        .spawn(move || {
            let _ = sender.send(copy_keeping_tail(stderr));
        })?;
    Ok((child, receiver))
}

/// Copies `stderr` to the launcher's own (the container's log); the last bytes it read.
fn copy_keeping_tail(mut stderr: impl Read) -> Vec<u8> {
    let mut tail = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut own = io::stderr();
    loop {
        match stderr.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                let _ = own.write_all(&chunk[..n]);
                tail.extend_from_slice(&chunk[..n]);
                if tail.len() > 4 * STDERR_TAIL_BYTES {
                    tail.drain(..tail.len() - 2 * STDERR_TAIL_BYTES);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    tail
}

enum Ended {
    TimedOut(Duration),
    Lost(io::Error),
}

/// Waits for the command; at the time limit, kills its process group and reaps it.
fn wait(child: &mut Child, timeout: Option<Duration>) -> Result<ExitStatus, Ended> {
    let Some(limit) = timeout else {
        return child.wait().map_err(Ended::Lost);
    };
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(exit)) => return Ok(exit),
            Ok(None) if Instant::now() >= deadline => break,
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(error) => return Err(Ended::Lost(error)),
        }
    }
    // SAFETY: kill sends a signal to the command's own process group (its pid is the group's id).
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    let _ = child.wait();
    Err(Ended::TimedOut(limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(script: &str, timeout: Option<Duration>) -> LaunchStatus {
        let wiring = Wiring {
            stdin: Stdio::null(),
            stdout: Stdio::null(),
            timeout,
        };
        run(&["sh".into(), "-c".into(), script.into()], wiring)
    }

    #[test]
    fn a_command_reports_its_exit_and_the_end_of_its_stderr() {
        let status = shell("echo first >&2; echo 'the error' >&2; exit 3", None);
        assert_eq!(status.exit_code, Some(3));
        assert_eq!(status.stderr, "first the error");
        assert!(status.started_at.is_some() && status.finished_at.is_some());
        assert!(!status.succeeded());
    }

    #[test]
    fn a_command_over_its_limit_is_killed_with_its_children() {
        let started = Instant::now();
        let status = shell("sleep 30 & sleep 30", Some(Duration::from_millis(300)));
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(status.error.unwrap().contains("time limit of 0 s"));
    }

    #[test]
    fn a_command_that_cannot_start_says_so() {
        let wiring = Wiring {
            stdin: Stdio::null(),
            stdout: Stdio::null(),
            timeout: None,
        };
        let status = run(&["/nonexistent/tool".into(), "x".into()], wiring);
        let error = status.error.unwrap();
        assert!(
            error.starts_with("could not start `/nonexistent/tool x`: "),
            "{error}"
        );
    }
}
