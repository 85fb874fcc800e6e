//! `check`: is every snapshot restorable? Structure always; with `read_data`, every byte too.
//!
//! Structure: every indexed pack exists with the size its index entries imply; every snapshot's
//! trees can be read and every blob they name is indexed. Read data: each chosen pack is read
//! whole, its SHA-256 must match its name, its sealed header must match the index, and every
//! blob must open (authenticated, decompressed, and hashing to its id).
//!
//! Memory: the loaded index, each pack's expected size, and the trees seen; index objects are
//! read one at a time (again when packs are read, for the entries of the chosen ones).

use super::expected_pack_size;
use crate::backend::ObjectKind;
use crate::error::{Error, Result};
use crate::format::index::{IndexFile, IndexedPack};
use crate::format::pack::read_header;
use crate::format::tree::NodeKind;
use crate::ids::{BlobId, PackId};
use crate::repository::{open_blob, IndexedRepository};
use std::collections::{HashMap, HashSet};

/// How much data `check` reads back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReadData {
    None,
    All,
    /// This percentage of the packs, chosen at random each run (so repeated runs cover all).
    Subset(f64),
    /// Group `n` of `of` (1 ≤ n ≤ of ≤ 256): the packs whose id's first byte modulo `of` is
    /// `n - 1`, restic's rule, so the `of` runs `1/of` … `of/of` read every pack exactly once.
    Group {
        n: u32,
        of: u32,
    },
    /// Packs chosen at random, as many as fit in this many bytes (at least one).
    Bytes(u64),
}

/// The packs `read_data` reads, of `packs` (id and size).
fn choose_packs(packs: &HashMap<PackId, u64>, read_data: ReadData) -> HashSet<PackId> {
    match read_data {
        ReadData::None => HashSet::new(),
        ReadData::All => packs.keys().copied().collect(),
        ReadData::Group { n, of } => packs
            .keys()
            .filter(|id| u32::from(id.as_bytes()[0]) % of.max(1) == n.saturating_sub(1))
            .copied()
            .collect(),
        ReadData::Bytes(budget) => {
            let salt: u64 = rand::random();
            let mut shuffled: Vec<(&PackId, &u64)> = packs.iter().collect();
            shuffled.sort_by_key(|(id, _)| salted(id, salt));
            let mut total = 0u64;
            let mut chosen = HashSet::new();
            for (id, size) in shuffled {
                if !chosen.is_empty() && total + size > budget {
                    continue;
                }
                total += size;
                chosen.insert(*id);
            }
            chosen
        }
        ReadData::Subset(percent) => {
            let threshold = (percent.clamp(0.0, 100.0) / 100.0 * u64::MAX as f64) as u64;
            let salt: u64 = rand::random();
            let mut chosen: HashSet<PackId> = packs
                .keys()
                .filter(|id| salted(id, salt) <= threshold)
                .copied()
                .collect();
            if chosen.is_empty() && percent > 0.0 {
                chosen.extend(packs.keys().next());
            }
            chosen
        }
    }
}

/// A pack's place in this run's random order.
fn salted(id: &PackId, salt: u64) -> u64 {
    let bytes: [u8; 8] = id.as_bytes()[..8].try_into().expect("8 bytes");
    u64::from_le_bytes(bytes) ^ salt
}

#[derive(Debug, Default)]
pub struct CheckReport {
    /// Each problem, naming the snapshot, object or blob and what is wrong.
    pub problems: Vec<String>,
    /// Packs that no index lists (left by interrupted backups; `prune` removes them).
    pub unindexed_packs: Vec<String>,
    pub snapshots: usize,
    pub packs: usize,
    pub packs_read: usize,
    pub bytes_read: u64,
}

