//! A volume's `excludes` and `includes` as the sidecar gets them: restic patterns scoped to the
//! folder the volume is mounted at, and the faults that make the operator refuse one.
//!
//! An exclude `/x` is anchored at the volume's root; any other matches at any depth below it, as
//! a relative restic pattern does. An include is always anchored at the volume's root (with or
//! without its leading `/`): it names what to restore. A leading `!` stays in front.

use crate::api::BackupVolume;
use neverwiped_contract::cli::{parse_size, ScopedSelection};
use neverwiped_contract::pattern::{split_path, Pattern};

/// Which field a pattern comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternField {
    /// A BackupPlan volume's `excludes`.
    Exclude,
    /// A Restore volume's `includes`.
    Include,
}

/// Why a volume's pattern is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternFault {
    /// restic refuses it: a glob in it is malformed.
    Malformed,
    /// An exclude that matches the volume's root: the backup would hold nothing of the volume.
    WholeVolume,
    /// A `!` pattern with no plain pattern before it: there is nothing for it to take back.
    NothingToTakeBack,
}

impl std::fmt::Display for PatternFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PatternFault::Malformed => {
                "restic refuses it: a glob in it is malformed (an unclosed '[', an empty '[]', or a '\\' at the end)"
            }
            PatternFault::WholeVolume => "it matches the volume's root and would leave out the whole volume",
            PatternFault::NothingToTakeBack => {
                "it starts with '!', which takes back what an earlier pattern matched, and no pattern comes before it"
            }
        })
    }
}

/// The pattern, scoped to the volume mounted at `volume_path`.
pub fn scoped(field: PatternField, volume_path: &str, pattern: &str) -> String {
    let (negation, body) = match pattern.strip_prefix('!') {
        Some(body) => ("!", body),
        None => ("", pattern),
    };
    match (field, body.strip_prefix('/')) {
        (_, Some(anchored)) => format!("{negation}{volume_path}/{anchored}"),
        (PatternField::Include, None) => format!("{negation}{volume_path}/{body}"),
        (PatternField::Exclude, None) => format!("{negation}{volume_path}/**/{body}"),
    }
}

/// The fault of each faulty pattern of one volume's list, by index.
pub fn faults(field: PatternField, patterns: &[String]) -> Vec<(usize, PatternFault)> {
    // Any folder serves: what is checked does not depend on its name.
    const VOLUME: &str = "/data/volume";
    let mut found = Vec::new();
    let mut plain_before = false;
    for (index, pattern) in patterns.iter().enumerate() {
        let Ok(parsed) = Pattern::parse(&scoped(field, VOLUME, pattern)) else {
            found.push((index, PatternFault::Malformed));
            continue;
        };
        if parsed.is_negated() && !plain_before {
            found.push((index, PatternFault::NothingToTakeBack));
        } else if field == PatternField::Exclude
            && !parsed.is_negated()
            && parsed.matches(&split_path(VOLUME.as_bytes()))
        {
            found.push((index, PatternFault::WholeVolume));
        }
        plain_before |= !parsed.is_negated();
    }
    found
}

/// A plan volume's `excludeCaches`, `excludeIfPresent` and `excludeLargerThan`, as the sidecar's
/// options scoped to the volume's folder take them.
pub fn volume_selection(volume: &BackupVolume) -> ScopedSelection {
    ScopedSelection {
        exclude_caches: volume.exclude_caches,
        exclude_if_present: volume.exclude_if_present.clone(),
        exclude_larger_than: volume.exclude_larger_than.clone(),
    }
}

/// Why an `excludeIfPresent` entry (`FILE[:HEADER]`) is refused, if it is.
pub fn tag_file_fault(spec: &str) -> Option<&'static str> {
    let name = spec.split_once(':').map_or(spec, |(name, _)| name);
    if spec.chars().any(char::is_control) {
        Some("it has a control character")
    } else if name.is_empty() {
        Some("the file name before ':' is empty")
    } else if name.contains('/') {
        Some("FILE is a file name in each folder, not a path: it has a '/'")
    } else if name == "." || name == ".." {
        Some("FILE is a file name in each folder: '.' and '..' are folders")
    } else {
        None
    }
}

/// Why an `excludeLargerThan` is refused, if it is.
pub fn size_fault(size: &str) -> Option<String> {
    if size.starts_with('+') {
        return Some(format!(
            "{size:?} is not a size: digits, then optionally b, k, m, g or t (e.g. 500k, 2G)"
        ));
    }
    parse_size(size).err()
}

#[cfg(test)]
mod tests {
    use super::{faults, scoped, size_fault, tag_file_fault, PatternFault, PatternField};

    #[test]
    fn tag_files_are_names_and_sizes_take_restics_syntax() {
        for good in [".nobackup", "CACHEDIR.TAG:Signature: 8a47", "...", "a:b:c"] {
            assert_eq!(tag_file_fault(good), None, "{good}");
        }
        for bad in ["", ":header", "a/b", "/x", ".", "..:h", "a\nb"] {
            assert!(tag_file_fault(bad).is_some(), "{bad:?}");
        }
        assert_eq!(size_fault("500M"), None);
        assert_eq!(size_fault("4096"), None);
        for bad in ["", "1.5G", "+1", "5 M", "1Gi", "99999999999t"] {
            assert!(size_fault(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn excludes_are_anchored_or_match_at_any_depth_and_includes_are_anchored() {
        let exclude = |p| scoped(PatternField::Exclude, "/data/app", p);
        assert_eq!(exclude("/tmp"), "/data/app/tmp");
        assert_eq!(exclude("*.log"), "/data/app/**/*.log");
        assert_eq!(exclude("!keep.log"), "!/data/app/**/keep.log");
        let include = |p| scoped(PatternField::Include, "/data/app", p);
        assert_eq!(include("uploads/2026"), "/data/app/uploads/2026");
        assert_eq!(include("/uploads"), "/data/app/uploads");
        assert_eq!(include("!/uploads/tmp"), "!/data/app/uploads/tmp");
    }

    #[test]
    fn malformed_whole_volume_and_leading_negations_are_faults() {
        let patterns: Vec<String> = ["ok", "*[", "/", "**", ".", "*", "!x", "a/[]"]
            .iter()
            .map(|p| p.to_string())
            .collect();
        assert_eq!(
            faults(PatternField::Exclude, &patterns),
            [
                (1, PatternFault::Malformed),
                (2, PatternFault::WholeVolume),
                (3, PatternFault::WholeVolume),
                (4, PatternFault::WholeVolume),
                (7, PatternFault::Malformed),
            ]
        );
        let first_negated = vec!["!x".to_string(), "y".to_string()];
        assert_eq!(
            faults(PatternField::Include, &first_negated),
            [(0, PatternFault::NothingToTakeBack)]
        );
    }
}
