//! [`Ledger`]: the cluster-wide view the gate decides on. No I/O: the watch feeds it Jobs, the
//! reconciler asks it, and every change that may free a slot returns the plans to wake.

use std::collections::HashMap;

use jiff::{SignedDuration, Timestamp};

use super::census::Census;
use super::order::{queue_order, Usage};
use super::{Admission, Blocker, Demand, Footprint, Gate, Limits, RunClass, RunKey};

/// An admitted run holds its slot this long without a Job of it being seen (the create failed,
/// or the operator that admitted it stopped); a run taking VolumeSnapshots renews it.
pub const RESERVATION_TTL: SignedDuration = SignedDuration::from_mins(2);
/// A waiting run that has not asked again for this long is forgotten (its plan was deleted, or
/// changed, while nobody looked). Queued plans ask at least every [`QUEUED_RECHECK`].
pub const WAITER_TTL: SignedDuration = SignedDuration::from_mins(15);
/// How often a queued plan looks again without being woken (a safety net: a freed slot wakes it).
pub const QUEUED_RECHECK: std::time::Duration = std::time::Duration::from_secs(300);

/// A Job of the operator, as the watch saw it: `(namespace, name)`.
pub type JobId = (String, String);

#[derive(Debug, Clone)]
struct Held {
    footprint: Footprint,
    expires: Timestamp,
}

#[derive(Debug, Clone)]
struct Waiter {
    footprint: Footprint,
    since: Timestamp,
    seen: Timestamp,
}

/// What runs and what waits, cluster-wide.
#[derive(Debug)]
pub struct Ledger {
    limits: Limits,
    /// Whether the Jobs that exist have been listed once: until then nothing is admitted.
    synced: bool,
    /// Whether every plan has asked once since the start: until then nothing is admitted.
    census: Census,
    /// Running Jobs (finished ones leave).
    jobs: HashMap<JobId, (RunKey, Footprint)>,
    /// Admitted runs whose Job has not been seen yet.
    held: HashMap<RunKey, Held>,
    waiting: HashMap<RunKey, Waiter>,
    /// When each namespace last had a run admitted (a count of admissions, not a time: two in
    /// the same instant are still ordered): the namespace served longest ago goes first.
    served: HashMap<String, u64>,
    admissions: u64,
}

impl Ledger {
    pub fn new(limits: Limits) -> Ledger {
        Ledger {
            limits,
            synced: false,
            census: Census::new(),
            jobs: HashMap::new(),
            held: HashMap::new(),
            waiting: HashMap::new(),
            served: HashMap::new(),
            admissions: 0,
        }
    }

    /// A ledger that has already counted the Jobs (none) and the plans: for tests and
    /// single-shot tools.
    pub fn synced(limits: Limits) -> Ledger {
        Ledger {
            synced: true,
            census: Census::Done,
            ..Ledger::new(limits)
        }
    }

    /// Whether runs may be admitted: the running Jobs are counted and every plan has asked once.
    fn open(&self) -> bool {
        self.synced && self.census.is_done()
    }

    /// A plan asks the gate (each reconcile does, ready or not). Returns the plans to wake when
    /// this was the last plan the gate waited for.
    pub fn asked(&mut self, key: &RunKey, now: Timestamp) -> Vec<RunKey> {
        if self.census.asked(key, now) {
            self.wakeups(now)
        } else {
            Vec::new()
        }
    }

