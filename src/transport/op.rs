//! The user operations an endpoint queues, started in call order ([`Op`]): messages and
//! rendezvous sends queued by the send paths, puts, gets and atomics ([`AtomicOp`]).

use super::rendezvous::Source;
use super::Tag;
use openib_sys::Region;
use std::sync::Arc;

/// The local side of a put, get or atomic: any registered region (the transport's own
/// allocation or a caller's registered memory), kept alive until the operation completes.
pub type LocalRegion = Arc<dyn Region + Send + Sync>;

/// A 64-bit remote atomic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    FetchAdd { add: u64 },
    CompareSwap { compare: u64, swap: u64 },
}

/// User operations, started in call order.
pub(super) enum Op {
    Eager {
        tag: Tag,
        seq: u32,
        data: Vec<u8>,
        token: u64,
    },
    /// The pieces of a train not posted yet: `data[off..]`.
    Train {
        tag: Tag,
        seq: u32,
        data: Vec<u8>,
        off: usize,
        token: u64,
    },
    Rts {
        tag: Tag,
        seq: u32,
        src: Source,
        len: usize,
        token: u64,
    },
    Rdma {
        write: bool,
        local: LocalRegion,
        offset: usize,
        remote_addr: u64,
        rkey: u32,
        len: usize,
        token: u64,
    },
    Atomic {
        op: AtomicOp,
        local: LocalRegion,
        offset: usize,
        remote_addr: u64,
        rkey: u32,
        token: u64,
    },
}

impl Op {
    pub(super) fn token(&self) -> u64 {
        match self {
            Op::Eager { token, .. }
            | Op::Train { token, .. }
            | Op::Rts { token, .. }
            | Op::Rdma { token, .. }
            | Op::Atomic { token, .. } => *token,
        }
    }
}
