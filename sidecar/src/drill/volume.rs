//! The drill of one volume: its files (or a sample of them) restored into the scratch space,
//! read back and held to the snapshot as `restore --verify` does, then removed.

use super::sample;
use crate::error::Error;
use crate::ids::BlobId;
use crate::repository::IndexedRepository;
use crate::restore::{self, RestoreOptions, VerifySettings};
use crate::text::{escaped, escaped_bytes};
use neverwiped_contract::drill::{DrillSample, DrillVolume};
use neverwiped_contract::record::RecordedSources;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

/// How a volume's drill went.
#[derive(Debug, Default)]
pub struct VolumeDrill {
    pub stats: DrillVolume,
    /// Each file that differs from the snapshot or could not be restored (its snapshot path,
    /// escaped), with what is wrong, in path order.
    pub problems: BTreeMap<String, String>,
}

/// The volumes of a snapshot: the paths of its recorded claims; for a snapshot without any, each
/// entry at its top but the dumps' folder `/databases`.
pub async fn volumes(
    repo: &IndexedRepository,
    root: BlobId,
    sources: &RecordedSources,
) -> crate::error::Result<Vec<String>> {
    if !sources.claims.is_empty() {
        return Ok(sources.claims.iter().map(|c| c.path.clone()).collect());
    }
    let tree = repo.read_tree(&root, "the snapshot's top folder").await?;
    let top = crate::dump::SNAPSHOT_DIR.trim_start_matches('/').as_bytes();
    Ok(tree
        .nodes
        .iter()
        .filter(|node| node.name != top)
        .map(|node| format!("/{}", String::from_utf8_lossy(&node.name)))
        .collect())
}

/// Restores the files of the volume at `path` that `sample` takes into `target` (an empty or
/// missing folder), holds them to the snapshot, and removes them again. A file that cannot be
/// restored (a damaged pack) or differs is a problem; an error that stops the whole volume (its
/// folder unreadable) is one problem named after the volume.
pub async fn drill_volume(
    repo: &IndexedRepository,
    root: BlobId,
    path: &str,
    sample: DrillSample,
    target: &Path,
) -> VolumeDrill {
    let started = Instant::now();
    // Removes the restored files should the drill be dropped part way (a stop signal).
    let _removed = super::RemovedOnDrop(target.to_owned());
    let mut drill = VolumeDrill {
        stats: DrillVolume {
            path: path.to_owned(),
            ..DrillVolume::default()
        },
        ..VolumeDrill::default()
    };
    if let Err(error) = restore_and_verify(repo, root, path, sample, target, &mut drill).await {
        let problem = format!("not drilled: {}", escaped(&error.to_string()));
        drill.problems.insert(escaped(path).into_owned(), problem);
    }
    if let Err(error) = super::remove_tree(target) {
        let problem = format!("the restored files were not removed: {error:#}");
        drill.problems.insert(escaped(path).into_owned(), problem);
    }
    drill.stats.secs = started.elapsed().as_secs_f64();
    drill.stats.mismatched = drill.problems.len() as u64;
    drill
}

async fn restore_and_verify(
    repo: &IndexedRepository,
    root: BlobId,
    path: &str,
    sample: DrillSample,
    target: &Path,
    drill: &mut VolumeDrill,
) -> anyhow::Result<()> {
    super::remove_tree(target)?;
    std::fs::create_dir_all(target)?;
    let mut options = RestoreOptions::new(target);
    options.filter = sample::volume_filter(path, sample);
    match restore::restore(repo, root, &options).await {
        Ok(report) => {
            for warning in &report.warnings {
                tracing::warn!("{}", escaped(warning));
            }
        }
        Err(Error::RestoreIncomplete { damaged }) => {
            for file in damaged {
                let reasons = escaped(&file.reasons.join("; ")).into_owned();
                let problem = format!("could not be restored: {reasons}");
                drill
                    .problems
                    .insert(escaped(&file.path).into_owned(), problem);
            }
        }
        Err(error) => return Err(error.into()),
    }
    let settings = VerifySettings {
        filter: options.filter.clone(),
        owners: options.restore_owner,
        privileges: options.privileges,
    };
    let verified = restore::verify(repo, root, target, &settings).await?;
    drill.stats.files = verified.files;
    drill.stats.bytes = verified.bytes;
    for mismatch in verified.mismatches {
        let mut snapshot_path = b"/".to_vec();
        snapshot_path.extend_from_slice(&mismatch.path);
        let named = escaped_bytes(&snapshot_path).into_owned();
        let problem = escaped(&mismatch.problem).into_owned();
        drill.problems.entry(named).or_insert(problem);
    }
    Ok(())
}
