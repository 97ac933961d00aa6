//! One-sided operations: RDMA put and get and 64-bit atomics on a peer's registered region
//! ([`RemoteRegion`]).

use super::error::TransportError;
use super::op::{AtomicOp, LocalRegion, Op};
use super::{Transport, CALLER_TOKEN};
use openib_sys::Region;
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

/// The offset of address `addr` in the `size`-byte range starting at `base`, when
/// `addr..addr+len` lies inside it ([`TransportError::Range`] otherwise, with the offset
/// `addr - base`, or `addr` itself when below `base`): put/get/atomics by address.
pub fn offset_of(base: u64, size: u64, addr: u64, len: u64) -> Result<u64, TransportError> {
    match addr.checked_sub(base) {
        Some(off) if off.checked_add(len).is_some_and(|e| e <= size) => Ok(off),
        off => Err(TransportError::Range {
            offset: off.unwrap_or(addr),
            len,
            size,
        }),
    }
}

impl RemoteRegion {
    /// The offset of `addr..addr+len` in this remote region (see [`offset_of`]).
    pub fn offset_of(&self, addr: u64, len: u64) -> Result<u64, TransportError> {
        offset_of(self.addr, self.len, addr, len)
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

/// A caller's token must carry [`CALLER_TOKEN`].
fn caller_token(token: u64) -> Result<(), TransportError> {
    if token & CALLER_TOKEN == 0 {
        return Err(TransportError::NotACallerToken { token });
    }
    Ok(())
}

/// Checks an atomic's 8 bytes of `local` at `offset` and of `remote` at `roffset`; the target
/// address.
fn check_atomic(
    local: &LocalRegion,
    offset: usize,
    remote: &RemoteRegion,
    roffset: u64,
) -> Result<u64, TransportError> {
    check_range(local, offset, 8)?;
    check_remote(remote, roffset, 8)?;
    let addr = remote.addr + roffset;
    if addr % 8 != 0 {
        return Err(TransportError::Misaligned { addr });
    }
    Ok(addr)
}

impl Transport {
    /// RDMA write of `local[offset..offset+len]` to `remote` at `roffset`.
    pub fn put<R: Region + Send + Sync + 'static>(
        &mut self,
        peer: u32,
        local: &Arc<R>,
        offset: usize,
        remote: RemoteRegion,
        roffset: u64,
        len: usize,
    ) -> Result<u64, TransportError> {
        self.rdma(peer, true, local.clone(), offset, remote, roffset, len)
    }

    /// RDMA read of `remote` at `roffset` into `local[offset..offset+len]`.
    pub fn get<R: Region + Send + Sync + 'static>(
        &mut self,
        peer: u32,
        local: &Arc<R>,
        offset: usize,
        remote: RemoteRegion,
        roffset: u64,
        len: usize,
    ) -> Result<u64, TransportError> {
        self.rdma(peer, false, local.clone(), offset, remote, roffset, len)
    }

    /// Put (`write`) or get with any registered local region ([`LocalRegion`]): what
    /// [`Transport::put`] and [`Transport::get`] do, for a caller holding regions of
    /// different kinds (the C ABI's allocated and registered memory).
    #[allow(clippy::too_many_arguments)]
    pub fn rdma(
        &mut self,
        peer: u32,
        write: bool,
        local: LocalRegion,
        offset: usize,
        remote: RemoteRegion,
        roffset: u64,
        len: usize,
    ) -> Result<u64, TransportError> {
        check_range(&local, offset, len)?;
        check_remote(&remote, roffset, len as u64)?;
        let token = self.token();
        self.post_rdma(token, peer, write, local, offset, remote, roffset, len)?;
        Ok(token)
    }

    /// [`Transport::rdma`] whose completion carries `token`, which the caller chose (it must
    /// have [`CALLER_TOKEN`] set; the other bits are the caller's, a pointer to its own record
    /// of the operation for instance): the caller finds its operation from the completion
    /// without keeping a table of the transport's tokens. The transport does not require
    /// caller tokens to be unique; each operation reports its own completion.
    #[allow(clippy::too_many_arguments)]
    pub fn rdma_as(
        &mut self,
        token: u64,
        peer: u32,
        write: bool,
        local: LocalRegion,
        offset: usize,
        remote: RemoteRegion,
        roffset: u64,
        len: usize,
    ) -> Result<(), TransportError> {
        caller_token(token)?;
        check_range(&local, offset, len)?;
        check_remote(&remote, roffset, len as u64)?;
        self.post_rdma(token, peer, write, local, offset, remote, roffset, len)
    }

