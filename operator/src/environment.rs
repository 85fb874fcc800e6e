//! The operator's configuration, read once from its environment (the chart's Deployment sets it).
//!
//! Every variable is read here and nowhere else, each into its type, and a value that does not
//! parse stops the operator with an error naming the variable and what it expects: a typo in the
//! chart's values must not quietly become a default.
//!
//! Environment:
//! - `NEVERWIPED_SIDECAR_IMAGE`: the image of the Jobs' sidecar (required).
//! - `NEVERWIPED_SIDECAR_IMAGE_PULL_POLICY`: `Always`, `IfNotPresent` or `Never`.
//! - `NEVERWIPED_DRILL_IMAGE`: the image of the restore drills' Jobs (the sidecar with the
//!   database servers a drill loads dumps into); the sidecar image when unset.
//! - `NEVERWIPED_DRILL_IMAGE_PULL_POLICY`: the drill image's; the sidecar's when unset.
//! - `NEVERWIPED_HTTP_ADDR`: where `/healthz`, `/readyz` and `/metrics` listen (`0.0.0.0:8080`).
//! - `NEVERWIPED_CATCH_UP_WINDOW`: how late a missed run may still start (`24h`).
//! - `NEVERWIPED_WATCH_NAMESPACE`: reconcile only this namespace's resources (default: all).
//! - `NEVERWIPED_TENANT_POLICY`: the cluster admin's limits on plans and Restores, as JSON
//!   (the chart's `policy` values; default: none).
//! - `NEVERWIPED_MAINTENANCE`: maintenance credentials per repository URL prefix and protection
//!   windows, as JSON (the chart's `maintenance` values, [`crate::protection`]; default: none).
//! - `POD_NAMESPACE` (default: the service account's): the operator's namespace, where protected
//!   plans' prune Jobs run.
//! - `NEVERWIPED_MAX_RUNNING_BACKUPS` (`25`), `NEVERWIPED_MAX_RUNNING_MAINTENANCE` (`5`),
//!   `NEVERWIPED_MAX_RUNNING_PER_NODE` (`3`), `NEVERWIPED_MAX_RUNNING_PER_REPOSITORY_HOST` (`10`):
//!   how many backup Jobs, prune and check Jobs, Jobs pinned to one node and Jobs using one
//!   repository host run at once; `0` is no limit. A run beyond them waits in a queue.
//! - `NEVERWIPED_PLAN_SELECTOR`: reconcile only the BackupPlans and Restores this label selector
//!   matches (default: all).
//! - `NEVERWIPED_RECONCILE_CONCURRENCY` (`32`): how many BackupPlans are reconciled at once (`0`:
//!   no limit).
//! - `NEVERWIPED_LEADER_ELECTION`: `false` runs the controllers without a Lease (one replica only).
//! - `NEVERWIPED_LEASE_NAME` (`neverwiped-operator`), `NEVERWIPED_LEASE_NAMESPACE` (default: the
//!   pod's namespace, `POD_NAMESPACE` or the service account's), `NEVERWIPED_LEASE_DURATION`
//!   (`15s`): the leader Lease.
//! - `POD_NAME`: this replica's identity in the Lease and in Events (default: host name and pid).
//! - `NEVERWIPED_LOG_FORMAT`: `json` for JSON logs; `RUST_LOG` filters them (`info`).
//! - `NEVERWIPED_SUSPICIOUS_MIN_HISTORY` (`3`), `NEVERWIPED_SUSPICIOUS_FACTOR` (`5`),
//!   `NEVERWIPED_SUSPICIOUS_REWRITTEN_SHARE` (`0.5`), `NEVERWIPED_SUSPICIOUS_REMOVED_SHARE` (`0.3`),
//!   `NEVERWIPED_SUSPICIOUS_INCOMPRESSIBLE_SHARE` (`0.9`),
//!   `NEVERWIPED_SUSPICIOUS_USUAL_COMPRESSED_SHARE` (`0.75`),
//!   `NEVERWIPED_SUSPICIOUS_MIN_NEW_BYTES` (`16777216`): when a backup's changes are far outside
//!   the plan's history (`crate::suspicion::Thresholds`, the chart's `suspiciousChange` values).
//! - `KUBECONFIG` or the in-cluster service account: how to reach the API server.

