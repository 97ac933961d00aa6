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
        let token = l
            .t()
            .rdma(peer, write, m.mr.local(), offset, r, roffset, len)?;
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
        let token = h
            .lock()?
            .t()
            .atomic_region(peer, op, m.mr.local(), offset, r, roffset)?;
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

/// The offsets of `local..local+len` in `m` and of `remote_addr..remote_addr+len` in `r`
/// ([`OPENIB_ERR_RANGE`] when either range is not inside its region).
/// (`base` and `size`: the local region's address and length.)
pub(crate) fn offsets(
    base: u64,
    size: usize,
    local: u64,
    r: &RemoteRegion,
    remote_addr: u64,
    len: usize,
) -> Result<(usize, u64), Fail> {
    let lo = openib_rs::transport::offset_of(base, size as u64, local, len as u64)
        .map_err(|e| Fail::new(OPENIB_ERR_RANGE, format!("local: {e}")))?;
    let ro = r
        .offset_of(remote_addr, len as u64)
        .map_err(|e| Fail::new(OPENIB_ERR_RANGE, format!("remote: {e}")))?;
    Ok((lo as usize, ro))
}

/// Put (`write`) or get by address: the shared part of `openib_put_addr` and
/// `openib_get_addr`.
///
/// # Safety
/// As for `openib_put_addr`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn rdma_addr(
    func: &str,
    write: bool,
    t: *mut openib_t,
    peer: u32,
    local: *const c_void,
    local_mem: *mut openib_mem_t,
    remote_addr: u64,
    remote: *const openib_remote_t,
    len: usize,
    token_out: *mut u64,
) -> c_int {
    call(func, || {
        // SAFETY: the caller's contract on `t`, `local_mem` and `remote`.
        let (h, m, r) = unsafe { (handle(t)?, region(local_mem)?, remote_of(remote)?) };
        owned_by(m, h)?;
        if local.is_null() {
            return Err(null("local"));
        }
        let (lo, ro) = offsets(
            m.mr.addr(),
            m.mr.len(),
            local as usize as u64,
            &r,
            remote_addr,
            len,
        )?;
        let token = h
            .lock()?
            .t()
            .rdma(peer, write, m.mr.local(), lo, r, ro, len)?;
        // SAFETY: the caller's contract on `token_out`.
        unsafe { put_opt(token_out, token) };
        Ok(OPENIB_OK)
    })
}

/// RDMA write of `len` bytes at `local` (inside `local_mem`) to `remote_addr` (inside the
/// peer's region `remote`).
///
/// # Safety
/// `t` is NULL or a live handle, `local_mem` NULL or a live region of it, `remote` NULL or
/// readable, `token_out` NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn openib_put_addr(
    t: *mut openib_t,
    peer: u32,
    local: *const c_void,
    local_mem: *mut openib_mem_t,
    remote_addr: u64,
    remote: *const openib_remote_t,
    len: usize,
    token_out: *mut u64,
) -> c_int {
    // SAFETY: the same contract.
    unsafe {
        rdma_addr(
            "openib_put_addr",
            true,
            t,
            peer,
            local,
            local_mem,
            remote_addr,
            remote,
            len,
            token_out,
        )
    }
}

/// RDMA read of `len` bytes at `remote_addr` (inside the peer's region `remote`) into `local`
/// (inside `local_mem`).
///
/// # Safety
/// As for `openib_put_addr`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn openib_get_addr(
    t: *mut openib_t,
    peer: u32,
    local: *mut c_void,
    local_mem: *mut openib_mem_t,
    remote_addr: u64,
    remote: *const openib_remote_t,
    len: usize,
    token_out: *mut u64,
) -> c_int {
    // SAFETY: the same contract.
    unsafe {
        rdma_addr(
            "openib_get_addr",
            false,
            t,
            peer,
            local,
            local_mem,
            remote_addr,
            remote,
            len,
            token_out,
        )
    }
}

/// A 64-bit atomic by address: the shared part of `openib_fetch_add_addr` and
/// `openib_compare_swap_addr`.
///
/// # Safety
/// As for `openib_fetch_add_addr`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn atomic_addr(
    func: &str,
    op: AtomicOp,
    t: *mut openib_t,
    peer: u32,
    local: *mut c_void,
    local_mem: *mut openib_mem_t,
    remote_addr: u64,
    remote: *const openib_remote_t,
    token_out: *mut u64,
) -> c_int {
    call(func, || {
        // SAFETY: the caller's contract on `t`, `local_mem` and `remote`.
        let (h, m, r) = unsafe { (handle(t)?, region(local_mem)?, remote_of(remote)?) };
        owned_by(m, h)?;
        if local.is_null() {
            return Err(null("local"));
        }
        let (lo, ro) = offsets(
            m.mr.addr(),
            m.mr.len(),
            local as usize as u64,
            &r,
            remote_addr,
            8,
        )?;
        let token = h
            .lock()?
            .t()
            .atomic_region(peer, op, m.mr.local(), lo, r, ro)?;
        // SAFETY: the caller's contract on `token_out`.
        unsafe { put_opt(token_out, token) };
        Ok(OPENIB_OK)
    })
}

/// Atomically adds `add` to the 8 bytes at `remote_addr` (8-byte aligned, inside the peer's
/// region `remote`); the old value lands in the 8 bytes at `local` (inside `local_mem`) when
/// the completion is reported.
///
/// # Safety
/// `t` is NULL or a live handle, `local_mem` NULL or a live region of it, `remote` NULL or
/// readable, `token_out` NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn openib_fetch_add_addr(
    t: *mut openib_t,
    peer: u32,
    local: *mut c_void,
    local_mem: *mut openib_mem_t,
    remote_addr: u64,
    remote: *const openib_remote_t,
    add: u64,
    token_out: *mut u64,
) -> c_int {
    // SAFETY: the same contract.
    unsafe {
        atomic_addr(
            "openib_fetch_add_addr",
            AtomicOp::FetchAdd { add },
            t,
            peer,
            local,
            local_mem,
            remote_addr,
            remote,
            token_out,
        )
    }
}

/// Atomically replaces the 8 bytes at `remote_addr` (8-byte aligned, inside `remote`) by `swap`
/// if they equal `compare`; the old value lands at `local` (inside `local_mem`) when the
/// completion is reported.
///
/// # Safety
/// As for `openib_fetch_add_addr`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn openib_compare_swap_addr(
    t: *mut openib_t,
    peer: u32,
    local: *mut c_void,
    local_mem: *mut openib_mem_t,
    remote_addr: u64,
    remote: *const openib_remote_t,
    compare: u64,
    swap: u64,
    token_out: *mut u64,
) -> c_int {
    // SAFETY: the same contract.
    unsafe {
        atomic_addr(
            "openib_compare_swap_addr",
            AtomicOp::CompareSwap { compare, swap },
            t,
            peer,
            local,
            local_mem,
            remote_addr,
            remote,
            token_out,
        )
    }
}
