//! Which snapshots a command that takes many (`snapshots`, `find`, `stats`, `forget`) works on,
//! and how `snapshots` and `forget` group them: restic's `--host`, `--tag`, `--path` and `--group-by`.

use crate::format::snapshot::{Snapshot, SnapshotPath};

/// Tags that must all be present: `--tag a,b` is `["a", "b"]`. An empty tag stands for "no tag
/// at all", as in restic (`--tag ''` selects the snapshots without tags).
pub type TagList = Vec<String>;

/// Parses `a,b` into a [`TagList`]: split at commas, white space around each tag dropped.
pub fn parse_tag_list(text: &str) -> TagList {
    text.split(',').map(|tag| tag.trim().to_owned()).collect()
}

/// Whether `snapshot` has every tag of `list`.
fn has_tags(snapshot: &Snapshot, list: &TagList) -> bool {
    list.iter().all(|tag| {
        if tag.is_empty() {
            snapshot.tags.is_empty()
        } else {
            snapshot.tags.contains(tag)
        }
    })
}

/// Whether `snapshot` satisfies one of `lists` (any, when there are none).
pub fn has_any_tag_list(snapshot: &Snapshot, lists: &[TagList]) -> bool {
    lists.is_empty() || lists.iter().any(|list| has_tags(snapshot, list))
}

/// restic's snapshot filter: each part empty means "any".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnapshotMatch {
    /// The snapshot's host is one of these.
    pub hosts: Vec<String>,
    /// The snapshot has every tag of one of these lists.
    pub tags: Vec<TagList>,
    /// The snapshot has every one of these paths (it may have more).
    pub paths: Vec<SnapshotPath>,
}

impl SnapshotMatch {
    /// Whether nothing is filtered.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty() && self.tags.is_empty() && self.paths.is_empty()
    }

    /// Whether `snapshot` passes every part of the filter.
    pub fn matches(&self, snapshot: &Snapshot) -> bool {
        let host_ok = self.hosts.is_empty() || self.hosts.contains(&snapshot.hostname);
        let paths_ok = self.paths.iter().all(|path| snapshot.paths.contains(path));
        host_ok && paths_ok && has_any_tag_list(snapshot, &self.tags)
    }
}

/// What `--group-by` groups snapshots by; restic's default is host and paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupBy {
    /// Whether snapshots of different hosts, path sets or tag sets go into different groups.
    pub host: bool,
    pub paths: bool,
    pub tags: bool,
}

impl Default for GroupBy {
    fn default() -> GroupBy {
        GroupBy {
            host: true,
            paths: true,
            tags: false,
        }
    }
}

impl std::str::FromStr for GroupBy {
    type Err = String;

    /// `host,paths`, `tags`, `` (no grouping); restic also takes the singular and plural forms.
    fn from_str(text: &str) -> Result<GroupBy, String> {
        let mut group_by = GroupBy {
            host: false,
            paths: false,
            tags: false,
        };
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "host" | "hosts" => group_by.host = true,
                "path" | "paths" => group_by.paths = true,
                "tag" | "tags" => group_by.tags = true,
                other => {
                    return Err(format!(
                        "unknown grouping option {other:?}: give host, paths and/or tags, \
                         separated by commas, or '' for no grouping"
                    ))
                }
            }
        }
        Ok(group_by)
    }
}

fn sorted<T: Ord>(mut list: Vec<T>) -> Vec<T> {
    list.sort();
    list
}

/// The key of one group: only the parts grouped by are set; paths and tags sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKey {
    /// The group's host, paths and tags; `None` for what is not grouped by.
    pub host: Option<String>,
    pub paths: Option<Vec<SnapshotPath>>,
    pub tags: Option<Vec<String>>,
}

impl GroupBy {
    /// The group `snapshot` belongs to.
    pub fn key(&self, snapshot: &Snapshot) -> GroupKey {
        GroupKey {
            host: self.host.then(|| snapshot.hostname.clone()),
            paths: self.paths.then(|| sorted(snapshot.paths.clone())),
            tags: self.tags.then(|| sorted(snapshot.tags.clone())),
        }
    }

    /// `snapshots` in groups, in key order, each group in the order given.
    pub fn group<T>(&self, snapshots: Vec<(T, Snapshot)>) -> Vec<(GroupKey, Vec<(T, Snapshot)>)> {
        let mut groups: std::collections::BTreeMap<GroupKey, Vec<(T, Snapshot)>> =
            std::collections::BTreeMap::new();
        for (id, snapshot) in snapshots {
            groups
                .entry(self.key(&snapshot))
                .or_default()
                .push((id, snapshot));
        }
        groups.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::snapshot::SnapshotSummary;
    use crate::ids::BlobId;

    fn snapshot(host: &str, paths: &[&str], tags: &[&str]) -> Snapshot {
        Snapshot {
            time: "2026-01-01T00:00:00Z".into(),
            hostname: host.into(),
            username: "u".into(),
            paths: paths
                .iter()
                .map(|p| SnapshotPath(p.as_bytes().to_vec()))
                .collect(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            tree: BlobId::from_bytes([0; 32]),
            parent: None,
            original: None,
            summary: SnapshotSummary::default(),
            program_version: "test".into(),
            sources: Default::default(),
            unknown: Default::default(),
        }
    }

    #[test]
    fn a_tag_list_needs_all_its_tags_and_lists_are_alternatives() {
        let both = snapshot("h", &["/a"], &["x", "y"]);
        let one = snapshot("h", &["/a"], &["x"]);
        let none = snapshot("h", &["/a"], &[]);
        let filter = SnapshotMatch {
            tags: vec![parse_tag_list("x, y")],
            ..Default::default()
        };
        assert!(filter.matches(&both) && !filter.matches(&one) && !filter.matches(&none));
        let either = SnapshotMatch {
            tags: vec![parse_tag_list("y"), parse_tag_list("")],
            ..Default::default()
        };
        assert!(either.matches(&both) && !either.matches(&one) && either.matches(&none));
    }

    #[test]
    fn paths_must_all_be_there_and_hosts_are_alternatives() {
        let filter = SnapshotMatch {
            hosts: vec!["a".into(), "b".into()],
            paths: vec![SnapshotPath(b"/x".to_vec())],
            ..Default::default()
        };
        assert!(filter.matches(&snapshot("b", &["/x", "/y"], &[])));
        assert!(!filter.matches(&snapshot("c", &["/x"], &[])));
        assert!(!filter.matches(&snapshot("a", &["/y"], &[])));
    }

    #[test]
    fn group_keys_sort_paths_and_tags_and_hold_only_what_is_grouped_by() {
        let group_by: GroupBy = "host,tags".parse().unwrap();
        let key = group_by.key(&snapshot("h", &["/b", "/a"], &["z", "a"]));
        assert_eq!(key.host.as_deref(), Some("h"));
        assert_eq!(key.paths, None);
        assert_eq!(key.tags, Some(vec!["a".to_owned(), "z".to_owned()]));
        assert_eq!(
            "".parse::<GroupBy>().unwrap().key(&snapshot("h", &[], &[])),
            GroupKey::default()
        );
        assert!("hosts,colour"
            .parse::<GroupBy>()
            .unwrap_err()
            .contains("colour"));
    }
}
