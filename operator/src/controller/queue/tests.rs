//! The gate's decisions, without a cluster.

use std::collections::VecDeque;
use std::num::NonZeroUsize;

use jiff::{SignedDuration, Timestamp};

use super::*;

fn at(minute: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + minute * 60).unwrap()
}

fn limits(backups: usize) -> Limits {
    Limits {
        backups: NonZeroUsize::new(backups),
        maintenance: NonZeroUsize::new(1),
        per_node: NonZeroUsize::new(2),
        per_repository_host: NonZeroUsize::new(10),
    }
}

fn backup(namespace: &str, plan: &str, since: i64) -> Demand {
    Demand {
        key: RunKey::plan(namespace, plan),
        footprint: Footprint {
            class: RunClass::Backup,
            node: None,
            host: Some("gate:8000".into()),
        },
        since: at(since),
    }
}

fn on_node(mut demand: Demand, node: &str) -> Demand {
    demand.footprint.node = Some(node.into());
    demand
}

fn position(admission: &Admission) -> Option<usize> {
    match admission {
        Admission::Admitted => None,
        Admission::Queued { position, .. } => Some(*position),
    }
}

/// The Job an admitted run creates, as the watch sees it.
fn job_seen(ledger: &mut Ledger, demand: &Demand, now: Timestamp) -> Vec<RunKey> {
    let id = (
        demand.key.namespace.clone(),
        format!("{:?}", demand.key.owner),
    );
    ledger.observe_job(
        id,
        Some((demand.key.clone(), demand.footprint.clone())),
        now,
    )
}

fn job_finished(ledger: &mut Ledger, demand: &Demand, now: Timestamp) -> Vec<RunKey> {
    let id = (
        demand.key.namespace.clone(),
        format!("{:?}", demand.key.owner),
    );
    ledger.observe_job(id, None, now)
}

#[test]
fn runs_beyond_the_limit_wait_and_the_oldest_starts_when_a_slot_frees() {
    let mut ledger = Ledger::synced(limits(2));
    let (a, b, c, d) = (
        backup("shop", "a", 0),
        backup("shop", "b", 1),
        backup("blog", "c", 2),
        backup("wiki", "d", 3),
    );
    assert_eq!(ledger.admit(&a, at(0)), Admission::Admitted);
    assert_eq!(ledger.admit(&b, at(1)), Admission::Admitted);
    assert_eq!(
        ledger.admit(&d, at(3)),
        Admission::Queued {
            position: 1,
            waiting: 1,
            blocked_by: Blocker::Backups(2)
        }
    );
    // c asked earlier than d (its status says so), so it goes ahead of d.
    assert_eq!(position(&ledger.admit(&c, at(4))), Some(1));
    assert_eq!(position(&ledger.admit(&d, at(4))), Some(2));
    assert_eq!(ledger.waiting(RunClass::Backup), 2);

    // The admitted runs' Jobs appear; one finishes: c (the oldest waiting) is woken, not d.
    assert!(job_seen(&mut ledger, &a, at(5)).is_empty());
    assert!(job_seen(&mut ledger, &b, at(5)).is_empty());
    assert_eq!(ledger.running(RunClass::Backup), 2);
    assert_eq!(job_finished(&mut ledger, &a, at(6)), vec![c.key.clone()]);
    // d asking first does not take c's slot.
    assert_eq!(position(&ledger.admit(&d, at(6))), Some(2));
    assert_eq!(ledger.admit(&c, at(6)), Admission::Admitted);
    assert_eq!(ledger.running(RunClass::Backup), 2);
}

#[test]
fn namespaces_take_turns_in_the_queue() {
    let mut ledger = Ledger::synced(limits(1));
    assert_eq!(
        ledger.admit(&backup("x", "running", 0), at(0)),
        Admission::Admitted
    );
    // A namespace with three plans due at once, another with one due a little later.
    for (plan, since) in [("a1", 1), ("a2", 1), ("a3", 1)] {
        ledger.admit(&backup("big", plan, since), at(1));
    }
    ledger.admit(&backup("small", "s1", 2), at(2));
    let places: Vec<Option<usize>> = [
        backup("big", "a1", 1),
        backup("small", "s1", 2),
        backup("big", "a2", 1),
        backup("big", "a3", 1),
    ]
    .iter()
    .map(|d| position(&ledger.admit(d, at(3))))
    .collect();
    assert_eq!(places, [Some(1), Some(2), Some(3), Some(4)]);
}