use std::num::NonZeroUsize;
use std::time::Duration;

use jiff::SignedDuration;

use crate::controller::queue::Limits;
use crate::controller::Settings;
use crate::leader::LeaderSettings;
use crate::protection::{Protection, MAINTENANCE_ENV};
use crate::schedule::parse_duration;
use crate::suspicion::Thresholds;
use crate::tenant_policy::{TenantPolicy, POLICY_ENV};

/// Where the service account's namespace is mounted in a pod.
const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Everything the operator binary needs before it starts its controllers.
#[derive(Debug)]
pub struct OperatorEnvironment {
    /// What the controllers get.
    pub settings: Settings,
    /// The leader Lease; `None` when leader election is off (one replica only).
    pub leader: Option<LeaderSettings>,
    /// Where `/healthz`, `/readyz` and `/metrics` listen.
    pub http_address: String,
    /// Whether logs are JSON lines (`NEVERWIPED_LOG_FORMAT=json`) rather than text.
    pub json_logs: bool,
}

/// A variable whose value the operator cannot use.
#[derive(Debug, thiserror::Error)]
#[error("{variable}={value:?}: {expected}")]
pub struct EnvironmentError {
    pub variable: &'static str,
    pub value: String,
    /// What the variable must hold instead.
    pub expected: String,
}

impl OperatorEnvironment {
    /// Reads the process environment.
    pub fn from_env() -> Result<OperatorEnvironment, EnvironmentError> {
        let pod_namespace = std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE).ok();
        OperatorEnvironment::read(
            |name| std::env::var(name).ok(),
            pod_namespace.as_deref(),
            std::process::id(),
        )
    }

    /// Reads the variables `lookup` gives; `service_account_namespace` is the mounted namespace
    /// file's content, `pid` this process's id (for an identity when `POD_NAME` is unset).
    pub fn read(
        lookup: impl Fn(&str) -> Option<String>,
        service_account_namespace: Option<&str>,
        pid: u32,
    ) -> Result<OperatorEnvironment, EnvironmentError> {
        let vars = Variables { lookup: &lookup };
        let identity = vars.get("POD_NAME").unwrap_or_else(|| {
            let host = vars
                .get("HOSTNAME")
                .unwrap_or_else(|| "neverwiped-operator".into());
            format!("{host}-{pid}")
        });
        let own_namespace = own_namespace(&vars, service_account_namespace);
        let mut settings = settings(&vars, identity.clone())?;
        settings.job.protection = Protection::parse(
            &vars.get(MAINTENANCE_ENV).unwrap_or_default(),
            &own_namespace,
        )
        .map_err(|error| {
            vars.fault(
                MAINTENANCE_ENV,
                format!("the chart's maintenance values as JSON: {error}"),
            )
        })?;
        let leader = leader(&vars, &own_namespace, identity)?;
        Ok(OperatorEnvironment {
            settings,
            leader,
            http_address: vars
                .get("NEVERWIPED_HTTP_ADDR")
                .unwrap_or_else(|| "0.0.0.0:8080".into()),
            json_logs: vars.choice("NEVERWIPED_LOG_FORMAT", &["text", "json"])? == Some("json"),
        })
    }
}

/// The variables, as `lookup` gives them; an empty value counts as unset.
struct Variables<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
}

