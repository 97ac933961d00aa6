//! The CPC winner rule: both sides of a port pair pick the same CPC without talking.
//!
//! Each side advertises a set of (CPC index, priority). The winner is, among the CPC indices
//! both sides advertise, the one with the highest `max(local priority, remote priority)`; ties
//! go to the higher `min(local, remote)`, then to the higher CPC index. Every step depends only
//! on the two advertisements as sets (a CPC listed twice counts with its highest priority), so
//! `select(a, b) == select(b, a)` for any lists in any order.

use std::collections::BTreeMap;

/// One advertised CPC: its wire index and the priority its side gives it (higher wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Advert {
    pub index: u8,
    pub priority: u8,
}

/// The CPC both sides agree on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Winner {
    pub index: u8,
    /// `max(local, remote)` priority: the score it won with.
    pub score: u8,
    /// The priorities each side gave it, as (lower, higher) so the value is symmetric.
    pub priorities: (u8, u8),
}

/// The advertisement as a set: index -> highest priority listed.
fn as_set(list: &[Advert]) -> BTreeMap<u8, u8> {
    let mut m = BTreeMap::new();
    for a in list {
        let p = m.entry(a.index).or_insert(a.priority);
        *p = (*p).max(a.priority);
    }
    m
}

/// The winner for a port pair, or `None` when the two sides share no CPC.
pub fn select(local: &[Advert], remote: &[Advert]) -> Option<Winner> {
    let (l, r) = (as_set(local), as_set(remote));
    l.iter()
        .filter_map(|(idx, &lp)| r.get(idx).map(|&rp| (*idx, lp, rp)))
        .map(|(index, lp, rp)| Winner {
            index,
            score: lp.max(rp),
            priorities: (lp.min(rp), lp.max(rp)),
        })
        .max_by_key(|w| (w.score, w.priorities.0, w.index))
}

/// Every CPC both sides share, best first (the order [`select`] ranks them in): the order the
/// wire-up (`openib::ping`, used by the transport and `openib ping`) falls back through when
/// the winner fails at run time (docs/CPC.md, "Fallback").
pub fn ranked(local: &[Advert], remote: &[Advert]) -> Vec<Winner> {
    let (l, r) = (as_set(local), as_set(remote));
    let mut all: Vec<Winner> = l
        .iter()
        .filter_map(|(idx, &lp)| {
            r.get(idx).map(|&rp| Winner {
                index: *idx,
                score: lp.max(rp),
                priorities: (lp.min(rp), lp.max(rp)),
            })
        })
        .collect();
    all.sort_by_key(|w| std::cmp::Reverse((w.score, w.priorities.0, w.index)));
    all
}

/// Who starts a connection between two endpoints, decided the same way on both sides: the
/// endpoint with the lower identity initiates. Identities must differ (a job rank, or a
/// (node, local id) pair); equal identities mean a loopback pair, where side A initiates.
pub fn initiator<T: Ord>(a: &T, b: &T) -> Side {
    if a <= b {
        Side::A
    } else {
        Side::B
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ad(index: u8, priority: u8) -> Advert {
        Advert { index, priority }
    }

    #[test]
    fn highest_max_priority_wins() {
        // udcm 63 on one side only counts when both have it.
        let a = [ad(1, 50), ad(4, 30), ad(5, 63)];
        let b = [ad(1, 50), ad(4, 30)];
        assert_eq!(select(&a, &b).unwrap().index, 1);
        // Different priorities on the two sides: max decides.
        let a = [ad(1, 10), ad(4, 90)];
        let b = [ad(1, 80), ad(4, 20)];
        assert_eq!(select(&a, &b).unwrap().index, 4);
        assert_eq!(select(&b, &a).unwrap().index, 4);
    }

    #[test]
    fn ties_go_to_the_higher_minimum_then_the_higher_index() {
        let a = [ad(1, 60), ad(2, 60)];
        let b = [ad(1, 10), ad(2, 20)];
        assert_eq!(
            select(&a, &b).unwrap().index,
            2,
            "same max 60, min 20 beats 10"
        );
        let a = [ad(1, 60), ad(3, 60)];
        let b = [ad(1, 60), ad(3, 60)];
        assert_eq!(select(&a, &b).unwrap().index, 3, "full tie: higher index");
    }

    #[test]
    fn no_common_cpc_is_none() {
        assert_eq!(select(&[ad(1, 1)], &[ad(2, 1)]), None);
        assert_eq!(select(&[], &[ad(2, 1)]), None);
    }

    #[test]
    fn ranked_starts_with_the_winner() {
        let a = [ad(1, 50), ad(4, 30), ad(5, 63)];
        let b = [ad(5, 63), ad(1, 50), ad(4, 30)];
        let r = ranked(&a, &b);
        assert_eq!(r.iter().map(|w| w.index).collect::<Vec<_>>(), vec![5, 1, 4]);
        assert_eq!(Some(r[0]), select(&a, &b));
    }

    fn list() -> impl Strategy<Value = Vec<Advert>> {
        prop::collection::vec(
            (0u8..8, any::<u8>()).prop_map(|(index, priority)| Advert { index, priority }),
            0..10,
        )
    }

    proptest! {
        #[test]
        fn select_is_symmetric(a in list(), b in list()) {
            prop_assert_eq!(select(&a, &b), select(&b, &a));
            prop_assert_eq!(ranked(&a, &b), ranked(&b, &a));
        }

        #[test]
        fn select_ignores_order_and_duplicates(a in list(), b in list(), seed in any::<u64>()) {
            let mut a2 = a.clone();
            // A deterministic shuffle plus duplicated entries with lower priorities.
            let n = a2.len();
            for i in 0..n {
                a2.swap(i, (seed as usize).wrapping_add(i * 7) % n.max(1));
            }
            for x in a.iter().take(3) {
                a2.push(Advert { index: x.index, priority: x.priority / 2 });
            }
            prop_assert_eq!(select(&a, &b), select(&a2, &b));
        }

        #[test]
        fn the_winner_is_common_and_no_common_cpc_beats_it(a in list(), b in list()) {
            if let Some(w) = select(&a, &b) {
                prop_assert!(a.iter().any(|x| x.index == w.index) && b.iter().any(|x| x.index == w.index));
                for x in a.iter().filter(|x| b.iter().any(|y| y.index == x.index)) {
                    let best_a = a.iter().filter(|y| y.index == x.index).map(|y| y.priority).max().unwrap();
                    let best_b = b.iter().filter(|y| y.index == x.index).map(|y| y.priority).max().unwrap();
                    prop_assert!(best_a.max(best_b) <= w.score);
                }
            } else {
                prop_assert!(!a.iter().any(|x| b.iter().any(|y| y.index == x.index)));
            }
        }

        #[test]
        fn initiator_is_decided_once(x in any::<u32>(), y in any::<u32>()) {
            let from_x = initiator(&x, &y);
            let from_y = initiator(&y, &x);
            if x != y {
                prop_assert_ne!(from_x, from_y, "exactly one side initiates");
            }
        }
    }
}
