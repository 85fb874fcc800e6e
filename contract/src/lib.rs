//! The contract between the neverwiped operator and the sidecar it runs in Jobs.
//!
//! The sidecar writes one [`RunResult`] as JSON to the file given by `--result-file` (the operator
//! points it at the container's termination log); the operator reads it back from the terminated
//! container's message and turns it into status. Both sides use these types, so the wire format is
//! defined once. Kubernetes keeps at most 4096 bytes of a termination message:
//! [`RunResult::to_termination_message`] always fits.

use serde::{Deserialize, Serialize};

pub mod cli;
pub mod drill;
pub mod location;
pub mod pattern;
pub mod record;
pub mod streams;
pub mod text;

/// The most bytes Kubernetes keeps of a container's termination message.
pub const TERMINATION_MESSAGE_MAX_BYTES: usize = 4096;

/// How long a drill's database error may stay when a termination message has no room for more.
const DRILL_ERROR_SHORT_BYTES: usize = 240;

/// Version of the [`RunResult`] layout; bumped on any incompatible change.
pub const RESULT_FORMAT_VERSION: u32 = 1;

/// The process exit codes of the sidecar. They follow restic's, which users already script against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ExitStatus {
    /// Everything asked for was done.
    Success,
    /// The command failed; nothing it claims was committed.
    Failed,
    /// A snapshot was written, but some input could not be read (listed as warnings).
    Partial,
    /// The repository does not exist (or is not a neverwiped repository).
    NoRepository,
    /// The repository is locked by another process.
    LockFailed,
    /// The password does not open any key of the repository.
    WrongPassword,
    /// `latest` of the host asked for (`--host`) found no snapshot; the error lists the hosts
    /// the repository holds.
    NoSnapshotOfHost,
    /// `restore --verify` or `--verify-only`: a file of the target differs from the snapshot (in
    /// content or metadata); the error names them.
    VerifyFailed,
    /// Stopped by SIGHUP: the lock was removed and no snapshot was written after the signal.
    Hangup,
    /// Stopped by SIGINT (Ctrl-C), as [`ExitStatus::Hangup`].
    Interrupted,
    /// Stopped by SIGTERM (a deleted or timed-out Job), as [`ExitStatus::Hangup`].
    Terminated,
}

impl ExitStatus {
    /// The numeric process exit code.
    pub fn code(self) -> i32 {
        match self {
            ExitStatus::Success => 0,
            ExitStatus::Failed => 1,
            ExitStatus::Partial => 3,
            ExitStatus::NoRepository => 10,
            ExitStatus::LockFailed => 11,
            ExitStatus::WrongPassword => 12,
            ExitStatus::NoSnapshotOfHost => 13,
            ExitStatus::VerifyFailed => 14,
            // 128 + the signal's number, as a shell and restic report a run a signal ended.
            ExitStatus::Hangup => 129,
            ExitStatus::Interrupted => 130,
            ExitStatus::Terminated => 143,
        }
    }

    /// Whether a stop signal ended the run.
    pub fn is_stop_signal(self) -> bool {
        matches!(
            self,
            ExitStatus::Hangup | ExitStatus::Interrupted | ExitStatus::Terminated
        )
    }

    /// The status for a numeric exit code; unknown codes count as a failure.
    pub fn from_code(code: i32) -> ExitStatus {
        match code {
            0 => ExitStatus::Success,
            3 => ExitStatus::Partial,
            10 => ExitStatus::NoRepository,
            11 => ExitStatus::LockFailed,
            12 => ExitStatus::WrongPassword,
            13 => ExitStatus::NoSnapshotOfHost,
            14 => ExitStatus::VerifyFailed,
            129 => ExitStatus::Hangup,
            130 => ExitStatus::Interrupted,
            143 => ExitStatus::Terminated,
            _ => ExitStatus::Failed,
        }
    }
}

