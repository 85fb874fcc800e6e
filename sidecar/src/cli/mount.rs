//! `mount`: the repository's snapshots as a read-only file system until SIGHUP, SIGINT or SIGTERM
//! (then unmounted cleanly, see [`super::stop`]) or an unmount from outside.

use super::Outcome;
use anyhow::{Context, Result};
use clap::Args;
use neverwiped::mount::layout::SnapshotSelection;
use neverwiped::mount::{self, MountOptions};
use neverwiped::repository::IndexedRepository;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct MountArgs {
    /// An existing empty folder to mount at. Below it: snapshots/TIME/, snapshots/latest,
    /// hosts/HOST/TIME/, tags/TAG/TIME/ and ids/ID/, as restic's mount.
    pub mountpoint: PathBuf,
    /// Only snapshots of this host (repeatable).
    #[arg(long = "host")]
    pub hosts: Vec<String>,
    /// Only snapshots with this tag (repeatable: with all of them).
    #[arg(long = "tag")]
    pub tags: Vec<String>,
    /// Memory for the file contents and folders read (suffixes K, M, G) [default: 64M].
    #[arg(long, value_name = "SIZE", value_parser = parse_cache_size)]
    pub cache: Option<u64>,
    /// Let other users use the mount too (their access still follows the files' modes); a user
    /// other than root needs user_allow_other in /etc/fuse.conf.
    #[arg(long)]
    pub allow_other: bool,
    /// Mount even on a folder that is not empty, hiding what it holds until unmounted.
    #[arg(long)]
    pub allow_non_empty: bool,
}

/// Mounts, says where, and serves until stopped.
pub async fn mount(repo: IndexedRepository, args: &MountArgs, quiet: bool) -> Result<Outcome> {
    let options = MountOptions {
        selection: SnapshotSelection {
            hosts: args.hosts.clone(),
            tags: args.tags.clone(),
        },
        cache_bytes: args.cache.unwrap_or(mount::DEFAULT_CACHE_BYTES),
        allow_other: args.allow_other,
        allow_non_empty: args.allow_non_empty,
    };
    let mut handle = mount::serve(repo, &args.mountpoint, options)
        .await
        .with_context(|| format!("cannot mount at {}", args.mountpoint.display()))?;
    if !quiet {
        // Standard error: standard output stays for what a script reads.
        eprintln!(
            "serving {} snapshot(s) at {}; stop with Ctrl-C (or SIGTERM, or umount {})",
            handle.snapshot_count(),
            handle.mountpoint().display(),
            handle.mountpoint().display()
        );
    }
    let stopped_by = tokio::select! {
        signal = neverwiped::stopping::requested() => Some(signal),
        () = handle.unmounted() => None,
    };
    let mountpoint = handle.mountpoint().to_path_buf();
    match stopped_by {
        Some(signal) => tracing::info!("{signal}: unmounting {}", mountpoint.display()),
        None => tracing::info!("{} was unmounted", mountpoint.display()),
    }
    handle
        .unmount()
        .await
        .with_context(|| format!("cannot unmount {}", mountpoint.display()))?;
    Ok(Outcome::default())
}

/// A cache size: bytes with an optional suffix K, M or G (powers of 1024), 1M to 16G.
fn parse_cache_size(text: &str) -> Result<u64, String> {
    const MIB: u64 = 1024 * 1024;
    let text = text.trim();
    let (number, factor) = match text.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&text[..text.len() - 1], 1024),
        Some('M') => (&text[..text.len() - 1], MIB),
        Some('G') => (&text[..text.len() - 1], 1024 * MIB),
        _ => (text, 1),
    };
    match number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(factor))
    {
        Some(bytes) if (MIB..=16 * 1024 * MIB).contains(&bytes) => Ok(bytes),
        Some(_) => Err(format!("{text:?} is out of range: give 1M to 16G")),
        None => Err(format!("{text:?} is not a size such as 64M or 1G")),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_cache_size;

    #[test]
    fn cache_sizes_take_binary_suffixes_and_a_range() {
        assert_eq!(parse_cache_size("128M"), Ok(128 * 1024 * 1024));
        assert_eq!(parse_cache_size("1g"), Ok(1024 * 1024 * 1024));
        assert_eq!(parse_cache_size("2048K"), Ok(2 * 1024 * 1024));
        assert!(parse_cache_size("512K").is_err());
        assert!(parse_cache_size("17G").is_err());
        assert!(parse_cache_size("lots").is_err());
    }
}
