//! What a database restore feeds its client: the prepared client command and the filter that
//! rewrites the dump on its way (shared by the PostgreSQL and MariaDB modules and the restore
//! that drives them).

use super::child::ToolCommand;

/// Rewrites a dump on its way to the client (line by line where it needs to).
pub trait ScriptFilter: Send {
    fn push(&mut self, data: &[u8], out: &mut Vec<u8>);
    fn finish(&mut self, out: &mut Vec<u8>);
}

/// Passes the dump unchanged.
pub struct PassThrough;

impl ScriptFilter for PassThrough {
    fn push(&mut self, data: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(data);
    }
    fn finish(&mut self, _out: &mut Vec<u8>) {}
}

/// A restore ready to run: the client, the filter, and what was done to the target so far.
pub struct PreparedRestore {
    pub command: ToolCommand,
    pub filter: Box<dyn ScriptFilter>,
    /// The database restored into, for a dump of one database.
    pub database: Option<String>,
    /// Databases dropped first (with `overwrite`).
    pub dropped: Vec<String>,
}
