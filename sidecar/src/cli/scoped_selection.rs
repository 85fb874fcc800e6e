//! `backup --exclude-caches-in PATH`, `--exclude-if-present-in PATH=FILE[:HEADER]` and
//! `--exclude-larger-than-in PATH=SIZE`: restic's `--exclude-caches`, `--exclude-if-present` and
//! `--exclude-larger-than`, acting only inside PATH. The operator passes them for each volume of a
//! plan that sets them, so that one volume's rules never leave out another volume's files; what
//! they leave out of PATH is what the unscoped option leaves out of a backup of PATH alone.

use anyhow::{bail, Result};
use clap::Args;
use neverwiped::archive::skip::CACHEDIR_TAG;
use neverwiped::archive::{ScopedSkip, TagFile};
use neverwiped_contract::text::quoted;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The scoped selection options of `backup`.
#[derive(Debug, Default, Args)]
pub struct ScopedSelectionArgs {
    /// As --exclude-caches, only inside PATH: one of the backup's paths or a folder below one
    /// (repeatable).
    #[arg(long, value_name = "PATH")]
    pub exclude_caches_in: Vec<PathBuf>,
    /// As --exclude-if-present, only inside PATH (one of the backup's paths or a folder below
    /// one; PATH ends at the first '='; repeatable).
    #[arg(long, value_name = "PATH=FILE[:HEADER]")]
    pub exclude_if_present_in: Vec<String>,
    /// As --exclude-larger-than, only inside PATH (as for --exclude-if-present-in; the smallest
    /// SIZE that applies to a file counts).
    #[arg(long, value_name = "PATH=SIZE")]
    pub exclude_larger_than_in: Vec<String>,
}

impl ScopedSelectionArgs {
    /// The rules, one per folder in the order first named, for a backup of `paths`; an option
    /// that is malformed, or whose PATH is neither one of `paths` nor inside one (it would leave
    /// out nothing), is refused.
    pub fn skips(&self, paths: &[PathBuf]) -> Result<Vec<ScopedSkip>> {
        let sources: Vec<PathBuf> = paths.iter().map(|p| normalized(p)).collect::<Result<_>>()?;
        let mut skips: Vec<ScopedSkip> = Vec::new();
        let mut scope = |flag: &str, path: &Path| -> Result<usize> {
            let root = normalized(path)?;
            if !sources.iter().any(|source| root.starts_with(source)) {
                bail!(
                    "{flag} {}: not one of the backup's paths nor inside one, so it would leave out nothing",
                    quoted(path.as_os_str().as_bytes())
                );
            }
            Ok(match skips.iter().position(|skip| skip.root == root) {
                Some(index) => index,
                None => {
                    skips.push(ScopedSkip {
                        root,
                        ..ScopedSkip::default()
                    });
                    skips.len() - 1
                }
            })
        };
        let mut tags: Vec<(usize, TagFile)> = Vec::new();
        let mut sizes: Vec<(usize, u64)> = Vec::new();
        for spec in &self.exclude_if_present_in {
            let flag = "--exclude-if-present-in";
            let (path, tag) = split(flag, spec, "FILE[:HEADER]")?;
            let tag = TagFile::parse(tag);
            if tag.name.is_empty() {
                bail!("{flag} {}: the file name is empty", quoted(spec.as_bytes()));
            }
            tags.push((scope(flag, path)?, tag));
        }
        for path in &self.exclude_caches_in {
            tags.push((
                scope("--exclude-caches-in", path)?,
                TagFile::parse(CACHEDIR_TAG),
            ));
        }
        for spec in &self.exclude_larger_than_in {
            let flag = "--exclude-larger-than-in";
            let (path, size) = split(flag, spec, "SIZE")?;
            let bytes = neverwiped_contract::cli::parse_size(size).map_err(|reason| {
                anyhow::anyhow!("{flag} {}: {reason}", quoted(spec.as_bytes()))
            })?;
            sizes.push((scope(flag, path)?, bytes));
        }
        for (index, tag) in tags {
            skips[index].tag_files.push(tag);
        }
        for (index, bytes) in sizes {
            let limit = &mut skips[index].larger_than;
            *limit = Some(limit.map_or(bytes, |other| other.min(bytes)));
        }
        Ok(skips)
    }
}

/// `PATH=VALUE`, split at the first `=`.
fn split<'a>(flag: &str, spec: &'a str, value: &str) -> Result<(&'a Path, &'a str)> {
    match spec.split_once('=') {
        Some((path, rest)) if !path.is_empty() => Ok((Path::new(path), rest)),
        _ => bail!("{flag} {}: expected PATH={value}", quoted(spec.as_bytes())),
    }
}

/// `path` made absolute as the backup's walk names it (`.` components and repeated `/` dropped).
pub(super) fn normalized(path: &Path) -> Result<PathBuf> {
    std::path::absolute(path).map_err(|error| {
        anyhow::anyhow!(
            "cannot resolve {}: {error}",
            quoted(path.as_os_str().as_bytes())
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(caches: &[&str], present: &[&str], larger: &[&str]) -> ScopedSelectionArgs {
        ScopedSelectionArgs {
            exclude_caches_in: caches.iter().map(PathBuf::from).collect(),
            exclude_if_present_in: present.iter().map(|s| s.to_string()).collect(),
            exclude_larger_than_in: larger.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn options_are_grouped_by_folder_with_the_smallest_size() {
        let paths = [PathBuf::from("/data/a"), PathBuf::from("/data/b/")];
        let skips = args(
            &["/data/b"],
            &["/data/a/=.nobackup", "/data/b/./=TAG:sig=1"],
            &["/data/a=1k", "/data/a=2"],
        )
        .skips(&paths)
        .unwrap();
        assert_eq!(
            skips,
            [
                ScopedSkip {
                    root: "/data/a".into(),
                    larger_than: Some(2),
                    tag_files: vec![TagFile::parse(".nobackup")],
                },
                ScopedSkip {
                    root: "/data/b".into(),
                    larger_than: None,
                    tag_files: vec![TagFile::parse("TAG:sig=1"), TagFile::parse(CACHEDIR_TAG)],
                },
            ]
        );
    }

    #[test]
    fn malformed_options_and_folders_outside_the_paths_are_refused() {
        let paths = [PathBuf::from("/data/a")];
        let error = |a: ScopedSelectionArgs| a.skips(&paths).unwrap_err().to_string();
        assert_eq!(
            error(args(&["/data"], &[], &[])),
            "--exclude-caches-in /data: not one of the backup's paths nor inside one, so it would leave out nothing"
        );
        assert_eq!(
            error(args(&[], &["/data/ab=x"], &[])),
            "--exclude-if-present-in /data/ab: not one of the backup's paths nor inside one, so it would leave out nothing"
        );
        assert_eq!(
            error(args(&[], &["/data/a=:header"], &[])),
            "--exclude-if-present-in /data/a=:header: the file name is empty"
        );
        assert_eq!(
            error(args(&[], &[".nobackup"], &[])),
            "--exclude-if-present-in .nobackup: expected PATH=FILE[:HEADER]"
        );
        assert_eq!(
            error(args(&[], &[], &["/data/a=1.5G"])),
            "--exclude-larger-than-in /data/a=1.5G: \"1.5G\" is not a size: digits, then optionally b, k, m, g or t (e.g. 500k, 2G)"
        );
    }
}
