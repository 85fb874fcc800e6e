//! `backup --files-from`, `--files-from-verbatim` and `--files-from-raw`: sources listed in files,
//! read as restic reads them.

use anyhow::{Context, Result};
use clap::Args;
use neverwiped_contract::pattern::{name_matches, BadPattern};
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The options that name sources in files.
#[derive(Debug, Args)]
pub struct FilesFromArgs {
    /// Back up the paths listed in FILE: one a line, white space around it dropped, empty lines
    /// and `#` comments skipped, each a glob expanded as restic does (`-` reads standard input;
    /// repeatable, combined with the paths given as arguments).
    #[arg(long = "files-from", value_name = "FILE")]
    pub files_from: Vec<PathBuf>,
    /// Back up the paths listed in FILE, one a line, taken literally (empty lines skipped).
    #[arg(long = "files-from-verbatim", value_name = "FILE")]
    pub files_from_verbatim: Vec<PathBuf>,
    /// Back up the paths listed in FILE, each ended by a NUL byte (any bytes, as `find -print0`
    /// writes them).
    #[arg(long = "files-from-raw", value_name = "FILE")]
    pub files_from_raw: Vec<PathBuf>,
}

/// The sources the lists name, and a warning for each glob that matched nothing.
#[derive(Debug, Default)]
pub struct ListedSources {
    pub paths: Vec<PathBuf>,
    pub warnings: Vec<String>,
}

impl FilesFromArgs {
    /// Whether any list was given.
    pub fn any(&self) -> bool {
        !(self.files_from.is_empty()
            && self.files_from_verbatim.is_empty()
            && self.files_from_raw.is_empty())
    }

    /// Reads every list: globs first, then verbatim paths, then raw ones, as restic does.
    pub fn read(&self) -> Result<ListedSources> {
        let mut listed = ListedSources::default();
        for file in &self.files_from {
            for line in lines(&read_list(file)?) {
                let pattern = trim_space(line);
                if pattern.is_empty() || pattern.starts_with(b"#") {
                    continue;
                }
                let found = glob(pattern).map_err(|BadPattern| {
                    anyhow::anyhow!(
                        "pattern: {}: syntax error in pattern",
                        String::from_utf8_lossy(pattern)
                    )
                })?;
                if found.is_empty() {
                    let warning = format!(
                        "pattern {:?} does not match any files, skipping",
                        String::from_utf8_lossy(pattern)
                    );
                    tracing::warn!("{}", neverwiped::text::escaped(&warning));
                    listed.warnings.push(warning);
                }
                listed.paths.extend(found.into_iter().map(path_of));
            }
        }
        for file in &self.files_from_verbatim {
            let data = read_list(file)?;
            let paths = lines(&data).filter(|line| !line.is_empty());
            listed
                .paths
                .extend(paths.map(|line| path_of(line.to_vec())));
        }
        for file in &self.files_from_raw {
            let data = read_list(file)?;
            listed
                .paths
                .extend(raw_names(&data)?.into_iter().map(path_of));
        }
        Ok(listed)
    }
}

fn path_of(bytes: Vec<u8>) -> PathBuf {
    PathBuf::from(std::ffi::OsString::from(OsStr::from_bytes(&bytes)))
}

/// A list's bytes; `-` is standard input.
fn read_list(file: &Path) -> Result<Vec<u8>> {
    let mut data = Vec::new();
    if file == Path::new("-") {
        std::io::stdin()
            .read_to_end(&mut data)
            .context("reading the list of files from standard input")?;
    } else {
        data = std::fs::read(file)
            .with_context(|| format!("cannot read the list of files {}", file.display()))?;
    }
    Ok(data)
}

/// The lines of a text list: a UTF-8 byte order mark dropped, `\n` or `\r\n` ending each.
fn lines(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    let data = data.strip_prefix(b"\xef\xbb\xbf").unwrap_or(data);
    let data = data.strip_suffix(b"\n").unwrap_or(data);
    data.split(|byte| *byte == b'\n')
        .filter(move |_| !data.is_empty())
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
}

/// A line without the white space around it (Unicode white space when it is UTF-8).
fn trim_space(line: &[u8]) -> &[u8] {
    match std::str::from_utf8(line) {
        Ok(text) => text.trim().as_bytes(),
        Err(_) => line.trim_ascii(),
    }
}