/// Which sidecar command produced a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Operation {
    Init,
    Backup,
    Restore,
    Forget,
    Prune,
    Check,
    /// `snapshots`: lists the snapshots.
    Snapshots,
    /// `ls`: lists the entries of a snapshot.
    Ls,
    /// `unlock`: removes locks.
    Unlock,
    /// `key list|add|remove|passwd`.
    Key,
    /// `mount`: serves the snapshots as a FUSE file system.
    Mount,
    /// `find`: the entries of snapshots that match patterns.
    Find,
    /// `diff`: what changed between two snapshots.
    Diff,
    /// `stats`: what snapshots hold, counted.
    Stats,
    /// `dump`: a file of a snapshot, written out.
    Dump,
    /// `tag`: changes the tags of snapshots.
    Tag,
    /// `cat`: one object of the repository, printed.
    Cat,
    /// `repair index`: the index written again from the packs.
    Repair,
    /// `copy`: snapshots of another repository stored in this one.
    Copy,
    /// `describe`: which snapshot a selection means, and what it recorded of its sources.
    Describe,
    /// `drill`: a snapshot restored into scratch space and held to what it recorded.
    Drill,
    /// `hooks`: one phase of a plan's hooks alone, around its CSI snapshots' creation.
    Hooks,
}

/// One database dump that was part of a backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseResult {
    /// The name given to the database in the plan (`--database NAME=URI`).
    pub name: String,
    /// Bytes the dump tool produced.
    pub dump_bytes: u64,
    /// The dump tool's error, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The repository's size after a run, as the gate stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RepositoryStats {
    /// Bytes of every object in the repository (packs, indexes, snapshots, keys, config).
    pub size_bytes: u64,
    /// Snapshots in the repository, of every host.
    pub snapshots: u64,
}

/// What a prune freed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PruneStats {
    /// Bytes of packs deleted, less the bytes of the packs written to keep their used blobs.
    pub bytes_freed: u64,
    /// Bytes of packs kept or written.
    pub bytes_kept: u64,
    pub packs_deleted: u64,
}

/// What a check looked at and found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckStats {
    pub snapshots: u64,
    pub packs: u64,
    /// Packs read back and authenticated.
    pub packs_read: u64,
    /// Problems found; the run's `error` names the first of them.
    pub problems: u64,
}

/// What a backup changed against its parent snapshot (the newest earlier snapshot of the same host
/// and paths): the figures a night that looks like an attack stands out in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangeStats {
    /// Whether the backup had a parent; without one every file counts as new.
    pub has_parent: bool,
    /// Files that the parent does not hold.
    pub files_new: u64,
    /// Files the parent holds with other content or metadata.
    pub files_changed: u64,
    /// Files the parent holds unchanged.
    pub files_unmodified: u64,
    /// Files the parent holds that this snapshot does not.
    pub files_removed: u64,
    /// Bytes of file content in blobs the repository did not hold before, before compression.
    pub new_bytes_raw: u64,
    /// The same blobs' bytes after compression (before encryption): `new_bytes_compressed /
    /// new_bytes_raw` near 1 means new data that no longer compresses.
    pub new_bytes_compressed: u64,
}

/// How many snapshots [`HostSnapshots::newest`] lists at most.
pub const HOST_SNAPSHOTS_LISTED: usize = 15;

/// The snapshots of one host (a plan's `NAMESPACE/PLAN`) in the repository: the newest few and
/// how many there are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostSnapshots {
    /// The host name the snapshots were written under.
    pub host: String,
    /// Snapshots of that host in the repository.
    pub total: u64,
    /// The newest of them, newest first; at most [`HOST_SNAPSHOTS_LISTED`], fewer when the
    /// termination message has no room for more.
    pub newest: Vec<SnapshotEntry>,
}

