//! The owner reference the operator puts on everything it creates for a plan or a Restore.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;

/// Makes `owner` the controller of what the operator creates (its Jobs, snapshot clones, restore
/// claims), so that deleting the owner deletes them. The reference does not block the owner's
/// deletion: a foreground delete of a plan would otherwise wait on its Jobs, and where the
/// `OwnerReferencesPermissionEnforcement` admission plugin runs (OpenShift), setting
/// `blockOwnerDeletion` needs `update` on the owner's `finalizers`, a right the operator then
/// does not need. `None` for an owner not yet stored (no uid).
pub fn controlled_by<K: Resource<DynamicType = ()>>(owner: &K) -> Option<OwnerReference> {
    let mut reference = owner.controller_owner_ref(&())?;
    reference.block_owner_deletion = None;
    Some(reference)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::BackupPlan;

    #[test]
    fn the_reference_names_its_controller_and_blocks_nothing() {
        let mut plan = BackupPlan::new("nightly", crate::fixtures::plan_spec());
        assert_eq!(
            controlled_by(&plan),
            None,
            "an owner without uid is not stored yet"
        );
        plan.metadata.uid = Some("0e5f".into());
        let reference = controlled_by(&plan).unwrap();
        assert_eq!(
            (
                reference.kind.as_str(),
                reference.name.as_str(),
                reference.uid.as_str()
            ),
            ("BackupPlan", "nightly", "0e5f")
        );
        assert_eq!(reference.controller, Some(true));
        assert_eq!(reference.block_owner_deletion, None);
    }
}
