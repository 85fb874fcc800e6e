//! What a backup leaves out besides its exclude patterns, as restic's `backup` does: files over a
//! size (`--exclude-larger-than`) and the contents of folders holding a tag file
//! (`--exclude-if-present`, `--exclude-caches`), and what lies on another file system than its
//! source (`--one-file-system`).

use crate::filter::PathFilter;
use nix::sys::stat::{FileStat, SFlag};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The tag file of the Cache Directory Tagging Specification and the header it starts with.
pub const CACHEDIR_TAG: &str = "CACHEDIR.TAG:Signature: 8a477f597d28d172789f06886806bc55";

/// A file whose presence in a folder leaves out the rest of the folder (the folder itself and
/// the tag file are kept), when it starts with `header` (any content when empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagFile {
    pub name: String,
    pub header: Vec<u8>,
}

impl TagFile {
    /// `NAME[:HEADER]`, as restic's `--exclude-if-present` takes it.
    pub fn parse(spec: &str) -> TagFile {
        let (name, header) = spec.split_once(':').unwrap_or((spec, ""));
        TagFile {
            name: name.to_owned(),
            header: header.as_bytes().to_vec(),
        }
    }

    /// Whether `dir` holds this tag file, with its header; a tag file whose header cannot be read
    /// or differs leaves the folder in, with a notice.
    fn tags(&self, dir: &Path, notices: &mut Vec<String>) -> bool {
        let path = dir.join(&self.name);
        match std::fs::symlink_metadata(&path) {
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return false,
            Err(error) => {
                notices.push(format!(
                    "cannot check the tag file {}: {error}",
                    path.display()
                ));
                return false;
            }
        }
        if self.header.is_empty() {
            return true;
        }
        let mut start = vec![0; self.header.len()];
        let read = std::fs::File::open(&path).and_then(|mut file| file.read_exact(&mut start));
        match read {
            Ok(()) if start == self.header => true,
            Ok(()) => {
                notices.push(format!(
                    "invalid signature in the tag file {}: its folder is backed up",
                    path.display()
                ));
                false
            }
            Err(error) => {
                notices.push(format!(
                    "cannot read the signature of the tag file {}: {error}",
                    path.display()
                ));
                false
            }
        }
    }
}

/// The file system (device) of each source, for `--one-file-system`.
#[derive(Debug, Clone, Default)]
pub struct SourceDevices(Vec<(PathBuf, u64)>);

impl SourceDevices {
    /// The devices of the sources that exist (one that does not is reported by the walk).
    pub fn of(sources: &[PathBuf]) -> SourceDevices {
        SourceDevices(
            sources
                .iter()
                .filter_map(|source| {
                    Some((source.clone(), nix::sys::stat::lstat(source).ok()?.st_dev))
                })
                .collect(),
        )
    }

    /// Whether `device` is the device of the nearest source at or above `path` (restic's rule:
    /// a source below another is a boundary of its own). A path below no source is allowed.
    fn allows(&self, path: &Path, device: u64) -> bool {
        self.0
            .iter()
            .filter(|(source, _)| path.starts_with(source))
            .max_by_key(|(source, _)| source.components().count())
            .is_none_or(|(_, source_device)| *source_device == device)
    }

    /// Whether the entry at `path` on `device` is left out: everything on another file system
    /// but a folder whose parent is on an allowed one (a mount point, kept empty, as restic does).
    fn leaves_out(&self, path: &Path, device: u64, is_dir: bool) -> bool {
        if self.allows(path, device) {
            return false;
        }
        if !is_dir {
            return true;
        }
        let parent_allowed = path.parent().is_some_and(|parent| {
            nix::sys::stat::lstat(parent).is_ok_and(|stat| self.allows(parent, stat.st_dev))
        });
        !parent_allowed
    }
}

/// Size and tag-file rules that act only at and below one folder (`backup
/// --exclude-larger-than-in`, `--exclude-if-present-in`, `--exclude-caches-in`): what they leave
/// out below `root` is what the unscoped rules leave out of a backup of `root` alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScopedSkip {
    /// The folder, absolute, as the walk names it.
    pub root: PathBuf,
    /// Leave out every entry but folders larger than this many bytes below `root`.
    pub larger_than: Option<u64>,
    /// Tag files that count in `root` and the folders below it.
    pub tag_files: Vec<TagFile>,
}

