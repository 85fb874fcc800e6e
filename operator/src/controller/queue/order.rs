//! The queue's order, and what the running Jobs take from the limits.

use std::collections::HashMap;

use jiff::Timestamp;

use super::{Blocker, Footprint, Limits, RunClass, RunKey};

/// Orders waiting runs: drills behind every other run; then one run of each namespace in turn, counting the runs a namespace already
/// has going, so that a namespace with a hundred plans due at midnight does not hold back
/// another's one plan. Among runs of the same turn, the namespace `served` longest ago (or never)
/// goes first, then the oldest run; within a namespace, the oldest run first. Returns indices into
/// `waiters`.
pub fn queue_order(
    waiters: &[(&RunKey, Timestamp)],
    running: &HashMap<&str, usize>,
    served: &HashMap<String, u64>,
) -> Vec<usize> {
    let mut by_age: Vec<usize> = (0..waiters.len()).collect();
    by_age.sort_by(|&a, &b| (waiters[a].1, waiters[a].0).cmp(&(waiters[b].1, waiters[b].0)));
    // Each run's turn in its namespace: the namespace's running runs, then 0 for its oldest
    // waiting run, 1 for the next, ...
    let mut turns_taken: HashMap<&str, usize> = HashMap::new();
    let mut turn = vec![0; waiters.len()];
    for &index in &by_age {
        let namespace = waiters[index].0.namespace.as_str();
        let taken = turns_taken
            .entry(namespace)
            .or_insert_with(|| running.get(namespace).copied().unwrap_or(0));
        turn[index] = *taken;
        *taken += 1;
    }
    // A stable sort: within a turn and a namespace's last service, the oldest first.
    by_age.sort_by_key(|&index| {
        let key = waiters[index].0;
        let namespace = key.namespace.as_str();
        let low = key.owner.is_low_priority();
        (low, turn[index], served.get(namespace).copied())
    });
    by_age
}

/// What runs take from the limits.
#[derive(Debug, Default)]
pub struct Usage<'a> {
    backups: usize,
    maintenance: usize,
    drills: usize,
    nodes: HashMap<&'a str, usize>,
    hosts: HashMap<&'a str, usize>,
}

impl<'a> Usage<'a> {
    pub fn add(&mut self, footprint: &'a Footprint) {
        match footprint.class {
            RunClass::Backup => self.backups += 1,
            RunClass::Maintenance => self.maintenance += 1,
            RunClass::Drill => self.drills += 1,
            RunClass::Restore => {}
        }
        if let Some(node) = &footprint.node {
            *self.nodes.entry(node).or_insert(0) += 1;
        }
        if let Some(host) = &footprint.host {
            *self.hosts.entry(host).or_insert(0) += 1;
        }
    }

    /// The first limit that `footprint` would exceed; `None` when it fits.
    pub fn blocker(&self, footprint: &Footprint, limits: &Limits) -> Option<Blocker> {
        let full = |used: usize, limit: Option<std::num::NonZeroUsize>| {
            limit.map(|l| l.get()).filter(|&l| used >= l)
        };
        let class = match footprint.class {
            RunClass::Backup => full(self.backups, limits.backups).map(Blocker::Backups),
            // Drills share the maintenance limit.
            RunClass::Maintenance | RunClass::Drill => {
                full(self.maintenance + self.drills, limits.maintenance).map(Blocker::Maintenance)
            }
            RunClass::Restore => None,
        };
        let node = footprint.node.as_deref().and_then(|node| {
            let used = self.nodes.get(node).copied().unwrap_or(0);
            full(used, limits.per_node).map(|limit| Blocker::Node {
                node: node.to_owned(),
                limit,
            })
        });
        let host = footprint.host.as_deref().and_then(|host| {
            let used = self.hosts.get(host).copied().unwrap_or(0);
            full(used, limits.per_repository_host).map(|limit| Blocker::RepositoryHost {
                host: host.to_owned(),
                limit,
            })
        });
        class.or(node).or(host)
    }

    /// Running runs of `class`.
    pub fn of_class(&self, class: RunClass) -> usize {
        match class {
            RunClass::Backup => self.backups,
            RunClass::Maintenance => self.maintenance,
            RunClass::Drill => self.drills,
            RunClass::Restore => 0,
        }
    }
}
