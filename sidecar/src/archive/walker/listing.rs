//! Directories listed ahead of the walk.
//!
//! On a quiet night the walk's own work per entry is a comparison with the parent tree; what
//! costs is the kernel's: opening each directory, reading its entries and one `fstatat` each. The
//! walk stays one thread, in order (it alone decides what is new, and the trees come out the same
//! as ever), but the subdirectories of the directory it is in are opened, listed and their
//! entries' status read on the runtime's blocking threads, a bounded number at once, in the order
//! the walk will come to them. Each is opened from the directory's descriptor and checked to be
//! what the listing saw, exactly as the walk would have.

use super::by_descriptor::{DirHandle, OpenDir, OpenError};
use nix::sys::stat::FileStat;
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

/// Directories listed ahead at once, over the whole walk.
const LISTINGS_AHEAD: usize = 32;

/// Directories listed ahead among one directory's subdirectories.
const LISTINGS_AHEAD_PER_DIRECTORY: usize = 8;

/// An open directory's entries, sorted by name, each with its own status as the listing read it
/// (or why it could not be read).
pub struct Listing {
    pub dir: OpenDir,
    pub entries: Vec<(Vec<u8>, std::io::Result<FileStat>)>,
    /// Why the directory could not be listed (`entries` is then empty).
    pub error: Option<std::io::Error>,
}

impl Listing {
    /// Lists `dir` and reads the status of each entry, through its descriptor.
    pub fn read(mut dir: OpenDir) -> Listing {
        match dir.names() {
            Ok(names) => {
                let entries = names
                    .into_iter()
                    .map(|name| {
                        let stat = dir.stat(&name);
                        (name, stat)
                    })
                    .collect();
                Listing {
                    dir,
                    entries,
                    error: None,
                }
            }
            Err(error) => Listing {
                dir,
                entries: Vec::new(),
                error: Some(error),
            },
        }
    }
}

type Opened = Result<Listing, OpenError>;

/// A listing being read on a blocking thread, holding its share of [`LISTINGS_AHEAD`].
type Reading = JoinHandle<(Opened, OwnedSemaphorePermit)>;

/// Lists directories ahead; shared by the whole walk.
#[derive(Clone)]
pub struct Lister {
    runtime: tokio::runtime::Handle,
    ahead: Arc<Semaphore>,
}

/// The subdirectories of one directory, in the order of their names, some being listed.
#[derive(Default)]
pub struct Sublistings {
    handle: Option<Arc<DirHandle>>,
    waiting: VecDeque<(Vec<u8>, FileStat)>,
    reading: VecDeque<(Vec<u8>, Reading)>,
}

impl Lister {
    pub fn new(runtime: tokio::runtime::Handle) -> Lister {
        Lister {
            runtime,
            ahead: Arc::new(Semaphore::new(LISTINGS_AHEAD)),
        }
    }

    /// The subdirectories `dirs` (name and status as listed) of `dir`, the first being listed.
    pub fn sublistings(&self, dir: &OpenDir, dirs: VecDeque<(Vec<u8>, FileStat)>) -> Sublistings {
        // Without a second descriptor, the walk opens each subdirectory itself.
        let handle = match dirs.is_empty() {
            true => None,
            false => dir.handle().ok().map(Arc::new),
        };
        let mut sublistings = Sublistings {
            handle,
            waiting: dirs,
            reading: VecDeque::new(),
        };
        self.read_ahead(&mut sublistings);
        sublistings
    }

    fn read_ahead(&self, sublistings: &mut Sublistings) {
        let Some(handle) = &sublistings.handle else {
            return;
        };
        while sublistings.reading.len() < LISTINGS_AHEAD_PER_DIRECTORY
            && !sublistings.waiting.is_empty()
        {
            let Ok(permit) = self.ahead.clone().try_acquire_owned() else {
                return;
            };
            let Some((name, seen)) = sublistings.waiting.pop_front() else {
                return;
            };
            let (handle, job_name) = (handle.clone(), name.clone());
            let reading = self.runtime.spawn_blocking(move || {
                let opened = handle.open_dir(&job_name, &seen).map(Listing::read);
                (opened, permit)
            });
            sublistings.reading.push_back((name, reading));
        }
    }

    /// The subdirectory `name` (seen as `seen`) of `dir`, opened and listed: ahead if it was,
    /// else now. Subdirectories listed before it are given up (excluded, or gone).
    pub fn take(
        &self,
        sublistings: &mut Sublistings,
        dir: &OpenDir,
        name: &[u8],
        seen: &FileStat,
    ) -> Opened {
        let found = loop {
            match sublistings.reading.pop_front() {
                Some((listed, reading)) if listed == name => break Some(reading),
                Some(_) => {}
                None => break None,
            }
        };
        if found.is_none() {
            if let Some(at) = sublistings.waiting.iter().position(|(n, _)| n == name) {
                sublistings.waiting.drain(..=at);
            }
        }
        self.read_ahead(sublistings);
        if let Some(reading) = found {
            if let Ok((opened, _permit)) = self.runtime.block_on(reading) {
                return opened;
            }
        }
        dir.open_dir(name, seen).map(Listing::read)
    }
}
