//! The pod every Job runs: one sidecar container with the repository's Secrets as files and
//! variables, the volumes it reads or writes, a read-only root, no Kubernetes API access, and
//! only the privileges the operation needs.

use std::collections::BTreeMap;

use jiff::SignedDuration;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, KeyToPath,
    NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    PersistentVolumeClaimVolumeSource, PodSecurityContext, PodSpec, PodTemplateSpec,
    ResourceRequirements, SeccompProfile, SecretKeySelector, SecretVolumeSource, SecurityContext,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use neverwiped_contract::cli::{self, env};
use neverwiped_contract::location::RestLocation;
use neverwiped_contract::streams::{LAUNCHER_PATH, TOOLS_DIR};

use super::{
    JobSettings, ANNOTATION_NODE, ANNOTATION_REPOSITORY_HOST, RESULT_FILE, SECRETS_ROOT,
    SIDECAR_CONTAINER,
};
use crate::api::{CredentialsSecretRef, PodSettings, SecretKeyRef};
use crate::mover::MoverIdentity;

/// The init container that copies the launcher for the stream and hook containers.
pub const TOOLS_CONTAINER: &str = "tools";
/// The emptyDir it copies the launcher into.
pub(super) const TOOLS_VOLUME: &str = "tools";

/// The user a pod that reads no volumes runs as.
pub(super) const UNPRIVILEGED_UID: i64 = 65532;

/// The environment variable name for a database entry (`orders-eu` → `ORDERS_EU`).
fn env_suffix(name: &str) -> String {
    name.to_ascii_uppercase().replace(['-', '.'], "_")
}

pub(super) enum Privileges {
    /// Root, with only these capabilities.
    Root(&'static [&'static str]),
    /// The default non-root user with no capabilities: pods that read no volumes.
    Unprivileged,
    /// This non-root user with no capabilities: pods that read or write volumes unprivileged.
    User(MoverIdentity),
}

/// The pod's user, groups and `fsGroup`.
pub(super) struct PodIdentity {
    pub(super) uid: i64,
    pub(super) gid: i64,
    supplemental_groups: Vec<i64>,
    fs_group: Option<i64>,
}

impl Privileges {
    fn identity(&self, mounts_claims: bool) -> PodIdentity {
        match self {
            Privileges::Root(_) => PodIdentity {
                uid: 0,
                gid: 0,
                supplemental_groups: Vec::new(),
                fs_group: None,
            },
            // fsGroup would change the group of every file on mounted claims: only without them.
            Privileges::Unprivileged => PodIdentity {
                uid: UNPRIVILEGED_UID,
                gid: UNPRIVILEGED_UID,
                supplemental_groups: Vec::new(),
                fs_group: (!mounts_claims).then_some(UNPRIVILEGED_UID),
            },
            // A backup's identity has no fsGroup (MoverIdentity::reading); a restore's is the
            // group its files get.
            // Root only ever by Privileges::Root: a user 0 (a hand-written status.mover, say)
            // becomes the default user.
            Privileges::User(identity) => PodIdentity {
                uid: if identity.uid > 0 {
                    identity.uid
                } else {
                    UNPRIVILEGED_UID
                },
                gid: identity.gid,
                supplemental_groups: identity.supplemental_groups.clone(),
                fs_group: identity.fs_group,
            },
        }
    }
}

#[derive(Default)]
pub(super) struct PodBuilder {
    volumes: Vec<Volume>,
    mounts: Vec<VolumeMount>,
    env: Vec<EnvVar>,
    mounts_claims: bool,
    /// Stream and hook containers beside the sidecar ([`super::extras`]); their user, security
    /// and resources are set when the pod is finished.
    extras: Vec<Container>,
    /// How long the pod may take to stop: post hooks still run while it does.
    grace_seconds: Option<i64>,
}

pub(super) struct FinishedPod<'a> {
    pub(super) name: String,
    pub(super) namespace: String,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) annotations: BTreeMap<String, String>,
    pub(super) owner: Option<OwnerReference>,
    pub(super) args: Vec<String>,
    pub(super) privileges: Privileges,
    pub(super) deadline: SignedDuration,
    pub(super) node_name: Option<String>,
    /// The URL of the repository the Job reads or writes.
    pub(super) repository_url: &'a str,
    pub(super) hostname: Option<String>,
    pub(super) pod_settings: Option<&'a PodSettings>,
    pub(super) settings: &'a JobSettings,
}

