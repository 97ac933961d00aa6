//! Regions the transport allocates and registers (`openib_mem_t`).

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
        let m = Box::new(openib_mem_t { owner: h.id, mr });
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
        let r = RemoteRegion::of(&m.mr);
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
///
/// # Safety
/// `mem` is NULL or a region from `openib_mem_alloc`, not freed before and not used after.
#[no_mangle]
pub unsafe extern "C" fn openib_mem_free(mem: *mut openib_mem_t) -> c_int {
    call("openib_mem_free", || {
        if !mem.is_null() {
            // SAFETY: `mem` came from Box::into_raw in openib_mem_alloc; not used after this.
            drop(unsafe { Box::from_raw(mem) });
        }
        Ok(OPENIB_OK)
    })
}