#[test]
fn a_namespace_with_runs_going_waits_behind_one_without() {
    let mut ledger = Ledger::synced(limits(2));
    assert_eq!(
        ledger.admit(&backup("big", "a1", 0), at(0)),
        Admission::Admitted
    );
    assert_eq!(
        ledger.admit(&backup("big", "a2", 0), at(0)),
        Admission::Admitted
    );
    // big's third plan is older than small's, but big already has two running.
    ledger.admit(&backup("big", "a3", 1), at(1));
    assert_eq!(
        position(&ledger.admit(&backup("small", "s1", 2), at(2))),
        Some(1)
    );
    assert_eq!(
        position(&ledger.admit(&backup("big", "a3", 1), at(2))),
        Some(2)
    );
}

#[test]
fn a_full_node_holds_back_only_runs_on_that_node() {
    let mut ledger = Ledger::synced(limits(10));
    let first = on_node(backup("a", "p1", 0), "node-1");
    let second = on_node(backup("a", "p2", 0), "node-1");
    let third = on_node(backup("b", "p3", 1), "node-1");
    let elsewhere = on_node(backup("c", "p4", 2), "node-2");
    assert_eq!(ledger.admit(&first, at(0)), Admission::Admitted);
    assert_eq!(ledger.admit(&second, at(0)), Admission::Admitted);
    assert_eq!(
        ledger.admit(&third, at(1)),
        Admission::Queued {
            position: 1,
            waiting: 1,
            blocked_by: Blocker::Node {
                node: "node-1".into(),
                limit: 2
            }
        }
    );
    // Behind it in the queue, but on another node: it starts.
    assert_eq!(ledger.admit(&elsewhere, at(2)), Admission::Admitted);
}

#[test]
fn prunes_and_checks_have_their_own_limit_and_restores_count_against_the_host() {
    let mut ledger = Ledger::synced(Limits {
        per_repository_host: NonZeroUsize::new(2),
        ..limits(10)
    });
    let restore = Footprint {
        class: RunClass::Restore,
        node: None,
        host: Some("gate:8000".into()),
    };
    let restore_key = RunKey {
        namespace: "shop".into(),
        owner: Owner::Restore("yesterday".into()),
    };
    let id = ("shop".to_string(), "restore-yesterday".to_string());
    ledger.observe_job(id.clone(), Some((restore_key, restore)), at(0));
    let prune = Demand {
        footprint: Footprint {
            class: RunClass::Maintenance,
            ..backup("shop", "p", 0).footprint
        },
        ..backup("shop", "p", 0)
    };
    assert_eq!(ledger.admit(&prune, at(0)), Admission::Admitted);
    let check = Demand {
        key: RunKey::plan("blog", "q"),
        ..prune.clone()
    };
    assert_eq!(
        position(&ledger.admit(&check, at(0))),
        Some(1),
        "one prune or check at a time"
    );
    // A backup is not held back by the maintenance limit, but the restore and the prune fill
    // the gate's two slots.
    assert!(matches!(
        ledger.admit(&backup("wiki", "r", 0), at(0)),
        Admission::Queued {
            blocked_by: Blocker::RepositoryHost { .. },
            ..
        }
    ));
    // The restore ends: the backup may go, the check still waits for the prune.
    let woken = ledger.observe_job(id, None, at(1));
    assert_eq!(woken, vec![RunKey::plan("wiki", "r")]);
}

