//! The four options of each kind of pattern, as restic has them: `--exclude`, `--iexclude`,
//! `--exclude-file`, `--iexclude-file` (and the same for `include`).

use super::{read_pattern_file, InvalidPatterns, PatternList};
use crate::error::{Error, Result};
use std::path::PathBuf;

/// Excludes or includes: it names the options in errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternKind {
    Exclude,
    Include,
}

impl PatternKind {
    fn word(self) -> &'static str {
        match self {
            PatternKind::Exclude => "exclude",
            PatternKind::Include => "include",
        }
    }
}

/// Patterns given on the command line and in pattern files, case-sensitive or not.
#[derive(Debug, Clone, Default)]
pub struct PatternOptions {
    /// Bytes: a name, and so a pattern, need not be UTF-8.
    pub patterns: Vec<Vec<u8>>,
    pub insensitive_patterns: Vec<Vec<u8>>,
    pub files: Vec<PathBuf>,
    pub insensitive_files: Vec<PathBuf>,
}

impl PatternOptions {
    /// Whether no option was given.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
            && self.insensitive_patterns.is_empty()
            && self.files.is_empty()
            && self.insensitive_files.is_empty()
    }

    /// The lists, case-insensitive first, after reading the files (their patterns follow those
    /// of the command line); a pattern restic refuses fails with the option that gave it.
    pub fn lists(&self, kind: PatternKind) -> Result<Vec<PatternList>> {
        let word = kind.word();
        let mut patterns = self.patterns.clone();
        let mut insensitive = self.insensitive_patterns.clone();
        if !self.files.is_empty() {
            let read = read_files(&self.files)?;
            check(&read, &format!("--{word}-file"))?;
            patterns.extend(read.into_iter().map(String::into_bytes));
        }
        if !self.insensitive_files.is_empty() {
            let read = read_files(&self.insensitive_files)?;
            check(&read, &format!("--i{word}-file"))?;
            insensitive.extend(read.into_iter().map(String::into_bytes));
        }
        let mut lists = Vec::new();
        if !insensitive.is_empty() {
            lists.push(invalid(PatternList::new(
                &insensitive,
                true,
                &format!("--i{word}"),
            ))?);
        }
        if !patterns.is_empty() {
            lists.push(invalid(PatternList::new(
                &patterns,
                false,
                &format!("--{word}"),
            ))?);
        }
        Ok(lists)
    }
}

fn invalid(list: std::result::Result<PatternList, InvalidPatterns>) -> Result<PatternList> {
    list.map_err(Error::InvalidPatterns)
}

fn check(patterns: &[String], option: &str) -> Result<()> {
    invalid(PatternList::new(patterns, false, option)).map(|_| ())
}

fn read_files(files: &[PathBuf]) -> Result<Vec<String>> {
    let mut patterns = Vec::new();
    for file in files {
        patterns.extend(read_pattern_file(file).map_err(|source| Error::Io {
            what: format!("failed to read patterns from file {}", file.display()),
            source,
        })?);
    }
    Ok(patterns)
}
