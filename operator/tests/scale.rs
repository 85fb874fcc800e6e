//! The operator binary at scale, against the real API server: many BackupPlans due at the same
//! moment under a limit on running backups. The test plays the Job controller (it ends each Job a
//! little after it appears) and checks that no more than the limit run at once, that the others
//! wait as `Queued` in their status and start as slots free, one namespace after another, and
//! that every plan's run is recorded once, across a restart of the operator.
//!
//! `cargo test -p neverwiped-operator --test scale` runs a CI-sized case (60 plans in 6
//! namespaces, a limit of 5). `bench/scale/run.sh` runs the same test at the size its `SCALE_*`
//! variables give (2000 plans in 200 namespaces by default) and prints the figures: time to Ready, Jobs at once, queue order,
//! the operator's peak memory, and its API requests per plan per hour at rest. Both check the
//! same claims ([`assert_claims`]): never more Jobs than the limit, no namespace more than its
//! share while all wait, one run per plan across a restart, no Job started by a restart at rest,
//! and fewer than one API request per plan per hour at rest.

mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use kube::api::{Api, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Client, ResourceExt};
use neverwiped_contract::{ExitStatus, Operation};
use neverwiped_operator::api::BackupPlan;
use serde_json::json;
use support::*;

/// The size of a run.
#[derive(Debug, PartialEq)]
struct Scale {
    plans: usize,
    namespaces: usize,
    /// `NEVERWIPED_MAX_RUNNING_BACKUPS`.
    limit: usize,
    /// How long the test lets each Job run before it ends it.
    hold: Duration,
    /// How long the operator is watched at rest, for its requests and CPU.
    rest: Duration,
    /// Kill the operator once this many runs are recorded, and start it again.
    restart_after: Option<usize>,
}

impl Scale {
    /// The size CI runs: 60 plans in 6 namespaces under a limit of 5.
    const CI: Scale = Scale {
        plans: 60,
        namespaces: 6,
        limit: 5,
        // Long enough that the first wave's five Jobs are all running before the first ends, also
        // when other test binaries load the machine (at 600 ms, a loaded run saw four at once).
        hold: Duration::from_millis(1500),
        rest: Duration::from_secs(10),
        restart_after: Some(25),
    };

