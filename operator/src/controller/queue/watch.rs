//! [`Queue`]: the [`Ledger`] the reconcilers share, kept up to date from a watch of the
//! operator's Jobs ([`run`]), and the channel that wakes a waiting plan when a slot frees.
//!
//! The watch lists the Jobs first, so a restarted operator (or a new leader) counts what runs
//! before it admits anything; each Job is reduced at once to what the limits count.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;

use super::ledger::JobId;
use super::{Footprint, Gate, Ledger, Limits, Owner, RunClass, RunKey};
use crate::api::BackupPlan;
use crate::job::{
    job_annotation, ANNOTATION_NODE, ANNOTATION_REPOSITORY_HOST, LABEL_OPERATION, LABEL_PLAN,
    LABEL_PLAN_NAMESPACE, LABEL_RESTORE,
};
use crate::metrics::{Metrics, QueueLabels};
use crate::status::job_finished;

/// How often expired reservations and forgotten waiters are cleaned up.
const EXPIRE_EVERY: Duration = Duration::from_secs(30);

/// The shared ledger and the wake-up channel.
pub struct Queue {
    ledger: Mutex<Ledger>,
    wake: mpsc::UnboundedSender<ObjectRef<BackupPlan>>,
    woken: Mutex<Option<mpsc::UnboundedReceiver<ObjectRef<BackupPlan>>>>,
}

impl Queue {
    pub fn new(limits: Limits) -> Queue {
        let (wake, woken) = mpsc::unbounded_channel();
        Queue {
            ledger: Mutex::new(Ledger::new(limits)),
            wake,
            woken: Mutex::new(Some(woken)),
        }
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        // A panic while holding the lock leaves a consistent ledger: every method completes its
        // changes before it can panic.
        self.ledger
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `decide` for the plan `asking` with the gate; wakes the plans a withdrawn waiter
    /// makes room for, or that may start now that every plan has asked once.
    pub fn with_gate<T>(
        &self,
        now: Timestamp,
        asking: &RunKey,
        decide: impl FnOnce(&mut dyn Gate) -> T,
    ) -> T {
        let mut ledger = self.ledger();
        let opened = !ledger.asked(asking, now).is_empty();
        let mut gate = Tracking {
            ledger: &mut ledger,
            freed: false,
        };
        let decided = decide(&mut gate);
        if gate.freed || opened {
            let wake = ledger.wakeups(now);
            self.send(wake);
        }
        decided
    }

    /// The plans that exist at start (the controller's first listing): the gate opens once each
    /// has asked.
    pub fn plans_listed(&self, plans: impl IntoIterator<Item = RunKey>, now: Timestamp) {
        let wake = self.ledger().plans_listed(plans, now);
        if !wake.is_empty() {
            tracing::info!(
                starting = wake.len(),
                "every plan was looked at: opening the gate"
            );
        }
        self.send(wake);
    }

    /// Forgets a deleted plan.
    pub fn forget(&self, key: &RunKey, now: Timestamp) {
        let wake = self.ledger().forget(key, now);
        self.send(wake);
    }

    /// The stream of plans to reconcile because a slot freed (taken once, by the controller).
    pub fn take_wakeups(&self) -> Option<mpsc::UnboundedReceiver<ObjectRef<BackupPlan>>> {
        self.woken.lock().ok()?.take()
    }

    fn send(&self, keys: Vec<RunKey>) {
        for key in keys {
            // A copy waits in its plan's reconcile.
            if let Owner::Plan(name)
            | Owner::Copy { plan: name, .. }
            | Owner::CopyPrune { plan: name, .. }
            | Owner::Drill(name) = key.owner
            {
                let _ = self.wake.send(ObjectRef::new(&name).within(&key.namespace));
            }
        }
    }

    fn update_metrics(&self, metrics: &Metrics) {
        let ledger = self.ledger();
        for class in [RunClass::Backup, RunClass::Maintenance, RunClass::Drill] {
            let labels = QueueLabels {
                class: class_label(class).into(),
            };
            let waiting = i64::try_from(ledger.waiting(class)).unwrap_or(i64::MAX);
            let running = i64::try_from(ledger.running(class)).unwrap_or(i64::MAX);
            metrics
                .queue
                .queued_runs
                .get_or_create(&labels)
                .set(waiting);
            metrics
                .queue
                .running_runs
                .get_or_create(&labels)
                .set(running);
        }
    }
}

fn class_label(class: RunClass) -> &'static str {
    match class {
        RunClass::Backup => "backup",
        RunClass::Maintenance => "maintenance",
        RunClass::Drill => "drill",
        RunClass::Restore => "restore",
    }
}

/// The gate as a reconcile sees it: notes whether a waiter left.
struct Tracking<'a> {
    ledger: &'a mut Ledger,
    freed: bool,
}

impl Gate for Tracking<'_> {
    fn admit(&mut self, demand: &super::Demand, now: Timestamp) -> super::Admission {
        self.ledger.admit(demand, now)
    }
    fn hold(&mut self, key: &RunKey, footprint: &Footprint, now: Timestamp) {
        self.ledger.hold(key, footprint, now);
    }
    fn withdraw(&mut self, key: &RunKey) {
        self.freed |= self.ledger.remove_waiter(key);
    }
}

