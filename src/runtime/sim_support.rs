//! What the protocol simulators (`crate::sim` for the resilient fence,
//! `runtime::group_create::sim`) and the runtime's tests share: the seeded generator and a
//! simulated member's contribution. In the runtime's layer, so that the runtime's own tests use
//! them without reaching up to `crate::sim` (which re-exports them).

use super::wire::Entry;
use super::Scope;

/// The simulator's seeded generator (fastrand's): one seed describes a whole run.
#[derive(Debug, Clone)]
pub struct Rng(fastrand::Rng);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(fastrand::Rng::with_seed(seed))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0.u64(..)
    }
    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0.u64(..n)
    }
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        self.0.shuffle(v)
    }
}

/// Each process's contribution in the simulation.
pub fn contribution(rank: u32) -> Vec<Entry> {
    vec![Entry {
        scope: Scope::Global,
        key: "sim".into(),
        value: rank.to_le_bytes().to_vec(),
    }]
}
