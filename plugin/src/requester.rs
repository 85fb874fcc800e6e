//! The caller as a Restore records its creator: the user (and groups) the API server authenticates
//! this kubeconfig as, asked by SelfSubjectReview, in the annotations the chart's admission
//! policy accepts only from that user.

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::{Api, ObjectMeta, PostParams};
use neverwiped_api::{REQUESTER_ANNOTATION, REQUESTER_GROUPS_ANNOTATION};

use crate::cluster::Cluster;

/// Who the API server says the caller is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub user: String,
    pub groups: Vec<String>,
}

impl Caller {
    /// Asks the API server; `None` (with the reason) when it does not answer with a user, e.g. an
    /// API server without `authentication.k8s.io/v1` SelfSubjectReview (before 1.28).
    pub async fn of(cluster: &Cluster) -> Result<Caller, String> {
        let api: Api<SelfSubjectReview> = Api::all(cluster.client.clone());
        let review = api
            .create(&PostParams::default(), &SelfSubjectReview::default())
            .await
            .map_err(|error| format!("the API server does not say who you are ({error})"))?;
        let info = review
            .status
            .and_then(|status| status.user_info)
            .ok_or("the API server's SelfSubjectReview names no user")?;
        let user = info.username.filter(|user| !user.is_empty());
        Ok(Caller {
            user: user.ok_or("the API server's SelfSubjectReview names no user")?,
            groups: info.groups.unwrap_or_default(),
        })
    }

    /// Records the caller as the creator in `meta`'s annotations.
    pub fn annotate(&self, meta: &mut ObjectMeta) {
        let annotations = meta.annotations.get_or_insert_with(Default::default);
        annotations.insert(REQUESTER_ANNOTATION.to_owned(), self.user.clone());
        let groups: Vec<&str> = self
            .groups
            .iter()
            .map(String::as_str)
            .filter(|group| !group.contains(','))
            .collect();
        if !groups.is_empty() {
            annotations.insert(REQUESTER_GROUPS_ANNOTATION.to_owned(), groups.join(","));
        }
    }
}

/// Records the caller as the creator of the object `meta` belongs to (a Restore acts for its
/// creator; without the record the operator runs nothing), or says why it cannot.
pub async fn record_caller(cluster: &Cluster, meta: &mut ObjectMeta) {
    match Caller::of(cluster).await {
        Ok(caller) => caller.annotate(meta),
        Err(why) => eprintln!(
            "warning: {why}; the Restore does not record you as its creator, so the operator will not run it (RequesterUnknown)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caller_is_recorded_with_the_groups_an_annotation_can_hold() {
        let caller = Caller {
            user: "alice".into(),
            groups: vec![
                "team-a".into(),
                "odd,group".into(),
                "system:authenticated".into(),
            ],
        };
        let mut meta = ObjectMeta::default();
        caller.annotate(&mut meta);
        let annotations = meta.annotations.unwrap();
        assert_eq!(annotations[REQUESTER_ANNOTATION], "alice");
        assert_eq!(
            annotations[REQUESTER_GROUPS_ANNOTATION],
            "team-a,system:authenticated"
        );
    }
}
