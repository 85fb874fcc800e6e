//! Publishing Events (`events.k8s.io/v1`).
//!
//! kube's own `Recorder` folds every Event of the same reason about the same object into one
//! series and keeps the first note: a second failed backup would show the first one's error. Here
//! only identical Events (same type, reason, note and object) within a few minutes become a
//! series, as client-go's aggregation does; a different note is a new Event.

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use tokio::sync::Mutex;

use crate::conditions::Reason;

/// An identical Event within this long is counted in the first one's series.
const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// Notes are cut to this many bytes (the API allows 1 kB).
const MAX_NOTE_BYTES: usize = 1000;

/// `Normal` or `Warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SeriesKey {
    type_: EventType,
    reason: Reason,
    action: String,
    note: String,
    regarding: (
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    ),
}

/// Publishes Events as one controller instance.
pub struct Recorder {
    client: Client,
    controller: String,
    instance: String,
    recent: Mutex<HashMap<SeriesKey, Event>>,
}

impl Recorder {
    /// `controller` is the reporting controller (e.g. `neverwiped-operator`); `instance` the
    /// replica (its pod name).
    pub fn new(client: Client, controller: String, instance: String) -> Recorder {
        Recorder {
            client,
            controller,
            instance,
            recent: Mutex::new(HashMap::new()),
        }
    }

    /// Publishes an Event about `regarding`.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: Reason,
        note: &str,
        action: &str,
    ) -> Result<(), kube::Error> {
        let note = shorten(note);
        let now = Timestamp::now();
        let key = SeriesKey {
            type_,
            reason,
            action: action.to_owned(),
            note: note.clone(),
            regarding: (
                regarding.kind.clone(),
                regarding.namespace.clone(),
                regarding.name.clone(),
                regarding.uid.clone(),
            ),
        };
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let mut recent = self.recent.lock().await;
        let window = jiff::SignedDuration::try_from(SERIES_WINDOW).unwrap_or_default();
        recent.retain(|_, event| last_seen(event).is_some_and(|seen| seen + window > now));

        if let Some(previous) = recent.get(&key) {
            let count = previous.series.as_ref().map_or(2, |s| s.count + 1);
            let series = EventSeries {
                count,
                last_observed_time: MicroTime(now),
            };
            let name = previous.metadata.name.clone().unwrap_or_default();
            let patch = serde_json::json!({ "series": series });
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(updated) => {
                    recent.insert(key, updated);
                    return Ok(());
                }
                // Expired or deleted meanwhile: publish it anew.
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(error),
            }
        }
        let event = Event {
            metadata: ObjectMeta {
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_deref().unwrap_or(&self.controller),
                    now.as_nanosecond()
                )),
                namespace: Some(namespace),
                ..ObjectMeta::default()
            },
            action: Some(action.to_owned()),
            reason: Some(reason.as_str().to_owned()),
            note: Some(note),
            type_: Some(type_.as_str().to_owned()),
            regarding: Some(regarding.clone()),
            event_time: Some(MicroTime(now)),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Event::default()
        };
        let created = api.create(&PostParams::default(), &event).await?;
        recent.insert(key, created);
        Ok(())
    }
}

fn last_seen(event: &Event) -> Option<Timestamp> {
    event
        .series
        .as_ref()
        .map(|s| s.last_observed_time.0)
        .or_else(|| event.event_time.as_ref().map(|t| t.0))
}

fn shorten(note: &str) -> String {
    let mut note = note.to_owned();
    neverwiped_contract::text::truncate_at_char_boundary(&mut note, MAX_NOTE_BYTES);
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_notes_are_cut_at_a_character_boundary() {
        let note = "é".repeat(600);
        let short = shorten(&note);
        assert!(short.len() <= MAX_NOTE_BYTES);
        assert!(note.starts_with(&short));
        assert_eq!(shorten("short"), "short");
    }
}