impl PodBuilder {
    pub(super) fn mount_repository(
        &mut self,
        password: &SecretKeyRef,
        credentials: Option<&CredentialsSecretRef>,
        ca: Option<&SecretKeyRef>,
    ) {
        let file = self.mount_secret_key(
            "repository-password",
            &password.name,
            &password.key,
            "repository",
            "password",
        );
        self.env_value(env::PASSWORD_FILE, file);
        if let Some(credentials) = credentials {
            self.env_from_secret(
                env::GATE_USERNAME,
                &credentials.name,
                &credentials.username_key,
            );
            let file = self.mount_secret_key(
                "gate-password",
                &credentials.name,
                &credentials.password_key,
                "gate",
                "password",
            );
            self.env_value(env::GATE_PASSWORD_FILE, file);
        }
        if let Some(ca) = ca {
            let file = self.mount_secret_key("gate-ca", &ca.name, &ca.key, "gate-ca", "ca.crt");
            self.env_value(env::GATE_CA_FILE, file);
        }
    }

    /// Mounts the Secrets of the repository a copy reads from: its password and gate password as
    /// files, its gate user name from the Secret, its CA as a file (`NEVERWIPED_FROM_*`).
    pub(super) fn mount_source_repository(
        &mut self,
        password: &SecretKeyRef,
        credentials: Option<&CredentialsSecretRef>,
        ca: Option<&SecretKeyRef>,
    ) {
        let file = self.mount_secret_key(
            "from-repository-password",
            &password.name,
            &password.key,
            "from-repository",
            "password",
        );
        self.env_value(env::FROM_PASSWORD_FILE, file);
        if let Some(credentials) = credentials {
            self.env_from_secret(
                env::FROM_GATE_USERNAME,
                &credentials.name,
                &credentials.username_key,
            );
            let file = self.mount_secret_key(
                "from-gate-password",
                &credentials.name,
                &credentials.password_key,
                "from-gate",
                "password",
            );
            self.env_value(env::FROM_GATE_PASSWORD_FILE, file);
        }
        if let Some(ca) = ca {
            let file =
                self.mount_secret_key("from-gate-ca", &ca.name, &ca.key, "from-gate-ca", "ca.crt");
            self.env_value(env::FROM_GATE_CA_FILE, file);
        }
    }

    /// Mounts a database's password as a file and its user name as a variable; returns the
    /// variable's name and the file's path.
    pub(super) fn mount_database_credentials(
        &mut self,
        entry: &str,
        credentials: &CredentialsSecretRef,
    ) -> (String, String) {
        let username_var = format!("{}{}", env::DB_USERNAME_PREFIX, env_suffix(entry));
        self.env_from_secret(&username_var, &credentials.name, &credentials.username_key);
        let index = self.volumes.len();
        let file = self.mount_secret_key(
            &format!("db-{index}-password"),
            &credentials.name,
            &credentials.password_key,
            &format!("databases/{entry}"),
            "password",
        );
        (username_var, file)
    }

