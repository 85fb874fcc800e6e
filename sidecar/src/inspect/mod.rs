//! Reading a snapshot without restoring it, for the commands that only look: `ls`, `find`,
//! `diff`, `stats` and `dump` (a file, or a folder as an archive). The walks are shared; each
//! command's own decisions live beside it.

pub mod archive;
pub mod diff;
pub mod stats;
pub mod walk;
pub mod zip;
