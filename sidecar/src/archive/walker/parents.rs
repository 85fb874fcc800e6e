//! The parent snapshot's trees, read ahead of the walk.
//!
//! A quiet night compares every directory with its tree in the parent snapshot. Read one by one on
//! the walker's thread, each costs a read of its pack, an authentication, a decompression and a
//! decoding while the walk waits. Here the subtrees of the directory being walked are read on the
//! runtime's threads, in the order the walk will want them, a bounded number at once, and each is
//! re-encoded there too: a tree whose bytes come back the same ([`ParentTree::canonical`]) is one
//! that the walk may reuse by id when nothing in its directory changed, since encoding the same
//! nodes again would give the same bytes and so the same id.

use crate::backend::ObjectKind;
use crate::compress::Decoder;
use crate::crypto::{blob_associated_data, RepositoryKeys};
use crate::error::{Error, Result};
use crate::format::tree::{NodeKind, Tree};
use crate::ids::{BlobId, BlobKind};
use crate::index::BlobLocation;
use crate::repository::IndexedRepository;
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

/// Trees read ahead at once, over the whole walk: what they hold is bounded by this many trees.
const TREES_AHEAD: usize = 32;

/// Trees read ahead for one directory's subdirectories.
const TREES_AHEAD_PER_DIRECTORY: usize = 8;

/// A directory's tree in the parent snapshot.
pub struct ParentTree {
    pub id: BlobId,
    pub tree: Tree,
    /// Encoding `tree` again gives exactly the stored bytes: a directory whose nodes all equal
    /// these can reuse `id` without encoding them.
    pub canonical: bool,
}

/// Reads parent trees; shared by the whole walk.
#[derive(Clone)]
pub struct ParentReader {
    repo: IndexedRepository,
    runtime: tokio::runtime::Handle,
    ahead: Arc<Semaphore>,
}

type Reading = JoinHandle<Result<(ParentTree, OwnedSemaphorePermit)>>;

/// The subtrees of one directory's parent tree, in the order of their names, some being read.
#[derive(Default)]
pub struct Subtrees {
    waiting: VecDeque<BlobId>,
    reading: VecDeque<(BlobId, Reading)>,
}

impl ParentReader {
    pub fn new(repo: IndexedRepository, runtime: tokio::runtime::Handle) -> ParentReader {
        ParentReader {
            repo,
            runtime,
            ahead: Arc::new(Semaphore::new(TREES_AHEAD)),
        }
    }

    /// Reads one tree on the walker's thread.
    pub fn read_now(&self, id: &BlobId) -> Result<ParentTree> {
        self.runtime.block_on(read(self.repo.clone(), *id))
    }

    /// The subdirectories of `parent`, with the first of them being read.
    pub fn subtrees_of(&self, parent: Option<&ParentTree>) -> Subtrees {
        let waiting = parent
            .into_iter()
            .flat_map(|parent| &parent.tree.nodes)
            .filter_map(|node| match &node.kind {
                NodeKind::Dir { subtree } => Some(*subtree),
                _ => None,
            })
            .collect();
        let mut subtrees = Subtrees {
            waiting,
            reading: VecDeque::new(),
        };
        self.read_ahead(&mut subtrees);
        subtrees
    }

    fn read_ahead(&self, subtrees: &mut Subtrees) {
        while subtrees.reading.len() < TREES_AHEAD_PER_DIRECTORY {
            let Some(&id) = subtrees.waiting.front() else {
                return;
            };
            let Ok(permit) = self.ahead.clone().try_acquire_owned() else {
                return;
            };
            subtrees.waiting.pop_front();
            let repo = self.repo.clone();
            let reading = self.runtime.spawn(async move {
                let tree = read(repo, id).await?;
                Ok((tree, permit))
            });
            subtrees.reading.push_back((id, reading));
        }
    }

