//! Sends: copied, from a registered region, zero copy from the caller's bytes, inline.

use super::*;

/// Sends `len` bytes of `buf` with `tag` to `peer`, any size: eager up to the eager limit,
/// rendezvous above it (copied either way: `buf` may be reused at once).
///
/// # Safety
/// `t` is NULL or a live handle; `buf` is readable for `len` bytes (NULL when `len` is 0 is
/// allowed); `token_out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn openib_send(
    t: *mut openib_t,
    peer: u32,
    tag: u8,
    buf: *const c_void,
    len: usize,
    token_out: *mut u64,
) -> c_int {
    call("openib_send", || {
        // SAFETY: the caller's contract on `t` and `buf`.
        let (h, data) = unsafe { (handle(t)?, bytes(buf, len)?) };
        let token = h.lock()?.t().send(peer, tag, data)?;
        // SAFETY: the caller's contract on `token_out`.
        unsafe { put_opt(token_out, token) };
        Ok(OPENIB_OK)
    })
}

/// Sends `mem[offset..offset+len]` with `tag` to `peer`; above the eager limit without a copy
/// (the bytes go from the region by RDMA), so they must not change until the completion.
///
/// # Safety
/// `t` is NULL or a live handle, `mem` NULL or a live region of it, `token_out` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn openib_send_mem(
    t: *mut openib_t,
    peer: u32,
    tag: u8,
    mem: *mut openib_mem_t,
    offset: usize,
    len: usize,
    token_out: *mut u64,
) -> c_int {
    call("openib_send_mem", || {
        // SAFETY: the caller's contract on `t` and `mem`.
        let (h, m) = unsafe { (handle(t)?, region(mem)?) };
        owned_by(m, h)?;
        let mr = match &m.mr {
            Mr::Alloc(mr) => mr,
            Mr::Caller(c) => {
                // The caller's registered bytes: sent as openib_send_nocopy sends them.
                check_range_of(c.len(), offset, len)?;
                let at = (c.addr() as usize + offset) as *const c_void;
                // SAFETY: inside the caller's registered memory (checked), which the caller
                // keeps allocated and, for this send, unchanged until its completion.
                let data = unsafe { bytes(at, len) }?;
                // SAFETY: as above; the caller's contract on `token_out`.
                return unsafe { nocopy(h, peer, tag, data, token_out) };
            }
        };
        let token = h.lock()?.t().send_region(peer, tag, mr, offset, len)?;
        // SAFETY: the caller's contract on `token_out`.
        unsafe { put_opt(token_out, token) };
        Ok(OPENIB_OK)
    })
}

/// Sends `len` bytes of `buf` with `tag` to `peer` like [`openib_send`], but above the eager
/// limit without a copy: `buf` is registered for this transfer (deregistered when it ends) and
/// the peer takes the bytes by RDMA, so they must stay allocated and unchanged until the
/// completion. Up to the eager limit the bytes are copied before the call returns.
///
/// # Safety
/// `t` is NULL or a live handle; `buf` is readable for `len` bytes (NULL when `len` is 0 is
/// allowed) and, above the eager limit, stays allocated and unchanged until the completion of
/// the returned token; `token_out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn openib_send_nocopy(
    t: *mut openib_t,
    peer: u32,
    tag: u8,
    buf: *const c_void,
    len: usize,
    token_out: *mut u64,
) -> c_int {
    call("openib_send_nocopy", || {
        // SAFETY: the caller's contract on `t` and `buf`.
        let (h, data) = unsafe { (handle(t)?, bytes(buf, len)?) };
        // SAFETY: the caller's contract on `buf` and `token_out`.
        unsafe { nocopy(h, peer, tag, data, token_out) }
    })
}

/// The body of [`openib_send_nocopy`] (and of [`openib_send_mem`] on caller memory).
///
/// # Safety
/// `data` stays allocated and unchanged until the send's completion when it is above the
/// eager limit; `token_out` is NULL or writable.
unsafe fn nocopy(
    h: &openib_t,
    peer: u32,
    tag: u8,
    data: &[u8],
    token_out: *mut u64,
) -> Result<c_int, Fail> {
    let len = data.len();
    {
        let mut g = h.lock()?;
        let token = if len <= h.eager_limit {
            g.t().send(peer, tag, data)?
        } else {
            // SAFETY: the caller's contract: `buf` stays readable and unchanged until the
            // completion, and the transport drops the region when the transfer ends.
            let region =
                unsafe { ForeignRegion::register(g.t().protection_domain(), data.as_ptr(), len) }
                    .map_err(TransportError::from)?;
            g.t().send_foreign(peer, tag, region)?
        };
        // SAFETY: the caller's contract on `token_out`.
        unsafe { put_opt(token_out, token) };
        Ok(OPENIB_OK)
    }
}

/// Immediate send of at most the eager limit: posted now, or [`OPENIB_ERR_BUSY`] (not
/// connected yet, earlier operations queued, no credit or send slot). No token, no completion.
///
/// # Safety
/// `t` is NULL or a live handle; `buf` is readable for `len` bytes (NULL when `len` is 0 is
/// allowed).
#[no_mangle]
pub unsafe extern "C" fn openib_sendi(
    t: *mut openib_t,
    peer: u32,
    tag: u8,
    buf: *const c_void,
    len: usize,
) -> c_int {
    call("openib_sendi", || {
        // SAFETY: the caller's contract on `t` and `buf`.
        let (h, data) = unsafe { (handle(t)?, bytes(buf, len)?) };
        h.lock()?.t().sendi(peer, tag, data)?;
        Ok(OPENIB_OK)
    })
}