#[test]
fn nothing_is_admitted_before_the_running_jobs_are_counted() {
    let mut ledger = Ledger::new(limits(1));
    let early = backup("shop", "a", 0);
    ledger.plans_listed([early.key.clone()], at(0));
    ledger.asked(&early.key, at(0));
    assert!(matches!(
        ledger.admit(&early, at(0)),
        Admission::Queued {
            blocked_by: Blocker::Counting,
            ..
        }
    ));
    // After a restart the list shows one backup running: the limit of one is taken.
    let running = backup("blog", "b", 0);
    let id = ("blog".to_string(), "b-1".to_string());
    let woken = ledger.resync([(id.clone(), running.key, running.footprint)], at(1));
    assert!(woken.is_empty());
    assert_eq!(position(&ledger.admit(&early, at(1))), Some(1));
    assert_eq!(ledger.observe_job(id, None, at(2)), vec![early.key.clone()]);
    assert_eq!(ledger.admit(&early, at(2)), Admission::Admitted);
}

#[test]
fn an_unlimited_gate_admits_before_counting() {
    let mut ledger = Ledger::new(Limits::UNLIMITED);
    assert_eq!(
        ledger.admit(&backup("a", "b", 0), at(0)),
        Admission::Admitted
    );
}

#[test]
fn an_admitted_run_whose_job_never_appears_frees_its_slot() {
    let mut ledger = Ledger::synced(limits(1));
    let lost = backup("shop", "a", 0);
    let next = backup("shop", "b", 0);
    assert_eq!(ledger.admit(&lost, at(0)), Admission::Admitted);
    // Asking again (the create failed, the reconcile retries) keeps the same slot.
    assert_eq!(ledger.admit(&lost, at(1)), Admission::Admitted);
    assert_eq!(position(&ledger.admit(&next, at(1))), Some(1));
    let later = at(1) + RESERVATION_TTL + SignedDuration::from_secs(1);
    assert_eq!(ledger.expire(later), vec![next.key.clone()]);
    assert_eq!(ledger.admit(&next, later), Admission::Admitted);
}

#[test]
fn a_run_taking_snapshots_keeps_its_slot() {
    let mut ledger = Ledger::synced(limits(1));
    let preparing = backup("shop", "a", 0);
    assert_eq!(ledger.admit(&preparing, at(0)), Admission::Admitted);
    let mut now = at(0);
    for _ in 0..10 {
        now += SignedDuration::from_secs(60);
        ledger.hold(&preparing.key, &preparing.footprint, now);
        assert!(ledger.expire(now).is_empty());
    }
    assert_eq!(position(&ledger.admit(&backup("b", "b", 1), now)), Some(1));
}

#[test]
fn a_waiter_that_leaves_makes_room_and_a_forgotten_one_expires() {
    let mut ledger = Ledger::synced(limits(1));
    let running = backup("a", "running", 0);
    let gone = backup("b", "gone", 1);
    let stays = backup("c", "stays", 2);
    ledger.admit(&running, at(0));
    ledger.admit(&gone, at(1));
    ledger.admit(&stays, at(2));
    assert_eq!(position(&ledger.admit(&stays, at(2))), Some(2));
    assert!(ledger.remove_waiter(&gone.key));
    assert_eq!(position(&ledger.admit(&stays, at(3))), Some(1));
    let much_later = at(3) + WAITER_TTL;
    ledger.expire(much_later);
    assert_eq!(ledger.waiting(RunClass::Backup), 0);
}

/// The runs that have started, and those going now, as the controller plays them.
struct Played<'a> {
    demands: &'a [Demand],
    started: Vec<&'a Demand>,
    going: VecDeque<&'a Demand>,
}

impl<'a> Played<'a> {
    /// `demand` asks; when admitted its Job appears. Checks that the namespace taking a slot had
    /// no more runs going than any other namespace with a run waiting.
    fn ask(&mut self, ledger: &mut Ledger, demand: &'a Demand, now: Timestamp) -> bool {
        if ledger.admit(demand, now) != Admission::Admitted {
            return false;
        }
        let going = |namespace: &str| {
            let of = |d: &&&Demand| d.key.namespace == namespace;
            self.going.iter().filter(of).count()
        };
        let waiting = self
            .demands
            .iter()
            .filter(|d| d.key != demand.key && !self.started.iter().any(|s| s.key == d.key));
        for other in waiting {
            let (mine, theirs) = (going(&demand.key.namespace), going(&other.key.namespace));
            assert!(
                mine <= theirs,
                "{:?} started with {mine} going while {:?} waited with {theirs}",
                demand.key,
                other.key,
            );
        }
        self.started.push(demand);
        job_seen(ledger, demand, now);
        self.going.push_back(demand);
        true
    }
}

