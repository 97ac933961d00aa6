//! One-sided operations: RDMA put and get, fetch-and-add and compare-and-swap.

use super::*;

/// Put (`write`) or get: the shared part of `openib_put` and `openib_get`.
///
/// # Safety
/// As for `openib_put`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn rdma(
    func: &str,
    write: bool,
    t: *mut openib_t,
    peer: u32,
    mem: *mut openib_mem_t,
    offset: usize,
    remote: *const openib_remote_t,
    roffset: u64,
    len: usize,
    token_out: *mut u64,
) -> c_int {
    call(func, || {
        // SAFETY: the caller's contract on `t`, `mem` and `remote`.
        let (h, m, r) = unsafe { (handle(t)?, region(mem)?, remote_of(remote)?) };
        owned_by(m, h)?;
        let mut l = h.lock()?;
        let token = if write {
            l.t().put(peer, &m.mr, offset, r, roffset, len)?
        } else {
            l.t().get(peer, &m.mr, offset, r, roffset, len)?
        };
        // SAFETY: the caller's contract on `token_out`.
        unsafe { put_opt(token_out, token) };
        Ok(OPENIB_OK)
    })
}

/// RDMA write of `mem[offset..offset+len]` to `remote` at `roffset`.
///
/// # Safety
/// `t` is NULL or a live handle, `mem` NULL or a live region of it, `remote` NULL or
/// readable, `token_out` NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn openib_put(
    t: *mut openib_t,
    peer: u32,
    mem: *mut openib_mem_t,
    offset: usize,
    remote: *const openib_remote_t,
    roffset: u64,
    len: usize,
    token_out: *mut u64,
) -> c_int {
    // SAFETY: the same contract.
    unsafe {
        rdma(
            "openib_put",
            true,
            t,
            peer,
            mem,
            offset,
            remote,
            roffset,
            len,
            token_out,
        )
    }
}

/// RDMA read of `remote` at `roffset` into `mem[offset..offset+len]`.
///
/// # Safety
/// As for `openib_put`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn openib_get(
    t: *mut openib_t,
    peer: u32,
    mem: *mut openib_mem_t,
    offset: usize,
    remote: *const openib_remote_t,
    roffset: u64,
    len: usize,
    token_out: *mut u64,
) -> c_int {
    // SAFETY: the same contract.
    unsafe {
        rdma(
            "openib_get",
            false,
            t,
            peer,
            mem,
            offset,
            remote,
            roffset,
            len,
            token_out,
        )
    }
}

/// A 64-bit atomic: the shared part of `openib_fetch_add` and `openib_compare_swap`.
///
/// # Safety
/// As for `openib_fetch_add`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn atomic(
    func: &str,
    op: AtomicOp,
    t: *mut openib_t,
    peer: u32,
    mem: *mut openib_mem_t,
    offset: usize,
    remote: *const openib_remote_t,
    roffset: u64,
    token_out: *mut u64,
) -> c_int {
    call(func, || {
        // SAFETY: the caller's contract on `t`, `mem` and `remote`.
        let (h, m, r) = unsafe { (handle(t)?, region(mem)?, remote_of(remote)?) };
        owned_by(m, h)?;
        let token = h.lock()?.t().atomic(peer, op, &m.mr, offset, r, roffset)?;
        // SAFETY: the caller's contract on `token_out`.
        unsafe { put_opt(token_out, token) };
        Ok(OPENIB_OK)
    })
}

/// Atomically adds `add` to the 8 bytes of `remote` at `roffset` (8-byte aligned); the old
/// value lands in `mem[offset..offset+8]` when the completion is reported.
///
/// # Safety
/// `t` is NULL or a live handle, `mem` NULL or a live region of it, `remote` NULL or
/// readable, `token_out` NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn openib_fetch_add(
    t: *mut openib_t,
    peer: u32,
    mem: *mut openib_mem_t,
    offset: usize,
    remote: *const openib_remote_t,
    roffset: u64,
    add: u64,
    token_out: *mut u64,
) -> c_int {
    // SAFETY: the same contract.
    unsafe {
        atomic(
            "openib_fetch_add",
            AtomicOp::FetchAdd { add },
            t,
            peer,
            mem,
            offset,
            remote,
            roffset,
            token_out,
        )
    }
}

/// Atomically replaces the 8 bytes of `remote` at `roffset` (8-byte aligned) by `swap` if they
/// equal `compare`; the old value lands in `mem[offset..offset+8]` when the completion is
/// reported (it equals `compare` if the swap happened).
///
/// # Safety
/// As for `openib_fetch_add`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn openib_compare_swap(
    t: *mut openib_t,
    peer: u32,
    mem: *mut openib_mem_t,
    offset: usize,
    remote: *const openib_remote_t,
    roffset: u64,
    compare: u64,
    swap: u64,
    token_out: *mut u64,
) -> c_int {
    // SAFETY: the same contract.
    unsafe {
        atomic(
            "openib_compare_swap",
            AtomicOp::CompareSwap { compare, swap },
            t,
            peer,
            mem,
            offset,
            remote,
            roffset,
            token_out,
        )
    }
}
