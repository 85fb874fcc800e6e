//! The cluster admin's protection of repositories against their own tenants: maintenance
//! credentials per repository URL prefix, and the protection window.
//!
//! A plan whose repository lies under a prefix with maintenance credentials never forgets with its
//! own login: its backups get no `--keep-*` rules, and its retention runs in the prune Job, which
//! the operator creates in its own namespace with the admin's login (a Secret there) and a copy of
//! the plan's repository password. The window (`--protect-within`) is the least age a snapshot
//! must reach before any forget may remove it, whatever the plan's retention says; it comes from
//! here, never from the plan. `docs/security.md` gives the reasoning.
//!
//! The chart passes its `maintenance` values as JSON in [`MAINTENANCE_ENV`]; [`Protection::parse`]
//! checks every entry at start, and an error names the entry.

use std::collections::BTreeMap;

use neverwiped_contract::location::RestLocation;
use serde::Deserialize;

use crate::admission::{is_dns_label, is_dns_subdomain};
use crate::api::CredentialsSecretRef;

/// The environment variable that holds the chart's `maintenance` values as JSON.
pub const MAINTENANCE_ENV: &str = "NEVERWIPED_MAINTENANCE";

/// The admin's maintenance credentials and protection windows, checked.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Protection {
    /// The operator's own namespace: where the maintenance Secrets are and protected plans'
    /// prune Jobs run.
    pub namespace: String,
    /// Maintenance logins by repository URL prefix.
    pub credentials: Vec<MaintenanceCredentials>,
    /// The window of every plan.
    pub default_window: Option<Window>,
    /// The window of the plans of a namespace.
    pub namespace_windows: BTreeMap<String, Window>,
    /// The window of the plans whose repository lies under a prefix.
    pub prefix_windows: Vec<(RestLocation, Window)>,
}

/// The gate login that may delete in the repositories under `url_prefix`.
#[derive(Debug, Clone, PartialEq)]
pub struct MaintenanceCredentials {
    pub url_prefix: RestLocation,
    /// A Secret in the operator's namespace, with the keys of a plan's `credentialsSecretRef`
    /// (`username`, `password`).
    pub secret_name: String,
}

impl MaintenanceCredentials {
    /// The Secret as a Job mounts it.
    pub fn secret_ref(&self) -> CredentialsSecretRef {
        CredentialsSecretRef {
            name: self.secret_name.clone(),
            username_key: "username".into(),
            password_key: "password".into(),
        }
    }
}

/// A protection window: days and hours, as the sidecar's `--protect-within` takes it (`14d`,
/// `36h`, `1d12h`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// As the admin wrote it, passed to the sidecar unchanged.
    pub text: String,
    pub seconds: u64,
}

impl Window {
    /// Parses `NdMh`, `Nd` or `Nh`; zero is refused (no window is written as no entry).
    pub fn parse(text: &str) -> Result<Window, String> {
        let refuse = || {
            format!(
                "{text:?} is not a protection window: days and hours, such as 14d, 36h or 1d12h"
            )
        };
        let mut seconds: u64 = 0;
        let mut digits = String::new();
        let mut last_unit = 0;
        for character in text.chars() {
            if character.is_ascii_digit() {
                digits.push(character);
                continue;
            }
            let (rank, unit_seconds) = match character {
                'd' => (1, 86_400),
                'h' => (2, 3_600),
                _ => return Err(refuse()),
            };
            if digits.is_empty() || rank <= last_unit {
                return Err(refuse());
            }
            let value: u64 = digits.parse().map_err(|_| refuse())?;
            seconds = value
                .checked_mul(unit_seconds)
                .and_then(|s| seconds.checked_add(s))
                .ok_or_else(refuse)?;
            digits.clear();
            last_unit = rank;
        }
        if !digits.is_empty() || last_unit == 0 {
            return Err(refuse());
        }
        if seconds == 0 {
            return Err(format!(
                "{text:?} protects nothing: a window is at least 1h"
            ));
        }
        Ok(Window {
            text: text.to_owned(),
            seconds,
        })
    }
}

/// What applies to one plan.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PlanProtection<'a> {
    /// The maintenance login of the plan's repository (the longest matching prefix's); `None`:
    /// the plan's own login forgets and prunes.
    pub credentials: Option<&'a MaintenanceCredentials>,
    /// The longest window that applies.
    pub window: Option<&'a Window>,
}

impl PlanProtection<'_> {
    /// The sidecar's `--protect-within` value.
    pub fn protect_within(&self) -> Option<String> {
        self.window.map(|window| window.text.clone())
    }
}

/// An entry of the chart's `maintenance` values the operator cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{entry}: {problem}")]
pub struct ProtectionError {
    /// Where, as in the values: `credentials[1].urlPrefix`.
    pub entry: String,
    pub problem: String,
}

