//! Streams and hooks: a plan's dump containers (`spec.streams`), its commands around the moment
//! the data is read (`spec.hooks`), a Restore's containers that take a stream back
//! (`spec.streams`), and what a run recorded of each. They run as containers of the backup or
//! restore Job's own pod, never by exec'ing into the application's pods.

use kube::core::Rule;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::SecretKeyRef;
use super::names::{DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN};

/// An image reference: no white space or control character.
pub const IMAGE_PATTERN: &str = r"^[^\s\x00-\x1f\x7f]+$";

/// An environment variable's name: a C identifier (what every shell reads).
pub const ENV_NAME_PATTERN: &str = r"^[A-Za-z_][A-Za-z0-9_]*$";

/// The prefix of the variables the operator and the sidecar set; a user's may not start with it.
pub const RESERVED_ENV_PREFIX: &str = "NEVERWIPED_";

/// The folder of the pod's own mounts (the exchange folder, the launcher): no claim goes there.
pub const RESERVED_MOUNT_ROOT: &str = "/neverwiped";

/// CEL, on a list of named entries: no two share a name.
pub const UNIQUE_NAMES_RULE: &str = "self.all(a, self.exists_one(b, b.name == a.name))";

/// CEL, on a `mountPath`: absolute, and not one of the pod's own folders.
pub const MOUNT_PATH_RULE: &str = "self.startsWith('/') && self != '/' && self != '/tmp' && self != '/neverwiped' && !self.startsWith('/neverwiped/') && !self.contains('/../') && !self.endsWith('/..')";

/// The most a stream or hook name may have: its container is `hook-post-NAME`, a DNS label.
pub const MAX_ENTRY_NAME_LEN: u32 = 48;

/// The default of a hook's `timeoutSeconds`.
pub const DEFAULT_HOOK_TIMEOUT_SECONDS: i64 = 60;

/// A container of the backup pod whose standard output is stored in the snapshot as
/// `/streams/NAME`: a dump of any data store (`redis-cli --rdb -`, `mongodump --archive`, …).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BackupStream {
    /// The stream's name: its file in the snapshot (`/streams/NAME`) and its container
    /// (`stream-NAME`).
    #[schemars(length(min = 1, max = 48), regex(pattern = DNS_LABEL_PATTERN))]
    pub name: String,
    /// The image the command runs in; the cluster admin's `policy.allowedImages` must allow it.
    #[schemars(length(min = 1, max = 512), regex(pattern = IMAGE_PATTERN))]
    pub image: String,
    /// The command and its arguments, run without a shell unless it names one; it writes the
    /// dump to its standard output. Never put a secret here: use `env` with `valueFrom`.
    #[schemars(length(min = 1, max = 64), inner(length(max = 4096)))]
    pub command: Vec<String>,
    /// Environment variables of the command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = unique_env_rule())]
    pub env: Vec<StreamEnvVar>,
    /// A stream of no bytes is a success (by default it fails the run: an empty dump is rarely
    /// what was meant).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_empty: bool,
    /// Claims of this namespace the command reads (read-only unless `readOnly: false`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub volume_mounts: Vec<StreamVolumeMount>,
}

/// One environment variable of a stream or hook: a value, or one key of a Secret.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(validation = Rule::new("has(self.value) != has(self.valueFrom)")
    .message("set exactly one of value or valueFrom"))]
#[serde(rename_all = "camelCase")]
pub struct StreamEnvVar {
    /// A C identifier (letters, digits and `_`, not starting with a digit), not starting with
    /// `NEVERWIPED_` (the operator's own variables).
    #[schemars(length(min = 1, max = 128), regex(pattern = ENV_NAME_PATTERN))]
    #[x_kube(validation = Rule::new("!self.startsWith('NEVERWIPED_')")
        .message("names starting with NEVERWIPED_ are the operator's own; choose another"))]
    pub name: String,
    /// The value, as written (not a secret: it shows in the Job's spec).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub value: Option<String>,
    /// Where the value comes from: a key of a Secret of this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<EnvSource>,
}

/// A secret value of an environment variable.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvSource {
    /// One key of a Secret in this namespace.
    pub secret_key_ref: SecretKeyRef,
}

/// A claim mounted into a stream's container.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct StreamVolumeMount {
    #[serde(flatten)]
    pub claim: ClaimMount,
    /// Mounted read-only (the default for a backup).
    #[serde(default = "default_true")]
    pub read_only: bool,
}

/// A claim mounted into a restore stream's container: writable by default.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RestoreStreamVolumeMount {
    #[serde(flatten)]
    pub claim: ClaimMount,
    /// Mounted read-only (a restore writes by default).
    #[serde(default)]
    pub read_only: bool,
}

/// Which claim a stream's container mounts, and where: what a plan's and a Restore's mounts
/// share (only their `readOnly` default differs, so each side keeps its own type around it).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClaimMount {
    /// A PersistentVolumeClaim of this namespace.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub claim_name: String,
    /// Where it is mounted: an absolute path, not `/`, `/tmp` or under `/neverwiped`.
    #[schemars(length(min = 2, max = 1024))]
    #[x_kube(validation = Rule::new(MOUNT_PATH_RULE).message(
        "mountPath must be absolute, without '..', and not /, /tmp or under /neverwiped (the pod's own folders)"
    ))]
    pub mount_path: String,
}

