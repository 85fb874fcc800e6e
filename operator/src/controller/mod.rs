//! The reconcilers: fetch what a resource names, decide with the pure functions of this crate,
//! apply the result (Jobs, status by server-side apply, Events).

pub mod backup_plan;
pub mod effects;
pub mod queue;
pub mod restore;
pub mod restore_describe;
#[cfg(test)]
mod restore_describe_tests;
mod restore_fetch;
mod restore_review;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use jiff::SignedDuration;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use kube::api::{Api, ListParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};

use crate::admission::{is_dns_subdomain, SecretTypes};
use crate::api::{BackupPlan, Restore};
use crate::conditions::{ConditionStatus, Reason};
use crate::job::JobSettings;
use crate::metrics::{ErrorLabels, Metrics, ReconcileLabels};
use crate::plan::{secrets_used, SecretKeys, SecretUse};
use crate::recorder::{EventType, Recorder};

/// The field manager of every status the operator applies.
pub const FIELD_MANAGER: &str = "neverwiped-operator";

/// How many BackupPlans are reconciled at once by default: enough to keep the API server busy,
/// few enough that the requests and answers in flight stay small.
pub const DEFAULT_RECONCILE_CONCURRENCY: u16 = 32;

/// Operator-wide settings.
#[derive(Debug, Clone)]
pub struct Settings {
    pub job: JobSettings,
    /// A missed scheduled run is caught up when noticed within this long.
    pub catch_up_window: SignedDuration,
    /// Finished Jobs kept per plan (their status is already recorded).
    pub finished_jobs_to_keep: usize,
    /// How soon a resource that is not ready (a Secret or PVC missing) is looked at again, in
    /// case a watch event was missed (Secrets and PVCs are watched by metadata).
    pub not_ready_recheck: Duration,
    /// Watch only this namespace; `None` watches all.
    pub watch_namespace: Option<String>,
    /// How often a run waiting for its VolumeSnapshots looks at them again.
    pub snapshot_poll: Duration,
    /// What the cluster admin allows plans and Restores to ask for.
    pub tenant_policy: crate::tenant_policy::TenantPolicy,
    /// How many runs may run at once (the chart sets them; none by default here).
    pub limits: queue::Limits,
    /// Reconcile only the BackupPlans and Restores this label selector matches (`None`: all), so
    /// that several operators can share a cluster, each with its own share of the plans.
    pub plan_selector: Option<String>,
    /// How many BackupPlans are reconciled at once (`0`: no limit).
    pub reconcile_concurrency: u16,
    /// This replica's name in the Events it publishes (its pod's name).
    pub instance: String,
    /// When a backup's changes are far outside the plan's history.
    pub suspicion: crate::suspicion::Thresholds,
}

impl Settings {
    /// Settings with the given sidecar image and defaults for the rest.
    pub fn with_image(image: impl Into<String>) -> Settings {
        Settings {
            job: JobSettings {
                image: image.into(),
                drill_image: None,
                drill_image_pull_policy: None,
                image_pull_policy: None,
                default_resources: None,
                protection: Default::default(),
            },
            catch_up_window: crate::schedule::DEFAULT_CATCH_UP_WINDOW,
            finished_jobs_to_keep: 3,
            not_ready_recheck: Duration::from_secs(120),
            watch_namespace: None,
            snapshot_poll: Duration::from_secs(5),
            tenant_policy: Default::default(),
            limits: queue::Limits::UNLIMITED,
            plan_selector: None,
            reconcile_concurrency: DEFAULT_RECONCILE_CONCURRENCY,
            instance: FIELD_MANAGER.into(),
            suspicion: Default::default(),
        }
    }
}

/// What every reconcile gets.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    pub settings: Settings,
    /// The concurrency limits' ledger, shared by every reconcile.
    pub queue: Arc<queue::Queue>,
    /// Consecutive failures per object, for the error backoff.
    failures: Mutex<HashMap<String, u32>>,
}

