//! restic's include and exclude patterns, shared by the sidecar (which matches paths with them)
//! and the operator (which checks the patterns of a spec and scopes them to a volume).
//!
//! A pattern: `!` to take back what earlier patterns matched, then path components matched one
//! by one. A leading `/` anchors the pattern at the root, else it matches at any depth; `**`
//! stands for any number of components; every other component is a glob of one name (`*` never
//! crosses a `/`). A pattern that matches a directory matches everything below it.

mod glob;

pub use glob::{matches as name_matches, BadPattern};

/// One component of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    /// The root `/` an anchored pattern starts with.
    Root,
    /// `**`: any number of components, none included.
    AnyDepth,
    /// Exactly one component of any name: what `**` expands into.
    AnyName,
    /// A name without glob characters, compared byte for byte.
    Literal(Vec<u8>),
    /// A name with `*`, `?`, `[` or `\`, checked to be well formed.
    Glob(Vec<u8>),
}

static ANY_NAME: Part = Part::AnyName;

/// The name a component stands for when none of its glob characters is left unescaped (`\*` is
/// a `*`, as in Go's `filepath.Match`), so that a literal path stays a plain path.
fn unescaped(component: &[u8]) -> Option<Vec<u8>> {
    let mut name = Vec::with_capacity(component.len());
    let mut bytes = component.iter();
    while let Some(&byte) = bytes.next() {
        match byte {
            b'\\' => name.push(*bytes.next()?),
            b'[' | b']' | b'*' | b'?' => return None,
            _ => name.push(byte),
        }
    }
    Some(name)
}

impl Part {
    fn of(component: &[u8]) -> Result<Part, BadPattern> {
        if component == b"**" {
            return Ok(Part::AnyDepth);
        }
        if let Some(literal) = unescaped(component) {
            return Ok(Part::Literal(literal));
        }
        // Checked against itself: a malformed glob fails whatever it is matched with.
        glob::matches(component, component)?;
        Ok(Part::Glob(component.to_vec()))
    }

    fn matches(&self, name: &[u8]) -> bool {
        match self {
            Part::Root => name == b"/",
            Part::AnyDepth => false,
            Part::AnyName => true,
            Part::Literal(literal) => literal == name,
            // Well formed by construction: no error can come.
            Part::Glob(glob) => glob::matches(glob, name).unwrap_or(false),
        }
    }
}

/// A parsed pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    original: String,
    parts: Vec<Part>,
    negated: bool,
}

impl Pattern {
    /// Parses a pattern; an error when one of its components is a malformed glob (restic refuses
    /// such a pattern too).
    pub fn parse(original: &str) -> Result<Pattern, BadPattern> {
        Pattern::parse_bytes(original.as_bytes())
    }

    /// As [`Pattern::parse`], for a pattern that need not be UTF-8 (names are bytes, as in
    /// restic); it is shown lossily.
    pub fn parse_bytes(original: &[u8]) -> Result<Pattern, BadPattern> {
        let (negated, body) = match original.strip_prefix(b"!") {
            Some(body) => (true, body),
            None => (false, original),
        };
        let cleaned = clean(body);
        let mut parts = Vec::new();
        for (index, component) in cleaned.split(|&b| b == b'/').enumerate() {
            if index == 0 && component.is_empty() {
                parts.push(Part::Root);
            } else if component.is_empty() {
                // Only the root itself, `/`, leaves an empty component: it stands for `**`.
                parts.push(Part::AnyDepth);
            } else {
                parts.push(Part::of(component)?);
            }
        }
        Ok(Pattern {
            original: String::from_utf8_lossy(original).into_owned(),
            parts,
            negated,
        })
    }

    /// A pattern that matches `path` (absolute) and what is below it, glob characters and all.
    pub fn literal(path: &[u8]) -> Pattern {
        let mut escaped = Vec::with_capacity(path.len() + 8);
        for (index, &byte) in path.iter().enumerate() {
            if matches!(byte, b'\\' | b'[' | b']' | b'*' | b'?') || (index == 0 && byte == b'!') {
                escaped.push(b'\\');
            }
            escaped.push(byte);
        }
        Pattern::parse_bytes(&escaped).expect("an escaped path is a well-formed pattern")
    }

    /// The pattern as given.
    pub fn original(&self) -> &str {
        &self.original
    }

    /// Whether the pattern starts with `!`.
    pub fn is_negated(&self) -> bool {
        self.negated
    }

    /// Whether it is anchored at the root and holds no glob: a plain absolute path.
    pub fn is_plain_path(&self) -> bool {
        self.parts.first() == Some(&Part::Root)
            && self.parts[1..]
                .iter()
                .all(|part| matches!(part, Part::Literal(_)))
    }

    /// The components after the root of a plain absolute path.
    pub fn plain_components(&self) -> Option<Vec<&[u8]>> {
        self.is_plain_path().then(|| {
            self.parts[1..]
                .iter()
                .filter_map(|part| match part {
                    Part::Literal(name) => Some(name.as_slice()),
                    _ => None,
                })
                .collect()
        })
    }

    /// Whether the path (split by [`split_path`]) matches: the pattern matches a run of its
    /// components (the first ones, when anchored), so a directory's match covers all below it.
    pub fn matches(&self, path: &[&[u8]]) -> bool {
        let parts: Vec<&Part> = self.parts.iter().collect();
        matches_parts(&parts, path)
    }

