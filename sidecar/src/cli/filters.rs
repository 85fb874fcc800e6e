//! The snapshot filters of the reading commands (`snapshots`, `find`, `stats`), as restic's:
//! `--host`, `--tag` and `--path`, turned into the engine's [`SnapshotSelection`].

use anyhow::Result;
use clap::Args;
use neverwiped::inspect::walk::absolute_path;
use neverwiped::selection::SnapshotSelection;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

#[derive(Debug, Clone, Default, Args)]
pub struct SnapshotFilterArgs {
    /// Only snapshots of this host (repeatable: of any of them).
    #[arg(long = "host", short = 'H', value_name = "HOST")]
    pub hosts: Vec<String>,
    /// Only snapshots holding these tags (repeatable: any of the lists; `a,b` means both a and b).
    #[arg(long = "tag", value_name = "TAG[,TAG...]")]
    pub tags: Vec<String>,
    /// Only snapshots that include this absolute path among theirs (repeatable: every one).
    #[arg(long = "path", value_name = "PATH")]
    pub paths: Vec<OsString>,
}

impl SnapshotFilterArgs {
    /// The selection these options make.
    pub fn selection(&self) -> Result<SnapshotSelection> {
        let mut paths = Vec::new();
        for path in &self.paths {
            paths.push(absolute_path(path.as_bytes())?);
        }
        Ok(SnapshotSelection {
            hosts: self.hosts.clone(),
            tag_lists: self
                .tags
                .iter()
                .map(|list| {
                    list.split(',')
                        .filter(|tag| !tag.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .collect(),
            paths,
        })
    }
}
