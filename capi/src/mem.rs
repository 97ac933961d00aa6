//! Registered regions (`openib_mem_t`): memory the transport allocates and registers, and
//! memory the caller owns that it registers where it is.

use super::*;

/// Allocates and registers `len` zeroed bytes for put/get (8-byte aligned).
///
/// # Safety
/// `t` is NULL or a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn openib_mem_alloc(
    t: *mut openib_t,
    len: usize,
    out: *mut *mut openib_mem_t,
) -> c_int {
    call("openib_mem_alloc", || {
        // SAFETY: the caller's contract on `out` and `t`.
        unsafe { put_out(out, std::ptr::null_mut(), "out") }?;
        // SAFETY: as above.
        let h = unsafe { handle(t) }?;
        if len == 0 {
            return Err(Fail::new(OPENIB_ERR_INVALID, "len is 0"));
        }
        let mr = h.lock()?.t().register(len)?;
        let m = Box::new(openib_mem_t {
            owner: h.id,
            mr: Mr::Alloc(mr),
        });
        // SAFETY: as above.
        unsafe { put_out(out, Box::into_raw(m), "out") }?;
        Ok(OPENIB_OK)
    })
}

/// Registers `len` bytes at `ptr`, memory the caller owns, for local and remote access (remote
/// read, write and atomics) and writes the region to `*out` (NULL on failure). Releasing the
/// region (`openib_mem_free`) only deregisters: the memory stays the caller's.
///
/// # Safety
/// `t` is NULL or a live handle; `out` is NULL or writable; `ptr..ptr+len` is memory of this
/// process that stays allocated until the region is freed and every operation on it has
/// completed, and that peers and this process's gets and atomics may write meanwhile.
#[no_mangle]
pub unsafe extern "C" fn openib_mem_register(
    t: *mut openib_t,
    ptr: *mut c_void,
    len: usize,
    out: *mut *mut openib_mem_t,
) -> c_int {
    call("openib_mem_register", || {
        // SAFETY: the caller's contract on `out` and `t`.
        unsafe { put_out(out, std::ptr::null_mut(), "out") }?;
        // SAFETY: as above.
        let h = unsafe { handle(t) }?;
        if ptr.is_null() {
            return Err(null("ptr"));
        }
        if len == 0 {
            return Err(Fail::new(OPENIB_ERR_INVALID, "len is 0"));
        }
        if (ptr as usize).checked_add(len).is_none() {
            return Err(Fail::new(
                OPENIB_ERR_INVALID,
                format!("ptr {ptr:p} + len {len} wraps around the address space"),
            ));
        }
        let mut l = h.lock()?;
        // SAFETY: the caller's contract on `ptr..ptr+len` (allocated until the region and
        // the operations on it are gone; writable by the HCA meanwhile).
        let mr = unsafe {
            ForeignRegion::register_writable(l.t().protection_domain(), ptr.cast::<u8>(), len)
        }
        .map_err(TransportError::from)?;
        drop(l);
        let m = Box::new(openib_mem_t {
            owner: h.id,
            mr: Mr::Caller(Arc::new(mr)),
        });
        // SAFETY: as above.
        unsafe { put_out(out, Box::into_raw(m), "out") }?;
        Ok(OPENIB_OK)
    })
}

/// The region's memory (`openib_mem_len` bytes), or NULL for a NULL region.
///
/// # Safety
/// `mem` is NULL or a live region.
#[no_mangle]
pub unsafe extern "C" fn openib_mem_ptr(mem: *const openib_mem_t) -> *mut c_void {
    // SAFETY: the caller's contract on `mem`.
    match catch_unwind(|| unsafe { region(mem) }.map(|m| m.mr.addr())) {
        // The address of the region's buffer, which the HCA writes too; C owns its contents.
        Ok(Ok(addr)) => addr as usize as *mut c_void,
        _ => std::ptr::null_mut(),
    }
}

/// The region's length in bytes, or 0 for a NULL region.
///
/// # Safety
/// `mem` is NULL or a live region.
#[no_mangle]
pub unsafe extern "C" fn openib_mem_len(mem: *const openib_mem_t) -> usize {
    // SAFETY: the caller's contract on `mem`.
    match catch_unwind(|| unsafe { region(mem) }.map(|m| m.mr.len())) {
        Ok(Ok(n)) => n,
        _ => 0,
    }
}

/// Fills `out` with the region's remote handle, for a peer's put/get.
///
/// # Safety
/// `mem` is NULL or a live region; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn openib_mem_remote(
    mem: *const openib_mem_t,
    out: *mut openib_remote_t,
) -> c_int {
    call("openib_mem_remote", || {
        // SAFETY: the caller's contract on `mem` and `out`.
        let m = unsafe { region(mem) }?;
        let r = m.mr.remote();
        let v = openib_remote_t {
            addr: r.addr,
            rkey: r.rkey,
            reserved: 0,
            len: r.len,
        };
        // SAFETY: as above.
        unsafe { put_out(out, v, "out") }?;
        Ok(OPENIB_OK)
    })
}

/// Frees a region. Operations still in flight keep its registration until they complete (the
/// memory stays valid for the HCA), but their data is then unspecified. NULL is a no-op.
/// A region of `openib_mem_register` is only deregistered (when its last operation in flight
/// completes): its memory stays the caller's, to free after that.
///
/// # Safety
/// `mem` is NULL or a region from `openib_mem_alloc` or `openib_mem_register`, not freed
/// before and not used after.
#[no_mangle]
pub unsafe extern "C" fn openib_mem_free(mem: *mut openib_mem_t) -> c_int {
    call("openib_mem_free", || {
        if !mem.is_null() {
            // SAFETY: `mem` came from Box::into_raw in openib_mem_alloc or
            // openib_mem_register; not used after this.
            drop(unsafe { Box::from_raw(mem) });
        }
        Ok(OPENIB_OK)
    })
}
