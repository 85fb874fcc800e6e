//! `Restore`: bring a snapshot of a BackupPlan, or of a repository named alone, back into volumes
//! and database servers.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::backup_plan::Repository;
use super::common::{CredentialsSecretRef, DatabaseType, PodSettings};
use super::mover::{MoverSettings, MoverStatus};
use super::names::{DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN, HOST_PATTERN, PATH_PATTERN};

/// `latest`, or a snapshot id or a prefix of one (at least 8 hex digits).
pub const SNAPSHOT_PATTERN: &str = r"^(latest|[0-9a-f]{8,64})$";

/// The host a plan's snapshots are written under: `NAMESPACE/PLAN`, both DNS names (a namespace
/// is a DNS-1123 label, a plan a subdomain).
pub const ORIGIN_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// CEL, on the spec: something to restore, listed or taken from the snapshot's record.
pub const AT_LEAST_ONE_ENTRY_RULE: &str = "(has(self.volumes) && size(self.volumes) > 0) || (has(self.databases) && size(self.databases) > 0) || (has(self.allVolumes) && self.allVolumes) || has(self.allDatabases) || (has(self.streams) && size(self.streams) > 0)";

/// CEL, on the spec: the snapshots come from exactly one place.
pub const ONE_SOURCE_RULE: &str = "has(self.backupPlanName) != has(self.repository)";

