//! Where a command's repository comes from: a BackupPlan of the cluster, or the command line
//! (`--repository URL --password-secret NAME`), for the day the plan is gone; and the origin
//! (`NAMESPACE/PLAN`) whose snapshots it means.

use anyhow::{bail, Result};
use neverwiped_api::{CredentialsSecretRef, Repository, SecretKeyRef};

use crate::args::RepositoryArgs;

/// The Secret key of the repository password when `--password-secret` names none.
pub const PASSWORD_KEY: &str = "password";
/// The Secret key of the CA certificate when `--ca-secret` names none.
pub const CA_KEY: &str = "ca.crt";

/// The repository a command reads, and who named it.
#[derive(Debug, Clone)]
pub enum Source {
    /// The BackupPlan `name` in the command's namespace: its repository and Secrets, or with
    /// `copy` those of that entry of its `spec.copies`.
    Plan { name: String, copy: Option<String> },
    /// The repository given on the command line; its Secrets are in the command's namespace.
    CommandLine(Repository),
}

impl Source {
    /// The plan named by `plan`, or, with `--repository`, that repository (and `plan`, if any,
    /// is then only the origin of the snapshots).
    pub fn from_args(plan: Option<&str>, repository: &RepositoryArgs) -> Result<Source> {
        match (repository.to_repository()?, plan) {
            (Some(named), _) => Ok(Source::CommandLine(named)),
            (None, Some(plan)) => Ok(Source::Plan {
                name: plan.to_owned(),
                copy: repository.copy.clone(),
            }),
            (None, None) => bail!(
                "name a BackupPlan, or its repository with --repository URL --password-secret NAME"
            ),
        }
    }

    /// What names the repository, for messages: `BackupPlan shop/nightly` or `--repository`.
    pub fn describe(&self, namespace: &str) -> String {
        match self {
            Source::Plan { name, copy: None } => format!("BackupPlan {namespace}/{name}"),
            Source::Plan {
                name,
                copy: Some(copy),
            } => format!("copy {copy:?} of BackupPlan {namespace}/{name}"),
            Source::CommandLine(_) => "--repository".to_owned(),
        }
    }

    /// The fields that name the password, login and CA Secrets, for messages.
    pub fn secret_fields(&self) -> SecretFields {
        match self {
            Source::Plan { copy: Some(_), .. } => SecretFields {
                password: "the copy's repository.passwordSecretRef (in the plan's spec.copies)",
                login: "the copy's repository.credentialsSecretRef (in the plan's spec.copies)",
                ca: "the copy's repository.caSecretRef (in the plan's spec.copies)",
            },
            Source::Plan { copy: None, .. } => SecretFields {
                password: "the plan's spec.repository.passwordSecretRef",
                login: "the plan's spec.repository.credentialsSecretRef",
                ca: "the plan's spec.repository.caSecretRef",
            },
            Source::CommandLine(_) => SecretFields {
                password: "--password-secret",
                login: "--login-secret",
                ca: "--ca-secret",
            },
        }
    }
}

/// The names of the fields (or flags) that name a repository's Secrets.
#[derive(Debug, Clone, Copy)]
pub struct SecretFields {
    pub password: &'static str,
    pub login: &'static str,
    pub ca: &'static str,
}

impl RepositoryArgs {
    /// The repository the flags name, in the shape a plan's spec has; `None` without
    /// `--repository`.
    pub fn to_repository(&self) -> Result<Option<Repository>> {
        let Some(url) = &self.url else {
            return Ok(None);
        };
        let Some(password) = &self.password_secret else {
            bail!("--repository needs --password-secret NAME[:KEY]: the Secret with the repository password");
        };
        Ok(Some(Repository {
            url: url.clone(),
            password_secret_ref: key_ref(password, PASSWORD_KEY),
            credentials_secret_ref: self.login_secret.as_ref().map(|name| CredentialsSecretRef {
                name: name.clone(),
                username_key: "username".into(),
                password_key: "password".into(),
            }),
            ca_secret_ref: self.ca_secret.as_ref().map(|text| key_ref(text, CA_KEY)),
        }))
    }
}