/// Plays the controller from a start: every plan asks (the gate opens when the last one has), the
/// woken runs start; then the Jobs end one at a time in the order they started, and each time the
/// runs the ledger wakes ask again. Returns the namespaces in the order their runs started.
fn play(limits: Limits, demands: &[Demand]) -> Vec<String> {
    let mut ledger = Ledger::new(limits);
    let mut now = at(10);
    ledger.resync([], now);
    ledger.plans_listed(demands.iter().map(|d| d.key.clone()), now);
    let mut played = Played {
        demands,
        started: Vec::new(),
        going: VecDeque::new(),
    };
    let mut woken = Vec::new();
    for demand in demands {
        woken.extend(ledger.asked(&demand.key, now));
        played.ask(&mut ledger, demand, now);
    }
    loop {
        for key in woken.drain(..) {
            let demand = demands.iter().find(|d| d.key == key).unwrap();
            if !played.started.iter().any(|s| s.key == key) {
                assert!(played.ask(&mut ledger, demand, now), "a woken run starts");
            }
        }
        let Some(done) = played.going.pop_front() else {
            break;
        };
        now += SignedDuration::from_secs(1);
        woken = job_finished(&mut ledger, done, now);
    }
    assert_eq!(played.started.len(), demands.len(), "every run started");
    (played.started.iter())
        .map(|d| d.key.namespace.clone())
        .collect()
}

#[test]
fn namespaces_start_their_runs_in_turn_and_each_namespace_its_oldest_first() {
    // Six namespaces of ten plans each, all due at once; the plans of "n0" were looked at first
    // (the oldest), those of "n5" last.
    let demands: Vec<Demand> = (0..6)
        .flat_map(|namespace| {
            (0..10).map(move |plan| {
                backup(
                    &format!("n{namespace}"),
                    &format!("p{plan}"),
                    namespace * 10 + plan,
                )
            })
        })
        .collect();
    let order = play(limits(5), &demands);
    // The first six runs to start are one of each namespace, then every namespace's second...
    for round in order.chunks(6) {
        let namespaces: std::collections::BTreeSet<&String> = round.iter().collect();
        assert_eq!(namespaces.len(), 6, "{order:?}");
    }
}

#[test]
fn the_gate_opens_once_every_listed_plan_has_asked() {
    let mut ledger = Ledger::new(limits(2));
    let (late, early, other) = (
        backup("a", "late", 0),
        backup("a", "early", 1),
        backup("b", "other", 2),
    );
    assert!(ledger.resync([], at(0)).is_empty());
    // Asked before the plans were listed: it counts.
    assert!(matches!(
        ledger.admit(&early, at(0)),
        Admission::Queued {
            blocked_by: Blocker::Counting,
            ..
        }
    ));
    ledger.asked(&early.key, at(0));
    let keys = [late.key.clone(), early.key.clone(), other.key.clone()];
    assert!(ledger.plans_listed(keys, at(0)).is_empty());
    ledger.asked(&other.key, at(0));
    assert!(matches!(
        ledger.admit(&other, at(0)),
        Admission::Queued {
            blocked_by: Blocker::Counting,
            ..
        }
    ));
    // The last one asks: the gate opens, and the two oldest of namespace "a" and "b" are woken,
    // not whoever asked first.
    assert!(!ledger.asked(&late.key, at(1)).is_empty());
    assert_eq!(ledger.admit(&late, at(1)), Admission::Admitted);
    assert_eq!(position(&ledger.admit(&early, at(1))), Some(2));
    assert_eq!(ledger.admit(&other, at(1)), Admission::Admitted);
}