    /// Mounts one key of a Secret as `SECRETS_ROOT/<directory>/<file>`; returns the path.
    fn mount_secret_key(
        &mut self,
        volume: &str,
        secret: &str,
        key: &str,
        directory: &str,
        file: &str,
    ) -> String {
        let mount_path = format!("{SECRETS_ROOT}/{directory}");
        self.volumes.push(Volume {
            name: volume.into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.into()),
                items: Some(vec![KeyToPath {
                    key: key.into(),
                    path: file.into(),
                    mode: None,
                }]),
                // Owner and group read-only; `fsGroup` makes it readable by a non-root sidecar
                // (without one, `finish` makes it readable by all).
                default_mode: Some(0o440),
                optional: Some(false),
            }),
            ..Volume::default()
        });
        self.mounts.push(VolumeMount {
            name: volume.into(),
            mount_path: mount_path.clone(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
        format!("{mount_path}/{file}")
    }

    /// An `emptyDir` volume mounted at `path`.
    pub(super) fn mount_empty_dir(&mut self, volume: &str, path: &str) {
        self.volumes.push(Volume {
            name: volume.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        });
        self.mounts.push(VolumeMount {
            name: volume.into(),
            mount_path: path.into(),
            ..VolumeMount::default()
        });
    }

    /// A volume of the pod's own (a drill's scratch space), mounted read-write at `path`.
    pub(super) fn mount_volume(&mut self, volume: Volume, path: &str) {
        self.mounts.push(VolumeMount {
            name: volume.name.clone(),
            mount_path: path.into(),
            ..VolumeMount::default()
        });
        self.volumes.push(volume);
    }

    pub(super) fn mount_claim(&mut self, volume: &str, claim: &str, path: &str, read_only: bool) {
        self.mounts_claims = true;
        self.volumes.push(Volume {
            name: volume.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.into(),
                read_only: Some(read_only),
            }),
            ..Volume::default()
        });
        self.mounts.push(VolumeMount {
            name: volume.into(),
            mount_path: path.into(),
            read_only: Some(read_only),
            ..VolumeMount::default()
        });
    }

    /// A volume of the pod that the sidecar does not mount (extra containers mount it).
    pub(super) fn add_volume(&mut self, volume: Volume) {
        self.volumes.push(volume);
    }

    /// The pod's volume of `claim` that a container may mount (`read_only` or not): the one the
    /// sidecar mounts when it allows that, else a new one named `fallback`.
    pub(super) fn claim_volume(&mut self, claim: &str, read_only: bool, fallback: &str) -> String {
        let reusable = self.volumes.iter().find(|volume| {
            volume.persistent_volume_claim.as_ref().is_some_and(|pvc| {
                pvc.claim_name == claim && (read_only || pvc.read_only != Some(true))
            })
        });
        if let Some(volume) = reusable {
            return volume.name.clone();
        }
        self.mounts_claims = true;
        self.volumes.push(Volume {
            name: fallback.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.into(),
                read_only: Some(read_only),
            }),
            ..Volume::default()
        });
        fallback.into()
    }

    /// A container beside the sidecar; [`PodBuilder::finish`] gives it its user and limits.
    pub(super) fn add_extra(&mut self, container: Container) {
        self.extras.push(container);
    }

    /// How many containers stand beside the sidecar so far.
    pub(super) fn extras_count(&self) -> usize {
        self.extras.len()
    }

    /// The pod's `terminationGracePeriodSeconds`.
    pub(super) fn set_grace_seconds(&mut self, seconds: i64) {
        self.grace_seconds = Some(seconds);
    }

    fn env_value(&mut self, name: &str, value: String) {
        self.env.push(EnvVar {
            name: name.into(),
            value: Some(value),
            value_from: None,
        });
    }

    fn env_from_secret(&mut self, name: &str, secret: &str, key: &str) {
        self.env.push(EnvVar {
            name: name.into(),
            value: None,
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: secret.into(),
                    key: key.into(),
                    optional: Some(false),
                }),
                ..EnvVarSource::default()
            }),
        });
    }

    /// The Job: the sidecar container with everything mounted so far, in a pod that runs once.
    pub(super) fn finish(mut self, pod: FinishedPod<'_>) -> Job {
        // The root filesystem is read-only; the sidecar's scratch space is an emptyDir.
        self.mount_empty_dir("tmp", "/tmp");
        self.env_value("TMPDIR", "/tmp".into());
        self.env_value(env::RETRY_BUDGET, retry_budget(pod.deadline));
        let identity = pod.privileges.identity(self.mounts_claims);
        if identity.uid != 0 && identity.fs_group.is_none() {
            // Secret files are owned by root and by the fsGroup: without one, a non-root sidecar
            // reads them only if everyone may (everyone is the sidecar: one container).
            for volume in &mut self.volumes {
                if let Some(secret) = volume.secret.as_mut() {
                    secret.default_mode = Some(0o444);
                }
            }
        }
        let container = Container {
            name: SIDECAR_CONTAINER.into(),
            image: Some(pod.settings.image.clone()),
            image_pull_policy: pod.settings.image_pull_policy.clone(),
            command: Some(vec![cli::SIDECAR_PATH.into()]),
            args: Some(pod.args.clone()),
            env: Some(self.env),
            volume_mounts: Some(self.mounts),
            resources: pod
                .pod_settings
                .and_then(|p| p.resources.clone())
                .or_else(|| pod.settings.default_resources.clone()),
            termination_message_path: Some(RESULT_FILE.into()),
            // The sidecar writes its JSON result there; logs are never mistaken for a result.
            termination_message_policy: Some("File".into()),
            security_context: Some(container_security(&pod.privileges, &identity)),
            ..Container::default()
        };
        let (init_containers, extras) = finish_extras(
            std::mem::take(&mut self.extras),
            &identity,
            container.resources.as_ref(),
            pod.settings,
        );
        let pod_settings = pod.pod_settings.cloned().unwrap_or_default();
        let pod_spec = PodSpec {
            init_containers,
            containers: std::iter::once(container).chain(extras).collect(),
            termination_grace_period_seconds: self.grace_seconds,
            volumes: Some(self.volumes),
            restart_policy: Some("Never".into()),
            // The sidecar talks to the gate, never to the Kubernetes API.
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            security_context: Some(PodSecurityContext {
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    localhost_profile: None,
                }),
                fs_group: identity.fs_group,
                // Where an fsGroup meets a claim (a restore's target), the kubelet changes the
                // volume's files only when its root's group differs, not on every start.
                fs_group_change_policy: (identity.fs_group.is_some() && self.mounts_claims)
                    .then(|| "OnRootMismatch".into()),
                supplemental_groups: (!identity.supplemental_groups.is_empty())
                    .then(|| identity.supplemental_groups.clone()),
                ..PodSecurityContext::default()
            }),
            affinity: pod.node_name.clone().map(on_node),
            hostname: pod.hostname.clone(),
            node_selector: (!pod_settings.node_selector.is_empty())
                .then_some(pod_settings.node_selector),
            tolerations: (!pod_settings.tolerations.is_empty()).then_some(pod_settings.tolerations),
            priority_class_name: pod_settings.priority_class_name,
            ..PodSpec::default()
        };
        job_of(pod, pod_spec)
    }
}

