//! Secrets come from files or the environment, never from the command line.

use anyhow::{bail, Result};
use neverwiped::open::{GateLogin, SecretSource};
use neverwiped_contract::cli::env;
use std::path::Path;
use zeroize::Zeroizing;

/// Reads a secret file, dropping one trailing newline (as `echo pw > file` writes it). The bytes
/// are wiped from memory when dropped.
pub fn read_secret_file(path: &Path) -> Result<Zeroizing<Vec<u8>>> {
    let what = format!("the secret file {}", path.display());
    Ok(SecretSource::File(path.to_owned()).read(&what)?)
}

/// Where the repository password is: `--password-file`/`NEVERWIPED_PASSWORD_FILE`, else
/// `NEVERWIPED_PASSWORD`.
pub fn repository_password_source(password_file: Option<&Path>) -> Result<SecretSource> {
    Ok(match password_file {
        Some(path) => SecretSource::File(path.to_owned()),
        None if std::env::var_os(env::PASSWORD).is_some() => {
            SecretSource::Env(env::PASSWORD.into())
        }
        None => bail!("no repository password: use --password-file, NEVERWIPED_PASSWORD_FILE or NEVERWIPED_PASSWORD"),
    })
}

/// Where the password of the repository `copy` reads from is: `--from-password-file` /
/// `NEVERWIPED_FROM_PASSWORD_FILE`, else `NEVERWIPED_FROM_PASSWORD`.
pub fn source_password_source(password_file: Option<&Path>) -> Result<SecretSource> {
    Ok(match password_file {
        Some(path) => SecretSource::File(path.to_owned()),
        None if std::env::var_os(env::FROM_PASSWORD).is_some() => {
            SecretSource::Env(env::FROM_PASSWORD.into())
        }
        None => bail!("no password for --from-repo: use --from-password-file, NEVERWIPED_FROM_PASSWORD_FILE or NEVERWIPED_FROM_PASSWORD"),
    })
}

/// The repository password, read from where [`repository_password_source`] says.
pub fn repository_password(password_file: Option<&Path>) -> Result<Zeroizing<Vec<u8>>> {
    let password = repository_password_source(password_file)?.read("the repository password")?;
    if password.is_empty() {
        bail!("the repository password is empty");
    }
    Ok(password)
}

/// The gate's basic-auth login: `NEVERWIPED_GATE_USERNAME`, and the password in
/// `NEVERWIPED_GATE_PASSWORD_FILE` or `NEVERWIPED_GATE_PASSWORD`.
pub fn gate_login() -> GateLogin {
    gate_login_from(
        env::GATE_USERNAME,
        env::GATE_PASSWORD_FILE,
        env::GATE_PASSWORD,
    )
}

/// The login of the gate `copy` reads from: `NEVERWIPED_FROM_GATE_USERNAME`, and the password in
/// `NEVERWIPED_FROM_GATE_PASSWORD_FILE` or `NEVERWIPED_FROM_GATE_PASSWORD`.
pub fn source_gate_login() -> GateLogin {
    gate_login_from(
        env::FROM_GATE_USERNAME,
        env::FROM_GATE_PASSWORD_FILE,
        env::FROM_GATE_PASSWORD,
    )
}

/// A gate login from the variables named: a user name, a password file, a password.
fn gate_login_from(username: &str, password_file: &str, password: &str) -> GateLogin {
    let password = match std::env::var_os(password_file) {
        Some(path) => Some(SecretSource::File(path.into())),
        None => std::env::var_os(password).map(|_| SecretSource::Env(password.into())),
    };
    GateLogin {
        username: std::env::var(username).ok(),
        password,
    }
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
