//! `kubectl neverwiped mount PLAN MOUNTPOINT`: the plan's own snapshots as a read-only FUSE file
//! system (the engine's `neverwiped::mount`, restic's layout), served until interrupted.

use std::path::Path;

use anyhow::{Context, Result};
use neverwiped::mount::layout::SnapshotSelection;
use neverwiped::mount::{self, MountOptions};
use neverwiped::repository::IndexedRepository;

/// Mounts the snapshots of `host` (the plan's) at `mountpoint` until SIGINT or SIGTERM, or until
/// the file system is unmounted from outside.
pub async fn serve(repo: IndexedRepository, host: &str, mountpoint: &Path) -> Result<()> {
    let options = MountOptions {
        selection: SnapshotSelection {
            hosts: vec![host.to_owned()],
            tags: Vec::new(),
        },
        ..MountOptions::default()
    };
    let mut handle = mount::serve(repo, mountpoint, options)
        .await
        .with_context(|| format!("cannot mount at {}", mountpoint.display()))?;
    eprintln!(
        "serving {} snapshot(s) of {host} at {}; stop with Ctrl-C (or umount {})",
        handle.snapshot_count(),
        handle.mountpoint().display(),
        handle.mountpoint().display()
    );
    tokio::select! {
        stopped = stop_signal() => stopped?,
        () = handle.unmounted() => {}
    }
    handle
        .unmount()
        .await
        .with_context(|| format!("cannot unmount {}", mountpoint.display()))
}

async fn stop_signal() -> Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate()).context("cannot watch for SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot watch for SIGINT")?;
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    Ok(())
}
