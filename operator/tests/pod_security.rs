//! Every pod spec the operator builds, checked against the Pod Security Standards (`baseline` and
//! `restricted`, the "latest" version of kubernetes.io/docs/concepts/security/pod-security-standards).
//!
//! The maintained implementation of these rules is Go (`k8s.io/pod-security-admission/policy`,
//! the code of the PodSecurity admission plugin); no port of it is published on crates.io, PyPI
//! or npm, and the API server of the test machine (built from k8s.io/apiextensions-apiserver) has
//! no PodSecurity plugin (`--enable-admission-plugins` offers NamespaceLifecycle and the webhook
//! and policy plugins only). So the rules are written out here from the standard, one check per
//! control, each with its own test that a pod breaking it (and only it) is refused and the
//! operator's kind of pod is not. The last tests build the operator's pods (backup `Direct` and
//! `Snapshot`, a database-only backup, restore, prune, check; privileged and unprivileged movers)
//! and print which level each meets.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, PodSpec, SecurityContext};
use kube::api::ObjectMeta;
use neverwiped_operator::api::{
    BackupPlan, BackupPlanSpec, BackupVolume, CredentialsSecretRef, DatabaseSource, DatabaseType,
    NonEmptyTargetPolicy, Repository, Restore, RestoreDatabase, RestoreSpec, RestoreVolume,
    RunTrigger, SecretKeyRef,
};
use neverwiped_operator::job::{
    backup_job, maintenance_job, restore_job, BackupRun, BackupVolumeMount, JobSettings,
    MaintenanceKind, MaintenanceRun, RestoreRun,
};
use neverwiped_operator::mover::{Mover, MoverIdentity};
use neverwiped_operator::restore_source::ReadFrom;
use serde_json::json;

// ---------------------------------------------------------------------------------------------
// The standard's controls.

/// A Pod Security Standard level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Privileged,
    Baseline,
    Restricted,
}

/// One control of the standard: its name, its level, and what in a pod breaks it.
struct Control {
    name: &'static str,
    level: Level,
    check: fn(&PodSpec, &ObjectMeta) -> Vec<String>,
}

/// Capabilities `baseline` lets a container add.
const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Sysctls `baseline` allows (the "safe" set).
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

