//! The registration cache: registered buffers for rendezvous transfers, reused by size class,
//! with a bound on the memory kept pinned.
//!
//! Why a pool and not a cache of user addresses: a cache keyed by user addresses goes stale when
//! the user frees a buffer and the allocator hands the same address out again backed by other
//! pages (Open MPI needs malloc/munmap hooks to notice). Here the cache owns every buffer it
//! registered: a buffer is either lent to one transfer or idle in the cache, and user memory is
//! never registered behind the user's back, so a freed-and-reused user address cannot meet a
//! stale registration. Users who want zero copy register memory explicitly
//! (`Transport::register`), and that registration lives exactly as long as its handle.
//!
//! Bound: `in_use + idle <= bound` is kept by evicting idle buffers (least recently used
//! first); buffers in use are never taken back. The transport asks [`RegCache::admits`] before
//! starting a receive, so pinned memory grows past the bound only by one transfer.

use openib_sys::Region;
use std::collections::VecDeque;

/// The smallest size class (bytes).
pub const MIN_CLASS: usize = 64 * 1024;

/// What the cache needs to know of a registered buffer.
pub trait Pinned {
    /// Its registered length (its size class).
    fn pinned_len(&self) -> usize;
}

impl Pinned for openib_sys::MemoryRegion {
    fn pinned_len(&self) -> usize {
        self.len()
    }
}

/// Counters, for `openib bench --json` and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    /// Bytes lent out now.
    pub in_use: u64,
    /// Bytes registered and idle now.
    pub idle: u64,
    /// Most bytes pinned at once.
    pub peak: u64,
}

#[derive(Debug)]
pub struct RegCache<R> {
    bound: u64,
    /// Idle buffers, least recently returned first.
    idle: VecDeque<R>,
    stats: CacheStats,
}

/// The size class of a `len`-byte transfer: the next power of two, at least [`MIN_CLASS`].
pub fn class_of(len: usize) -> usize {
    len.max(MIN_CLASS)
        .checked_next_power_of_two()
        .unwrap_or(len)
}

impl<R: Pinned> RegCache<R> {
    /// A cache keeping at most `bound` bytes pinned (0: keep nothing idle).
    pub fn new(bound: u64) -> RegCache<R> {
        RegCache {
            bound,
            idle: VecDeque::new(),
            stats: CacheStats::default(),
        }
    }

    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    pub fn pinned(&self) -> u64 {
        self.stats.in_use + self.stats.idle
    }

    /// Whether a transfer of `len` bytes may start now without passing the bound (always true
    /// when nothing is in use, so one transfer can always proceed).
    pub fn admits(&self, len: usize) -> bool {
        self.stats.in_use == 0 || self.stats.in_use + class_of(len) as u64 <= self.bound
    }

    /// A buffer of at least `len` bytes: an idle one of the class, else a new one from `alloc`
    /// (called with the class size) after evicting idle buffers to make room under the bound.
    pub fn take<E>(
        &mut self,
        len: usize,
        alloc: impl FnOnce(usize) -> Result<R, E>,
    ) -> Result<R, E> {
        let class = class_of(len);
        let r = if let Some(i) = self.idle.iter().rposition(|r| r.pinned_len() == class) {
            self.stats.hits += 1;
            let r = self.idle.remove(i).expect("index from rposition");
            self.stats.idle -= class as u64;
            r
        } else {
            self.stats.misses += 1;
            while !self.idle.is_empty() && self.pinned() + class as u64 > self.bound {
                self.evict_oldest();
            }
            let r = alloc(class)?;
            debug_assert!(r.pinned_len() >= len);
            r
        };
        self.stats.in_use += r.pinned_len() as u64;
        self.stats.peak = self.stats.peak.max(self.pinned());
        Ok(r)
    }

    /// A transfer is done with `r`: keep it idle (within the bound) for the next one.
    pub fn give_back(&mut self, r: R) {
        let len = r.pinned_len() as u64;
        self.stats.in_use -= len;
        self.idle.push_back(r);
        self.stats.idle += len;
        while !self.idle.is_empty() && self.pinned() > self.bound {
            self.evict_oldest();
        }
    }