/// One snapshot, as a status lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotEntry {
    /// The first 8 hex digits of the snapshot's id: enough to name it in a Restore.
    pub id: String,
    /// RFC 3339 time (UTC, seconds) the snapshot was taken.
    pub time: String,
    /// Files in the snapshot.
    pub files: u64,
    /// Bytes of file content in the snapshot.
    pub size_bytes: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// The outcome of one sidecar run, as the operator reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunResult {
    /// [`RESULT_FORMAT_VERSION`] of the writer.
    pub version: u32,
    pub operation: Operation,
    pub status: ExitStatus,
    /// The snapshot written (backup) or read (restore); for a copy, the newest snapshot it chose
    /// (all of them are in the destination after it), by its id in the source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<String>,
    /// RFC 3339 time of that snapshot (when it was taken): for a restore of `latest`, which point
    /// in time came back, so a gate that withholds the newest snapshots shows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_time: Option<String>,
    /// RFC 3339 time the run started.
    pub started_at: String,
    /// RFC 3339 time the run ended.
    pub finished_at: String,
    pub duration_secs: f64,
    /// Files read (backup) or written (restore); snapshots stored in the destination (copy).
    pub files: u64,
    /// Bytes of file content read (backup) or written (restore).
    pub bytes_read: u64,
    /// Bytes of new, compressed and encrypted data stored in the repository.
    pub bytes_added: u64,
    /// Bytes sent to or received from the repository.
    pub bytes_transferred: u64,
    /// A restore of files: the bytes of file content it wrote per second, on average from the
    /// start of the restore to its end (opening the repository and restoring databases left
    /// out; `duration_secs` is the whole run's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_second: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub databases: Vec<DatabaseResult>,
    /// How many warnings the run had; `warnings` holds the first of them.
    #[serde(default)]
    pub warnings_total: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The error that ended the run, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The repository after the run (backup, prune, check), when it could be measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<RepositoryStats>,
    /// Snapshots removed by retention rules (`backup --keep-*`, or `forget`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshots_forgotten: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prune: Option<PruneStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<CheckStats>,
    /// The snapshots of the run's host that the repository holds after the run (backup, forget,
    /// prune), newest first and bounded: what can be restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_snapshots: Option<HostSnapshots>,
    /// The id (64 hex digits) of the key object that opened the repository, when the run opened
    /// it: the operator passes it back as `--key-hint`, so the next run tries it first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// What a backup changed against its parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<ChangeStats>,
    /// `restore --verify` and `--verify-only`: what was read back and how long it took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<VerificationStats>,
    /// `drill`: what was restored and checked, and how long each volume and database took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drill: Option<drill::DrillStats>,
    /// `describe`: what the snapshot recorded of its claims and databases, made to fit
    /// ([`RunResult::fit_sources`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sources: Option<record::RecordedSources>,
    /// Backup and restore: each stream's bytes and how its command ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<streams::StreamResult>,
    /// Backup and `hooks`: each hook that was due, in the order it ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<streams::HookResult>,
    /// Backup with hooks: seconds from the first pre hook's start to the last post hook's end,
    /// how long the application was paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_secs: Option<f64>,
}

/// A restore read back and held to its snapshot (`restore --verify`, `--verify-only`): the
/// recovery time of a restore drill is `restore_secs` + `verify_secs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerificationStats {
    /// Regular files read back (kept and skipped ones too: what the target holds).
    pub files: u64,
    /// Bytes of their content in the snapshot.
    pub bytes: u64,
    /// Files that differ from the snapshot in content or metadata.
    pub mismatched: u64,
    /// Wall seconds the restore took; absent for `--verify-only`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_secs: Option<f64>,
    /// Wall seconds the verification took.
    pub verify_secs: f64,
}