impl Variables<'_> {
    fn get(&self, name: &str) -> Option<String> {
        (self.lookup)(name).filter(|value| !value.is_empty())
    }

    fn fault(&self, variable: &'static str, expected: impl Into<String>) -> EnvironmentError {
        EnvironmentError {
            variable,
            value: self.get(variable).unwrap_or_default(),
            expected: expected.into(),
        }
    }

    /// One of `choices`, or `None` when unset.
    fn choice(
        &self,
        name: &'static str,
        choices: &[&'static str],
    ) -> Result<Option<&'static str>, EnvironmentError> {
        let Some(value) = self.get(name) else {
            return Ok(None);
        };
        match choices.iter().find(|choice| **choice == value) {
            Some(choice) => Ok(Some(choice)),
            None => Err(self.fault(name, format!("one of {}", choices.join(", ")))),
        }
    }

    fn duration(&self, name: &'static str) -> Result<Option<SignedDuration>, EnvironmentError> {
        let Some(text) = self.get(name) else {
            return Ok(None);
        };
        match parse_duration(&text) {
            Ok(duration) if !duration.is_negative() => Ok(Some(duration)),
            _ => Err(self.fault(name, "a duration such as 90s, 15m or 24h")),
        }
    }

    /// A whole number, or `None` when unset.
    fn number(
        &self,
        name: &'static str,
        expected: &'static str,
    ) -> Result<Option<u64>, EnvironmentError> {
        self.get(name)
            .map(|text| text.parse().map_err(|_| self.fault(name, expected)))
            .transpose()
    }

    /// A number from 0 to `max` (a share of 0 to 1, or a factor), or `None` when unset.
    fn share(&self, name: &'static str, max: f64) -> Result<Option<f64>, EnvironmentError> {
        let Some(text) = self.get(name) else {
            return Ok(None);
        };
        match text.parse::<f64>() {
            Ok(value) if (0.0..=max).contains(&value) => Ok(Some(value)),
            _ if max <= 1.0 => Err(self.fault(name, "a share from 0 to 1, such as 0.5")),
            _ => Err(self.fault(name, "a positive number, such as 5")),
        }
    }

    /// A count where `0` means no limit; unset keeps `default`.
    fn limit(
        &self,
        name: &'static str,
        default: Option<NonZeroUsize>,
    ) -> Result<Option<NonZeroUsize>, EnvironmentError> {
        match self.get(name) {
            None => Ok(default),
            Some(text) => text
                .parse::<usize>()
                .map(NonZeroUsize::new)
                .map_err(|_| self.fault(name, "a whole number of Jobs (0: no limit)")),
        }
    }
}

fn settings(vars: &Variables, identity: String) -> Result<Settings, EnvironmentError> {
    let image = vars.get("NEVERWIPED_SIDECAR_IMAGE").ok_or_else(|| {
        vars.fault(
            "NEVERWIPED_SIDECAR_IMAGE",
            "the image of the sidecar the Jobs run (required)",
        )
    })?;
    let mut settings = Settings::with_image(image);
    settings.instance = identity;
    settings.job.image_pull_policy = vars
        .choice(
            "NEVERWIPED_SIDECAR_IMAGE_PULL_POLICY",
            &["Always", "IfNotPresent", "Never"],
        )?
        .map(String::from);
    settings.job.drill_image = vars.get("NEVERWIPED_DRILL_IMAGE");
    settings.job.drill_image_pull_policy = vars
        .choice(
            "NEVERWIPED_DRILL_IMAGE_PULL_POLICY",
            &["Always", "IfNotPresent", "Never"],
        )?
        .map(String::from);
    if let Some(window) = vars.duration("NEVERWIPED_CATCH_UP_WINDOW")? {
        settings.catch_up_window = window;
    }
    settings.watch_namespace = vars.get("NEVERWIPED_WATCH_NAMESPACE");
    settings.tenant_policy = TenantPolicy::from_json(&vars.get(POLICY_ENV).unwrap_or_default())
        .map_err(|error| {
            vars.fault(
                POLICY_ENV,
                format!("the chart's policy values as JSON: {error:#}"),
            )
        })?;
    settings.limits = limits(vars)?;
    settings.plan_selector = vars.get("NEVERWIPED_PLAN_SELECTOR");
    if let Some(text) = vars.get("NEVERWIPED_RECONCILE_CONCURRENCY") {
        settings.reconcile_concurrency = text.parse().map_err(|_| {
            vars.fault(
                "NEVERWIPED_RECONCILE_CONCURRENCY",
                "a number of reconciles at once, up to 65535 (0: no limit)",
            )
        })?;
    }
    settings.suspicion = suspicion(vars)?;
    Ok(settings)
}

