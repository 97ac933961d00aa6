//! [`PeerMap`]: per-peer state indexed by rank. A lookup is an index and a check, where a
//! `BTreeMap` walked its nodes: it runs several times for every message (send, receive,
//! drain). Iteration is in rank order, as the `BTreeMap` it replaces iterated.

/// Values by peer rank; ranks are dense (0..size), so a vector holds them.
#[derive(Debug)]
pub struct PeerMap<T> {
    slots: Vec<Option<T>>,
}

impl<T> Default for PeerMap<T> {
    fn default() -> Self {
        PeerMap { slots: Vec::new() }
    }
}

impl<T> PeerMap<T> {
    pub fn get(&self, peer: &u32) -> Option<&T> {
        self.slots.get(*peer as usize).and_then(Option::as_ref)
    }

    pub fn get_mut(&mut self, peer: &u32) -> Option<&mut T> {
        self.slots.get_mut(*peer as usize).and_then(Option::as_mut)
    }

    /// Sets the value of `peer`, returning the one it replaces.
    pub fn insert(&mut self, peer: u32, value: T) -> Option<T> {
        let i = peer as usize;
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        self.slots[i].replace(value)
    }

    pub fn remove(&mut self, peer: &u32) -> Option<T> {
        self.slots.get_mut(*peer as usize).and_then(Option::take)
    }

    /// (rank, value) in rank order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.as_ref().map(|v| (i as u32, v)))
    }

    /// (rank, value) in rank order, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u32, &mut T)> + '_ {
        self.slots
            .iter_mut()
            .enumerate()
            .filter_map(|(i, v)| v.as_mut().map(|v| (i as u32, v)))
    }

    /// The ranks present, in order.
    pub fn keys(&self) -> impl Iterator<Item = u32> + '_ {
        self.iter().map(|(p, _)| p)
    }

    pub fn values(&self) -> impl Iterator<Item = &T> + '_ {
        self.slots.iter().filter_map(Option::as_ref)
    }
}

impl<T> FromIterator<(u32, T)> for PeerMap<T> {
    fn from_iter<I: IntoIterator<Item = (u32, T)>>(iter: I) -> Self {
        let mut m = PeerMap::default();
        for (p, v) in iter {
            m.insert(p, v);
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        /// Any sequence of inserts and removes leaves the map equal to a BTreeMap given the
        /// same sequence, lookups and iteration order included.
        #[test]
        fn behaves_as_a_btreemap(ops in proptest::collection::vec((any::<bool>(), 0u32..64, any::<u16>()), 0..200)) {
            let mut m = PeerMap::default();
            let mut b = BTreeMap::new();
            for (insert, peer, v) in ops {
                if insert {
                    prop_assert_eq!(m.insert(peer, v), b.insert(peer, v));
                } else {
                    prop_assert_eq!(m.remove(&peer), b.remove(&peer));
                }
                for p in 0..66 {
                    prop_assert_eq!(m.get(&p), b.get(&p));
                }
            }
            let got: Vec<(u32, u16)> = m.iter().map(|(p, v)| (p, *v)).collect();
            let want: Vec<(u32, u16)> = b.iter().map(|(p, v)| (*p, *v)).collect();
            prop_assert_eq!(got, want);
            prop_assert_eq!(m.keys().collect::<Vec<_>>(), b.keys().copied().collect::<Vec<_>>());
            prop_assert_eq!(m.values().collect::<Vec<_>>(), b.values().collect::<Vec<_>>());
            if let Some(&p) = b.keys().next() {
                *m.get_mut(&p).unwrap() = 7;
                prop_assert_eq!(m.get(&p), Some(&7));
            }
        }
    }
}
