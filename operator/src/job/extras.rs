//! The containers beside the sidecar: a plan's streams and hooks, a Restore's streams. Each runs
//! the user's command through the launcher (the sidecar's static binary, copied by the init
//! container `tools`), and talks to the sidecar through the `exchange` emptyDir that every
//! container mounts (`neverwiped_contract::streams`). Nothing is exec'd into application pods.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, SecretKeySelector, Volume, VolumeMount,
};
use neverwiped_contract::streams::{
    HookArg, HookPhase, LaunchArgs, LaunchKind, OnError, Slot, StreamArg, EXCHANGE_DIR, TOOLS_DIR,
};

use super::pod::{PodBuilder, TOOLS_VOLUME};
use crate::api::{BackupStream, Hook, HookOnError, RestoreStream, StreamEnvVar, StreamSpec};

const EXCHANGE_VOLUME: &str = "exchange";
/// What the pod gets to stop beyond its post hooks' time limits.
const GRACE_MARGIN_SECONDS: i64 = 30;

/// A claim a stream or hook container mounts.
struct ClaimMount<'a> {
    claim: &'a str,
    path: &'a str,
    read_only: bool,
}

/// One container beside the sidecar, before the pod gives it its user.
struct Extra<'a> {
    name: String,
    launch: LaunchArgs,
    image: &'a str,
    env: &'a [StreamEnvVar],
    mounts: Vec<ClaimMount<'a>>,
}

/// A plan's streams, as backup containers and the sidecar's `--stream` arguments.
pub(super) fn backup_streams(pod: &mut PodBuilder, streams: &[BackupStream]) -> Vec<StreamArg> {
    let each = streams.iter();
    each.map(|s| add_stream(pod, LaunchKind::Stream, s, &s.image, s.allow_empty))
        .collect()
}

/// A Restore's streams, as containers and the sidecar's `--stream` arguments; `images` gives
/// each stream's image (its own or its plan's; one without is left out: the Restore waits).
pub(super) fn restore_streams(
    pod: &mut PodBuilder,
    streams: &[RestoreStream],
    images: &BTreeMap<String, String>,
) -> Vec<StreamArg> {
    let with_image = streams
        .iter()
        .filter_map(|s| Some((s, images.get(&s.name)?)));
    with_image
        .map(|(s, image)| add_stream(pod, LaunchKind::RestoreStream, s, image, false))
        .collect()
}

/// One stream's container `stream-NAME`, and the sidecar's `--stream` argument for it.
fn add_stream(
    pod: &mut PodBuilder,
    kind: LaunchKind,
    stream: &impl StreamSpec,
    image: &str,
    allow_empty: bool,
) -> StreamArg {
    let slot = Slot::new(EXCHANGE_DIR, "stream", stream.name());
    let mounts = stream
        .claim_mounts()
        .into_iter()
        .map(|(m, read_only)| ClaimMount {
            claim: &m.claim_name,
            path: &m.mount_path,
            read_only,
        });
    add(
        pod,
        Extra {
            name: format!("stream-{}", stream.name()),
            launch: launch(kind, slot.clone(), stream.command(), None),
            image,
            env: stream.env(),
            mounts: mounts.collect(),
        },
    );
    StreamArg {
        name: stream.name().to_owned(),
        slot,
        allow_empty,
    }
}

/// One phase's hooks, as containers `hook-PHASE-NAME` and the sidecar's `--hook` arguments; a
/// hook without an image runs `sidecar_image`. Post hooks make the pod's grace period long
/// enough for them all, so they still run while the pod stops at its deadline.
pub(super) fn hooks(
    pod: &mut PodBuilder,
    phase: HookPhase,
    hooks: &[Hook],
    sidecar_image: &str,
) -> Vec<HookArg> {
    let mut args = Vec::new();
    for hook in hooks {
        let slot = Slot::new(EXCHANGE_DIR, phase.arg(), &hook.name);
        let timeout = u64::try_from(hook.timeout_seconds).unwrap_or(1).max(1);
        add(
            pod,
            Extra {
                name: format!("hook-{}-{}", phase.arg(), hook.name),
                launch: launch(LaunchKind::Hook, slot.clone(), &hook.command, Some(timeout)),
                image: hook.image.as_deref().unwrap_or(sidecar_image),
                env: &hook.env,
                mounts: Vec::new(),
            },
        );
        args.push(HookArg {
            phase,
            name: hook.name.clone(),
            slot,
            timeout_secs: timeout,
            on_error: match hook.on_error {
                HookOnError::Fail => OnError::Fail,
                HookOnError::Continue => OnError::Continue,
            },
        });
    }
    if phase == HookPhase::Post && !hooks.is_empty() {
        let total: i64 = hooks.iter().map(|h| h.timeout_seconds.max(1)).sum();
        pod.set_grace_seconds(total + GRACE_MARGIN_SECONDS);
    }
    args
}

fn launch(
    kind: LaunchKind,
    slot: Slot,
    command: &[String],
    timeout_secs: Option<u64>,
) -> LaunchArgs {
    LaunchArgs {
        kind,
        slot,
        timeout_secs,
        command: command.to_vec(),
    }
}

/// Adds `extra` to the pod: the shared folders with the first one, then its container with its
/// own `/tmp` (the root is read-only) and its claims.
fn add(pod: &mut PodBuilder, extra: Extra<'_>) {
    let index = pod.extras_count();
    if index == 0 {
        // The sidecar mounts the exchange folder too; the launcher's folder only the others.
        pod.mount_empty_dir(EXCHANGE_VOLUME, EXCHANGE_DIR);
        pod.add_volume(empty_dir(TOOLS_VOLUME));
    }
    let tmp = format!("extra-{index}-tmp");
    pod.add_volume(empty_dir(&tmp));
    let mut mounts = vec![
        mount(EXCHANGE_VOLUME, EXCHANGE_DIR, false),
        mount(TOOLS_VOLUME, TOOLS_DIR, true),
        mount(&tmp, "/tmp", false),
    ];
    for (at, claim) in extra.mounts.iter().enumerate() {
        let fallback = format!("extra-{index}-claim-{at}");
        let volume = pod.claim_volume(claim.claim, claim.read_only, &fallback);
        mounts.push(mount(&volume, claim.path, claim.read_only));
    }
    pod.add_extra(Container {
        name: extra.name,
        image: Some(extra.image.to_owned()),
        command: Some(extra.launch.command()),
        env: (!extra.env.is_empty()).then(|| extra.env.iter().map(env_var).collect()),
        volume_mounts: Some(mounts),
        ..Container::default()
    });
}

/// A variable of a stream or hook: its value, or its Secret's key (never copied into the spec).
fn env_var(variable: &StreamEnvVar) -> EnvVar {
    let value_from = variable.value_from.as_ref().map(|source| EnvVarSource {
        secret_key_ref: Some(SecretKeySelector {
            name: source.secret_key_ref.name.clone(),
            key: source.secret_key_ref.key.clone(),
            optional: Some(false),
        }),
        ..EnvVarSource::default()
    });
    EnvVar {
        name: variable.name.clone(),
        value: variable.value.clone().filter(|_| value_from.is_none()),
        value_from,
    }
}

pub(super) fn mount(volume: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: volume.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

fn empty_dir(name: &str) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }
}
