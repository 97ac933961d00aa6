//! Registrations of callers' shared bytes (`Arc<[u8]>`), kept for the next send of the same
//! bytes: zero copy from user memory without the stale-registration hazard of a cache keyed by
//! user addresses.
//!
//! Why this is safe where an address-keyed cache is not: every cached registration holds a
//! reference to its `Arc<[u8]>`, so the allocation cannot be freed (its address cannot be handed
//! out again) and its bytes cannot change while the registration exists. Two live allocations
//! never share an address, so an equal (address, length) key means the same bytes.
//!
//! Bound: the bytes of cached registrations stay at most `bound`; the least recently used go
//! first. A registration evicted while a transfer still uses it lives until that transfer ends
//! (the transfer holds its own reference). The cost of the bound is memory kept alive: the
//! bytes a caller dropped stay allocated until their registration is evicted.

use openib_sys::Region;
use std::collections::VecDeque;
use std::sync::Arc;

/// What the cache needs to know of a registration.
pub trait SharedBytes {
    /// The registered bytes' address and length.
    fn key(&self) -> (usize, usize);
}

impl SharedBytes for openib_sys::SharedRegion {
    fn key(&self) -> (usize, usize) {
        (self.addr() as usize, self.len())
    }
}

/// The (address, length) key of `data`.
pub fn key_of(data: &Arc<[u8]>) -> (usize, usize) {
    (data.as_ptr() as usize, data.len())
}

/// Counters, for `openib bench --json` and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SharedRegStats {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    /// Bytes of the registrations cached now.
    pub cached: u64,
}

#[derive(Debug)]
pub struct SharedRegs<R> {
    bound: u64,
    /// Least recently used first.
    cached: VecDeque<Arc<R>>,
    stats: SharedRegStats,
}

impl<R: SharedBytes> SharedRegs<R> {
    /// A cache keeping registrations of at most `bound` bytes (0: register for each transfer).
    pub fn new(bound: u64) -> SharedRegs<R> {
        SharedRegs {
            bound,
            cached: VecDeque::new(),
            stats: SharedRegStats::default(),
        }
    }

    pub fn stats(&self) -> SharedRegStats {
        self.stats
    }

    /// The registration of `data`: the cached one, else a new one from `register` (cached if
    /// it fits the bound, evicting the least recently used).
    pub fn get<E>(
        &mut self,
        data: &Arc<[u8]>,
        register: impl FnOnce(Arc<[u8]>) -> Result<R, E>,
    ) -> Result<Arc<R>, E> {
        let key = key_of(data);
        if let Some(i) = self.cached.iter().rposition(|r| r.key() == key) {
            self.stats.hits += 1;
            let r = self.cached.remove(i).expect("index from rposition");
            self.cached.push_back(r.clone());
            return Ok(r);
        }
        self.stats.misses += 1;
        let r = Arc::new(register(data.clone())?);
        let len = data.len() as u64;
        if len <= self.bound {
            while self.stats.cached + len > self.bound {
                self.evict_oldest();
            }
            self.cached.push_back(r.clone());
            self.stats.cached += len;
        }
        Ok(r)
    }

    fn evict_oldest(&mut self) {
        if let Some(r) = self.cached.pop_front() {
            self.stats.cached -= r.key().1 as u64;
            self.stats.evictions += 1;
        }
    }

    /// Drops every cached registration (each is deregistered once no transfer uses it).
    pub fn clear(&mut self) {
        while !self.cached.is_empty() {
            self.evict_oldest();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A registration that only records what it registered.
    #[derive(Debug)]
    struct Fake(Arc<[u8]>, u64);
    impl SharedBytes for Fake {
        fn key(&self) -> (usize, usize) {
            key_of(&self.0)
        }
    }

    fn register(id: &mut u64) -> impl FnMut(Arc<[u8]>) -> Result<Fake, ()> + '_ {
        move |d| {
            *id += 1;
            Ok(Fake(d, *id))
        }
    }

    #[test]
    fn the_same_bytes_reuse_their_registration_and_other_bytes_do_not() {
        let mut id = 0;
        let mut c = SharedRegs::new(1 << 20);
        let a: Arc<[u8]> = vec![1u8; 1000].into();
        let b: Arc<[u8]> = vec![1u8; 1000].into();
        let ra = c.get(&a, register(&mut id)).unwrap();
        let ra2 = c.get(&a.clone(), register(&mut id)).unwrap();
        let rb = c.get(&b, register(&mut id)).unwrap();
        assert_eq!((ra.1, ra2.1, rb.1), (1, 1, 2));
        assert_eq!(c.stats().hits, 1);
        assert_eq!(c.stats().misses, 2);
        assert_eq!(c.stats().cached, 2000);
    }

    #[test]
    fn a_cached_registration_keeps_its_bytes_alive_so_a_new_allocation_cannot_match_it() {
        let mut id = 0;
        let mut c = SharedRegs::new(1 << 20);
        let a: Arc<[u8]> = vec![7u8; 4096].into();
        let key = key_of(&a);
        drop(c.get(&a, register(&mut id)).unwrap());
        drop(a);
        // The cache still holds the bytes: no allocation can be given the same address.
        let fresh: Vec<Arc<[u8]>> = (0..64).map(|_| vec![0u8; 4096].into()).collect();
        assert!(fresh.iter().all(|f| key_of(f) != key));
        for f in &fresh {
            let r = c.get(f, register(&mut id)).unwrap();
            assert!(
                Arc::ptr_eq(&r.0, f),
                "a new allocation gets its own registration"
            );
        }
    }

    #[test]
    fn bound_zero_registers_every_time_and_keeps_nothing() {
        let mut id = 0;
        let mut c = SharedRegs::new(0);
        let a: Arc<[u8]> = vec![1u8; 100].into();
        let r1 = c.get(&a, register(&mut id)).unwrap();
        let r2 = c.get(&a, register(&mut id)).unwrap();
        assert_eq!((r1.1, r2.1), (1, 2));
        assert_eq!(c.stats().cached, 0);
        drop((r1, r2));
        assert_eq!(
            Arc::strong_count(&a),
            1,
            "nothing keeps the bytes once transfers end"
        );
    }

    proptest! {
        /// Under any sequence of sends of some buffers, cached bytes stay within the bound,
        /// match what the cache holds, and a registration always covers the bytes asked for.
        #[test]
        fn bound_and_accounting_hold(ops in proptest::collection::vec(0usize..8, 1..200),
                                     bound in 0u64..40_000) {
            let bufs: Vec<Arc<[u8]>> = (0..8).map(|i| vec![i as u8; 1000 * (i + 1)].into()).collect();
            let mut id = 0;
            let mut c = SharedRegs::new(bound);
            for i in ops {
                let r = c.get(&bufs[i], register(&mut id)).unwrap();
                prop_assert!(Arc::ptr_eq(&r.0, &bufs[i]));
                prop_assert!(c.stats().cached <= bound);
                let held: u64 = c.cached.iter().map(|r| r.key().1 as u64).sum();
                prop_assert_eq!(c.stats().cached, held);
            }
            c.clear();
            prop_assert_eq!(c.stats().cached, 0);
        }
    }
}
