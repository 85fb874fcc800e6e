//! The neverwiped operator: reconciles `BackupPlan` and `Restore` resources into sidecar Jobs.
//!
//! The decisions are plain functions, tested without a cluster: [`schedule`] (when to run),
//! [`plan`] (what a plan names, and what is missing), [`volumes`] (where a pod reading volumes
//! runs), [`job`] (which Job for which plan or restore), [`status`] (what a finished Job means,
//! and what it writes);
//! [`conditions`] lists the condition types and reasons, which are part of the API. The
//! [`controller`] fetches, calls them, and applies the result; [`recorder`] publishes its Events.
//! [`admission`] refuses what a tenant may not ask for (names that would become paths, service-account
//! tokens, what the cluster's [`tenant_policy`] does not allow); [`expansion`] keeps user text in
//! arguments literal. [`leader`] elects one replica on a Lease (its decisions pure too); [`csi`] declares the CSI
//! snapshot API the operator uses. [`mover`] chooses who the pods that read or write volumes run as; [`images`] which images
//! streams and hooks run, and whether the policy allows them.

pub mod admission;
pub mod claim_record;
pub mod client;
pub mod controller;
pub mod csi;
pub mod environment;
pub mod expansion;
pub mod hashed_schedule;
pub mod http;
pub mod images;
pub mod job;
pub mod leader;
pub mod metrics;
pub mod mover;
pub mod owner;
pub mod plan;
pub mod protection;
pub mod recorder;
pub mod restore_access;
pub mod restore_record;
pub mod restore_source;
pub mod schedule;
pub mod status;
pub mod suspicion;
pub mod volume_patterns;
pub mod volumes;

/// The API types, condition types and reasons, and the tenant policy: the `neverwiped-api` crate,
/// which the plugin reads too, under the paths the operator has always used.
pub use neverwiped_api::{self as api, conditions, tenant_policy};

#[cfg(test)]
mod fixtures;
