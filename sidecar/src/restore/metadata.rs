//! Owners, modes and times of restored entries, set on what the restore opened (files and
//! directories: `fchown`, `fchmod`, `futimens` on their descriptors) or, for what is not opened
//! (symlinks, FIFOs, devices), by name in its directory's descriptor without following a symlink.

use crate::error::{Error, Result};
use crate::format::tree::{Metadata, NodeKind};
use nix::fcntl::AtFlags;
use nix::sys::stat::{FchmodatFlags, Mode, UtimensatFlags};
use nix::sys::time::TimeSpec;
use nix::unistd::{Gid, Uid};
use std::os::fd::RawFd;

fn mtime(meta: &Metadata) -> TimeSpec {
    TimeSpec::new(meta.mtime.secs, i64::from(meta.mtime.nanos))
}

fn error(what: &dyn Fn() -> String, errno: nix::Error) -> Error {
    Error::io(format!("setting metadata of {}", what()), errno.into())
}

/// An unprivileged restore may meet entries it does not own (a volume's root, as a provisioner
/// made it): their mode and times stay as they are, with a warning, and the restore goes on.
/// Anything else that fails to set, or fails as root, is an error.
enum Settled {
    Done,
    NotOwned(String),
}

fn settle(
    outcome: nix::Result<()>,
    privileged: bool,
    what: &dyn Fn() -> String,
) -> Result<Settled> {
    match outcome {
        Ok(()) => Ok(Settled::Done),
        Err(nix::Error::EPERM) if !privileged => Ok(Settled::NotOwned(format!(
            "the mode and times of {} were not restored: it belongs to another user, and an \
             unprivileged restore changes only what it owns",
            what()
        ))),
        Err(errno) => Err(error(what, errno)),
    }
}

/// Sets owner (when privileged), mode (unless `mode_set`: the entry was created with it) and
/// modification time of the open entry `fd`. Returns a warning when a set-user-ID or
/// set-group-ID bit did not hold: the kernel clears set-group-ID without an error where the
/// process lacks CAP_FSETID and the file's group.
pub fn set_on_descriptor(
    fd: RawFd,
    meta: &Metadata,
    privileged: bool,
    mode_set: bool,
    what: &dyn Fn() -> String,
) -> Result<Option<String>> {
    if privileged {
        // Before the mode: a change of owner clears set-user-ID and set-group-ID bits.
        let (uid, gid) = (Uid::from_raw(meta.uid), Gid::from_raw(meta.gid));
        nix::unistd::fchown(fd, Some(uid), Some(gid)).map_err(|e| error(what, e))?;
    }
    if !mode_set {
        let mode = Mode::from_bits_truncate(meta.mode & 0o7777);
        let changed = nix::sys::stat::fchmod(fd, mode);
        if let Settled::NotOwned(warning) = settle(changed, privileged, what)? {
            return Ok(Some(warning));
        }
    }
    let timed = nix::sys::stat::futimens(fd, &TimeSpec::UTIME_OMIT, &mtime(meta));
    if let Settled::NotOwned(warning) = settle(timed, privileged, what)? {
        return Ok(Some(warning));
    }
    if meta.mode & 0o6000 == 0 {
        return Ok(None);
    }
    let has = nix::sys::stat::fstat(fd)
        .map_err(|e| error(what, e))?
        .st_mode;
    Ok(special_bits_lost(what, meta.mode, has))
}

/// Sets owner (when privileged), mode (not of a symlink) and modification time of the entry
/// `name` in the directory `dir`, never following a symlink: an entry swapped for one has the
/// symlink changed, not what it points to.
pub fn set_by_name(
    dir: RawFd,
    name: &[u8],
    kind: &NodeKind,
    meta: &Metadata,
    privileged: bool,
    what: &dyn Fn() -> String,
) -> Result<Option<String>> {
    if privileged {
        let (uid, gid) = (Uid::from_raw(meta.uid), Gid::from_raw(meta.gid));
        nix::unistd::fchownat(
            Some(dir),
            name,
            Some(uid),
            Some(gid),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(|e| error(what, e))?;
    }
    let is_symlink = matches!(kind, NodeKind::Symlink { .. });
    if !is_symlink {
        let mode = Mode::from_bits_truncate(meta.mode & 0o7777);
        let changed =
            nix::sys::stat::fchmodat(Some(dir), name, mode, FchmodatFlags::NoFollowSymlink);
        if let Settled::NotOwned(warning) = settle(changed, privileged, what)? {
            return Ok(Some(warning));
        }
    }
    let timed = nix::sys::stat::utimensat(
        Some(dir),
        name,
        &TimeSpec::UTIME_OMIT,
        &mtime(meta),
        UtimensatFlags::NoFollowSymlink,
    );
    if let Settled::NotOwned(warning) = settle(timed, privileged, what)? {
        return Ok(Some(warning));
    }
    if is_symlink || meta.mode & 0o6000 == 0 {
        return Ok(None);
    }
    let has = nix::sys::stat::fstatat(Some(dir), name, AtFlags::AT_SYMLINK_NOFOLLOW)
        .map_err(|e| error(what, e))?
        .st_mode;
    Ok(special_bits_lost(what, meta.mode, has))
}

/// Whether the open entry `fd` belongs to this process's user.
pub fn owned_by_us(fd: RawFd, what: &dyn Fn() -> String) -> Result<bool> {
    let stat = nix::sys::stat::fstat(fd).map_err(|e| error(what, e))?;
    Ok(stat.st_uid == nix::unistd::geteuid().as_raw())
}

/// A warning when the mode `has` lacks set-user-ID or set-group-ID bits `mode` asks for.
fn special_bits_lost(what: &dyn Fn() -> String, mode: u32, has: u32) -> Option<String> {
    let (wanted, has) = (mode & 0o6000, has & 0o6000);
    (has != wanted).then(|| {
        format!(
            "the set-user-ID or set-group-ID bit of {} was not restored (mode {:04o} asked, {:04o} set): it needs root with CAP_FSETID",
            what(),
            mode & 0o7777,
            has | (mode & 0o1777)
        )
    })
}
