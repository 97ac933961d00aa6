//! One-sided operations: RDMA put and get and 64-bit atomics on a peer's registered region
//! ([`RemoteRegion`]).

use super::error::TransportError;
use super::op::{AtomicOp, Op};
use super::Transport;
use openib_sys::{MemoryRegion, Region};
use std::sync::Arc;

/// A registered region's remote handle, to give a peer (through any message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteRegion {
    pub addr: u64,
    pub rkey: u32,
    pub len: u64,
}

impl RemoteRegion {
    /// The handle of any registered region (the whole of it).
    pub fn of(mr: &impl Region) -> RemoteRegion {
        RemoteRegion {
            addr: mr.addr(),
            rkey: mr.rkey(),
            len: mr.len() as u64,
        }
    }
    /// 20 bytes, little-endian.
    pub fn encode(&self) -> [u8; 20] {
        let mut b = [0u8; 20];
        b[..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_le_bytes());
        b[12..].copy_from_slice(&self.len.to_le_bytes());
        b
    }
    pub fn decode(b: &[u8]) -> Option<RemoteRegion> {
        (b.len() == 20).then(|| RemoteRegion {
            addr: u64::from_le_bytes(b[..8].try_into().expect("8")),
            rkey: u32::from_le_bytes(b[8..12].try_into().expect("4")),
            len: u64::from_le_bytes(b[12..].try_into().expect("8")),
        })
    }
}

pub(super) fn check_range(
    mr: &impl Region,
    offset: usize,
    len: usize,
) -> Result<(), TransportError> {
    if offset.checked_add(len).is_none_or(|e| e > mr.len()) {
        return Err(TransportError::Range {
            offset: offset as u64,
            len: len as u64,
            size: mr.len() as u64,
        });
    }
    Ok(())
}

fn check_remote(remote: &RemoteRegion, roffset: u64, len: u64) -> Result<(), TransportError> {
    if roffset.checked_add(len).is_none_or(|e| e > remote.len) {
        return Err(TransportError::Range {
            offset: roffset,
            len,
            size: remote.len,
        });
    }
    Ok(())
}

impl Transport {
    /// RDMA write of `local[offset..offset+len]` to `remote` at `roffset`.
    pub fn put(
        &mut self,
        peer: u32,
        local: &Arc<MemoryRegion>,
        offset: usize,
        remote: RemoteRegion,
        roffset: u64,
        len: usize,
    ) -> Result<u64, TransportError> {
        self.rdma(peer, true, local, offset, remote, roffset, len)
    }

    /// RDMA read of `remote` at `roffset` into `local[offset..offset+len]`.
    pub fn get(
        &mut self,
        peer: u32,
        local: &Arc<MemoryRegion>,
        offset: usize,
        remote: RemoteRegion,
        roffset: u64,
        len: usize,
    ) -> Result<u64, TransportError> {
        self.rdma(peer, false, local, offset, remote, roffset, len)
    }

    #[allow(clippy::too_many_arguments)]
    fn rdma(
        &mut self,
        peer: u32,
        write: bool,
        local: &Arc<MemoryRegion>,
        offset: usize,
        remote: RemoteRegion,
        roffset: u64,
        len: usize,
    ) -> Result<u64, TransportError> {
        check_range(local, offset, len)?;
        check_remote(&remote, roffset, len as u64)?;
        let token = self.token();
        let local = local.clone();
        self.enqueue(peer, |_| Op::Rdma {
            write,
            local,
            offset,
            remote_addr: remote.addr + roffset,
            rkey: remote.rkey,
            len,
            token,
        })?;
        Ok(token)
    }

    /// 64-bit atomic on `remote` at `roffset` (8-byte aligned); the old value lands in
    /// `local[offset..offset+8]` (native byte order) when the completion is reported.
    pub fn atomic(
        &mut self,
        peer: u32,
        op: AtomicOp,
        local: &Arc<MemoryRegion>,
        offset: usize,
        remote: RemoteRegion,
        roffset: u64,
    ) -> Result<u64, TransportError> {
        check_range(local, offset, 8)?;
        check_remote(&remote, roffset, 8)?;
        let addr = remote.addr + roffset;
        if addr % 8 != 0 {
            return Err(TransportError::Misaligned { addr });
        }
        let token = self.token();
        let local = local.clone();
        self.enqueue(peer, |_| Op::Atomic {
            op,
            local,
            offset,
            remote_addr: addr,
            rkey: remote.rkey,
            token,
        })?;
        Ok(token)
    }

    /// Fetch-and-add (see [`Transport::atomic`]).
    pub fn fetch_add(
        &mut self,
        peer: u32,
        local: &Arc<MemoryRegion>,
        offset: usize,
        remote: RemoteRegion,
        roffset: u64,
        add: u64,
    ) -> Result<u64, TransportError> {
        self.atomic(
            peer,
            AtomicOp::FetchAdd { add },
            local,
            offset,
            remote,
            roffset,
        )
    }

    /// Compare-and-swap (see [`Transport::atomic`]).
    #[allow(clippy::too_many_arguments)]
    pub fn compare_swap(
        &mut self,
        peer: u32,
        local: &Arc<MemoryRegion>,
        offset: usize,
        remote: RemoteRegion,
        roffset: u64,
        compare: u64,
        swap: u64,
    ) -> Result<u64, TransportError> {
        self.atomic(
            peer,
            AtomicOp::CompareSwap { compare, swap },
            local,
            offset,
            remote,
            roffset,
        )
    }
}
