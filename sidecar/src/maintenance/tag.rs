//! `tag`: change the tags of snapshots as restic does. A snapshot object is named by the hash of
//! its content, so a changed snapshot is written anew (keeping the id it was first written
//! under in `original`) and the old object removed.

use crate::backend::ObjectKind;
use crate::error::Result;
use crate::format::snapshot::Snapshot;
use crate::ids::SnapshotId;
use crate::repository::Repository;

/// What to do to each snapshot's tags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagChange {
    /// Replace the tags with these (none: remove every tag).
    Set(Vec<String>),
    /// Add the tags not yet there (in this order), then remove these.
    AddRemove {
        add: Vec<String>,
        remove: Vec<String>,
    },
}

impl TagChange {
    /// Applies the change to `tags` exactly as restic 0.19 does; returns whether the snapshot is
    /// to be rewritten (always for `Set`, as restic's, even when the tags stay the same).
    pub fn apply(&self, tags: &mut Vec<String>) -> bool {
        match self {
            TagChange::Set(new_tags) => {
                *tags = new_tags.clone();
                true
            }
            TagChange::AddRemove { add, remove } => {
                let mut changed = false;
                for tag in add {
                    if !tags.contains(tag) {
                        tags.push(tag.clone());
                        changed = true;
                    }
                }
                for tag in remove {
                    // restic removes the first occurrence by moving the last tag into its place:
                    // the order users then see is restic's.
                    if let Some(position) = tags.iter().position(|t| t == tag) {
                        tags.swap_remove(position);
                        changed = true;
                    }
                }
                changed
            }
        }
    }
}

/// One snapshot rewritten with new tags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retagged {
    pub old_id: SnapshotId,
    pub new_id: SnapshotId,
}

/// Applies `change` to each of `snapshots`: a snapshot whose tags change is written anew (its
/// `original` set to its id unless it already names one), then its old object is removed; the
/// others are left alone. The caller holds the exclusive lock.
pub async fn retag(
    repo: &Repository,
    snapshots: Vec<(SnapshotId, Snapshot)>,
    change: &TagChange,
) -> Result<Vec<Retagged>> {
    let mut retagged = Vec::new();
    for (old_id, mut snapshot) in snapshots {
        if !change.apply(&mut snapshot.tags) {
            continue;
        }
        snapshot.original.get_or_insert(old_id);
        let new_id = repo.write_snapshot(&snapshot).await?;
        // Written first, removed second: an interruption leaves both, never neither.
        if new_id != old_id {
            repo.backend()
                .delete(ObjectKind::Snapshots, &old_id.to_hex())
                .await?;
        }
        retagged.push(Retagged { old_id, new_id });
    }
    Ok(retagged)
}

#[cfg(test)]
mod tests {
    use super::TagChange;

    fn tags(list: &[&str]) -> Vec<String> {
        list.iter().map(|t| t.to_string()).collect()
    }

    fn add_remove(add: &[&str], remove: &[&str]) -> TagChange {
        TagChange::AddRemove {
            add: tags(add),
            remove: tags(remove),
        }
    }

    #[test]
    fn adding_appends_only_new_tags_and_removing_moves_the_last_tag_in_place() {
        let mut current = tags(&["x", "y", "z"]);
        assert!(add_remove(&["a", "b", "c", "y"], &["x"]).apply(&mut current));
        assert_eq!(current, tags(&["c", "y", "z", "a", "b"]));
        assert!(add_remove(&[], &["m", "a", "m"]).apply(&mut current));
        assert_eq!(current, tags(&["c", "y", "z", "b"]));
    }

    #[test]
    fn a_change_that_changes_nothing_rewrites_nothing_but_set_always_does() {
        let mut current = tags(&["a"]);
        assert!(!add_remove(&["a"], &["b"]).apply(&mut current));
        assert_eq!(current, tags(&["a"]));
        assert!(TagChange::Set(tags(&["a"])).apply(&mut current));
        assert!(TagChange::Set(Vec::new()).apply(&mut current));
        assert!(current.is_empty());
    }
}
