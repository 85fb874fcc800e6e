//! `tag --add/--remove/--set TAG[,TAG…] [filters] [ID…]`: change the tags of snapshots as
//! restic's `tag` does, under the exclusive lock, and say which snapshots were rewritten.

use super::filters::SnapshotFilterArgs;
use super::Outcome;
use anyhow::{bail, Result};
use clap::Args;
use neverwiped::locking;
use neverwiped::maintenance::tag::{self, TagChange};
use neverwiped::repository::Repository;
use neverwiped::selection;
use neverwiped::selection::filter::parse_tag_list;

#[derive(Debug, Args)]
pub struct TagArgs {
    /// Snapshots to change: id prefixes, or "latest" (the newest the filters choose). None:
    /// every snapshot the filters choose.
    #[arg(value_name = "ID")]
    pub ids: Vec<String>,
    /// Tags added to each snapshot's tags, after them and only those it lacks (repeatable;
    /// `a,b` adds both).
    #[arg(long, value_name = "TAG[,TAG...]")]
    pub add: Vec<String>,
    /// Tags removed from each snapshot's tags (repeatable; `a,b` removes both).
    #[arg(long, value_name = "TAG[,TAG...]")]
    pub remove: Vec<String>,
    /// Tags that replace each snapshot's tags (repeatable; `a,b` sets both; '' removes every
    /// tag). Not with --add or --remove.
    #[arg(long, value_name = "TAG[,TAG...]", conflicts_with_all = ["add", "remove"])]
    pub set: Vec<String>,
    #[command(flatten)]
    pub filter: SnapshotFilterArgs,
}

/// The tags of `lists` as restic reads them: split at commas, trimmed, empty ones left out.
fn tags_of(lists: &[String]) -> Vec<String> {
    lists
        .iter()
        .flat_map(|list| parse_tag_list(list))
        .filter(|tag| !tag.is_empty())
        .collect()
}

impl TagArgs {
    /// The change these options ask for; none given is an error, as restic's "nothing to do".
    pub fn change(&self) -> Result<TagChange> {
        if !self.set.is_empty() {
            return Ok(TagChange::Set(tags_of(&self.set)));
        }
        if self.add.is_empty() && self.remove.is_empty() {
            bail!("nothing to do: give --add, --remove or --set");
        }
        Ok(TagChange::AddRemove {
            add: tags_of(&self.add),
            remove: tags_of(&self.remove),
        })
    }
}

/// Rewrites the chosen snapshots whose tags change and prints old and new ids: text, or one
/// JSON object (`docs/schema/tag.json`).
pub async fn tag(repo: &Repository, args: &TagArgs, json: bool, quiet: bool) -> Result<Outcome> {
    let change = args.change()?;
    let only = args.filter.selection()?;
    // As restic's: no other process may read a snapshot while it is replaced.
    let lock = locking::acquire(repo, true, "tag").await?;
    let work = async {
        let chosen = selection::select_snapshots(repo, &args.ids, &only).await?;
        tag::retag(repo, chosen, &change).await
    };
    let retagged = lock.held_while(work).await;
    lock.release().await?;
    let retagged = retagged?;
    if json {
        let changed: Vec<serde_json::Value> = retagged
            .iter()
            .map(|r| {
                serde_json::json!({
                    "oldSnapshotId": r.old_id.to_hex(),
                    "newSnapshotId": r.new_id.to_hex(),
                })
            })
            .collect();
        let printed = serde_json::json!({
            "changed": changed,
            "changedSnapshots": retagged.len(),
        });
        println!("{printed}");
    } else if !quiet {
        for r in &retagged {
            println!(
                "old snapshot ID: {} -> new snapshot ID: {}",
                r.old_id.to_hex(),
                r.new_id.to_hex()
            );
        }
        match retagged.len() {
            0 => println!("no snapshots were modified"),
            count => println!("modified {count} snapshots"),
        }
    }
    Ok(Outcome::default())
}