#[test]
fn a_run_preparing_snapshots_holds_its_slot_across_a_restart() {
    // After a restart: one plan is taking VolumeSnapshots (no Job yet), another waits.
    let mut ledger = Ledger::new(limits(1));
    let preparing = backup("a", "preparing", 0);
    let waiting = backup("b", "waiting", 1);
    ledger.resync([], at(0));
    ledger.plans_listed([preparing.key.clone(), waiting.key.clone()], at(0));
    // The waiting plan is looked at first: the gate is still closed.
    ledger.asked(&waiting.key, at(0));
    assert!(matches!(
        ledger.admit(&waiting, at(0)),
        Admission::Queued {
            blocked_by: Blocker::Counting,
            ..
        }
    ));
    // The preparing plan is looked at: the gate opens, the plan holds its slot again (in the same
    // reconcile), and nobody else fits.
    ledger.asked(&preparing.key, at(0));
    ledger.hold(&preparing.key, &preparing.footprint, at(0));
    assert!(ledger.wakeups(at(0)).is_empty());
    assert!(matches!(
        ledger.admit(&waiting, at(0)),
        Admission::Queued {
            blocked_by: Blocker::Backups(1),
            ..
        }
    ));
}

#[test]
fn the_gate_opens_in_time_without_a_plan_that_never_asks() {
    let mut ledger = Ledger::new(limits(1));
    let asks = backup("a", "asks", 0);
    ledger.resync([], at(0));
    ledger.plans_listed([asks.key.clone(), RunKey::plan("a", "broken")], at(0));
    ledger.asked(&asks.key, at(0));
    ledger.admit(&asks, at(0));
    let later = at(0) + CENSUS_TIMEOUT;
    assert_eq!(ledger.expire(later), vec![asks.key.clone()]);
    assert_eq!(ledger.admit(&asks, later), Admission::Admitted);
}

fn drill(namespace: &str, plan: &str, since: i64) -> Demand {
    Demand {
        key: RunKey {
            namespace: namespace.into(),
            owner: Owner::Drill(plan.into()),
        },
        footprint: Footprint {
            class: RunClass::Drill,
            node: None,
            host: Some("gate:8000".into()),
        },
        since: at(since),
    }
}

fn prune(namespace: &str, plan: &str, since: i64) -> Demand {
    Demand {
        footprint: Footprint {
            class: RunClass::Maintenance,
            ..backup(namespace, plan, since).footprint
        },
        ..backup(namespace, plan, since)
    }
}

#[test]
fn drills_share_the_maintenance_limit_and_wait_behind_every_other_run() {
    let mut ledger = Ledger::synced(limits(5));
    // A drill runs: the one maintenance slot is taken, by it.
    let first = drill("a", "orders", 0);
    assert_eq!(ledger.admit(&first, at(0)), Admission::Admitted);
    job_seen(&mut ledger, &first, at(0));
    let older_drill = drill("b", "shop", 1);
    let newer_prune = prune("c", "blog", 5);
    for demand in [&older_drill, &newer_prune] {
        let Admission::Queued { blocked_by, .. } = ledger.admit(demand, at(5)) else {
            panic!("{demand:?} waits for the maintenance slot");
        };
        assert_eq!(blocked_by, Blocker::Maintenance(1));
    }
    // The prune asked later, but a drill waits behind it.
    assert_eq!(position(&ledger.admit(&newer_prune, at(6))), Some(1));
    assert_eq!(position(&ledger.admit(&older_drill, at(6))), Some(2));
    assert_eq!(ledger.running(RunClass::Drill), 1);
    assert_eq!(ledger.running(RunClass::Maintenance), 0);
    assert_eq!(ledger.waiting(RunClass::Drill), 1);
    let woken = job_finished(&mut ledger, &first, at(7));
    assert_eq!(
        woken,
        std::slice::from_ref(&newer_prune.key),
        "the prune goes first"
    );
    // Backups are not held back by drills.
    assert_eq!(
        ledger.admit(&backup("b", "shop", 8), at(8)),
        Admission::Admitted
    );
}
