//! Asks the API server, by SubjectAccessReview, whether a Restore's creator may do what running
//! it does (see [`crate::restore_access`]).

use std::collections::BTreeMap;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, PostParams};

use super::Error;
use crate::api::Restore;
use crate::restore_access::{access_needed, AccessDenied, AccessNeeded, AccessReview, Requester};
use crate::restore_source::ReadFrom;

/// What the Restore's requester lacks, of what running it from `from` needs; `claims` are its
/// target claims that exist.
pub async fn review_restore(
    client: &kube::Client,
    namespace: &str,
    restore: &Restore,
    from: &ReadFrom<'_>,
    claims: &BTreeMap<String, PersistentVolumeClaim>,
) -> Result<AccessReview, Error> {
    let Some(requester) = Requester::of(&restore.metadata) else {
        return Ok(AccessReview::NoRequester);
    };
    let api = Api::<SubjectAccessReview>::all(client.clone());
    let mut denied = Vec::new();
    for access in access_needed(&restore.spec, from, |c| claims.contains_key(c)) {
        let review = subject_access_review(&requester, namespace, &access);
        let answer = api.create(&PostParams::default(), &review).await?;
        if !answer.status.is_some_and(|s| s.allowed) {
            denied.push(AccessDenied {
                user: requester.user.clone(),
                access,
            });
        }
    }
    Ok(AccessReview::Reviewed { denied })
}

/// The review of `access` by `requester` in `namespace`.
fn subject_access_review(
    requester: &Requester,
    namespace: &str,
    access: &AccessNeeded,
) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(requester.user.clone()),
            groups: Some(requester.groups.clone()),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(namespace.to_owned()),
                verb: Some(access.verb.to_owned()),
                group: Some(String::new()),
                version: Some("v1".to_owned()),
                resource: Some(access.resource.to_owned()),
                name: access.name.clone(),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    }
}
