//! Which snapshot a command means: `latest` (with `--host`/`--before`) or an id prefix
//! (the engine's [`neverwiped::selection`], in the CLI's words).

use anyhow::{bail, Result};
use neverwiped::format::snapshot::Snapshot;
use neverwiped::ids::SnapshotId;
use neverwiped::repository::{Repository, SnapshotFilter};
use neverwiped::selection::{self, SelectionError};

pub use neverwiped::selection::snapshot_spec;

/// Finds a snapshot by `latest` or id prefix (any case).
pub async fn find(repo: &Repository, spec: &str) -> Result<(SnapshotId, Snapshot)> {
    Ok(repo.find_snapshot(&snapshot_spec(spec)).await?)
}

/// A snapshot a newer version wrote may record what this one cannot restore: said before the
/// restore, which puts back what this version knows (its tree and its dumps).
fn warn_of_unknown_members((id, snapshot): &(SnapshotId, Snapshot)) {
    if let Some(members) = snapshot.unknown_members() {
        let members = neverwiped::text::escaped(&members);
        let version = neverwiped::text::escaped(&snapshot.program_version);
        tracing::warn!(
            "snapshot {} was written by {version}, which stored members this version does not know ({members}): restoring what this version knows",
            id.short()
        );
    }
}

/// The snapshot a command means: `restore`'s and `describe`'s arguments
/// (`RestoreArgs::selection`).
pub struct Selection<'a> {
    pub snapshot: &'a str,
    pub host: Option<&'a str>,
    pub before: Option<chrono::DateTime<chrono::Utc>>,
}

/// The snapshot a restore means. `--host` and `--before` choose among snapshots for `latest`; an
/// id that names a snapshot they rule out is refused rather than silently restored.
pub async fn for_restore(
    repo: &Repository,
    selection: &Selection<'_>,
) -> Result<(SnapshotId, Snapshot)> {
    let filter = SnapshotFilter {
        host: selection.host.map(str::to_owned),
        before: selection.before,
    };
    match selection::find_snapshot(repo, selection.snapshot, &filter).await {
        Ok(found) => {
            warn_of_unknown_members(&found);
            Ok(found)
        }
        Err(SelectionError::OtherHost { id, found, wanted }) => bail!(
            "snapshot {id} is of host {found}, not of --host {wanted}: give a snapshot of {wanted}, or `latest --host {wanted}`"
        ),
        Err(SelectionError::NotBefore { id, taken, before }) => {
            bail!("snapshot {id} was taken at {taken}, not before --before {before}")
        }
        Err(SelectionError::Repository(error)) => Err(error.into()),
    }
}
