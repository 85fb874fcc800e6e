//! The include and exclude options of `backup` and `restore`, named as restic names them.

use clap::Args;
use neverwiped::archive::skip::CACHEDIR_TAG;
use neverwiped::archive::{BackupOptions, TagFile};
use neverwiped::filter::{PathFilter, PatternKind, PatternOptions};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// `backup`'s exclude options.
#[derive(Debug, Args)]
pub struct ExcludeArgs {
    /// Leave out paths matching PATTERN, by restic's rules: `*` stays within a name, `**` spans
    /// folders, a leading `/` anchors at the root, `!PATTERN` takes back (repeatable).
    #[arg(long = "exclude", short = 'e', value_name = "PATTERN")]
    pub excludes: Vec<String>,
    /// As --exclude, ignoring the case of names.
    #[arg(long = "iexclude", value_name = "PATTERN")]
    pub iexcludes: Vec<String>,
    /// Read exclude patterns from FILE: one a line, `#` comments, $VARIABLES expanded ($$ is $).
    #[arg(long = "exclude-file", value_name = "FILE")]
    pub exclude_files: Vec<PathBuf>,
    /// As --exclude-file, ignoring the case of names.
    #[arg(long = "iexclude-file", value_name = "FILE")]
    pub iexclude_files: Vec<PathBuf>,
}

impl ExcludeArgs {
    fn options(&self) -> PatternOptions {
        PatternOptions {
            patterns: as_bytes(&self.excludes),
            insensitive_patterns: as_bytes(&self.iexcludes),
            files: self.exclude_files.clone(),
            insensitive_files: self.iexclude_files.clone(),
        }
    }

    /// The filter the options make; a pattern restic refuses is refused with the same reason.
    pub fn filter(&self) -> neverwiped::Result<PathFilter> {
        Ok(PathFilter::excluding(
            self.options().lists(PatternKind::Exclude)?,
        ))
    }
}

/// Patterns as the matcher takes them.
fn as_bytes(patterns: &[String]) -> Vec<Vec<u8>> {
    patterns.iter().map(|p| p.as_bytes().to_vec()).collect()
}

/// `restore`'s include and exclude options (one kind or the other, as with restic).
#[derive(Debug, Args)]
pub struct RestorePatternArgs {
    /// Restore only paths matching PATTERN, the folders above them and all below them
    /// (restic's rules, as for --exclude; repeatable).
    #[arg(long = "include", short = 'i', value_name = "PATTERN")]
    pub includes: Vec<OsString>,
    /// As --include, ignoring the case of names.
    #[arg(long = "iinclude", value_name = "PATTERN")]
    pub iincludes: Vec<String>,
    /// Read include patterns from FILE (as --exclude-file of backup).
    #[arg(long = "include-file", value_name = "FILE")]
    pub include_files: Vec<PathBuf>,
    /// As --include-file, ignoring the case of names.
    #[arg(long = "iinclude-file", value_name = "FILE")]
    pub iinclude_files: Vec<PathBuf>,
    #[command(flatten)]
    pub excludes: ExcludeArgs,
}

impl RestorePatternArgs {
    fn include_options(&self) -> PatternOptions {
        PatternOptions {
            patterns: self
                .includes
                .iter()
                .map(|include| include.as_bytes().to_vec())
                .collect(),
            insensitive_patterns: as_bytes(&self.iincludes),
            files: self.include_files.clone(),
            insensitive_files: self.iinclude_files.clone(),
        }
    }

    /// The filter the options make: includes or excludes, never both.
    pub fn filter(&self) -> anyhow::Result<PathFilter> {
        let includes = self.include_options();
        let excludes = self.excludes.options();
        match (includes.is_empty(), excludes.is_empty()) {
            (false, false) => {
                anyhow::bail!("exclude and include patterns are mutually exclusive")
            }
            (false, true) => Ok(PathFilter::including(includes.lists(PatternKind::Include)?)),
            _ => Ok(self.excludes.filter()?),
        }
    }
}

/// `backup`'s other selection options, as restic's.
#[derive(Debug, Args)]
pub struct SelectionArgs {
    /// Leave out the contents of folders tagged as caches: a CACHEDIR.TAG file starting with the
    /// signature of the Cache Directory Tagging Specification (the tag file is kept).
    #[arg(long)]
    pub exclude_caches: bool,
    /// Leave out the contents of folders holding FILE, or FILE starting with HEADER (the folder and
    /// FILE are kept; repeatable).
    #[arg(long, value_name = "FILE[:HEADER]")]
    pub exclude_if_present: Vec<String>,
    /// Leave out files larger than SIZE bytes (suffixes b, k, m, g, t: powers of 1024).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub exclude_larger_than: Option<u64>,
    /// Do not cross file-system boundaries below each path: a folder another file system is
    /// mounted on is kept, empty.
    #[arg(long, short = 'x')]
    pub one_file_system: bool,
    #[command(flatten)]
    pub scoped: super::scoped_selection::ScopedSelectionArgs,
}

impl SelectionArgs {
    /// The tag files, `--exclude-caches` last.
    pub fn tag_files(&self) -> Vec<TagFile> {
        let mut tags: Vec<TagFile> = self
            .exclude_if_present
            .iter()
            .map(|spec| TagFile::parse(spec))
            .collect();
        if self.exclude_caches {
            tags.push(TagFile::parse(CACHEDIR_TAG));
        }
        tags
    }

    /// Sets these options in a backup's `options`, for a backup of `paths`.
    pub fn apply(&self, options: &mut BackupOptions, paths: &[PathBuf]) -> anyhow::Result<()> {
        options.exclude_larger_than = self.exclude_larger_than;
        options.exclude_if_present = self.tag_files();
        options.one_file_system = self.one_file_system;
        options.scoped_skips = self.scoped.skips(paths)?;
        Ok(())
    }
}

/// A size as restic writes it: digits, then `b`, `k`, `m`, `g` or `t` (any case, powers of 1024).
fn parse_size(text: &str) -> Result<u64, String> {
    neverwiped_contract::cli::parse_size(text)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_take_restic_suffixes() {
        assert_eq!(parse_size("40"), Ok(40));
        assert_eq!(parse_size("1k"), Ok(1024));
        assert_eq!(parse_size("2M"), Ok(2 << 20));
        assert_eq!(parse_size("3b"), Ok(3));
        assert!(parse_size("").is_err());
        assert!(parse_size("k").is_err());
        assert!(parse_size("99999999999t").is_err());
    }
}