    #[allow(clippy::too_many_arguments)]
    fn post_rdma(
        &mut self,
        token: u64,
        peer: u32,
        write: bool,
        local: LocalRegion,
        offset: usize,
        remote: RemoteRegion,
        roffset: u64,
        len: usize,
    ) -> Result<(), TransportError> {
        self.enqueue_one_sided(
            peer,
            Op::Rdma {
                write,
                local,
                offset,
                remote_addr: remote.addr + roffset,
                rkey: remote.rkey,
                len,
                token,
            },
        )
    }

    /// 64-bit atomic on `remote` at `roffset` (8-byte aligned); the old value lands in
    /// `local[offset..offset+8]` (native byte order) when the completion is reported.
    pub fn atomic<R: Region + Send + Sync + 'static>(
        &mut self,
        peer: u32,
        op: AtomicOp,
        local: &Arc<R>,
        offset: usize,
        remote: RemoteRegion,
        roffset: u64,
    ) -> Result<u64, TransportError> {
        self.atomic_region(peer, op, local.clone(), offset, remote, roffset)
    }

    /// [`Transport::atomic`] with any registered local region ([`LocalRegion`]).
    pub fn atomic_region(
        &mut self,
        peer: u32,
        op: AtomicOp,
        local: LocalRegion,
        offset: usize,
        remote: RemoteRegion,
        roffset: u64,
    ) -> Result<u64, TransportError> {
        let addr = check_atomic(&local, offset, &remote, roffset)?;
        let token = self.token();
        self.post_atomic(token, peer, op, local, offset, addr, remote.rkey)?;
        Ok(token)
    }

    /// [`Transport::atomic_region`] whose completion carries `token`, which the caller chose
    /// (with [`CALLER_TOKEN`] set, as for [`Transport::rdma_as`]).
    #[allow(clippy::too_many_arguments)]
    pub fn atomic_as(
        &mut self,
        token: u64,
        peer: u32,
        op: AtomicOp,
        local: LocalRegion,
        offset: usize,
        remote: RemoteRegion,
        roffset: u64,
    ) -> Result<(), TransportError> {
        caller_token(token)?;
        let addr = check_atomic(&local, offset, &remote, roffset)?;
        self.post_atomic(token, peer, op, local, offset, addr, remote.rkey)
    }

    #[allow(clippy::too_many_arguments)]
    fn post_atomic(
        &mut self,
        token: u64,
        peer: u32,
        op: AtomicOp,
        local: LocalRegion,
        offset: usize,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<(), TransportError> {
        self.enqueue_one_sided(
            peer,
            Op::Atomic {
                op,
                local,
                offset,
                remote_addr,
                rkey,
                token,
            },
        )
    }

    /// Fetch-and-add (see [`Transport::atomic`]).
    pub fn fetch_add<R: Region + Send + Sync + 'static>(
        &mut self,
        peer: u32,
        local: &Arc<R>,
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
    pub fn compare_swap<R: Region + Send + Sync + 'static>(
        &mut self,
        peer: u32,
        local: &Arc<R>,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A caller's token needs the caller-token bit, so that it is never one the transport
    /// drew (those count up from 1); the error names the token.
    #[test]
    fn caller_tokens_must_carry_the_caller_bit() {
        for bad in [0, 1, 42, CALLER_TOKEN - 1] {
            let e = caller_token(bad).unwrap_err();
            assert!(
                matches!(e, TransportError::NotACallerToken { token } if token == bad),
                "{bad:#x}: {e}"
            );
            assert!(e.to_string().contains(&format!("{bad:#x}")), "{e}");
        }
        for good in [
            CALLER_TOKEN,
            CALLER_TOKEN | 1,
            u64::MAX,
            CALLER_TOKEN | 0x5555_0000_1000,
        ] {
            assert!(caller_token(good).is_ok(), "{good:#x}");
        }
    }

    /// Addresses map to offsets only when the whole range lies inside: below the base, past the
    /// end, straddling the end and wrapping around are range errors.
    #[test]
    fn addresses_map_to_offsets_inside_only() {
        let r = RemoteRegion {
            addr: 0x1000,
            rkey: 7,
            len: 64,
        };
        assert_eq!(r.offset_of(0x1000, 64).unwrap(), 0);
        assert_eq!(r.offset_of(0x1038, 8).unwrap(), 0x38);
        assert_eq!(r.offset_of(0x1040, 0).unwrap(), 64);
        for (addr, len) in [
            (0xfff, 1),
            (0x1039, 8),
            (0x1040, 1),
            (0x1001, u64::MAX),
            (0, 8),
        ] {
            assert!(
                matches!(r.offset_of(addr, len), Err(TransportError::Range { .. })),
                "{addr:#x}+{len}"
            );
        }
        assert!(offset_of(u64::MAX - 8, 8, u64::MAX - 2, 4).is_err());
        assert_eq!(offset_of(u64::MAX - 8, 8, u64::MAX - 4, 4).unwrap(), 4);
    }
}