    /// The size the `SCALE_*` variables ask for (`bench/scale/run.sh`), else [`Scale::CI`].
    fn from_env() -> Scale {
        let number = |name: &str, default: u64| -> u64 {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        let ci = Scale::CI;
        Scale {
            plans: number("SCALE_PLANS", ci.plans as u64) as usize,
            namespaces: number("SCALE_NAMESPACES", ci.namespaces as u64) as usize,
            limit: number("SCALE_LIMIT", ci.limit as u64) as usize,
            hold: Duration::from_millis(number("SCALE_HOLD_MS", ci.hold.as_millis() as u64)),
            rest: Duration::from_secs(number("SCALE_REST_SECONDS", ci.rest.as_secs())),
            // Killed once this many runs are recorded (`0`: never).
            restart_after: Some(
                number("SCALE_RESTART_AFTER", ci.restart_after.unwrap_or(0) as u64) as usize,
            )
            .filter(|&after| after > 0),
        }
    }
}

/// What a run measured.
#[derive(Debug, Default)]
struct Figures {
    plans: usize,
    limit: usize,
    /// From the operator's start until every plan is `Ready=True`.
    time_to_ready: Option<Duration>,
    /// From the operator's start until every plan's run is recorded.
    time_to_all_recorded: Duration,
    /// The most backup Jobs running at once.
    max_running: usize,
    /// Backup Jobs of other namespaces still running (other tests sharing the API server), at the
    /// start of the runs and at their end: the limit counts every backup Job in the cluster, so
    /// these hold slots the test's plans cannot use.
    held_elsewhere: (usize, usize),
    /// The most plans `Queued` in their status at once.
    max_queued: usize,
    /// Once the first runs were going, the most running Jobs of one namespace at once.
    max_running_in_one_namespace: usize,
    /// The same while every namespace still had plans waiting: a namespace's fair share is
    /// `limit / namespaces`, rounded up.
    max_running_in_one_namespace_while_all_wait: usize,
    /// Namespaces of the Jobs in the order they were created.
    start_order: Vec<String>,
    /// Backup Jobs per plan at the end.
    jobs_per_plan: BTreeMap<String, usize>,
    /// From the end of a Job until the next new Job was seen: mean and median.
    slot_gap: (Duration, Duration),
    /// From a Job first seen until it was ended: mean.
    job_lifetime: Duration,
    peak_rss_kib: u64,
    rss_at_rest_kib: u64,
    /// The operator's requests at rest other than watches (a watch is renewed every few minutes
    /// however many plans there are), per plan per hour.
    requests_per_plan_hour: f64,
    /// Watches the operator opened again at rest.
    watches_at_rest: f64,
    /// The API server's count of requests at rest, by verb and resource, per plan per hour.
    served_at_rest: BTreeMap<(String, String), f64>,
    idle_cpu_percent: f64,
    /// A restart at rest: until every plan was looked at, the requests per plan by verb, the
    /// reconciles per plan, and the backup Jobs created (none should be).
    restart_look: Duration,
    restart_requests_per_plan: BTreeMap<String, f64>,
    restart_reconciles_per_plan: f64,
    /// What the periodic look at every plan at rest costs: the restart's requests other than
    /// watches, once every [`LOOK_AT_REST_HOURS`], per plan per hour.
    look_requests_per_plan_hour: f64,
    jobs_after_restart_at_rest: usize,
}

/// How often the operator looks at a plan at rest when nothing is due sooner (the longest requeue
/// of `controller/backup_plan/decide.rs`).
const LOOK_AT_REST_HOURS: f64 = 6.0;

/// Checks what the figures claim, at any size.
fn assert_claims(scale: &Scale, figures: &Figures) {
    assert!(
        figures.max_running <= scale.limit,
        "{} Jobs ran at once, the limit is {}",
        figures.max_running,
        scale.limit
    );
    // One run per plan: nothing ran twice, nothing was lost, across the restart.
    assert_eq!(figures.jobs_per_plan.len(), scale.plans);
    let not_once: Vec<_> = figures
        .jobs_per_plan
        .iter()
        .filter(|(_, &jobs)| jobs != 1)
        .collect();
    assert!(
        not_once.is_empty(),
        "plans without exactly one run: {not_once:?}"
    );
    // Fairness: while every namespace has plans waiting, none holds more than its share.
    assert!(
        figures.max_running_in_one_namespace_while_all_wait
            <= scale.limit.div_ceil(scale.namespaces),
        "a namespace held {} Jobs while others waited, its share is {}",
        figures.max_running_in_one_namespace_while_all_wait,
        scale.limit.div_ceil(scale.namespaces)
    );
    assert_eq!(
        figures.jobs_after_restart_at_rest, 0,
        "a restart at rest started backups again"
    );
    assert!(
        figures.requests_per_plan_hour < 1.0,
        "{:.3} API requests per plan per hour at rest: {:?}",
        figures.requests_per_plan_hour,
        figures.served_at_rest
    );
    assert!(
        figures.look_requests_per_plan_hour < 1.0,
        "a look at every plan costs {:?} requests per plan, once every {LOOK_AT_REST_HOURS} hours",
        figures.restart_requests_per_plan
    );
}

impl Figures {
    fn print(&self) {
        println!("plans: {} (limit {})", self.plans, self.limit);
        println!("time to Ready: {:?}", self.time_to_ready);
        println!(
            "time until every run was recorded: {:?}",
            self.time_to_all_recorded
        );
        println!("backup Jobs running at once, at most: {}", self.max_running);
        println!(
            "backup Jobs of other namespaces running (other tests'): {} at the start, {} at the end",
            self.held_elsewhere.0, self.held_elsewhere.1
        );
        println!("plans Queued at once, at most: {}", self.max_queued);
        println!(
            "running Jobs of one namespace at once, at most (after the first wave): {}",
            self.max_running_in_one_namespace
        );
        println!(
            "running Jobs of one namespace at once while every namespace had plans waiting, at most: {}",
            self.max_running_in_one_namespace_while_all_wait
        );
        let head: Vec<&str> = self
            .start_order
            .iter()
            .take(30)
            .map(String::as_str)
            .collect();
        println!("first Jobs by namespace: {}", head.join(" "));
        println!(
            "a slot empty from a Job's end until the next Job was seen: mean {:?}, median {:?}; a Job from seen to ended: mean {:?}",
            self.slot_gap.0, self.slot_gap.1, self.job_lifetime
        );
        println!("operator peak RSS: {} KiB", self.peak_rss_kib);
        println!(
            "API requests per plan per hour at rest: {:.3} in the window (and {} watches renewed); \
             {:.3} for the look at every plan every {LOOK_AT_REST_HOURS} hours",
            self.requests_per_plan_hour, self.watches_at_rest, self.look_requests_per_plan_hour
        );
        for ((verb, resource), count) in &self.served_at_rest {
            println!(
                "  the API server's count at rest: {verb} {resource}: {count:.3} per plan per hour"
            );
        }
        println!("operator CPU at rest: {:.2} %", self.idle_cpu_percent);
        println!("operator RSS at rest: {} KiB", self.rss_at_rest_kib);
        let once = self
            .jobs_per_plan
            .values()
            .filter(|&&jobs| jobs == 1)
            .count();
        println!(
            "plans with exactly one backup Job: {once} of {} ({} with a Job)",
            self.plans,
            self.jobs_per_plan.len()
        );
        println!(
            "restart at rest: every plan looked at after {:?}, {:.2} reconciles per plan, requests per plan {:?}, backup Jobs created {}",
            self.restart_look,
            self.restart_reconciles_per_plan,
            self.restart_requests_per_plan,
            self.jobs_after_restart_at_rest
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_due_at_once_run_within_the_limit_in_fair_order() {
    if !api_server_or_skip() {
        return;
    }
    let scale = Scale::from_env();
    let figures = run(&scale).await;
    assert_claims(&scale, &figures);
    if scale != Scale::CI {
        // bench/scale/run.sh's size: the claims above are what it must keep.
        return;
    }
    // Every slot the operator could give was used: the limit, less the slots other tests' Jobs
    // hold (they may have ended during the runs).
    let (at_start, at_end) = figures.held_elsewhere;
    let usable =
        scale.limit.saturating_sub(at_start.max(at_end))..=scale.limit - at_start.min(at_end);
    assert!(
        usable.contains(&figures.max_running),
        "the slots were used: {} Jobs at most, {usable:?} expected ({at_start} held by other tests' \
         Jobs at the start, {at_end} at the end)",
        figures.max_running
    );
    assert!(
        figures.max_queued >= scale.plans - scale.limit - 5,
        "the others waited as Queued: at most {} at once",
        figures.max_queued
    );
    // Namespaces take turns: ten plans each, and none waits behind another's. The first runs
    // admitted are one of each namespace; the runs woken together when several slots free at once
    // create their Jobs concurrently, so their Jobs may appear in another order, within one wake-up
    // (at most `limit` runs). And while every namespace has plans waiting, none holds more than
    // its share of the slots.
    let first: BTreeSet<&String> = figures
        .start_order
        .iter()
        .take(scale.namespaces + scale.limit - 1)
        .collect();
    assert_eq!(
        first.len(),
        scale.namespaces,
        "a namespace waited behind others: {:?}",
        figures.start_order
    );
    assert_eq!(
        figures.max_running_in_one_namespace_while_all_wait,
        scale.limit.div_ceil(scale.namespaces),
        "a namespace held more than its share while others waited"
    );
    assert!(figures
        .time_to_ready
        .is_some_and(|t| t < Duration::from_secs(60)));
}

/// Creates the namespaces and plans, runs the operator, plays the Job controller until every
/// plan's run is recorded, then watches the operator at rest.
async fn run(scale: &Scale) -> Figures {
    apply_crds();
    let client = client().await;
    let namespaces: Vec<TestNamespace> = (0..scale.namespaces)
        .map(|_| TestNamespace::create("scale"))
        .collect();
    let names: Vec<String> = namespaces.iter().map(|n| n.name.clone()).collect();
    let selector = format!("neverwiped-scale={}", std::process::id());
    create_plans(&client, &names, scale.plans, &selector).await;

    let env = |limit: &str| -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("NEVERWIPED_WATCH_NAMESPACE", String::new()),
            ("NEVERWIPED_PLAN_SELECTOR", selector.clone()),
            ("NEVERWIPED_MAX_RUNNING_BACKUPS", limit.to_owned()),
            ("NEVERWIPED_MAX_RUNNING_PER_REPOSITORY_HOST", "0".into()),
            ("NEVERWIPED_LEADER_ELECTION", "false".into()),
            (
                "RUST_LOG",
                std::env::var("SCALE_LOG").unwrap_or_else(|_| "info".into()),
            ),
        ];
        // To compare settings: the operator's reconcile concurrency.
        if let Ok(concurrency) = std::env::var("SCALE_CONCURRENCY") {
            env.push(("NEVERWIPED_RECONCILE_CONCURRENCY", concurrency));
        }
        env
    };
    let limit = scale.limit.to_string();
    let start = |identity: &str| {
        let env = env(&limit);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Operator::start_with(&names[0], identity, &env)
    };
    let held_at_start = running_backup_jobs_elsewhere(&client, &names).await;
    let started = Instant::now();
    let mut operator = start("scale-1");
    let mut figures = Figures {
        plans: scale.plans,
        limit: scale.limit,
        ..Figures::default()
    };
    let mut restarted = scale.restart_after.is_none();
    let mut peak_rss = 0;
    // The first wave fills the slots other tests' Jobs leave.
    let first_wave = scale.limit.saturating_sub(held_at_start).max(1);
    let mut job_controller =
        JobController::new(&client, &names, scale.plans, first_wave, scale.hold);
    let deadline = started
        + Duration::from_secs(120 + scale.plans as u64 / 2)
        + scale.hold * (3 * scale.plans / scale.limit.max(1)) as u32;
    // The harness watches the plans and Jobs (listing thousands every few hundred milliseconds
    // would load the API server more than the operator does).
    let mut plans = PlanStates::watch(&client, &selector, &names);
    loop {
        job_controller.step(&mut figures).await;
        plans.catch_up();
        assert!(
            Instant::now() < deadline,
            "the runs did not finish in time: {} ready, {} queued, {} recorded, {} Jobs seen",
            plans.ready(),
            plans.queued(),
            plans.recorded(),
            job_controller.seen.len()
        );
        figures.max_queued = figures.max_queued.max(plans.queued());
        if plans.ready() == scale.plans && figures.time_to_ready.is_none() {
            figures.time_to_ready = Some(started.elapsed());
        }
        peak_rss = peak_rss.max(peak_rss_kib(operator.pid()));
        if !restarted && plans.recorded() >= scale.restart_after.unwrap_or(0) {
            // A crash: the new operator counts the running Jobs before it admits any.
            operator.kill();
            operator = start("scale-2");
            restarted = true;
        }
        if plans.recorded() == scale.plans {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    figures.time_to_all_recorded = started.elapsed();
    figures.held_elsewhere = (
        held_at_start,
        running_backup_jobs_elsewhere(&client, &names).await,
    );
    figures.jobs_per_plan = job_controller.jobs_per_plan.clone();
    figures.start_order = job_controller.start_order.clone();
    figures.slot_gap = (
        job_controller.slot_gaps.mean(),
        job_controller.slot_gaps.median(),
    );
    let lifetimes = &job_controller.lifetimes;
    figures.job_lifetime = lifetimes.iter().sum::<Duration>()
        / u32::try_from(lifetimes.len().max(1)).unwrap_or(u32::MAX);
    // The harness's watches are over (what runs after this is counted from lists).
    drop(plans);
    drop(job_controller);

    // At rest (once the last status writes are over): what the operator asks of the API server
    // (by its own count, and by the API server's), and its CPU, over a window of `scale.rest`.
    wait_until_quiet(&operator).await;
    let requests_before = requests_by_verb(&operator);
    let served_before = api_server_requests(&client).await;
    let cpu_before = cpu_ticks(operator.pid());
    tokio::time::sleep(scale.rest).await;
    let requests = requests_since(&operator, &requests_before);
    let ticks = cpu_ticks(operator.pid()) - cpu_before;
    let served = api_server_requests(&client).await;
    let per_plan_hour = 3600.0 / scale.rest.as_secs_f64() / scale.plans as f64;
    figures.watches_at_rest = requests.get("WATCH").copied().unwrap_or(0.0);
    figures.requests_per_plan_hour =
        (requests.values().sum::<f64>() - figures.watches_at_rest) * per_plan_hour;
    figures.served_at_rest = served
        .iter()
        .map(|(key, count)| (key.clone(), count - served_before.get(key).unwrap_or(&0.0)))
        .filter(|(_, count)| *count > 0.0)
        .map(|(key, count)| (key, count * per_plan_hour))
        .collect();
    // Clock ticks are 1/100 s on Linux.
    figures.idle_cpu_percent = ticks as f64 / scale.rest.as_secs_f64();
    figures.peak_rss_kib = peak_rss.max(peak_rss_kib(operator.pid()));
    figures.rss_at_rest_kib = rss_kib(operator.pid());

    // A restart at rest: the new operator looks at every plan once, as its periodic look at each
    // plan does, and nothing runs again and no status is written.
    let jobs_before = backup_jobs(&client, &names).await;
    operator.kill();
    let restarted_at = Instant::now();
    operator = start("scale-3");
    eventually(
        "the restarted operator to look at every plan",
        Duration::from_secs(120 + scale.plans as u64 / 10),
        || {
            let operator = &operator;
            async move {
                let looked = operator
                    .metric("neverwiped_reconciliations_total{kind=\"BackupPlan\"}")
                    .unwrap_or(0.0);
                (looked >= scale.plans as f64).then_some(())
            }
        },
    )
    .await;
    figures.restart_look = restarted_at.elapsed();
    // Every look has begun; once the operator sends nothing more they are all over, and a Job
    // any of them created is in the API server's list.
    wait_until_quiet(&operator).await;
    figures.jobs_after_restart_at_rest = backup_jobs(&client, &names)
        .await
        .saturating_sub(jobs_before);
    figures.restart_requests_per_plan = requests_by_verb(&operator)
        .into_iter()
        .map(|(verb, count)| (verb, count / scale.plans as f64))
        .collect();
    let look_requests: f64 = figures
        .restart_requests_per_plan
        .iter()
        .filter(|(verb, _)| verb.as_str() != "WATCH")
        .map(|(_, count)| count)
        .sum();
    figures.restart_reconciles_per_plan = operator
        .metric("neverwiped_reconciliations_total{kind=\"BackupPlan\"}")
        .unwrap_or(0.0)
        / scale.plans as f64;
    // The periodic look is one reconcile of each plan; a restart may reconcile a plan twice (its
    // own status update wakes it), so its requests are counted per reconcile.
    figures.look_requests_per_plan_hour =
        look_requests / figures.restart_reconciles_per_plan.max(1.0) / LOOK_AT_REST_HOURS;
    figures.peak_rss_kib = figures.peak_rss_kib.max(peak_rss_kib(operator.pid()));
    // Before the clean-up, which takes minutes for thousands of plans.
    figures.print();
    drop(operator);
    remove_plans(&client, &names).await;
    drop(namespaces);
    figures
}

/// Deletes the plans, their finalizers first (their operator is gone), a few at once: the
/// namespaces' clean-up then has nothing left to patch one by one.
async fn remove_plans(client: &Client, namespaces: &[String]) {
    let patch = json!({"metadata": {"finalizers": null}});
    let plans: Vec<(String, String)> = futures::stream::iter(namespaces)
        .then(|namespace| async move {
            let api: Api<PartialObjectMeta<BackupPlan>> =
                Api::namespaced(client.clone(), namespace);
            let listed = api
                .list_metadata(&Default::default())
                .await
                .map(|l| l.items);
            listed
                .unwrap_or_default()
                .into_iter()
                .map(|plan| (namespace.clone(), plan.name_any()))
                .collect::<Vec<_>>()
        })
        .concat()
        .await;
    futures::stream::iter(plans)
        .for_each_concurrent(16, |(namespace, name)| {
            let patch = &patch;
            async move {
                let api: Api<BackupPlan> = Api::namespaced(client.clone(), &namespace);
                let params = kube::api::PatchParams::default();
                let _ = api
                    .patch(&name, &params, &kube::api::Patch::Merge(patch))
                    .await;
                let _ = api.delete(&name, &Default::default()).await;
            }
        })
        .await;
}

/// In each namespace a password Secret and a claim; the plans spread over the namespaces, each
/// with a manual trigger, so that all are due at once, and a nightly schedule that is not due
/// during the run.
async fn create_plans(client: &Client, namespaces: &[String], plans: usize, selector: &str) {
    let (label, value) = selector.split_once('=').expect("key=value");
    // A nightly window at least three hours away from now: no plan's scheduled run falls in the
    // run and muddles what is counted at rest and after the restart.
    let hour = jiff::Timestamp::now().as_second().rem_euclid(86_400) / 3600;
    let hours = if (10..20).contains(&hour) {
        "1-5"
    } else {
        "13-17"
    };
    let schedule = format!("H H({hours}) * * *");
    let schedule = schedule.as_str();
    for namespace in namespaces {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
        let secret = serde_json::from_value(json!({
            "metadata": {"name": "repo"},
            "stringData": {"password": "scale test password 41c9"},
        }))
        .unwrap();
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
        let claim = serde_json::from_value(json!({
            "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        }))
        .unwrap();
        claims.create(&PostParams::default(), &claim).await.unwrap();
    }
    futures::stream::iter(0..plans)
        .map(|index| {
            let namespace = &namespaces[index % namespaces.len()];
            let api: Api<BackupPlan> = Api::namespaced(client.clone(), namespace);
            let plan: BackupPlan = serde_json::from_value(json!({
                "apiVersion": "neverwiped.io/v1alpha1", "kind": "BackupPlan",
                "metadata": {"name": format!("plan-{index}"), "labels": {label: value}},
                "spec": {
                    "schedule": schedule,
                    "manualTrigger": "scale",
                    "repository": {
                        "url": format!("http://gate.scale.test:8000/{namespace}/{index}"),
                        "passwordSecretRef": {"name": "repo", "key": "password"},
                    },
                    "volumes": [{"claimName": "data"}],
                    "copyMethod": "Direct",
                    "maintenance": {"prune": {"suspend": true}, "check": {"suspend": true}},
                },
            }))
            .unwrap();
            async move { api.create(&PostParams::default(), &plan).await.map(|_| ()) }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await
        .expect("the plans are created");
}

/// How long the harness keeps the first Jobs running while it waits for the first wave.
const FIRST_WAVE_WAIT: Duration = Duration::from_secs(20);

/// Plays the Job controller: ends each backup Job `hold` after it first saw it, none of the
/// first wave before the first wave's Jobs were seen (or [`FIRST_WAVE_WAIT`] passed). It sees the Jobs
/// through a watch of their metadata, in the order the API server stored them.
struct JobController<'a> {
    client: &'a Client,
    namespaces: BTreeSet<String>,
    /// Plans per namespace, and how many of them have started.
    plans_in: BTreeMap<String, usize>,
    started_in: BTreeMap<String, usize>,
    hold: Duration,
    jobs: Watch<PartialObjectMeta<Job>>,
    /// Every Job seen, with when it was first seen and its namespace.
    seen: HashMap<String, (Instant, String)>,
    /// Jobs seen and not ended yet.
    running: BTreeMap<String, (Instant, String, String)>,
    start_order: Vec<String>,
    jobs_per_plan: BTreeMap<String, usize>,
    /// When each Job was ended, oldest first, not yet paired with a new Job.
    ends: std::collections::VecDeque<Instant>,
    slot_gaps: SlotGaps,
    /// From a Job first seen until the harness ended it (the hold, and the harness's delay).
    lifetimes: Vec<Duration>,
    /// The Jobs the first wave should reach: the slots the limit leaves to the test's plans.
    first_wave: usize,
}

impl<'a> JobController<'a> {
    fn new(
        client: &'a Client,
        namespaces: &[String],
        plans: usize,
        first_wave: usize,
        hold: Duration,
    ) -> JobController<'a> {
        let mut plans_in = BTreeMap::new();
        for index in 0..plans {
            *plans_in
                .entry(namespaces[index % namespaces.len()].clone())
                .or_insert(0) += 1;
        }
        let api: Api<PartialObjectMeta<Job>> = Api::all(client.clone());
        let config = watcher::Config::default().labels("neverwiped.io/operation=backup");
        JobController {
            client,
            namespaces: namespaces.iter().cloned().collect(),
            plans_in,
            started_in: BTreeMap::new(),
            hold,
            jobs: Watch::start(api, config),
            seen: HashMap::new(),
            running: BTreeMap::new(),
            start_order: Vec::new(),
            jobs_per_plan: BTreeMap::new(),
            ends: Default::default(),
            slot_gaps: SlotGaps::default(),
            lifetimes: Vec::new(),
            first_wave,
        }
    }

    /// Takes in the Jobs the watch has delivered so far.
    fn catch_up(&mut self) {
        while let Ok((now, event)) = self.jobs.events.try_recv() {
            let Some((namespace, key, job)) = applied_in(&self.namespaces, event) else {
                continue;
            };
            if self.seen.contains_key(&key) {
                continue;
            }
            self.seen.insert(key.clone(), (now, namespace.clone()));
            self.running
                .insert(key, (now, namespace.clone(), job.name_any()));
            self.start_order.push(namespace.clone());
            if self.start_order.len() > self.first_wave {
                if let Some(end) = self.ends.pop_front() {
                    self.slot_gaps.gaps.push(now.saturating_duration_since(end));
                }
            }
            *self.started_in.entry(namespace.clone()).or_insert(0) += 1;
            let plan = job
                .labels()
                .get("neverwiped.io/plan")
                .cloned()
                .unwrap_or_default();
            // The run each plan is given (its manual trigger) counts; a plan's hashed schedule
            // may also fall in the run when it is run between 01:00 and 06:00 UTC.
            let trigger = job.annotations().get("neverwiped.io/trigger");
            if trigger.map(String::as_str) == Some("Manual") {
                *self
                    .jobs_per_plan
                    .entry(format!("{namespace}/{plan}"))
                    .or_insert(0) += 1;
            }
        }
    }

    async fn step(&mut self, figures: &mut Figures) {
        self.catch_up();
        let mut running_by_namespace: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, namespace, _) in self.running.values() {
            *running_by_namespace.entry(namespace).or_insert(0) += 1;
        }
        figures.max_running = figures.max_running.max(self.running.len());
        let most = running_by_namespace.values().copied().max().unwrap_or(0);
        if self.start_order.len() > figures.limit {
            figures.max_running_in_one_namespace = figures.max_running_in_one_namespace.max(most);
        }
        let every_namespace_waits = self
            .plans_in
            .iter()
            .all(|(namespace, plans)| self.started_in.get(namespace).unwrap_or(&0) < plans);
        if every_namespace_waits {
            figures.max_running_in_one_namespace_while_all_wait = figures
                .max_running_in_one_namespace_while_all_wait
                .max(most);
        }
        // The first wave: no Job ends before the first wave's were seen (for at most
        // FIRST_WAVE_WAIT), so a loaded machine that stores them slowly still shows whether the
        // operator fills every slot.
        let first_wave_filling = self.seen.len() < self.first_wave
            && self
                .running
                .values()
                .all(|(seen, _, _)| seen.elapsed() < FIRST_WAVE_WAIT);
        if first_wave_filling {
            return;
        }
        let hold = self.hold;
        let to_end: Vec<(String, String)> = self
            .running
            .iter()
            .filter(|(_, (seen, _, _))| seen.elapsed() >= hold)
            .map(|(key, _)| key.clone())
            .collect::<Vec<_>>()
            .into_iter()
            .filter_map(|key| {
                let (seen, namespace, name) = self.running.remove(&key)?;
                self.lifetimes.push(seen.elapsed());
                Some((namespace, name))
            })
            .collect();
        let client = self.client;
        let mut ended: Vec<Instant> = futures::stream::iter(to_end)
            .map(|(namespace, name)| async move {
                let ending = Ending::Result {
                    exit_code: 0,
                    result: Box::new(run_result(Operation::Backup, ExitStatus::Success)),
                };
                finish_job(client, &namespace, &name, ending).await;
                Instant::now()
            })
            .buffer_unordered(8)
            .collect()
            .await;
        ended.sort();
        self.ends.extend(ended);
    }
}

/// How long a slot stays empty: from the end of a Job (its status written) until the next new
/// Job is seen, pairing ends and starts in order.
#[derive(Debug, Default)]
struct SlotGaps {
    gaps: Vec<Duration>,
}

impl SlotGaps {
    fn mean(&self) -> Duration {
        let total: Duration = self.gaps.iter().sum();
        total / u32::try_from(self.gaps.len().max(1)).unwrap_or(u32::MAX)
    }

    fn median(&self) -> Duration {
        let mut sorted = self.gaps.clone();
        sorted.sort();
        sorted.get(sorted.len() / 2).copied().unwrap_or_default()
    }
}

/// A watch drained by a task of its own as fast as the API server sends (a stream polled only
/// between the harness's steps lags behind thousands of changes), each event with when it came.
/// The task ends when this is dropped.
struct Watch<K> {
    events: tokio::sync::mpsc::UnboundedReceiver<(Instant, Event<K>)>,
    task: tokio::task::JoinHandle<()>,
}

impl<K> Watch<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    fn start(api: Api<K>, config: watcher::Config) -> Watch<K> {
        let (sender, events) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let mut stream = watcher::watcher(api, config).default_backoff().boxed();
            while let Some(event) = stream.next().await {
                // An error (a watch expired) is followed by a fresh listing.
                let Ok(event) = event else { continue };
                if sender.send((Instant::now(), event)).is_err() {
                    return;
                }
            }
        });
        Watch { events, task }
    }
}

impl<K> Drop for Watch<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Each plan's state as the harness last saw it, from a watch of the plans.
struct PlanStates {
    plans: Watch<BackupPlan>,
    namespaces: BTreeSet<String>,
    /// `namespace/name` → (ready, queued, recorded).
    states: HashMap<String, (bool, bool, bool)>,
}

impl PlanStates {
    fn watch(client: &Client, selector: &str, namespaces: &[String]) -> PlanStates {
        let api: Api<BackupPlan> = Api::all(client.clone());
        let config = watcher::Config::default().labels(selector);
        PlanStates {
            plans: Watch::start(api, config),
            namespaces: namespaces.iter().cloned().collect(),
            states: HashMap::new(),
        }
    }

    /// Takes in the changes the watch has delivered so far.
    fn catch_up(&mut self) {
        while let Ok((_, event)) = self.plans.events.try_recv() {
            let Some((_, key, plan)) = applied_in(&self.namespaces, event) else {
                continue;
            };
            let Some(status) = plan.status else { continue };
            let ready = status
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status.as_str() == "True");
            let state = (ready, status.queued.is_some(), status.last_run.is_some());
            self.states.insert(key, state);
        }
    }

    fn ready(&self) -> usize {
        self.states.values().filter(|s| s.0).count()
    }

    fn queued(&self) -> usize {
        self.states.values().filter(|s| s.1).count()
    }

    fn recorded(&self) -> usize {
        self.states.values().filter(|s| s.2).count()
    }
}

/// An object a watch delivered as created or changed, with its namespace and `namespace/name`,
/// when it is in one of `namespaces`.
fn applied_in<K: ResourceExt>(
    namespaces: &BTreeSet<String>,
    event: Event<K>,
) -> Option<(String, String, K)> {
    let object = match event {
        Event::Apply(object) | Event::InitApply(object) => object,
        Event::Delete(_) | Event::Init | Event::InitDone => return None,
    };
    let namespace = object.namespace().unwrap_or_default();
    if !namespaces.contains(&namespace) {
        return None;
    }
    let key = format!("{namespace}/{}", object.name_any());
    Some((namespace, key, object))
}

/// The sum of the operator's `neverwiped_api_requests_total` series.
fn api_requests(operator: &Operator) -> f64 {
    requests_by_verb(operator).values().sum()
}

/// The operator's requests by verb since it counted `before`.
fn requests_since(operator: &Operator, before: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    requests_by_verb(operator)
        .into_iter()
        .map(|(verb, count)| {
            let since = count - before.get(&verb).unwrap_or(&0.0);
            (verb, since)
        })
        .filter(|(_, count)| *count > 0.0)
        .collect()
}

/// Waits until the operator has sent no request for two seconds: the reconciles it had begun
/// are over (each sends requests until it ends). Fails after two minutes of requests.
async fn wait_until_quiet(operator: &Operator) {
    let quiet_for = Duration::from_secs(2);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last = api_requests(operator);
    let mut since = Instant::now();
    while since.elapsed() < quiet_for {
        assert!(
            Instant::now() < deadline,
            "the operator still sends requests after two minutes"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = api_requests(operator);
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
}

/// The backup Jobs in `namespaces`, counted from one list (a consistent read of the API server,
/// unlike a watch that may lag behind).
async fn backup_jobs(client: &Client, namespaces: &[String]) -> usize {
    let api: Api<PartialObjectMeta<Job>> = Api::all(client.clone());
    let params = kube::api::ListParams::default().labels("neverwiped.io/operation=backup");
    let jobs = api.list_metadata(&params).await.expect("the backup Jobs");
    jobs.items
        .iter()
        .filter(|job| namespaces.contains(&job.namespace().unwrap_or_default()))
        .count()
}

/// The backup Jobs outside `namespaces` that have not finished: the operator counts them against
/// its limit (it watches every namespace).
async fn running_backup_jobs_elsewhere(client: &Client, namespaces: &[String]) -> usize {
    let api: Api<Job> = Api::all(client.clone());
    let params = kube::api::ListParams::default().labels("neverwiped.io/operation=backup");
    let jobs = api.list(&params).await.expect("the backup Jobs");
    jobs.items
        .iter()
        .filter(|job| !namespaces.contains(&job.namespace().unwrap_or_default()))
        .filter(|job| neverwiped_operator::status::job_finished(job).is_none())
        .count()
}

/// The operator's `neverwiped_api_requests_total`, by verb.
fn requests_by_verb(operator: &Operator) -> BTreeMap<String, f64> {
    let mut counts = BTreeMap::new();
    for line in operator.metrics().lines() {
        let Some(rest) = line.strip_prefix("neverwiped_api_requests_total{verb=\"") else {
            continue;
        };
        let Some((verb, value)) = rest.split_once("\"}") else {
            continue;
        };
        if let Ok(value) = value.trim().parse::<f64>() {
            *counts.entry(verb.to_owned()).or_insert(0.0) += value;
        }
    }
    counts
}

/// The API server's `apiserver_request_total`, summed by verb and resource (requests for
/// resources only: not its `/metrics` itself).
async fn api_server_requests(client: &Client) -> BTreeMap<(String, String), f64> {
    let request = hyper::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client
        .request_text(request)
        .await
        .expect("the API server's metrics");
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|pair| pair.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_owned())
                .unwrap_or_default()
        };
        let (verb, resource) = (label("verb"), label("resource"));
        if resource.is_empty() {
            continue;
        }
        let subresource = label("subresource");
        let resource = if subresource.is_empty() {
            resource
        } else {
            format!("{resource}/{subresource}")
        };
        *counts.entry((verb, resource)).or_insert(0.0) += value.parse::<f64>().unwrap_or(0.0);
    }
    counts
}

/// The process's resident memory now (`VmRSS`), in KiB.
fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// The process's peak resident memory (`VmHWM`), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:")
}

/// A figure in KiB of the process's `/proc/PID/status` (0 when it cannot be read).
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The process's user and system CPU time, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command name in parentheses: state is field 3, utime 14, stime 15.
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |index: usize| {
        fields
            .get(index)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(11) + field(12)
}
