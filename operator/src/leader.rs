//! Leader election on a `coordination.k8s.io/v1` Lease, so that several replicas are safe: only
//! the holder of the Lease runs the controllers.
//!
//! The rules are client-go's. The holder renews the Lease every [`LeaderSettings::retry_period`];
//! a renewal that has not succeeded for [`LeaderSettings::renew_deadline`] (shorter than the
//! Lease's duration) means the holder must stop at once, before anyone may take over. Another
//! replica takes the Lease over only when it has seen the same record unchanged for the Lease's
//! whole duration — measured on its own clock, so clock skew between nodes does not matter. Every
//! write is guarded by the `resourceVersion` read, so two replicas can never both win.

use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::Client;

/// Where the Lease is and who this replica is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderSettings {
    pub namespace: String,
    pub name: String,
    /// This replica's identity (its pod name).
    pub identity: String,
    /// How long a Lease not renewed stays its holder's.
    pub lease_duration: Duration,
    /// The holder gives up when it could not renew for this long.
    pub renew_deadline: Duration,
    /// How often the holder renews and the others look.
    pub retry_period: Duration,
}

impl LeaderSettings {
    /// Settings for a Lease of `lease_duration`: renewals every `min(2 s, duration / 5)`, and the
    /// holder stops when it could not renew for two thirds of the duration (15 s gives client-go's
    /// defaults: 2 s and 10 s).
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        identity: impl Into<String>,
        lease_duration: Duration,
    ) -> LeaderSettings {
        let lease_duration = lease_duration.max(Duration::from_secs(1));
        LeaderSettings {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            lease_duration,
            renew_deadline: lease_duration * 2 / 3,
            retry_period: (lease_duration / 5).min(Duration::from_secs(2)),
        }
    }
}

/// What a replica does with the Lease as it finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseAction {
    /// There is no Lease: create it, held by us.
    Create,
    /// We hold it: renew it.
    Renew,
    /// Nobody holds it, or its holder has not renewed it for its whole duration: take it.
    TakeOver,
    /// Another replica holds it.
    Wait { holder: String },
}

/// Decides what to do with `lease`, which this replica has seen unchanged for `unchanged_for`.
pub fn decide(lease: Option<&Lease>, identity: &str, unchanged_for: Duration) -> LeaseAction {
    let Some(lease) = lease else {
        return LeaseAction::Create;
    };
    let spec = lease.spec.as_ref();
    let holder = spec
        .and_then(|s| s.holder_identity.clone())
        .filter(|h| !h.is_empty());
    let duration = spec
        .and_then(|s| s.lease_duration_seconds)
        .map(|secs| Duration::from_secs(u64::try_from(secs.max(1)).unwrap_or(1)))
        .unwrap_or(Duration::from_secs(1));
    match holder {
        None => LeaseAction::TakeOver,
        Some(holder) if holder == identity => LeaseAction::Renew,
        Some(_) if unchanged_for >= duration => LeaseAction::TakeOver,
        Some(holder) => LeaseAction::Wait { holder },
    }
}

/// The Lease's spec after `action` by `settings.identity` at `now`.
pub fn next_spec(
    current: Option<&LeaseSpec>,
    action: &LeaseAction,
    settings: &LeaderSettings,
    now: Timestamp,
) -> LeaseSpec {
    let mut spec = current.cloned().unwrap_or_default();
    let transitions = spec.lease_transitions.unwrap_or(0);
    match action {
        LeaseAction::Renew => {}
        LeaseAction::Create => {
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(0);
        }
        LeaseAction::TakeOver | LeaseAction::Wait { .. } => {
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(transitions + 1);
        }
    }
    spec.holder_identity = Some(settings.identity.clone());
    spec.lease_duration_seconds =
        Some(i32::try_from(settings.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX));
    spec.renew_time = Some(MicroTime(now));
    spec
}

/// Why a leader stopped leading.
#[derive(Debug, thiserror::Error)]
pub enum LeadershipLost {
    #[error("Lease {namespace}/{name} is now held by {holder:?}")]
    TakenOver {
        namespace: String,
        name: String,
        holder: String,
    },
    #[error("could not renew Lease {namespace}/{name} for {seconds} s: {last_error}")]
    RenewalFailed {
        namespace: String,
        name: String,
        seconds: u64,
        last_error: String,
    },
}

/// Takes part in the election for one Lease.
pub struct LeaderElector {
    api: Api<Lease>,
    settings: LeaderSettings,
    /// The record last seen (holder and renew time), and since when, on our clock.
    observed: Option<(String, Instant)>,
}

fn fingerprint(lease: Option<&Lease>) -> String {
    let spec = lease.and_then(|l| l.spec.as_ref());
    format!(
        "{:?}/{:?}",
        spec.and_then(|s| s.holder_identity.as_ref()),
        spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0)
    )
}

impl LeaderElector {
    pub fn new(client: Client, settings: LeaderSettings) -> LeaderElector {
        LeaderElector {
            api: Api::namespaced(client, &settings.namespace),
            settings,
            observed: None,
        }
    }

    pub fn settings(&self) -> &LeaderSettings {
        &self.settings
    }