/// The names of a raw list: each ends with a NUL byte, and none is empty (restic's rules).
fn raw_names(data: &[u8]) -> Result<Vec<Vec<u8>>> {
    let Some(body) = data.strip_suffix(b"\0") else {
        anyhow::ensure!(
            data.is_empty(),
            "--files-from-raw: trailing zero byte missing"
        );
        return Ok(Vec::new());
    };
    body.split(|byte| *byte == 0)
        .map(|name| {
            anyhow::ensure!(
                !name.is_empty(),
                "--files-from-raw: empty filename in listing"
            );
            Ok(name.to_vec())
        })
        .collect()
}

/// Whether a path holds a glob character (Go's `filepath` meta characters on Unix).
fn has_meta(path: &[u8]) -> bool {
    path.iter().any(|b| matches!(b, b'*' | b'?' | b'[' | b'\\'))
}

/// The paths `pattern` matches, as Go's `filepath.Glob` (which restic uses) finds them: each
/// component a glob of one name, folders that cannot be read matching nothing, names in byte
/// order within each folder. A plain path matches itself when it exists.
fn glob(pattern: &[u8]) -> Result<Vec<Vec<u8>>, BadPattern> {
    for component in pattern.split(|byte| *byte == b'/') {
        name_matches(component, b"")?;
    }
    if !has_meta(pattern) {
        let exists = std::fs::symlink_metadata(OsStr::from_bytes(pattern)).is_ok();
        return Ok(if exists {
            vec![pattern.to_vec()]
        } else {
            Vec::new()
        });
    }
    let split = pattern.iter().rposition(|byte| *byte == b'/');
    let (dir, name) = match split {
        Some(0) => (b"/".to_vec(), &pattern[1..]),
        Some(at) => (pattern[..at].to_vec(), &pattern[at + 1..]),
        None => (b".".to_vec(), pattern),
    };
    let dirs = match has_meta(&dir) {
        false => vec![dir],
        true => glob(&dir)?,
    };
    let mut found = Vec::new();
    for dir in dirs {
        found.extend(glob_in(&dir, name)?);
    }
    Ok(found)
}

/// The entries of `dir` whose name matches `name`, joined to it.
fn glob_in(dir: &[u8], name: &[u8]) -> Result<Vec<Vec<u8>>, BadPattern> {
    let Ok(entries) = std::fs::read_dir(OsStr::from_bytes(dir)) else {
        return Ok(Vec::new());
    };
    let mut names: Vec<Vec<u8>> = entries
        .filter_map(|entry| Some(entry.ok()?.file_name().as_bytes().to_vec()))
        .collect();
    names.sort();
    let mut found = Vec::new();
    for entry in names {
        if name_matches(name, &entry)? {
            found.push(match dir {
                b"." => entry,
                b"/" => [b"/", entry.as_slice()].concat(),
                _ => [dir, b"/", entry.as_slice()].concat(),
            });
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_lists_need_every_name_ended_and_none_empty() {
        assert_eq!(
            raw_names(b"a\0b c\0").unwrap(),
            vec![b"a".to_vec(), b"b c".to_vec()]
        );
        assert!(raw_names(b"").unwrap().is_empty());
        let missing_end = raw_names(b"a\0b").unwrap_err().to_string();
        assert_eq!(missing_end, "--files-from-raw: trailing zero byte missing");
        let empty = raw_names(b"a\0\0").unwrap_err().to_string();
        assert_eq!(empty, "--files-from-raw: empty filename in listing");
    }

    #[test]
    fn text_lists_drop_the_byte_order_mark_and_carriage_returns() {
        let data = b"\xef\xbb\xbfa\r\n\n  b \nc";
        let found: Vec<&[u8]> = lines(data).collect();
        assert_eq!(found, vec![&b"a"[..], b"", b"  b ", b"c"]);
        assert_eq!(trim_space(b"  b \t"), b"b");
    }

    #[test]
    fn globs_expand_per_component_in_name_order() {
        let dir = tempfile::tempdir().unwrap();
        for path in ["x/b.txt", "x/a.txt", "y/a.txt", "y/c.log"] {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, b"").unwrap();
        }
        let root = dir.path().as_os_str().as_bytes();
        let found = glob(&[root, b"/*/a.txt"].concat()).unwrap();
        let expected: Vec<Vec<u8>> = ["x/a.txt", "y/a.txt"]
            .iter()
            .map(|p| [root, b"/", p.as_bytes()].concat())
            .collect();
        assert_eq!(found, expected);
        assert!(glob(&[root, b"/none/*"].concat()).unwrap().is_empty());
        assert!(glob(&[root, b"/missing"].concat()).unwrap().is_empty());
        assert_eq!(glob(b"/x/[").unwrap_err(), BadPattern);
    }
}
