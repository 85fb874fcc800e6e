//! A backup's stream: the FIFO a stream container's command writes, read as a [`StreamSource`]
//! at `/streams/NAME`. The read fails, and with it the backup, when the command did not end
//! well, its launcher died, or it wrote nothing (unless allowed).

use super::wait::{self, NoStatus};
use super::StreamSlot;
use crate::archive::StreamSource;
use neverwiped_contract::streams::{LaunchStatus, SNAPSHOT_FOLDER};
use std::fs::File;
use std::io::{self, Read};
use std::sync::Arc;
use std::time::Duration;

/// The stream of `slot`, started when the backup reaches it.
pub fn source(slot: Arc<StreamSlot>, start_timeout: Duration) -> StreamSource {
    StreamSource {
        snapshot_path: format!("{SNAPSHOT_FOLDER}/{}", slot.spec.name),
        label: format!("stream {}", slot.spec.name),
        may_be_empty: slot.spec.allow_empty,
        reader: Box::new(FifoReader {
            slot,
            start_timeout,
            fifo: None,
            ended: None,
        }),
    }
}

struct FifoReader {
    slot: Arc<StreamSlot>,
    start_timeout: Duration,
    fifo: Option<File>,
    /// Set once the stream ended: `Ok(0)` or this error from then on.
    ended: Option<Result<(), String>>,
}

impl FifoReader {
    fn open(&mut self) -> Result<(), String> {
        self.slot.touch();
        let slot = &self.slot.spec.slot;
        wait::launcher_started(slot, self.start_timeout)?;
        self.fifo = Some(wait::fifo_for_reading(slot)?);
        Ok(())
    }

    /// The end of the output: the status says whether the stream is good.
    fn finish(&mut self) -> Result<(), String> {
        self.fifo = None;
        let status = wait::status(&self.slot.spec.slot, None);
        let bytes = self.slot.bytes();
        let judged = judge(&status, bytes, self.slot.spec.allow_empty);
        self.slot.ended(status.ok(), judged.clone().err());
        judged
    }

    fn fail(&mut self, message: String) -> io::Error {
        self.slot.ended(None, Some(message.clone()));
        self.ended = Some(Err(message.clone()));
        io::Error::other(message)
    }
}

/// Whether a stream of `bytes` that ended with `status` is good; why not, in words that follow
/// "reading stream NAME: ".
pub fn judge(
    status: &Result<LaunchStatus, NoStatus>,
    bytes: u64,
    allow_empty: bool,
) -> Result<(), String> {
    let status = match status {
        Ok(status) => status,
        Err(NoStatus::Killed) => return Err(wait::killed_message().into()),
        Err(NoStatus::TimedOut) => return Err("its command did not end in time".into()),
        Err(NoStatus::Unreadable(error)) => {
            return Err(format!("its status cannot be read: {error}"))
        }
    };
    if !status.succeeded() {
        let how = format!("its command failed: {}", how_it_ended(status));
        return Err(with_stderr(&how, &status.stderr));
    }
    if bytes == 0 && !allow_empty {
        return Err(
            "it wrote nothing; set allowEmpty: true on the stream if an empty output is right"
                .into(),
        );
    }
    Ok(())
}

/// How a command that did not succeed ended: "exit 3", "killed by signal 9 (SIGKILL)", or the
/// launcher's own error ("could not start `…`: …", a time limit).
pub fn how_it_ended(status: &LaunchStatus) -> String {
    match (&status.error, status.signal, status.exit_code) {
        (Some(error), _, _) => error.clone(),
        (None, Some(signal), _) => format!("killed by signal {signal} ({})", signal_name(signal)),
        (None, None, Some(code)) => format!("exit {code}"),
        (None, None, None) => "ended without an exit code".into(),
    }
}

/// `how`, then what the command said on its standard error, when it said anything.
pub fn with_stderr(how: &str, stderr: &str) -> String {
    match stderr.is_empty() {
        true => how.to_owned(),
        false => format!("{how}: {stderr}"),
    }
}

fn signal_name(signal: i32) -> &'static str {
    nix::sys::signal::Signal::try_from(signal)
        .map(|s| s.as_str())
        .unwrap_or("unknown signal")
}

impl Read for FifoReader {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        match &self.ended {
            Some(Ok(())) => return Ok(0),
            Some(Err(message)) => return Err(io::Error::other(message.clone())),
            None => {}
        }
        if self.fifo.is_none() {
            if let Err(message) = self.open() {
                return Err(self.fail(message));
            }
        }
        let read = loop {
            match self.fifo.as_mut().expect("opened").read(buffer) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other,
            }
        };
        match read {
            Ok(0) => match self.finish() {
                Ok(()) => {
                    self.ended = Some(Ok(()));
                    Ok(0)
                }
                Err(message) => Err(self.fail(message)),
            },
            Ok(n) => {
                self.slot.add_bytes(n as u64);
                Ok(n)
            }
            Err(error) => Err(self.fail(format!("reading its FIFO: {error}"))),
        }
    }
}