    /// A transfer that failed is done with `r`, but the device may still be reading or
    /// writing it for a queue pair in error: deregister it now instead of lending it again.
    pub fn discard(&mut self, r: R) {
        self.stats.in_use -= r.pinned_len() as u64;
        drop(r);
    }

    fn evict_oldest(&mut self) {
        if let Some(r) = self.idle.pop_front() {
            self.stats.idle -= r.pinned_len() as u64;
            self.stats.evictions += 1;
        }
    }

    /// Drops every idle buffer (deregistering it).
    pub fn clear(&mut self) {
        while !self.idle.is_empty() {
            self.evict_oldest();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug)]
    struct Fake(usize, u64);
    impl Pinned for Fake {
        fn pinned_len(&self) -> usize {
            self.0
        }
    }

    fn alloc(id: &mut u64) -> impl FnMut(usize) -> Result<Fake, ()> + '_ {
        move |n| {
            *id += 1;
            Ok(Fake(n, *id))
        }
    }

    #[test]
    fn classes() {
        assert_eq!(class_of(0), MIN_CLASS);
        assert_eq!(class_of(MIN_CLASS + 1), 2 * MIN_CLASS);
        assert_eq!(class_of(4 << 20), 4 << 20);
    }

    #[test]
    fn reuses_a_class_and_evicts_lru() {
        let mut id = 0;
        let mut c = RegCache::new(4 * MIN_CLASS as u64);
        let a = c.take(100, alloc(&mut id)).unwrap();
        let b = c.take(MIN_CLASS + 1, alloc(&mut id)).unwrap();
        assert_eq!((a.1, b.1), (1, 2));
        c.give_back(a);
        c.give_back(b);
        assert_eq!(c.pinned(), 3 * MIN_CLASS as u64);
        let again = c.take(10, alloc(&mut id)).unwrap();
        assert_eq!(again.1, 1, "an idle buffer of the class is reused");
        // 1 (in use) + 2 (idle) + 4 (new) > 4: the idle class-2 buffer goes first.
        let big = c.take(4 * MIN_CLASS, alloc(&mut id)).unwrap();
        assert_eq!(c.stats().evictions, 1);
        assert_eq!(c.stats().idle, 0);
        c.give_back(big);
        c.give_back(again);
        assert!(c.pinned() <= 4 * MIN_CLASS as u64);
    }

    #[test]
    fn bound_zero_keeps_nothing() {
        let mut id = 0;
        let mut c = RegCache::new(0);
        let a = c.take(5, alloc(&mut id)).unwrap();
        assert!(!c.admits(5));
        c.give_back(a);
        assert_eq!(c.pinned(), 0);
        assert!(c.admits(5));
    }

    proptest! {
        /// Under any sequence of takes and returns, idle memory never pushes pinned memory past
        /// the bound, accounting matches what is alive, and each buffer is lent to one user.
        #[test]
        fn bound_and_accounting_hold(ops in proptest::collection::vec((any::<bool>(), 0usize..(1 << 22)), 1..200),
                                     bound in 0u64..(1 << 24)) {
            let mut id = 0;
            let mut c = RegCache::new(bound);
            let mut lent: Vec<Fake> = Vec::new();
            for (take, len) in ops {
                if take || lent.is_empty() {
                    let admitted = c.admits(len);
                    let r = c.take(len, alloc(&mut id)).unwrap();
                    prop_assert!(r.0 >= len);
                    prop_assert!(lent.iter().all(|l| l.1 != r.1), "lent twice");
                    if admitted && !lent.is_empty() {
                        prop_assert!(c.stats().in_use <= bound);
                    }
                    lent.push(r);
                } else {
                    let r = lent.swap_remove(len % lent.len());
                    c.give_back(r);
                    prop_assert!(c.pinned() <= bound.max(c.stats().in_use));
                }
                let in_use: u64 = lent.iter().map(|l| l.0 as u64).sum();
                prop_assert_eq!(c.stats().in_use, in_use);
            }
        }
    }
}
