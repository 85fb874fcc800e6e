//! A snapshot's entries in restic's order: depth first, each folder's entries by name, a folder
//! before what it holds. The visitor decides, folder by folder, whether the walk goes in, so a
//! listing of one folder reads only the trees on the way to it.

use crate::error::{Error, Result};
use crate::format::tree::{Node, NodeKind};
use crate::ids::BlobId;
use crate::repository::IndexedRepository;
use crate::text;

/// Whether a walk goes into the folder it has just visited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Descend {
    /// Visit what the folder holds.
    Into,
    /// Go on with the folder's next sibling.
    Past,
}

/// Calls `visit` with every entry below the tree `root`, each with its path from the snapshot's
/// root (`/a/b`, the names' bytes as stored), in restic's order. A folder's entries are visited
/// only when `visit` answers [`Descend::Into`] for it; the first error ends the walk.
pub async fn walk<E: From<Error>>(
    repo: &IndexedRepository,
    root: &BlobId,
    mut visit: impl FnMut(&[u8], &Node) -> std::result::Result<Descend, E>,
) -> std::result::Result<(), E> {
    struct Folder {
        path: Vec<u8>,
        entries: std::vec::IntoIter<Node>,
    }
    let root_tree = repo.read_tree(root, "the snapshot's root folder").await?;
    let mut stack = vec![Folder {
        path: Vec::new(),
        entries: root_tree.nodes.into_iter(),
    }];
    while let Some(folder) = stack.last_mut() {
        let Some(node) = folder.entries.next() else {
            stack.pop();
            continue;
        };
        let path = [folder.path.as_slice(), b"/", &node.name].concat();
        let descend = visit(&path, &node)?;
        if let (NodeKind::Dir { subtree }, Descend::Into) = (&node.kind, descend) {
            let context = format!("the folder {}", text::quoted(&path));
            let tree = repo.read_tree(subtree, &context).await?;
            stack.push(Folder {
                path,
                entries: tree.nodes.into_iter(),
            });
        }
    }
    Ok(())
}

/// The entry at `path` (`/a/b`; `/` or empty for the root, which has no node) below the tree
/// `root`: `Ok(None)` when the snapshot has no such entry.
pub async fn lookup(repo: &IndexedRepository, root: &BlobId, path: &[u8]) -> Result<Option<Node>> {
    let mut tree_id = *root;
    let mut found: Option<Node> = None;
    for name in path
        .split(|&byte| byte == b'/')
        .filter(|name| !name.is_empty())
    {
        if let Some(node) = &found {
            let NodeKind::Dir { subtree } = &node.kind else {
                return Ok(None);
            };
            tree_id = *subtree;
        }
        let tree = repo.read_tree(&tree_id, "a folder on the way").await?;
        match tree.find(name) {
            Some(node) => found = Some(node.clone()),
            None => return Ok(None),
        }
    }
    Ok(found)
}

/// `path` cleaned as restic cleans a folder given to `ls`: `//`, `.` and a trailing `/` dropped,
/// `..` taking back the name before it. Refused unless it starts with `/`.
pub fn absolute_path(path: &[u8]) -> Result<Vec<u8>> {
    if !path.starts_with(b"/") {
        return Err(Error::Usage(format!(
            "{} is not an absolute snapshot path: give it from the snapshot's root, starting \
             with /",
            text::quoted(path)
        )));
    }
    let mut names: Vec<&[u8]> = Vec::new();
    for name in path.split(|&byte| byte == b'/') {
        match name {
            b"" | b"." => {}
            b".." => {
                names.pop();
            }
            name => names.push(name),
        }
    }
    Ok(names
        .iter()
        .flat_map(|name| [b"/" as &[u8], name])
        .flatten()
        .copied()
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_cleaned_and_must_be_absolute() {
        assert_eq!(absolute_path(b"/a//b/./c/").unwrap(), b"/a/b/c");
        assert_eq!(absolute_path(b"/a/b/../c").unwrap(), b"/a/c");
        assert_eq!(absolute_path(b"/").unwrap(), b"");
        assert_eq!(absolute_path(b"/caf\xe9").unwrap(), b"/caf\xe9");
        assert!(absolute_path(b"a/b").is_err());
    }
}
