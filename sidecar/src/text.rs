//! Text for people, shared by the engine's two front ends (the sidecar's CLI and the kubectl
//! plugin): sizes in binary units, an error's causes on one line, and names and messages made
//! safe for a terminal (see [`neverwiped_contract::text`], which the operator uses too).

use std::error::Error;

pub use neverwiped_contract::text::{escaped, escaped_bytes, escaped_status, quoted};

/// Bytes in binary units: `512 B`, `1.5 KiB`, `553.0 MiB`.
pub fn bytes(count: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = count as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{count} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// A mode as `ls -l` shows it: the type letter (`-`, `d`, `l`, `p`, `c`, `b`), then `rwx` for
/// owner, group and others, with set-user-ID, set-group-ID and sticky as `s`/`S` and `t`/`T`.
pub fn permissions(type_letter: char, mode: u32) -> String {
    let mut shown = String::with_capacity(10);
    shown.push(type_letter);
    let special = [(0o4000, 's', 'S'), (0o2000, 's', 'S'), (0o1000, 't', 'T')];
    for (class, (special_bit, with_x, without_x)) in special.into_iter().enumerate() {
        let bits = (mode >> (6 - 3 * class)) & 0o7;
        shown.push(if bits & 0o4 != 0 { 'r' } else { '-' });
        shown.push(if bits & 0o2 != 0 { 'w' } else { '-' });
        let executable = bits & 0o1 != 0;
        shown.push(match (mode & special_bit != 0, executable) {
            (true, true) => with_x,
            (true, false) => without_x,
            (false, true) => 'x',
            (false, false) => '-',
        });
    }
    shown
}

/// An error and its causes on one line, each said once: an error whose own message already
/// quotes its cause (e.g. a dump tool's output) does not repeat it. Takes the chain as
/// `anyhow::Error::chain` gives it, or any other walk of `source()`.
pub fn describe_chain<'a>(chain: impl IntoIterator<Item = &'a (dyn Error + 'static)>) -> String {
    let mut message = String::new();
    for cause in chain {
        let text = cause.to_string();
        if message.contains(&text) {
            continue;
        }
        if !message.is_empty() {
            message.push_str(": ");
        }
        message.push_str(&text);
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_use_the_largest_binary_unit_below_1024() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
        assert_eq!(bytes(u64::MAX), "16384.0 PiB");
    }

    #[test]
    fn modes_read_as_ls_shows_them() {
        assert_eq!(permissions('-', 0o644), "-rw-r--r--");
        assert_eq!(permissions('d', 0o1777), "drwxrwxrwt");
        assert_eq!(permissions('-', 0o4755), "-rwsr-xr-x");
        assert_eq!(permissions('-', 0o2640), "-rw-r-S---");
        assert_eq!(permissions('d', 0o1770), "drwxrwx--T");
        assert_eq!(permissions('l', 0o777), "lrwxrwxrwx");
    }

    #[derive(Debug)]
    struct Failure {
        message: &'static str,
        cause: Option<Box<Failure>>,
    }

    impl std::fmt::Display for Failure {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.message)
        }
    }

    impl Error for Failure {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.cause
                .as_deref()
                .map(|cause| cause as &(dyn Error + 'static))
        }
    }

    fn chain<'a>(
        error: &'a (dyn Error + 'static),
    ) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
        std::iter::successors(Some(error), |&error| error.source())
    }

    #[test]
    fn a_chain_is_joined_and_a_quoted_cause_said_once() {
        let error = Failure {
            message: "dump failed: pg_dump: connection refused",
            cause: Some(Box::new(Failure {
                message: "pg_dump: connection refused",
                cause: Some(Box::new(Failure {
                    message: "exit status 1",
                    cause: None,
                })),
            })),
        };
        assert_eq!(
            describe_chain(chain(&error)),
            "dump failed: pg_dump: connection refused: exit status 1"
        );
    }
}