/// SELinux types `baseline` allows.
const SELINUX_TYPES: &[&str] = &[
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

/// Volume types `restricted` allows.
const RESTRICTED_VOLUME_TYPES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

const CONTROLS: &[Control] = &[
    Control {
        name: "HostProcess",
        level: Level::Baseline,
        check: host_process,
    },
    Control {
        name: "Host Namespaces",
        level: Level::Baseline,
        check: host_namespaces,
    },
    Control {
        name: "Privileged Containers",
        level: Level::Baseline,
        check: privileged_containers,
    },
    Control {
        name: "Capabilities (baseline)",
        level: Level::Baseline,
        check: capabilities_baseline,
    },
    Control {
        name: "HostPath Volumes",
        level: Level::Baseline,
        check: host_path_volumes,
    },
    Control {
        name: "Host Ports",
        level: Level::Baseline,
        check: host_ports,
    },
    Control {
        name: "AppArmor",
        level: Level::Baseline,
        check: app_armor,
    },
    Control {
        name: "SELinux",
        level: Level::Baseline,
        check: se_linux,
    },
    Control {
        name: "/proc Mount Type",
        level: Level::Baseline,
        check: proc_mount,
    },
    Control {
        name: "Seccomp (baseline)",
        level: Level::Baseline,
        check: seccomp_baseline,
    },
    Control {
        name: "Sysctls",
        level: Level::Baseline,
        check: sysctls,
    },
    Control {
        name: "Volume Types",
        level: Level::Restricted,
        check: volume_types,
    },
    Control {
        name: "Privilege Escalation",
        level: Level::Restricted,
        check: privilege_escalation,
    },
    Control {
        name: "Running as Non-root",
        level: Level::Restricted,
        check: run_as_non_root,
    },
    Control {
        name: "Running as Non-root user",
        level: Level::Restricted,
        check: run_as_user,
    },
    Control {
        name: "Seccomp (restricted)",
        level: Level::Restricted,
        check: seccomp_restricted,
    },
    Control {
        name: "Capabilities (restricted)",
        level: Level::Restricted,
        check: capabilities_restricted,
    },
];

/// Every container of the pod: containers, init containers and ephemeral containers (as their
/// name and security context).
fn all_containers(pod: &PodSpec) -> Vec<(String, Option<SecurityContext>, Vec<i32>)> {
    let ports = |c: &Container| -> Vec<i32> {
        c.ports
            .iter()
            .flatten()
            .filter_map(|p| p.host_port)
            .collect()
    };
    let mut all: Vec<(String, Option<SecurityContext>, Vec<i32>)> = pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
        .map(|c| (c.name.clone(), c.security_context.clone(), ports(c)))
        .collect();
    all.extend(pod.ephemeral_containers.iter().flatten().map(|c| {
        let ports = c
            .ports
            .iter()
            .flatten()
            .filter_map(|p| p.host_port)
            .collect();
        (c.name.clone(), c.security_context.clone(), ports)
    }));
    all
}

fn host_process(pod: &PodSpec, _: &ObjectMeta) -> Vec<String> {
    let mut found = Vec::new();
    let pod_level = pod
        .security_context
        .as_ref()
        .and_then(|s| s.windows_options.as_ref())
        .and_then(|w| w.host_process);
    if pod_level == Some(true) {
        found.push("spec.securityContext.windowsOptions.hostProcess: true".into());
    }
    for (name, context, _) in all_containers(pod) {
        let host = context
            .and_then(|s| s.windows_options)
            .and_then(|w| w.host_process);
        if host == Some(true) {
            found.push(format!(
                "container {name}: windowsOptions.hostProcess: true"
            ));
        }
    }
    found
}

fn host_namespaces(pod: &PodSpec, _: &ObjectMeta) -> Vec<String> {
    [
        ("hostNetwork", pod.host_network),
        ("hostPID", pod.host_pid),
        ("hostIPC", pod.host_ipc),
    ]
    .into_iter()
    .filter(|(_, value)| *value == Some(true))
    .map(|(field, _)| format!("spec.{field}: true"))
    .collect()
}

fn privileged_containers(pod: &PodSpec, _: &ObjectMeta) -> Vec<String> {
    all_containers(pod)
        .into_iter()
        .filter(|(_, context, _)| context.as_ref().and_then(|s| s.privileged) == Some(true))
        .map(|(name, _, _)| format!("container {name}: privileged: true"))
        .collect()
}

fn added_capabilities(context: &Option<SecurityContext>) -> Vec<String> {
    context
        .as_ref()
        .and_then(|s| s.capabilities.as_ref())
        .and_then(|c| c.add.clone())
        .unwrap_or_default()
}

fn capabilities_baseline(pod: &PodSpec, _: &ObjectMeta) -> Vec<String> {
    let mut found = Vec::new();
    for (name, context, _) in all_containers(pod) {
        for cap in added_capabilities(&context) {
            if !BASELINE_CAPABILITIES.contains(&cap.as_str()) {
                found.push(format!("container {name}: adds capability {cap}"));
            }
        }
    }
    found
}

fn host_path_volumes(pod: &PodSpec, _: &ObjectMeta) -> Vec<String> {
    pod.volumes
        .iter()
        .flatten()
        .filter(|v| v.host_path.is_some())
        .map(|v| format!("volume {}: hostPath", v.name))
        .collect()
}

fn host_ports(pod: &PodSpec, _: &ObjectMeta) -> Vec<String> {
    let mut found = Vec::new();
    for (name, _, ports) in all_containers(pod) {
        for port in ports.into_iter().filter(|&p| p != 0) {
            found.push(format!("container {name}: hostPort {port}"));
        }
    }
    found
}

fn app_armor(pod: &PodSpec, meta: &ObjectMeta) -> Vec<String> {
    let allowed = |type_: &str| matches!(type_, "RuntimeDefault" | "Localhost");
    let mut found = Vec::new();
    let pod_profile = pod
        .security_context
        .as_ref()
        .and_then(|s| s.app_armor_profile.as_ref());
    if let Some(profile) = pod_profile.filter(|p| !allowed(&p.type_)) {
        found.push(format!(
            "spec.securityContext.appArmorProfile.type: {}",
            profile.type_
        ));
    }
    for (name, context, _) in all_containers(pod) {
        if let Some(profile) = context.and_then(|s| s.app_armor_profile) {
            if !allowed(&profile.type_) {
                found.push(format!(
                    "container {name}: appArmorProfile.type: {}",
                    profile.type_
                ));
            }
        }
    }
    for (key, value) in meta.annotations.iter().flatten() {
        let is_apparmor = key.starts_with("container.apparmor.security.beta.kubernetes.io/");
        if is_apparmor && value != "runtime/default" && !value.starts_with("localhost/") {
            found.push(format!("annotation {key}: {value}"));
        }
    }
    found
}

fn se_linux(pod: &PodSpec, _: &ObjectMeta) -> Vec<String> {
    let mut options = vec![(
        "spec.securityContext".to_owned(),
        pod.security_context
            .as_ref()
            .and_then(|s| s.se_linux_options.clone()),
    )];
    for (name, context, _) in all_containers(pod) {
        options.push((
            format!("container {name}"),
            context.and_then(|s| s.se_linux_options),
        ));
    }
    let mut found = Vec::new();
    for (place, option) in options {
        let Some(option) = option else { continue };
        let type_ = option.type_.unwrap_or_default();
        if !type_.is_empty() && !SELINUX_TYPES.contains(&type_.as_str()) {
            found.push(format!("{place}: seLinuxOptions.type {type_}"));
        }
        if !option.user.unwrap_or_default().is_empty() {
            found.push(format!("{place}: seLinuxOptions.user is set"));
        }
        if !option.role.unwrap_or_default().is_empty() {
            found.push(format!("{place}: seLinuxOptions.role is set"));
        }
    }
    found
}

fn proc_mount(pod: &PodSpec, _: &ObjectMeta) -> Vec<String> {
    all_containers(pod)
        .into_iter()
        .filter_map(|(name, context, _)| {
            let mount = context.and_then(|s| s.proc_mount)?;
            (mount != "Default").then(|| format!("container {name}: procMount {mount}"))
        })
        .collect()
}

fn seccomp_type(context: &Option<SecurityContext>) -> Option<String> {
    context
        .as_ref()
        .and_then(|s| s.seccomp_profile.as_ref())
        .map(|p| p.type_.clone())
}

fn pod_seccomp_type(pod: &PodSpec) -> Option<String> {
    pod.security_context
        .as_ref()
        .and_then(|s| s.seccomp_profile.as_ref())
        .map(|p| p.type_.clone())
}

fn seccomp_baseline(pod: &PodSpec, _: &ObjectMeta) -> Vec<String> {
    let mut found = Vec::new();
    if pod_seccomp_type(pod).as_deref() == Some("Unconfined") {
        found.push("spec.securityContext.seccompProfile.type: Unconfined".into());
    }
    for (name, context, _) in all_containers(pod) {
        if seccomp_type(&context).as_deref() == Some("Unconfined") {
            found.push(format!("container {name}: seccompProfile.type: Unconfined"));
        }
    }
    found
}

fn sysctls(pod: &PodSpec, _: &ObjectMeta) -> Vec<String> {
    pod.security_context
        .as_ref()
        .and_then(|s| s.sysctls.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|s| !SAFE_SYSCTLS.contains(&s.name.as_str()))
        .map(|s| format!("sysctl {}", s.name))
        .collect()
}

fn volume_types(pod: &PodSpec, _: &ObjectMeta) -> Vec<String> {
    let mut found = Vec::new();
    for volume in pod.volumes.iter().flatten() {
        let value = serde_json::to_value(volume).expect("a volume");
        let types: Vec<String> = value
            .as_object()
            .expect("an object")
            .keys()
            .filter(|key| *key != "name")
            .cloned()
            .collect();
        for type_ in types {
            if !RESTRICTED_VOLUME_TYPES.contains(&type_.as_str()) {
                found.push(format!("volume {}: type {type_}", volume.name));
            }
        }
    }
    found
}

fn privilege_escalation(pod: &PodSpec, _: &ObjectMeta) -> Vec<String> {
    all_containers(pod)
        .into_iter()
        .filter(|(_, context, _)| {
            context.as_ref().and_then(|s| s.allow_privilege_escalation) != Some(false)
        })
        .map(|(name, _, _)| format!("container {name}: allowPrivilegeEscalation is not false"))
        .collect()
}

fn run_as_non_root(pod: &PodSpec, _: &ObjectMeta) -> Vec<String> {
    let pod_level = pod
        .security_context
        .as_ref()
        .and_then(|s| s.run_as_non_root);
    let mut found = Vec::new();
    if pod_level == Some(false) {
        found.push("spec.securityContext.runAsNonRoot: false".into());
    }
    for (name, context, _) in all_containers(pod) {
        match context.as_ref().and_then(|s| s.run_as_non_root) {
            Some(true) => {}
            Some(false) => found.push(format!("container {name}: runAsNonRoot: false")),
            None if pod_level == Some(true) => {}
            None => found.push(format!("container {name}: runAsNonRoot is not set")),
        }
    }
    found
}

fn run_as_user(pod: &PodSpec, _: &ObjectMeta) -> Vec<String> {
    let mut found = Vec::new();
    if pod.security_context.as_ref().and_then(|s| s.run_as_user) == Some(0) {
        found.push("spec.securityContext.runAsUser: 0".into());
    }
    for (name, context, _) in all_containers(pod) {
        if context.as_ref().and_then(|s| s.run_as_user) == Some(0) {
            found.push(format!("container {name}: runAsUser: 0"));
        }
    }
    found
}

fn seccomp_restricted(pod: &PodSpec, _: &ObjectMeta) -> Vec<String> {
    let allowed = |t: &Option<String>| matches!(t.as_deref(), Some("RuntimeDefault" | "Localhost"));
    let pod_level = pod_seccomp_type(pod);
    let mut found = Vec::new();
    if pod_level.is_some() && !allowed(&pod_level) {
        found.push(format!(
            "spec.securityContext.seccompProfile.type: {pod_level:?}"
        ));
    }
    for (name, context, _) in all_containers(pod) {
        let own = seccomp_type(&context);
        match (&own, &pod_level) {
            (Some(_), _) if !allowed(&own) => {
                found.push(format!("container {name}: seccompProfile.type: {own:?}"))
            }
            (Some(_), _) => {}
            (None, level) if allowed(level) => {}
            (None, _) => found.push(format!("container {name}: no seccompProfile")),
        }
    }
    found
}

fn capabilities_restricted(pod: &PodSpec, _: &ObjectMeta) -> Vec<String> {
    let mut found = Vec::new();
    for (name, context, _) in all_containers(pod) {
        let drops_all = context
            .as_ref()
            .and_then(|s| s.capabilities.as_ref())
            .and_then(|c| c.drop.as_ref())
            .is_some_and(|d| d.iter().any(|c| c == "ALL"));
        if !drops_all {
            found.push(format!("container {name}: does not drop ALL"));
        }
        for cap in added_capabilities(&context) {
            if cap != "NET_BIND_SERVICE" {
                found.push(format!("container {name}: adds capability {cap}"));
            }
        }
    }
    found
}

/// What breaks each control, by control name (controls the pod meets left out).
fn violations(
    pod: &PodSpec,
    meta: &ObjectMeta,
    up_to: Level,
) -> BTreeMap<&'static str, Vec<String>> {
    CONTROLS
        .iter()
        .filter(|control| control.level <= up_to)
        .map(|control| (control.name, (control.check)(pod, meta)))
        .filter(|(_, found)| !found.is_empty())
        .collect()
}