    /// Whether something below the directory `path` may match (always, unless anchored).
    pub fn may_match_below(&self, path: &[&[u8]]) -> bool {
        if self.parts.first() != Some(&Part::Root) {
            return true;
        }
        let mut path = path;
        if let Some(depth) = self.parts.iter().position(|p| *p == Part::AnyDepth) {
            if path.len() >= depth {
                path = &path[..depth];
            }
        }
        let prefix = path.len().min(self.parts.len());
        let parts: Vec<&Part> = self.parts[..prefix].iter().collect();
        matches_parts(&parts, path)
    }
}

fn matches_parts(parts: &[&Part], path: &[&[u8]]) -> bool {
    if let Some(depth) = parts.iter().position(|p| **p == Part::AnyDepth) {
        // `**` becomes 0, 1, 2, … single components, as many as the path leaves room for beside
        // the parts that are not `**` (a later `**` may stand for none).
        let fixed = parts.iter().filter(|p| ***p != Part::AnyDepth).count();
        let most = path.len() as isize - fixed as isize;
        return (0..=most).any(|names| {
            let mut expanded: Vec<&Part> = Vec::with_capacity(parts.len() + names as usize);
            expanded.extend_from_slice(&parts[..depth]);
            expanded.extend(std::iter::repeat_n(&ANY_NAME, names as usize));
            expanded.extend_from_slice(&parts[depth + 1..]);
            matches_parts(&expanded, path)
        });
    }
    if parts.is_empty() {
        return path.is_empty();
    }
    if parts.len() > path.len() {
        return false;
    }
    let (first, last) = if *parts[0] == Part::Root {
        (0, 0)
    } else if path[0] == b"/" {
        // An unanchored pattern never matches the root marker.
        (1, path.len() - parts.len())
    } else {
        (0, path.len() - parts.len())
    };
    (first..=last).rev().any(|offset| {
        parts
            .iter()
            .zip(&path[offset..])
            .all(|(part, name)| part.matches(name))
    })
}

/// A path's components as patterns see them: `/` first for an absolute path, then its names.
pub fn split_path(path: &[u8]) -> Vec<&[u8]> {
    let mut components: Vec<&[u8]> = path.split(|&b| b == b'/').collect();
    if components.first() == Some(&&b""[..]) {
        components[0] = b"/";
    }
    components
}

/// The lexical clean-up of Go's `filepath.Clean`: no repeated `/`, no `.` component, `..`
/// resolved against the one before, no trailing `/`; `.` when nothing is left.
fn clean(path: &[u8]) -> Vec<u8> {
    let rooted = path.starts_with(b"/");
    let mut kept: Vec<&[u8]> = Vec::new();
    for component in path.split(|&b| b == b'/') {
        match component {
            b"" | b"." => {}
            b".." => match kept.last() {
                Some(&last) if last != b".." => {
                    kept.pop();
                }
                _ if rooted => {}
                _ => kept.push(b".."),
            },
            name => kept.push(name),
        }
    }
    let joined = kept.join(&b'/');
    match (rooted, kept.is_empty()) {
        (true, _) => [b"/".as_slice(), &joined].concat(),
        (false, true) => b".".to_vec(),
        (false, false) => joined,
    }
}

#[cfg(test)]
mod tests {
    use super::{clean, split_path, Pattern};

    fn matches(pattern: &str, path: &str) -> bool {
        Pattern::parse(pattern)
            .expect("valid")
            .matches(&split_path(path.as_bytes()))
    }

    #[test]
    fn clean_follows_go() {
        assert_eq!(clean(b"logs/"), b"logs");
        assert_eq!(clean(b"/a//b/./c/.."), b"/a/b");
        assert_eq!(clean(b"/.."), b"/");
        assert_eq!(clean(b"../a"), b"../a");
        assert_eq!(clean(b""), b".");
        assert_eq!(clean(b"/"), b"/");
    }

    #[test]
    fn stars_stay_in_their_component_and_double_stars_cross() {
        assert!(matches("/data/app/*.txt", "/data/app/a.txt"));
        assert!(!matches("/data/app/*.txt", "/data/app/a/b/c/z.txt"));
        assert!(matches("/data/**/z.txt", "/data/app/a/b/c/z.txt"));
        assert!(matches("/data/**/z.txt", "/data/z.txt"));
        assert!(matches("logs/", "/x/logs"));
        assert!(matches("a/b", "/x/a/b"));
        assert!(matches("a/b", "/x/a/b/c"));
        assert!(!matches("a/b", "/x/a/c/b"));
        assert!(matches("logs/*.log", "/srv/logs/x.log"));
        assert!(matches("a/*/c", "/a/b/c"));
        assert!(!matches("a/*/c", "/a/b/b/c"));
        assert!(matches("/", "/anything"));
    }

    #[test]
    fn an_escaped_component_is_a_plain_name() {
        let pattern = Pattern::parse("/data/a\\*b/\\[x\\]").expect("valid");
        assert!(pattern.is_plain_path());
        assert!(pattern.matches(&split_path(b"/data/a*b/[x]")));
        assert!(!pattern.matches(&split_path(b"/data/aXb/[x]")));
        assert!(
            Pattern::parse("/data/a\\").is_err(),
            "a lone backslash is malformed"
        );
    }

    #[test]
    fn two_any_depths_may_both_stand_for_nothing() {
        assert!(matches("/data/**/**", "/data"));
        assert!(matches("/data/**/**", "/data/a/b"));
        assert!(matches("a/**/b/**/c", "/a/b/c"));
        assert!(!matches("/data/**/**", "/other"));
    }

    #[test]
    fn literal_patterns_escape_glob_characters() {
        let pattern = Pattern::literal(b"/data/[x]*");
        assert!(pattern.matches(&split_path(b"/data/[x]*")));
        assert!(!pattern.matches(&split_path(b"/data/xy")));
        assert!(pattern.matches(&split_path(b"/data/[x]*/below")));
    }
}