fn fault(entry: impl Into<String>, problem: impl Into<String>) -> ProtectionError {
    ProtectionError {
        entry: entry.into(),
        problem: problem.into(),
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawProtection {
    #[serde(default)]
    credentials: Vec<RawCredentials>,
    #[serde(default)]
    protection_window: RawWindows,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawCredentials {
    url_prefix: String,
    secret_name: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawWindows {
    #[serde(default)]
    default: Option<String>,
    #[serde(default)]
    namespaces: BTreeMap<String, String>,
    #[serde(default)]
    url_prefixes: Vec<RawPrefixWindow>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawPrefixWindow {
    url_prefix: String,
    window: String,
}

fn prefix(entry: &str, text: &str) -> Result<RestLocation, ProtectionError> {
    RestLocation::parse(text).map_err(|error| fault(entry, format!("{error}")))
}

fn window(entry: &str, text: &str) -> Result<Window, ProtectionError> {
    Window::parse(text).map_err(|problem| fault(entry, problem))
}

impl Protection {
    /// Parses the chart's `maintenance` values (JSON; empty: no protection) for an operator
    /// running in `namespace`.
    pub fn parse(json: &str, namespace: &str) -> Result<Protection, ProtectionError> {
        let raw: RawProtection = if json.trim().is_empty() {
            RawProtection::default()
        } else {
            serde_json::from_str(json).map_err(|error| fault("maintenance", error.to_string()))?
        };
        let mut protection = Protection {
            namespace: namespace.to_owned(),
            ..Protection::default()
        };
        for (index, entry) in raw.credentials.iter().enumerate() {
            let at = format!("credentials[{index}]");
            let url_prefix = prefix(&format!("{at}.urlPrefix"), &entry.url_prefix)?;
            if !is_dns_subdomain(&entry.secret_name) {
                return Err(fault(
                    format!("{at}.secretName"),
                    format!("{:?} is not a Secret's name", entry.secret_name),
                ));
            }
            let same = |c: &MaintenanceCredentials| c.url_prefix.url() == url_prefix.url();
            if let Some(earlier) = protection.credentials.iter().position(same) {
                return Err(fault(
                    format!("{at}.urlPrefix"),
                    format!("the same prefix as credentials[{earlier}]: one login per prefix"),
                ));
            }
            protection.credentials.push(MaintenanceCredentials {
                url_prefix,
                secret_name: entry.secret_name.clone(),
            });
        }
        let windows = raw.protection_window;
        if let Some(text) = windows.default.filter(|text| !text.is_empty()) {
            protection.default_window = Some(window("protectionWindow.default", &text)?);
        }
        for (name, text) in &windows.namespaces {
            let at = format!("protectionWindow.namespaces.{name}");
            if !is_dns_label(name) {
                return Err(fault(at, format!("{name:?} is not a namespace's name")));
            }
            protection
                .namespace_windows
                .insert(name.clone(), window(&at, text)?);
        }
        for (index, entry) in windows.url_prefixes.iter().enumerate() {
            let at = format!("protectionWindow.urlPrefixes[{index}]");
            let url_prefix = prefix(&format!("{at}.urlPrefix"), &entry.url_prefix)?;
            let window = window(&format!("{at}.window"), &entry.window)?;
            protection.prefix_windows.push((url_prefix, window));
        }
        Ok(protection)
    }

    /// Where protected plans' prune Jobs may be: the operator's namespace, when any maintenance
    /// credentials are configured (else the operator looks for none, and asks nothing more of the
    /// API server than before they existed).
    pub fn jobs_namespace(&self) -> Option<&str> {
        (!self.credentials.is_empty() && !self.namespace.is_empty()).then_some(&self.namespace)
    }

    /// What applies to a plan in `namespace` whose repository is `url`: the maintenance login of
    /// the longest prefix `url` lies under (compared parsed, whole path segments), and the longest
    /// window of the default, the namespace's and every prefix's that `url` lies under. A URL that
    /// does not parse gets no login (its plan is not ready anyway).
    pub fn for_plan(&self, namespace: &str, url: &str) -> PlanProtection<'_> {
        let location = RestLocation::parse(url).ok();
        let under = |prefix: &RestLocation| location.as_ref().is_some_and(|l| l.is_under(prefix));
        let credentials = self
            .credentials
            .iter()
            .filter(|c| under(&c.url_prefix))
            .max_by_key(|c| c.url_prefix.url().path().len());
        let prefix_windows = self
            .prefix_windows
            .iter()
            .filter(|(prefix, _)| under(prefix))
            .map(|(_, window)| window);
        let window = (self.default_window.iter())
            .chain(self.namespace_windows.get(namespace))
            .chain(prefix_windows)
            .max_by_key(|window| window.seconds);
        PlanProtection {
            credentials,
            window,
        }
    }
}

#[cfg(test)]
#[path = "protection_tests.rs"]
mod tests;