/// Whether `text` can be a key object's id as [`RunResult::key_id`] carries it: 64 lowercase hex
/// digits. Anything else read from a result is not passed on as a hint.
pub fn is_key_id(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl RunResult {
    /// JSON that fits in a termination message: warnings are dropped (but still counted), then
    /// the oldest listed snapshots (still counted in their total), and the error is shortened
    /// until the whole result fits in [`TERMINATION_MESSAGE_MAX_BYTES`].
    pub fn to_termination_message(&self) -> String {
        let mut result = self.clone();
        loop {
            let json = serde_json::to_string(&result).unwrap_or_else(|_| "{}".to_owned());
            if json.len() <= TERMINATION_MESSAGE_MAX_BYTES {
                return json;
            }
            // The streams' and hooks' stderr tails first: their errors say what happened.
            let (streams, hooks) = (&mut result.streams, &mut result.hooks);
            if streams::shorten_reports(streams, hooks, streams::STDERR_SHORT_BYTES, false)
                || streams::shorten_reports(streams, hooks, 0, false)
            {
                continue;
            }
            if result.warnings.pop().is_some() {
                continue;
            }
            if let Some(listed) = result.host_snapshots.as_mut() {
                if listed.newest.pop().is_some() {
                    continue;
                }
            }
            if let Some(drill) = result.drill.as_mut() {
                if drill.shorten_errors(DRILL_ERROR_SHORT_BYTES) {
                    continue;
                }
            }
            if streams::shorten_reports(
                &mut result.streams,
                &mut result.hooks,
                streams::STDERR_SHORT_BYTES,
                true,
            ) {
                continue;
            }
            if let Some(error) = result.error.as_mut() {
                let excess = json.len() - TERMINATION_MESSAGE_MAX_BYTES;
                let keep = error.len().saturating_sub(excess + 16);
                text::truncate_at_char_boundary(error, keep);
                error.push_str(" …");
                continue;
            }
            // Only the fixed fields remain; they are far below the limit, but never loop forever.
            result.databases.clear();
            result.streams.clear();
            result.hooks.clear();
            result.host_snapshots = None;
            if let Some(drill) = result.drill.as_mut() {
                drill.volumes.clear();
                drill.databases.iter_mut().for_each(|d| d.error = None);
            }
            return serde_json::to_string(&result).unwrap_or_else(|_| "{}".to_owned());
        }
    }

    /// Makes the result fit in a termination message with its [`RunResult::sources`] whole: the
    /// annotations of the claims are left out (and said so) when the record is too large with
    /// them. Warnings and listed snapshots are never traded for the record, which the operator
    /// needs whole; a record too large even so is an error that says how large it is.
    pub fn fit_sources(&mut self) -> Result<(), SourcesTooLarge> {
        let Some(sources) = self.sources.as_mut() else {
            return Ok(());
        };
        sources.unknown.clear();
        for claim in &mut sources.claims {
            claim.unknown.clear();
        }
        for database in &mut sources.databases {
            database.unknown.clear();
            // The row counts stay in the snapshot: a drill reads them there, and a result
            // carries what recreates the claims and databases.
            database.tables.clear();
        }
        let mut fixed = self.clone();
        fixed.warnings.clear();
        fixed.error = None;
        let size =
            |result: &RunResult| serde_json::to_string(result).map_or(usize::MAX, |j| j.len());
        if size(&fixed) <= TERMINATION_MESSAGE_MAX_BYTES {
            return Ok(());
        }
        let sources = fixed.sources.get_or_insert_default();
        for claim in &mut sources.claims {
            if !claim.annotations.is_empty() {
                claim.annotations.clear();
                claim.annotations_left_out = true;
            }
        }
        let bytes = size(&fixed);
        if bytes > TERMINATION_MESSAGE_MAX_BYTES {
            let sources = fixed.sources.unwrap_or_default();
            return Err(SourcesTooLarge {
                bytes,
                claims: sources.claims.len(),
                databases: sources.databases.len(),
            });
        }
        self.sources = fixed.sources;
        Ok(())
    }

    /// Reads a result written by the sidecar.
    pub fn from_json(text: &str) -> Result<RunResult, serde_json::Error> {
        serde_json::from_str(text)
    }
}

/// Makes `sources` fit a `describe` result ([`RunResult::fit_sources`]), measured beside the
/// largest fixed fields such a result has, so that the result written later fits too.
pub fn fit_described_sources(sources: &mut record::RecordedSources) -> Result<(), SourcesTooLarge> {
    let long_time = "2026-11-30T01:00:00.123456789+00:00".to_owned();
    let mut probe = RunResult {
        hooks: Vec::new(),
        paused_secs: None,
        streams: Vec::new(),
        verification: None,
        version: RESULT_FORMAT_VERSION,
        operation: Operation::Describe,
        status: ExitStatus::Success,
        snapshot_id: Some("f".repeat(64)),
        snapshot_time: Some(long_time.clone()),
        started_at: long_time.clone(),
        finished_at: long_time,
        duration_secs: 1e9,
        files: u64::MAX,
        bytes_read: u64::MAX,
        bytes_added: u64::MAX,
        bytes_transferred: u64::MAX,
        bytes_per_second: Some(u64::MAX),
        databases: Vec::new(),
        warnings_total: u64::MAX,
        warnings: Vec::new(),
        error: None,
        repository: None,
        snapshots_forgotten: None,
        prune: None,
        check: None,
        host_snapshots: None,
        key_id: Some("f".repeat(64)),
        changes: None,
        drill: None,
        sources: Some(std::mem::take(sources)),
    };
    let fitted = probe.fit_sources();
    *sources = probe.sources.take().unwrap_or_default();
    fitted
}

/// A snapshot's record that does not fit in a termination message, even without its claims'
/// annotations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the snapshot's record of {claims} claim(s) and {databases} database(s) takes {bytes} bytes as a result, more than the {max} bytes Kubernetes keeps of a termination message: restore with explicit spec.volumes (each with createClaim) and spec.databases instead, or recreate the claims with `kubectl neverwiped restore --create-claims`, which reads the record itself", max = TERMINATION_MESSAGE_MAX_BYTES)]
pub struct SourcesTooLarge {
    pub bytes: usize,
    pub claims: usize,
    pub databases: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `result` as the operator reads it back from the termination message, which must fit.
    #[track_caller]
    fn through_the_message(result: &RunResult) -> RunResult {
        let message = result.to_termination_message();
        assert!(
            message.len() <= TERMINATION_MESSAGE_MAX_BYTES,
            "{}",
            message.len()
        );
        RunResult::from_json(&message).unwrap()
    }

    fn sample() -> RunResult {
        RunResult {
            hooks: Vec::new(),
            paused_secs: None,
            streams: Vec::new(),
            verification: None,
            version: RESULT_FORMAT_VERSION,
            operation: Operation::Backup,
            status: ExitStatus::Partial,
            snapshot_id: Some("ab12".into()),
            snapshot_time: Some("2026-11-30T00:59:58Z".into()),
            started_at: "2026-11-30T01:00:00Z".into(),
            finished_at: "2026-11-30T01:00:05Z".into(),
            duration_secs: 5.0,
            files: 10,
            bytes_read: 1000,
            bytes_added: 100,
            bytes_transferred: 120,
            bytes_per_second: Some(200),
            databases: vec![],
            warnings_total: 1,
            warnings: vec!["cannot read /data/x: permission denied".into()],
            error: None,
            repository: Some(RepositoryStats {
                size_bytes: 4096,
                snapshots: 3,
            }),
            snapshots_forgotten: Some(1),
            prune: None,
            check: None,
            host_snapshots: Some(HostSnapshots {
                host: "shop/nightly".into(),
                total: 2,
                newest: vec![entry(1), entry(0)],
            }),
            key_id: Some("5f".repeat(32)),
            changes: None,
            drill: None,
            sources: None,
        }
    }

    fn entry(n: u32) -> SnapshotEntry {
        SnapshotEntry {
            id: format!("{n:08x}"),
            time: format!("2026-11-{:02}T01:00:00Z", n % 28 + 1),
            files: 10 + u64::from(n),
            size_bytes: 1000 * u64::from(n),
            tags: vec![format!("plan=nightly-{n}")],
        }
    }

    #[test]
    fn only_a_full_lowercase_hex_id_is_a_key_id() {
        assert!(is_key_id(&"5f".repeat(32)));
        let (upper, long, dashed) = (
            "5F".repeat(32),
            "5f".repeat(33),
            format!("{}-x", "5f".repeat(31)),
        );
        let not_ids: [&str; 5] = ["", "5f5f", &upper, &long, &dashed];
        for not_an_id in not_ids {
            assert!(!is_key_id(not_an_id), "{not_an_id}");
        }
    }

    #[test]
    fn result_round_trips_through_json() {
        let result = sample();
        let parsed = RunResult::from_json(&result.to_termination_message()).unwrap();
        assert_eq!(parsed, result);
    }

    #[test]
    fn termination_message_fits_even_with_many_warnings_and_a_long_error() {
        let mut result = sample();
        result.warnings = (0..500)
            .map(|i| format!("cannot read file number {i}"))
            .collect();
        result.warnings_total = 500;
        result.error = Some("é".repeat(5000));
        let parsed = through_the_message(&result);
        assert_eq!(parsed.warnings_total, 500);
        assert!(parsed.error.unwrap().ends_with('…'));
    }

    #[test]
    fn a_result_without_the_snapshot_list_still_reads() {
        let mut result = sample();
        result.host_snapshots = None;
        let json = serde_json::to_string(&result).unwrap();
        assert!(!json.contains("hostSnapshots"), "{json}");
        assert_eq!(RunResult::from_json(&json).unwrap(), result);
    }

    #[test]
    fn termination_message_keeps_the_newest_snapshots_and_their_total() {
        let mut result = sample();
        let newest: Vec<SnapshotEntry> = (0..HOST_SNAPSHOTS_LISTED as u32)
            .rev()
            .map(|n| SnapshotEntry {
                tags: vec!["t".repeat(200), format!("plan={n}")],
                ..entry(n)
            })
            .collect();
        result.host_snapshots = Some(HostSnapshots {
            host: "shop/nightly".into(),
            total: 9000,
            newest: newest.clone(),
        });
        result.warnings = vec!["w".repeat(900); 3];
        let parsed = through_the_message(&result);
        assert!(parsed.warnings.is_empty());
        let listed = parsed.host_snapshots.unwrap();
        assert_eq!(listed.total, 9000);
        assert!(!listed.newest.is_empty() && listed.newest.len() < newest.len());
        // What is left is the newest, in order.
        assert_eq!(listed.newest[..], newest[..listed.newest.len()]);
    }

    #[test]
    fn a_full_snapshot_list_of_ordinary_entries_fits_beside_an_error() {
        let mut result = sample();
        result.host_snapshots = Some(HostSnapshots {
            host: format!("{}/{}", "n".repeat(63), "p".repeat(63)),
            total: 40,
            newest: (0..HOST_SNAPSHOTS_LISTED as u32)
                .map(|n| SnapshotEntry {
                    id: "0123abcd".into(),
                    time: "2026-11-30T01:00:00Z".into(),
                    files: u64::MAX,
                    size_bytes: u64::MAX,
                    tags: vec![format!("plan={n}")],
                })
                .collect(),
        });
        result.error = Some("retention not applied: the gate answered 500".into());
        let parsed = RunResult::from_json(&result.to_termination_message()).unwrap();
        assert_eq!(parsed, result, "nothing had to be dropped");
    }

    #[test]
    fn termination_message_fits_with_many_streams_and_hooks_with_long_stderrs() {
        let mut result = sample();
        result.streams = (0..8)
            .map(|n| streams::StreamResult {
                name: format!("stream-{n}"),
                bytes: 1 << 30,
                exit_code: Some(3),
                error: Some(format!("stream stream-{n}: its command failed: exit 3")),
                stderr: format!("{} the real error {n}", "noise ".repeat(85)),
            })
            .collect();
        result.hooks = (0..8)
            .map(|n| streams::HookResult {
                phase: streams::HookPhase::Pre,
                name: format!("hook-{n}"),
                succeeded: false,
                duration_secs: 1.5,
                exit_code: Some(1),
                error: Some("exit 1".into()),
                stderr: "é".repeat(256),
                started_at: Some("2026-11-30T01:00:00.000Z".into()),
                finished_at: Some("2026-11-30T01:00:01.500Z".into()),
            })
            .collect();
        result.error = Some("pre hook hook-0 failed: exit 1".into());
        let parsed = through_the_message(&result);
        assert_eq!(parsed.error, result.error, "the run's error is kept whole");
        assert_eq!((parsed.streams.len(), parsed.hooks.len()), (8, 8));
        assert!(parsed
            .streams
            .iter()
            .all(|s| s.exit_code == Some(3) && s.error.is_some()));
        assert!(
            parsed.streams[0].stderr.is_empty()
                || parsed.streams[0].stderr.ends_with("the real error 0")
        );
    }

    #[test]
    fn exit_codes_follow_restic() {
        for status in [
            ExitStatus::Success,
            ExitStatus::Failed,
            ExitStatus::Partial,
            ExitStatus::NoRepository,
            ExitStatus::LockFailed,
            ExitStatus::WrongPassword,
            ExitStatus::NoSnapshotOfHost,
            ExitStatus::VerifyFailed,
            ExitStatus::Hangup,
            ExitStatus::Interrupted,
            ExitStatus::Terminated,
        ] {
            assert_eq!(ExitStatus::from_code(status.code()), status);
        }
        assert_eq!(ExitStatus::VerifyFailed.code(), 14);
        assert_eq!(ExitStatus::Interrupted.code(), 130);
        assert_eq!(ExitStatus::Terminated.code(), 143);
        assert_eq!(ExitStatus::WrongPassword.code(), 12);
        assert_eq!(ExitStatus::from_code(77), ExitStatus::Failed);
    }

    fn recorded_claim(n: usize, annotation_bytes: usize) -> record::RecordedClaim {
        record::RecordedClaim {
            path: format!("/data/claim-{n}"),
            name: format!("claim-{n}"),
            requested_size: Some("10Gi".into()),
            storage_class_name: Some("fast-ssd".into()),
            access_modes: vec!["ReadWriteOnce".into()],
            volume_mode: Some("Filesystem".into()),
            labels: [("app".to_owned(), "shop".to_owned())].into(),
            annotations: [("example.com/note".to_owned(), "n".repeat(annotation_bytes))].into(),
            ..record::RecordedClaim::default()
        }
    }

    fn described(claims: usize, annotation_bytes: usize) -> RunResult {
        RunResult {
            operation: Operation::Describe,
            status: ExitStatus::Success,
            host_snapshots: None,
            repository: None,
            snapshots_forgotten: None,
            warnings: vec!["w".repeat(3000)],
            warnings_total: 1,
            sources: Some(record::RecordedSources {
                claims: (0..claims)
                    .map(|n| recorded_claim(n, annotation_bytes))
                    .collect(),
                databases: vec![record::RecordedDatabase {
                    name: "orders".into(),
                    engine: "postgresql".into(),
                    server_version: Some("16.4".into()),
                    databases: vec!["orders".into(), "audit".into()],
                    ..record::RecordedDatabase::default()
                }],
                ..record::RecordedSources::default()
            }),
            ..sample()
        }
    }

    #[test]
    fn a_record_that_fits_is_carried_whole_and_warnings_give_way_to_it() {
        let mut result = described(4, 40);
        let expected = result.sources.clone();
        result.fit_sources().unwrap();
        assert_eq!(result.sources, expected);
        let parsed = through_the_message(&result);
        assert_eq!(parsed.sources, expected, "the record is never cut");
        assert!(parsed.warnings.is_empty() && parsed.warnings_total == 1);
    }

    #[test]
    fn a_result_carries_no_table_rows_which_stay_in_the_snapshot() {
        let mut result = described(1, 10);
        let sources = result.sources.as_mut().unwrap();
        sources.databases[0].tables = (0..500)
            .map(|n| record::RecordedTable {
                database: "orders".into(),
                table: format!("public.table_{n}"),
                rows: n,
            })
            .collect();
        result.fit_sources().unwrap();
        let database = &result.sources.as_ref().unwrap().databases[0];
        assert!(database.tables.is_empty());
        assert_eq!(database.databases, ["orders", "audit"]);
    }

    #[test]
    fn annotations_are_left_out_and_said_so_when_the_record_is_too_large_with_them() {
        let mut result = described(6, 600);
        result.fit_sources().unwrap();
        let sources = result.sources.as_ref().unwrap();
        assert!(sources
            .claims
            .iter()
            .all(|c| c.annotations.is_empty() && c.annotations_left_out));
        assert_eq!(sources.claims[5].labels["app"], "shop");
        let parsed = RunResult::from_json(&result.to_termination_message()).unwrap();
        assert_eq!(parsed.sources, result.sources);
    }

    #[test]
    fn a_record_too_large_even_without_annotations_is_an_error_that_says_what_to_do() {
        let mut result = described(40, 10);
        let error = result.fit_sources().unwrap_err();
        assert_eq!((error.claims, error.databases), (40, 1));
        assert!(error.bytes > TERMINATION_MESSAGE_MAX_BYTES);
        let text = error.to_string();
        assert!(text.contains("4096 bytes"), "{text}");
        assert!(
            text.contains("createClaim") && text.contains("--create-claims"),
            "{text}"
        );
    }
}