    /// The plans that exist at start; the gate opens once each has asked. Returns the plans to
    /// wake when they all have already.
    pub fn plans_listed(
        &mut self,
        plans: impl IntoIterator<Item = RunKey>,
        now: Timestamp,
    ) -> Vec<RunKey> {
        if self.census.listed(plans, now) {
            self.wakeups(now)
        } else {
            Vec::new()
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// A Job was seen: running (`Some`) or finished or deleted (`None`). Returns the plans to wake.
    pub fn observe_job(
        &mut self,
        id: JobId,
        running: Option<(RunKey, Footprint)>,
        now: Timestamp,
    ) -> Vec<RunKey> {
        match running {
            Some((key, footprint)) => {
                self.held.remove(&key);
                self.jobs.insert(id, (key, footprint));
                Vec::new()
            }
            None => match self.jobs.remove(&id) {
                Some(_) => self.wakeups(now),
                None => Vec::new(),
            },
        }
    }

    /// The Jobs as a fresh list shows them (at start, and when the watch lists again).
    pub fn resync(
        &mut self,
        running: impl IntoIterator<Item = (JobId, RunKey, Footprint)>,
        now: Timestamp,
    ) -> Vec<RunKey> {
        self.jobs = running
            .into_iter()
            .map(|(id, key, footprint)| (id, (key, footprint)))
            .collect();
        let keys: Vec<RunKey> = self.jobs.values().map(|(key, _)| key.clone()).collect();
        for key in keys {
            self.held.remove(&key);
        }
        self.synced = true;
        self.wakeups(now)
    }

    /// Forgets what expired; returns the plans to wake when that freed a slot.
    pub fn expire(&mut self, now: Timestamp) -> Vec<RunKey> {
        let before = (self.held.len(), self.waiting.len());
        self.held.retain(|_, held| held.expires > now);
        self.waiting
            .retain(|_, waiter| now.duration_since(waiter.seen) < WAITER_TTL);
        let opened = self.census.settle(now);
        if (self.held.len(), self.waiting.len()) == before && !opened {
            Vec::new()
        } else {
            self.wakeups(now)
        }
    }

    /// The waiting plans that would be admitted now, in queue order.
    pub fn wakeups(&self, _now: Timestamp) -> Vec<RunKey> {
        if !self.open() {
            return Vec::new();
        }
        let mut usage = self.usage();
        let mut wake = Vec::new();
        for key in self.ordered() {
            let footprint = &self.waiting[key].footprint;
            if usage.blocker(footprint, &self.limits).is_none() {
                usage.add(footprint);
                wake.push(key.clone());
            }
        }
        wake
    }

    /// Forgets a waiting run; whether it waited (then others may fit now).
    pub fn remove_waiter(&mut self, key: &RunKey) -> bool {
        self.waiting.remove(key).is_some()
    }

    /// Forgets everything about `key` (its plan was deleted).
    pub fn forget(&mut self, key: &RunKey, now: Timestamp) -> Vec<RunKey> {
        let waited = self.waiting.remove(key).is_some();
        let held = self.held.remove(key).is_some();
        let opened = self.census.forget(key, now);
        if waited || held || opened {
            self.wakeups(now)
        } else {
            Vec::new()
        }
    }

    /// Waiting runs of `class`.
    pub fn waiting(&self, class: RunClass) -> usize {
        let of_class = |w: &&Waiter| w.footprint.class == class;
        self.waiting.values().filter(of_class).count()
    }

    /// Running (or admitted) runs of `class`.
    pub fn running(&self, class: RunClass) -> usize {
        self.usage().of_class(class)
    }

    /// What the running Jobs and the admitted runs take.
    fn usage(&self) -> Usage<'_> {
        let mut usage = Usage::default();
        for (_, footprint) in self.jobs.values() {
            usage.add(footprint);
        }
        for held in self.held.values() {
            usage.add(&held.footprint);
        }
        usage
    }

    /// The waiting runs in queue order.
    fn ordered(&self) -> Vec<&RunKey> {
        let waiters: Vec<(&RunKey, Timestamp)> =
            self.waiting.iter().map(|(k, w)| (k, w.since)).collect();
        let mut running: HashMap<&str, usize> = HashMap::new();
        let keys = (self.jobs.values().map(|(key, _)| key)).chain(self.held.keys());
        for key in keys {
            *running.entry(key.namespace.as_str()).or_insert(0) += 1;
        }
        queue_order(&waiters, &running, &self.served)
            .into_iter()
            .map(|index| waiters[index].0)
            .collect()
    }

    /// Whether a Job of `key` runs already (the reconcile that created it may not know yet).
    fn has_job(&self, key: &RunKey) -> bool {
        self.jobs.values().any(|(k, _)| k == key)
    }
}

impl Gate for Ledger {
    fn admit(&mut self, demand: &Demand, now: Timestamp) -> Admission {
        let key = &demand.key;
        if let Some(held) = self.held.get_mut(key) {
            held.expires = now + RESERVATION_TTL;
            return Admission::Admitted;
        }
        if self.has_job(key) {
            return Admission::Admitted;
        }
        let waiter = self.waiting.entry(key.clone()).or_insert(Waiter {
            footprint: demand.footprint.clone(),
            since: demand.since,
            seen: now,
        });
        waiter.footprint = demand.footprint.clone();
        waiter.since = waiter.since.min(demand.since);
        waiter.seen = now;
        let ordered = self.ordered();
        let waiting = ordered.len();
        if !self.open() && self.limits != Limits::UNLIMITED {
            let position = ordered.iter().position(|k| *k == key).unwrap_or(0) + 1;
            return Admission::Queued {
                position,
                waiting,
                blocked_by: Blocker::Counting,
            };
        }
        // Runs ahead that fit take their slots first; runs ahead that do not fit (another
        // node, another host) do not hold back those behind them.
        let mut usage = self.usage();
        for (index, ahead) in ordered.iter().enumerate() {
            let footprint = &self.waiting[*ahead].footprint;
            let blocked_by = usage.blocker(footprint, &self.limits);
            if *ahead == key {
                return match blocked_by {
                    Some(blocked_by) => Admission::Queued {
                        position: index + 1,
                        waiting,
                        blocked_by,
                    },
                    None => {
                        let footprint = footprint.clone();
                        self.waiting.remove(key);
                        let expires = now + RESERVATION_TTL;
                        self.held.insert(key.clone(), Held { footprint, expires });
                        self.admissions += 1;
                        (self.served).insert(key.namespace.clone(), self.admissions);
                        Admission::Admitted
                    }
                };
            }
            if blocked_by.is_none() {
                usage.add(footprint);
            }
        }
        unreachable!("the demand was just queued")
    }

    fn hold(&mut self, key: &RunKey, footprint: &Footprint, now: Timestamp) {
        self.waiting.remove(key);
        if !self.has_job(key) {
            let held = Held {
                footprint: footprint.clone(),
                expires: now + RESERVATION_TTL,
            };
            self.held.insert(key.clone(), held);
        }
    }

    fn withdraw(&mut self, key: &RunKey) {
        self.remove_waiter(key);
    }
}
