//! The snapshot filters of the reading commands (`snapshots`, `find`, `stats`), as restic's:
//! `--host`, `--tag` and `--path`, turned into the engine's [`SnapshotMatch`].

use anyhow::Result;
use clap::Args;
use neverwiped::format::snapshot::SnapshotPath;
use neverwiped::inspect::walk::absolute_path;
use neverwiped::selection::filter::parse_tag_list;
use neverwiped::selection::SnapshotMatch;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Snapshot filters")]
pub struct SnapshotFilterArgs {
    /// Only snapshots of this host (repeatable: of any of them).
    #[arg(long = "host", short = 'H', value_name = "HOST")]
    pub hosts: Vec<String>,
    /// Only snapshots holding these tags (repeatable: any of the lists; `a,b` means both a and b;
    /// '' selects the snapshots without tags).
    #[arg(long = "tag", value_name = "TAG[,TAG...]")]
    pub tags: Vec<String>,
    /// Only snapshots that include this absolute path among theirs (repeatable: every one).
    #[arg(long = "path", value_name = "PATH")]
    pub paths: Vec<OsString>,
}

impl SnapshotFilterArgs {
    /// The selection these options make; a path must be absolute.
    pub fn selection(&self) -> Result<SnapshotMatch> {
        let mut paths = Vec::new();
        for path in &self.paths {
            paths.push(SnapshotPath(absolute_path(path.as_bytes())?));
        }
        Ok(SnapshotMatch {
            hosts: self.hosts.clone(),
            tags: self.tags.iter().map(|list| parse_tag_list(list)).collect(),
            paths,
        })
    }
}
