//! `restore --verify` and `restore --verify-only`: the target read back and held to the snapshot
//! (see [`neverwiped::restore::verify`]), summed up, and any difference named and failed with
//! [`ExitStatus::VerifyFailed`].

use super::args::{Cli, RestoreArgs};
use super::{locks, open_indexed, select, FailedAfter, Outcome, RunRecord};
use anyhow::Result;
use neverwiped::ids::BlobId;
use neverwiped::repository::IndexedRepository;
use neverwiped::restore::{self, RestoreOptions, VerifyReport, VerifySettings};
use neverwiped::text::{escaped, escaped_bytes};
use neverwiped_contract::{ExitStatus, VerificationStats};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Instant;

/// Differing files named in the error and the JSON; the rest are counted.
const NAMED_AT_MOST: usize = 30;

/// What a verification holds the target to: what the restore with `options` sets.
pub fn settings(options: &RestoreOptions) -> VerifySettings {
    VerifySettings {
        filter: options.filter.clone(),
        owners: options.restore_owner,
        privileges: options.privileges,
    }
}

/// One verification of a target against a snapshot's tree.
pub struct Verification<'a> {
    pub repo: &'a IndexedRepository,
    pub tree: BlobId,
    pub target: &'a Path,
    pub settings: VerifySettings,
    /// How long the restore before it took (`None`: nothing was restored).
    pub restore_secs: Option<f64>,
}

impl Verification<'_> {
    /// Verifies, hands the verification's JSON to `print_json` (to print it with the command's
    /// own), prints the summary line, and returns `outcome` with the verification in it; any
    /// difference fails the run, naming the files.
    pub async fn run(
        self,
        cli: &Cli,
        mut outcome: Outcome,
        print_json: impl FnOnce(serde_json::Value),
    ) -> Result<Outcome> {
        let started = Instant::now();
        let verified = locks::read_locked(self.repo, "restore --verify", async {
            Ok(restore::verify(self.repo, self.tree, self.target, &self.settings).await?)
        })
        .await?;
        let stats = VerificationStats {
            files: verified.files,
            bytes: verified.bytes,
            mismatched: verified.mismatches.len() as u64,
            restore_secs: self.restore_secs,
            verify_secs: started.elapsed().as_secs_f64(),
        };
        let named = self.named_mismatches(&verified);
        let mut printed = serde_json::to_value(&stats)?;
        printed["mismatches"] = serde_json::json!(named
            .iter()
            .map(|(path, problem)| serde_json::json!({"path": path, "problem": problem}))
            .collect::<Vec<_>>());
        if cli.json {
            print_json(printed);
        } else {
            print_json(serde_json::Value::Null);
            if !cli.quiet {
                println!(
                    "verified {} files, {} bytes in {:.3} s",
                    stats.files, stats.bytes, stats.verify_secs
                );
            }
        }
        outcome.verification = Some(stats);
        if verified.mismatches.is_empty() {
            return Ok(outcome);
        }
        let message = self.failure(&verified, &named);
        Err(FailedAfter {
            message,
            outcome,
            status: Some(ExitStatus::VerifyFailed),
        }
        .into())
    }

    /// The first differing files, each as its path in the target and what differs, escaped.
    fn named_mismatches(&self, verified: &VerifyReport) -> Vec<(String, String)> {
        verified
            .mismatches
            .iter()
            .take(NAMED_AT_MOST)
            .map(|mismatch| {
                let path = self
                    .target
                    .join(std::ffi::OsStr::from_bytes(&mismatch.path));
                (
                    escaped_bytes(path.as_os_str().as_bytes()).into_owned(),
                    escaped(&mismatch.problem).into_owned(),
                )
            })
            .collect()
    }

    fn failure(&self, verified: &VerifyReport, named: &[(String, String)]) -> String {
        let listed: Vec<String> = named
            .iter()
            .map(|(path, problem)| format!("{path} ({problem})"))
            .collect();
        let more = match verified.mismatches.len() - named.len() {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        format!(
            "verification failed: {} of {} files differ from the snapshot: {}{more}",
            verified.mismatches.len(),
            verified.files,
            listed.join(", ")
        )
    }
}

/// `restore --verify-only`: holds what `--target` holds to the snapshot as `settings` say (those
/// of the restore with the same arguments), restoring nothing.
pub async fn verify_only(
    cli: &Cli,
    args: &RestoreArgs,
    record: &RunRecord,
    target: &Path,
    settings: VerifySettings,
) -> Result<Outcome> {
    let repo = open_indexed(cli, record).await?;
    let (snapshot_id, snapshot) = select::for_restore(&repo, &args.selection()).await?;
    let outcome = Outcome {
        snapshot_id: Some(snapshot_id.to_hex()),
        snapshot_time: Some(snapshot.time.clone()),
        ..Outcome::default()
    };
    let verification = Verification {
        repo: &repo,
        tree: snapshot.tree,
        target,
        settings,
        restore_secs: None,
    };
    verification
        .run(cli, outcome, |verified| {
            if verified.is_null() {
                return;
            }
            let printed = serde_json::json!({
                "snapshotId": snapshot_id.to_hex(),
                "snapshotTime": snapshot.time,
                "target": target.to_string_lossy(),
                "verification": verified,
            });
            println!("{printed}");
        })
        .await
}