impl CheckReport {
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

pub async fn check(repo: &IndexedRepository, read_data: ReadData) -> Result<CheckReport> {
    let mut report = CheckReport::default();
    // What is checked is what backups and restores load: the index objects in force, today.
    repo.refresh_index().await?;
    let objects = repo.index().objects.clone();
    let mut packs: HashMap<PackId, u64> = HashMap::new();
    for object in &objects {
        let file: IndexFile = repo.read_object(ObjectKind::Index, object).await?;
        for pack in &file.packs {
            packs.insert(pack.id, expected_pack_size(pack));
        }
    }
    report.packs = packs.len();
    let stored: HashMap<String, u64> = repo
        .backend()
        .list(ObjectKind::Data)
        .await?
        .into_iter()
        .map(|info| (info.name, info.size_bytes))
        .collect();

    for (id, &expected) in &packs {
        match stored.get(&id.to_hex()) {
            None => report.problems.push(format!(
                "pack {id} is in the index but missing from the repository"
            )),
            Some(&size) if size != expected => report.problems.push(format!(
                "pack {id} has {size} bytes, the index implies {expected} (truncated or damaged)"
            )),
            Some(_) => {}
        }
    }
    let indexed_names: HashSet<String> = packs.keys().map(|id| id.to_hex()).collect();
    report.unindexed_packs = stored
        .keys()
        .filter(|name| !indexed_names.contains(*name))
        .cloned()
        .collect();
    report.unindexed_packs.sort();

    // Damaged snapshots are reported by `check_snapshots`, which reads each one.
    let damaged = repo.damaged_objects().await?;
    for object in damaged.iter().filter(|o| o.kind == ObjectKind::Index) {
        report.problems.push(format!(
            "index object {object} cannot be read ({}): backups and restores skip it, so the \
             packs only it lists are unknown to them",
            object.reason
        ));
    }
    check_snapshots(repo, &mut report).await?;

    let mut chosen = choose_packs(&packs, read_data);
    // The chosen packs' entries, from the index objects again, one object at a time.
    for object in &objects {
        if chosen.is_empty() {
            break;
        }
        let file: IndexFile = repo.read_object(ObjectKind::Index, object).await?;
        for pack in file.packs {
            // A pack listed twice is read once; one missing was reported already.
            if chosen.remove(&pack.id) && stored.contains_key(&pack.id.to_hex()) {
                read_pack(repo, &pack, &mut report).await?;
            }
        }
    }
    Ok(report)
}

async fn check_snapshots(repo: &IndexedRepository, report: &mut CheckReport) -> Result<()> {
    let mut trees_seen: HashSet<BlobId> = HashSet::new();
    for id in repo.list_ids(ObjectKind::Snapshots).await? {
        report.snapshots += 1;
        let snapshot: crate::format::snapshot::Snapshot =
            match repo.read_object(ObjectKind::Snapshots, &id).await {
                Ok(snapshot) => snapshot,
                Err(error) => {
                    report
                        .problems
                        .push(format!("snapshot {id} cannot be read: {error}"));
                    continue;
                }
            };
        let mut pending = vec![(String::from("/"), snapshot.tree)];
        while let Some((path, tree_id)) = pending.pop() {
            if !trees_seen.insert(tree_id) {
                continue;
            }
            if !repo.index().contains(&tree_id) {
                report.problems.push(format!(
                    "snapshot {}: the tree of {path} ({tree_id}) is missing",
                    id.short()
                ));
                continue;
            }
            let tree = match repo.read_tree(&tree_id, &path).await {
                Ok(tree) => tree,
                Err(error) => {
                    report.problems.push(format!(
                        "snapshot {}: the tree of {path} cannot be read: {error}",
                        id.short()
                    ));
                    continue;
                }
            };
            for node in tree.nodes {
                let child = format!(
                    "{}{}{}",
                    path,
                    if path == "/" { "" } else { "/" },
                    String::from_utf8_lossy(&node.name)
                );
                match node.kind {
                    NodeKind::Dir { subtree } => pending.push((child, subtree)),
                    NodeKind::File { content, .. } => {
                        let index = repo.index();
                        for blob in content.iter().filter(|blob| !index.contains(blob)) {
                            report.problems.push(format!(
                                "snapshot {}: {child}: data blob {blob} is missing",
                                id.short()
                            ));
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(())
}

async fn read_pack(
    repo: &IndexedRepository,
    pack: &IndexedPack,
    report: &mut CheckReport,
) -> Result<()> {
    let name = pack.id.to_hex();
    let bytes = match repo.backend().read(ObjectKind::Data, &name).await {
        Ok(bytes) => bytes,
        Err(error) => {
            report
                .problems
                .push(format!("pack {name} cannot be read: {error}"));
            return Ok(());
        }
    };
    report.packs_read += 1;
    report.bytes_read += bytes.len() as u64;
    let keys = repo.keys().clone();
    let pack = pack.clone();
    let problems = tokio::task::spawn_blocking(move || verify_pack_bytes(&keys, &pack, &bytes))
        .await
        .map_err(|e| Error::Interrupted(e.to_string()))?;
    report.problems.extend(problems);
    Ok(())
}

/// Everything that is wrong with a pack's bytes, compared with its index entries.
fn verify_pack_bytes(
    keys: &crate::crypto::RepositoryKeys,
    pack: &IndexedPack,
    bytes: &[u8],
) -> Vec<String> {
    let name = pack.id.to_hex();
    if PackId::of_bytes(bytes) != pack.id {
        // Still look inside, to name the damaged blobs.
        let mut problems = vec![format!(
            "pack {name}: its bytes do not match its name (SHA-256): damaged"
        )];
        problems.extend(verify_blobs(keys, pack, bytes));
        return problems;
    }
    let mut problems = Vec::new();
    match read_header(&keys.sealer, bytes, &format!("pack {name}")) {
        Ok(entries) => {
            let from_header: HashSet<(BlobId, u32, u32)> =
                entries.iter().map(|e| (e.id, e.offset, e.length)).collect();
            let from_index: HashSet<(BlobId, u32, u32)> = pack
                .blobs
                .iter()
                .map(|b| (b.id, b.offset, b.length))
                .collect();
            if from_header != from_index {
                problems.push(format!(
                    "pack {name}: its header and the index disagree on its blobs"
                ));
            }
        }
        Err(error) => problems.push(format!("pack {name}: {error}")),
    }
    problems.extend(verify_blobs(keys, pack, bytes));
    problems
}

fn verify_blobs(
    keys: &crate::crypto::RepositoryKeys,
    pack: &IndexedPack,
    bytes: &[u8],
) -> Vec<String> {
    let mut problems = Vec::new();
    for blob in &pack.blobs {
        let (start, end) = (
            blob.offset as usize,
            blob.offset as usize + blob.length as usize,
        );
        let what = format!("blob {} in pack {}", blob.id, pack.id);
        match bytes.get(start..end) {
            None => problems.push(format!("{what}: past the end of the pack")),
            Some(sealed) => {
                if let Err(error) =
                    open_blob(keys, blob.kind, &blob.id, sealed, blob.raw_length, &what)
                {
                    problems.push(error.to_string());
                }
            }
        }
    }
    problems
}
