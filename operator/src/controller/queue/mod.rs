//! The gate every backup, prune and check passes before its Job is created: how many run at once
//! in the cluster (backups and maintenance counted apart), on one node (runs that read volumes
//! directly there) and against one repository host (one gate's load).
//!
//! [`Ledger`] is the pure part: what runs (from the operator's Jobs), what was admitted and has no
//! Job yet, and who waits, in order: oldest first, one run of each namespace in turn. The
//! reconciler asks it through the [`Gate`] trait; [`watch`] keeps it up to date from a watch of
//! the operator's Jobs and wakes the waiting plans that fit when a slot frees. Restore drills wait
//! behind every backup and maintenance run. Restores are never
//! queued (someone waits for their data), but their Jobs count against the node and host limits,
//! so they go before every queued backup.

mod census;
mod ledger;
mod order;
pub mod watch;

#[cfg(test)]
mod tests;

use std::fmt;
use std::num::NonZeroUsize;

use jiff::Timestamp;

pub use census::CENSUS_TIMEOUT;
pub use ledger::{Ledger, QUEUED_RECHECK, RESERVATION_TTL, WAITER_TTL};
pub use watch::Queue;

/// The concurrency limits; `None` is no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Backup Jobs running in the cluster.
    pub backups: Option<NonZeroUsize>,
    /// Prune, check, copy and drill Jobs running in the cluster.
    pub maintenance: Option<NonZeroUsize>,
    /// Jobs pinned to one node (volumes read directly there), of every kind.
    pub per_node: Option<NonZeroUsize>,
    /// Jobs of every kind talking to one repository host (`host:port` of the URL).
    pub per_repository_host: Option<NonZeroUsize>,
}

impl Limits {
    /// No limit at all.
    pub const UNLIMITED: Limits = Limits {
        backups: None,
        maintenance: None,
        per_node: None,
        per_repository_host: None,
    };
}

impl Default for Limits {
    /// The chart's defaults: a few dozen backups, a few prunes and checks, a few per node.
    fn default() -> Limits {
        Limits {
            backups: NonZeroUsize::new(25),
            maintenance: NonZeroUsize::new(5),
            per_node: NonZeroUsize::new(3),
            per_repository_host: NonZeroUsize::new(10),
        }
    }
}

/// What a run is, as the limits count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RunClass {
    Backup,
    /// A prune, a check or a copy: repository work nobody waits for.
    Maintenance,
    /// A restore drill: counted with maintenance against its limit, and queued behind every
    /// backup and maintenance run (a drill proves old data; they keep the data coming).
    Drill,
    /// Never queued; counted against the node and host limits.
    Restore,
}

/// Who runs: a plan (one backup, prune or check at a time) or a Restore.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunKey {
    pub namespace: String,
    pub owner: Owner,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Owner {
    Plan(String),
    Restore(String),
    /// A plan's copy to one destination: it runs beside the plan's backups, so it has its own
    /// place.
    Copy {
        plan: String,
        copy: String,
    },
    /// The prune of a plan's copy destination (its `retention`): it runs beside the plan's runs
    /// and never beside its destination's copy, so it has a place of its own too.
    CopyPrune {
        plan: String,
        copy: String,
    },
    /// A plan's restore drill: it runs while the plan is otherwise idle, and waits behind every
    /// other run, so it has a place of its own.
    Drill(String),
}

impl Owner {
    /// Whether runs of this owner wait behind every other (drills).
    pub fn is_low_priority(&self) -> bool {
        matches!(self, Owner::Drill(_))
    }
}

impl RunKey {
    pub fn plan(namespace: impl Into<String>, name: impl Into<String>) -> RunKey {
        RunKey {
            namespace: namespace.into(),
            owner: Owner::Plan(name.into()),
        }
    }
}

/// What a run takes from the limits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Footprint {
    pub class: RunClass,
    /// The node it must run on (volumes read directly).
    pub node: Option<String>,
    /// The repository host it talks to.
    pub host: Option<String>,
}

/// A run that asks to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Demand {
    pub key: RunKey,
    pub footprint: Footprint,
    /// When it first asked (kept across restarts in the plan's status): its place in the queue.
    pub since: Timestamp,
}

/// The gate's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Start it now: a slot is held for it until its Job appears.
    Admitted,
    /// It waits: `position` of `waiting` (1 is next), and the limit that is full.
    Queued {
        position: usize,
        waiting: usize,
        blocked_by: Blocker,
    },
}

/// The limit a queued run waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocker {
    /// The operator has not yet counted the Jobs that run, or looked at every plan once (it just
    /// started).
    Counting,
    Backups(usize),
    Maintenance(usize),
    Node {
        node: String,
        limit: usize,
    },
    RepositoryHost {
        host: String,
        limit: usize,
    },
}

impl fmt::Display for Blocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Blocker::Counting => write!(
                f,
                "the operator is counting the Jobs that run and the runs that wait"
            ),
            Blocker::Backups(limit) => write!(f, "{limit} backups run in the cluster (the limit)"),
            Blocker::Maintenance(limit) => {
                write!(
                    f,
                    "{limit} prunes, checks, copies and drills run in the cluster (the limit)"
                )
            }
            Blocker::Node { node, limit } => {
                write!(f, "{limit} Jobs run on node {node} (the limit)")
            }
            Blocker::RepositoryHost { host, limit } => {
                write!(f, "{limit} Jobs use repository host {host} (the limit)")
            }
        }
    }
}

/// What the reconciler asks of the gate; [`Ledger`] answers, and a test may answer otherwise.
pub trait Gate {
    /// Whether `demand` may start now; an admitted run holds a slot until its Job is seen.
    fn admit(&mut self, demand: &Demand, now: Timestamp) -> Admission;
    /// A run that started without a Job yet (VolumeSnapshots being taken) keeps its slot.
    fn hold(&mut self, key: &RunKey, footprint: &Footprint, now: Timestamp);
    /// `key` no longer waits (nothing is due, or it is not ready).
    fn withdraw(&mut self, key: &RunKey);
}

/// A gate that admits everything: no limits.
pub struct Open;

impl Gate for Open {
    fn admit(&mut self, _: &Demand, _: Timestamp) -> Admission {
        Admission::Admitted
    }
    fn hold(&mut self, _: &RunKey, _: &Footprint, _: Timestamp) {}
    fn withdraw(&mut self, _: &RunKey) {}
}
