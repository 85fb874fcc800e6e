//! The images a plan's streams and hooks, or a Restore's streams, run, and whether the cluster
//! admin's policy (`policy.allowedImages`) allows them in the namespace. A hook without an image
//! runs the sidecar's, which is always allowed; a Restore's stream without one runs the image of
//! the plan's stream of that name.

use std::collections::BTreeMap;

use crate::api::{BackupPlanSpec, RestoreSpec};
use crate::tenant_policy::TenantPolicy;

/// An image the cluster's policy does not allow, with where it is named and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: the cluster's policy does not allow image {image:?} in namespace {namespace:?} (policy.allowedImages allows {}); use an image under an allowed prefix, or ask the cluster admin to allow it", allowed_text(.allowed))]
pub struct ImageNotAllowed {
    pub field: String,
    pub image: String,
    pub namespace: String,
    /// The prefixes the namespace may use.
    pub allowed: Vec<String>,
}

fn allowed_text(allowed: &[String]) -> String {
    if allowed.is_empty() {
        "no image here".into()
    } else {
        allowed
            .iter()
            .map(|p| format!("{p:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A Restore's stream whose image is nowhere to be found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: stream {name:?} sets no image, and {source_text}; set image to the one that restores it")]
pub struct UnknownStream {
    pub field: String,
    pub name: String,
    /// Why the plan does not give one.
    pub source_text: String,
}

/// The images a plan names, each with its field.
pub fn plan_images(spec: &BackupPlanSpec) -> Vec<(String, &str)> {
    let streams = spec.streams.iter().enumerate().map(|(index, stream)| {
        (
            format!("spec.streams[{index}].image"),
            stream.image.as_str(),
        )
    });
    let hooks = [("pre", &spec.hooks.pre), ("post", &spec.hooks.post)]
        .into_iter()
        .flat_map(|(phase, hooks)| {
            hooks.iter().enumerate().filter_map(move |(index, hook)| {
                let image = hook.image.as_deref()?;
                Some((format!("spec.hooks.{phase}[{index}].image"), image))
            })
        });
    streams.chain(hooks).collect()
}

/// The image of each of a Restore's streams, by name: its own, or the plan's stream's of that
/// name; a stream with neither is an [`UnknownStream`].
pub fn restore_stream_images(
    spec: &RestoreSpec,
    plan: Option<&BackupPlanSpec>,
) -> Result<BTreeMap<String, String>, Vec<UnknownStream>> {
    let mut images = BTreeMap::new();
    let mut unknown = Vec::new();
    for (index, stream) in spec.streams.iter().enumerate() {
        let planned = plan.and_then(|p| p.streams.iter().find(|s| s.name == stream.name));
        match (&stream.image, planned) {
            (Some(image), _) => {
                images.insert(stream.name.clone(), image.clone());
            }
            (None, Some(planned)) => {
                images.insert(stream.name.clone(), planned.image.clone());
            }
            (None, None) => unknown.push(UnknownStream {
                field: format!("spec.streams[{index}]"),
                name: stream.name.clone(),
                source_text: match plan {
                    Some(_) => "the BackupPlan has no stream of that name".into(),
                    None => "the Restore names no BackupPlan to take it from".into(),
                },
            }),
        }
    }
    match unknown.is_empty() {
        true => Ok(images),
        false => Err(unknown),
    }
}

/// The images of `images` that `policy` does not allow in `namespace`.
pub fn images_not_allowed<'a>(
    images: impl IntoIterator<Item = (String, &'a str)>,
    namespace: &str,
    policy: &TenantPolicy,
) -> Vec<ImageNotAllowed> {
    let allowed: Vec<String> = (policy.allowed_image_prefixes(namespace).unwrap_or_default())
        .into_iter()
        .map(str::to_owned)
        .collect();
    images
        .into_iter()
        .filter(|(_, image)| !policy.allows_image(namespace, image))
        .map(|(field, image)| ImageNotAllowed {
            field,
            image: image.to_owned(),
            namespace: namespace.to_owned(),
            allowed: allowed.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{BackupStream, Hook, HookOnError, RestoreStream};

    fn stream(name: &str, image: &str) -> BackupStream {
        BackupStream {
            name: name.into(),
            image: image.into(),
            command: vec!["redis-cli".into(), "--rdb".into(), "-".into()],
            env: Vec::new(),
            allow_empty: false,
            volume_mounts: Vec::new(),
        }
    }

    #[test]
    fn a_refused_image_names_its_field_and_the_allowed_prefixes() {
        let mut spec = crate::fixtures::plan_spec();
        spec.streams = vec![stream("cache", "docker.io/redis:7")];
        spec.hooks.pre = vec![Hook {
            name: "checkpoint".into(),
            image: None,
            command: vec!["psql".into()],
            env: Vec::new(),
            timeout_seconds: 60,
            on_error: HookOnError::Fail,
        }];
        let policy =
            TenantPolicy::from_json(r#"{"allowedImages": {"shop": ["registry.example/redis"]}}"#)
                .unwrap();
        let refused = images_not_allowed(plan_images(&spec), "shop", &policy);
        assert_eq!(
            refused.len(),
            1,
            "the hook runs the sidecar's image: {refused:?}"
        );
        let message = refused[0].to_string();
        assert!(message.starts_with("spec.streams[0].image"), "{message}");
        assert!(message.contains("\"docker.io/redis:7\""), "{message}");
        assert!(message.contains("\"registry.example/redis\""), "{message}");
    }

    #[test]
    fn a_restore_stream_takes_the_plans_image_or_must_name_one() {
        let mut plan = crate::fixtures::plan_spec();
        plan.streams = vec![stream("cache", "registry.example/redis:7")];
        let restore_stream = |image: Option<&str>| RestoreStream {
            name: "cache".into(),
            image: image.map(Into::into),
            command: vec!["redis-cli".into(), "--pipe".into()],
            env: Vec::new(),
            volume_mounts: Vec::new(),
        };
        let mut spec: RestoreSpec =
            serde_json::from_value(serde_json::json!({"backupPlanName": "nightly"})).unwrap();
        spec.streams = vec![restore_stream(None)];
        let images = restore_stream_images(&spec, Some(&plan)).unwrap();
        assert_eq!(images["cache"], "registry.example/redis:7");
        let unknown = restore_stream_images(&spec, None).unwrap_err();
        assert!(unknown[0].to_string().contains("names no BackupPlan"));
        spec.streams = vec![restore_stream(Some("registry.example/redis:8"))];
        let images = restore_stream_images(&spec, None).unwrap();
        assert_eq!(images["cache"], "registry.example/redis:8");
    }
}