/// `NAME` or `NAME:KEY`.
fn key_ref(text: &str, default_key: &str) -> SecretKeyRef {
    let (name, key) = text.split_once(':').unwrap_or((text, default_key));
    SecretKeyRef {
        name: name.to_owned(),
        key: key.to_owned(),
    }
}

/// The host a plan's backups are written under, `NAMESPACE/PLAN`, from `plan` as given: `PLAN`
/// (of `namespace`) or already `NAMESPACE/PLAN` (the origin of snapshots whose plan may be gone,
/// or in another namespace or cluster).
pub fn origin(namespace: &str, plan: &str) -> Result<String> {
    let (namespace, name) = plan.split_once('/').unwrap_or((namespace, plan));
    let label = |text: &str| {
        !text.is_empty()
            && text.len() <= 63
            && text
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && !text.starts_with(['-', '.'])
            && !text.ends_with(['-', '.'])
    };
    if !label(namespace) || !label(name) || name.contains('/') {
        bail!(
            "{:?} is not a plan's origin: give PLAN or NAMESPACE/PLAN, as the plan's snapshots \
             are listed (kubectl neverwiped snapshots --repository URL lists them all)",
            neverwiped::text::escaped(plan)
        );
    }
    Ok(format!("{namespace}/{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(url: Option<&str>, password: Option<&str>) -> RepositoryArgs {
        RepositoryArgs {
            url: url.map(str::to_owned),
            password_secret: password.map(str::to_owned),
            login_secret: Some("gate-login".into()),
            ca_secret: Some("gate-ca".into()),
            copy: None,
        }
    }

    #[test]
    fn the_command_line_names_a_repository_as_a_plan_would() {
        let named = args(Some("https://gate.example/shop"), Some("repo:pw"))
            .to_repository()
            .unwrap()
            .unwrap();
        assert_eq!(named.password_secret_ref.name, "repo");
        assert_eq!(named.password_secret_ref.key, "pw");
        assert_eq!(named.credentials_secret_ref.unwrap().name, "gate-login");
        let ca = named.ca_secret_ref.unwrap();
        assert_eq!((ca.name.as_str(), ca.key.as_str()), ("gate-ca", CA_KEY));
        let plain = args(Some("https://gate.example/shop"), Some("repo"));
        let plain = plain.to_repository().unwrap().unwrap();
        assert_eq!(plain.password_secret_ref.key, PASSWORD_KEY);
        let missing = args(Some("https://gate.example/shop"), None).to_repository();
        assert!(missing
            .unwrap_err()
            .to_string()
            .contains("--password-secret"));
        assert!(args(None, None).to_repository().unwrap().is_none());
    }

    #[test]
    fn a_source_is_the_plan_unless_a_repository_is_given() {
        let none = args(None, None);
        assert!(
            matches!(Source::from_args(Some("nightly"), &none).unwrap(), Source::Plan { name, copy: None } if name == "nightly")
        );
        assert!(Source::from_args(None, &none).is_err());
        let copy = RepositoryArgs {
            copy: Some("offsite".into()),
            ..none.clone()
        };
        assert!(matches!(
            Source::from_args(Some("nightly"), &copy).unwrap(),
            Source::Plan { name, copy: Some(c) } if name == "nightly" && c == "offsite"
        ));
        let named = args(Some("https://gate.example/shop"), Some("repo"));
        assert!(matches!(
            Source::from_args(Some("shop/nightly"), &named).unwrap(),
            Source::CommandLine(_)
        ));
    }

    #[test]
    fn an_origin_is_namespace_and_plan() {
        assert_eq!(origin("shop", "nightly").unwrap(), "shop/nightly");
        assert_eq!(origin("other", "shop/nightly").unwrap(), "shop/nightly");
        for bad in [
            "",
            "a/b/c",
            "Shop/nightly",
            "shop/",
            "/nightly",
            "-x",
            "sh\u{1b}op/x",
        ] {
            assert!(origin("shop", bad).is_err(), "{bad:?}");
        }
    }
}