/// Restores a snapshot into PersistentVolumeClaims and database servers: a snapshot of a
/// BackupPlan of the same namespace, or one a repository named here holds (when the plan, or the
/// whole cluster, is gone). A Restore runs once; create another to restore again.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "neverwiped.io",
    version = "v1alpha1",
    kind = "Restore",
    namespaced,
    status = "RestoreStatus",
    derive = "PartialEq",
    shortname = "nwr",
    shortname = "nwrestore",
    category = "neverwiped",
    doc = "A Restore brings a snapshot taken by a BackupPlan, or held by a repository it names, back into volumes and database servers; it runs once.",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Plan","type":"string","jsonPath":".spec.backupPlanName"}"#,
    printcolumn = r#"{"name":"Origin","type":"string","jsonPath":".spec.origin"}"#,
    printcolumn = r#"{"name":"Snapshot","type":"string","jsonPath":".status.snapshotId"}"#,
    printcolumn = r#"{"name":"Taken","type":"date","jsonPath":".status.snapshotTime"}"#,
    printcolumn = r#"{"name":"Bytes Restored","type":"integer","jsonPath":".status.bytesRestored"}"#,
    printcolumn = r#"{"name":"Bytes/s","type":"integer","jsonPath":".status.bytesPerSecond","priority":1}"#,
    printcolumn = r#"{"name":"Completed","type":"date","jsonPath":".status.completionTime","priority":1}"#,
    printcolumn = r#"{"name":"Message","type":"string","jsonPath":".status.message","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(
    validation = Rule::new(AT_LEAST_ONE_ENTRY_RULE)
        .message("a Restore needs at least one entry in volumes, databases or streams, or allVolumes: true, or allDatabases"),
    validation = Rule::new("!has(self.storageClassMapping) || has(self.createClaims)")
        .message("storageClassMapping maps the classes of the claims created from the snapshot: set createClaims: FromSnapshot"),
    validation = Rule::new("!has(self.minimumClaimSize) || has(self.createClaims)")
        .message("minimumClaimSize sizes the claims created from the snapshot: set createClaims: FromSnapshot"),
    validation = Rule::new("!has(self.takenBefore) || self.snapshot == 'latest'")
        .message("takenBefore picks the newest snapshot before a time; use it with snapshot: latest"),
    validation = Rule::new(ONE_SOURCE_RULE)
        .message("set exactly one of backupPlanName (a BackupPlan of this namespace) or repository (with origin)"),
    validation = Rule::new("!has(self.copy) || has(self.backupPlanName)")
        .message("copy names one of a BackupPlan's spec.copies: set it with backupPlanName (with repository, name the copy's repository itself)"),
    validation = Rule::new("self == oldSelf").message("a Restore runs once and cannot be changed; create a new one"),
)]
#[serde(rename_all = "camelCase")]
pub struct RestoreSpec {
    /// Where the snapshots come from: `backupPlanName` (and `copy`), or `repository` with `origin`.
    #[serde(flatten)]
    pub source: RestoreSource,
    /// `latest` (the origin's newest snapshot), or a snapshot id or a unique prefix of one.
    #[serde(default = "default_snapshot")]
    #[schemars(length(min = 6, max = 64), regex(pattern = SNAPSHOT_PATTERN))]
    pub snapshot: String,
    /// With `snapshot: latest`, the newest snapshot taken before this time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taken_before: Option<Time>,
    /// Where each backed-up volume goes. With `allVolumes`, an entry here sets the target (and
    /// the includes) of its volume; the others go into claims of their recorded names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub volumes: Vec<RestoreVolume>,
    /// Restores every volume the snapshot recorded a claim of (a snapshot of a BackupPlan
    /// records each), each into the claim of the recorded name unless `volumes` lists it: the
    /// whole plan in one Restore. The operator first reads the snapshot's record (a describe
    /// Job) and then restores that very snapshot.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all_volumes: bool,
    /// `FromSnapshot`: each target claim that does not exist is created as the snapshot
    /// recorded its source claim (size, storage class, access and volume modes, labels and
    /// annotations), before the restore; a claim that exists is restored into, as
    /// `onNonEmptyTarget` says. The claims are not owned by the Restore: deleting it keeps them.
    /// By default only the entries with `createClaim` create claims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_claims: Option<ClaimCreation>,
    /// With `createClaims: FromSnapshot`: the StorageClass to create a claim of in place of the
    /// one the snapshot recorded, for a cluster that lacks it (`kubectl get storageclasses`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["from"]))]
    pub storage_class_mapping: Vec<StorageClassMapping>,
    /// With `createClaims: FromSnapshot`: the smallest size of a created claim, e.g. `50Gi`. A
    /// claim is created at the larger of this and its recorded size, never smaller than it was;
    /// a claim recorded without a size gets this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum_claim_size: Option<Quantity>,
    /// What the restore does where a target volume already holds entries. `Overwrite` (the
    /// default, `restore --overwrite if-changed`): an entry of the snapshot replaces what stands
    /// at its path, except a file that already holds the snapshot's content (left, given the
    /// snapshot's metadata); other files stay. `OverwriteAlways` (`--overwrite always`): every
    /// file is rewritten. `OverwriteIfNewer` (`--overwrite if-newer`): only what is older than
    /// the snapshot's entry is replaced. `KeepExisting` (`--overwrite never`): only what is
    /// missing is restored. `Mirror` (`--overwrite if-changed --delete`): the restored paths end
    /// up as in the snapshot; what it lacks is removed from them. A folder of the snapshot
    /// replaces any non-folder in its way under every policy; a folder that is not empty is
    /// replaced by a file only under `Mirror` (otherwise it stays and the Restore reports it).
    #[serde(default)]
    pub on_non_empty_target: VolumeTargetPolicy,
    /// Where each dumped database goes. With `allDatabases`, an entry here sets the target of
    /// its database; without `type`, its engine is the plan's entry's, else the recorded one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub databases: Vec<RestoreDatabase>,
    /// Restores every database the snapshot holds a dump of into this server, each with the
    /// engine the snapshot recorded, unless `databases` lists it. The snapshot does not know
    /// where its databases should go now, so the server is named here (one server for all;
    /// list the databases of another engine in `databases`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_databases: Option<DatabaseTarget>,
    /// The snapshot's streams (`/streams/NAME`, what the plan's `spec.streams` stored), each
    /// written to the standard input of a container of the restore Job's pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new(super::streams::UNIQUE_NAMES_RULE).message("streams: each name once"))]
    pub streams: Vec<super::RestoreStream>,
    /// Placement and resources of the restore Job's pod; by default the plan's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodSettings>,
    /// How the restore Job's pod runs; by default as the plan's `spec.mover` says, as the user
    /// the plan's backups ran as (its `status.mover`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mover: Option<MoverSettings>,
}

fn default_snapshot() -> String {
    "latest".into()
}

/// Where a Restore's snapshots come from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(untagged, rename_all_fields = "camelCase")]
pub enum RestoreSource {
    /// A BackupPlan of the Restore's namespace: its repository, and the snapshots it took.
    Plan {
        /// The BackupPlan, in this namespace, whose repository and snapshots to restore from.
        #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
        backup_plan_name: String,
        /// A copy of the plan (the `name` of one of its `spec.copies`) to read in place of its
        /// repository: that destination's URL and Secrets, and the plan's snapshots there (their
        /// host stays `NAMESPACE/PLAN`). For when the plan's repository is lost or unreachable.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(length(min = 1, max = 63), regex(pattern = DNS_LABEL_PATTERN))]
        copy: Option<String>,
    },
    /// A repository named here, for when its plan (or the whole cluster) is gone.
    Repository {
        /// The repository, as a BackupPlan names it; its Secrets are in the Restore's namespace.
        /// Checked as a plan's repository is (`policy.allowedRepositoryPrefixes`, Secret types).
        repository: Repository,
        /// The `NAMESPACE/PLAN` of the BackupPlan that took the snapshots (the snapshots' host).
        /// Another namespace than the Restore's makes it a clone, which the cluster admin allows
        /// per pair of namespaces or per repository (`policy.allowedRestoreOrigins`).
        #[schemars(length(min = 3, max = 317), regex(pattern = ORIGIN_PATTERN))]
        origin: String,
    },
}

