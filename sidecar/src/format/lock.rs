//! Lock objects: who is using the repository. Backups take shared locks; maintenance that deletes
//! takes an exclusive one. A lock not refreshed for [`STALE_AFTER_SECS`] is stale, and so is one of
//! this host whose process is gone, or whose PID now names another process (one that started at
//! another time, or before the host's last boot).

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A lock older than this (30 minutes; holders refresh every 5) belongs to a dead process.
pub const STALE_AFTER_SECS: i64 = 30 * 60;
/// How often a holder rewrites its lock.
pub const REFRESH_EVERY_SECS: u64 = 5 * 60;

/// How a holder keeps its lock fresh. The defaults match what other processes assume
/// ([`STALE_AFTER_SECS`]). See [`crate::locking`]; tests shorten them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockTimings {
    /// How often the lock is rewritten.
    pub refresh_every: Duration,
    /// How soon a failed refresh is tried again.
    pub retry_every: Duration,
    /// How old a lock's last refresh may be before other processes take it for stale.
    pub stale_after: Duration,
    /// How long before that the holder gives up and stops.
    pub safety_margin: Duration,
}

impl Default for LockTimings {
    /// Refresh every 5 minutes, retry a failed refresh every 30 s, give up 5 minutes before the
    /// 30 minutes after which others take the lock for stale.
    fn default() -> LockTimings {
        LockTimings {
            refresh_every: Duration::from_secs(REFRESH_EVERY_SECS),
            retry_every: Duration::from_secs(30),
            stale_after: Duration::from_secs(STALE_AFTER_SECS as u64),
            safety_margin: Duration::from_secs(5 * 60),
        }
    }
}

impl LockTimings {
    /// How long after the last stored refresh the holder stops.
    pub fn give_up_after(&self) -> Duration {
        self.stale_after.saturating_sub(self.safety_margin)
    }
}

/// When a process started, so that a PID used again by another process is told apart: the
/// kernel's boot id and the start time in clock ticks since that boot (`/proc/PID/stat`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessStart {
    /// `/proc/sys/kernel/random/boot_id` of the host when the process ran.
    pub boot_id: String,
    /// Field 22 (`starttime`) of `/proc/PID/stat`: clock ticks after boot.
    pub start_ticks: u64,
}

impl ProcessStart {
    /// This process's start; `None` without /proc.
    pub fn of_this_process() -> Option<ProcessStart> {
        Some(ProcessStart {
            boot_id: crate::host::boot_id()?,
            start_ticks: crate::host::start_ticks(std::process::id())?,
        })
    }
}

/// A lock object as stored in `locks/`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lock {
    /// RFC 3339 time of the last refresh.
    pub time: String,
    pub exclusive: bool,
    pub hostname: String,
    pub username: String,
    pub pid: u32,
    /// What holds it, e.g. "backup".
    pub purpose: String,
    /// When the holding process started; absent in locks of older versions (then only whether
    /// the PID exists is known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_start: Option<ProcessStart>,
}

impl Lock {
    /// A lock of this process, refreshed now.
    pub fn new(exclusive: bool, purpose: &str) -> Lock {
        Lock {
            time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
            exclusive,
            hostname: crate::host::hostname(),
            username: crate::host::username(),
            pid: std::process::id(),
            purpose: purpose.into(),
            process_start: ProcessStart::of_this_process(),
        }
    }

    /// Seconds since the lock was last refreshed (negative clocks count as fresh).
    pub fn age_secs(&self, now: chrono::DateTime<chrono::Utc>) -> i64 {
        match chrono::DateTime::parse_from_rfc3339(&self.time) {
            Ok(time) => (now - time.with_timezone(&chrono::Utc)).num_seconds(),
            Err(_) => i64::MAX,
        }
    }

