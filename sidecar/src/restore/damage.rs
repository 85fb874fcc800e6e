//! Files a restore could not write whole: the blobs that were missing or did not open, mapped to
//! the files and byte ranges they belong to (the types live with the error that reports them).

use super::fetch::DamagedBlob;
use super::plan::RestorePlan;
pub use crate::error::{ByteRange, DamagedFile};
use std::collections::BTreeMap;

/// The files (hard links included) that the damaged blobs belong to, in plan order.
pub fn damaged_files(plan: &RestorePlan, damaged: &[DamagedBlob]) -> Vec<DamagedFile> {
    let mut by_entry: BTreeMap<usize, DamagedFile> = BTreeMap::new();
    for damage in damaged {
        let reason = format!(
            "blob {} in pack {}: {}",
            damage.blob.id, damage.pack, damage.reason
        );
        for target in &damage.blob.targets {
            let range = ByteRange {
                start: target.offset,
                end: target.offset + u64::from(damage.blob.location.raw_length),
            };
            let linked = plan
                .hard_links
                .iter()
                .filter(|(_, first)| **first == target.entry)
                .map(|(link, _)| *link);
            for entry in std::iter::once(target.entry).chain(linked) {
                let file = by_entry.entry(entry).or_insert_with(|| DamagedFile {
                    path: super::display_path(&plan.entries[entry].path),
                    ranges: Vec::new(),
                    reasons: Vec::new(),
                });
                file.ranges.push(range);
                if !file.reasons.contains(&reason) {
                    file.reasons.push(reason.clone());
                }
            }
        }
    }
    let mut files: Vec<DamagedFile> = by_entry.into_values().collect();
    for file in &mut files {
        file.ranges.sort();
        file.ranges.dedup();
    }
    files
}
