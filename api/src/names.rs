//! The shapes of the spec strings that become object names, mount paths, file paths and
//! arguments of the Jobs. The CRD schema enforces them when an object is written; the operator
//! checks them again (its `admission` module) for objects stored before a rule existed.

use neverwiped_contract::location;

/// A DNS-1123 subdomain (at most 253 characters): the names of PersistentVolumeClaims, Secrets,
/// StorageClasses, VolumeSnapshotClasses, PriorityClasses and BackupPlans. It has no `/`, and no
/// `..` (every dot-separated label is non-empty), so it is safe as a path component.
pub const DNS_SUBDOMAIN_PATTERN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// A DNS-1123 label (at most 63 characters): database entry names, which become a path
/// component in the snapshot and part of an environment variable's name.
pub const DNS_LABEL_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// A host name or IPv4 address of a database server: letters, digits, `-` and `.`, so that it
/// cannot add a user, a path or options (`?`, `#`, `@`, `/`) to the connection URI.
pub const HOST_PATTERN: &str = r"^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?$";

/// A path or glob pattern inside a volume (`includes`, `excludes`): no control character
/// (newline, NUL, escape) and no `..` component, which would reach outside the volume. A
/// component is empty, or starts with a character other than `.` and `/`, or is `.` followed
/// by such a start, or `..` followed by at least one more character: every string but `..`.
/// (A pattern, not a CEL rule: a rule over 256 items of 4096 characters exceeds the API server's
/// cost budget.)
pub const PATH_PATTERN: &str = concat!(
    r"^([^/.\x00-\x1f\x7f][^/\x00-\x1f\x7f]*|\.([^/.\x00-\x1f\x7f][^/\x00-\x1f\x7f]*|\.[^/\x00-\x1f\x7f]+)?)?",
    r"(/([^/.\x00-\x1f\x7f][^/\x00-\x1f\x7f]*|\.([^/.\x00-\x1f\x7f][^/\x00-\x1f\x7f]*|\.[^/\x00-\x1f\x7f]+)?)?)*$"
);

/// The repository URL: `http(s)://` and no white space or control characters (the pattern of
/// [`neverwiped_contract::location::RestLocation`], the one parser of repository URLs).
pub const REPOSITORY_URL_PATTERN: &str = location::URL_PATTERN;

/// CEL, on the repository URL: no `.` or `..` segment (also percent-encoded), no user, query or
/// fragment, no backslash, so that a cluster's allowed URL prefixes cannot be walked out of.
pub const REPOSITORY_URL_RULE: &str = location::URL_RULE;