    /// Whether the holder is certainly gone: not refreshed in time, or a process of this host that
    /// no longer exists or whose PID another process has taken since.
    pub fn is_stale(&self, now: chrono::DateTime<chrono::Utc>) -> bool {
        if self.age_secs(now) > STALE_AFTER_SECS {
            return true;
        }
        self.hostname == crate::host::hostname() && !self.holder_is_alive()
    }

    /// Whether this host still runs the process that wrote the lock: its PID exists and, when the
    /// lock says when it started, the process with that PID started then, in this boot.
    fn holder_is_alive(&self) -> bool {
        if !process_exists(self.pid) {
            return false;
        }
        let Some(recorded) = &self.process_start else {
            return true;
        };
        match crate::host::boot_id() {
            Some(boot_id) if boot_id != recorded.boot_id => return false,
            _ => {}
        }
        // Unreadable (e.g. /proc mounted with hidepid): the PID exists, so it may be the holder.
        crate::host::start_ticks(self.pid).is_none_or(|ticks| ticks == recorded.start_ticks)
    }
}

fn process_exists(pid: u32) -> bool {
    // 0 would signal our own process group; it names no lock holder.
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) => true,
        Err(nix::errno::Errno::EPERM) => true,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_lock_json() {
        let lock = Lock {
            time: "2026-11-30T01:00:00.000000001Z".into(),
            exclusive: true,
            hostname: "backup-nightly-x7k2p".into(),
            username: "root".into(),
            pid: 7,
            purpose: "prune".into(),
            process_start: None,
        };
        let json = serde_json::to_string(&lock).unwrap();
        assert_eq!(
            json,
            r#"{"time":"2026-11-30T01:00:00.000000001Z","exclusive":true,"hostname":"backup-nightly-x7k2p","username":"root","pid":7,"purpose":"prune"}"#
        );
        assert_eq!(serde_json::from_str::<Lock>(&json).unwrap(), lock);
        let started = Lock {
            process_start: Some(ProcessStart {
                boot_id: "6f1c0b7e-2d1a-4d57-9d0e-3c1b7a2f9e10".into(),
                start_ticks: 123_456,
            }),
            ..lock
        };
        let json = serde_json::to_string(&started).unwrap();
        assert!(
            json.ends_with(r#""purpose":"prune","processStart":{"bootId":"6f1c0b7e-2d1a-4d57-9d0e-3c1b7a2f9e10","startTicks":123456}}"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<Lock>(&json).unwrap(), started);
    }

    #[test]
    fn a_lock_of_a_dead_process_or_too_old_is_stale() {
        let now = chrono::Utc::now();
        let mine = Lock::new(false, "backup");
        assert!(!mine.is_stale(now));
        let old = Lock {
            time: (now - chrono::Duration::hours(1)).to_rfc3339(),
            ..mine.clone()
        };
        assert!(old.is_stale(now));
        let dead = Lock {
            pid: 0x7fff_fff0,
            ..mine.clone()
        };
        assert!(dead.is_stale(now));
        let elsewhere = Lock {
            pid: 0x7fff_fff0,
            hostname: "other-host".into(),
            ..mine
        };
        assert!(!elsewhere.is_stale(now));
    }

    #[test]
    fn a_lock_naming_a_live_pid_that_started_at_another_time_or_boot_is_stale() {
        let now = chrono::Utc::now();
        let mine = Lock::new(false, "backup");
        let start = mine.process_start.clone().expect("/proc tells our start");
        let reused = Lock {
            process_start: Some(ProcessStart {
                start_ticks: start.start_ticks + 1,
                ..start.clone()
            }),
            ..mine.clone()
        };
        assert!(reused.is_stale(now), "our PID, another start time");
        let before_boot = Lock {
            process_start: Some(ProcessStart {
                boot_id: "00000000-0000-0000-0000-000000000000".into(),
                ..start
            }),
            ..mine.clone()
        };
        assert!(before_boot.is_stale(now), "our PID, another boot");
        let older_version = Lock {
            process_start: None,
            ..mine
        };
        assert!(!older_version.is_stale(now), "no start time: the PID lives");
    }
}
