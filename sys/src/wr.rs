//! Work requests: scatter/gather entries and the requests posted to send and receive queues
//! (a queue pair's or a shared receive queue's).

use crate::ffi::verbs as v;

/// The verbs form of a list of entries.
pub(crate) fn raw_sges(sges: &[Sge]) -> Vec<v::ibv_sge> {
    sges.iter().map(Sge::raw).collect()
}

/// A scatter/gather entry. Only [`crate::Region::sge`] makes one, so every entry lies
/// inside memory some live region owns (inline sends are copied by the CPU from `addr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    pub(crate) addr: u64,
    pub(crate) length: u32,
    pub(crate) lkey: u32,
}

impl Sge {
    /// The verbs entry.
    pub(crate) fn raw(&self) -> v::ibv_sge {
        v::ibv_sge {
            addr: self.addr,
            length: self.length,
            lkey: self.lkey,
        }
    }

    pub fn addr(&self) -> u64 {
        self.addr
    }
    pub fn len(&self) -> u32 {
        self.length
    }
    pub fn is_empty(&self) -> bool {
        self.length == 0
    }
}

/// The operation of a send-queue request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    Send,
    SendWithImm {
        imm: u32,
    },
    RdmaWrite {
        remote_addr: u64,
        rkey: u32,
    },
    RdmaWriteWithImm {
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    },
    RdmaRead {
        remote_addr: u64,
        rkey: u32,
    },
    /// 64-bit fetch-and-add; the old value lands in the (8-byte) local SGE.
    FetchAdd {
        remote_addr: u64,
        rkey: u32,
        add: u64,
    },
    /// 64-bit compare-and-swap; the old value lands in the (8-byte) local SGE.
    CompareSwap {
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    },
}

/// A send-queue work request.
#[derive(Debug, Clone)]
pub struct SendRequest {
    pub wr_id: u64,
    pub op: SendOp,
    pub sges: Vec<Sge>,
    pub signaled: bool,
    /// Copy the payload into the WQE (only for payloads up to the QP's `max_inline_data`).
    pub inline: bool,
}

/// A receive-queue work request.
#[derive(Debug, Clone)]
pub struct RecvRequest {
    pub wr_id: u64,
    pub sges: Vec<Sge>,
}