/// The sidecar's security context: no escalation, a read-only root, all capabilities dropped but
/// those the operation needs.
fn container_security(privileges: &Privileges, identity: &PodIdentity) -> SecurityContext {
    let capabilities: Vec<String> = match privileges {
        Privileges::Root(capabilities) => capabilities.iter().map(|c| c.to_string()).collect(),
        Privileges::Unprivileged | Privileges::User(_) => Vec::new(),
    };
    SecurityContext {
        allow_privilege_escalation: Some(false),
        privileged: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(!matches!(privileges, Privileges::Root(_))),
        run_as_user: Some(identity.uid),
        run_as_group: Some(identity.gid),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: (!capabilities.is_empty()).then_some(capabilities),
        }),
        ..SecurityContext::default()
    }
}

/// The init container and the extra containers as the pod runs them: never as root (the mover's
/// user when it is not root, else 65532), no capability, a read-only root, the sidecar's
/// resources. No extra container: no init container either.
fn finish_extras(
    mut extras: Vec<Container>,
    identity: &PodIdentity,
    resources: Option<&ResourceRequirements>,
    settings: &JobSettings,
) -> (Option<Vec<Container>>, Vec<Container>) {
    if extras.is_empty() {
        return (None, extras);
    }
    let (uid, gid) = match identity.uid {
        0 => (UNPRIVILEGED_UID, UNPRIVILEGED_UID),
        uid => (uid, identity.gid),
    };
    let tools = Container {
        name: TOOLS_CONTAINER.into(),
        image: Some(settings.image.clone()),
        image_pull_policy: settings.image_pull_policy.clone(),
        command: Some(vec![
            "cp".into(),
            cli::SIDECAR_PATH.into(),
            LAUNCHER_PATH.into(),
        ]),
        volume_mounts: Some(vec![VolumeMount {
            name: TOOLS_VOLUME.into(),
            mount_path: TOOLS_DIR.into(),
            ..VolumeMount::default()
        }]),
        ..Container::default()
    };
    let mut init = vec![tools];
    for container in init.iter_mut().chain(extras.iter_mut()) {
        container.security_context = Some(non_root(uid, gid));
        container.resources = resources.cloned();
    }
    (Some(init), extras)
}

/// A container's security: a non-root user, nothing to escalate to, no capability.
fn non_root(uid: i64, gid: i64) -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        privileged: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        run_as_user: Some(uid),
        run_as_group: Some(gid),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: None,
        }),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            localhost_profile: None,
        }),
        ..SecurityContext::default()
    }
}

/// Requires the pod to run on `node` (where the volumes it reads directly are in use).
fn on_node(node: String) -> Affinity {
    Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_fields: Some(vec![NodeSelectorRequirement {
                        key: "metadata.name".into(),
                        operator: "In".into(),
                        values: Some(vec![node]),
                    }]),
                    match_expressions: None,
                }],
            }),
            preferred_during_scheduling_ignored_during_execution: None,
        }),
        ..Affinity::default()
    }
}

/// The Job around `pod_spec`. It says what it takes from the concurrency limits (the node and the
/// repository host) in annotations, so that the queue never reads its pod spec back.
fn job_of(pod: FinishedPod<'_>, pod_spec: PodSpec) -> Job {
    let mut annotations = pod.annotations;
    if let Some(node) = &pod.node_name {
        annotations.insert(ANNOTATION_NODE.into(), node.clone());
    }
    if let Ok(location) = RestLocation::parse(pod.repository_url) {
        annotations.insert(ANNOTATION_REPOSITORY_HOST.into(), location.host());
    }
    Job {
        metadata: ObjectMeta {
            name: Some(pod.name),
            namespace: Some(pod.namespace),
            labels: Some(pod.labels.clone()),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: pod.owner.map(|owner| vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            // One attempt: a failed backup is reported, and the next scheduled run retries.
            backoff_limit: Some(0),
            active_deadline_seconds: Some(pod.deadline.as_secs().max(1)),
            // No ttlSecondsAfterFinished: the operator reads the result, then deletes old Jobs.
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod.labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod_spec),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}

/// How long the sidecar retries a gate that fails: half the run's deadline, at most the sidecar's
/// default. A gate down for longer then fails the run with the gate's own error in its result
/// (and in the plan's status), before the deadline would stop it with nothing to say.
fn retry_budget(deadline: SignedDuration) -> String {
    let seconds = (deadline.as_secs() / 2).clamp(1, cli::DEFAULT_RETRY_BUDGET_SECS as i64);
    format!("{seconds}s")
}