/// The highest level the pod meets.
fn level_met(pod: &PodSpec, meta: &ObjectMeta) -> Level {
    if violations(pod, meta, Level::Restricted).is_empty() {
        Level::Restricted
    } else if violations(pod, meta, Level::Baseline).is_empty() {
        Level::Baseline
    } else {
        Level::Privileged
    }
}

// ---------------------------------------------------------------------------------------------
// Each control, tried with a pod that breaks it.

/// A pod that meets `restricted`: the shape of the operator's unprivileged pods.
fn restricted_pod() -> PodSpec {
    serde_json::from_value(json!({
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}, "runAsNonRoot": true},
        "containers": [{
            "name": "c",
            "securityContext": {
                "allowPrivilegeEscalation": false, "runAsNonRoot": true, "runAsUser": 1000,
                "capabilities": {"drop": ["ALL"]},
            },
        }],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "secret", "secret": {"secretName": "s"}},
            {"name": "tmp", "emptyDir": {}},
        ],
    }))
    .expect("a pod")
}

/// `restricted_pod` changed by `patch` (a JSON merge patch of the pod spec).
fn with(patch: serde_json::Value) -> PodSpec {
    let mut value = serde_json::to_value(restricted_pod()).expect("json");
    json_patch_merge(&mut value, &patch);
    serde_json::from_value(value).expect("a pod")
}