    /// One round: reads the Lease and acts. `Ok(true)` when we hold it afterwards.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let lease = self.api.get_opt(&self.settings.name).await?;
        let seen = fingerprint(lease.as_ref());
        let unchanged_for = match &self.observed {
            Some((previous, since)) if *previous == seen => since.elapsed(),
            _ => {
                self.observed = Some((seen, Instant::now()));
                Duration::ZERO
            }
        };
        let action = decide(lease.as_ref(), &self.settings.identity, unchanged_for);
        let now = Timestamp::now();
        let result = match (&action, lease) {
            (LeaseAction::Wait { .. }, _) => return Ok(false),
            (LeaseAction::Create, _) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.settings.name.clone()),
                        namespace: Some(self.settings.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(next_spec(None, &action, &self.settings, now)),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            (_, Some(mut lease)) => {
                lease.spec = Some(next_spec(lease.spec.as_ref(), &action, &self.settings, now));
                // `replace` sends the resourceVersion read: a concurrent writer makes it fail.
                self.api
                    .replace(&self.settings.name, &PostParams::default(), &lease)
                    .await
            }
            (_, None) => return Ok(false),
        };
        match result {
            Ok(written) => {
                if action != LeaseAction::Renew {
                    tracing::info!(
                        lease = %self.settings.name,
                        identity = %self.settings.identity,
                        "acquired the leader Lease"
                    );
                }
                self.observed = Some((fingerprint(Some(&written)), Instant::now()));
                Ok(true)
            }
            // Another replica wrote first.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Waits until this replica holds the Lease.
    pub async fn acquire(&mut self) {
        let mut last_holder = None;
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => return,
                Ok(false) => {
                    let holder = self.observed.as_ref().map(|(record, _)| record.clone());
                    if holder != last_holder {
                        tracing::info!(record = ?holder, "another replica leads; waiting");
                        last_holder = holder;
                    }
                }
                Err(error) => tracing::warn!(%error, "cannot read or write the leader Lease"),
            }
            tokio::time::sleep(self.settings.retry_period).await;
        }
    }

    /// Renews the Lease until leadership is lost; returns why. Callers stop leading at once.
    pub async fn hold(&mut self) -> LeadershipLost {
        let mut last_renewal = Instant::now();
        let mut last_error = String::from("none");
        loop {
            tokio::time::sleep(self.settings.retry_period).await;
            match self.try_acquire_or_renew().await {
                Ok(true) => last_renewal = Instant::now(),
                Ok(false) => {
                    let holder = self
                        .observed
                        .as_ref()
                        .map(|(record, _)| record.clone())
                        .unwrap_or_default();
                    return LeadershipLost::TakenOver {
                        namespace: self.settings.namespace.clone(),
                        name: self.settings.name.clone(),
                        holder,
                    };
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot renew the leader Lease");
                    last_error = error.to_string();
                }
            }
            if last_renewal.elapsed() >= self.settings.renew_deadline {
                return LeadershipLost::RenewalFailed {
                    namespace: self.settings.namespace.clone(),
                    name: self.settings.name.clone(),
                    seconds: last_renewal.elapsed().as_secs(),
                    last_error,
                };
            }
        }
    }

    /// Gives the Lease up (on shutdown), so another replica takes over at its next look instead
    /// of after the Lease's duration.
    pub async fn release(&mut self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.settings.name).await? else {
            return Ok(());
        };
        let held = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            == Some(self.settings.identity.as_str());
        if !held {
            return Ok(());
        }
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(MicroTime(Timestamp::now()));
        }
        self.api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await?;
        tracing::info!(lease = %self.settings.name, "released the leader Lease");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, duration_secs: i32) -> Lease {
        Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                lease_duration_seconds: Some(duration_secs),
                lease_transitions: Some(4),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn a_lease_is_created_renewed_waited_for_or_taken_over() {
        let secs = Duration::from_secs;
        assert_eq!(decide(None, "a", secs(0)), LeaseAction::Create);
        assert_eq!(
            decide(Some(&lease(Some("a"), 15)), "a", secs(60)),
            LeaseAction::Renew
        );
        assert_eq!(
            decide(Some(&lease(Some("b"), 15)), "a", secs(14)),
            LeaseAction::Wait { holder: "b".into() }
        );
        assert_eq!(
            decide(Some(&lease(Some("b"), 15)), "a", secs(15)),
            LeaseAction::TakeOver
        );
        // Released: anyone takes it at once.
        assert_eq!(
            decide(Some(&lease(None, 1)), "a", secs(0)),
            LeaseAction::TakeOver
        );
        assert_eq!(
            decide(Some(&lease(Some(""), 15)), "a", secs(0)),
            LeaseAction::TakeOver
        );
    }

    #[test]
    fn taking_a_lease_over_counts_a_transition_and_renewing_does_not() {
        let settings = LeaderSettings::new("ns", "l", "a", Duration::from_secs(15));
        assert_eq!(settings.renew_deadline, Duration::from_secs(10));
        assert_eq!(settings.retry_period, Duration::from_secs(2));
        let now: Timestamp = "2026-11-30T10:00:00Z".parse().unwrap();
        let current = lease(Some("b"), 15).spec;
        let taken = next_spec(current.as_ref(), &LeaseAction::TakeOver, &settings, now);
        assert_eq!(taken.holder_identity.as_deref(), Some("a"));
        assert_eq!(taken.lease_transitions, Some(5));
        assert_eq!(taken.acquire_time, Some(MicroTime(now)));
        assert_eq!(taken.lease_duration_seconds, Some(15));
        let renewed = next_spec(Some(&taken), &LeaseAction::Renew, &settings, now);
        assert_eq!(renewed.lease_transitions, Some(5));
        assert_eq!(renewed.renew_time, Some(MicroTime(now)));
    }

    #[test]
    fn short_leases_renew_often_enough_to_stop_before_a_takeover() {
        let settings = LeaderSettings::new("ns", "l", "a", Duration::from_secs(3));
        assert_eq!(settings.renew_deadline, Duration::from_secs(2));
        assert_eq!(settings.retry_period, Duration::from_millis(600));
        assert!(settings.renew_deadline < settings.lease_duration);
    }
}