/// Everything that leaves an entry out of a backup.
#[derive(Debug, Clone, Default)]
pub struct SkipRules {
    pub excludes: PathFilter,
    /// Leave out every entry but folders larger than this many bytes.
    pub larger_than: Option<u64>,
    pub tag_files: Vec<TagFile>,
    /// With `--one-file-system`: the sources' devices, beyond which the walk does not go.
    pub one_file_system: Option<SourceDevices>,
    /// Rules that act only below their folder.
    pub scoped: Vec<ScopedSkip>,
    /// Folders checked for tag files (the names of the tag files each holds), the innermost
    /// last: the folders above the walk's place.
    tagged: Vec<(PathBuf, Vec<String>)>,
}

impl SkipRules {
    /// The rules of a backup.
    pub fn new(excludes: PathFilter, larger_than: Option<u64>, tag_files: Vec<TagFile>) -> Self {
        SkipRules {
            excludes,
            larger_than,
            tag_files,
            one_file_system: None,
            scoped: Vec::new(),
            tagged: Vec::new(),
        }
    }

    /// Whether the exclude patterns leave out the absolute `path`.
    pub fn is_excluded(&self, path: &Path) -> bool {
        use std::os::unix::ffi::OsStrExt;
        self.excludes.is_excluded(path.as_os_str().as_bytes())
    }

    /// Whether the entry at the absolute `path`, seen as `stat`, is left out; notices of tag
    /// files that do not count go to `notices`.
    pub fn skips(&mut self, path: &Path, stat: &FileStat, notices: &mut Vec<String>) -> bool {
        if self.is_excluded(path) {
            return true;
        }
        let is_dir = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR;
        if !is_dir
            && self
                .size_limit(path)
                .is_some_and(|limit| stat.st_size as u64 > limit)
        {
            return true;
        }
        if let Some(devices) = &self.one_file_system {
            if devices.leaves_out(path, stat.st_dev, is_dir) {
                return true;
            }
        }
        match (path.parent(), path.file_name()) {
            // Each tag file leaves out all of its folder but itself.
            (Some(dir), Some(name)) if self.has_tag_files() => self
                .tags_of(dir, notices)
                .iter()
                .any(|tag| name != tag.as_str()),
            _ => false,
        }
    }

    /// The smallest size limit that acts at `path`.
    fn size_limit(&self, path: &Path) -> Option<u64> {
        let scoped = self
            .scoped
            .iter()
            .filter(|scope| path.starts_with(&scope.root))
            .filter_map(|scope| scope.larger_than);
        self.larger_than.into_iter().chain(scoped).min()
    }

    fn has_tag_files(&self) -> bool {
        !self.tag_files.is_empty() || self.scoped.iter().any(|s| !s.tag_files.is_empty())
    }

    /// The names of the tag files that tag `dir` (those that count there); remembered for the
    /// folders above the walk's place.
    fn tags_of(&mut self, dir: &Path, notices: &mut Vec<String>) -> Vec<String> {
        while let Some((last, _)) = self.tagged.last() {
            if dir.starts_with(last) {
                break;
            }
            self.tagged.pop();
        }
        if let Some((last, tagged)) = self.tagged.last() {
            if last == dir {
                return tagged.clone();
            }
        }
        let scoped = self
            .scoped
            .iter()
            .filter(|scope| dir.starts_with(&scope.root))
            .flat_map(|scope| &scope.tag_files);
        // A tag file given twice (by a scope and beside it) is checked once.
        let mut checked: Vec<&TagFile> = Vec::new();
        let mut tagged: Vec<String> = Vec::new();
        for tag in self.tag_files.iter().chain(scoped) {
            if checked.contains(&tag) {
                continue;
            }
            checked.push(tag);
            if tag.tags(dir, notices) && !tagged.contains(&tag.name) {
                tagged.push(tag.name.clone());
            }
        }
        self.tagged.push((dir.to_path_buf(), tagged.clone()));
        tagged
    }
}
