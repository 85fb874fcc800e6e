//! What a restore grants a snapshot's entries beyond their content: device files and FIFOs, and
//! the set-user-ID, set-group-ID and sticky bits of modes.
//!
//! A restore of a system puts them back, as restic does: its set-user-ID programs must work again.
//! A copy for a person (the plugin's `download`, often run with `sudo`) must not: a root workload
//! can plant a world-writable node of the host's disk or a set-user-ID shell in its own volume,
//! and whoever downloads it as root would hand both to every local user.

use crate::format::tree::{Node, NodeKind};

/// Whether a restore recreates device files, FIFOs and special mode bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Privileges {
    /// Everything as backed up (restic's behaviour).
    #[default]
    Keep,
    /// Contents, links and plain modes only: device files and FIFOs are skipped, and the
    /// set-user-ID, set-group-ID and sticky bits are cleared; each with a warning.
    Drop,
}

/// What becomes of one entry under [`Privileges::Drop`].
pub enum Admitted {
    /// Restored as it is.
    AsItIs,
    /// Restored with a plain mode (the node was changed); the warning says what was cleared.
    Cleared(String),
    /// Not restored; the warning says why.
    Skipped(String),
}

/// Applies `privileges` to `node` at `path` (relative to the target).
pub fn admit(privileges: Privileges, node: &mut Node, path: &[u8]) -> Admitted {
    if privileges == Privileges::Keep {
        return Admitted::AsItIs;
    }
    // As every warning, shown escaped by the front end that prints it.
    let shown = || super::display_path(path);
    let kind = match node.kind {
        NodeKind::CharDevice { .. } => Some("character device"),
        NodeKind::BlockDevice { .. } => Some("block device"),
        NodeKind::Fifo => Some("FIFO"),
        _ => None,
    };
    if let Some(kind) = kind {
        return Admitted::Skipped(format!(
            "skipped the {kind} {}: device files and FIFOs are restored only when asked for",
            shown()
        ));
    }
    let mode = node.meta.mode & 0o7777;
    if mode & 0o7000 == 0 || matches!(node.kind, NodeKind::Symlink { .. }) {
        return Admitted::AsItIs;
    }
    node.meta.mode &= !0o7000;
    Admitted::Cleared(format!(
        "restored {} with mode {:04o}, without the set-user-ID, set-group-ID and sticky bits of \
         its mode {mode:04o}: they are restored only when asked for",
        shown(),
        mode & 0o777
    ))
}