impl Context {
    pub fn new(client: Client, metrics: Arc<Metrics>, settings: Settings) -> Context {
        Context {
            recorder: Recorder::new(
                client.clone(),
                FIELD_MANAGER.into(),
                settings.instance.clone(),
            ),
            client,
            metrics,
            queue: Arc::new(queue::Queue::new(settings.limits)),
            settings,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Publishes an Event about `object`; a failure to publish is logged, never fatal.
    pub async fn publish<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        type_: EventType,
        reason: Reason,
        note: impl Into<String>,
        action: &str,
    ) {
        let note: String = note.into();
        if let Err(error) = self
            .recorder
            .publish(&object.object_ref(&()), type_, reason, &note, action)
            .await
        {
            tracing::warn!(%error, %reason, "cannot publish an Event");
        }
    }

    /// Counts one reconciliation of an object of `kind`.
    fn count_reconcile(&self, kind: &str) {
        self.metrics
            .reconciliations
            .get_or_create(&ReconcileLabels { kind: kind.into() })
            .inc();
    }

    fn reset_failures(&self, key: &str) {
        if let Ok(mut failures) = self.failures.lock() {
            failures.remove(key);
        }
    }

    /// The next retry delay after a failure: 5 s, doubling, at most 5 minutes.
    fn backoff(&self, key: &str) -> Duration {
        let Ok(mut failures) = self.failures.lock() else {
            return Duration::from_secs(60);
        };
        let count = failures.entry(key.to_owned()).or_insert(0);
        *count = count.saturating_add(1);
        let secs = 5u64.saturating_mul(1 << (*count - 1).min(6));
        Duration::from_secs(secs.min(300))
    }
}

/// Errors of a reconcile: transient ones, retried with backoff. A bad spec is not an error: it is
/// a `Ready=False` condition that waits for a change.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
    #[error("the {kind} has no {field}")]
    Incomplete {
        kind: &'static str,
        field: &'static str,
    },
    /// A protected plan's prune Job cannot get its copy of the repository password.
    #[error("cannot copy the repository password for Job {job}: {problem}")]
    PasswordCopy { job: String, problem: String },
}

impl Error {
    /// A short label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(_)) => "api",
            Error::Kube(_) => "client",
            Error::Incomplete { .. } => "incomplete_object",
            Error::PasswordCopy { .. } => "password_copy",
        }
    }
}

fn object_key<K: Resource<DynamicType = ()>>(object: &K) -> String {
    format!(
        "{}/{}/{}",
        K::kind(&()),
        object.namespace().unwrap_or_default(),
        object.name_any()
    )
}

fn error_policy<K: Resource<DynamicType = ()>>(
    object: Arc<K>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    let kind = K::kind(&()).to_string();
    tracing::warn!(%error, object = %object_key(object.as_ref()), "reconcile failed");
    ctx.metrics
        .reconcile_errors
        .get_or_create(&ErrorLabels {
            kind,
            error: error.metric_label().into(),
        })
        .inc();
    Action::requeue(ctx.backoff(&object_key(object.as_ref())))
}

/// An `Api` over every namespace, or over the one the operator is limited to.
fn scoped_api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    }
}

/// Whether `plan` names the Secret `secret` (in its own namespace).
fn plan_names_secret(plan: &BackupPlan, namespace: Option<&str>, secret: &str) -> bool {
    plan.namespace().as_deref() == namespace
        && secrets_used(&plan.spec).iter().any(|u| u.name == secret)
}

/// Whether a change of a PersistentVolumeClaim in its namespace may change what `plan` decides:
/// only a plan with volumes that is not ready waits for one.
fn plan_waits_for_claims(plan: &BackupPlan, namespace: Option<&str>) -> bool {
    let ready = plan
        .status
        .as_ref()
        .and_then(|s| {
            crate::conditions::find_condition(&s.conditions, crate::conditions::types::READY)
        })
        .is_some_and(|c| ConditionStatus::of(c) == ConditionStatus::True);
    plan.namespace().as_deref() == namespace && !plan.spec.volumes.is_empty() && !ready
}