    /// The subtree `id` of the directory `subtrees` lists: read ahead if it was, else now.
    /// Subtrees listed before it are given up (their directories are gone or not walked).
    pub fn take(&self, subtrees: &mut Subtrees, id: &BlobId) -> Result<ParentTree> {
        let found = loop {
            match subtrees.reading.pop_front() {
                Some((listed, reading)) if listed == *id => break Some(reading),
                Some((_, skipped)) => skipped.abort(),
                None => break None,
            }
        };
        if found.is_none() {
            if let Some(position) = subtrees.waiting.iter().position(|listed| listed == id) {
                subtrees.waiting.drain(..=position);
            }
        }
        self.read_ahead(subtrees);
        match found {
            Some(reading) => match self.runtime.block_on(reading) {
                Ok(read) => read.map(|(tree, _permit)| tree),
                // Only a panic ends a reading task early (an abort is only of skipped ones).
                Err(_) => self.read_now(id),
            },
            None => self.read_now(id),
        }
    }
}

/// Trees stored in at most this many bytes are opened and decoded on the runtime's thread that
/// read them (well under a millisecond); larger ones on a blocking thread. Handing every tree to
/// a blocking thread had cost a thread wake-up and switch per directory.
const DECODE_IN_PLACE_AT_MOST: u32 = 64 * 1024;

/// Reads, opens and decodes one tree: the pack range through the backend, then the rest in one
/// step, with the thread's own zstd context (creating one per tree cost more than decompressing
/// it).
async fn read(repo: IndexedRepository, id: BlobId) -> Result<ParentTree> {
    let location = repo.index().get(&id);
    let Some(location) = location.filter(|at| at.kind == BlobKind::Tree) else {
        // The repository's own reader says what is missing, or what else is wrong.
        let bytes = repo.read_blob(&id, "parent snapshot").await?;
        return decode(id, &bytes);
    };
    let sealed = repo
        .backend()
        .read_range_into(
            ObjectKind::Data,
            &location.pack.to_hex(),
            location.offset as u64,
            location.length as u64,
            Vec::new(),
        )
        .await?;
    if location.length <= DECODE_IN_PLACE_AT_MOST {
        return open_tree(repo.keys(), id, location, sealed);
    }
    let keys = repo.keys().clone();
    tokio::task::spawn_blocking(move || open_tree(&keys, id, location, sealed))
        .await
        .map_err(|e| Error::Interrupted(e.to_string()))?
}

/// Authenticates, decompresses, checks and decodes a tree read from its pack.
fn open_tree(
    keys: &RepositoryKeys,
    id: BlobId,
    location: BlobLocation,
    mut sealed: Vec<u8>,
) -> Result<ParentTree> {
    let what = || format!("tree {id} in pack {}", location.pack);
    let encoded = keys
        .sealer
        .open_in_place(&mut sealed, &blob_associated_data(BlobKind::Tree, &id), "")
        .map_err(|error| Error::Corrupt {
            what: what(),
            reason: error.to_string(),
        })?;
    DECODER.with_borrow_mut(|decoder| {
        let plaintext = decoder
            .decode(encoded, location.raw_length as usize)
            .map_err(|error| Error::Corrupt {
                what: what(),
                reason: error.to_string(),
            })?;
        if keys.blob_id(BlobKind::Tree, plaintext) != id {
            return Err(Error::Corrupt {
                what: what(),
                reason: "content does not match its id".into(),
            });
        }
        decode(id, plaintext)
    })
}

thread_local! {
    static DECODER: std::cell::RefCell<Decoder> = std::cell::RefCell::new(Decoder::default());
}

fn decode(id: BlobId, plaintext: &[u8]) -> Result<ParentTree> {
    let tree = Tree::from_bytes(plaintext).map_err(|e| Error::Corrupt {
        what: format!("tree {id}"),
        reason: e.to_string(),
    })?;
    let canonical = tree.to_bytes() == plaintext;
    Ok(ParentTree {
        id,
        tree,
        canonical,
    })
}