/// CEL, on a command's `env`: each variable once (a stream's and a hook's alike).
fn unique_env_rule() -> Rule {
    Rule::new(UNIQUE_NAMES_RULE).message("env: each variable once")
}

fn default_true() -> bool {
    true
}

/// Commands run around the moment a backup reads its data: `pre` ones before (a checkpoint, a
/// flush, a write lock), `post` ones after, always, even when a pre hook or the read failed.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Hooks {
    /// Run in order before the data is read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    #[x_kube(validation = Rule::new(UNIQUE_NAMES_RULE).message("hooks.pre: each name once"))]
    pub pre: Vec<Hook>,
    /// Run in order after the data was read, whatever happened before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    #[x_kube(validation = Rule::new(UNIQUE_NAMES_RULE).message("hooks.post: each name once"))]
    pub post: Vec<Hook>,
}

impl Hooks {
    pub fn is_empty(&self) -> bool {
        self.pre.is_empty() && self.post.is_empty()
    }
}

/// One command around the read.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Hook {
    /// The hook's name: its container (`hook-pre-NAME`, `hook-post-NAME`).
    #[schemars(length(min = 1, max = 48), regex(pattern = DNS_LABEL_PATTERN))]
    pub name: String,
    /// The image the command runs in; left out, the sidecar's (it has the `psql` and `mariadb`
    /// clients). Another must be allowed by the cluster admin's `policy.allowedImages`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512), regex(pattern = IMAGE_PATTERN))]
    pub image: Option<String>,
    /// The command and its arguments. Never put a secret here: use `env` with `valueFrom`.
    #[schemars(length(min = 1, max = 64), inner(length(max = 4096)))]
    pub command: Vec<String>,
    /// Environment variables of the command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = unique_env_rule())]
    pub env: Vec<StreamEnvVar>,
    /// How long the command may run; it is killed then, and counts as failed.
    #[serde(default = "default_hook_timeout")]
    #[schemars(range(min = 1, max = 3600))]
    pub timeout_seconds: i64,
    /// `Fail` (the default): a failed pre hook fails the run and nothing is read (the post hooks
    /// still run); `Continue`: the failure is recorded and the run goes on.
    #[serde(default)]
    pub on_error: HookOnError,
}

fn default_hook_timeout() -> i64 {
    DEFAULT_HOOK_TIMEOUT_SECONDS
}

/// What a failing hook does to the run.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum HookOnError {
    /// The run fails (a pre hook: nothing is read; the post hooks still run).
    #[default]
    Fail,
    /// The failure is recorded; the run goes on.
    Continue,
}

/// A container of the restore pod that takes the snapshot's `/streams/NAME` on its standard
/// input (`redis-cli --pipe`, `mongorestore --archive`, …).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RestoreStream {
    /// The stream's name in the snapshot (`/streams/NAME`, the plan's `spec.streams[].name`).
    #[schemars(length(min = 1, max = 48), regex(pattern = DNS_LABEL_PATTERN))]
    pub name: String,
    /// The image the command runs in; left out, the image of the plan's stream of that name (a
    /// Restore that names a repository alone must set it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512), regex(pattern = IMAGE_PATTERN))]
    pub image: Option<String>,
    /// The command and its arguments; it reads the stream from its standard input.
    #[schemars(length(min = 1, max = 64), inner(length(max = 4096)))]
    pub command: Vec<String>,
    /// Environment variables of the command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = unique_env_rule())]
    pub env: Vec<StreamEnvVar>,
    /// Claims of this namespace the command writes (writable unless `readOnly: true`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub volume_mounts: Vec<RestoreStreamVolumeMount>,
}

/// What a plan's and a Restore's streams share, for the code that treats both alike
/// (admission, their containers).
pub trait StreamSpec {
    fn name(&self) -> &str;
    fn command(&self) -> &[String];
    fn env(&self) -> &[StreamEnvVar];
    /// Its claim mounts, each with whether it is read-only (the sides' defaults differ).
    fn claim_mounts(&self) -> Vec<(&ClaimMount, bool)>;
}

/// Both sides name these fields alike: one implementation, written once.
macro_rules! stream_spec {
    ($($side:ty),+) => {$(
        impl StreamSpec for $side {
            fn name(&self) -> &str {
                &self.name
            }
            fn command(&self) -> &[String] {
                &self.command
            }
            fn env(&self) -> &[StreamEnvVar] {
                &self.env
            }
            fn claim_mounts(&self) -> Vec<(&ClaimMount, bool)> {
                let mounts = self.volume_mounts.iter();
                mounts.map(|m| (&m.claim, m.read_only)).collect()
            }
        }
    )+};
}

stream_spec!(BackupStream, RestoreStream);

/// When a hook ran.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum HookPhase {
    Pre,
    Post,
}

/// What a run did with one stream.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StreamRecord {
    pub name: String,
    /// Bytes read from the command (a backup) or written to it (a restore).
    pub bytes: i64,
    /// Why the stream failed (with the end of the command's standard error), when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What one hook of a run did.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookRecord {
    pub phase: HookPhase,
    pub name: String,
    /// Whether it ran and exited 0.
    pub succeeded: bool,
    /// How long it ran.
    pub seconds: f64,
    /// Why it failed (with the end of its standard error), when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
