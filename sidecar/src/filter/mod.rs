//! restic's include and exclude patterns: which paths a backup leaves out and which a restore
//! writes, with the same answer restic gives for the same patterns.
//!
//! - [`PatternList`]: patterns given together (one option, case-sensitive or not), where a later
//!   `!pattern` takes back what the earlier ones matched.
//! - [`PathFilter`]: the lists of a backup's excludes or a restore's includes or excludes.
//! - [`PatternOptions`]: the command-line options and pattern files they come from.

mod expand;
mod options;

pub use expand::{expand, patterns_of_text, read_pattern_file};
pub use neverwiped_contract::pattern::{split_path, BadPattern, Pattern};
pub use options::{PatternKind, PatternOptions};

/// Patterns restic refuses, with the option they came from (`--exclude`, `--include-file`, …).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{option}: invalid pattern(s) provided:\n{}", patterns.join("\n"))]
pub struct InvalidPatterns {
    pub option: String,
    pub patterns: Vec<String>,
}

/// Patterns given together, in order. Empty patterns are ignored, as restic does.
#[derive(Debug, Clone, Default)]
pub struct PatternList {
    patterns: Vec<Pattern>,
    /// Patterns were lower-cased, and paths are before matching.
    case_insensitive: bool,
    any_negated: bool,
}

impl PatternList {
    /// Parses the patterns; the ones restic refuses are named in the error.
    pub fn new(
        patterns: &[impl AsRef<[u8]>],
        case_insensitive: bool,
        option: &str,
    ) -> Result<PatternList, InvalidPatterns> {
        let mut parsed = Vec::new();
        let mut invalid = Vec::new();
        for original in patterns.iter().map(AsRef::as_ref).filter(|p| !p.is_empty()) {
            let text = if case_insensitive {
                lower_case(original)
            } else {
                original.to_vec()
            };
            match Pattern::parse_bytes(&text) {
                Ok(pattern) => parsed.push(pattern),
                Err(_) => invalid.push(String::from_utf8_lossy(&text).into_owned()),
            }
        }
        if !invalid.is_empty() {
            return Err(InvalidPatterns {
                option: option.to_owned(),
                patterns: invalid,
            });
        }
        Ok(PatternList {
            any_negated: parsed.iter().any(Pattern::is_negated),
            patterns: parsed,
            case_insensitive,
        })
    }

    /// A list of plain snapshot paths (the leading `/` optional), each selecting itself and what
    /// is below it, whatever characters they hold; `/` or an empty path selects everything.
    pub fn paths(paths: &[impl AsRef<[u8]>]) -> PatternList {
        PatternList {
            patterns: paths
                .iter()
                .map(|path| {
                    let trimmed = trim_slashes(path.as_ref());
                    Pattern::literal(&[b"/".as_slice(), trimmed].concat())
                })
                .collect(),
            case_insensitive: false,
            any_negated: false,
        }
    }

    /// The parsed patterns, in order.
    pub fn patterns(&self) -> &[Pattern] {
        &self.patterns
    }

    /// Whether the list holds no pattern.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Whether the absolute `path` matches, and whether something below it may.
    pub fn check(&self, path: &[u8]) -> (bool, bool) {
        if self.patterns.is_empty() {
            return (false, false);
        }
        let lowered;
        let path = if self.case_insensitive {
            lowered = lower_case(path);
            lowered.as_slice()
        } else {
            path
        };
        let components = split_path(path);
        let (mut matched, mut below) = (false, false);
        for pattern in &self.patterns {
            let here = pattern.matches(&components);
            if pattern.is_negated() {
                matched &= !here;
                below &= !here;
            } else {
                matched |= here;
                below |= pattern.may_match_below(&components);
                if matched && below && !self.any_negated {
                    break;
                }
            }
        }
        (matched, below)
    }

    /// Whether the absolute `path` matches.
    pub fn matches(&self, path: &[u8]) -> bool {
        self.check(path).0
    }
}

/// A name or pattern in lower case: by Unicode's rules when it is UTF-8, else ASCII letters only
/// (the bytes of another encoding are left as they are, never replaced).
fn lower_case(text: &[u8]) -> Vec<u8> {
    match std::str::from_utf8(text) {
        Ok(text) => text.to_lowercase().into_bytes(),
        Err(_) => text.to_ascii_lowercase(),
    }
}

/// `path` without its leading and trailing `/`.
fn trim_slashes(mut path: &[u8]) -> &[u8] {
    while let Some(rest) = path.strip_prefix(b"/") {
        path = rest;
    }
    while let Some(rest) = path.strip_suffix(b"/") {
        path = rest;
    }
    path
}

/// What to do with one entry of a walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// The entry itself is backed up or restored.
    pub selected: bool,
    /// A directory's entries must be looked at (each decided on its own).
    pub descend: bool,
}

