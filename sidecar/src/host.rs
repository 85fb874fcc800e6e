//! Who and where we run, for snapshots, keys and locks.

/// The machine's host name, or "unknown".
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .unwrap_or_else(|| "unknown".into())
}

/// The current user's name, or the numeric uid when it has none.
pub fn username() -> String {
    let uid = nix::unistd::getuid();
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(user)) => user.name,
        _ => uid.to_string(),
    }
}
