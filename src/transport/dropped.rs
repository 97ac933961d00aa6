//! The QP numbers of recently dropped connections, so that their completions still queued in
//! the completion queue at the drop are recognised as theirs (and discarded, their shared
//! receive queue buffers reposted) instead of waiting forever among the early completions of
//! connections not attached yet.
//!
//! Bounded: a drop is rare (a second connection to a connected peer, or one to a removed
//! peer), and its stale completions are polled soon after it; the oldest entries go first.
//! A QP number handed out again (a new connection attached with it) is forgotten at once.

use std::collections::VecDeque;

/// How many dropped QP numbers are remembered.
pub const REMEMBERED: usize = 64;

#[derive(Debug, Default)]
pub struct DroppedQps {
    /// Oldest first, each at most once.
    qpns: VecDeque<u32>,
}

impl DroppedQps {
    /// Remembers `qpn` as dropped (forgetting the oldest beyond [`REMEMBERED`]).
    pub fn insert(&mut self, qpn: u32) {
        self.forget(qpn);
        if self.qpns.len() == REMEMBERED {
            self.qpns.pop_front();
        }
        self.qpns.push_back(qpn);
    }

    /// Whether completions of `qpn` belong to a dropped connection.
    pub fn contains(&self, qpn: u32) -> bool {
        self.qpns.contains(&qpn)
    }

    /// Forgets `qpn` (a live connection now has that number).
    pub fn forget(&mut self, qpn: u32) {
        self.qpns.retain(|&q| q != qpn);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.qpns.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_the_latest_and_forgets_the_oldest() {
        let mut d = DroppedQps::default();
        assert!(!d.contains(7));
        for q in 0..REMEMBERED as u32 + 10 {
            d.insert(q);
        }
        assert_eq!(d.len(), REMEMBERED);
        assert!(!d.contains(9), "the oldest were forgotten");
        assert!(d.contains(10));
        assert!(d.contains(REMEMBERED as u32 + 9));
    }

    #[test]
    fn a_reused_number_is_forgotten_and_reinsertion_does_not_duplicate() {
        let mut d = DroppedQps::default();
        d.insert(5);
        d.insert(6);
        d.insert(5);
        assert_eq!(d.len(), 2, "5 is there once");
        d.forget(5);
        assert!(!d.contains(5));
        assert!(d.contains(6));
        // 5 was moved to the back by its second drop: filling up now evicts 6 first.
        d.insert(5);
        for q in 100..100 + REMEMBERED as u32 - 1 {
            d.insert(q);
        }
        assert!(!d.contains(6));
        assert!(d.contains(5));
    }
}