/// What of a plan, when it changes, calls for a reconcile: its spec (the generation), its
/// deletion, an admin's acknowledgement of a suspicious change and a request for a restore drill
/// (annotations), and its run (`status.activeRun`: a run's next step, its VolumeSnapshots taken and
/// then its Job, follows from the status the last reconcile wrote). The rest of the status is
/// the operator's own account, which it has just written: reconciling after each such write
/// would fetch everything the plan names once more for nothing, and while runs wait for a slot
/// each write of a queued run's place would be followed by another reconcile, and another write
/// as the queue moves on, for every waiting plan.
fn plan_changes_that_matter(plan: &BackupPlan) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    plan.metadata.generation.hash(&mut hasher);
    plan.metadata.deletion_timestamp.is_some().hash(&mut hasher);
    let annotations = plan.metadata.annotations.as_ref();
    for key in [
        crate::api::ANNOTATION_ACKNOWLEDGE_SUSPICIOUS_CHANGE,
        crate::api::ANNOTATION_VERIFY_NOW,
    ] {
        annotations.and_then(|a| a.get(key)).hash(&mut hasher);
    }
    let run = plan.status.as_ref().and_then(|s| s.active_run.as_ref());
    serde_json::to_string(&run)
        .unwrap_or_default()
        .hash(&mut hasher);
    Some(hasher.finish())
}

/// Runs both controllers, and the watch of Jobs that keeps the concurrency limits' ledger, until
/// `stop` resolves (then lets running reconciles finish).
///
/// Secrets and PersistentVolumeClaims are watched by metadata only (no Secret's data is ever
/// listed or held): a plan or Restore waiting for one that is missing runs as soon as it appears.
pub async fn run(
    ctx: Arc<Context>,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let stop = futures::FutureExt::shared(Box::pin(stop));
    let jobs = queue::watch::run(
        ctx.queue.clone(),
        ctx.client.clone(),
        ctx.settings.watch_namespace.clone(),
        ctx.metrics.clone(),
        stop.clone(),
    );
    futures::join!(
        jobs,
        run_plans(ctx.clone(), stop.clone()),
        run_restores(ctx, stop)
    );
}

/// The watch of the BackupPlans or Restores the operator reconciles.
fn selected(settings: &Settings) -> watcher::Config {
    match &settings.plan_selector {
        Some(selector) => watcher::Config::default().labels(selector),
        None => watcher::Config::default(),
    }
}