fn json_patch_merge(target: &mut serde_json::Value, patch: &serde_json::Value) {
    match (target, patch) {
        (serde_json::Value::Object(target), serde_json::Value::Object(patch)) => {
            for (key, value) in patch {
                json_patch_merge(target.entry(key.clone()).or_insert(json!(null)), value);
            }
        }
        (target, patch) => *target = patch.clone(),
    }
}

/// The container patch `c` as the only container.
fn container(c: serde_json::Value) -> serde_json::Value {
    let mut base = json!({
        "name": "c",
        "securityContext": {
            "allowPrivilegeEscalation": false, "runAsNonRoot": true, "runAsUser": 1000,
            "capabilities": {"drop": ["ALL"]},
        },
    });
    json_patch_merge(&mut base, &c);
    json!({"containers": [base]})
}

/// Asserts that `pod` breaks exactly the control `name` (and meets every other one).
#[track_caller]
fn breaks_only(pod: PodSpec, name: &str) {
    let found = violations(&pod, &ObjectMeta::default(), Level::Restricted);
    let names: Vec<&str> = found.keys().copied().collect();
    assert_eq!(names, [name], "{found:?}");
}

#[test]
fn the_restricted_example_meets_every_control() {
    let found = violations(&restricted_pod(), &ObjectMeta::default(), Level::Restricted);
    assert!(found.is_empty(), "{found:?}");
}

#[test]
fn control_host_process() {
    breaks_only(
        with(json!({"securityContext": {"windowsOptions": {"hostProcess": true}}})),
        "HostProcess",
    );
    breaks_only(
        with(container(
            json!({"securityContext": {"windowsOptions": {"hostProcess": true}}}),
        )),
        "HostProcess",
    );
}

#[test]
fn control_host_namespaces() {
    for field in ["hostNetwork", "hostPID", "hostIPC"] {
        breaks_only(with(json!({ field: true })), "Host Namespaces");
    }
    assert!(
        host_namespaces(&with(json!({"hostNetwork": false})), &ObjectMeta::default()).is_empty()
    );
}

