//! One-sided operations: RDMA put and get, fetch-and-add and compare-and-swap, by offsets into
//! the two regions or by addresses inside them.

use super::*;

/// Where a one-sided operation reads and writes.
pub(crate) enum Place {
    /// Offsets into the local region and the peer's.
    Offsets { offset: usize, roffset: u64 },
    /// Addresses inside them (both ranges checked: [`offsets`]).
    Addresses {
        local: *const c_void,
        remote_addr: u64,
    },
}

/// What a one-sided operation does.
pub(crate) enum What {
    /// Put (`write`) or get of `len` bytes.
    Rdma { write: bool, len: usize },
    /// A 64-bit atomic (8 bytes on both sides).
    Atomic(AtomicOp),
}

/// Whose token an operation's completion carries.
#[derive(Clone, Copy)]
pub(crate) enum Token {
    /// One the transport draws, written to this pointer (NULL: not wanted).
    Drawn(*mut u64),
    /// The caller's (`OPENIB_CALLER_TOKEN` set), for the `*_token` forms.
    Given(u64),
}

/// Every one-sided entry point: checks the handle, the region (of this handle) and the remote
/// handle, turns `place` into offsets, and posts the operation.
///
/// # Safety
/// As for `openib_put` (`openib_put_addr` for [`Place::Addresses`]).
#[allow(clippy::too_many_arguments)]
unsafe fn one_sided(
    func: &str,
    t: *mut openib_t,
    peer: u32,
    mem: *mut openib_mem_t,
    remote: *const openib_remote_t,
    place: Place,
    what: What,
    token: Token,
) -> c_int {
    call(func, || {
        // SAFETY: the caller's contract on `t`, `mem` and `remote`.
        let (h, m, r) = unsafe { (handle(t)?, region(mem)?, remote_of(remote)?) };
        owned_by(m, h)?;
        let len = match what {
            What::Rdma { len, .. } => len,
            What::Atomic(_) => 8,
        };
        let (offset, roffset) = match place {
            Place::Offsets { offset, roffset } => (offset, roffset),
            Place::Addresses { local, remote_addr } => {
                if local.is_null() {
                    return Err(null("local"));
                }
                offsets(
                    m.mr.addr(),
                    m.mr.len(),
                    local as usize as u64,
                    &r,
                    remote_addr,
                    len,
                )?
            }
        };
        let mut l = h.lock()?;
        let token_out = match token {
            Token::Drawn(out) => out,
            Token::Given(token) => {
                match what {
                    What::Rdma { write, len } => {
                        l.t()
                            .rdma_as(token, peer, write, m.mr.local(), offset, r, roffset, len)?
                    }
                    What::Atomic(op) => {
                        l.t()
                            .atomic_as(token, peer, op, m.mr.local(), offset, r, roffset)?
                    }
                }
                return Ok(OPENIB_OK);
            }
        };
        let token = match what {
            What::Rdma { write, len } => {
                l.t()
                    .rdma(peer, write, m.mr.local(), offset, r, roffset, len)?
            }
            What::Atomic(op) => l
                .t()
                .atomic_region(peer, op, m.mr.local(), offset, r, roffset)?,
        };
        drop(l);
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
        one_sided(
            "openib_put",
            t,
            peer,
            mem,
            remote,
            Place::Offsets { offset, roffset },
            What::Rdma { write: true, len },
            Token::Drawn(token_out),
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
        one_sided(
            "openib_get",
            t,
            peer,
            mem,
            remote,
            Place::Offsets { offset, roffset },
            What::Rdma { write: false, len },
            Token::Drawn(token_out),
        )
    }
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
        one_sided(
            "openib_fetch_add",
            t,
            peer,
            mem,
            remote,
            Place::Offsets { offset, roffset },
            What::Atomic(AtomicOp::FetchAdd { add }),
            Token::Drawn(token_out),
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
        one_sided(
            "openib_compare_swap",
            t,
            peer,
            mem,
            remote,
            Place::Offsets { offset, roffset },
            What::Atomic(AtomicOp::CompareSwap { compare, swap }),
            Token::Drawn(token_out),
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
        one_sided(
            "openib_put_addr",
            t,
            peer,
            local_mem,
            remote,
            Place::Addresses { local, remote_addr },
            What::Rdma { write: true, len },
            Token::Drawn(token_out),
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
        one_sided(
            "openib_get_addr",
            t,
            peer,
            local_mem,
            remote,
            Place::Addresses { local, remote_addr },
            What::Rdma { write: false, len },
            Token::Drawn(token_out),
        )
    }
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
        one_sided(
            "openib_fetch_add_addr",
            t,
            peer,
            local_mem,
            remote,
            Place::Addresses {
                local: local.cast_const(),
                remote_addr,
            },
            What::Atomic(AtomicOp::FetchAdd { add }),
            Token::Drawn(token_out),
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
        one_sided(
            "openib_compare_swap_addr",
            t,
            peer,
            local_mem,
            remote,
            Place::Addresses {
                local: local.cast_const(),
                remote_addr,
            },
            What::Atomic(AtomicOp::CompareSwap { compare, swap }),
            Token::Drawn(token_out),
        )
    }
}

/// `openib_put_addr` whose completion carries `token` (`OPENIB_CALLER_TOKEN` set) instead of
/// a token the transport draws: the caller finds its operation from the completion alone.
///
/// # Safety
/// As for `openib_put_addr` (no `token_out`).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn openib_put_addr_token(
    t: *mut openib_t,
    peer: u32,
    local: *const c_void,
    local_mem: *mut openib_mem_t,
    remote_addr: u64,
    remote: *const openib_remote_t,
    len: usize,
    token: u64,
) -> c_int {
    // SAFETY: the same contract.
    unsafe {
        one_sided(
            "openib_put_addr_token",
            t,
            peer,
            local_mem,
            remote,
            Place::Addresses { local, remote_addr },
            What::Rdma { write: true, len },
            Token::Given(token),
        )
    }
}

/// `openib_get_addr` whose completion carries `token` (see `openib_put_addr_token`).
///
/// # Safety
/// As for `openib_get_addr` (no `token_out`).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn openib_get_addr_token(
    t: *mut openib_t,
    peer: u32,
    local: *mut c_void,
    local_mem: *mut openib_mem_t,
    remote_addr: u64,
    remote: *const openib_remote_t,
    len: usize,
    token: u64,
) -> c_int {
    // SAFETY: the same contract.
    unsafe {
        one_sided(
            "openib_get_addr_token",
            t,
            peer,
            local_mem,
            remote,
            Place::Addresses {
                local: local.cast_const(),
                remote_addr,
            },
            What::Rdma { write: false, len },
            Token::Given(token),
        )
    }
}

/// `openib_fetch_add_addr` whose completion carries `token` (see `openib_put_addr_token`).
///
/// # Safety
/// As for `openib_fetch_add_addr` (no `token_out`).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn openib_fetch_add_addr_token(
    t: *mut openib_t,
    peer: u32,
    local: *mut c_void,
    local_mem: *mut openib_mem_t,
    remote_addr: u64,
    remote: *const openib_remote_t,
    add: u64,
    token: u64,
) -> c_int {
    // SAFETY: the same contract.
    unsafe {
        one_sided(
            "openib_fetch_add_addr_token",
            t,
            peer,
            local_mem,
            remote,
            Place::Addresses {
                local: local.cast_const(),
                remote_addr,
            },
            What::Atomic(AtomicOp::FetchAdd { add }),
            Token::Given(token),
        )
    }
}

/// `openib_compare_swap_addr` whose completion carries `token` (see `openib_put_addr_token`).
///
/// # Safety
/// As for `openib_compare_swap_addr` (no `token_out`).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn openib_compare_swap_addr_token(
    t: *mut openib_t,
    peer: u32,
    local: *mut c_void,
    local_mem: *mut openib_mem_t,
    remote_addr: u64,
    remote: *const openib_remote_t,
    compare: u64,
    swap: u64,
    token: u64,
) -> c_int {
    // SAFETY: the same contract.
    unsafe {
        one_sided(
            "openib_compare_swap_addr_token",
            t,
            peer,
            local_mem,
            remote,
            Place::Addresses {
                local: local.cast_const(),
                remote_addr,
            },
            What::Atomic(AtomicOp::CompareSwap { compare, swap }),
            Token::Given(token),
        )
    }
}