/// The BackupPlan controller: plans, their Jobs, and the Secrets and claims they wait for.
async fn run_plans<F>(ctx: Arc<Context>, stop: F)
where
    F: std::future::Future<Output = ()> + Send + Sync + 'static,
{
    let client = ctx.client.clone();
    let namespace = ctx.settings.watch_namespace.clone();
    let namespace = namespace.as_deref();
    // A plan is reconciled when its spec changes, when it is being deleted, and when its run
    // moves on ([`plan_changes_that_matter`]); not on the rest of its own status writes. The
    // store holds the plans without their managed fields (never read, and most of an object's
    // bytes once its status has been applied).
    let (reader, writer) = kube::runtime::reflector::store();
    let plan_changes = watcher::watcher(
        scoped_api::<BackupPlan>(&client, namespace),
        selected(&ctx.settings),
    )
    .default_backoff()
    .modify(|plan| plan.managed_fields_mut().clear())
    .reflect(writer)
    .applied_objects()
    .predicate_filter(plan_changes_that_matter, Default::default());
    let plans = Controller::for_stream(plan_changes, reader)
        .with_config(
            kube::runtime::controller::Config::default()
                .concurrency(ctx.settings.reconcile_concurrency),
        )
        .owns(
            scoped_api::<Job>(&client, namespace),
            // A plan's backups, prunes, checks, copies and drills.
            watcher::Config::default().labels(&format!(
                "{} in (backup,prune,check,{},{})",
                crate::job::LABEL_OPERATION,
                crate::job::COPY_OPERATION,
                crate::job::DRILL_OPERATION
            )),
        );
    let plans = match ctx.settings.job.protection.jobs_namespace() {
        Some(own_namespace) => watch_remote_prunes(plans, &client, own_namespace),
        None => plans,
    };
    // The gate opens once every plan listed at start has been looked at (see `queue::census`).
    let census = {
        let store = plans.store();
        let queue = ctx.queue.clone();
        async move {
            if store.wait_until_ready().await.is_ok() {
                let plans = store.state();
                let keys = plans.iter().map(|plan| {
                    queue::RunKey::plan(plan.namespace().unwrap_or_default(), plan.name_any())
                });
                queue.plans_listed(keys, jiff::Timestamp::now());
            }
        }
    };
    let store = plans.store();
    // `Api<PartialObjectMeta<_>>` asks for metadata only.
    let secrets = scoped_api::<PartialObjectMeta<Secret>>(&client, namespace);
    let plans = plans.watches(secrets, watcher::Config::default(), move |secret| {
        let namespace = secret.namespace();
        let name = secret.name_any();
        store
            .state()
            .into_iter()
            .filter(|plan| plan_names_secret(plan, namespace.as_deref(), &name))
            .map(|plan| ObjectRef::from_obj(plan.as_ref()))
            .collect::<Vec<_>>()
    });
    let store = plans.store();
    let claims = scoped_api::<PartialObjectMeta<PersistentVolumeClaim>>(&client, namespace);
    let plans = plans
        .watches(claims, watcher::Config::default(), move |claim| {
            let namespace = claim.namespace();
            store
                .state()
                .into_iter()
                .filter(|plan| plan_waits_for_claims(plan, namespace.as_deref()))
                .map(|plan| ObjectRef::from_obj(plan.as_ref()))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(stop);
    // A plan waiting for a slot is reconciled when one frees.
    let plans = match ctx.queue.take_wakeups() {
        Some(woken) => plans.reconcile_on(futures::stream::unfold(woken, |mut woken| async {
            woken.recv().await.map(|plan| (plan, woken))
        })),
        None => plans,
    };
    let plans = plans
        .run(backup_plan::reconcile, error_policy, ctx.clone())
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "BackupPlan controller");
            }
        });
    futures::join!(plans, census);
}

/// Watches the protected plans' prunes, which run in the operator's namespace (`own_namespace`),
/// found by their labels.
fn watch_remote_prunes(
    plans: Controller<BackupPlan>,
    client: &Client,
    own_namespace: &str,
) -> Controller<BackupPlan> {
    plans.watches(
        Api::<Job>::namespaced(client.clone(), own_namespace),
        watcher::Config::default().labels(crate::job::LABEL_PLAN_NAMESPACE),
        |job| {
            let labels = job.labels();
            let plan = labels.get(crate::job::LABEL_PLAN)?;
            let namespace = labels.get(crate::job::LABEL_PLAN_NAMESPACE)?;
            Some(ObjectRef::<BackupPlan>::new(plan).within(namespace))
        },
    )
}

