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

/// The host's boot id (`/proc/sys/kernel/random/boot_id`), which changes at every boot.
pub fn boot_id() -> Option<String> {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(text.trim().to_owned()).filter(|id| !id.is_empty())
}

/// When the process `pid` started, in clock ticks after boot (field 22 of `/proc/PID/stat`).
pub fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_start_ticks(&stat)
}

/// The start time in a `/proc/PID/stat` line. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted after its last `)`: field 22 is the 20th after it.
fn parse_start_ticks(stat: &str) -> Option<u64> {
    let (_, after_name) = stat.rsplit_once(')')?;
    after_name.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_is_field_22_even_after_a_name_with_spaces_and_parentheses() {
        let stat = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 987654 \
                    12345678 300 18446744073709551615";
        assert_eq!(parse_start_ticks(stat), Some(987_654));
        assert_eq!(parse_start_ticks("4242 (cut short"), None);
        let ours = start_ticks(std::process::id()).expect("our own /proc/PID/stat");
        assert!(ours > 0);
    }
}