impl RestoreSource {
    /// The BackupPlan named, for a Restore from a plan.
    pub fn plan_name(&self) -> Option<&str> {
        match self {
            RestoreSource::Plan {
                backup_plan_name, ..
            } => Some(backup_plan_name),
            RestoreSource::Repository { .. } => None,
        }
    }

    /// The copy of the plan named, for a Restore from a plan's copy.
    pub fn copy_name(&self) -> Option<&str> {
        match self {
            RestoreSource::Plan { copy, .. } => copy.as_deref(),
            RestoreSource::Repository { .. } => None,
        }
    }
}

/// One backed-up volume and the PersistentVolumeClaim it is restored into.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RestoreVolume {
    /// The name of the PersistentVolumeClaim as it was backed up.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub source_claim_name: String,
    /// The PersistentVolumeClaim to restore into. It must exist, unless `createClaim` is set.
    /// What it already holds is treated as `spec.onNonEmptyTarget` says.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub target_claim_name: String,
    /// Creates the target PersistentVolumeClaim; it must not exist yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_claim: Option<NewClaim>,
    /// What to restore of the volume, as restic's `--include` patterns anchored at the volume's
    /// root (with or without a leading `/`): `uploads/2026` restores that directory and all below
    /// it, `**/*.pdf` every PDF at any depth, `uploads/*/thumbs` the thumbnails of each upload.
    /// `*` and `?` stay within one name, `**` spans directories; the directories above what is
    /// restored are restored too. `!pattern` takes back what the patterns before it selected.
    /// A plain path the snapshot lacks fails the restore. Empty restores all. Every pattern is
    /// inside the volume, a leading `/` included; refused: a `..` component, a control character,
    /// a pattern restic refuses (`*[`, `a/[]`, a `\` at the end) and a first pattern starting
    /// with `!`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 256),
        inner(length(min = 1, max = 4096), regex(pattern = PATH_PATTERN))
    )]
    pub includes: Vec<String>,
}

/// `FromSnapshot`: each target claim that does not exist is created as the snapshot recorded its
/// source claim (size, storage class, access and volume modes, labels and annotations), before
/// the restore; a claim that exists is restored into, as `onNonEmptyTarget` says. The claims are
/// not owned by the Restore: deleting it keeps them. By default only the entries with
/// `createClaim` create claims.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ClaimCreation {
    /// Each target claim that does not exist is created as the snapshot recorded its source.
    FromSnapshot,
}

/// A StorageClass the snapshot recorded, and the one of this cluster to create its claims of.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct StorageClassMapping {
    /// The StorageClass the snapshot recorded.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub from: String,
    /// The StorageClass of this cluster to create the claim of.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub to: String,
}

/// The database server every database of the snapshot is restored into (`allDatabases`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseTarget {
    /// Host name or address of the target server.
    #[schemars(length(min = 1, max = 253), regex(pattern = HOST_PATTERN))]
    pub host: String,
    /// Port of the target server; by default 5432 for PostgreSQL and 3306 for MariaDB and MySQL
    /// (each database's recorded engine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    /// User name and password to restore with.
    pub credentials_secret_ref: CredentialsSecretRef,
    /// As a database entry's `onNonEmptyTarget`, for every database restored here.
    #[serde(default)]
    pub on_non_empty_target: NonEmptyTargetPolicy,
}

impl DatabaseTarget {
    /// The entry that restores the dump `name`, of `engine`, into this server.
    pub fn entry(&self, name: &str, engine: Option<DatabaseType>) -> RestoreDatabase {
        RestoreDatabase {
            name: name.to_owned(),
            engine,
            host: self.host.clone(),
            port: self.port,
            credentials_secret_ref: self.credentials_secret_ref.clone(),
            on_non_empty_target: self.on_non_empty_target,
        }
    }
}

/// A PersistentVolumeClaim the Restore creates.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NewClaim {
    /// Size of the volume, e.g. `20Gi`.
    pub storage: Quantity,
    /// StorageClass of the volume; by default the cluster's default class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub storage_class_name: Option<String>,
    /// Access modes of the volume; by default `ReadWriteOnce`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 4))]
    pub access_modes: Vec<AccessMode>,
}