/// The Restore controller.
async fn run_restores<F>(ctx: Arc<Context>, stop: F)
where
    F: std::future::Future<Output = ()> + Send + Sync + 'static,
{
    let client = ctx.client.clone();
    let namespace = ctx.settings.watch_namespace.clone();
    let namespace = namespace.as_deref();
    // A Restore waits for its plan, Secrets and claims: any change of those in its namespace wakes
    // the unfinished Restores there (they are few and short-lived).
    let restores = Controller::new(
        scoped_api::<Restore>(&client, namespace),
        selected(&ctx.settings),
    )
    // Its describe and restore Jobs: both carry the Restore's label.
    .owns(
        scoped_api::<Job>(&client, namespace),
        watcher::Config::default().labels(crate::job::LABEL_RESTORE),
    );
    let waiting_restores = |store: kube::runtime::reflector::Store<Restore>| {
        move |namespace: Option<String>| {
            store
                .state()
                .into_iter()
                .filter(|restore| {
                    restore.namespace() == namespace
                        && !restore
                            .status
                            .as_ref()
                            .and_then(|s| s.phase)
                            .is_some_and(crate::api::RestorePhase::is_finished)
                })
                .map(|restore| ObjectRef::from_obj(restore.as_ref()))
                .collect::<Vec<_>>()
        }
    };
    let for_secret = waiting_restores(restores.store());
    let for_claim = waiting_restores(restores.store());
    let for_plan = waiting_restores(restores.store());
    let restores = restores
        .watches(
            scoped_api::<PartialObjectMeta<Secret>>(&client, namespace),
            watcher::Config::default(),
            move |secret| for_secret(secret.namespace()),
        )
        .watches(
            scoped_api::<PartialObjectMeta<PersistentVolumeClaim>>(&client, namespace),
            watcher::Config::default(),
            move |claim| for_claim(claim.namespace()),
        )
        .watches(
            scoped_api::<PartialObjectMeta<BackupPlan>>(&client, namespace),
            watcher::Config::default(),
            move |plan| for_plan(plan.namespace()),
        )
        .graceful_shutdown_on(stop)
        .run(restore::reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "Restore controller");
            }
        });
    restores.await;
}

/// Fetches the keys and the types of the Secrets `uses` names; a Secret that does not exist is
/// left out.
async fn fetch_secret_keys(
    client: &Client,
    namespace: &str,
    uses: &[SecretUse],
) -> Result<(SecretKeys, SecretTypes), Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let names: BTreeSet<&str> = uses.iter().map(|u| u.name.as_str()).collect();
    let mut found = BTreeMap::new();
    let mut types = SecretTypes::new();
    // A name that is not an object name would be a path in the request: never fetched.
    for name in names.into_iter().filter(|name| is_dns_subdomain(name)) {
        if let Some(secret) = api.get_opt(name).await? {
            let mut keys: BTreeSet<String> = secret.data.unwrap_or_default().into_keys().collect();
            keys.extend(secret.string_data.unwrap_or_default().into_keys());
            found.insert(name.to_owned(), keys);
            let type_ = secret.type_.unwrap_or_else(|| "Opaque".into());
            types.insert(name.to_owned(), type_);
        }
    }
    Ok((found, types))
}

/// The pod of a Job: owned by it, or labelled with its name; the newest when there are several.
fn pod_of<'a>(job: &Job, pods: &'a [Pod]) -> Option<&'a Pod> {
    let name = job.metadata.name.as_deref()?;
    let uid = job.metadata.uid.as_deref();
    pods.iter()
        .filter(|pod| {
            let owned = pod
                .metadata
                .owner_references
                .as_ref()
                .is_some_and(|owners| owners.iter().any(|o| Some(o.uid.as_str()) == uid));
            let labels = pod.metadata.labels.as_ref();
            let labelled = labels.is_some_and(|l| {
                l.get("batch.kubernetes.io/job-name").map(String::as_str) == Some(name)
                    || l.get("job-name").map(String::as_str) == Some(name)
            });
            owned || labelled
        })
        .max_by_key(|pod| pod.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// Lists objects of a kind the cluster may not serve (the CSI snapshot API is optional): `None`
/// when it does not.
async fn list_if_served<K>(api: &Api<K>, params: &ListParams) -> Result<Option<Vec<K>>, Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.list(params).await {
        Ok(list) => Ok(Some(list.items)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(error) => Err(error.into()),
    }
}