/// Which paths a walk takes: all, those an include list selects, or all an exclude list leaves.
#[derive(Debug, Clone, Default)]
pub enum PathFilter {
    #[default]
    Everything,
    /// Paths that a list matches, and the directories above them (restore's `--include`).
    Include(Vec<PatternList>),
    /// Paths that no list matches (`--exclude`).
    Exclude(Vec<PatternList>),
    /// Paths a function decides on, one at a time (a drill's sample of a volume).
    Chosen(PathChoice),
}

/// The function of a [`PathChoice`].
type Decide = dyn Fn(&[u8], bool) -> Decision + Send + Sync;

/// A function that decides on each absolute path of a walk, told whether it is a directory.
#[derive(Clone)]
pub struct PathChoice(std::sync::Arc<Decide>);

impl PathChoice {
    pub fn new(decide: impl Fn(&[u8], bool) -> Decision + Send + Sync + 'static) -> PathChoice {
        PathChoice(std::sync::Arc::new(decide))
    }
}

impl std::fmt::Debug for PathChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PathChoice")
    }
}

impl PathFilter {
    /// Excludes when any list is given, else everything.
    pub fn excluding(lists: Vec<PatternList>) -> PathFilter {
        let lists: Vec<PatternList> = lists.into_iter().filter(|l| !l.is_empty()).collect();
        if lists.is_empty() {
            PathFilter::Everything
        } else {
            PathFilter::Exclude(lists)
        }
    }

    /// Includes when any list is given, else everything.
    pub fn including(lists: Vec<PatternList>) -> PathFilter {
        let lists: Vec<PatternList> = lists.into_iter().filter(|l| !l.is_empty()).collect();
        if lists.is_empty() {
            PathFilter::Everything
        } else {
            PathFilter::Include(lists)
        }
    }

    /// Whether the absolute `path` is left out by the excludes (never by includes).
    pub fn is_excluded(&self, path: &[u8]) -> bool {
        match self {
            PathFilter::Exclude(lists) => lists.iter().any(|list| list.matches(path)),
            _ => false,
        }
    }

    /// The decision for the entry at the absolute `path`.
    pub fn decide(&self, path: &[u8], is_dir: bool) -> Decision {
        match self {
            PathFilter::Everything => Decision {
                selected: true,
                descend: is_dir,
            },
            PathFilter::Exclude(_) => {
                let selected = !self.is_excluded(path);
                Decision {
                    selected,
                    descend: selected && is_dir,
                }
            }
            PathFilter::Include(lists) => {
                let (mut selected, mut below) = (false, false);
                for list in lists {
                    let (matched, may_below) = list.check(path);
                    selected |= matched;
                    below |= may_below;
                }
                Decision {
                    selected,
                    descend: below && is_dir,
                }
            }
            PathFilter::Chosen(choice) => (choice.0)(path, is_dir),
        }
    }

    /// The include patterns that are plain absolute paths (a restore checks they exist).
    pub fn plain_includes(&self) -> Vec<Vec<Vec<u8>>> {
        match self {
            PathFilter::Include(lists) => lists
                .iter()
                .filter(|list| !list.case_insensitive && !list.any_negated)
                .flat_map(|list| list.patterns.iter())
                .filter_map(Pattern::plain_components)
                .map(|names| names.into_iter().map(<[u8]>::to_vec).collect())
                .collect(),
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{PathFilter, PatternList};

    fn list(patterns: &[&str]) -> PatternList {
        let patterns: Vec<String> = patterns.iter().map(|p| p.to_string()).collect();
        PatternList::new(&patterns, false, "--exclude").expect("valid")
    }

    #[test]
    fn a_negated_pattern_takes_back_an_earlier_match() {
        let excludes = list(&["*.txt", "!keep.txt"]);
        assert!(excludes.matches(b"/d/a.txt"));
        assert!(!excludes.matches(b"/d/keep.txt"));
        assert!(list(&["!keep.txt"]).patterns().len() == 1);
        assert!(!list(&["!keep.txt"]).matches(b"/d/keep.txt"));
    }

    #[test]
    fn invalid_patterns_are_named_with_their_option() {
        let error = PatternList::new(&["ok", "*["], false, "--exclude").expect_err("refused");
        assert_eq!(
            error.to_string(),
            "--exclude: invalid pattern(s) provided:\n*["
        );
    }

    #[test]
    fn includes_select_parents_children_and_the_way_there() {
        let filter = PathFilter::including(vec![list(&["/data/db"])]);
        let data = filter.decide(b"/data", true);
        assert!(!data.selected && data.descend);
        assert!(filter.decide(b"/data/db/x", false).selected);
        assert!(!filter.decide(b"/data/dbx", false).selected);
        assert!(!filter.decide(b"/other", true).descend);
    }

    #[test]
    fn case_insensitive_lists_lower_both_sides() {
        let patterns = vec!["*.JPG".to_string()];
        let list = PatternList::new(&patterns, true, "--iexclude").expect("valid");
        assert!(list.matches(b"/Photos/A.jpg"));
    }
}
