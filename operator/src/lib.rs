//! The neverwiped operator: reconciles `BackupPlan` and `Restore` resources into sidecar Jobs.
//!
//! The decisions are plain functions, tested without a cluster: [`schedule`] (when to run),
//! [`plan`] (what a plan names, and what is missing), [`volumes`] (where a pod reading volumes
//! runs), [`job`] (which Job for which plan or restore), [`status`] (what a finished Job means);
//! [`conditions`] lists the condition types and reasons, which are part of the API. The
//! [`controller`] fetches, calls them, and applies the result; [`recorder`] publishes its Events.
//! [`leader`] elects one replica on a Lease (its decisions pure too); [`csi`] declares the CSI
//! snapshot API the operator uses.

pub mod api;
pub mod conditions;
pub mod controller;
pub mod csi;
pub mod http;
pub mod job;
pub mod leader;
pub mod metrics;
pub mod plan;
pub mod recorder;
pub mod schedule;
pub mod status;
pub mod volumes;

#[cfg(test)]
mod fixtures;