/// What a Job takes from the limits while it runs; `None` for a Job that is not the operator's.
pub fn job_footprint(job: &Job) -> Option<(JobId, RunKey, Footprint)> {
    let labels = job.labels();
    let (class, owner) = match labels.get(LABEL_OPERATION)?.as_str() {
        // A run's hook Jobs around its VolumeSnapshots hold the slot its backup was admitted to.
        "backup" | crate::job::HOOKS_OPERATION => (
            RunClass::Backup,
            Owner::Plan(labels.get(LABEL_PLAN)?.clone()),
        ),
        // A destination's prune: labelled with its copy.
        "prune" if labels.contains_key(crate::job::LABEL_COPY) => (
            RunClass::Maintenance,
            Owner::CopyPrune {
                plan: labels.get(LABEL_PLAN)?.clone(),
                copy: labels.get(crate::job::LABEL_COPY)?.clone(),
            },
        ),
        "prune" | "check" => (
            RunClass::Maintenance,
            Owner::Plan(labels.get(LABEL_PLAN)?.clone()),
        ),
        crate::job::COPY_OPERATION => (
            RunClass::Maintenance,
            Owner::Copy {
                plan: labels.get(LABEL_PLAN)?.clone(),
                copy: labels.get(crate::job::LABEL_COPY)?.clone(),
            },
        ),
        crate::job::DRILL_OPERATION => (
            RunClass::Drill,
            Owner::Drill(labels.get(LABEL_PLAN)?.clone()),
        ),
        "restore" => (
            RunClass::Restore,
            Owner::Restore(labels.get(LABEL_RESTORE)?.clone()),
        ),
        _ => return None,
    };
    // A protected plan's prune runs in the operator's namespace, for the plan in its own.
    let namespace = match labels.get(LABEL_PLAN_NAMESPACE) {
        Some(plan_namespace) => plan_namespace.clone(),
        None => job.namespace()?,
    };
    // What the Job was made with (`job/pod.rs`), never read back from its pod spec.
    let node = job_annotation(job, ANNOTATION_NODE).map(str::to_owned);
    let host = job_annotation(job, ANNOTATION_REPOSITORY_HOST).map(str::to_owned);
    let id = (job.namespace()?, job.name_any());
    let key = RunKey { namespace, owner };
    Some((id, key, Footprint { class, node, host }))
}

/// Watches the operator's Jobs into the ledger until `stop` resolves; wakes waiting plans when
/// a slot frees, and updates the queue's metrics.
pub async fn run(
    queue: Arc<Queue>,
    client: Client,
    namespace: Option<String>,
    metrics: Arc<Metrics>,
    stop: impl std::future::Future<Output = ()>,
) {
    let api = super::super::scoped_api::<Job>(&client, namespace.as_deref());
    let config = watcher::Config::default().labels(LABEL_OPERATION);
    let mut events = watcher(api, config).default_backoff().boxed();
    let mut listing: Vec<(JobId, RunKey, Footprint)> = Vec::new();
    let mut expire = tokio::time::interval(EXPIRE_EVERY);
    tokio::pin!(stop);
    loop {
        let event = tokio::select! {
            () = &mut stop => return,
            _ = expire.tick() => {
                let wake = queue.ledger().expire(Timestamp::now());
                queue.send(wake);
                queue.update_metrics(&metrics);
                continue;
            }
            event = events.next() => event,
        };
        let now = Timestamp::now();
        let wake = match event {
            None => return,
            Some(Err(error)) => {
                tracing::warn!(%error, "watching Jobs for the concurrency limits");
                continue;
            }
            Some(Ok(Event::Init)) => {
                listing.clear();
                continue;
            }
            Some(Ok(Event::InitApply(job))) => {
                listing.extend(job_footprint(&job).filter(|_| job_finished(&job).is_none()));
                continue;
            }
            Some(Ok(Event::InitDone)) => {
                let wake = queue.ledger().resync(listing.drain(..), now);
                tracing::info!(
                    running = queue.ledger().running(RunClass::Backup),
                    "counted the running Jobs"
                );
                wake
            }
            Some(Ok(Event::Apply(job))) => match job_footprint(&job) {
                Some((id, key, footprint)) => {
                    let running = job_finished(&job).is_none().then_some((key, footprint));
                    queue.ledger().observe_job(id, running, now)
                }
                None => Vec::new(),
            },
            Some(Ok(Event::Delete(job))) => {
                let id = (job.namespace().unwrap_or_default(), job.name_any());
                queue.ledger().observe_job(id, None, now)
            }
        };
        queue.send(wake);
        queue.update_metrics(&metrics);
    }
}

fn watcher(
    api: kube::Api<Job>,
    config: watcher::Config,
) -> impl futures::Stream<Item = Result<Event<Job>, watcher::Error>> + Send {
    watcher::watcher(api, config)
}