fn suspicion(vars: &Variables) -> Result<Thresholds, EnvironmentError> {
    let defaults = Thresholds::default();
    let min_history = vars.number("NEVERWIPED_SUSPICIOUS_MIN_HISTORY", "a number of nights")?;
    let min_new_bytes = vars.number("NEVERWIPED_SUSPICIOUS_MIN_NEW_BYTES", "a number of bytes")?;
    Ok(Thresholds {
        min_history: min_history.map_or(defaults.min_history, |n| n as usize),
        factor: vars
            .share("NEVERWIPED_SUSPICIOUS_FACTOR", f64::MAX)?
            .unwrap_or(defaults.factor),
        rewritten_share: vars
            .share("NEVERWIPED_SUSPICIOUS_REWRITTEN_SHARE", 1.0)?
            .unwrap_or(defaults.rewritten_share),
        removed_share: vars
            .share("NEVERWIPED_SUSPICIOUS_REMOVED_SHARE", 1.0)?
            .unwrap_or(defaults.removed_share),
        incompressible_share: vars
            .share("NEVERWIPED_SUSPICIOUS_INCOMPRESSIBLE_SHARE", 1.0)?
            .unwrap_or(defaults.incompressible_share),
        usual_compressed_share: vars
            .share("NEVERWIPED_SUSPICIOUS_USUAL_COMPRESSED_SHARE", 1.0)?
            .unwrap_or(defaults.usual_compressed_share),
        min_new_bytes: min_new_bytes.unwrap_or(defaults.min_new_bytes),
    })
}

fn limits(vars: &Variables) -> Result<Limits, EnvironmentError> {
    let defaults = Limits::default();
    Ok(Limits {
        backups: vars.limit("NEVERWIPED_MAX_RUNNING_BACKUPS", defaults.backups)?,
        maintenance: vars.limit("NEVERWIPED_MAX_RUNNING_MAINTENANCE", defaults.maintenance)?,
        per_node: vars.limit("NEVERWIPED_MAX_RUNNING_PER_NODE", defaults.per_node)?,
        per_repository_host: vars.limit(
            "NEVERWIPED_MAX_RUNNING_PER_REPOSITORY_HOST",
            defaults.per_repository_host,
        )?,
    })
}

/// The operator's own namespace: `POD_NAMESPACE`, else the service account's, else `default`.
fn own_namespace(vars: &Variables, service_account_namespace: Option<&str>) -> String {
    vars.get("POD_NAMESPACE")
        .or_else(|| {
            service_account_namespace
                .map(str::trim)
                .filter(|namespace| !namespace.is_empty())
                .map(String::from)
        })
        .unwrap_or_else(|| "default".into())
}

fn leader(
    vars: &Variables,
    own_namespace: &str,
    identity: String,
) -> Result<Option<LeaderSettings>, EnvironmentError> {
    if vars.choice("NEVERWIPED_LEADER_ELECTION", &["true", "false"])? == Some("false") {
        return Ok(None);
    }
    let namespace = vars
        .get("NEVERWIPED_LEASE_NAMESPACE")
        .unwrap_or_else(|| own_namespace.to_owned());
    let name = vars
        .get("NEVERWIPED_LEASE_NAME")
        .unwrap_or_else(|| "neverwiped-operator".into());
    let duration = vars
        .duration("NEVERWIPED_LEASE_DURATION")?
        .map_or(Duration::from_secs(15), SignedDuration::unsigned_abs);
    Ok(Some(LeaderSettings::new(
        namespace, name, identity, duration,
    )))
}

#[cfg(test)]
#[path = "environment_tests.rs"]
mod tests;
