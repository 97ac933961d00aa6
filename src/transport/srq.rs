//! The port's shared receive queue: its buffers, in registered chunks, and where a receive
//! request's buffer is. The credit accounting that keeps senders from overrunning it is the
//! sans-IO [`super::pool::CreditPool`].
//!
//! Buffers are added, never removed: a chunk for the lending reserve when the transport opens,
//! then one chunk of `base + ctl` buffers for every new queue pair, posted by the CPCs' prepare
//! hook while the queue pair is in INIT, so the SRQ holds the peer's grant before the peer can
//! send. A receive request's id names its buffer as (chunk, slot).

use openib_sys::Region;
use openib_sys::{Access, MemoryRegion, ProtectionDomain, SharedReceiveQueue};
use std::sync::{Arc, Mutex};

/// Slots of one chunk are numbered in the low bits of a request id.
const SLOT_BITS: u32 = 10;
/// Most buffers in one chunk.
pub const CHUNK_SLOTS: u32 = 1 << SLOT_BITS;
/// Chunks addressable in the 24-bit id of a receive request.
const MAX_CHUNKS: usize = 1 << (24 - SLOT_BITS);

/// The request id of `slot` in `chunk`.
pub fn id(chunk: usize, slot: u32) -> u32 {
    (chunk as u32) << SLOT_BITS | slot
}

/// The (chunk, slot) of a request id.
pub fn split(id: u32) -> (usize, u32) {
    ((id >> SLOT_BITS) as usize, id & (CHUNK_SLOTS - 1))
}

/// The SRQ and its buffers; shared by the transport and the prepare hook.
pub struct SrqBuffers {
    srq: SharedReceiveQueue,
    pd: ProtectionDomain,
    slot_len: usize,
    /// Most buffers the SRQ may hold (the receive completion queue's depth).
    max: u32,
    chunks: Mutex<Vec<Arc<MemoryRegion>>>,
}

impl SrqBuffers {
    pub fn new(
        srq: SharedReceiveQueue,
        pd: ProtectionDomain,
        slot_len: usize,
        max: u32,
    ) -> SrqBuffers {
        SrqBuffers {
            srq,
            pd,
            slot_len,
            max,
            chunks: Mutex::new(Vec::new()),
        }
    }

    /// Buffers posted so far.
    pub fn total(&self) -> u32 {
        self.lock().iter().map(|c| self.slots_of(c)).sum()
    }

    fn slots_of(&self, chunk: &MemoryRegion) -> u32 {
        (chunk.len() / self.slot_len) as u32
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<MemoryRegion>>> {
        self.chunks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers and posts `n` more buffers (in chunks of at most [`CHUNK_SLOTS`]). Refused,
    /// with the reason, when the SRQ would hold more than its completion queue can report.
    pub fn add(&self, n: u32) -> Result<(), openib_sys::Error> {
        let mut chunks = self.lock();
        let total: u32 = chunks.iter().map(|c| self.slots_of(c)).sum();
        if total + n > self.max || chunks.len() + n.div_ceil(CHUNK_SLOTS) as usize > MAX_CHUNKS {
            return Err(openib_sys::Error::InvalidArgument {
                verb: "ibv_post_srq_recv",
                what: format!(
                    "the shared receive queue holds {total} buffers and {n} more for a new \
                     connection would pass its bound of {} (the receive completion queue's \
                     depth): lower OPENIB_SRQ_CREDITS or OPENIB_SRQ_RESERVE",
                    self.max
                ),
            });
        }
        let mut left = n;
        while left > 0 {
            let k = left.min(CHUNK_SLOTS);
            let mr =
                MemoryRegion::alloc(&self.pd, k as usize * self.slot_len, Access::LOCAL_WRITE)?;
            let c = chunks.len();
            for s in 0..k {
                self.srq.post_recv_sge(
                    super::wr(super::ANY_PEER, super::KIND_SRQ, id(c, s)),
                    &mr.sge(s as usize * self.slot_len, self.slot_len)?,
                )?;
            }
            chunks.push(Arc::new(mr));
            left -= k;
        }
        Ok(())
    }

    /// Chunk `i`, when it exists.
    pub fn chunk(&self, i: usize) -> Option<Arc<MemoryRegion>> {
        self.lock().get(i).cloned()
    }

    /// Posts buffer `id` again.
    pub fn repost(&self, chunk: &MemoryRegion, id: u32) -> Result<(), openib_sys::Error> {
        let (_, s) = split(id);
        self.srq.post_recv_sge(
            super::wr(super::ANY_PEER, super::KIND_SRQ, id),
            &chunk.sge(s as usize * self.slot_len, self.slot_len)?,
        )
    }
}

/// The transport's view of the SRQ: the shared buffers, a local copy of the chunk list (so a
/// receive locks nothing unless a chunk is new), and the credit pool.
pub struct SrqState {
    pub bufs: Arc<SrqBuffers>,
    chunks: Vec<Arc<MemoryRegion>>,
    pub pool: super::pool::CreditPool,
    /// Peers whose queue pairs were stopped, with the progress call that stopped them: their
    /// grants go back to the pool once a later call saw the receive queue empty.
    pub retiring: Vec<(u32, u32)>,
}

impl SrqState {
    pub fn new(bufs: Arc<SrqBuffers>, pool: super::pool::CreditPool) -> SrqState {
        SrqState {
            bufs,
            chunks: Vec::new(),
            pool,
            retiring: Vec::new(),
        }
    }

    /// The chunk of request `id` (refreshed from the shared list when it is new here).
    pub fn chunk_of(&mut self, id: u32) -> Option<&Arc<MemoryRegion>> {
        let (c, _) = split(id);
        while self.chunks.len() <= c {
            let next = self.bufs.chunk(self.chunks.len())?;
            self.chunks.push(next);
        }
        self.chunks.get(c)
    }

    /// Posts buffer `id` again.
    pub fn repost(&mut self, id: u32) -> Result<(), openib_sys::Error> {
        if self.chunk_of(id).is_none() {
            return Err(openib_sys::Error::InvalidArgument {
                verb: "ibv_post_srq_recv",
                what: format!("receive buffer {id:#x} names no chunk of the shared receive queue"),
            });
        }
        // The chunk list and the buffers are borrowed apart: no Arc clone per message.
        self.bufs.repost(&self.chunks[split(id).0], id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_within_24_bits() {
        for (c, s) in [(0, 0), (1, 5), (MAX_CHUNKS - 1, CHUNK_SLOTS - 1)] {
            let i = id(c, s);
            assert!(i < 1 << 24);
            assert_eq!(split(i), (c, s));
        }
    }
}
