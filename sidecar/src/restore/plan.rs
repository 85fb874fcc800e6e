//! What a restore will do: every entry of the snapshot below the includes, in creation order, and
//! for every pack the blobs to fetch and where each one goes.

use crate::error::{Error, Result};
use crate::format::tree::{Node, NodeKind};
use crate::ids::{BlobId, PackId};
use crate::index::BlobLocation;
use crate::repository::IndexedRepository;
use std::collections::HashMap;

/// One entry to recreate, at `path` (relative to the target, components joined by `/`).
#[derive(Debug, Clone)]
pub struct PlannedEntry {
    pub path: Vec<u8>,
    pub node: Node,
}

/// Where a blob's plaintext is written: a file (by its entry number) at an offset.
#[derive(Debug, Clone, Copy)]
pub struct BlobTarget {
    pub entry: usize,
    pub offset: u64,
}

#[derive(Debug, Clone)]
pub struct PlannedBlob {
    pub id: BlobId,
    pub location: BlobLocation,
    pub targets: Vec<BlobTarget>,
}

/// The whole restore, computed before anything is written.
#[derive(Debug, Default)]
pub struct RestorePlan {
    /// Parents before children.
    pub entries: Vec<PlannedEntry>,
    /// Per pack, its blobs sorted by offset.
    pub packs: Vec<(PackId, Vec<PlannedBlob>)>,
    /// Entries that are hard links to an earlier entry (by number).
    pub hard_links: HashMap<usize, usize>,
    pub total_bytes: u64,
    pub files: u64,
}

/// Names from a tree must be plain names: nothing that would escape the target.
fn check_name(name: &[u8], tree: &BlobId) -> Result<()> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(Error::Corrupt {
            what: format!("tree {tree}"),
            reason: format!("invalid entry name {:?}", String::from_utf8_lossy(name)),
        });
    }
    Ok(())
}

/// Whether `path` (snapshot path without the leading `/`) is selected by the includes, or lies on
/// the way to one of them.
fn selection(path: &[u8], includes: &[Vec<u8>]) -> (bool, bool) {
    if includes.is_empty() {
        return (true, true);
    }
    let mut selected = false;
    let mut on_the_way = false;
    for include in includes {
        let below = path == include.as_slice()
            || (path.starts_with(include) && path.get(include.len()) == Some(&b'/'));
        let above = include.starts_with(path) && include.get(path.len()) == Some(&b'/');
        selected |= below;
        on_the_way |= above;
    }
    (selected, selected || on_the_way)
}

/// Plans where each content blob of the file entry `number` goes; checks that they add up to
/// the file's size.
fn plan_content(
    repo: &IndexedRepository,
    blobs: &mut HashMap<BlobId, PlannedBlob>,
    number: usize,
    path: &[u8],
    size: u64,
    content: &[BlobId],
    tree_id: &BlobId,
) -> Result<()> {
    let mut offset = 0u64;
    for id in content {
        let location = repo.index().get(id).ok_or_else(|| Error::BlobMissing {
            id: *id,
            context: format!("content of /{}", String::from_utf8_lossy(path)),
        })?;
        blobs
            .entry(*id)
            .or_insert_with(|| PlannedBlob {
                id: *id,
                location,
                targets: Vec::new(),
            })
            .targets
            .push(BlobTarget {
                entry: number,
                offset,
            });
        offset += location.raw_length as u64;
    }
    if offset != size {
        return Err(Error::Corrupt {
            what: format!("tree {tree_id}"),
            reason: format!(
                "/{} has {size} bytes but its content adds up to {offset}",
                String::from_utf8_lossy(path)
            ),
        });
    }
    Ok(())
}

/// Walks the snapshot's trees and plans the restore of what the includes select (all when empty).
/// Include paths are snapshot paths such as `/data/db/table.sql`.
pub async fn plan_restore(
    repo: &IndexedRepository,
    root: BlobId,
    includes: &[String],
) -> Result<RestorePlan> {
    let includes: Vec<Vec<u8>> = includes
        .iter()
        .map(|i| i.trim_matches('/').as_bytes().to_vec())
        .filter(|i| !i.is_empty())
        .collect();
    let mut plan = RestorePlan::default();
    let mut matched = vec![false; includes.len()];
    let mut pending: Vec<(Vec<u8>, BlobId)> = vec![(Vec::new(), root)];
    let mut first_link: HashMap<(u64, u64), usize> = HashMap::new();
    let mut blobs: HashMap<BlobId, PlannedBlob> = HashMap::new();

    while let Some((dir_path, tree_id)) = pending.pop() {
        let tree = repo
            .read_tree(
                &tree_id,
                &format!("directory /{}", String::from_utf8_lossy(&dir_path)),
            )
            .await?;
        let mut subdirs = Vec::new();
        for pair in tree.nodes.windows(2) {
            if pair[0].name >= pair[1].name {
                return Err(Error::Corrupt {
                    what: format!("tree {tree_id}"),
                    reason: "entries are not sorted by unique names".into(),
                });
            }
        }
        for node in tree.nodes {
            check_name(&node.name, &tree_id)?;
            let mut path = dir_path.clone();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(&node.name);
            let (selected, needed) = selection(&path, &includes);
            if !needed {
                continue;
            }
            for (flag, include) in matched.iter_mut().zip(&includes) {
                *flag |= path == *include;
            }
            let number = plan.entries.len();
            match &node.kind {
                NodeKind::Dir { subtree } => subdirs.push((path.clone(), *subtree)),
                NodeKind::File { .. } if !selected => continue,
                NodeKind::File { size, content } => {
                    plan.files += 1;
                    let link_key = (node.meta.device, node.meta.inode);
                    if node.meta.links > 1 {
                        if let Some(&first) = first_link.get(&link_key) {
                            plan.hard_links.insert(number, first);
                            plan.entries.push(PlannedEntry { path, node });
                            continue;
                        }
                        first_link.insert(link_key, number);
                    }
                    plan.total_bytes += size;
                    plan_content(repo, &mut blobs, number, &path, *size, content, &tree_id)?;
                }
                _ if !selected => continue,
                _ => {}
            }
            plan.entries.push(PlannedEntry { path, node });
        }
        // Reverse so that popping visits directories in name order, parents before children.
        pending.extend(subdirs.into_iter().rev());
    }
    if let Some(missing) = includes
        .iter()
        .zip(&matched)
        .find(|(_, found)| !**found)
        .map(|(i, _)| i)
    {
        return Err(Error::Usage(format!(
            "/{} is not in the snapshot",
            String::from_utf8_lossy(missing)
        )));
    }
    let mut by_pack: HashMap<PackId, Vec<PlannedBlob>> = HashMap::new();
    for blob in blobs.into_values() {
        by_pack.entry(blob.location.pack).or_default().push(blob);
    }
    plan.packs = by_pack
        .into_iter()
        .map(|(pack, mut blobs)| {
            blobs.sort_by_key(|b| b.location.offset);
            (pack, blobs)
        })
        .collect();
    plan.packs.sort_by_key(|(pack, _)| *pack);
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::selection;

    #[test]
    fn includes_select_paths_below_and_keep_the_way_there() {
        let includes = vec![b"data/db".to_vec()];
        assert_eq!(selection(b"data", &includes), (false, true));
        assert_eq!(selection(b"data/db", &includes), (true, true));
        assert_eq!(selection(b"data/db/x", &includes), (true, true));
        assert_eq!(selection(b"data/dbx", &includes), (false, false));
        assert_eq!(selection(b"other", &includes), (false, false));
        assert_eq!(selection(b"anything", &[]), (true, true));
    }
}
