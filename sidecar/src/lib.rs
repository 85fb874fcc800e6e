//! neverwiped's backup engine: an encrypted, deduplicated repository stored as objects of the
//! restic REST protocol, on a local folder or a restic REST server (the gate).
//!
//! - [`repository::Repository`]: init, open with a password, read and write sealed objects;
//!   [`repository::IndexedRepository`] once the index is loaded.
//! - [`archive::backup`]: files, folders and streams into a new snapshot.
//! - [`restore::restore`]: a snapshot (or part of it) back onto disk.
//! - [`mount::serve`]: the snapshots as a read-only FUSE file system.
//! - `docs/repository-format.md` specifies every stored byte.

pub mod archive;
pub mod backend;
pub mod chunker;
pub mod compress;
pub mod copy;
pub mod crypto;
pub mod drill;
pub mod dump;
pub mod error;
pub mod filter;
pub mod format;
pub mod host;
pub mod ids;
pub mod index;
pub mod inspect;
pub mod key_search;
pub mod launch;
pub mod locking;
pub mod maintenance;
pub mod mount;
pub mod open;
pub mod progress;
pub mod repository;
pub mod restore;
pub mod selection;
pub mod stopping;
pub mod streams;
pub mod text;
pub mod views;

pub use error::{Error, Result};
pub use open::open;
