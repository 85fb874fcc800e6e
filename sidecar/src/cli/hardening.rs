//! Process hardening at start: the memory of a backup holds the repository's master key and
//! passwords, so it must never be written to a core file or read by another process of the user.

/// Turns off core dumps (`RLIMIT_CORE` 0) and makes the process non-dumpable, which also keeps
/// `ptrace` and `/proc/PID/mem` of the same user out. Both are tried; the first failure is
/// returned for the caller to log (a hardened kernel may already forbid both).
pub fn disable_core_dumps() -> std::io::Result<()> {
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: setrlimit reads the struct passed by reference; prctl(PR_SET_DUMPABLE) takes plain
    // integers. Neither touches memory of this process.
    let limit = unsafe { libc::setrlimit(libc::RLIMIT_CORE, &no_core) };
    let limit_error = (limit != 0).then(std::io::Error::last_os_error);
    // SAFETY: as above.
    let dumpable = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    let dumpable_error = (dumpable != 0).then(std::io::Error::last_os_error);
    match limit_error.or(dumpable_error) {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_disabling_core_dumps_the_process_is_not_dumpable_and_writes_no_core() {
        disable_core_dumps().unwrap();
        let mut limit = libc::rlimit {
            rlim_cur: 1,
            rlim_max: 1,
        };
        // SAFETY: getrlimit writes into the struct passed; prctl(PR_GET_DUMPABLE) reads nothing.
        let (status, dumpable) = unsafe {
            (
                libc::getrlimit(libc::RLIMIT_CORE, &mut limit),
                libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0),
            )
        };
        assert_eq!(status, 0);
        assert_eq!((limit.rlim_cur, limit.rlim_max), (0, 0));
        assert_eq!(dumpable, 0);
    }
}
