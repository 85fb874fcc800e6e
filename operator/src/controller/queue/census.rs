//! The first look after a start: until every plan listed at start has asked the gate once, no run
//! is admitted. Only then does the queue hold every run that waits (not just those of the plans
//! reconciled first), so the first slots go in the queue's order; and a run admitted before a
//! restart that has no Job yet (its VolumeSnapshots are being taken) holds its slot again before
//! any other run is admitted.

use std::collections::HashSet;

use jiff::{SignedDuration, Timestamp};

use super::RunKey;

/// How long after the listing the gate opens even if some plans have not asked (their reconcile
/// keeps failing): their runs then queue as they come.
pub const CENSUS_TIMEOUT: SignedDuration = SignedDuration::from_mins(2);

/// Which plans have asked the gate since the start.
#[derive(Debug)]
pub enum Census {
    /// The plans are not listed yet: the ones that asked so far.
    Listing(HashSet<RunKey>),
    /// Listed: the plans that have not asked yet, and when the gate opens regardless.
    Counting {
        unseen: HashSet<RunKey>,
        until: Timestamp,
    },
    /// Every plan has asked (or the time is up).
    Done,
}

impl Census {
    pub fn new() -> Census {
        Census::Listing(HashSet::new())
    }

    pub fn is_done(&self) -> bool {
        matches!(self, Census::Done)
    }

    /// `key` asked the gate. Returns whether that completed the census.
    pub fn asked(&mut self, key: &RunKey, now: Timestamp) -> bool {
        match self {
            Census::Listing(asked) => {
                asked.insert(key.clone());
                false
            }
            Census::Counting { unseen, .. } => {
                unseen.remove(key);
                self.settle(now)
            }
            Census::Done => false,
        }
    }

    /// The plans that exist, as listed at start. Returns whether that completed the census.
    pub fn listed(&mut self, plans: impl IntoIterator<Item = RunKey>, now: Timestamp) -> bool {
        let Census::Listing(asked) = self else {
            return false;
        };
        let unseen = plans
            .into_iter()
            .filter(|key| !asked.contains(key))
            .collect();
        *self = Census::Counting {
            unseen,
            until: now + CENSUS_TIMEOUT,
        };
        self.settle(now)
    }

    /// A plan was deleted: it will not ask. Returns whether that completed the census.
    pub fn forget(&mut self, key: &RunKey, now: Timestamp) -> bool {
        if let Census::Counting { unseen, .. } = self {
            unseen.remove(key);
        }
        self.settle(now)
    }

    /// Returns whether the census is complete now and was not before (every plan asked, or the
    /// time is up).
    pub fn settle(&mut self, now: Timestamp) -> bool {
        match self {
            Census::Counting { unseen, until } if unseen.is_empty() || now >= *until => {
                if !unseen.is_empty() {
                    tracing::warn!(
                        missing = unseen.len(),
                        "opening the gate although some plans have not been looked at"
                    );
                }
                tracing::info!("every plan has been looked at: the gate opens");
                *self = Census::Done;
                true
            }
            _ => false,
        }
    }
}