/// An access mode of a PersistentVolumeClaim.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum AccessMode {
    ReadWriteOnce,
    ReadOnlyMany,
    ReadWriteMany,
    ReadWriteOncePod,
}

impl AccessMode {
    /// The value Kubernetes uses.
    pub fn as_str(self) -> &'static str {
        match self {
            AccessMode::ReadWriteOnce => "ReadWriteOnce",
            AccessMode::ReadOnlyMany => "ReadOnlyMany",
            AccessMode::ReadWriteMany => "ReadWriteMany",
            AccessMode::ReadWriteOncePod => "ReadWriteOncePod",
        }
    }
}

/// One dumped database and the server it is restored into.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreDatabase {
    /// The name of the plan's database entry (`spec.databases[].name`) that was dumped.
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub name: String,
    /// The target server's engine; by default the engine of the plan's entry of that name.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<DatabaseType>,
    /// Host name or address of the target server.
    #[schemars(length(min = 1, max = 253), regex(pattern = HOST_PATTERN))]
    pub host: String,
    /// Port of the target server; by default 5432 for PostgreSQL and 3306 for MariaDB and MySQL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    /// User name and password to restore with.
    pub credentials_secret_ref: CredentialsSecretRef,
    /// What to do when the target server already holds the databases being restored: `Refuse`
    /// (the default) fails the Restore and changes nothing; `Overwrite` drops those databases on
    /// the target (every database, for a dump of a whole server) and restores the dump.
    #[serde(default)]
    pub on_non_empty_target: NonEmptyTargetPolicy,
}

/// What a database restore does to a server that already holds data.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum NonEmptyTargetPolicy {
    /// Fail and change nothing.
    #[default]
    Refuse,
    /// Drop the databases being restored on the target first, then restore.
    Overwrite,
}

/// What a volume restore does with what the target volume already holds.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum VolumeTargetPolicy {
    /// Replace what differs from the snapshot; keep identical files and other files.
    #[default]
    Overwrite,
    /// Replace every entry of the snapshot, files rewritten whole.
    OverwriteAlways,
    /// Replace only what is older than the snapshot's entry.
    OverwriteIfNewer,
    /// Restore only what is missing.
    KeepExisting,
    /// Make the restored paths as in the snapshot: replace what differs, remove what it lacks.
    Mirror,
}

/// Where a Restore is.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RestorePhase {
    /// Waiting: for the plan, the Secrets or the target volumes.
    #[default]
    Pending,
    /// The describe Job reads which snapshot is restored and what it recorded.
    Describing,
    /// The restore Job runs.
    Running,
    /// Everything asked for was restored.
    Succeeded,
    /// The restore failed; `message` says why.
    Failed,
}

impl RestorePhase {
    /// Whether the Restore is over.
    pub fn is_finished(self) -> bool {
        matches!(self, RestorePhase::Succeeded | RestorePhase::Failed)
    }
}

/// What the operator observed of a Restore.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RestorePhase>,
    /// `Ready` (everything the Restore names exists) and `Complete`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The Job that restores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    /// The Job that read the snapshot's record first (`createClaims: FromSnapshot`,
    /// `allVolumes`, `allDatabases`); the restore Job then restores that snapshot by id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub describe_job_name: Option<String>,
    /// The claims the Restore created (they stay when it is deleted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub created_claims: Vec<String>,
    /// The target claims that existed and were restored into.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub existing_claims: Vec<String>,
    /// The snapshot restored (its full id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<String>,
    /// When the snapshot restored was taken. For `snapshot: latest`, compare it with the plan's
    /// `status.lastSuccessfulTime`: an older time means the repository did not offer the newest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_restored: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_restored: Option<i64>,
    /// The restore's average speed: bytes of file content written per second, from the start
    /// of the file restore to its end. While the Job runs, its log has the live speed and the
    /// time left (`kubectl logs job/<jobName>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_second: Option<i64>,
    /// Each stream restored: the bytes written to its command, and its error when it failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<super::StreamRecord>,
    /// What happened, for a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mover: Option<MoverStatus>,
}

/// The user who created the Restore, as the API server authenticated them.
pub const REQUESTER_ANNOTATION: &str = "neverwiped.io/requested-by";

/// Groups of that user (comma-separated) whose rights count for the Restore; each must be one of
/// the user's groups at creation. Left out: only the rights bound to the user themself count.
pub const REQUESTER_GROUPS_ANNOTATION: &str = "neverwiped.io/requested-by-groups";
