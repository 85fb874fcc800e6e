//! The `neverwiped.io/v1alpha1` API: the Rust types the CRDs under `crds/` are generated from,
//! the [`conditions`] and reasons their status carries, and the cluster admin's
//! [`tenant_policy`]. The operator acts on them; the kubectl plugin reads them, without the
//! operator.
//!
//! Every field name here is part of a public API; renaming one breaks users' manifests.

mod backup_plan;
mod common;
pub mod conditions;
mod copies;
mod mover;
pub mod names;
pub mod quota;
pub mod recorded_claims;
mod restore;
mod snapshots;
mod streams;
mod suspicion;
pub mod tenant_policy;
mod verify;

use kube::CustomResourceExt;

pub use backup_plan::*;
pub use common::*;
pub use copies::*;
pub use mover::*;
pub use restore::*;
pub use snapshots::*;
pub use streams::*;
pub use suspicion::*;
pub use verify::*;

/// The API group.
pub const GROUP: &str = "neverwiped.io";
/// The API version.
pub const VERSION: &str = "v1alpha1";

/// The CRDs as YAML, in the layout of the files under `crds/`: file name and content.
pub fn crd_files() -> Result<Vec<(String, String)>, serde_saphyr::SerializeError> {
    let crds = [BackupPlan::crd(), Restore::crd()];
    let mut files = Vec::with_capacity(crds.len());
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let yaml = serde_saphyr::to_string(&crd)?;
        files.push((
            format!("{name}.yaml"),
            format!("# Generated from operator/src/api by `cargo run -p neverwiped-operator --bin crdgen`; do not edit.\n---\n{yaml}"),
        ));
    }
    Ok(files)
}
