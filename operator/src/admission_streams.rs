//! Admission of streams and hooks: their names (DNS labels, each once per list), environment
//! variables (C identifiers the operator does not use itself; a value or a Secret's key, whose
//! Secret is checked as every other), and claim mounts (a claim's name, an absolute path outside
//! the pod's own folders). Their images are the policy's, checked with the namespace in
//! [`crate::images`].

use super::{path_fault, Findings, NameShape, Refusal};
use crate::api::{Hooks, StreamEnvVar, StreamSpec, RESERVED_ENV_PREFIX, RESERVED_MOUNT_ROOT};

impl Findings {
    /// A plan's or a Restore's `spec.streams`.
    pub(super) fn streams(&mut self, streams: &[impl StreamSpec]) {
        let names: Vec<&str> = streams.iter().map(|s| s.name()).collect();
        self.entry_names("spec.streams", &names);
        for (index, stream) in streams.iter().enumerate() {
            let field = format!("spec.streams[{index}]");
            self.env(&field, stream.env());
            for (at, (mount, _)) in stream.claim_mounts().into_iter().enumerate() {
                let field = format!("{field}.volumeMounts[{at}]");
                self.mount(&field, &mount.claim_name, &mount.mount_path);
            }
        }
    }

    /// A plan's `spec.hooks`.
    pub(super) fn hooks(&mut self, hooks: &Hooks) {
        for (phase, list) in [("pre", &hooks.pre), ("post", &hooks.post)] {
            let field = format!("spec.hooks.{phase}");
            let names: Vec<&str> = list.iter().map(|h| h.name.as_str()).collect();
            self.entry_names(&field, &names);
            for (index, hook) in list.iter().enumerate() {
                self.env(&format!("{field}[{index}]"), &hook.env);
            }
        }
    }

    /// Each name a DNS label of at most 48 characters (its container is `hook-post-NAME`), once.
    fn entry_names(&mut self, field: &str, names: &[&str]) {
        for (index, name) in names.iter().enumerate() {
            let field = format!("{field}[{index}].name");
            if name.len() > crate::api::MAX_ENTRY_NAME_LEN as usize {
                self.refusals.push(Refusal::InvalidName {
                    field: field.clone(),
                    value: (*name).to_owned(),
                    shape: NameShape::DnsLabel,
                });
            }
            self.name(&field, name, NameShape::DnsLabel);
            if names[..index].contains(name) {
                self.refusals.push(Refusal::DuplicateEntryName {
                    field,
                    name: (*name).to_owned(),
                });
            }
        }
    }

    fn env(&mut self, field: &str, env: &[StreamEnvVar]) {
        for (index, variable) in env.iter().enumerate() {
            let field = format!("{field}.env[{index}]");
            if !is_env_name(&variable.name) {
                self.refusals.push(Refusal::InvalidEnvName {
                    field: format!("{field}.name"),
                    name: variable.name.clone(),
                });
            }
            match (&variable.value, &variable.value_from) {
                (None, Some(source)) => self.secret(
                    &format!("{field}.valueFrom.secretKeyRef"),
                    &source.secret_key_ref.name,
                ),
                (Some(_), None) => {}
                _ => self.refusals.push(Refusal::InvalidEnvValue { field }),
            }
        }
    }

    fn mount(&mut self, field: &str, claim: &str, path: &str) {
        self.name(
            &format!("{field}.claimName"),
            claim,
            NameShape::DnsSubdomain,
        );
        if !is_mount_path(path) {
            self.refusals.push(Refusal::InvalidMountPath {
                field: format!("{field}.mountPath"),
                path: path.to_owned(),
            });
        }
    }
}

/// A C identifier that is not one of the operator's own variables.
pub fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    first_ok
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(RESERVED_ENV_PREFIX)
}

/// An absolute path without `..` or control characters, and not `/`, `/tmp` or under
/// `/neverwiped`, where the pod mounts its own folders.
pub fn is_mount_path(path: &str) -> bool {
    let under_reserved = path == RESERVED_MOUNT_ROOT
        || path
            .strip_prefix(RESERVED_MOUNT_ROOT)
            .is_some_and(|rest| rest.starts_with('/'));
    let trimmed = path.trim_end_matches('/');
    path.starts_with('/')
        && !matches!(trimmed, "" | "/tmp")
        && !under_reserved
        && path_fault(path).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_are_c_identifiers_outside_the_operators_own() {
        for good in ["PGPASSWORD", "_x", "redis_url2"] {
            assert!(is_env_name(good), "{good}");
        }
        for bad in ["", "2X", "A-B", "NEVERWIPED_PASSWORD_FILE", "A B"] {
            assert!(!is_env_name(bad), "{bad}");
        }
    }

    #[test]
    fn mount_paths_are_absolute_and_leave_the_pods_own_folders_alone() {
        for good in ["/data", "/var/lib/redis", "/neverwipedx"] {
            assert!(is_mount_path(good), "{good}");
        }
        for bad in [
            "data",
            "/",
            "/tmp",
            "/tmp/",
            "/neverwiped",
            "/neverwiped/exchange",
            "/a/../etc",
            "/a\nb",
        ] {
            assert!(!is_mount_path(bad), "{bad}");
        }
    }
}
