//! What a snapshot records of its sources, so that a restore can rebuild them without the
//! cluster that took it: per volume, the claim it came from; per database, its engine, its
//! server's version and the databases the dump holds.
//!
//! The operator describes each claim ([`RecordedClaim`]) and passes it to the sidecar's `backup`
//! as `--claim JSON`; the sidecar describes each database it dumps, and stores both in the
//! snapshot's `sources` member (`docs/repository-format.md`, §7.4).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The most bytes one claim's record may take as JSON: it travels as one argument of the
/// sidecar, and a snapshot object holds one per volume. Past it, the annotations are left out.
pub const CLAIM_RECORD_MAX_BYTES: usize = 16 * 1024;

/// Annotations a claim record leaves out: set by Kubernetes' own controllers for one binding or
/// one provisioning (they would be wrong on a new claim), or a client's copy of the object.
pub const ANNOTATION_PREFIXES_LEFT_OUT: &[&str] = &[
    "pv.kubernetes.io/",
    "volume.kubernetes.io/",
    "volume.beta.kubernetes.io/",
    "kubectl.kubernetes.io/last-applied-configuration",
];

/// A snapshot's sources: empty for a snapshot of plain folders taken outside a cluster.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedSources {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<RecordedClaim>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub databases: Vec<RecordedDatabase>,
    /// Members a newer version wrote, kept through rewrites.
    #[serde(flatten)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

impl RecordedSources {
    pub fn is_empty(&self) -> bool {
        self.claims.is_empty() && self.databases.is_empty() && self.unknown.is_empty()
    }
}

/// The PersistentVolumeClaim a volume of the snapshot was read from, as it was at backup time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedClaim {
    /// The volume's path in the snapshot, e.g. `/data/orders`.
    pub path: String,
    /// The claim's name.
    pub name: String,
    /// `spec.resources.requests.storage`, as written (e.g. `10Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_size: Option<String>,
    /// `spec.storageClassName`; none for a claim that named no class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access_modes: Vec<String>,
    /// `Filesystem` or `Block`; none when the claim left it to the default (`Filesystem`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_mode: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The claim's annotations but those of [`ANNOTATION_PREFIXES_LEFT_OUT`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Set when the annotations were left out to keep the record under
    /// [`CLAIM_RECORD_MAX_BYTES`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub annotations_left_out: bool,
    /// Members a newer version wrote, kept through rewrites.
    #[serde(flatten)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

impl RecordedClaim {
    /// Whether an annotation of this key is recorded.
    pub fn records_annotation(key: &str) -> bool {
        !ANNOTATION_PREFIXES_LEFT_OUT
            .iter()
            .any(|prefix| key.starts_with(prefix))
    }

    /// The record as the argument of `--claim`: its annotations left out when the whole would
    /// exceed [`CLAIM_RECORD_MAX_BYTES`].
    pub fn to_arg(&self) -> String {
        let json = serde_json::to_string(self).expect("a claim record serializes");
        if json.len() <= CLAIM_RECORD_MAX_BYTES {
            return json;
        }
        let shorter = RecordedClaim {
            annotations: BTreeMap::new(),
            annotations_left_out: true,
            ..self.clone()
        };
        serde_json::to_string(&shorter).expect("a claim record serializes")
    }
}

/// A database the snapshot holds a dump of, as its server described it when the dump started.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedDatabase {
    /// The entry's name: its dump is under `/databases/NAME/`.
    pub name: String,
    /// `postgresql`, `mariadb` or `mysql`, as the URI's scheme.
    pub engine: String,
    /// The server's own version string (`SHOW server_version`, `SELECT VERSION()`); none when
    /// the server could not be asked before the dump.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_version: Option<String>,
    /// The databases the dump holds: the one the URI names, or every one of the server (its
    /// system schemas and templates aside).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub databases: Vec<String>,
    /// Every table the dump holds, with its rows, counted from the dump itself: what a restore
    /// drill checks the loaded dump against. Empty when the dump was not understood, and in
    /// snapshots of earlier versions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tables: Vec<RecordedTable>,
    /// Members a newer version wrote, kept through rewrites.
    #[serde(flatten)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

/// A table of a dump, and its rows at the dump's moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedTable {
    /// The database it is in (for PostgreSQL and MariaDB alike, the one the dump connects to).
    pub database: String,
    /// Its name as the dump writes it, quoted as SQL quotes it: `public.orders`,
    /// `"Sales"."Q1"` (PostgreSQL), `` `orders` `` (MariaDB).
    pub table: String,
    pub rows: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim() -> RecordedClaim {
        RecordedClaim {
            path: "/data/orders".into(),
            name: "orders".into(),
            requested_size: Some("10Gi".into()),
            storage_class_name: Some("fast".into()),
            access_modes: vec!["ReadWriteOnce".into()],
            volume_mode: Some("Filesystem".into()),
            labels: [("app".to_owned(), "shop".to_owned())].into(),
            annotations: [("team".to_owned(), "payments".to_owned())].into(),
            annotations_left_out: false,
            unknown: BTreeMap::new(),
        }
    }

    #[test]
    fn a_claim_record_reads_back_as_written() {
        let arg = claim().to_arg();
        assert_eq!(
            arg,
            r#"{"path":"/data/orders","name":"orders","requestedSize":"10Gi","storageClassName":"fast","accessModes":["ReadWriteOnce"],"volumeMode":"Filesystem","labels":{"app":"shop"},"annotations":{"team":"payments"}}"#
        );
        assert_eq!(
            serde_json::from_str::<RecordedClaim>(&arg).unwrap(),
            claim()
        );
    }

    #[test]
    fn annotations_too_large_for_an_argument_are_left_out_and_said_so() {
        let mut large = claim();
        large
            .annotations
            .insert("blob".into(), "x".repeat(CLAIM_RECORD_MAX_BYTES));
        let arg = large.to_arg();
        assert!(arg.len() < CLAIM_RECORD_MAX_BYTES, "{}", arg.len());
        let read: RecordedClaim = serde_json::from_str(&arg).unwrap();
        assert!(read.annotations.is_empty() && read.annotations_left_out);
        assert_eq!(read.labels, claim().labels);
    }

    #[test]
    fn binding_annotations_and_client_copies_are_not_recorded() {
        for key in [
            "pv.kubernetes.io/bind-completed",
            "volume.kubernetes.io/storage-provisioner",
            "volume.beta.kubernetes.io/storage-provisioner",
            "kubectl.kubernetes.io/last-applied-configuration",
        ] {
            assert!(!RecordedClaim::records_annotation(key), "{key}");
        }
        assert!(RecordedClaim::records_annotation("example.com/team"));
    }

    #[test]
    fn empty_sources_are_empty() {
        assert!(RecordedSources::default().is_empty());
        let sources: RecordedSources = serde_json::from_str("{}").unwrap();
        assert!(sources.is_empty());
    }
}