#[test]
fn control_privileged_containers() {
    breaks_only(
        with(container(json!({"securityContext": {"privileged": true}}))),
        "Privileged Containers",
    );
}

#[test]
fn control_capabilities_baseline_and_restricted() {
    // CHOWN is in baseline's list: only restricted's control refuses it.
    breaks_only(
        with(container(
            json!({"securityContext": {"capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}}}),
        )),
        "Capabilities (restricted)",
    );
    // DAC_READ_SEARCH is in neither.
    let pod = with(container(
        json!({"securityContext": {"capabilities": {"drop": ["ALL"], "add": ["DAC_READ_SEARCH"]}}}),
    ));
    let found = violations(&pod, &ObjectMeta::default(), Level::Restricted);
    assert_eq!(
        found.keys().copied().collect::<Vec<_>>(),
        ["Capabilities (baseline)", "Capabilities (restricted)"]
    );
    breaks_only(
        with(container(
            json!({"securityContext": {"capabilities": {"drop": []}}}),
        )),
        "Capabilities (restricted)",
    );
    let bind = with(container(
        json!({"securityContext": {"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}),
    ));
    assert!(violations(&bind, &ObjectMeta::default(), Level::Restricted).is_empty());
}

#[test]
fn control_host_path_volumes() {
    let pod = with(json!({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}));
    let found = violations(&pod, &ObjectMeta::default(), Level::Restricted);
    assert_eq!(
        found.keys().copied().collect::<Vec<_>>(),
        ["HostPath Volumes", "Volume Types"]
    );
}

#[test]
fn control_host_ports() {
    breaks_only(
        with(container(
            json!({"ports": [{"containerPort": 80, "hostPort": 8080}]}),
        )),
        "Host Ports",
    );
    let unset = with(container(json!({"ports": [{"containerPort": 80}]})));
    assert!(violations(&unset, &ObjectMeta::default(), Level::Restricted).is_empty());
}

#[test]
fn control_app_armor() {
    breaks_only(
        with(json!({"securityContext": {"appArmorProfile": {"type": "Unconfined"}}})),
        "AppArmor",
    );
    breaks_only(
        with(container(
            json!({"securityContext": {"appArmorProfile": {"type": "Unconfined"}}}),
        )),
        "AppArmor",
    );
    let meta = ObjectMeta {
        annotations: Some(BTreeMap::from([(
            "container.apparmor.security.beta.kubernetes.io/c".to_owned(),
            "unconfined".to_owned(),
        )])),
        ..ObjectMeta::default()
    };
    assert_eq!(app_armor(&restricted_pod(), &meta).len(), 1);
    let fine = with(json!({"securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}}}));
    assert!(violations(&fine, &ObjectMeta::default(), Level::Restricted).is_empty());
}

#[test]
fn control_se_linux() {
    breaks_only(
        with(json!({"securityContext": {"seLinuxOptions": {"type": "spc_t"}}})),
        "SELinux",
    );
    breaks_only(
        with(container(
            json!({"securityContext": {"seLinuxOptions": {"user": "system_u"}}}),
        )),
        "SELinux",
    );
    let fine = with(
        json!({"securityContext": {"seLinuxOptions": {"type": "container_t", "level": "s0:c1,c2"}}}),
    );
    assert!(violations(&fine, &ObjectMeta::default(), Level::Restricted).is_empty());
}

#[test]
fn control_proc_mount() {
    breaks_only(
        with(container(
            json!({"securityContext": {"procMount": "Unmasked"}}),
        )),
        "/proc Mount Type",
    );
}

#[test]
fn control_seccomp() {
    let pod = with(json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}}}));
    let found = violations(&pod, &ObjectMeta::default(), Level::Restricted);
    assert_eq!(
        found.keys().copied().collect::<Vec<_>>(),
        ["Seccomp (baseline)", "Seccomp (restricted)"]
    );
    // No profile anywhere: baseline allows it, restricted does not.
    let mut none = restricted_pod();
    none.security_context.as_mut().unwrap().seccomp_profile = None;
    breaks_only(none, "Seccomp (restricted)");
}

#[test]
fn control_sysctls() {
    breaks_only(
        with(json!({"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}})),
        "Sysctls",
    );
    let safe = with(
        json!({"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]}}),
    );
    assert!(violations(&safe, &ObjectMeta::default(), Level::Restricted).is_empty());
}

#[test]
fn control_volume_types() {
    breaks_only(
        with(json!({"volumes": [{"name": "n", "nfs": {"server": "s", "path": "/"}}]})),
        "Volume Types",
    );
}

#[test]
fn control_privilege_escalation() {
    breaks_only(
        with(container(
            json!({"securityContext": {"allowPrivilegeEscalation": true}}),
        )),
        "Privilege Escalation",
    );
}

#[test]
fn control_running_as_non_root() {
    breaks_only(
        with(container(
            json!({"securityContext": {"runAsNonRoot": false}}),
        )),
        "Running as Non-root",
    );
    // Unset in the container: the pod's value counts.
    let mut inherited = restricted_pod();
    inherited.containers[0]
        .security_context
        .as_mut()
        .unwrap()
        .run_as_non_root = None;
    assert!(violations(&inherited, &ObjectMeta::default(), Level::Restricted).is_empty());
    inherited.security_context.as_mut().unwrap().run_as_non_root = None;
    breaks_only(inherited, "Running as Non-root");
}

#[test]
fn control_running_as_non_root_user() {
    breaks_only(
        with(container(json!({"securityContext": {"runAsUser": 0}}))),
        "Running as Non-root user",
    );
}

// ---------------------------------------------------------------------------------------------
// The operator's pods.

fn settings() -> JobSettings {
    JobSettings {
        image: "neverwiped/sidecar:dev".into(),
        drill_image: None,
        drill_image_pull_policy: None,
        image_pull_policy: None,
        default_resources: None,
        protection: Default::default(),
    }
}

fn plan(volumes: &[&str], databases: bool) -> BackupPlan {
    let mut plan = BackupPlan::new(
        "nightly",
        BackupPlanSpec {
            streams: Vec::new(),
            hooks: Default::default(),
            schedule: "30 2 * * *".into(),
            time_zone: "UTC".into(),
            suspend: false,
            manual_trigger: None,
            repository: Repository {
                url: "https://gate.example.com/shop".into(),
                password_secret_ref: SecretKeyRef {
                    name: "repo".into(),
                    key: "password".into(),
                },
                credentials_secret_ref: Some(CredentialsSecretRef::new("gate")),
                ca_secret_ref: None,
            },
            volumes: volumes.iter().map(|v| BackupVolume::claim(*v)).collect(),
            copy_method: Default::default(),
            volume_snapshot_class_name: None,
            databases: if databases {
                vec![DatabaseSource {
                    name: "orders".into(),
                    engine: DatabaseType::Postgresql,
                    host: "pg".into(),
                    port: None,
                    credentials_secret_ref: CredentialsSecretRef::new("pg"),
                    databases: vec![],
                }]
            } else {
                vec![]
            },
            retention: None,
            copies: Vec::new(),
            maintenance: Default::default(),
            limits: None,
            verify: None,
            deadline: "2h".into(),
            pod: None,
            mover: None,
        },
    );
    plan.metadata.namespace = Some("shop".into());
    plan.metadata.uid = Some("0b6d1c1e-0000-4000-8000-000000000001".into());
    plan
}

fn backup(mover: &Mover, mounted: &[(&str, &str)], node: Option<&str>, databases: bool) -> Job {
    let claims: Vec<&str> = mounted.iter().map(|(source, _)| *source).collect();
    let run = BackupRun {
        hooks_in_pod: true,
        trigger: RunTrigger::Schedule,
        scheduled_time: Some("2026-11-30T02:30:00Z".parse().unwrap()),
        manual_trigger: None,
        volumes: mounted
            .iter()
            .map(|(source, mounted)| BackupVolumeMount {
                source_claim: (*source).into(),
                mounted_claim: (*mounted).into(),
                excludes: vec![],
                selection: Default::default(),
                claim: None,
            })
            .collect(),
        node_name: node.map(Into::into),
        deadline: SignedDuration::from_hours(2),
        remove_stale_locks: true,
        mover: mover.clone(),
    };
    backup_job(&plan(&claims, databases), &run, &settings())
}

fn restore(mover: &Mover) -> Job {
    let mut restore = Restore::new(
        "bring-back",
        RestoreSpec {
            streams: Vec::new(),
            on_non_empty_target: Default::default(),
            source: neverwiped_operator::api::RestoreSource::Plan {
                backup_plan_name: "nightly".into(),
                copy: None,
            },
            snapshot: "latest".into(),
            taken_before: None,
            volumes: vec![RestoreVolume {
                source_claim_name: "data".into(),
                target_claim_name: "data-restored".into(),
                create_claim: None,
                includes: vec![],
            }],
            databases: vec![RestoreDatabase {
                name: "orders".into(),
                engine: Some(DatabaseType::Postgresql),
                host: "pg".into(),
                port: None,
                credentials_secret_ref: CredentialsSecretRef::new("pg"),
                on_non_empty_target: NonEmptyTargetPolicy::Refuse,
            }],
            pod: None,
            mover: None,
            all_volumes: false,
            create_claims: None,
            storage_class_mapping: Vec::new(),
            minimum_claim_size: None,
            all_databases: None,
        },
    );
    restore.metadata.namespace = Some("shop".into());
    restore.metadata.uid = Some("0b6d1c1e-0000-4000-8000-000000000002".into());
    let run = RestoreRun {
        stream_images: Default::default(),
        deadline: SignedDuration::from_hours(2),
        database_types: BTreeMap::new(),
        mover: mover.clone(),
    };
    restore_job(
        &restore,
        &ReadFrom::of(&restore, Some(&plan(&["data"], true))).expect("a plan"),
        &run,
        &settings(),
    )
}

fn maintenance(kind: MaintenanceKind) -> Job {
    let run = MaintenanceRun {
        kind,
        trigger: RunTrigger::Schedule,
        scheduled_time: "2026-11-30T03:00:00Z".parse::<Timestamp>().unwrap(),
        deadline: SignedDuration::from_hours(2),
        remove_stale_locks: false,
    };
    maintenance_job(&plan(&["data"], false), &run, &settings())
}

fn template(job: &Job) -> (PodSpec, ObjectMeta) {
    let template = &job.spec.as_ref().expect("a Job spec").template;
    (
        template.spec.clone().expect("a pod spec"),
        template.metadata.clone().unwrap_or_default(),
    )
}

/// Every pod the operator builds, named, with the level the docs promise for it.
fn operators_pods() -> Vec<(String, Job, Level)> {
    let unprivileged = Mover::Unprivileged(MoverIdentity {
        uid: 1000,
        gid: 1000,
        supplemental_groups: vec![3000],
        fs_group: Some(2000),
    });
    let default_user = Mover::default();
    let mut pods = Vec::new();
    for (mode, mover, volume_level) in [
        (
            "Unprivileged (application's user)",
            &unprivileged,
            Level::Restricted,
        ),
        (
            "Unprivileged (default user)",
            &default_user,
            Level::Restricted,
        ),
        ("Privileged", &Mover::Privileged, Level::Privileged),
    ] {
        pods.push((
            format!("backup Direct, {mode}"),
            backup(mover, &[("data", "data")], Some("node-1"), true),
            volume_level,
        ));
        pods.push((
            format!("backup Snapshot, {mode}"),
            backup(mover, &[("data", "nightly-29933370-0")], None, false),
            volume_level,
        ));
        pods.push((
            format!("backup of databases only, {mode}"),
            backup(mover, &[], None, true),
            Level::Restricted,
        ));
        // A privileged restore adds only capabilities baseline lists; it runs as root.
        let restore_level = match mover {
            Mover::Privileged => Level::Baseline,
            Mover::Unprivileged(_) => Level::Restricted,
        };
        pods.push((format!("restore, {mode}"), restore(mover), restore_level));
    }
    pods.push((
        "prune".into(),
        maintenance(MaintenanceKind::Prune),
        Level::Restricted,
    ));
    pods.push((
        "check".into(),
        maintenance(MaintenanceKind::Check),
        Level::Restricted,
    ));
    pods
}

#[test]
fn every_pod_the_operator_builds_meets_the_level_its_mode_promises() {
    let mut report =
        String::from("Pod Security Standard level met by each pod the operator builds:\n");
    let mut wrong = Vec::new();
    for (name, job, promised) in operators_pods() {
        let (pod, meta) = template(&job);
        let met = level_met(&pod, &meta);
        let broken = violations(&pod, &meta, Level::Restricted);
        report.push_str(&format!("  {name:<50} {met:?}\n"));
        for (control, found) in &broken {
            report.push_str(&format!("      {control}: {}\n", found.join("; ")));
        }
        if met != promised {
            wrong.push(format!("{name}: meets {met:?}, promised {promised:?}"));
        }
    }
    println!("{report}");
    assert!(wrong.is_empty(), "{wrong:?}\n{report}");
}

#[test]
fn an_unprivileged_backup_pod_keeps_the_applications_files_as_they_are() {
    let mover = Mover::Unprivileged(MoverIdentity {
        uid: 1000,
        gid: 1000,
        supplemental_groups: vec![],
        fs_group: Some(2000),
    });
    let (pod, _) = template(&backup(&mover, &[("data", "data")], Some("node-1"), false));
    let context = pod.security_context.expect("a pod security context");
    // An fsGroup on a pod that mounts the claim would let the kubelet chown and chmod its files.
    assert_eq!(context.fs_group, None);
    assert_eq!(context.supplemental_groups, Some(vec![2000]));
    let mounts = pod.containers[0].volume_mounts.clone().unwrap_or_default();
    let data = mounts
        .iter()
        .find(|m| m.mount_path == "/data/data")
        .expect("the claim");
    assert_eq!(data.read_only, Some(true));
}

#[test]
fn a_privileged_restore_pod_can_make_devices_and_keep_setgid_bits_and_still_meets_baseline() {
    let (pod, meta) = template(&restore(&Mover::Privileged));
    let added = added_capabilities(&pod.containers[0].security_context);
    // Device files need MKNOD; a set-group-ID bit of a group root is not in needs FSETID.
    for needed in ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "MKNOD"] {
        assert!(added.iter().any(|cap| cap == needed), "{needed}: {added:?}");
    }
    assert_eq!(
        added.len(),
        5,
        "nothing beyond what restoring needs: {added:?}"
    );
    assert_eq!(level_met(&pod, &meta), Level::Baseline);
    // The unprivileged restore adds nothing: it skips devices with a warning instead.
    let unprivileged = Mover::Unprivileged(MoverIdentity {
        uid: 1000,
        gid: 1000,
        supplemental_groups: vec![],
        fs_group: Some(2000),
    });
    let (pod, meta) = template(&restore(&unprivileged));
    assert_eq!(
        added_capabilities(&pod.containers[0].security_context),
        Vec::<String>::new()
    );
    assert_eq!(level_met(&pod, &meta), Level::Restricted);
}

/// The pod specs of a manifest file: Pods, and the templates of workloads.
fn manifest_pods(path: &std::path::Path) -> Vec<(String, PodSpec, ObjectMeta)> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let documents: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).expect("YAML");
    let mut pods = Vec::new();
    for document in documents.into_iter().filter(|d| !d.is_null()) {
        let name = format!(
            "{} {}/{}",
            path.file_name().unwrap().to_string_lossy(),
            document["kind"].as_str().unwrap_or_default(),
            document["metadata"]["name"].as_str().unwrap_or_default()
        );
        let (spec, meta) = match document["kind"].as_str() {
            Some("Pod") => (&document["spec"], &document["metadata"]),
            Some("StatefulSet" | "Deployment" | "DaemonSet" | "Job") => (
                &document["spec"]["template"]["spec"],
                &document["spec"]["template"]["metadata"],
            ),
            _ => continue,
        };
        let spec: PodSpec = serde_json::from_value(spec.clone()).expect("a pod spec");
        let meta: ObjectMeta = serde_json::from_value(meta.clone()).unwrap_or_default();
        pods.push((name, spec, meta));
    }
    pods
}

fn quickstart_example(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/examples/quickstart")
        .join(name)
}

/// docs/quickstart.md labels its namespace `baseline` and says `restricted` works too: every pod
/// it applies, and every pod the operator builds from its BackupPlan and Restore (as the user the
/// operator takes from its application pod), meets `restricted`.
#[test]
fn every_pod_of_the_quickstart_meets_restricted() {
    let mut pods = Vec::new();
    for file in ["app.yaml", "restore-target.yaml", "compare.yaml"] {
        pods.extend(manifest_pods(&quickstart_example(file)));
    }
    assert_eq!(
        pods.len(),
        4,
        "writer, postgres, postgres-restored, compare"
    );
    let read = |file: &str| std::fs::read_to_string(quickstart_example(file)).unwrap();
    let mut plan: BackupPlan = serde_saphyr::from_str(&read("backupplan.yaml")).expect("a plan");
    plan.metadata.uid = Some("0b6d1c1e-0000-4000-8000-000000000003".into());
    let mut restore: Restore = serde_saphyr::from_str(&read("restore.yaml")).expect("a Restore");
    restore.metadata.uid = Some("0b6d1c1e-0000-4000-8000-000000000004".into());
    assert!(plan.spec.mover.is_none() && restore.spec.mover.is_none());
    // The writer's user and group (app.yaml), as status.mover reports them.
    let writer = Mover::Unprivileged(MoverIdentity {
        uid: 1000,
        gid: 1000,
        supplemental_groups: vec![],
        fs_group: Some(1000),
    });
    let volumes: Vec<BackupVolumeMount> = plan
        .spec
        .volumes
        .iter()
        .map(|volume| {
            let claim = volume
                .claim_name
                .clone()
                .expect("the quickstart names its claim");
            BackupVolumeMount {
                source_claim: claim.clone(),
                mounted_claim: claim,
                excludes: vec![],
                selection: Default::default(),
                claim: None,
            }
        })
        .collect();
    let run = BackupRun {
        hooks_in_pod: true,
        trigger: RunTrigger::Schedule,
        scheduled_time: Some("2026-12-01T03:00:00Z".parse().unwrap()),
        manual_trigger: None,
        volumes,
        node_name: Some("kind-control-plane".into()),
        deadline: SignedDuration::from_mins(30),
        remove_stale_locks: true,
        mover: writer.clone(),
    };
    let (spec, meta) = template(&backup_job(&plan, &run, &settings()));
    pods.push(("the BackupPlan's backup".into(), spec, meta));
    let run = RestoreRun {
        stream_images: Default::default(),
        deadline: SignedDuration::from_hours(2),
        database_types: BTreeMap::new(),
        mover: writer,
    };
    let (spec, meta) = template(&restore_job(
        &restore,
        &ReadFrom::of(&restore, Some(&plan)).expect("a plan"),
        &run,
        &settings(),
    ));
    pods.push(("the Restore's pod".into(), spec, meta));

    let mut wrong = Vec::new();
    for (name, pod, meta) in &pods {
        for (control, found) in violations(pod, meta, Level::Restricted) {
            wrong.push(format!("{name}: {control}: {}", found.join("; ")));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
