//! Secrets come from files or the environment, never from the command line.

use anyhow::{bail, Context, Result};
use neverwiped_contract::cli::env;
use std::path::Path;
use zeroize::Zeroizing;

/// Reads a secret file, dropping one trailing newline (as `echo pw > file` writes it). The bytes
/// are wiped from memory when dropped.
pub fn read_secret_file(path: &Path) -> Result<Zeroizing<Vec<u8>>> {
    let mut bytes = Zeroizing::new(
        std::fs::read(path)
            .with_context(|| format!("cannot read the secret file {}", path.display()))?,
    );
    if bytes.ends_with(b"\n") {
        bytes.pop();
        if bytes.ends_with(b"\r") {
            bytes.pop();
        }
    }
    Ok(bytes)
}

/// The repository password: `--password-file`/`NEVERWIPED_PASSWORD_FILE`, else `NEVERWIPED_PASSWORD`.
pub fn repository_password(password_file: Option<&Path>) -> Result<Zeroizing<Vec<u8>>> {
    let password = match password_file {
        Some(path) => read_secret_file(path)?,
        None => match std::env::var_os(env::PASSWORD) {
            Some(value) => Zeroizing::new(std::os::unix::ffi::OsStringExt::into_vec(value)),
            None => bail!("no repository password: use --password-file, NEVERWIPED_PASSWORD_FILE or NEVERWIPED_PASSWORD"),
        },
    };
    if password.is_empty() {
        bail!("the repository password is empty");
    }
    Ok(password)
}

/// The gate's basic-auth credentials from `NEVERWIPED_GATE_USERNAME` and
/// `NEVERWIPED_GATE_PASSWORD` or `NEVERWIPED_GATE_PASSWORD_FILE`.
pub fn gate_credentials() -> Result<(Option<String>, Option<String>)> {
    let username = std::env::var(env::GATE_USERNAME)
        .ok()
        .filter(|u| !u.is_empty());
    let password = match std::env::var_os(env::GATE_PASSWORD_FILE) {
        Some(path) => Some(
            String::from_utf8(read_secret_file(Path::new(&path))?.to_vec())
                .context("the gate password file is not UTF-8")?,
        ),
        None => std::env::var(env::GATE_PASSWORD).ok(),
    };
    if password.is_some() && username.is_none() {
        bail!("a gate password is set but NEVERWIPED_GATE_USERNAME is not");
    }
    Ok((username, password))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compiles only while the type wipes its bytes when dropped.
    fn wiped_on_drop<T: zeroize::ZeroizeOnDrop>(value: T) -> T {
        value
    }

    #[test]
    fn secret_files_lose_one_trailing_newline_and_are_wiped_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, b"pass word\r\n").unwrap();
        let secret = wiped_on_drop(read_secret_file(&path).unwrap());
        assert_eq!(secret.as_slice(), b"pass word");
        let keys = wiped_on_drop(neverwiped::crypto::MasterKey::generate().derive());
        drop(keys);
    }
}
